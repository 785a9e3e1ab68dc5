package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// failoverConfig is one failover run against a running cluster: a stream of
// Replicas replicas, a publisher at Rate messages/s for Duration, and kill -9 of the
// stream's leader KillAt after the first publish.
type failoverConfig struct {
	System   system
	URLs     []string // client URLs, node order
	Names    []string // the nodes' names as the stream's group reports its leader, node order
	PIDs     []int    // the nodes' processes, node order
	Run      int
	Stream   string
	Replicas int
	Rate     int
	Duration time.Duration
	KillAt   time.Duration
	Size     int
	// ClientOn is where the publisher connects: "follower" (a node that does not
	// lead the stream, so the kill does not break its connection) or "leader" (the
	// node killed, so its client also has to move to another node).
	ClientOn string
	// RetryWait is the first wait before a failed publish is sent again (doubling
	// up to RetryMaxWait); RetryFor is how long after its first attempt a message is
	// retried at all before it counts as a client-visible error.
	RetryWait, RetryMaxWait, RetryFor time.Duration
	// ReadyTimeout bounds making the stream and waiting until every replica is
	// current; ReadTimeout bounds reading the stream back.
	ReadyTimeout, ReadTimeout time.Duration
	// Kill kills a node's process (kill -9).
	Kill func(pid int) error
	Log  io.Writer
}

// failoverResult is one run. Times are milliseconds from the kill.
type failoverResult struct {
	System    string  `json:"system"`
	Version   string  `json:"version"`
	Run       int     `json:"run"`
	ClientOn  string  `json:"client_on"`
	Client    string  `json:"client_node"`
	Leader    string  `json:"leader"`     // the node killed
	NewLeader string  `json:"new_leader"` // the stream's leader when read back
	Rate      int     `json:"rate"`
	DurationS float64 `json:"duration_s"`
	KillAtS   float64 `json:"kill_at_s"`
	Size      int     `json:"size"`

	// Messages is how many distinct messages (ids) were published; Attempts the
	// publishes sent in all, retries included.
	Messages int `json:"messages"`
	Attempts int `json:"attempts"`
	Acked    int `json:"acked"`
	// AckedDuplicate: acknowledgements saying the stream already had the id (a retry
	// of a message stored before).
	AckedDuplicate int `json:"acked_duplicate"`
	// Retried: messages that needed more than one attempt.
	Retried int `json:"retried"`
	// Errors counts what the client returned for an attempt (each then retried),
	// by kind; FirstErrorMs and LastErrorMs when the first and last came.
	Errors       map[string]int `json:"errors,omitempty"`
	FirstErrorMs float64        `json:"first_error_ms,omitempty"`
	LastErrorMs  float64        `json:"last_error_ms,omitempty"`
	// Failed: messages still not acknowledged after RetryFor of retries: the errors
	// an application would see; by kind in FailedKinds.
	Failed      int            `json:"failed"`
	FailedKinds map[string]int `json:"failed_kinds,omitempty"`
	// TimeoutsSentMs: when (from the kill) the attempts that got no answer at all
	// (ack timeout) had been sent, in order, at most maxTimeoutsListed.
	TimeoutsSentMs []float64 `json:"timeouts_sent_ms,omitempty"`

	// FirstAckMs: the first acknowledgement of a publish sent after the kill.
	FirstAckMs float64 `json:"first_ack_ms"`
	// LongestGapMs: the longest time without any acknowledgement while the
	// publisher was publishing, and when (from the kill) it began.
	LongestGapMs      float64 `json:"longest_gap_ms"`
	LongestGapStartMs float64 `json:"longest_gap_start_ms"`
	// MaxLatencyMs: the longest a message took from its first attempt to its
	// acknowledgement; Delayed: messages that took more than a second.
	MaxLatencyMs float64 `json:"max_latency_ms"`
	Delayed      int     `json:"delayed"`
	// InFlightDoneMs: every message first sent before the kill is acknowledged (by
	// retries where needed); 0 when none was waiting.
	InFlightDoneMs float64 `json:"in_flight_done_ms"`
	// ClientDisconnectedMs, ClientReconnectedMs: the publisher's client lost its
	// server and got another (leader placement only).
	ClientDisconnectedMs float64 `json:"client_disconnected_ms,omitempty"`
	ClientReconnectedMs  float64 `json:"client_reconnected_ms,omitempty"`
	ClientReconnectedTo  string  `json:"client_reconnected_to,omitempty"`
	// ScheduleLagMaxMs: how far the publisher fell behind its schedule (a full
	// window of unacknowledged publishes holds PublishAsync).
	ScheduleLagMaxMs float64 `json:"schedule_lag_max_ms"`

	// Read back from the surviving nodes: Stored messages in the stream; Lost
	// acknowledged ids missing; Duplicated ids stored more than once; StoredUnacked
	// ids stored but never acknowledged; Foreign payloads that are no id of the run.
	Stored        uint64 `json:"stored"`
	Lost          int    `json:"lost"`
	Duplicated    int    `json:"duplicated"`
	StoredUnacked int    `json:"stored_unacked"`
	Foreign       int    `json:"foreign"`

	Busy  bool   `json:"busy,omitempty"` // the machine was busy before the run
	Error string `json:"error,omitempty"`
}

