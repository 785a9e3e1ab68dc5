package streambench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// maxConsecutiveErrors ends a publisher or consumer that keeps failing (the stream
// is gone, the connection is closed) instead of spinning until the timeout.
const maxConsecutiveErrors = 1000

// cleanupTimeout bounds deleting the run's stream (a large stream takes a while).
const cleanupTimeout = time.Minute

// stuckGrace is how long a stopped publisher may stay blocked in PublishAsync before
// the run gives up on it (a variable for the tests).
var stuckGrace = 10 * time.Second

var (
	errTimeout = errors.New("timed out")
	errStalled = errors.New("stalled")
)

// Run creates a stream, runs one workload against it through d, deletes the stream
// and returns what it measured. It closes every connection it opened. A run that ended
// before every message was acknowledged or consumed returns its partial Result with an
// error wrapping ErrIncomplete; one that broke a delivery guarantee, with an error
// wrapping ErrViolation.
func Run(ctx context.Context, d Driver, cfg Config) (Result, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return Result{}, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	tag := hex.EncodeToString(id)
	r := &runner{cfg: cfg, driver: d, stream: "SB_" + tag, subject: "sb." + tag}
	r.res = Result{Workload: cfg.Workload, Stream: r.stream, Size: cfg.Size, Msgs: cfg.Msgs, Replicas: max(1, cfg.Replicas)}

	ctx, cancelTimeout := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("%w after %s", errTimeout, cfg.Timeout))
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.touch()
	stopWatch := r.watch(ctx, cancel)
	defer stopWatch()
	defer r.cleanup()

	switch cfg.Workload {
	case WorkPubAsync:
		err = r.pubAsync(ctx)
	case WorkPubSync:
		err = r.pubSync(ctx)
	case WorkFetch:
		err = r.fetch(ctx)
	case WorkReplay:
		err = r.replay(ctx)
	case WorkWorkQueue:
		err = r.workQueue(ctx)
	}
	r.res.finish()
	check := r.res.check()
	switch {
	case err == nil:
		err = check
	case errors.Is(check, ErrIncomplete) && !errors.Is(err, ErrIncomplete):
		err = fmt.Errorf("%w: %w", check, err)
	}
	if err != nil && ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
			err = fmt.Errorf("%w (%v)", err, c)
		}
	}
	return r.res, err
}

type runner struct {
	cfg     Config
	driver  Driver
	stream  string
	subject string
	res     Result

	mu      sync.Mutex
	conns   []Conn
	created bool

	progress atomic.Int64 // time of the latest acknowledgement or delivery (UnixNano)
}

// touch records progress for the stall detector.
func (r *runner) touch() { r.progress.Store(time.Now().UnixNano()) }

