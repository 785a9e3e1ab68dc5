package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/bench/internal/stats"
)

// interestConfig is one interest-scale run: Subs distinct subscriptions made on node 1
// while every other node's monitoring is watched until it holds all of them.
type interestConfig struct {
	URLs     []string // client URLs, node order
	Monitors []string // monitoring base URLs, node order
	PIDs     []int    // server processes, node order (0: unknown, no memory figure)
	Subs     int
	// Workers subscribe concurrently on the one connection (a client that waits for
	// each subscription's acknowledgement still keeps this many in flight).
	Workers int
	// Settle is the pause after the last node has them all, before reading memory
	// again, so that allocations trailing the last entry are counted.
	Settle  time.Duration
	Timeout time.Duration
	Poll    time.Duration
}

// nodeInterest is one node's figures in an interest-scale run.
type nodeInterest struct {
	Node string `json:"node"`
	// SeenMs: from the first subscribe until the node held every entry (0 on node 1).
	SeenMs    float64 `json:"seen_ms,omitempty"`
	RSSBefore int64   `json:"rss_before_bytes,omitempty"`
	RSSAfter  int64   `json:"rss_after_bytes,omitempty"`
	// BytesPerEntry is the RSS growth over Subs: per remote interest entry on a peer,
	// per local subscription on node 1.
	BytesPerEntry float64 `json:"bytes_per_entry,omitempty"`
}

// interestResult is one interest-scale run.
type interestResult struct {
	System  string `json:"system"`
	Version string `json:"version"`
	Nodes   int    `json:"nodes"`
	Subs    int    `json:"subs"`
	// SubscribedMs: the client had made every subscription and a flush returned.
	SubscribedMs float64 `json:"subscribed_ms"`
	// AllSeenMs: every other node held all the entries, from the first subscribe.
	AllSeenMs float64 `json:"all_seen_ms"`
	// LagMs is AllSeenMs - SubscribedMs: propagation beyond node 1's own work
	// (negative when the peers were done before the client's flush returned).
	LagMs float64 `json:"lag_ms"`
	// PeerBytesPerEntry is the median over the other nodes of their RSS growth per
	// remote interest entry; LocalBytesPerSub node 1's RSS growth per subscription.
	PeerBytesPerEntry float64        `json:"peer_bytes_per_entry,omitempty"`
	LocalBytesPerSub  float64        `json:"local_bytes_per_sub,omitempty"`
	PerNode           []nodeInterest `json:"per_node"`
	Error             string         `json:"error,omitempty"`
}

// readRSS returns VmRSS of /proc/<pid>/status in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

// parseVmRSS reads the VmRSS line of a /proc/<pid>/status ("VmRSS:    1234 kB").
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS: unexpected %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS line")
}

// rssAll reads the RSS of every pid (0 where the pid is 0).
func rssAll(pids []int) ([]int64, error) {
	out := make([]int64, len(pids))
	for i, p := range pids {
		if p == 0 {
			continue
		}
		v, err := readRSS(p)
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", p, err)
		}
		out[i] = v
	}
	return out, nil
}

func runInterest(ctx context.Context, k *kind, cfg interestConfig) (interestResult, error) {
	n := len(cfg.URLs)
	res := interestResult{System: k.Key, Nodes: n, Subs: cfg.Subs}
	if n < 2 || len(cfg.Monitors) != n || cfg.Subs <= 0 || (len(cfg.PIDs) != 0 && len(cfg.PIDs) != n) {
		return res, fmt.Errorf("interest needs 2 or more nodes with a URL and a monitoring URL each (and a pid each, if any), and a subscription count (%d URLs, %d monitors, %d pids, %d subs)",
			n, len(cfg.Monitors), len(cfg.PIDs), cfg.Subs)
	}
	pids := cfg.PIDs
	if len(pids) == 0 {
		pids = make([]int, n)
	}
	mon := newMonitor(k)
	vs, err := mon.waitMesh(ctx, cfg.Monitors, 30*time.Second)
	if err != nil {
		return res, err
	}
	origin := vs[0].Name
	base := make([]int, n) // entries each peer already held from node 1
	for i, v := range vs {
		base[i] = v.Routes[origin]
		res.PerNode = append(res.PerNode, nodeInterest{Node: v.Name})
	}

	bus, version, err := k.dial(cfg.URLs[0], "interest-subs")
	if err != nil {
		return res, fmt.Errorf("connect to node 1: %w", err)
	}
	defer bus.Close()
	res.Version = version
	before, err := rssAll(pids)
	if err != nil {
		return res, err
	}

	prefix := "interest." + randomSuffix() + "."
	noop := func([]byte) {}
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	seen := make(chan []time.Duration, 1)
	go func() { seen <- watchInterest(wctx, mon, cfg.Monitors, origin, base, cfg.Subs, start, cfg.Poll) }()

	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, max(cfg.Workers, 1))
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Subs) || wctx.Err() != nil {
					return
				}
				if _, err := bus.Subscribe(prefix+strconv.FormatInt(i, 10), noop); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		cancel()
		<-seen
		return res, fmt.Errorf("subscribe: %w", err)
	}
	if err := bus.Flush(); err != nil {
		cancel()
		<-seen
		return res, fmt.Errorf("flush: %w", err)
	}
	res.SubscribedMs = ms(time.Since(start))

	at := <-seen
	var missing []string
	for i := 1; i < n; i++ {
		if at[i] == 0 {
			missing = append(missing, res.PerNode[i].Node)
			continue
		}
		res.PerNode[i].SeenMs = ms(at[i])
		res.AllSeenMs = max(res.AllSeenMs, ms(at[i]))
	}
	if len(missing) > 0 {
		res.Error = fmt.Sprintf("%s did not hold all %d entries within %s", strings.Join(missing, ", "), cfg.Subs, cfg.Timeout)
		return res, nil
	}
	res.LagMs = res.AllSeenMs - res.SubscribedMs

	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.Settle):
	}
	after, err := rssAll(pids)
	if err != nil {
		return res, err
	}
	var peer []float64
	for i := range n {
		if pids[i] == 0 {
			continue
		}
		ni := &res.PerNode[i]
		ni.RSSBefore, ni.RSSAfter = before[i], after[i]
		ni.BytesPerEntry = float64(after[i]-before[i]) / float64(cfg.Subs)
		if i == 0 {
			res.LocalBytesPerSub = ni.BytesPerEntry
		} else {
			peer = append(peer, ni.BytesPerEntry)
		}
	}
	res.PeerBytesPerEntry = stats.SpreadOf(peer).Median
	return res, nil
}

// watchInterest polls every node but the first until each holds base[i]+subs entries
// from origin, returning for each the time since start it did (0: not before ctx
// ended; index 0 is unused).
func watchInterest(ctx context.Context, mon *monitor, monitors []string, origin string, base []int, subs int, start time.Time, poll time.Duration) []time.Duration {
	at := make([]time.Duration, len(monitors))
	for {
		done := true
		for i := 1; i < len(monitors); i++ {
			if at[i] > 0 {
				continue
			}
			v, err := mon.view(ctx, monitors[i])
			if err == nil && v.Routes[origin] >= base[i]+subs {
				at[i] = time.Since(start)
				continue
			}
			done = false
		}
		if done {
			return at
		}
		select {
		case <-ctx.Done():
			return at
		case <-time.After(poll):
		}
	}
}
