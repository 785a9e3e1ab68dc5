package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/bench/internal/host"
)

// idleConfig is one idle-groups run against a running cluster: CPU and memory of
// its nodes with no stream (Baseline), then Streams streams of Replicas replicas are
// made and, once every one is led with all replicas current and Settle has passed,
// the same over Window of idleness.
type idleConfig struct {
	System      system
	URLs        []string
	Names       []string
	PIDs        []int
	Run         int
	Streams     int
	Replicas    int
	Concurrency int
	// CreateTimeout bounds making the streams, LedTimeout waiting until all are led.
	CreateTimeout, LedTimeout time.Duration
	Baseline, Settle, Window  time.Duration
	// Slice is the length of the sub-windows whose CPU use is also reported (min and
	// max), to show whether the use is steady.
	Slice  time.Duration
	ClkTck int
	Log    io.Writer
}

// nodeUsage is one node's use of the machine over a window.
type nodeUsage struct {
	Node string `json:"node"`
	PID  int    `json:"pid"`
	// CPUPct is user+system CPU time over the window, in % of one core.
	CPUPct      float64 `json:"cpu_pct"`
	SliceMinPct float64 `json:"slice_min_pct"`
	SliceMaxPct float64 `json:"slice_max_pct"`
	// RSSMiB is VmRSS at the end of the window, HWMMiB the process's peak (VmHWM).
	RSSMiB  float64 `json:"rss_mib"`
	HWMMiB  float64 `json:"hwm_mib"`
	Threads int     `json:"threads"`
}

// usage is the nodes' use over one window.
type usage struct {
	WindowS     float64     `json:"window_s"`
	Nodes       []nodeUsage `json:"nodes"`
	TotalCPUPct float64     `json:"total_cpu_pct"`
	TotalRSSMiB float64     `json:"total_rss_mib"`
	// OtherCPUPct is what the rest of the machine used meanwhile (every CPU's busy
	// time minus the nodes'), in % of one core: the harness sleeps, so this is other
	// processes.
	OtherCPUPct float64 `json:"other_cpu_pct"`
}

type idleResult struct {
	System   string `json:"system"`
	Version  string `json:"version"`
	Run      int    `json:"run"`
	Streams  int    `json:"streams"`
	Replicas int    `json:"replicas"`
	// CreateS: first create request to the last one answered; LedS: first create
	// request until every stream has a leader and all its replicas current.
	CreateS float64 `json:"create_s"`
	LedS    float64 `json:"led_s"`
	// CreateErrors counts create requests that failed (and were retried), by kind.
	CreateErrors map[string]int `json:"create_errors,omitempty"`
	SettleS      float64        `json:"settle_s"`
	Baseline     *usage         `json:"baseline,omitempty"`
	Idle         *usage         `json:"idle,omitempty"`
	Error        string         `json:"error,omitempty"`
}

// procSample is a process's CPU time (clock ticks) and memory at one moment.
type procSample struct {
	ticks   uint64
	rssKiB  uint64
	hwmKiB  uint64
	threads int
}

// parseStat reads utime+stime and num_threads from the text of /proc/<pid>/stat.
func parseStat(s string) (ticks uint64, threads int, err error) {
	// The command name (field 2) is in parentheses and may contain spaces: count
	// fields after its closing parenthesis, which starts at field 3 (state).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("no ')' in stat")
	}
	f := strings.Fields(s[i+1:])
	// utime is field 14, stime 15, num_threads 20 (1-based): indexes 11, 12, 17 here.
	if len(f) < 18 {
		return 0, 0, fmt.Errorf("stat has %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	th, err3 := strconv.Atoi(f[17])
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, err
	}
	return u + st, th, nil
}

func sampleProc(pid int) (procSample, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	ticks, threads, err := parseStat(string(b))
	if err != nil {
		return procSample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, err
	}
	rss, hwm := host.ParseStatus(string(b))
	return procSample{ticks: ticks, rssKiB: rss, hwmKiB: hwm, threads: threads}, nil
}

// machineBusy is the busy clock ticks of all CPUs (/proc/stat's first line, without
// idle and iowait).
func machineBusy() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy uint64
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, nil
}

