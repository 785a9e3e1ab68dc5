package loadgen

// Stream workloads: Tern-only (they use the Tern Go client directly, not Bus), since
// durable streams have no broker-neutral interface here.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	tern "github.com/tern-mq/tern/client/go"
)

// Stream workload names, for StreamConfig.Mode.
const (
	// ModeStreamPub: Pubs publishers publish asynchronously into a stream, each with
	// up to Window publishes unacknowledged; throughput counts acknowledged messages,
	// latency is publish to acknowledgement.
	ModeStreamPub = "streampub"
	// ModeStreamConsume: the stream is filled with Msgs messages (not timed), then one
	// pull consumer fetches them in batches of Batch with an explicit ack for each;
	// throughput counts consumed messages, latency is the round trip of each fetch.
	ModeStreamConsume = "streamconsume"
)

// StreamModes lists the stream workloads in the order they are documented.
var StreamModes = []string{ModeStreamPub, ModeStreamConsume}

// IsStreamMode reports whether mode is a stream workload (run with RunStream).
func IsStreamMode(mode string) bool { return mode == ModeStreamPub || mode == ModeStreamConsume }

// StreamConfig describes a stream workload. Of the embedded Config, Mode, Subject,
// Pubs (streampub), Size, Msgs, Duration (streampub), Rate (streampub), Timeout and
// Stall are used.
type StreamConfig struct {
	Config
	// URL of the Tern server.
	URL string
	// Stream is the stream's name; "" picks a fresh unique one. An existing stream of
	// that name is used if its configuration is identical.
	Stream string
	// Keep leaves the stream (and its messages) in place after the run; otherwise it
	// is deleted.
	Keep bool
	// Window bounds each publisher's unacknowledged async publishes (default 4096).
	Window int
	// Batch is the fetch size of streamconsume (default 256).
	Batch int
	// Partitions of the stream (default 1); with more than one, each message carries a
	// distinct partition key so that the load spreads.
	Partitions int
	// Options are added to every connection's options (credentials, say).
	Options []tern.Option
}

