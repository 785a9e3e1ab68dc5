package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-mq/tern/bench/internal/records"

	"github.com/tern-mq/tern/bench/internal/mqttload"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// resumeConfig is one resume run against a running cluster.
type resumeConfig struct {
	Cluster cluster
	Run     int
	// Placement: "node2" (publisher on node 1, subscriber on node 2, resuming on
	// node 3) or "leader" (the nodes renumbered so that node 2 is the one leading
	// Tern's MQTT group or NATS's $MQTT_msgs stream).
	Placement string
	Rate      int
	Duration  time.Duration
	KillAt    time.Duration
	Size      int
	Window    int
	// RetryEvery is the pause between the subscriber's attempts to reconnect (the
	// first is made at once); ReconnectFor bounds them.
	RetryEvery, ReconnectFor time.Duration
	ConnackTimeout           time.Duration
	// DrainIdle ends the wait for the last deliveries once nothing arrived for that
	// long; DrainTimeout bounds it.
	DrainIdle, DrainTimeout time.Duration
	Kill                    func(pid int) error
	Log                     io.Writer
}

// resumeResult is one run. Times are milliseconds from the kill.
type resumeResult struct {
	System    string  `json:"system"`
	Run       int     `json:"run"`
	Rate      int     `json:"rate"`
	DurationS float64 `json:"duration_s"`
	KillAtS   float64 `json:"kill_at_s"`
	Size      int     `json:"size"`
	Window    int     `json:"window"`
	// Leaders before the kill (node 1's view) and after it (node 3's view, once
	// the run is over): which group or stream each node led.
	// Placement is how the nodes were given their parts: node2 (as numbered) or
	// leader (the subscriber's node is the one leading Tern's MQTT group or NATS's
	// $MQTT_msgs stream); PubNode, Killed and ResumeNode name the nodes of the
	// publisher, of the subscriber (killed) and the one it resumes on.
	Placement     string            `json:"placement"`
	PubNode       string            `json:"pub_node,omitempty"`
	Killed        string            `json:"killed,omitempty"`
	ResumeNode    string            `json:"resume_node,omitempty"`
	LeadersBefore map[string]string `json:"leaders_before,omitempty"`
	LeadersAfter  map[string]string `json:"leaders_after,omitempty"`
	// NewLeader: the node that leads Tern's MQTT group or NATS's $MQTT_msgs stream
	// after the kill, as the resume node first shows it (polled every 50 ms), and
	// when; unset when it was not the killed node that led it, or when no other
	// node led it within 30 s.
	NewLeader   string  `json:"new_leader,omitempty"`
	NewLeaderMs float64 `json:"new_leader_ms,omitempty"`

	Published int `json:"published"`
	Acked     int `json:"acked"`

	// The subscriber: its connection to node 2 ends (DisconnectMs); it is connected
	// to node 3 (ReconnectMs, the CONNACK, after ReconnectAttempts attempts, with
	// SessionPresent); the first message arrives there (FirstMsgMs).
	DisconnectMs      float64        `json:"disconnect_ms"`
	ReconnectMs       float64        `json:"reconnect_ms"`
	ReconnectAttempts int            `json:"reconnect_attempts"`
	ReconnectErrors   map[string]int `json:"reconnect_errors,omitempty"`
	SessionPresent    bool           `json:"session_present"`
	FirstMsgMs        float64        `json:"first_msg_ms"`
	// Backlog: the acknowledged messages published before the first message arrived
	// on node 3 and not received before the kill; BacklogMs: when the last of them
	// arrived (-1 if one never did).
	Backlog   int     `json:"backlog"`
	BacklogMs float64 `json:"backlog_ms"`
	// Lost: acknowledged to the publisher, never received. Duplicates: deliveries
	// of a message received before (Redelivered of them had the DUP flag).
	// UnackedReceived: received although the publisher never got its PUBACK.
	Lost            int `json:"lost"`
	Duplicates      int `json:"duplicates"`
	Redelivered     int `json:"redelivered"`
	UnackedReceived int `json:"unacked_received"`
	// ReceivedNode2 and ReceivedNode3: distinct messages received on each connection.
	ReceivedNode2 int `json:"received_node2"`
	ReceivedNode3 int `json:"received_node3"`

	// The publisher (on node 1, which stays up): FirstAckMs, the first PUBACK of a
	// message sent after the kill; LongestAckGapMs, the longest time without a
	// PUBACK while it published; ScheduleLagMaxMs, how far it fell behind its rate
	// (a full window holds it).
	FirstAckMs float64 `json:"first_ack_ms"`
	// PublisherDisconnects: how often the publisher's connection ended (the first
	// PublisherDisconnectMs after the kill; connected again PublisherReconnectMs
	// after it), with the errors by kind; Resent: messages sent again for want of
	// a PUBACK.
	PublisherDisconnects  int            `json:"publisher_disconnects"`
	PublisherDisconnectMs float64        `json:"publisher_disconnect_ms,omitempty"`
	PublisherReconnectMs  float64        `json:"publisher_reconnect_ms,omitempty"`
	PublisherErrors       map[string]int `json:"publisher_errors,omitempty"`
	Resent                int            `json:"resent"`
	LongestAckGapMs       float64        `json:"longest_ack_gap_ms"`
	ScheduleLagMaxMs      float64        `json:"schedule_lag_max_ms"`
	// Latency, publish to first receipt: the longest of the run, and how many
	// messages took over a second.
	MaxLatencyMs float64 `json:"max_latency_ms"`
	Delayed      int     `json:"delayed"`

	Busy  bool   `json:"busy,omitempty"`
	Error string `json:"error,omitempty"`
}