// msgState is one message's history, written by the goroutine that publishes it.
type msgState struct {
	firstSent int64 // Unix ns
	ackAt     int64 // Unix ns; 0: never acknowledged
	ackSent   int64 // when the acknowledged attempt was sent
	attempts  int
	dup       bool
	failed    string
}

// errLog counts attempt errors by kind, with the first and last time, and keeps
// when the attempts that timed out were sent.
type errLog struct {
	mu           sync.Mutex
	kinds        map[string]int
	first, last  int64
	timeoutsSent []int64
}

// maxTimeoutsListed bounds failoverResult.TimeoutsSentMs.
const maxTimeoutsListed = 100

func (e *errLog) add(err error, at, sent int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	kind := errKind(err)
	e.kinds[kind]++
	if kind == "ack timeout" && len(e.timeoutsSent) < maxTimeoutsListed {
		e.timeoutsSent = append(e.timeoutsSent, sent)
	}
	if e.first == 0 || at < e.first {
		e.first = at
	}
	e.last = max(e.last, at)
}

// payload is message i of a run: its number in the first 8 bytes, padded to size.
func payload(i, size int) []byte {
	b := make([]byte, max(size, 8))
	copy(b, fmt.Sprintf("%08d", i))
	for j := 8; j < len(b); j++ {
		b[j] = '.'
	}
	return b
}

func payloadIndex(b []byte) (int, bool) {
	if len(b) < 8 {
		return 0, false
	}
	n, err := strconv.Atoi(string(b[:8]))
	return n, err == nil && n >= 0
}

func msDiff(a, b int64) float64 { return float64(a-b) / 1e6 }

