package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// stampLen is the size of the send time at the start of a payload.
const stampLen = 8

// Histogram bounds, in nanoseconds: 1µs to 60s at 3 significant digits.
const (
	histLow    = int64(time.Microsecond)
	histHigh   = int64(60 * time.Second)
	histDigits = 3
)

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(histLow, histHigh, histDigits) }

func record(h *hdrhistogram.Histogram, ns int64) {
	if ns < 0 {
		ns = 0 // a wall-clock step; keep the sample rather than lose the count
	}
	if ns > histHigh {
		ns = histHigh
	}
	_ = h.RecordValue(ns)
}

// maxConsecutiveErrors stops a publisher or requester whose connection has failed.
const maxConsecutiveErrors = 100

// requestTimeout bounds one request in reqrep mode.
const requestTimeout = 5 * time.Second

type runner struct {
	cfg    Config
	dial   Dialer
	buses  []Bus
	unsubs []func() error
	probes *probes // nil unless cfg.Probe
}

// addProbe subscribes subscriber i's bus to its probe subject (Config.Probe), after
// its workload subscription.
func (r *runner) addProbe(bus Bus, i int) error {
	if !r.cfg.Probe {
		return nil
	}
	if r.probes == nil {
		r.probes = newProbes(r.cfg.Subject, r.cfg.Subs, r.cfg.Pubs)
	}
	unsub, err := bus.Subscribe(r.probes.subject(i), r.probes.handler(i))
	if err != nil {
		return fmt.Errorf("loadgen: subscribe to probe: %w", err)
	}
	r.unsubs = append(r.unsubs, unsub)
	return nil
}

func (r *runner) open(name string) (Bus, error) {
	b, err := r.dial(name)
	if err != nil {
		return nil, fmt.Errorf("loadgen: connect %s: %w", name, err)
	}
	r.buses = append(r.buses, b)
	return b, nil
}

// closeAll removes the subscriptions and closes every connection, once.
func (r *runner) closeAll() {
	for _, u := range r.unsubs {
		_ = u()
	}
	r.unsubs = nil
	var wg sync.WaitGroup
	for _, b := range r.buses {
		wg.Add(1)
		go func() { defer wg.Done(); _ = b.Close() }()
	}
	wg.Wait()
	r.buses = nil
}

// completion is closed when its last part finishes.
type completion struct {
	remaining atomic.Int64
	done      chan struct{}
}

func newCompletion(parts int) *completion {
	c := &completion{done: make(chan struct{})}
	c.remaining.Store(int64(parts))
	if parts == 0 {
		close(c.done)
	}
	return c
}

func (c *completion) arrive() {
	if c.remaining.Add(-1) == 0 {
		close(c.done)
	}
}

// tally counts deliveries toward a target (0 while unknown) and, on reaching it,
// finishes one part of a completion.
type tally struct {
	count  atomic.Uint64
	target atomic.Uint64
	once   sync.Once
	comp   *completion
}

func (t *tally) add() {
	n := t.count.Add(1)
	if tg := t.target.Load(); tg > 0 && n >= tg {
		t.finish()
	}
}

// setTarget fixes the target once the number sent is known.
func (t *tally) setTarget(n uint64) {
	t.target.Store(n)
	if t.count.Load() >= n {
		t.finish()
	}
}

func (t *tally) finish() { t.once.Do(t.comp.arrive) }

// sink is one subscriber. handle runs on the subscription's delivery goroutine; only
// it touches hist until the run is over.
type sink struct {
	base   time.Time
	hist   *hdrhistogram.Histogram
	count  atomic.Uint64
	last   atomic.Int64 // time of the latest delivery, nanoseconds after base
	tally  *tally       // the subscriber's own (pubsub) or the queue group's
	frozen atomic.Bool
}

func (s *sink) handle(data []byte) {
	if s.frozen.Load() {
		return
	}
	now := time.Now()
	if len(data) >= stampLen {
		record(s.hist, now.UnixNano()-int64(binary.LittleEndian.Uint64(data)))
	}
	s.last.Store(int64(now.Sub(s.base)))
	s.count.Add(1)
	s.tally.add()
}

