// Command clustervs measures what the cluster benchmark's workload table
// (natsvs --cluster) does not: how a cluster recovers when a node is killed, and how
// far interest (subscriptions) scales across nodes, for NATS and Tern alike. The
// clusters must be running; bench/cluster.sh starts them and calls this program.
//
//	clustervs mesh      wait until every node has a route to every other
//	clustervs recovery  one kill -9 of a node under a subscriber; appends a JSON line
//	clustervs interest  one interest-scale run; appends a JSON line
//	clustervs report    medians of the recorded runs, as Markdown and JSON
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/records"
)

func main() { harness.Main("clustervs", run) }

const usage = `Usage: clustervs mesh|recovery|interest|report [options]

  mesh       wait until the nodes are fully meshed (every node has a route to
             every other; Tern: and sees every other as an alive member)
  recovery   a subscriber connected to the victim node (given every node's URL),
             a publisher on node 1 at a fixed rate; kill -9 the victim and measure
             until the subscriber receives again through another node and until
             the surviving nodes notice; appends one JSON line to --out
  interest   make --subs distinct subscriptions on node 1 and measure until every
             other node holds them all, and the servers' RSS growth per entry;
             appends one JSON line to --out
  report     summarize the recorded runs (median, min–max) as Markdown on stdout
             and optionally JSON

"clustervs COMMAND --help" lists a command's options. bench/cluster.sh starts the
clusters and runs these.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return harness.Dispatch(ctx, args, stdout, stderr, usage, map[string]harness.Func{
		"mesh":     cmdMesh,
		"recovery": cmdRecovery,
		"interest": cmdInterest,
		"report":   cmdReport,
	})
}

// common are the options every measuring command takes.
type common struct {
	fs        *flag.FlagSet
	system    *string
	urls      *string
	monitors  *string
	quietWait *time.Duration
	quietBusy *float64
}

func newCommon(name, what string, stderr io.Writer) *common {
	fs := flag.NewFlagSet("clustervs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{fs: fs}
	c.system = fs.String("system", "", "nats or tern")
	c.monitors = fs.String("monitor", "", "monitoring base URLs (http://host:port), one per node in node order, comma-separated")
	if name != "mesh" {
		c.urls = fs.String("urls", "", "client URLs, one per node in node order, comma-separated")
		c.quietWait = fs.Duration("quiet-wait", 30*time.Second, "first wait up to this long for the machine's other CPU use to drop below --quiet-busy (0 = do not wait)")
		c.quietBusy = fs.Float64("quiet-busy", 0.25, "share of all CPUs busy (0–1) below which the machine counts as quiet")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: clustervs %s [options]\n\n%s\n\nOptions:\n", name, what)
		fs.PrintDefaults()
	}
	return c
}

func (c *common) parse(args []string) (*kind, []string, []string, error) {
	if err := c.fs.Parse(args); err != nil {
		return nil, nil, nil, err
	}
	if c.fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("unexpected arguments %q", c.fs.Args())
	}
	k, err := kindOf(*c.system)
	if err != nil {
		return nil, nil, nil, err
	}
	var urls []string
	if c.urls != nil {
		urls = harness.SplitList(*c.urls)
	}
	return k, urls, harness.SplitList(*c.monitors), nil
}

// waitQuiet waits for a quiet machine before a measurement and says so if it is not.
func (c *common) waitQuiet(ctx context.Context, stderr io.Writer) bool {
	return host.WaitQuietOrNote(ctx, *c.quietWait, *c.quietBusy, stderr)
}

func cmdMesh(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("mesh", "Waits until every node has a route to every other (Tern: and lists every other as an\nalive member), reading each node's monitoring (NATS /routez, Tern /cluster).", stderr)
	timeout := c.fs.Duration("timeout", 30*time.Second, "give up after this long")
	k, _, monitors, err := c.parse(args)
	if err != nil {
		return err
	}
	if len(monitors) < 2 {
		return errors.New("--monitor needs two or more nodes")
	}
	start := time.Now()
	vs, err := newMonitor(k).waitMesh(ctx, monitors, *timeout)
	if err != nil {
		return fmt.Errorf("%s: %w", k.Name, err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	fmt.Fprintf(stdout, "%s: %d nodes fully meshed (%s) after %s\n", k.Name, len(vs), strings.Join(names, ", "), time.Since(start).Round(time.Millisecond))
	return nil
}

func cmdRecovery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("recovery", "One recovery run: a subscriber on the victim node, given every node's URL with the\nvictim's first; a publisher on node 1; kill -9 the victim (--kill-pid) and measure.", stderr)
	victim := c.fs.Int("victim", 0, "node number (from 1) of the victim (default the last)")
	killPID := c.fs.Int("kill-pid", 0, "pid of the victim's server process, killed with SIGKILL")
	rate := c.fs.Int("rate", 2000, "messages per second the publisher sends (the resolution of the measurement is 1/rate)")
	wait := c.fs.Duration("reconnect-wait", time.Millisecond, "the subscriber client's reconnect delay, the same for both clients (see bench/README.md)")
	settle := c.fs.Duration("settle", time.Second, "how long the subscriber receives before the kill")
	timeout := c.fs.Duration("timeout", 30*time.Second, "give up this long after the kill")
	poll := c.fs.Duration("poll", 5*time.Millisecond, "interval at which the surviving nodes' monitoring is read")
	out := c.fs.String("out", "", "append the run's result as one JSON line to this file")
	k, urls, monitors, err := c.parse(args)
	if err != nil {
		return err
	}
	if *killPID <= 0 {
		return errors.New("--kill-pid is required")
	}
	if err := syscall.Kill(*killPID, 0); err != nil {
		return fmt.Errorf("--kill-pid %d: %w", *killPID, err)
	}
	v := len(urls) - 1
	if *victim > 0 {
		v = *victim - 1
	}
	busy := c.waitQuiet(ctx, stderr)
	res, err := runRecovery(ctx, k, recoveryConfig{
		URLs: urls, Monitors: monitors, Victim: v, Rate: *rate, ReconnectWait: *wait,
		Settle: *settle, Timeout: *timeout, Poll: *poll,
		Kill: func() error { return syscall.Kill(*killPID, syscall.SIGKILL) },
	})
	if err != nil {
		return fmt.Errorf("%s recovery: %w", k.Name, err)
	}
	if busy && res.Error == "" {
		fmt.Fprintln(stderr, "note: this run started on a busy machine")
	}
	fmt.Fprintf(stderr, "%s: killed %s; subscriber receiving again after %s ms (client reconnected after %s ms, to %s), %d lost; routes gone after %s ms%s%s\n",
		k.Name, res.Victim, formatMs(res.ResumedMs), formatMs(res.ReconnectedMs), res.ReconnectedTo, res.Lost, formatMs(res.RoutesGoneMs),
		memberNote(res.MemberGoneMs), errNote(res.Error))
	if *out != "" {
		return records.Append(*out, res)
	}
	return json.NewEncoder(stdout).Encode(res)
}

func cmdInterest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("interest", "One interest-scale run: --subs distinct subscriptions on node 1; until every other node\nholds them all (its monitoring's interest count from node 1), and the RSS growth\nper entry of each server (--pids).", stderr)
	pidList := c.fs.String("pids", "", "server pids, one per node in node order, comma-separated (for the RSS figures)")
	subs := c.fs.Int("subs", 100_000, "distinct subscriptions made on node 1")
	scale := c.fs.Float64("scale", 1, "multiply --subs (0.05 for a quick look)")
	workers := c.fs.Int("workers", 64, "subscriptions in flight at once on the one connection")
	settle := c.fs.Duration("settle", time.Second, "pause after every node holds them all, before reading RSS again")
	timeout := c.fs.Duration("timeout", 5*time.Minute, "give up after this long")
	poll := c.fs.Duration("poll", 10*time.Millisecond, "interval at which the other nodes' monitoring is read")
	out := c.fs.String("out", "", "append the run's result as one JSON line to this file")
	k, urls, monitors, err := c.parse(args)
	if err != nil {
		return err
	}
	pids, err := harness.ParsePIDs(*pidList)
	if err != nil {
		return err
	}
	if *scale <= 0 {
		return errors.New("--scale must be positive")
	}
	n := max(1, int(float64(*subs)**scale))
	c.waitQuiet(ctx, stderr)
	res, err := runInterest(ctx, k, interestConfig{URLs: urls, Monitors: monitors, PIDs: pids, Subs: n, Workers: *workers,
		Settle: *settle, Timeout: *timeout, Poll: *poll})
	if err != nil {
		return fmt.Errorf("%s interest: %w", k.Name, err)
	}
	fmt.Fprintf(stderr, "%s: %d subscriptions made in %s ms, on all %d other nodes after %s ms; %.0f B per remote entry, %.0f B per local subscription%s\n",
		k.Name, res.Subs, formatMs(res.SubscribedMs), res.Nodes-1, formatMs(res.AllSeenMs), res.PeerBytesPerEntry, res.LocalBytesPerSub, errNote(res.Error))
	if *out != "" {
		return records.Append(*out, res)
	}
	return json.NewEncoder(stdout).Encode(res)
}

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clustervs report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	recovery := fs.String("recovery", "", "file of recovery runs (JSON lines)")
	interest := fs.String("interest", "", "file of interest runs (JSON lines)")
	jsonPath := fs.String("json", "", "also write the summary and every run as JSON to this file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: clustervs report [options]\n\nSummarizes recorded recovery and interest runs: Markdown on stdout.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *recovery == "" && *interest == "" {
		return errors.New("nothing to report: give --recovery, --interest or both")
	}
	rep := &clusterReport{Date: time.Now().UTC().Format(time.RFC3339), Machine: host.Info()}
	if *recovery != "" {
		recs, err := readRecords(*recovery)
		if err != nil {
			return err
		}
		rep.Recovery = summarize(recs, recoveryMetrics)
	}
	if *interest != "" {
		recs, err := readRecords(*interest)
		if err != nil {
			return err
		}
		rep.Interest = summarize(recs, interestMetrics)
	}
	writeReport(stdout, rep)
	if *jsonPath != "" {
		return records.WriteJSON(*jsonPath, rep)
	}
	return nil
}

func formatMs(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func memberNote(v float64) string {
	if v == 0 {
		return ""
	}
	return ", member gone after " + formatMs(v) + " ms"
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return "; FAILED: " + e
}