// measure samples the nodes at the start, every slice and at the end of window.
func measure(ctx context.Context, names []string, pids []int, window, slice time.Duration, clkTck int) (*usage, error) {
	sampleAll := func() ([]procSample, uint64, time.Time, error) {
		out := make([]procSample, len(pids))
		for i, pid := range pids {
			s, err := sampleProc(pid)
			if err != nil {
				return nil, 0, time.Time{}, fmt.Errorf("node %s (pid %d): %w", names[i], pid, err)
			}
			out[i] = s
		}
		busy, err := machineBusy()
		return out, busy, time.Now(), err
	}
	pct := func(ticks uint64, d time.Duration) float64 {
		return float64(ticks) / float64(clkTck) / d.Seconds() * 100
	}
	first, busy0, t0, err := sampleAll()
	if err != nil {
		return nil, err
	}
	u := &usage{Nodes: make([]nodeUsage, len(pids))}
	for i := range u.Nodes {
		u.Nodes[i] = nodeUsage{Node: names[i], PID: pids[i], SliceMinPct: -1}
	}
	prev, tPrev := first, t0
	end := t0.Add(window)
	var last []procSample
	var busy1 uint64
	var t1 time.Time
	for {
		next := tPrev.Add(slice)
		if next.After(end) || slice <= 0 {
			next = end
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(next)):
		}
		cur, busy, t, err := sampleAll()
		if err != nil {
			return nil, err
		}
		if d := t.Sub(tPrev); d > slice/2 {
			for i := range cur {
				p := pct(cur[i].ticks-prev[i].ticks, d)
				n := &u.Nodes[i]
				if n.SliceMinPct < 0 || p < n.SliceMinPct {
					n.SliceMinPct = p
				}
				n.SliceMaxPct = max(n.SliceMaxPct, p)
			}
		}
		prev, tPrev = cur, t
		if !t.Before(end) {
			last, busy1, t1 = cur, busy, t
			break
		}
	}
	d := t1.Sub(t0)
	u.WindowS = d.Seconds()
	var nodesTicks uint64
	for i := range u.Nodes {
		n := &u.Nodes[i]
		ticks := last[i].ticks - first[i].ticks
		nodesTicks += ticks
		n.CPUPct = pct(ticks, d)
		n.RSSMiB = float64(last[i].rssKiB) / 1024
		n.HWMMiB = float64(last[i].hwmKiB) / 1024
		n.Threads = last[i].threads
		if n.SliceMinPct < 0 {
			n.SliceMinPct = n.CPUPct
		}
		u.TotalCPUPct += n.CPUPct
		u.TotalRSSMiB += n.RSSMiB
	}
	if busy1 >= busy0+nodesTicks {
		u.OtherCPUPct = pct(busy1-busy0-nodesTicks, d)
	}
	return u, nil
}