func (cfg StreamConfig) normalize() (StreamConfig, error) {
	switch cfg.Mode {
	case ModeStreamPub, ModeStreamConsume:
	default:
		return cfg, fmt.Errorf("loadgen: %q is not a stream mode (want streampub or streamconsume)", cfg.Mode)
	}
	if cfg.URL == "" {
		return cfg, errors.New("loadgen: no server URL")
	}
	if cfg.Pubs < 0 || cfg.Size < 0 || cfg.Msgs < 0 || cfg.Duration < 0 || cfg.Rate < 0 || cfg.Timeout < 0 ||
		cfg.Stall < 0 || cfg.Window < 0 || cfg.Batch < 0 || cfg.Partitions < 0 {
		return cfg, errors.New("loadgen: negative pubs, size, msgs, duration, rate, timeout, stall, window, batch or partitions")
	}
	if cfg.Mode == ModeStreamConsume {
		if cfg.Msgs == 0 {
			return cfg, errors.New("loadgen: streamconsume needs a message count")
		}
		cfg.Pubs, cfg.Subs, cfg.Duration, cfg.Rate = 1, 1, 0, 0
	} else {
		if cfg.Msgs == 0 && cfg.Duration == 0 {
			return cfg, errors.New("loadgen: set a message count, a duration or both")
		}
		cfg.Subs = 0
	}
	if cfg.Pubs == 0 {
		cfg.Pubs = 1
	}
	if cfg.Window == 0 {
		cfg.Window = 4096
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	id := randomHex(6)
	if cfg.Stream == "" {
		cfg.Stream = "BENCH_" + id
	}
	if cfg.Subject == "" {
		cfg.Subject = "loadgen." + id
	}
	if cfg.Stall == 0 {
		cfg.Stall = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		const slack = 30 * time.Second
		if cfg.Duration > 0 {
			cfg.Timeout = cfg.Duration + slack
		} else {
			// Stored messages cost more than fire-and-forget ones: 50µs each, and the
			// paced time when that is longer.
			work := time.Duration(int64(cfg.Msgs)*int64(cfg.Pubs)) * 50 * time.Microsecond
			if cfg.Rate > 0 {
				work = max(work, time.Duration(float64(cfg.Msgs)/float64(cfg.Rate)*float64(time.Second)))
			}
			cfg.Timeout = work + slack
		}
	}
	return cfg, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StreamResult is what a stream workload measured: the usual Result (Sent counts
// messages published, Received those acknowledged in streampub and consumed in
// streamconsume) and the stream's settings.
type StreamResult struct {
	Result
	Stream     string
	Partitions int
	Window     int // streampub: unacknowledged publishes per publisher
	Batch      int // streamconsume: fetch size
}

// String is a short human summary, for example:
//
//	streampub: 1 publisher -> stream BENCH_1f2e3d (1 partition), 128 B payloads, window 4096
//	  100,000 published, 100,000 acknowledged in 1.204s
//	  83,056 msgs/s, 10.63 MB/s
//	  ack latency p50 21.3ms  p90 30.1ms  p99 40.2ms  p99.9 45.0ms  max 47.1ms  mean 22.0ms
func (r StreamResult) String() string {
	var b strings.Builder
	parts := plural(max(r.Partitions, 1), "partition", "partitions")
	switch r.Mode {
	case ModeStreamConsume:
		fmt.Fprintf(&b, "%s: 1 pull consumer <- stream %s (%s), %d B payloads, batch %d\n", r.Mode, r.Stream, parts, r.Size, r.Batch)
		fmt.Fprintf(&b, "  %s stored (not timed), %s consumed and acknowledged in %s\n", Commas(float64(r.Sent)), Commas(float64(r.Received)), FormatDuration(r.Elapsed))
	default:
		fmt.Fprintf(&b, "%s: %s -> stream %s (%s), %d B payloads, window %d\n", r.Mode, plural(r.Pubs, "publisher", "publishers"), r.Stream, parts, r.Size, r.Window)
		fmt.Fprintf(&b, "  %s published, %s acknowledged in %s\n", Commas(float64(r.Sent)), Commas(float64(r.Received)), FormatDuration(r.Elapsed))
	}
	fmt.Fprintf(&b, "  %s msgs/s, %.2f MB/s\n", Commas(r.MsgsPerSec), r.MBPerSec)
	if l := r.Latency; l.Samples > 0 {
		what := "ack latency"
		if r.Mode == ModeStreamConsume {
			what = "fetch round trip"
		}
		fmt.Fprintf(&b, "  %s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n", what,
			FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.P999), FormatDuration(l.Max), FormatDuration(l.Mean))
	}
	if r.Errors > 0 || r.Received != r.Expected {
		fmt.Fprintf(&b, "  errors %d, %s of %s expected messages missing\n", r.Errors,
			Commas(float64(r.Expected)-float64(r.Received)), Commas(float64(r.Expected)))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// MarshalJSON writes Result's JSON form (its fields in its order) followed by
// "stream", "partitions" and "window" or "batch", so that it also reads as a Result.
func (r StreamResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("loadgen: result JSON %q is not an object", b)
	}
	extra := struct {
		Stream     string `json:"stream"`
		Partitions int    `json:"partitions"`
		Window     int    `json:"window,omitempty"`
		Batch      int    `json:"batch,omitempty"`
	}{Stream: r.Stream, Partitions: r.Partitions}
	if r.Mode == ModeStreamConsume {
		extra.Batch = r.Batch
	} else {
		extra.Window = r.Window
	}
	e, err := json.Marshal(extra)
	if err != nil {
		return nil, err
	}
	b = append(b[:len(b)-1], ',')
	return append(b, e[1:]...), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *StreamResult) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.Result); err != nil {
		return err
	}
	var extra struct {
		Stream     string `json:"stream"`
		Partitions int    `json:"partitions"`
		Window     int    `json:"window"`
		Batch      int    `json:"batch"`
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		return err
	}
	r.Stream, r.Partitions, r.Window, r.Batch = extra.Stream, extra.Partitions, extra.Window, extra.Batch
	return nil
}

// streamRun is one stream workload's connections and stream.
type streamRun struct {
	cfg   StreamConfig
	conns []*tern.Conn
}

// unlimitedPending keeps bursts in the client rather than dropping them there.
const unlimitedPending = 1 << 40

func (sr *streamRun) connect(name string) (*tern.Conn, error) {
	opts := append([]tern.Option{tern.Name(name), tern.NoReconnect(), tern.PendingLimits(unlimitedPending, unlimitedPending)}, sr.cfg.Options...)
	nc, err := tern.Connect(sr.cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("loadgen: connect %s: %w", name, err)
	}
	sr.conns = append(sr.conns, nc)
	return nc, nil
}

func (sr *streamRun) closeAll() {
	for _, nc := range sr.conns {
		nc.Close()
	}
	sr.conns = nil
}

// ackTimeout bounds each publish acknowledgement and management request.
const ackTimeout = 10 * time.Second

// RunStream runs a stream workload against the Tern server at cfg.URL: it creates the
// stream, runs the workload, and deletes the stream unless cfg.Keep. A run that ended
// before every message was acknowledged (streampub) or consumed (streamconsume)
// returns its partial result with an error wrapping ErrIncomplete.
func RunStream(ctx context.Context, cfg StreamConfig) (StreamResult, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return StreamResult{}, err
	}
	res := StreamResult{
		Result: Result{Mode: cfg.Mode, Subject: cfg.Subject, Pubs: cfg.Pubs, Subs: cfg.Subs, Size: cfg.Size, Msgs: cfg.Msgs},
		Stream: cfg.Stream, Partitions: cfg.Partitions, Window: cfg.Window, Batch: cfg.Batch,
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	sr := &streamRun{cfg: cfg}
	defer sr.closeAll()
	admin, err := sr.connect("bench-admin")
	if err != nil {
		return res, err
	}
	js := admin.Streams(tern.APITimeout(ackTimeout))
	parts := 0
	if cfg.Partitions > 1 {
		parts = cfg.Partitions
	}
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject}, Partitions: parts}); err != nil {
		return res, fmt.Errorf("loadgen: create stream %s: %w", cfg.Stream, err)
	}
	if !cfg.Keep {
		defer func() {
			// The run's context may be over; the clean-up gets its own.
			dctx, dcancel := context.WithTimeout(context.Background(), ackTimeout)
			defer dcancel()
			_ = js.DeleteStream(dctx, cfg.Stream)
		}()
	}
	if cfg.Mode == ModeStreamConsume {
		err = sr.consume(ctx, js, &res.Result)
	} else {
		err = sr.publish(ctx, &res.Result)
	}
	return res, err
}

