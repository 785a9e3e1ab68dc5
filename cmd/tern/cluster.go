package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tern-mq/tern/internal/streamapi"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/monitor"
)

const clusterLong = `Shows a cluster as one of its nodes sees it, read from that node's monitoring
endpoint (GET /cluster): 'ls' its members, 'status' the node itself, its routes
and its replica of the meta group. The endpoint is --monitor, else
$TERN_MONITOR_URL, else the context's monitor, else port 7480 on the host of the
server the client commands use. 'evict' removes a node that is gone for good,
through any node (a server, as the client commands reach it). 'keygen' makes
the secret the nodes of a cluster share (cluster_secret_file). See
docs/cluster.md.`

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster <command>",
		Short: "Show the cluster a server belongs to (ls, status), evict a node that is gone, make a cluster secret (keygen)",
		Long:  clusterLong,
		Example: `  tern cluster ls                                # the node at http://127.0.0.1:7480
  tern cluster status --monitor 127.0.0.1:7490   # another node of a local cluster
  tern cluster ls --context prod --json          # the raw /cluster document
  tern cluster keygen -o /etc/tern/cluster.secret`,
		Args: groupArgs,
		RunE: showUsage,
	}
	cmd.AddCommand(newClusterListCmd(), newClusterStatusCmd(), newClusterEvictCmd(), newClusterKeygenCmd())
	return cmd
}

// ---------------------------------------------------------------------------------
// tern cluster evict

func newClusterEvictCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "evict <node> [options]",
		Short: "Remove a node that is gone from the cluster for good (its replicas move to other nodes)",
		Example: `  tern cluster evict n3                          # through the server at tern://127.0.0.1:7400
  tern cluster evict n3 --server tern://10.0.0.2:7400`,
		Args: argsBetween(1, 1, "want the name of the node to evict"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), max(cf.timeout, 15*time.Second))
			defer cancel()
			msg, err := nc.Request(ctx, streamapi.ClusterEvictSubject(args[0]), nil)
			if err != nil {
				return fmt.Errorf("evict %s: %w", args[0], err)
			}
			var resp streamapi.Response[streamapi.ClusterEvicted]
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return fmt.Errorf("evict %s: answer: %w", args[0], err)
			}
			if resp.Error != nil {
				return fmt.Errorf("evict %s: %s", args[0], resp.Error.Description)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Node %s evicted\n", args[0])
			return nil
		},
	}
	cf.register(cmd, "tern-cluster")
	return cmd
}

// withCluster makes the RunE of a command that shows /cluster: with --json it
// prints the document as the node served it, else it hands the decoded one to fn.
func withCluster(mf *monitorFlags, asJSON *bool, fn func(out io.Writer, st *cluster.Status) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		body, err := mf.get(cmd.Context(), "/cluster")
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			_, err := out.Write(body)
			return err
		}
		var st cluster.Status
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("%s/cluster: %w", mf.url, err)
		}
		return fn(out, &st)
	}
}

// ---------------------------------------------------------------------------------
// tern cluster ls

func newClusterListCmd() *cobra.Command {
	var (
		mf     monitorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls [options]",
		Aliases: []string{"list"},
		Short:   "List the cluster's members: state, route address, version, round trip, interest",
		Args:    argsBetween(0, 0, ""),
		RunE:    withCluster(&mf, &asJSON, printMembers),
	}
	mf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node's /cluster document as it is")
	return cmd
}