// pubResult is what one publisher or requester did.
type pubResult struct {
	sent, received uint64
	errs           int
	err            error // the error that stopped it early, if any
	hist           *hdrhistogram.Histogram
}

// pacer spaces a publisher's messages at cfg.Rate per second.
type pacer struct {
	start    time.Time
	interval float64 // nanoseconds
}

func (p pacer) wait(i int) {
	if p.interval == 0 {
		return
	}
	due := p.start.Add(time.Duration(float64(i) * p.interval))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

// gate starts publishers together and tells them when to stop.
type gate struct {
	open     chan struct{}
	start    time.Time // set before open is closed
	deadline time.Time // zero when there is no duration
	stop     atomic.Bool
}

func (g *gate) release(d time.Duration) {
	g.start = time.Now()
	if d > 0 {
		g.deadline = g.start.Add(d)
	}
	close(g.open)
}

// done reports whether a publisher should stop before message i.
func (g *gate) done(cfg *Config, i int) bool {
	if cfg.Msgs > 0 && i >= cfg.Msgs {
		return true
	}
	if g.stop.Load() {
		return true
	}
	return !g.deadline.IsZero() && time.Now().After(g.deadline)
}

func (r *runner) publisher(bus Bus, g *gate) pubResult {
	cfg := &r.cfg
	var res pubResult
	buf := make([]byte, cfg.Size)
	<-g.open
	p := pacer{start: g.start}
	if cfg.Rate > 0 {
		p.interval = float64(time.Second) / float64(cfg.Rate)
	}
	consecutive := 0
	for i := 0; ; i++ {
		// Reading the clock is cheap, but not free: unpaced, look every 64 messages.
		if cfg.Msgs > 0 && i >= cfg.Msgs || (cfg.Rate > 0 || i&63 == 0) && g.done(cfg, i) {
			break
		}
		p.wait(i)
		if len(buf) >= stampLen {
			binary.LittleEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
		}
		if err := bus.Publish(cfg.Subject, buf); err != nil {
			res.errs++
			if consecutive++; consecutive >= maxConsecutiveErrors {
				res.err = fmt.Errorf("publish: %w", err)
				break
			}
			continue
		}
		consecutive = 0
		res.sent++
	}
	if err := bus.Flush(); err != nil {
		res.errs++
		if res.err == nil {
			res.err = fmt.Errorf("flush: %w", err)
		}
	}
	return res
}

// startPublishers dials cfg.Pubs connections and starts a goroutine on each that
// waits for the gate; results arrive on the returned channel once all are done.
func (r *runner) startPublishers(ctx context.Context, role string, g *gate, work func(Bus, *gate) pubResult) (<-chan []pubResult, error) {
	buses := make([]Bus, r.cfg.Pubs)
	for i := range buses {
		b, err := r.open(connName(role, i))
		if err != nil {
			return nil, err
		}
		buses[i] = b
	}
	if r.probes != nil {
		if err := r.probes.run(ctx, buses); err != nil {
			return nil, err
		}
	}
	results := make([]pubResult, len(buses))
	out := make(chan []pubResult, 1)
	var wg sync.WaitGroup
	for i, b := range buses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = work(b, g)
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
	go func() {
		wg.Wait()
		close(stopWatch)
		out <- results
	}()
	return out, nil
}

// stream runs the pub, pubsub and queue workloads.
func (r *runner) stream(ctx context.Context) (Result, error) {
	cfg := r.cfg
	res := Result{Mode: cfg.Mode, Subject: cfg.Subject, Pubs: cfg.Pubs, Subs: cfg.Subs, Size: cfg.Size, Msgs: cfg.Msgs}
	base := time.Now()

	var (
		sinks  = make([]*sink, cfg.Subs)
		tallys []*tally
		comp   *completion
	)
	if cfg.Mode == ModeQueue {
		comp = newCompletion(1)
		tallys = []*tally{{comp: comp}}
	} else {
		comp = newCompletion(cfg.Subs)
	}
	for i := range sinks {
		s := &sink{base: base, hist: newHistogram()}
		if cfg.Mode == ModeQueue {
			s.tally = tallys[0]
		} else {
			s.tally = &tally{comp: comp}
			tallys = append(tallys, s.tally)
		}
		sinks[i] = s
		bus, err := r.open(connName(RoleSub, i))
		if err != nil {
			return res, err
		}
		var unsub func() error
		if cfg.Mode == ModeQueue {
			unsub, err = bus.QueueSubscribe(cfg.Subject, cfg.Queue, s.handle)
		} else {
			unsub, err = bus.Subscribe(cfg.Subject, s.handle)
		}
		if err != nil {
			return res, fmt.Errorf("loadgen: subscribe: %w", err)
		}
		r.unsubs = append(r.unsubs, unsub)
		if err := r.addProbe(bus, i); err != nil {
			return res, err
		}
		if err := bus.Flush(); err != nil {
			return res, fmt.Errorf("loadgen: flush after subscribe: %w", err)
		}
	}
	// With a count and no duration the total is known up front; otherwise it is
	// fixed when the publishers stop.
	if cfg.Duration == 0 {
		total := uint64(cfg.Msgs) * uint64(cfg.Pubs)
		for _, t := range tallys {
			t.target.Store(total)
		}
	}

	g := &gate{open: make(chan struct{})}
	pubsDone, err := r.startPublishers(ctx, RolePub, g, r.publisher)
	if err != nil {
		return res, err
	}
	g.release(cfg.Duration)
	startOff := g.start.Sub(base)

	var pubs []pubResult
	var pubsEnd time.Time
	select {
	case pubs = <-pubsDone:
		pubsEnd = time.Now()
	case <-ctx.Done():
		g.stop.Store(true)
		pubs = waitPublishers(pubsDone)
		pubsEnd = time.Now()
	}
	var errs []error
	if err := ctx.Err(); err != nil { // cancelled or out of time while publishing
		errs = append(errs, fmt.Errorf("%w: %v", ErrIncomplete, err))
	}
	for _, p := range pubs {
		res.Sent += p.sent
		res.Errors += p.errs
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}

	if cfg.Mode == ModePub {
		res.Expected = res.Sent
		res.Received = res.Sent
		res.Elapsed = pubsEnd.Sub(g.start)
		res.finish()
		return res, errors.Join(errs...)
	}

	for _, t := range tallys {
		t.setTarget(res.Sent)
	}
	if cfg.Mode == ModeQueue {
		res.Expected = res.Sent
	} else {
		res.Expected = res.Sent * uint64(cfg.Subs)
	}
	complete := r.await(ctx, comp, sinks)

	// Stop the subscribers and wait until no handler is still recording, then read.
	for _, s := range sinks {
		s.frozen.Store(true)
	}
	settle(sinks)
	hist := newHistogram()
	var maxLast int64
	for _, s := range sinks {
		n := s.count.Load()
		res.Received += n
		res.SubCounts = append(res.SubCounts, n)
		if l := s.last.Load(); l > maxLast {
			maxLast = l
		}
		hist.Merge(s.hist)
	}
	res.Latency = percentilesOf(hist)
	if res.Received > 0 {
		res.Elapsed = time.Duration(maxLast) - startOff
	} else {
		res.Elapsed = time.Since(g.start)
	}
	res.finish()
	if !complete || res.Received != res.Expected {
		errs = append(errs, fmt.Errorf("%w: %d of %d deliveries arrived", ErrIncomplete, res.Received, res.Expected))
	}
	return res, errors.Join(errs...)
}

// waitPublishers collects the publishers' results after they were told to stop,
// giving up after a few seconds (a publisher blocked in a write is released when its
// connection is closed).
func waitPublishers(ch <-chan []pubResult) []pubResult {
	select {
	case p := <-ch:
		return p
	case <-time.After(3 * time.Second):
		return nil
	}
}

// await waits for every expected delivery, the context's end, or a stall: no delivery
// for cfg.Stall. It reports whether every delivery arrived.
func (r *runner) await(ctx context.Context, comp *completion, sinks []*sink) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := received(sinks), time.Now()
	for {
		select {
		case <-comp.done:
			return true
		case <-ctx.Done():
			return false
		case now := <-tick.C:
			if n := received(sinks); n != last {
				last, lastChange = n, now
			} else if now.Sub(lastChange) >= r.cfg.Stall {
				return false
			}
		}
	}
}