// pubTally is what one stream publisher did.
type pubTally struct {
	sent, acked uint64
	errs        int
	err         error
	last        time.Time // when the last acknowledgement was seen
	hist        *hdrhistogram.Histogram
}

type pending struct {
	f  *tern.PubAckFuture
	t0 time.Time
}

// streamPublisher publishes cfg.Msgs messages (or until the gate says stop)
// asynchronously; a collector goroutine waits for the acknowledgements in order and
// records publish-to-ack latency.
func (sr *streamRun) streamPublisher(ctx context.Context, nc *tern.Conn, g *gate, id int) pubTally {
	cfg := &sr.cfg
	js := nc.Streams(tern.APITimeout(ackTimeout), tern.PublishAsyncMaxPending(cfg.Window),
		tern.PublishAsyncStallWait(cfg.Stall))
	t := pubTally{hist: newHistogram()}
	futures := make(chan pending, cfg.Window)
	collected := make(chan struct{})
	var cerrs int
	var cerr error
	go func() {
		defer close(collected)
		for p := range futures {
			select {
			case <-p.f.Done():
			case <-ctx.Done():
				cerrs++
				continue
			}
			now := time.Now()
			if _, err := p.f.Result(); err != nil {
				cerrs++
				if cerr == nil {
					cerr = fmt.Errorf("publish acknowledgement: %w", err)
				}
				continue
			}
			t.acked++
			t.last = now
			record(t.hist, int64(now.Sub(p.t0)))
		}
	}()
	buf := make([]byte, cfg.Size)
	var opts []tern.PubOpt
	<-g.open
	p := pacer{start: g.start}
	if cfg.Rate > 0 {
		p.interval = float64(time.Second) / float64(cfg.Rate)
	}
	consecutive := 0
	for i := 0; ; i++ {
		if cfg.Msgs > 0 && i >= cfg.Msgs || (cfg.Rate > 0 || i&63 == 0) && g.done(&cfg.Config, i) {
			break
		}
		p.wait(i)
		if cfg.Partitions > 1 {
			opts = append(opts[:0], tern.Key(strconv.Itoa(id)+"-"+strconv.Itoa(i)))
		}
		if len(buf) >= stampLen {
			binary.LittleEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
		}
		t0 := time.Now()
		// The client copies the payload into its write buffer, so buf can be reused
		// (the future's Msg, which keeps it, is never read here).
		f, err := js.PublishAsync(cfg.Subject, buf, opts...)
		if err != nil {
			t.errs++
			if consecutive++; consecutive >= maxConsecutiveErrors || ctx.Err() != nil {
				t.err = fmt.Errorf("publish: %w", err)
				break
			}
			continue
		}
		consecutive = 0
		t.sent++
		futures <- pending{f: f, t0: t0}
	}
	close(futures)
	<-collected
	t.errs += cerrs
	if t.err == nil {
		t.err = cerr
	}
	return t
}