// watch cancels ctx once no progress was recorded for cfg.Stall.
func (r *runner) watch(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(min(r.cfg.Stall/4, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				if now.UnixNano()-r.progress.Load() > int64(r.cfg.Stall) {
					cancel(fmt.Errorf("%w: nothing acknowledged or delivered for %s", errStalled, r.cfg.Stall))
					return
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (r *runner) observe(point string) {
	if point == ObserveReady && r.cfg.Replicas > 1 {
		r.locateLeader()
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(point)
		r.touch()
	}
}

// locateLeader notes which server leads the stream, as the first connection
// sees it, when its driver can tell.
func (r *runner) locateLeader() {
	r.mu.Lock()
	var c Conn
	if len(r.conns) > 0 {
		c = r.conns[0]
	}
	r.mu.Unlock()
	ll, ok := c.(LeaderLocator)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if leader, local, err := ll.StreamLeader(ctx, r.stream); err == nil {
		r.res.Leader, r.res.LeaderLocal = leader, local
	}
	r.touch()
}

// connect opens a connection the run closes at the end.
func (r *runner) connect(ctx context.Context, role string) (Conn, error) {
	c, err := r.driver.Connect(ctx, r.cfg.Name+"-"+role)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", role, err)
	}
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	return c, nil
}

// createStream creates the run's stream over c.
func (r *runner) createStream(ctx context.Context, c Conn, retention Retention) error {
	spec := StreamSpec{Name: r.stream, Subjects: []string{r.subject}, Retention: retention, Storage: StorageFile, Sync: r.cfg.Sync,
		Replicas: r.cfg.Replicas}
	if err := c.CreateStream(ctx, spec); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	r.mu.Lock()
	r.created = true
	r.mu.Unlock()
	r.touch()
	return nil
}

// cleanup deletes the stream (over a fresh connection if need be) and closes every
// connection.
func (r *runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	r.mu.Lock()
	conns, created := r.conns, r.created
	r.mu.Unlock()
	if created {
		var c Conn
		if len(conns) > 0 {
			c = conns[0]
		} else if nc, err := r.driver.Connect(ctx, r.cfg.Name+"-cleanup"); err == nil {
			c = nc
			conns = append(conns, nc)
		}
		if c != nil {
			if err := c.DeleteStream(ctx, r.stream); err != nil {
				// A closed first connection (the driver's fault) should not leave
				// the stream behind: try once more on a new one.
				if nc, err2 := r.driver.Connect(ctx, r.cfg.Name+"-cleanup"); err2 == nil {
					_ = nc.DeleteStream(ctx, r.stream)
					_ = nc.Close()
				}
			}
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// payloadBuffer is a publisher's buffer number i: zero bytes, or random ones
// (Config.RandomPayloads), the same from run to run.
func (r *runner) payloadBuffer(i uint64) []byte {
	buf := make([]byte, r.cfg.Size)
	if r.cfg.RandomPayloads {
		rng := mathrand.New(mathrand.NewPCG(i, uint64(len(buf))))
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
	}
	return buf
}

// payload fills buf for message seq (1-based), with the publish time if stamp.
func payload(buf []byte, seq uint64, stamp bool) {
	binary.LittleEndian.PutUint64(buf, seq)
	if stamp {
		binary.LittleEndian.PutUint64(buf[seqLen:], uint64(time.Now().UnixNano()))
	}
}

// failedFuture stands for a PublishAsync call that failed, so the collector sees
// every message in order.
type failedFuture struct{ err error }

func (f failedFuture) Wait(context.Context) error { return f.err }

// pubStats is what one async publishing pass did.
type pubStats struct {
	sent, acked, failed uint64
	start, lastAck      time.Time
	err                 error // what stopped it early
}

// publishAsync publishes messages 1..n to the run's subject over c, keeping at most
// cfg.Window unacknowledged, and waits for every acknowledgement. Payloads come from a
// ring of Window buffers: buffer i%Window is reused only once message i's future
// resolved, because futures are collected in publish order and the window never holds
// more than Window of them.
func (r *runner) publishAsync(ctx context.Context, c Conn, n int, stamp bool) pubStats {
	w := r.cfg.Window
	sem := make(chan struct{}, w)
	futures := make(chan PubFuture, w)
	ring := make([][]byte, min(w, n))
	for i := range ring {
		ring[i] = r.payloadBuffer(uint64(i))
	}
	var (
		st       pubStats
		sent     atomic.Uint64
		pubErr   error
		finished = make(chan struct{})
	)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	st.start = time.Now()
	go func() {
		defer close(finished)
		defer close(futures)
		consecutive := 0
		for i := range n {
			select {
			case sem <- struct{}{}:
			case <-pctx.Done():
				return
			}
			buf := ring[i%len(ring)]
			payload(buf, uint64(i+1), stamp)
			f, err := c.PublishAsync(r.subject, buf)
			sent.Add(1)
			if err != nil {
				f = failedFuture{err}
				if consecutive++; consecutive >= maxConsecutiveErrors {
					futures <- f
					pubErr = fmt.Errorf("publish: %d failures in a row, the last: %w", consecutive, err)
					return
				}
			} else {
				consecutive = 0
			}
			futures <- f
		}
	}()
	consecutive := 0
collect:
	for {
		var f PubFuture
		select {
		case next, ok := <-futures:
			if !ok {
				break collect
			}
			f = next
		case <-ctx.Done():
			// The run ended (stall, timeout) while PublishAsync was blocked.
			break collect
		}
		err := f.Wait(ctx)
		if err != nil && ctx.Err() != nil {
			break // not a failure: the run ended before the ack came
		}
		<-sem
		if err != nil {
			st.failed++
			if consecutive++; consecutive >= maxConsecutiveErrors {
				st.err = fmt.Errorf("publish: %d failures in a row, the last: %w", consecutive, err)
				break
			}
			continue
		}
		consecutive = 0
		st.acked++
		st.lastAck = time.Now()
		if st.acked&63 == 0 {
			r.touch()
		}
	}
	stop()
	select {
	case <-finished:
		if st.err == nil {
			st.err = pubErr
		}
	case <-time.After(stuckGrace):
		// A driver breaking its contract: PublishAsync blocked. Do not hang with it.
		if st.err == nil {
			st.err = fmt.Errorf("PublishAsync still blocked %s after the publisher was stopped", stuckGrace)
		}
	}
	st.sent = sent.Load()
	if st.err == nil && ctx.Err() != nil {
		st.err = context.Cause(ctx)
	}
	return st
}

// prefill fills the stream with cfg.Msgs messages, untimed.
func (r *runner) prefill(ctx context.Context, c Conn) error {
	start := time.Now()
	st := r.publishAsync(ctx, c, r.cfg.Msgs, false)
	r.res.Prefill = time.Since(start)
	if st.acked != uint64(r.cfg.Msgs) {
		err := fmt.Errorf("%w: pre-fill: %d of %d messages acknowledged, %d failed", ErrIncomplete, st.acked, r.cfg.Msgs, st.failed)
		if st.err != nil {
			err = fmt.Errorf("%w: %w", err, st.err)
		}
		return err
	}
	return nil
}

func (r *runner) pubAsync(ctx context.Context) error {
	c, err := r.connect(ctx, "pub")
	if err != nil {
		return err
	}
	if err := r.createStream(ctx, c, RetainLimits); err != nil {
		return err
	}
	r.res.Window = r.cfg.Window
	r.observe(ObserveReady)
	st := r.publishAsync(ctx, c, r.cfg.Msgs, false)
	r.res.Published, r.res.Acked, r.res.PubFailed = st.sent, st.acked, st.failed
	r.res.Errors += int(st.failed)
	if st.acked > 0 {
		r.res.Elapsed = st.lastAck.Sub(st.start)
	}
	r.observe(ObserveDone)
	return st.err
}

func (r *runner) pubSync(ctx context.Context) error {
	c, err := r.connect(ctx, "pub")
	if err != nil {
		return err
	}
	if err := r.createStream(ctx, c, RetainLimits); err != nil {
		return err
	}
	r.observe(ObserveReady)
	h := newHist()
	buf := r.payloadBuffer(0)
	consecutive := 0
	var stopErr error
	start := time.Now()
	var last time.Time
	for i := range r.cfg.Msgs {
		payload(buf, uint64(i+1), false)
		t0 := time.Now()
		err := c.PublishSync(ctx, r.subject, buf)
		if err != nil && ctx.Err() != nil {
			stopErr = context.Cause(ctx)
			break
		}
		last = time.Now()
		r.res.Published++
		if err != nil {
			r.res.PubFailed++
			r.res.Errors++
			if consecutive++; consecutive >= maxConsecutiveErrors {
				stopErr = fmt.Errorf("publish: %d failures in a row, the last: %w", consecutive, err)
				break
			}
			continue
		}
		consecutive = 0
		record(h, last.Sub(t0).Nanoseconds())
		r.res.Acked++
		r.touch()
	}
	if !last.IsZero() {
		r.res.Elapsed = last.Sub(start)
	}
	r.res.Latency = percentilesOf(h)
	r.observe(ObserveDone)
	return stopErr
}

// tracker counts deliveries per sequence number; safe for concurrent use.
type tracker struct {
	n       uint64
	counts  []atomic.Uint32
	unique  atomic.Uint64
	dups    atomic.Uint64
	foreign atomic.Uint64 // payloads whose sequence number is out of range
}

func newTracker(n int) *tracker { return &tracker{n: uint64(n), counts: make([]atomic.Uint32, n)} }

// see records one delivery and reports whether it was the first of its message.
func (t *tracker) see(data []byte) bool {
	if len(data) < seqLen {
		t.foreign.Add(1)
		return false
	}
	seq := binary.LittleEndian.Uint64(data)
	if seq == 0 || seq > t.n {
		t.foreign.Add(1)
		return false
	}
	if t.counts[seq-1].Add(1) == 1 {
		t.unique.Add(1)
		return true
	}
	t.dups.Add(1)
	return false
}

func (r *runner) fetch(ctx context.Context) error {
	c, err := r.connect(ctx, "fetch")
	if err != nil {
		return err
	}
	if err := r.createStream(ctx, c, RetainLimits); err != nil {
		return err
	}
	if err := r.prefill(ctx, c); err != nil {
		return err
	}
	policy := AckExplicit
	if r.cfg.AckAll {
		policy = AckAll
	}
	r.res.Batch, r.res.AckAll = r.cfg.Batch, r.cfg.AckAll
	const durable = "fetch"
	spec := ConsumerSpec{Durable: durable, AckPolicy: policy, MaxAckPending: r.cfg.MaxAckPending, AckWait: r.cfg.AckWait}
	if err := c.AddConsumer(ctx, r.stream, spec); err != nil {
		return fmt.Errorf("add consumer: %w", err)
	}
	cons, err := c.Pull(ctx, r.stream, durable)
	if err != nil {
		return fmt.Errorf("bind consumer: %w", err)
	}
	defer cons.Close()
	r.observe(ObserveReady)

	t := newTracker(r.cfg.Msgs)
	n := uint64(r.cfg.Msgs)
	var (
		received uint64
		errs     int
		last     Msg
		stopErr  error
	)
	consecutive := 0
	handler := func(m Msg) {
		received++
		t.see(m.Data())
		if r.cfg.AckAll {
			last = m
			return
		}
		if err := m.Ack(); err != nil {
			errs++
		}
	}
	start := time.Now()
	end := start
	for t.unique.Load() < n {
		last = nil
		want := min(uint64(r.cfg.Batch), n-t.unique.Load())
		got, err := cons.Fetch(ctx, int(want), r.cfg.MaxWait, handler)
		if last != nil {
			if err := last.Ack(); err != nil {
				errs++
			}
		}
		if got > 0 {
			end = time.Now()
			r.touch()
		}
		if err != nil {
			if ctx.Err() != nil {
				stopErr = context.Cause(ctx)
				break
			}
			errs++
			if consecutive++; consecutive >= maxConsecutiveErrors {
				stopErr = fmt.Errorf("fetch: %d failures in a row, the last: %w", consecutive, err)
				break
			}
			continue
		}
		consecutive = 0
	}
	r.res.Elapsed = end.Sub(start)
	r.res.Received, r.res.Unique, r.res.Duplicates = received, t.unique.Load(), t.dups.Load()
	r.res.Errors += errs + int(t.foreign.Load())
	r.observe(ObserveDone)
	return stopErr
}

func (r *runner) replay(ctx context.Context) error {
	c, err := r.connect(ctx, "prefill")
	if err != nil {
		return err
	}
	if err := r.createStream(ctx, c, RetainLimits); err != nil {
		return err
	}
	if err := r.prefill(ctx, c); err != nil {
		return err
	}
	reader, err := r.connect(ctx, "reader")
	if err != nil {
		return err
	}
	r.observe(ObserveReady)

	t := newTracker(r.cfg.Msgs)
	n := uint64(r.cfg.Msgs)
	var received, outOfOrder, prev uint64
	var end time.Time
	start := time.Now()
	err = reader.Replay(ctx, r.stream, func(data []byte) bool {
		received++
		if len(data) >= seqLen {
			seq := binary.LittleEndian.Uint64(data)
			if seq != prev+1 {
				outOfOrder++
			}
			prev = seq
		}
		t.see(data)
		if received&255 == 0 {
			r.touch()
		}
		if t.unique.Load() >= n {
			end = time.Now()
			return false
		}
		return true
	})
	if end.IsZero() {
		end = time.Now()
	}
	r.res.Elapsed = end.Sub(start)
	r.res.Received, r.res.Unique, r.res.Duplicates, r.res.OutOfOrder = received, t.unique.Load(), t.dups.Load(), outOfOrder
	r.res.Errors += int(t.foreign.Load())
	r.observe(ObserveDone)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.res.Errors++
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

func (r *runner) workQueue(ctx context.Context) error {
	pub, err := r.connect(ctx, "wq-pub")
	if err != nil {
		return err
	}
	if err := r.createStream(ctx, pub, RetainWorkQueue); err != nil {
		return err
	}
	const durable = "wq"
	spec := ConsumerSpec{Durable: durable, AckPolicy: AckExplicit, MaxAckPending: r.cfg.MaxAckPending, AckWait: r.cfg.AckWait}
	if err := pub.AddConsumer(ctx, r.stream, spec); err != nil {
		return fmt.Errorf("add consumer: %w", err)
	}
	nc := r.cfg.Consumers
	consumers := make([]Consumer, nc)
	for i := range consumers {
		c, err := r.connect(ctx, fmt.Sprintf("wq-consumer-%d", i))
		if err != nil {
			return err
		}
		if consumers[i], err = c.Pull(ctx, r.stream, durable); err != nil {
			return fmt.Errorf("bind consumer %d: %w", i, err)
		}
		defer consumers[i].Close()
	}
	r.res.Window, r.res.Batch, r.res.Consumers = r.cfg.Window, r.cfg.Batch, nc
	r.observe(ObserveReady)

	t := newTracker(r.cfg.Msgs)
	n := uint64(r.cfg.Msgs)
	stamp := r.cfg.Size >= stampEnd
	var (
		endOnce  sync.Once
		end      time.Time
		complete = make(chan struct{})
		wg       sync.WaitGroup
	)
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	type consumerResult struct {
		received uint64
		errs     int
		err      error
		hist     *hdrhistogram.Histogram
	}
	results := make([]consumerResult, nc)
	for i, cons := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cr := &results[i]
			cr.hist = newHist()
			consecutive := 0
			handler := func(m Msg) {
				now := time.Now()
				data := m.Data()
				cr.received++
				if stamp && len(data) >= stampEnd {
					record(cr.hist, now.UnixNano()-int64(binary.LittleEndian.Uint64(data[seqLen:])))
				}
				first := t.see(data)
				if err := m.Ack(); err != nil {
					cr.errs++
				}
				if cr.received&63 == 0 {
					r.touch()
				}
				if first && t.unique.Load() == n {
					endOnce.Do(func() { end = time.Now(); close(complete) })
				}
			}
			for cctx.Err() == nil {
				_, err := cons.Fetch(cctx, r.cfg.Batch, r.cfg.MaxWait, handler)
				if err != nil {
					if cctx.Err() != nil {
						return
					}
					cr.errs++
					if consecutive++; consecutive >= maxConsecutiveErrors {
						cr.err = fmt.Errorf("consumer %d: fetch: %d failures in a row, the last: %w", i, consecutive, err)
						return
					}
					continue
				}
				consecutive = 0
			}
		}()
	}

	st := r.publishAsync(ctx, pub, r.cfg.Msgs, stamp)
	var stopErr error
	if st.err != nil {
		stopErr = st.err
	} else {
		select {
		case <-complete:
		case <-ctx.Done():
			stopErr = context.Cause(ctx)
		}
	}
	stopConsumers()
	wg.Wait()
	if end.IsZero() {
		end = time.Now()
	}
	r.res.Elapsed = end.Sub(st.start)
	r.res.Published, r.res.Acked, r.res.PubFailed = st.sent, st.acked, st.failed
	r.res.Errors += int(st.failed) + int(t.foreign.Load())
	h := newHist()
	for _, cr := range results {
		r.res.PerConsumer = append(r.res.PerConsumer, cr.received)
		r.res.Received += cr.received
		r.res.Errors += cr.errs
		h.Merge(cr.hist)
		if stopErr == nil && cr.err != nil {
			stopErr = cr.err
		}
	}
	r.res.Unique, r.res.Duplicates = t.unique.Load(), t.dups.Load()
	r.res.Latency = percentilesOf(h)

	// Every message was acknowledged: the work queue must drain to empty (the last
	// acks may still be on their way, so give it up to Stall; untimed).
	if stopErr == nil && r.res.Unique == n {
		deadline := time.Now().Add(r.cfg.Stall)
		for {
			s, err := pub.StreamState(ctx, r.stream)
			if err != nil {
				r.res.Errors++
				break
			}
			r.res.Leftover = s.Msgs
			if s.Msgs == 0 || time.Now().After(deadline) {
				break
			}
			r.touch()
			time.Sleep(20 * time.Millisecond)
		}
	}
	r.observe(ObserveDone)
	return stopErr
}