func runIdle(ctx context.Context, cfg idleConfig) idleResult {
	res := idleResult{System: cfg.System.Name(), Run: cfg.Run, Streams: cfg.Streams, Replicas: cfg.Replicas, SettleS: cfg.Settle.Seconds()}
	if err := idle(ctx, cfg, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func streamName(i int) string { return fmt.Sprintf("IDLE%05d", i) }

func idle(ctx context.Context, cfg idleConfig, res *idleResult) error {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format+"\n", a...) }
	sys := cfg.System
	var err error

	// One admin connection per worker, spread over the nodes.
	conns := make([]admin, cfg.Concurrency)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	connCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for w := range conns {
		urls := append(append([]string{}, cfg.URLs[w%len(cfg.URLs):]...), cfg.URLs[:w%len(cfg.URLs)]...)
		if conns[w], err = retry(connCtx, func() (admin, error) { return sys.admin(connCtx, urls) }); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	res.Version = conns[0].Version()
	closeAll := func() {
		for i, c := range conns {
			c.Close()
			conns[i] = nil
		}
	}

	if cfg.Baseline > 0 {
		logf("%s: baseline, no streams, %s", sys.Name(), cfg.Baseline)
		if res.Baseline, err = measure(ctx, cfg.Names, cfg.PIDs, cfg.Baseline, cfg.Slice, cfg.ClkTck); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}

	// --- make the streams, Concurrency requests at a time ---------------------------
	logf("%s: creating %d streams of %d replicas, %d at a time", sys.Name(), cfg.Streams, cfg.Replicas, cfg.Concurrency)
	start := time.Now()
	createCtx, cancelCreate := context.WithTimeout(ctx, cfg.CreateTimeout)
	defer cancelCreate()
	var (
		next    atomic.Int64
		errMu   sync.Mutex
		errs    = map[string]int{}
		firstEr error
		wg      sync.WaitGroup
		done    atomic.Int64
	)
	for w := range conns {
		wg.Add(1)
		go func(c admin) {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > cfg.Streams || createCtx.Err() != nil {
					return
				}
				name := streamName(i)
				for {
					reqCtx, cancel := context.WithTimeout(createCtx, 30*time.Second)
					err := c.CreateStream(reqCtx, name, []string{fmt.Sprintf("idle.%05d", i)}, cfg.Replicas)
					cancel()
					if err == nil {
						break
					}
					errMu.Lock()
					errs[errKind(err)]++
					if firstEr == nil {
						firstEr = fmt.Errorf("%s: %w", name, err)
					}
					errMu.Unlock()
					select {
					case <-createCtx.Done():
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
				if d := done.Add(1); d%200 == 0 {
					logf("  %d streams made (%s)", d, time.Since(start).Round(time.Millisecond))
				}
			}
		}(conns[w])
	}
	wg.Wait()
	res.CreateS = time.Since(start).Seconds()
	if len(errs) > 0 {
		res.CreateErrors = errs
	}
	if n := done.Load(); n < int64(cfg.Streams) {
		return fmt.Errorf("made %d of %d streams in %s (first error: %v)", n, cfg.Streams, cfg.CreateTimeout, firstEr)
	}
	logf("%s: %d streams made in %.1f s; waiting until each is led with every replica current", sys.Name(), cfg.Streams, res.CreateS)

	// --- until every stream is led, all replicas current -----------------------------
	ledCtx, cancelLed := context.WithTimeout(ctx, cfg.LedTimeout)
	defer cancelLed()
	pending := make([]int, cfg.Streams)
	for i := range pending {
		pending[i] = i + 1
	}
	var why string
	for len(pending) > 0 {
		var (
			mu       sync.Mutex
			notReady []int
			idx      atomic.Int64
		)
		for w := range conns {
			wg.Add(1)
			go func(c admin) {
				defer wg.Done()
				for {
					k := int(idx.Add(1)) - 1
					if k >= len(pending) || ledCtx.Err() != nil {
						return
					}
					i := pending[k]
					reqCtx, cancel := context.WithTimeout(ledCtx, 10*time.Second)
					g, err := c.Group(reqCtx, streamName(i))
					cancel()
					if err != nil || !g.ready(cfg.Replicas) {
						mu.Lock()
						notReady = append(notReady, i)
						if err != nil {
							why = fmt.Sprintf("%s: %v", streamName(i), err)
						} else {
							why = fmt.Sprintf("%s: leader %q, %d of %d replicas current", streamName(i), g.Leader, g.Current, cfg.Replicas)
						}
						mu.Unlock()
					}
				}
			}(conns[w])
		}
		wg.Wait()
		pending = notReady
		if len(pending) == 0 {
			break
		}
		select {
		case <-ledCtx.Done():
			return fmt.Errorf("%d of %d streams not led with every replica current after %s (%s)", len(pending), cfg.Streams, cfg.LedTimeout, why)
		case <-time.After(500 * time.Millisecond):
		}
	}
	res.LedS = time.Since(start).Seconds()
	closeAll()
	logf("%s: all %d streams led after %.1f s; settling %s, then measuring %s", sys.Name(), cfg.Streams, res.LedS, cfg.Settle, cfg.Window)

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.Settle):
	}
	if res.Idle, err = measure(ctx, cfg.Names, cfg.PIDs, cfg.Window, cfg.Slice, cfg.ClkTck); err != nil {
		return fmt.Errorf("idle window: %w", err)
	}
	return nil
}