func cmdResume(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("mqttclustervs resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addCluster(fs)
	out := fs.String("out", "", "append the run's result as one JSON line to this file (required)")
	runN := fs.Int("run", 1, "run number")
	rate := fs.Int("rate", 1000, "messages published per second")
	duration := fs.Duration("duration", 12*time.Second, "how long the publisher publishes")
	killAt := fs.Duration("kill-at", 4*time.Second, "when, after the first publish, node 2 is killed")
	placement := fs.String("placement", "node2", "node2: the nodes as numbered; leader: renumbered so that node 2 (killed) leads Tern's MQTT group or NATS's $MQTT_msgs stream (needs --names)")
	size := fs.Int("size", 32, "payload bytes (at least 16)")
	window := fs.Int("window", 256, "QoS 1 messages the publisher keeps unacknowledged")
	retryEvery := fs.Duration("retry-every", 20*time.Millisecond, "pause between the subscriber's reconnection attempts (the first is at once)")
	reconnectFor := fs.Duration("reconnect-for", 60*time.Second, "give up reconnecting after this long")
	connackTimeout := fs.Duration("connack-timeout", 10*time.Second, "the subscriber's wait for a CONNACK before it tries again")
	drainIdle := fs.Duration("drain-idle", 40*time.Second, "after publishing, stop waiting for deliveries once nothing arrived for this long (above NATS's MQTT ack_wait, 30 s, after which it redelivers)")
	drainTimeout := fs.Duration("drain-timeout", 90*time.Second, "bound on the wait for the last deliveries")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := cf.parse(true)
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		return errors.New("--out is required")
	case *rate <= 0 || *duration <= 0 || *killAt <= 0 || *killAt >= *duration:
		return errors.New("--rate and --duration must be positive and --kill-at within --duration")
	case *placement != "node2" && *placement != "leader":
		return fmt.Errorf("--placement %q: want node2 or leader", *placement)
	case *placement == "leader" && len(c.Names) != 3:
		return errors.New("--placement leader needs --names")
	case *window < 1 || *retryEvery <= 0 || *reconnectFor <= 0:
		return errors.New("--window, --retry-every and --reconnect-for must be positive")
	}
	busy := cf.waitQuiet(ctx, stderr)
	res := runResume(ctx, resumeConfig{Cluster: c, Run: *runN, Placement: *placement, Rate: *rate, Duration: *duration, KillAt: *killAt,
		Size: max(*size, 16), Window: *window, RetryEvery: *retryEvery, ReconnectFor: *reconnectFor, ConnackTimeout: *connackTimeout,
		DrainIdle: *drainIdle, DrainTimeout: *drainTimeout,
		Kill: func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }, Log: stderr})
	res.Busy = busy
	if res.Error != "" {
		fmt.Fprintf(stderr, "%s resume run %d: error: %s\n", res.System, res.Run, res.Error)
	} else {
		fmt.Fprintf(stderr, "%s resume run %d (%s): reconnected %.0f ms after the kill (session present %v, %d attempts), first message %.0f ms, backlog of %d in %.0f ms; %d acked, %d lost, %d duplicates; publisher: first ack after the kill %.0f ms, longest ack gap %.0f ms\n",
			res.System, res.Run, res.Placement, res.ReconnectMs, res.SessionPresent, res.ReconnectAttempts, res.FirstMsgMs, res.Backlog, res.BacklogMs,
			res.Acked, res.Lost, res.Duplicates, res.FirstAckMs, res.LongestAckGapMs)
	}
	return records.Append(*out, res)
}