func received(sinks []*sink) uint64 {
	var n uint64
	for _, s := range sinks {
		n += s.count.Load()
	}
	return n
}

// settle waits until the delivery counts stop moving, so that every handler that
// passed its frozen check has finished recording.
func settle(sinks []*sink) {
	prev := received(sinks)
	for range 50 {
		time.Sleep(2 * time.Millisecond)
		n := received(sinks)
		if n == prev {
			return
		}
		prev = n
	}
}

// reqrep runs the request/reply workload.
func (r *runner) reqrep(ctx context.Context) (Result, error) {
	cfg := r.cfg
	res := Result{Mode: cfg.Mode, Subject: cfg.Subject, Pubs: cfg.Pubs, Subs: cfg.Subs, Size: cfg.Size, Msgs: cfg.Msgs}
	echo := func(req []byte) []byte { return req }
	for i := range cfg.Subs {
		bus, err := r.open(connName(RoleResponder, i))
		if err != nil {
			return res, err
		}
		unsub, err := bus.Respond(cfg.Subject, cfg.Queue, echo)
		if err != nil {
			return res, fmt.Errorf("loadgen: respond: %w", err)
		}
		r.unsubs = append(r.unsubs, unsub)
		if err := r.addProbe(bus, i); err != nil {
			return res, err
		}
		if err := bus.Flush(); err != nil {
			return res, fmt.Errorf("loadgen: flush after subscribe: %w", err)
		}
	}

	warm := make(chan error, cfg.Pubs)
	requester := func(bus Bus, g *gate) pubResult {
		res := pubResult{hist: newHistogram()}
		buf := make([]byte, cfg.Size)
		// One untimed request first, so that setting up the reply subscription is
		// not part of the measurement.
		wctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := bus.Request(wctx, cfg.Subject, buf)
		cancel()
		warm <- err
		<-g.open
		p := pacer{start: g.start}
		if cfg.Rate > 0 {
			p.interval = float64(time.Second) / float64(cfg.Rate)
		}
		consecutive := 0
		for i := 0; !g.done(&r.cfg, i); i++ {
			p.wait(i)
			if len(buf) >= stampLen {
				binary.LittleEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
			}
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			t0 := time.Now()
			resp, err := bus.Request(rctx, cfg.Subject, buf)
			rtt := time.Since(t0)
			cancel()
			res.sent++
			if err != nil {
				res.errs++
				if consecutive++; consecutive >= maxConsecutiveErrors/10 || ctx.Err() != nil {
					res.err = fmt.Errorf("request: %w", err)
					break
				}
				continue
			}
			consecutive = 0
			res.received++
			record(res.hist, int64(rtt))
			if len(resp) != len(buf) {
				res.errs++
			}
		}
		return res
	}

	g := &gate{open: make(chan struct{})}
	done, err := r.startPublishers(ctx, RoleReq, g, requester)
	if err != nil {
		return res, err
	}
	for range cfg.Pubs {
		if err := <-warm; err != nil {
			g.stop.Store(true)
			close(g.open)
			<-done
			return res, fmt.Errorf("loadgen: first request: %w", err)
		}
	}
	g.release(cfg.Duration)
	var reqs []pubResult
	select {
	case reqs = <-done:
	case <-ctx.Done():
		g.stop.Store(true)
		reqs = waitPublishers(done)
	}
	res.Elapsed = time.Since(g.start)
	hist := newHistogram()
	var errs []error
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrIncomplete, err))
	}
	for _, q := range reqs {
		res.Sent += q.sent
		res.Received += q.received
		res.Errors += q.errs
		if q.err != nil {
			errs = append(errs, q.err)
		}
		hist.Merge(q.hist)
	}
	res.Expected = res.Sent
	res.Latency = percentilesOf(hist)
	res.finish()
	if reqs == nil || res.Received != res.Expected {
		errs = append(errs, fmt.Errorf("%w: %d of %d replies arrived", ErrIncomplete, res.Received, res.Expected))
	}
	return res, errors.Join(errs...)
}
