package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/records"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/mqttload"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// row is one throughput workload: pubs publishers on node 1, each on its own topic,
// one subscriber on node 2 taking all of them, publishing and subscribing at QoS
// 1, or at QoS 2 on the "q2" rows.
type row struct {
	Key        string `json:"key"`
	Persistent bool   `json:"persistent"` // the subscriber's session: clean session off
	Pubs       int    `json:"pubs"`
	Size       int    `json:"size"`
	Msgs       int    `json:"msgs"`           // published in all
	QoS2       bool   `json:"qos2,omitempty"` // QoS 2 both ways
}

func (r row) qos() byte {
	if r.QoS2 {
		return 2
	}
	return 1
}

func (r row) describe() string {
	s := "clean"
	if r.Persistent {
		s = "persistent"
	}
	q := ""
	if r.QoS2 {
		q = "QoS 2, "
	}
	return fmt.Sprintf("%s%d→1, %s, %s session", q, r.Pubs, sizeName(r.Size), s)
}

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// rows are the throughput matrix at the given scale: 200,000 messages of 32 B and
// 50,000 of 1 KiB per run, from 1 and from 10 publishers, to a persistent and to a
// clean-session subscriber; then the persistent rows at QoS 2 ("q2p1-32" ...),
// where a replicated session commits each message's PUBREC and PUBCOMP.
func rows(scale float64) []row {
	var out []row
	for _, persistent := range []bool{true, false} {
		for _, pubs := range []int{1, 10} {
			for _, size := range []int{32, 1024} {
				base := 200000
				if size == 1024 {
					base = 50000
				}
				k := "c"
				if persistent {
					k = "p"
				}
				sz := "32"
				if size == 1024 {
					sz = "1k"
				}
				out = append(out, row{Key: fmt.Sprintf("%s%d-%s", k, pubs, sz), Persistent: persistent, Pubs: pubs, Size: size,
					Msgs: max(1000, int(float64(base)*scale))})
			}
		}
	}
	for _, r := range out[:4] { // the persistent ones
		r.Key, r.QoS2 = "q2"+r.Key, true
		out = append(out, r)
	}
	return out
}

