package server

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/cluster/streams"
	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
)

// startCluster makes the server a cluster node: its listeners are bound, so the
// client URLs other nodes pass on to clients are known.
func (s *Server) startCluster() error {
	var join []string
	for _, j := range strings.Split(s.cfg.Join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			join = append(join, j)
		}
	}
	policy, err := store.ParseSyncPolicy(s.cfg.Sync)
	if err != nil {
		return err
	}
	syncAlways := policy == store.SyncAlways
	ccfg := cluster.Config{
		NodeName: s.cfg.ServerName, Cluster: s.cfg.ClusterName, Host: s.cfg.Host,
		RoutePort: s.cfg.ClusterPort, GossipPort: s.cfg.GossipPort, Advertise: s.cfg.ClusterAdvertise,
		Join: join, ClientURLs: s.clientURLs(), Version: Version, Broker: s.broker,
		Interest: s.interest, Secret: s.clusterSecret, Logger: s.log,
		TLS: s.clusterTLS, TLSAnyName: !s.cfg.ClusterTLSVerifyNames,
		Membership: membership.Config{ProbeInterval: s.cfg.ClusterProbeInterval, ProbeTimeout: s.cfg.ClusterProbeTimeout,
			SuspicionMult: s.cfg.ClusterSuspicionMult},
		DataDir: s.cfg.StoreDir, ClusterSize: s.cfg.ClusterSize, OpenStorage: s.openRaftStorage,
		Replica: replica.Config{SnapshotEntries: uint64(s.cfg.RaftSnapshotEntries),
			CompactionOverhead: uint64(s.cfg.RaftSnapshotEntries / 2),
			// With an fsync per iteration (sync = always), a leader's fsync
			// overlaps its followers' instead of preceding them.
			SendBeforeSync: syncAlways},
	}
	if s.mqttState != nil {
		ccfg.MQTTState = s.mqttState
	}
	node, err := cluster.Start(ccfg)
	if err != nil {
		return err
	}
	if s.mqtt != nil {
		// MQTT clients are recorded in the meta group's registry, so that a client
		// id connecting here closes its connection on another node.
		if reg := node.ClientRegistry(s.mqtt.ClaimedElsewhere); reg != nil {
			s.mqtt.SetRegistry(reg)
		}
		// Persistent sessions and retained messages live in the MQTT group.
		if s.mqttState != nil && node.Replicating() {
			s.mqtt.SetReplication(s.mqttState, node, s.cfg.ServerName)
		}
	}
	var replicated *streams.Service
	if s.streams != nil && node.Replicating() {
		replicated, err = streams.Start(streams.Config{Node: node, Streams: s.streams, Broker: s.broker,
			DefaultReplicas: s.cfg.StreamReplicas, Log: s.log})
		if err != nil {
			node.Shutdown(time.Second)
			return err
		}
		if s.kafka != nil {
			// Topics are the cluster's streams, served by their leaders.
			s.kafka.SetCluster(&kafkaCluster{s: s, node: node, leaders: map[string]cachedLeader{}, topics: map[string]cachedTopic{}})
		}
	}
	var usage *usageExchange
	if s.cfg.UsersFile != "" {
		// Accounts' connection and subscription limits hold across the cluster.
		if usage, err = startUsageExchange(s.cfg.ServerName, s.broker, s.auth); err != nil {
			if replicated != nil {
				replicated.Stop()
			}
			node.Shutdown(time.Second)
			return err
		}
	}
	changed, stop := node.WatchClientURLs()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range changed {
			s.native.ConnectURLsChanged()
		}
	}()
	adoptDone, adoptStop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(adoptDone)
		if s.mqtt == nil || s.mqttState == nil {
			return
		}
		// Sessions no node hosts are taken: this node's own after a restart,
		// and, on the MQTT group's leader, those of nodes that are gone, so
		// that they expire and take their messages until their clients return.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-adoptStop:
				return
			case <-t.C:
				s.mqtt.AdoptOrphans(node.LeadsMQTT(), node.Alive)
			}
		}
	}()
	s.mu.Lock()
	s.cluster = node
	s.replicated = replicated
	s.usage = usage
	var stopOnce sync.Once
	s.stopURLWatch = func() {
		stopOnce.Do(func() {
			stop()
			<-done
			close(adoptStop)
			<-adoptDone
		})
	}
	s.mu.Unlock()
	// Routes that came up while the node joined, before the watch began.
	s.native.ConnectURLsChanged()
	return nil
}