// printMembers lists the members the node knows and the nodes it has routes to
// (the same nodes but for a moment when one joins or goes), the node itself
// marked with *. A member without a route, or whose route is excluded, is what to
// look into: the two nodes see each other through gossip but exchange no messages.
func printMembers(out io.Writer, st *cluster.Status) error {
	routes := make(map[string]route.Info, len(st.Routes))
	for _, r := range st.Routes {
		routes[r.Node] = r
	}
	fmt.Fprintf(out, "Cluster %s: %d %s, %d %s, as node %s sees it\n", st.Cluster,
		len(st.Members), plural(uint64(len(st.Members)), "member", "members"),
		len(st.Routes), plural(uint64(len(st.Routes)), "route", "routes"), st.Node)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSTATE\tROUTE ADDRESS\tVERSION\tRTT\tINTEREST")
	seen := make(map[string]bool, len(st.Members))
	for _, m := range st.Members {
		seen[m.Name] = true
		r, up := routes[m.Name]
		switch {
		case m.Name == st.Node:
			fmt.Fprintf(tw, "* %s\t%s\t%s\t%s\t-\t%d\n", m.Name, m.State, m.RouteAddr, m.Version, st.Interest)
		case up:
			state := m.State
			if r.Excluded {
				state += ", excluded"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\n", m.Name, state, m.RouteAddr, m.Version, fmtRTT(r.RTT), r.Interest)
		default:
			fmt.Fprintf(tw, "  %s\t%s, no route\t%s\t%s\t-\t-\n", m.Name, m.State, m.RouteAddr, m.Version)
		}
	}
	for _, r := range st.Routes {
		if !seen[r.Node] {
			fmt.Fprintf(tw, "  %s\troute only\t%s\t%s\t%s\t%d\n", r.Node, r.Addr, r.PeerVersion, fmtRTT(r.RTT), r.Interest)
		}
	}
	return tw.Flush()
}

// ---------------------------------------------------------------------------------
// tern cluster status

func newClusterStatusCmd() *cobra.Command {
	var (
		mf     monitorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status [options]",
		Short: "Show this node of the cluster and its routes: round trip, traffic, pending, unacknowledged, interest",
		Args:  argsBetween(0, 0, ""),
		RunE:  withCluster(&mf, &asJSON, printClusterStatus),
	}
	mf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node's /cluster document as it is")
	return cmd
}

func printClusterStatus(out io.Writer, st *cluster.Status) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster %s, node %s (id %s)\n", st.Cluster, st.Node, st.NodeID)
	fmt.Fprintf(tw, "  route address:\t%s\n", st.RouteAddr)
	fmt.Fprintf(tw, "  gossip address:\t%s\n", st.Gossip)
	fmt.Fprintf(tw, "  members:\t%d\n", len(st.Members))
	fmt.Fprintf(tw, "  routes:\t%d up\n", len(st.Routes))
	fmt.Fprintf(tw, "  local interest:\t%d %s\n", st.Interest, plural(uint64(st.Interest), "entry", "entries"))
	if m := st.Meta; m != nil {
		switch {
		case !m.Running:
			fmt.Fprintf(tw, "  meta group:\tnot formed yet (raft id %s)\n", m.RaftID)
		case m.Error != "":
			fmt.Fprintf(tw, "  meta group:\t%s (raft id %s)\n", m.Error, m.RaftID)
		default:
			role := strings.ToLower(m.Role)
			switch {
			case m.Role == "Leader":
				role = "leader (this node)"
			case m.Leader != "":
				role += ", leader " + m.Leader
			default:
				role += ", no leader"
			}
			fmt.Fprintf(tw, "  meta group:\t%s, term %d, applied %d of %d committed (raft id %s)\n",
				role, m.Term, m.Applied, m.Commit, m.RaftID)
			fmt.Fprintf(tw, "  meta voters:\t%s\n", strings.Join(m.Voters, " "))
			if len(m.Learners) > 0 {
				fmt.Fprintf(tw, "  meta learners:\t%s\n", strings.Join(m.Learners, " "))
			}
			for _, r := range m.Replicas {
				learner := ""
				if r.Learner {
					learner = ", learner"
				}
				fmt.Fprintf(tw, "  replica %s:\tmatch %d, lag %d, %s%s\n", r.Node, r.Match, r.Lag, r.State, learner)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Routes) == 0 {
		fmt.Fprintln(out, "\nNo routes (no other node, or none reached yet)")
		return nil
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tDIR\tREMOTE\tUP FOR\tRTT\tMSGS IN\tBYTES IN\tMSGS OUT\tBYTES OUT\tDROPPED\tPENDING\tUNACKED\tINTEREST")
	for _, r := range st.Routes {
		state, dir := "up", "in"
		if r.Excluded {
			state = "excluded"
		}
		if r.Dialed {
			dir = "out"
		}
		upFor := "-"
		if !r.Since.IsZero() {
			upFor = monitor.FormatUptime(time.Since(r.Since))
		}
		// Dropped either way, the operator's question is the same: what did the node miss.
		dropped := r.Dropped + r.ExcludedDrops
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%d\t%d\n", r.Node, state, dir, r.Addr,
			upFor, fmtRTT(r.RTT), r.InMsgs, humanBytes(r.InBytes), r.OutMsgs,
			humanBytes(r.OutBytes), dropped, humanBytes(uint64(max(r.PendingOut, 0))), r.Unacked, r.Interest)
	}
	return tw.Flush()
}

// fmtRTT shows a round trip to three significant digits or so; "-" before the
// first is measured.
func fmtRTT(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