func selectRows(all []row, only string) ([]row, error) {
	if only == "" {
		return all, nil
	}
	var out []row
	for _, r := range all {
		for _, k := range harness.SplitList(only) {
			if strings.HasPrefix(r.Key, k) {
				out = append(out, r)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--rows %q matches no row", only)
	}
	return out, nil
}

// throughputResult is one run of one row against one system.
type throughputResult struct {
	System string  `json:"system"`
	Row    row     `json:"row"`
	Run    int     `json:"run"`
	Window int     `json:"window"`
	Rate   float64 `json:"rate"` // distinct messages received per second, first publish to last delivery
	// Received distinct messages; Duplicates deliveries of a message received before;
	// Acked PUBACKs the publishers got.
	Received   int     `json:"received"`
	Duplicates int     `json:"duplicates"`
	Acked      int64   `json:"acked"`
	TookS      float64 `json:"took_s"`
	// Latency, publish (write) to receipt, in microseconds, over every message.
	P50us  float64 `json:"p50_us"`
	P90us  float64 `json:"p90_us"`
	P99us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	ProbeS float64 `json:"probe_s"` // until the subscriber got the first probe
	// OtherCores: what processes other than the cluster's nodes and the harness used
	// of the CPUs while the run published and received, in cores (-1: unknown).
	OtherCores float64 `json:"other_cores"`
	Busy       bool    `json:"busy,omitempty"`
	Error      string  `json:"error,omitempty"`
}

func cmdThroughput(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("mqttclustervs throughput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addCluster(fs)
	out := fs.String("out", "", "append each run's result as one JSON line to this file (required)")
	only := fs.String("rows", "", "comma-separated row keys or prefixes (p1, p10-32, c, ...); default all")
	runs := fs.Int("runs", 3, "runs per row")
	scale := fs.Float64("scale", 1, "multiplies every row's message count")
	window := fs.Int("window", 256, "QoS 1 or 2 messages each publisher keeps unacknowledged (the bench/mqttvs default)")
	idle := fs.Duration("idle-timeout", 10*time.Second, "a run ends when nothing arrived for this long")
	runTimeout := fs.Duration("run-timeout", 5*time.Minute, "bound on one run")
	list := fs.Bool("list", false, "list the rows and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sel, err := selectRows(rows(*scale), *only)
	if err != nil {
		return err
	}
	if *list {
		for _, r := range sel {
			fmt.Fprintf(stderr, "%-8s %s, %d messages\n", r.Key, r.describe(), r.Msgs)
		}
		return nil
	}
	c, err := cf.parse(false)
	if err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	if *runs < 1 || *window < 1 {
		return errors.New("--runs and --window must be positive")
	}
	for i, r := range sel {
		for k := 1; k <= *runs; k++ {
			runtime.GC()
			busy := cf.waitQuiet(ctx, stderr)
			res := runThroughput(ctx, c, r, k, *window, *idle, *runTimeout)
			res.Busy = busy
			if ctx.Err() != nil {
				return ctx.Err()
			}
			line := fmt.Sprintf("[%d/%d] %s %-7s run %d/%d: %.0f msgs/s, %d of %d received (%d duplicates) in %.2fs, latency p50 %.0fµs p99 %.0fµs; other processes %.2f cores",
				i+1, len(sel), c.System, r.Key, k, *runs, res.Rate, res.Received, r.Msgs, res.Duplicates, res.TookS, res.P50us, res.P99us, res.OtherCores)
			if res.Error != "" {
				line += "  FAILED: " + res.Error
			}
			fmt.Fprintln(stderr, line)
			if err := records.Append(*out, res); err != nil {
				return err
			}
		}
	}
	return nil
}

var runSeq atomic.Int64

func runThroughput(ctx context.Context, c cluster, r row, k, window int, idle, limit time.Duration) throughputResult {
	res := throughputResult{System: c.System, Row: r, Run: k, Window: window}
	if err := throughput(ctx, c, r, window, idle, limit, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

// receiver tracks one subscriber's deliveries of messages numbered pub<<32 | n.
type receiver struct {
	probe    string
	seen     [][]bool // [publisher][n]
	distinct atomic.Int64
	dups     atomic.Int64
	last     atomic.Int64 // Unix ns of the last new message
	probed   atomic.Int64 // Unix ns of the first probe; 0: none yet
	foreign  atomic.Int64
	mu       sync.Mutex // guards hist (read at the end)
	hist     *hdrhistogram.Histogram
}

func newReceiver(probe string, counts []int) *receiver {
	rv := &receiver{probe: probe, hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)}
	for _, n := range counts {
		rv.seen = append(rv.seen, make([]bool, n))
	}
	return rv
}

func (rv *receiver) handle(p *packet.Publish, now time.Time) {
	if p.Topic == rv.probe {
		rv.probed.CompareAndSwap(0, now.UnixNano())
		return
	}
	sent, seq, ok := mqttload.Stamped(p.Payload)
	pub, n := int(seq>>32), int(seq&0xffffffff)
	if !ok || pub >= len(rv.seen) || n >= len(rv.seen[pub]) {
		rv.foreign.Add(1)
		return
	}
	if rv.seen[pub][n] {
		rv.dups.Add(1)
		return
	}
	rv.seen[pub][n] = true
	rv.mu.Lock()
	_ = rv.hist.RecordValue(max(1, now.Sub(sent).Microseconds()))
	rv.mu.Unlock()
	rv.last.Store(now.UnixNano())
	rv.distinct.Add(1)
}

func throughput(ctx context.Context, c cluster, r row, window int, idle, limit time.Duration, res *throughputResult) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tag := fmt.Sprintf("%d-%d", time.Now().UnixNano()%1e9, runSeq.Add(1))
	prefix := "mc/" + tag
	probeTopic := prefix + "/probe"
	counts := make([]int, r.Pubs)
	for i := range counts {
		counts[i] = r.Msgs / r.Pubs
		if i < r.Msgs%r.Pubs {
			counts[i]++
		}
	}
	rv := newReceiver(probeTopic, counts)

	// The subscriber, on node 2.
	subID := "sub-" + tag
	sub, err := mqttload.DialWith(c.MQTT[1], mqttload.DialOptions{ClientID: subID, Persistent: r.Persistent})
	if err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	defer func() {
		sub.Close()
		if r.Persistent {
			_ = dropSession(c.MQTT[1], subID)
		}
	}()
	if err := sub.Subscribe(prefix+"/#", r.qos()); err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	subDone := make(chan error, 1)
	go func() { subDone <- sub.ReceiveFunc(rv.handle) }()

	// The publishers, on node 1.
	pubs := make([]*mqttload.Client, 0, r.Pubs)
	defer func() {
		for _, p := range pubs {
			p.Close()
		}
	}()
	for i := range r.Pubs {
		p, err := mqttload.Dial(c.MQTT[0], fmt.Sprintf("pub-%s-%d", tag, i), nil)
		if err != nil {
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		pubs = append(pubs, p)
	}

	// Until the subscriber gets what node 1 publishes (interest may take a moment to
	// reach node 1 over the routes): QoS 0 probes from one more client, 20 ms apart.
	t0 := time.Now()
	if err := probe(ctx, c.MQTT[0], "probe-"+tag, probeTopic, rv, subDone); err != nil {
		return err
	}
	res.ProbeS = time.Since(t0).Seconds()

	var stop atomic.Bool
	var acked atomic.Int64
	pubErr := make(chan error, r.Pubs)
	var wg sync.WaitGroup
	meter := host.StartMeter(c.PIDs)
	start := time.Now()
	for i, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.PublishWith(mqttload.PublishOptions{Topic: fmt.Sprintf("%s/p%d", prefix, i), QoS: r.qos(), Count: counts[i],
				Size: r.Size, Window: window, Stop: &stop, Stamp: true, Seq: true, FirstSeq: uint64(i) << 32,
				OnAck: func(uint64, time.Time) { acked.Add(1) }})
			if err != nil && !stop.Load() {
				pubErr <- fmt.Errorf("publisher %d: %w", i, err)
			}
		}()
	}
	want := int64(r.Msgs)
	var runErr error
	lastProgress, lastCount := time.Now(), int64(0)
wait:
	for rv.distinct.Load() < want {
		select {
		case <-ctx.Done():
			runErr = fmt.Errorf("run bound reached (%v)", limit)
			break wait
		case err := <-pubErr:
			runErr = err
			break wait
		case err := <-subDone:
			runErr = fmt.Errorf("subscriber's connection ended: %v", err)
			break wait
		case <-time.After(20 * time.Millisecond):
		}
		if n := rv.distinct.Load(); n != lastCount {
			lastProgress, lastCount = time.Now(), n
		} else if time.Since(lastProgress) > idle {
			runErr = fmt.Errorf("nothing received for %v", idle)
			break
		}
	}
	res.OtherCores = meter.OtherCores()
	stop.Store(true)
	for _, p := range pubs {
		p.Close() // ends a publisher waiting for acknowledgements
	}
	wg.Wait()
	res.Received = int(rv.distinct.Load())
	res.Duplicates = int(rv.dups.Load())
	res.Acked = acked.Load()
	if l := rv.last.Load(); l > 0 {
		res.TookS = time.Unix(0, l).Sub(start).Seconds()
		if res.TookS > 0 {
			res.Rate = float64(res.Received) / res.TookS
		}
	}
	rv.mu.Lock()
	res.P50us = float64(rv.hist.ValueAtQuantile(50))
	res.P90us = float64(rv.hist.ValueAtQuantile(90))
	res.P99us = float64(rv.hist.ValueAtQuantile(99))
	res.MaxUs = float64(rv.hist.Max())
	rv.mu.Unlock()
	if runErr == nil && int64(res.Received) < want {
		runErr = fmt.Errorf("%d of %d messages not received", want-int64(res.Received), want)
	}
	if runErr != nil {
		return fmt.Errorf("%w (%d of %d received, %d acknowledged)", runErr, res.Received, want, res.Acked)
	}
	if f := rv.foreign.Load(); f > 0 {
		return fmt.Errorf("%d messages that no publisher of the run sent", f)
	}
	return nil
}

// probe publishes QoS 0 messages to topic from a client of its own on addr, 20 ms
// apart, until rv has seen one (10 s at most).
func probe(ctx context.Context, addr, id, topic string, rv *receiver, subDone <-chan error) error {
	p, err := mqttload.Dial(addr, id, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rv.probed.Load() == 0 {
		if err := p.PublishWith(mqttload.PublishOptions{Topic: topic, QoS: 0, Count: 1, Size: 8}); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-subDone:
			return fmt.Errorf("subscriber's connection ended while probing: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("probe: the subscriber on node 2 got no message published on node 1 within 10 s")
		}
	}
	return nil
}