func (sr *streamRun) publish(ctx context.Context, res *Result) error {
	cfg := sr.cfg
	conns := make([]*tern.Conn, cfg.Pubs)
	for i := range conns {
		nc, err := sr.connect(fmt.Sprintf("bench-streampub-%d", i))
		if err != nil {
			return err
		}
		conns[i] = nc
	}
	g := &gate{open: make(chan struct{})}
	tallies := make([]pubTally, len(conns))
	var wg sync.WaitGroup
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tallies[i] = sr.streamPublisher(ctx, nc, g, i)
		}()
	}
	stopWatch := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			g.stop.Store(true)
		case <-stopWatch:
		}
	}()
	g.release(cfg.Duration)
	wg.Wait()
	close(stopWatch)

	hist := newHistogram()
	var errs []error
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrIncomplete, err))
	}
	var last time.Time
	for _, t := range tallies {
		res.Sent += t.sent
		res.Received += t.acked
		res.Errors += t.errs
		if t.err != nil {
			errs = append(errs, t.err)
		}
		if t.last.After(last) {
			last = t.last
		}
		hist.Merge(t.hist)
	}
	res.Expected = res.Sent
	res.Latency = percentilesOf(hist)
	if last.IsZero() {
		res.Elapsed = time.Since(g.start)
	} else {
		res.Elapsed = last.Sub(g.start)
	}
	res.finish()
	if res.Received != res.Expected {
		errs = append(errs, fmt.Errorf("%w: %d of %d publishes acknowledged", ErrIncomplete, res.Received, res.Expected))
	}
	return errors.Join(errs...)
}

// consume fills the stream, untimed, then times one pull consumer taking every
// message with an explicit ack each.
func (sr *streamRun) consume(ctx context.Context, admin *tern.Streams, res *Result) error {
	cfg := sr.cfg
	// A durable consumer made before the fill and starting at new messages sees
	// exactly this run's messages, even in a reused stream, and is not removed for
	// inactivity during a long fill.
	name := "bench-" + randomHex(4)
	if _, err := admin.AddConsumer(ctx, cfg.Stream, tern.ConsumerConfig{Durable: name, DeliverPolicy: tern.DeliverNew,
		AckPolicy: tern.AckExplicit, MaxAckPending: max(10000, 4*cfg.Batch)}); err != nil {
		return fmt.Errorf("loadgen: create consumer: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), ackTimeout)
		defer dcancel()
		_ = admin.DeleteConsumer(dctx, cfg.Stream, name)
	}()

	// Fill.
	pubConn, err := sr.connect("bench-streamfill")
	if err != nil {
		return err
	}
	g := &gate{open: make(chan struct{})}
	g.release(0)
	fill := sr.streamPublisher(ctx, pubConn, g, 0)
	res.Sent = fill.acked
	res.Expected = fill.acked
	res.Errors = fill.errs
	if fill.err != nil || fill.acked != uint64(cfg.Msgs) {
		return errors.Join(fill.err, fmt.Errorf("%w: filling the stream: %d of %d publishes acknowledged", ErrIncomplete, fill.acked, cfg.Msgs))
	}

	// Consume.
	nc, err := sr.connect("bench-streamconsume")
	if err != nil {
		return err
	}
	js := nc.Streams(tern.APITimeout(ackTimeout))
	pull := js.Pull(cfg.Stream, name)
	defer pull.Close()
	hist := newHistogram()
	var errs []error
	start := time.Now()
	for res.Received < res.Expected {
		want := int(min(uint64(cfg.Batch), res.Expected-res.Received))
		t0 := time.Now()
		msgs, err := pull.Fetch(ctx, want, tern.FetchMaxWait(cfg.Stall))
		if err != nil && len(msgs) == 0 {
			errs = append(errs, fmt.Errorf("%w: fetch: %v", ErrIncomplete, err))
			break
		}
		record(hist, int64(time.Since(t0)))
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				res.Errors++
				continue
			}
			if meta, err := m.Metadata(); err == nil && meta.Deliveries > 1 {
				continue // a redelivery: counted already
			}
			res.Received++
		}
	}
	// The acks are plain publishes: the run ends when the server has them.
	if err := nc.Flush(); err != nil {
		res.Errors++
		errs = append(errs, fmt.Errorf("flush: %w", err))
	}
	res.Elapsed = time.Since(start)
	res.Latency = percentilesOf(hist)
	res.finish()
	if res.Received != res.Expected {
		errs = append(errs, fmt.Errorf("%w: %d of %d messages consumed", ErrIncomplete, res.Received, res.Expected))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Check, untimed, that the server applied every ack.
	deadline := time.Now().Add(cfg.Stall)
	for {
		info, err := admin.ConsumerInfo(ctx, cfg.Stream, name)
		if err != nil {
			return fmt.Errorf("loadgen: consumer info: %w", err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			res.Errors++
			return fmt.Errorf("%w: after the run the consumer has %d unacknowledged and %d undelivered messages", ErrIncomplete, info.NumAckPending, info.NumPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