// connectURLs is the native clients' connect_urls: the native URLs of this node and
// of every node it has a route to.
func (s *Server) connectURLs() []string {
	node := s.ClusterNode()
	if node == nil {
		return nil
	}
	var out []string
	for _, u := range node.ClientURLs() {
		if strings.HasPrefix(u, "tern://") && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// checkClusterTiming refuses failure-detection settings membership could not use,
// naming the options rather than membership's fields.
func checkClusterTiming(cfg Config) error {
	switch {
	case cfg.ClusterProbeInterval <= 0:
		return &OptionError{Key: "cluster_probe_interval", Err: fmt.Errorf("%v: want a positive duration", cfg.ClusterProbeInterval)}
	case cfg.ClusterProbeTimeout <= 0:
		return &OptionError{Key: "cluster_probe_timeout", Err: fmt.Errorf("%v: want a positive duration", cfg.ClusterProbeTimeout)}
	case cfg.ClusterProbeTimeout >= cfg.ClusterProbeInterval:
		// memberlist gives the indirect probes what is left of the interval.
		return &OptionError{Key: "cluster_probe_timeout", Err: fmt.Errorf("%v: want less than cluster_probe_interval (%v)",
			cfg.ClusterProbeTimeout, cfg.ClusterProbeInterval)}
	case cfg.ClusterSuspicionMult < 1:
		return &OptionError{Key: "cluster_suspicion_mult", Err: fmt.Errorf("%d: want at least 1", cfg.ClusterSuspicionMult)}
	}
	return nil
}

// clientURLs are the URLs clients of other nodes may move to: native ("tern://",
// and "tls://" over TLS), and the Kafka API ("kafka://", "kafka+tls://"), which
// other nodes list as a broker in Metadata.
func (s *Server) clientURLs() []string {
	var urls []string
	for _, n := range []struct {
		scheme string
		addr   net.Addr
	}{{"tern://", s.Addr()}, {"tls://", s.TLSAddr()}} {
		a, ok := n.addr.(*net.TCPAddr)
		if !ok {
			continue
		}
		host := s.cfg.ClusterAdvertise
		if host == "" && !a.IP.IsUnspecified() {
			host = a.IP.String()
		}
		if host != "" { // bound to every interface with nothing advertised: no address to give
			urls = append(urls, n.scheme+net.JoinHostPort(host, strconv.Itoa(a.Port)))
		}
	}
	for _, secure := range []bool{false, true} {
		if u := s.kafkaURL(secure); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// Cluster implements monitor.ClusterSource.
func (s *Server) Cluster() any {
	node := s.ClusterNode()
	if node == nil {
		return nil
	}
	return node.Status()
}

// ClusterStats implements monitor.ClusterSource.
func (s *Server) ClusterStats() *monitor.ClusterStats {
	node := s.ClusterNode()
	if node == nil {
		return nil
	}
	st := node.Status()
	out := &monitor.ClusterStats{Members: len(st.Members), LocalInterest: st.Interest,
		RouteAuthFailures: st.RouteAuthFailures, Routes: make([]monitor.RouteStats, 0, len(st.Routes))}
	for _, r := range st.Routes {
		out.Routes = append(out.Routes, monitor.RouteStats{Node: r.Node, RTT: r.RTT, InMsgs: r.InMsgs, InBytes: r.InBytes,
			OutMsgs: r.OutMsgs, OutBytes: r.OutBytes, DroppedMsgs: r.Dropped, PendingBytes: r.PendingOut,
			Unacked: r.Unacked, Interest: r.Interest, Excluded: r.Excluded, Exclusions: r.Exclusions,
			ExcludedDrops: r.ExcludedDrops})
	}
	return out
}

// ClusterNode is the running cluster node, nil when the server runs alone.
func (s *Server) ClusterNode() *cluster.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cluster
}