func runResume(ctx context.Context, cfg resumeConfig) resumeResult {
	res := resumeResult{System: cfg.Cluster.System, Placement: cfg.Placement, Run: cfg.Run, Rate: cfg.Rate, DurationS: cfg.Duration.Seconds(),
		KillAtS: cfg.KillAt.Seconds(), Size: cfg.Size, Window: cfg.Window}
	if err := resume(ctx, cfg, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

// delivery is what the subscriber saw of one message.
type delivery struct {
	first int64 // Unix ns of its first receipt; 0: never
	conn  int   // the connection of the first receipt: 1 (node 2) or 2 (node 3)
	count int
}

// resumeSub is the subscriber: one connection at a time, deliveries recorded from
// its reader goroutine.
type resumeSub struct {
	mu          sync.Mutex
	d           []delivery
	conn        int
	probed      bool
	probe       string
	dups, dupFl int
	foreign     int
	firstOn2    int64 // first message on the second connection
	last        atomic.Int64
}

func (s *resumeSub) handle(p *packet.Publish, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Topic == s.probe {
		s.probed = true
		return
	}
	_, seq, ok := mqttload.Stamped(p.Payload)
	if !ok || seq >= uint64(len(s.d)) {
		s.foreign++
		return
	}
	t := now.UnixNano()
	if s.conn == 2 && s.firstOn2 == 0 {
		s.firstOn2 = t
	}
	d := &s.d[seq]
	d.count++
	if d.count > 1 {
		s.dups++
		if p.Dup {
			s.dupFl++
		}
		return
	}
	d.first, d.conn = t, s.conn
	s.last.Store(t)
}

func resume(ctx context.Context, cfg resumeConfig, res *resumeResult) error {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format+"\n", a...) }
	c := cfg.Cluster
	// The nodes' parts: the publisher's (pn), the subscriber's, killed (sn), the
	// one the subscriber resumes on (rn).
	pn, sn, rn := 0, 1, 2
	if cfg.Placement == "leader" {
		key := "mqtt"
		if c.System == "js" {
			key = "$MQTT_msgs"
		}
		l := leaders(ctx, c)[key]
		li := slices.Index(c.Names, l)
		if li < 0 {
			return fmt.Errorf("placement leader: %s's leader %q is none of the nodes %v", key, l, c.Names)
		}
		pn, sn, rn = (li+2)%3, li, (li+1)%3
	}
	if len(c.Names) == 3 {
		res.PubNode, res.Killed, res.ResumeNode = c.Names[pn], c.Names[sn], c.Names[rn]
	}
	n := int(int64(cfg.Rate) * int64(cfg.Duration) / int64(time.Second))
	tag := fmt.Sprintf("%d-%d", cfg.Run, time.Now().UnixNano()%1e9)
	topic := "rs/" + tag + "/m"
	sub := &resumeSub{d: make([]delivery, n), conn: 1, probe: "rs/" + tag + "/probe"}
	subID := "resume-sub-" + tag

	// The persistent subscriber on node 2.
	conn, err := mqttload.DialWith(c.MQTT[sn], mqttload.DialOptions{ClientID: subID, Persistent: true})
	if err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	if err := conn.Subscribe("rs/"+tag+"/#", 1); err != nil {
		conn.Close()
		return fmt.Errorf("subscriber: %w", err)
	}
	var (
		disconnectAt, reconnectAt atomic.Int64
		killAt                    atomic.Int64
		attempts                  int
		recErrs                   = map[string]int{}
		sessionPresent            bool
		subErr                    error
		stopping                  atomic.Bool
		curMu                     sync.Mutex
		cur                       = conn
	)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		err := conn.ReceiveFunc(sub.handle)
		if stopping.Load() {
			return
		}
		now := time.Now().UnixNano()
		disconnectAt.Store(now)
		if killAt.Load() == 0 {
			subErr = fmt.Errorf("subscriber's connection to node 2 ended before the kill: %v", err)
			return
		}
		// At once to node 3, the same client id, clean session off; no SUBSCRIBE:
		// the session holds the subscription.
		deadline := time.Now().Add(cfg.ReconnectFor)
		for {
			attempts++
			c2, err := mqttload.DialWith(c.MQTT[rn], mqttload.DialOptions{ClientID: subID, Persistent: true, Timeout: cfg.ConnackTimeout})
			if err == nil {
				reconnectAt.Store(time.Now().UnixNano())
				sessionPresent = c2.SessionPresent
				sub.mu.Lock()
				sub.conn = 2
				sub.mu.Unlock()
				curMu.Lock()
				cur = c2
				curMu.Unlock()
				if stopping.Load() {
					c2.Close()
				}
				err = c2.ReceiveFunc(sub.handle)
				if !stopping.Load() {
					subErr = fmt.Errorf("subscriber's connection to node 3 ended: %v", err)
				}
				return
			}
			recErrs[shortErr(err)]++
			if stopping.Load() || time.Now().After(deadline) {
				subErr = fmt.Errorf("subscriber could not reconnect to node 3 within %v: %v", cfg.ReconnectFor, err)
				return
			}
			time.Sleep(cfg.RetryEvery)
		}
	}()
	defer func() {
		stopping.Store(true)
		curMu.Lock()
		cur.Close()
		curMu.Unlock()
		select {
		case <-subDone:
		case <-time.After(cfg.ReconnectFor + 10*time.Second):
		}
		_ = dropSession(c.MQTT[rn], subID)
	}()

	// The publisher on node 1, once node 1's messages reach the subscriber.
	pub, err := mqttload.Dial(c.MQTT[pn], "resume-pub-"+tag, nil)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	if err := probeResume(ctx, c.MQTT[pn], "resume-probe-"+tag, sub); err != nil {
		pub.Close()
		return err
	}
	res.LeadersBefore = leaders(ctx, c)
	logf("%s resume run %d: subscriber %s on %s, publisher on %s, %d msgs/s for %v; kill -9 of %s (pid %d) at %v, resuming on %s; leaders: %s",
		c.System, cfg.Run, subID, res.Killed, res.PubNode, cfg.Rate, cfg.Duration, res.Killed, c.PIDs[sn], cfg.KillAt, res.ResumeNode,
		formatLeaders(res.LeadersBefore))

	sent := make([]atomic.Int64, n)
	acks := make([]atomic.Int64, n)
	killed := make(chan error, 1)
	start := time.Now()
	// After the kill, the resume node's view of the leader of what the killed node
	// led (Tern's MQTT group, NATS's $MQTT_msgs stream), every 50 ms until another
	// node leads it (30 s at most).
	leaderKey := "mqtt"
	if c.System == "js" {
		leaderKey = "$MQTT_msgs"
	}
	var newLeaderAt atomic.Int64
	var newLeader atomic.Value
	pollDone := make(chan struct{})
	killTimer := time.AfterFunc(cfg.KillAt, func() {
		killAt.Store(time.Now().UnixNano())
		killed <- cfg.Kill(c.PIDs[sn])
		go func() {
			defer close(pollDone)
			if res.LeadersBefore[leaderKey] != res.Killed || res.Killed == "" {
				return
			}
			end := time.Now().Add(30 * time.Second)
			for time.Now().Before(end) && ctx.Err() == nil {
				l := leadersFrom(ctx, c, c.Monitors[rn])[leaderKey]
				if l != "" && l != res.Killed {
					newLeaderAt.Store(time.Now().UnixNano())
					newLeader.Store(l)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	})
	defer killTimer.Stop()
	// The publisher keeps its schedule across connections: when its connection
	// ends (a server closes it when the replicated store does not answer in time)
	// it connects again, to node 1 first, then node 3, and sends every message it
	// has no PUBACK for again before it goes on (QoS 1: at least once).
	next := 0 // messages below next have been sent
	var pubDisc []int64
	pubErrs := map[string]int{}
	pubReconnected := int64(0)
	var pubErr error
	for {
		var resend []uint64
		for i := range next {
			if acks[i].Load() == 0 {
				resend = append(resend, uint64(i))
			}
		}
		res.Resent += len(resend)
		err := pub.PublishWith(mqttload.PublishOptions{Topic: topic, QoS: 1, Count: n - next, FirstSeq: uint64(next), Size: cfg.Size,
			Window: cfg.Window, Rate: float64(cfg.Rate), Start: start.Add(time.Duration(int64(next) * int64(time.Second) / int64(cfg.Rate))),
			Resend: resend, Seq: true,
			OnSent: func(seq uint64, at time.Time) {
				sent[seq].CompareAndSwap(0, at.UnixNano())
				next = max(next, int(seq)+1)
			},
			OnAck: func(seq uint64, at time.Time) { acks[seq].CompareAndSwap(0, at.UnixNano()) }})
		if err == nil {
			break
		}
		pub.Close()
		pubDisc = append(pubDisc, time.Now().UnixNano())
		pubErrs["connection: "+shortErr(err)]++
		logf("%s resume run %d: publisher: %v; connecting again", c.System, cfg.Run, err)
		deadline := time.Now().Add(cfg.ReconnectFor)
		for k := 0; ; k++ {
			addr := c.MQTT[pn]
			if k%2 == 1 {
				addr = c.MQTT[rn]
			}
			pub, err = mqttload.Dial(addr, fmt.Sprintf("resume-pub-%s-%d", tag, len(pubDisc)), nil)
			if err == nil {
				break
			}
			pubErrs["reconnect: "+shortErr(err)]++
			if time.Now().After(deadline) {
				pubErr = fmt.Errorf("publisher could not connect again within %v: %w", cfg.ReconnectFor, err)
				break
			}
			time.Sleep(cfg.RetryEvery)
		}
		if pubErr != nil {
			break
		}
		if pubReconnected == 0 {
			pubReconnected = time.Now().UnixNano()
		}
	}
	if pub != nil {
		defer pub.Close()
	}
	pubEnd := time.Now()
	if killTimer.Stop() {
		return errors.New("the publisher ended before the kill")
	}
	if err := <-killed; err != nil {
		return fmt.Errorf("kill -9 of node 2 (pid %d): %w", c.PIDs[sn], err)
	}
	kill := killAt.Load()
	<-pollDone
	if at := newLeaderAt.Load(); at != 0 {
		res.NewLeader, res.NewLeaderMs = newLeader.Load().(string), msSince(kill, at)
	}
	res.PublisherDisconnects = len(pubDisc)
	if len(pubDisc) > 0 {
		res.PublisherDisconnectMs = msSince(kill, pubDisc[0])
		res.PublisherErrors = pubErrs
	}
	if pubReconnected != 0 {
		res.PublisherReconnectMs = msSince(kill, pubReconnected)
	}
	if pubErr != nil {
		return pubErr
	}

	// Until every acknowledged message is received, nothing arrives for DrainIdle,
	// or DrainTimeout.
	drainEnd := time.Now().Add(cfg.DrainTimeout)
	for {
		missing := 0
		sub.mu.Lock()
		for i := range n {
			if acks[i].Load() != 0 && sub.d[i].count == 0 {
				missing++
			}
		}
		sub.mu.Unlock()
		if missing == 0 {
			break
		}
		lastAt := max(sub.last.Load(), pubEnd.UnixNano())
		if time.Now().After(drainEnd) || time.Since(time.Unix(0, lastAt)) > cfg.DrainIdle {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(500 * time.Millisecond) // a late duplicate arrives by now
	res.LeadersAfter = leadersFrom(ctx, c, c.Monitors[rn])
	stopping.Store(true)
	curMu.Lock()
	cur.Close()
	curMu.Unlock()
	<-subDone

	sub.mu.Lock()
	defer sub.mu.Unlock()
	summarizeResume(res, kill, start.UnixNano(), cfg.Rate, sub, sent, acks)
	res.ReconnectAttempts = attempts
	if len(recErrs) > 0 {
		res.ReconnectErrors = recErrs
	}
	res.SessionPresent = sessionPresent
	if d := disconnectAt.Load(); d != 0 {
		res.DisconnectMs = msSince(kill, d)
	}
	if r := reconnectAt.Load(); r != 0 {
		res.ReconnectMs = msSince(kill, r)
	} else {
		res.ReconnectMs = -1
	}
	if sub.foreign > 0 {
		return fmt.Errorf("%d messages that the publisher did not send", sub.foreign)
	}
	return subErr
}

// summarizeResume fills res from what was sent, acknowledged and received.
func summarizeResume(res *resumeResult, kill, start int64, rate int, sub *resumeSub, sent, acks []atomic.Int64) {
	n := len(sub.d)
	var ackTimes []int64
	firstAck, lastSent := int64(0), int64(0)
	for i := range n {
		s, a, d := sent[i].Load(), acks[i].Load(), sub.d[i]
		if s == 0 {
			continue
		}
		res.Published++
		lastSent = max(lastSent, s)
		sched := start + int64(i)*int64(time.Second)/int64(rate)
		res.ScheduleLagMaxMs = max(res.ScheduleLagMaxMs, msSince(sched, s))
		if a != 0 {
			res.Acked++
			ackTimes = append(ackTimes, a)
			if s > kill && (firstAck == 0 || a < firstAck) {
				firstAck = a
			}
		}
		switch {
		case d.count == 0 && a != 0:
			res.Lost++
		case d.count > 0 && a == 0:
			res.UnackedReceived++
		}
		if d.count > 0 {
			if d.conn == 1 {
				res.ReceivedNode2++
			} else {
				res.ReceivedNode3++
			}
			lat := msSince(s, d.first)
			res.MaxLatencyMs = max(res.MaxLatencyMs, lat)
			if lat > 1000 {
				res.Delayed++
			}
		}
	}
	res.Duplicates, res.Redelivered = sub.dups, sub.dupFl
	if firstAck != 0 {
		res.FirstAckMs = msSince(kill, firstAck)
	} else {
		res.FirstAckMs = -1
	}
	slices.Sort(ackTimes)
	for i := 1; i < len(ackTimes); i++ {
		if ackTimes[i] > lastSent {
			break
		}
		res.LongestAckGapMs = max(res.LongestAckGapMs, msSince(ackTimes[i-1], ackTimes[i]))
	}
	if sub.firstOn2 == 0 {
		res.FirstMsgMs, res.BacklogMs = -1, -1
		return
	}
	res.FirstMsgMs = msSince(kill, sub.firstOn2)
	lastBacklog := int64(0)
	for i := range n {
		s, a, d := sent[i].Load(), acks[i].Load(), sub.d[i]
		if s == 0 || a == 0 || s >= sub.firstOn2 || (d.count > 0 && d.first < kill) {
			continue
		}
		res.Backlog++
		if d.count == 0 {
			lastBacklog = -1
		} else if lastBacklog >= 0 {
			lastBacklog = max(lastBacklog, d.first)
		}
	}
	switch {
	case lastBacklog < 0:
		res.BacklogMs = -1
	case lastBacklog == 0:
		res.BacklogMs = res.FirstMsgMs
	default:
		res.BacklogMs = msSince(kill, lastBacklog)
	}
}

// probeResume publishes QoS 0 probes on node 1 until the subscriber got one (10 s
// at most).
func probeResume(ctx context.Context, addr, id string, sub *resumeSub) error {
	p, err := mqttload.Dial(addr, id, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sub.mu.Lock()
		ok := sub.probed
		sub.mu.Unlock()
		if ok {
			return nil
		}
		if err := p.PublishWith(mqttload.PublishOptions{Topic: sub.probe, QoS: 0, Count: 1, Size: 8}); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if time.Now().After(deadline) {
			return errors.New("probe: the subscriber on node 2 got no message published on node 1 within 10 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shortErr names an error for counts: its text, cut.
func shortErr(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