func runFailover(ctx context.Context, cfg failoverConfig) failoverResult {
	res := failoverResult{System: cfg.System.Name(), Run: cfg.Run, ClientOn: cfg.ClientOn, Rate: cfg.Rate,
		DurationS: cfg.Duration.Seconds(), KillAtS: cfg.KillAt.Seconds(), Size: cfg.Size}
	if err := failover(ctx, cfg, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func failover(ctx context.Context, cfg failoverConfig, res *failoverResult) error {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format+"\n", a...) }
	sys := cfg.System
	subject := "failover." + strconv.Itoa(cfg.Run)

	// The stream, made through node 1 once the cluster takes it (a fresh cluster may
	// still be forming its meta group), and every replica current.
	readyCtx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	adm, err := retry(readyCtx, func() (admin, error) { return sys.admin(readyCtx, cfg.URLs) })
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	res.Version = adm.Version()
	if _, err := retry(readyCtx, func() (struct{}, error) {
		return struct{}{}, adm.CreateStream(readyCtx, cfg.Stream, []string{subject}, cfg.Replicas)
	}); err != nil {
		adm.Close()
		return fmt.Errorf("create stream %s: %w", cfg.Stream, err)
	}
	g, err := retry(readyCtx, func() (group, error) {
		g, err := adm.Group(readyCtx, cfg.Stream)
		if err == nil && !g.ready(cfg.Replicas) {
			err = fmt.Errorf("group not ready: leader %q, %d of %d replicas current", g.Leader, g.Current, cfg.Replicas)
		}
		return g, err
	})
	adm.Close()
	if err != nil {
		return fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	leader := slices.Index(cfg.Names, g.Leader)
	if leader < 0 {
		return fmt.Errorf("leader %q is none of the nodes %v", g.Leader, cfg.Names)
	}
	res.Leader = g.Leader
	client := leader
	if cfg.ClientOn != "leader" {
		client = (leader + 1) % len(cfg.URLs)
	}
	res.Client = cfg.Names[client]
	// The client's list: its node first, then the others in node order.
	order := []int{client}
	for i := range cfg.URLs {
		if i != client {
			order = append(order, i)
		}
	}
	var urls []string
	for _, i := range order {
		urls = append(urls, cfg.URLs[i])
	}
	logf("%s run %d: stream %s led by %s; publisher on %s (%s); kill -9 of %s (pid %d) at %s",
		sys.Name(), cfg.Run, cfg.Stream, g.Leader, res.Client, cfg.ClientOn, g.Leader, cfg.PIDs[leader], cfg.KillAt)

	ev := &clientEvents{}
	pub, err := sys.publisher(urls, ev)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	defer pub.Close()

	// --- publish at the rate, kill at KillAt --------------------------------------
	n := int(int64(cfg.Rate) * int64(cfg.Duration) / int64(time.Second))
	msgs := make([]msgState, n)
	var (
		errs     errLog
		attempts atomic.Int64
		killAt   atomic.Int64
		killed   = make(chan error, 1)
		wg       sync.WaitGroup
	)
	// Every goroutine ends by this deadline: the last message's retries, and its last
	// attempt's acknowledgement wait.
	runCtx, cancelRun := context.WithTimeout(ctx, cfg.Duration+cfg.RetryFor+ackTimeout+30*time.Second)
	defer cancelRun()
	send := func(i int) (future, int64, error) {
		attempts.Add(1)
		at := time.Now().UnixNano()
		f, err := pub.PublishAsync(subject, payload(i, cfg.Size), "r"+strconv.Itoa(cfg.Run)+"-"+strconv.Itoa(i))
		return f, at, err
	}
	follow := func(i int, f future, sentAt int64, err error) {
		defer wg.Done()
		m := &msgs[i]
		wait := cfg.RetryWait
		for {
			if err == nil {
				var dup bool
				if dup, err = f.Wait(runCtx); err == nil {
					m.ackAt, m.ackSent, m.dup = time.Now().UnixNano(), sentAt, dup
					return
				}
			}
			now := time.Now()
			errs.add(err, now.UnixNano(), sentAt)
			if runCtx.Err() != nil || now.Sub(time.Unix(0, m.firstSent)) >= cfg.RetryFor {
				m.failed = errKind(err)
				return
			}
			select {
			case <-time.After(wait):
			case <-runCtx.Done():
				m.failed = errKind(runCtx.Err())
				return
			}
			wait = min(wait*2, cfg.RetryMaxWait)
			m.attempts++
			f, sentAt, err = send(i)
		}
	}

	start := time.Now()
	killTimer := time.AfterFunc(cfg.KillAt, func() {
		killAt.Store(time.Now().UnixNano())
		killed <- cfg.Kill(cfg.PIDs[leader])
	})
	defer killTimer.Stop()
	var lagMax time.Duration
	for i := 0; i < n && runCtx.Err() == nil; i++ {
		target := start.Add(time.Duration(int64(i) * int64(time.Second) / int64(cfg.Rate)))
		if d := time.Until(target); d > 0 {
			time.Sleep(d)
		} else {
			lagMax = max(lagMax, -d)
		}
		f, at, err := send(i)
		msgs[i].firstSent, msgs[i].attempts = at, 1
		wg.Add(1)
		go follow(i, f, at, err)
	}
	wg.Wait()
	if killTimer.Stop() {
		return errors.New("the run ended before the kill (duration shorter than kill-at?)")
	}
	if err := <-killed; err != nil {
		return fmt.Errorf("kill -9 of pid %d: %w", cfg.PIDs[leader], err)
	}
	kill := killAt.Load()
	if err := ctx.Err(); err != nil {
		return err
	}
	res.Attempts = int(attempts.Load())
	res.ScheduleLagMaxMs = float64(lagMax) / 1e6
	summarize(res, msgs, &errs, kill)
	if d := ev.disconnected.Load(); d != 0 {
		res.ClientDisconnectedMs = msDiff(d, kill)
	}
	if r := ev.reconnected.Load(); r != 0 {
		res.ClientReconnectedMs = msDiff(r, kill)
		res.ClientReconnectedTo = ev.to()
	}
	pub.Close()

	// --- read the stream back from the surviving nodes ----------------------------
	var survivors []string
	for _, i := range order {
		if i != leader {
			survivors = append(survivors, cfg.URLs[i])
		}
	}
	readCtx, cancelRead := context.WithTimeout(ctx, cfg.ReadTimeout)
	defer cancelRead()
	adm, err = retry(readCtx, func() (admin, error) { return sys.admin(readCtx, survivors) })
	if err != nil {
		return fmt.Errorf("read back: connect: %w", err)
	}
	defer adm.Close()
	g, err = retry(readCtx, func() (group, error) {
		g, err := adm.Group(readCtx, cfg.Stream)
		if err == nil && g.Leader == "" {
			err = errors.New("no leader")
		}
		return g, err
	})
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	res.NewLeader = g.Leader
	stored, err := adm.State(readCtx, cfg.Stream)
	if err != nil {
		return fmt.Errorf("read back: stream state: %w", err)
	}
	res.Stored = stored
	seen := make([]int, n)
	var got uint64
	if stored > 0 {
		err = adm.Replay(readCtx, cfg.Stream, func(data []byte) bool {
			got++
			if i, ok := payloadIndex(data); ok && i < n {
				seen[i]++
			} else {
				res.Foreign++
			}
			return got < stored
		})
		if err != nil {
			return fmt.Errorf("read back: %d of %d messages: %w", got, stored, err)
		}
	}
	check(res, msgs, seen)
	return nil
}

// summarize fills the publisher's side of res from the messages' histories.
func summarize(res *failoverResult, msgs []msgState, errs *errLog, kill int64) {
	res.Messages = len(msgs)
	end := int64(0) // the publisher's last first attempt
	for i := range msgs {
		end = max(end, msgs[i].firstSent)
	}
	var acks []int64
	firstAck, inFlightDone := int64(0), int64(0)
	for i := range msgs {
		m := &msgs[i]
		if m.attempts > 1 {
			res.Retried++
		}
		if m.ackAt == 0 {
			res.Failed++
			if res.FailedKinds == nil {
				res.FailedKinds = map[string]int{}
			}
			res.FailedKinds[m.failed]++
			continue
		}
		res.Acked++
		if m.dup {
			res.AckedDuplicate++
		}
		if m.ackAt <= end {
			acks = append(acks, m.ackAt)
		}
		lat := m.ackAt - m.firstSent
		res.MaxLatencyMs = max(res.MaxLatencyMs, float64(lat)/1e6)
		if lat > int64(time.Second) {
			res.Delayed++
		}
		if m.ackSent > kill && (firstAck == 0 || m.ackAt < firstAck) {
			firstAck = m.ackAt
		}
		if m.firstSent < kill && m.ackAt > kill {
			inFlightDone = max(inFlightDone, m.ackAt)
		}
	}
	if firstAck != 0 {
		res.FirstAckMs = msDiff(firstAck, kill)
	} else {
		res.FirstAckMs = -1
	}
	if inFlightDone != 0 {
		res.InFlightDoneMs = msDiff(inFlightDone, kill)
	}
	slices.Sort(acks)
	for i := 1; i < len(acks); i++ {
		if gap := msDiff(acks[i], acks[i-1]); gap > res.LongestGapMs {
			res.LongestGapMs, res.LongestGapStartMs = gap, msDiff(acks[i-1], kill)
		}
	}
	errs.mu.Lock()
	defer errs.mu.Unlock()
	res.Errors = errs.kinds
	if errs.first != 0 {
		res.FirstErrorMs = msDiff(errs.first, kill)
		res.LastErrorMs = msDiff(errs.last, kill)
	}
	slices.Sort(errs.timeoutsSent)
	for _, t := range errs.timeoutsSent {
		res.TimeoutsSentMs = append(res.TimeoutsSentMs, msDiff(t, kill))
	}
}

// check compares what was read back (seen[i]: how often message i is stored) with
// what was acknowledged.
func check(res *failoverResult, msgs []msgState, seen []int) {
	for i := range msgs {
		switch {
		case seen[i] > 1:
			res.Duplicated++
		case seen[i] == 0 && msgs[i].ackAt != 0:
			res.Lost++
		}
		if seen[i] > 0 && msgs[i].ackAt == 0 {
			res.StoredUnacked++
		}
	}
}

// retry calls f until it succeeds or ctx ends (then the last error), 100 ms apart.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
