package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/loadgen"
)

// recoveryConfig is one recovery run: a subscriber connected to the victim node
// (given every node's URL), a publisher on node 1 at a fixed rate, then the victim is
// killed.
type recoveryConfig struct {
	URLs     []string // client URLs, node order
	Monitors []string // monitoring base URLs, node order
	Victim   int      // index of the node killed (not 0: the publisher's)
	Rate     int      // messages per second published
	// ReconnectWait is the subscriber client's reconnect delay (see kind.dialFailover).
	ReconnectWait time.Duration
	// Settle is how long the subscriber receives before the kill.
	Settle time.Duration
	// Timeout bounds the wait for recovery after the kill.
	Timeout time.Duration
	// Poll is the interval at which the surviving nodes' monitoring is read.
	Poll time.Duration
	// Kill kills the victim (kill -9 of its process).
	Kill func() error
}

// recoveryResult is one recovery run. Durations are in milliseconds from the kill.
type recoveryResult struct {
	System  string `json:"system"`
	Version string `json:"version"`
	Nodes   int    `json:"nodes"`
	Rate    int    `json:"rate"`
	// ReconnectWaitMs is the subscriber client's reconnect delay.
	ReconnectWaitMs float64 `json:"reconnect_wait_ms"`
	Victim          string  `json:"victim"`
	// ResumedMs: the first message published after the kill reached the subscriber
	// (through another node).
	ResumedMs float64 `json:"resumed_ms"`
	// DisconnectedMs and ReconnectedMs: the subscriber's client reported losing its
	// server, and being connected to another.
	DisconnectedMs float64 `json:"disconnected_ms"`
	ReconnectedMs  float64 `json:"reconnected_ms"`
	// ReconnectedTo is the server the subscriber moved to.
	ReconnectedTo string `json:"reconnected_to"`
	// Lost counts the messages published between the last one received before the
	// kill and the first one received after it.
	Lost uint64 `json:"lost"`
	// RoutesGoneMs: every surviving node's monitoring no longer shows a route to the
	// victim.
	RoutesGoneMs float64 `json:"routes_gone_ms"`
	// MemberGoneMs: no surviving node lists the victim as a member any more (dead
	// counts as gone); 0 for a system without membership.
	MemberGoneMs float64 `json:"member_gone_ms,omitempty"`
	// Error says why the run did not complete; its figures are then not used.
	Error string `json:"error,omitempty"`
}

// failoverOrder is the list order the subscriber is given: the victim first (so it
// connects there), then the other nodes from the last to the first, so that it
// moves to a node other than the publisher's (node 0) when there is one.
func failoverOrder(nodes, victim int) []int {
	order := []int{victim}
	for i := nodes - 1; i >= 0; i-- {
		if i != victim {
			order = append(order, i)
		}
	}
	return order
}

// stamp layout of a recovery message: sequence number (from 1), then send time.
const recoveryMsgLen = 16

// receiver is the subscriber's handler state. Its handler is never called
// concurrently with itself (loadgen.Bus contract).
type receiver struct {
	killAt   atomic.Int64 // nanoseconds; 0 before the kill
	received atomic.Uint64
	// elsewhere reports whether the client is now connected to another node than the
	// victim. After kill -9 nothing published after the kill can come through the
	// victim anyway; a victim shut down gracefully (the tests) may still deliver for a
	// moment.
	elsewhere func() bool

	mu        sync.Mutex
	maxSeq    uint64
	resumedAt time.Time
	lost      uint64
	resumed   chan struct{}
}

func (r *receiver) handle(data []byte) {
	if len(data) < recoveryMsgLen {
		return
	}
	now := time.Now()
	seq := binary.LittleEndian.Uint64(data)
	sent := int64(binary.LittleEndian.Uint64(data[8:]))
	r.received.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.killAt.Load(); k != 0 && sent >= k && r.resumedAt.IsZero() && r.elsewhere() {
		r.resumedAt = now
		if seq > r.maxSeq {
			r.lost = seq - r.maxSeq - 1
		}
		close(r.resumed)
	}
	r.maxSeq = max(r.maxSeq, seq)
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runRecovery measures one kill of cfg.Victim. A run that got as far as the kill
// returns its result with Error set if something did not recover in time; an error
// means it could not start.
func runRecovery(ctx context.Context, k *kind, cfg recoveryConfig) (recoveryResult, error) {
	n := len(cfg.URLs)
	res := recoveryResult{System: k.Key, Nodes: n, Rate: cfg.Rate, ReconnectWaitMs: ms(cfg.ReconnectWait)}
	if n < 2 || len(cfg.Monitors) != n || cfg.Victim <= 0 || cfg.Victim >= n || cfg.Rate <= 0 {
		return res, fmt.Errorf("recovery needs 2 or more nodes with a URL and a monitoring URL each, a victim other than node 1 and a rate (%d URLs, %d monitors, victim %d, rate %d)",
			n, len(cfg.Monitors), cfg.Victim+1, cfg.Rate)
	}
	mon := newMonitor(k)
	vs, err := mon.waitMesh(ctx, cfg.Monitors, 30*time.Second)
	if err != nil {
		return res, err
	}
	res.Victim = vs[cfg.Victim].Name

	// The subscriber, on the victim, with every URL.
	var urls []string
	for _, i := range failoverOrder(n, cfg.Victim) {
		urls = append(urls, cfg.URLs[i])
	}
	ev := &events{}
	sub, connected, err := k.dialFailover(urls, "recovery-sub", cfg.ReconnectWait, ev)
	if err != nil {
		return res, fmt.Errorf("subscriber: %w", err)
	}
	defer sub.Close()
	if got := hostPort(connected()); got != hostPort(cfg.URLs[cfg.Victim]) {
		return res, fmt.Errorf("subscriber connected to %s, not the victim %s", got, cfg.URLs[cfg.Victim])
	}
	subject := "recovery." + randomSuffix()
	victimAddr := hostPort(cfg.URLs[cfg.Victim])
	rcv := &receiver{resumed: make(chan struct{}), elsewhere: func() bool {
		u := connected()
		return u != "" && hostPort(u) != victimAddr
	}}
	if _, err := sub.Subscribe(subject, rcv.handle); err != nil {
		return res, fmt.Errorf("subscribe: %w", err)
	}
	if err := sub.Flush(); err != nil {
		return res, fmt.Errorf("subscriber flush: %w", err)
	}

	pub, version, err := k.dial(cfg.URLs[0], "recovery-pub")
	if err != nil {
		return res, fmt.Errorf("publisher: %w", err)
	}
	defer pub.Close()
	res.Version = version
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishPaced(pub, subject, cfg.Rate, stop) }()
	stopPub := sync.OnceValue(func() error {
		close(stop)
		return <-pubDone
	})
	defer func() { _ = stopPub() }()

	// The subscription reaches node 1 asynchronously: wait for the first message,
	// then receive for Settle.
	deadline := time.Now().Add(10 * time.Second)
	for rcv.received.Load() == 0 {
		if time.Now().After(deadline) {
			return res, errors.New("the subscriber on the victim received nothing from node 1 in 10s")
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.Settle):
	}

	// Watch the surviving nodes from just before the kill.
	var survivors []string
	for i, m := range cfg.Monitors {
		if i != cfg.Victim {
			survivors = append(survivors, m)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	killAt := time.Now()
	watched := make(chan notice, 1)
	go func() { watched <- watch(wctx, mon, survivors, res.Victim, killAt, cfg.Poll) }()
	rcv.killAt.Store(killAt.UnixNano())
	if err := cfg.Kill(); err != nil {
		return res, fmt.Errorf("kill: %w", err)
	}

	var errs []string
	select {
	case <-rcv.resumed:
	case <-wctx.Done():
		errs = append(errs, fmt.Sprintf("the subscriber received nothing published after the kill within %s", cfg.Timeout))
	}
	nt := <-watched
	if err := stopPub(); err != nil {
		errs = append(errs, "publisher: "+err.Error())
	}
	rcv.mu.Lock()
	if !rcv.resumedAt.IsZero() {
		res.ResumedMs = ms(rcv.resumedAt.Sub(killAt))
		res.Lost = rcv.lost
	}
	rcv.mu.Unlock()
	since := func(ns int64) float64 {
		if ns == 0 {
			return 0
		}
		return ms(time.Unix(0, ns).Sub(killAt))
	}
	res.DisconnectedMs, res.ReconnectedMs = since(ev.disconnected.Load()), since(ev.reconnected.Load())
	res.ReconnectedTo = connected()
	res.RoutesGoneMs, res.MemberGoneMs = ms(nt.routes), ms(nt.member)
	if nt.err != "" {
		errs = append(errs, nt.err)
	}
	res.Error = strings.Join(errs, "; ")
	return res, nil
}

// publishPaced publishes rate messages per second to subject until stop is closed:
// each carries its sequence number (from 1) and send time.
func publishPaced(bus loadgen.Bus, subject string, rate int, stop <-chan struct{}) error {
	buf := make([]byte, recoveryMsgLen)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for seq := uint64(1); ; seq++ {
		due := start.Add(time.Duration(seq-1) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-stop:
				return nil
			case <-time.After(d):
			}
		} else {
			select {
			case <-stop:
				return nil
			default:
			}
		}
		binary.LittleEndian.PutUint64(buf, seq)
		binary.LittleEndian.PutUint64(buf[8:], uint64(time.Now().UnixNano()))
		if err := bus.Publish(subject, buf); err != nil {
			return err
		}
	}
}

// notice is when the surviving nodes noticed the victim was gone, as time after the
// kill (the latest node's); zero when not (member: or no membership).
type notice struct {
	routes, member time.Duration
	err            string
}

// watch reads each surviving node's monitoring every poll until all of them show
// neither a route to victim nor (where there is membership) the victim as a member,
// or ctx ends.
func watch(ctx context.Context, mon *monitor, survivors []string, victim string, start time.Time, poll time.Duration) notice {
	type state struct{ routes, member time.Duration }
	got := make([]state, len(survivors))
	hasMembers := make([]bool, len(survivors))
	var nt notice
	for {
		done := true
		for i, base := range survivors {
			s := &got[i]
			if s.routes > 0 && (!hasMembers[i] || s.member > 0) {
				continue
			}
			v, err := mon.view(ctx, base)
			if err != nil {
				done = false
				continue
			}
			now := time.Since(start)
			if s.routes == 0 && v.routeGone(victim) {
				s.routes = now
			}
			hasMembers[i] = v.Members != nil
			if hasMembers[i] && s.member == 0 && v.memberGone(victim) {
				s.member = now
			}
			if s.routes == 0 || hasMembers[i] && s.member == 0 {
				done = false
			}
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			nt.err = "the surviving nodes did not all notice within the timeout"
		case <-time.After(poll):
			continue
		}
		break
	}
	for i, s := range got {
		nt.routes = max(nt.routes, s.routes)
		if hasMembers[i] {
			nt.member = max(nt.member, s.member)
		}
	}
	return nt
}

// hostPort strips a URL's scheme.
func hostPort(url string) string {
	if _, rest, ok := strings.Cut(url, "://"); ok {
		return strings.TrimSuffix(rest, "/")
	}
	return url
}
