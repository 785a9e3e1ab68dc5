package arq

import (
	"bytes"
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The simulator runs two Endpoints over a simulated path with seeded loss,
// duplication, reordering (random delay), delay spikes and blackouts, on a virtual
// clock. Everything is deterministic for a seed, so any failure replays exactly.

type netConf struct {
	loss, dup     float64
	delay, jitter time.Duration
	spikeP        float64       // chance of a delay spike
	spike         time.Duration // its size
	blackoutFrom  time.Duration // all datagrams dropped in [from, to)
	blackoutTo    time.Duration
	// From switchAt on, datagrams take a path with delay switchDelay: what a
	// client's address change (a new network, NAT rebinding) does to the ARQ, with
	// the old path's datagrams still arriving after the new one's.
	switchAt, switchDelay time.Duration
	// bandwidth, bytes per second each way (0: unlimited); a datagram waits for
	// the link behind those sent before it, and one that would wait longer than
	// queueLimit is dropped, as a full router or socket queue drops it.
	bandwidth  float64
	queueLimit time.Duration
}

type event struct {
	at   time.Time
	to   int // endpoint index
	data []byte
	n    int // tie-break: order of scheduling
}

type eventQ []*event

func (q eventQ) Len() int { return len(q) }
func (q eventQ) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].n < q[j].n
	}
	return q[i].at.Before(q[j].at)
}
func (q eventQ) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQ) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQ) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

type sim struct {
	t         testing.TB
	rng       *rand.Rand
	nc        netConf
	start     time.Time
	now       time.Time
	eps       [2]*Endpoint
	q         eventQ
	seq       int
	got       [2][][]byte
	sent      [2]int       // datagrams offered to the network
	busy      [2]time.Time // when each direction's link is next free
	tailDrops int
}

func newSim(t testing.TB, seed uint64, nc netConf, cfg Config) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nc: nc,
		start: time.Unix(1_700_000_000, 0)}
	s.now = s.start
	s.eps[0], s.eps[1] = New(cfg), New(cfg)
	return s
}

// collect moves an endpoint's output into the network and its deliveries into got.
func (s *sim) collect(i int) {
	out, del := s.eps[i].Output()
	for _, m := range del { // valid only until the endpoint's next call
		s.got[i] = append(s.got[i], append([]byte(nil), m...))
	}
	for _, d := range out {
		s.sent[i]++
		el := s.now.Sub(s.start)
		if el >= s.nc.blackoutFrom && el < s.nc.blackoutTo {
			continue
		}
		if s.rng.Float64() < s.nc.loss {
			continue
		}
		var queued time.Duration
		if s.nc.bandwidth > 0 {
			free := maxTime(s.busy[i], s.now)
			if s.nc.queueLimit > 0 && free.Sub(s.now) > s.nc.queueLimit {
				s.tailDrops++
				continue // tail drop
			}
			s.busy[i] = free.Add(time.Duration(float64(len(d)) / s.nc.bandwidth * float64(time.Second)))
			queued = s.busy[i].Sub(s.now)
		}
		copies := 1
		if s.rng.Float64() < s.nc.dup {
			copies = 2
		}
		for range copies {
			delay := s.nc.delay + queued
			if s.nc.switchAt > 0 && el >= s.nc.switchAt {
				delay = s.nc.switchDelay + queued
			}
			if s.nc.jitter > 0 {
				delay += time.Duration(s.rng.Int64N(int64(s.nc.jitter)))
			}
			if s.rng.Float64() < s.nc.spikeP {
				delay += s.nc.spike
			}
			s.seq++
			heap.Push(&s.q, &event{at: s.now.Add(delay), to: 1 - i, data: append([]byte(nil), d...), n: s.seq})
		}
	}
}

// run drives the simulation until cond holds, or fails after maxVirtual.
func (s *sim) run(maxVirtual time.Duration, cond func() bool) {
	for steps := 0; !cond(); steps++ {
		if steps > 5_000_000 || s.now.Sub(s.start) > maxVirtual {
			a, b := s.eps[0].Stats(), s.eps[1].Stats()
			s.t.Fatalf("not done after %v virtual, %d steps: A %+v B %+v; got %d/%d", s.now.Sub(s.start), steps, a, b, len(s.got[0]), len(s.got[1]))
		}
		next := time.Time{}
		for _, ep := range s.eps {
			if d := ep.Deadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
		if len(s.q) > 0 && (next.IsZero() || !s.q[0].at.After(next)) {
			ev := heap.Pop(&s.q).(*event)
			s.now = maxTime(s.now, ev.at)
			if err := s.eps[ev.to].Receive(s.now, ev.data); err != nil {
				s.t.Fatalf("endpoint %d refused a datagram it was sent: %v", ev.to, err)
			}
			s.collect(ev.to)
			continue
		}
		if next.IsZero() {
			s.t.Fatalf("stalled: no event and no timer; got %d/%d", len(s.got[0]), len(s.got[1]))
		}
		s.now = maxTime(s.now, next)
		for i, ep := range s.eps {
			ep.Tick(s.now)
			s.collect(i)
		}
	}
}

// message i of sender from: its size varies so that bundling and fragmentation are
// both exercised.
func message(from, i int, rng *rand.Rand) []byte {
	size := 8 + rng.IntN(64)
	if rng.IntN(20) == 0 {
		size = 1000 + rng.IntN(5000) // spans several datagrams
	}
	b := make([]byte, size)
	copy(b, fmt.Sprintf("%d:%d:", from, i))
	for j := len(fmt.Sprintf("%d:%d:", from, i)); j < size; j++ {
		b[j] = byte(i*7 + j)
	}
	return b
}

// exchange sends n messages each way, paced over the first part of the run, and
// checks exactly-once in-order delivery and that both senders freed their buffers.
func exchange(t *testing.T, seed uint64, nc netConf, n int) *sim {
	s := newSim(t, seed, nc, Config{})
	msgRng := rand.New(rand.NewPCG(seed, 7))
	var want [2][][]byte
	for i := range n {
		for from := range 2 {
			m := message(from, i, msgRng)
			want[from] = append(want[from], m)
		}
	}
	sentUpTo := 0
	// Send in bursts of 50 every 10 ms of virtual time.
	s.run(5*time.Minute, func() bool {
		for sentUpTo < n && s.now.Sub(s.start) >= time.Duration(sentUpTo/50)*10*time.Millisecond {
			for from := range 2 {
				if err := s.eps[from].Send(s.now, want[from][sentUpTo]); err != nil {
					t.Fatal(err)
				}
				s.collect(from)
			}
			sentUpTo++
		}
		return sentUpTo == n && len(s.got[1]) == n && len(s.got[0]) == n && s.eps[0].Idle() && s.eps[1].Idle()
	})
	for to := range 2 {
		from := 1 - to
		for i := range n {
			if !bytes.Equal(s.got[to][i], want[from][i]) {
				t.Fatalf("seed %d: endpoint %d message %d: got %q..., want %q...", seed, to, i, head(s.got[to][i]), head(want[from][i]))
			}
		}
	}
	return s
}

func head(b []byte) []byte { return b[:min(len(b), 12)] }

func TestSimCleanPath(t *testing.T) {
	s := exchange(t, 1, netConf{delay: 5 * time.Millisecond}, 2000)
	st := s.eps[0].Stats()
	if st.Retransmits != 0 {
		t.Fatalf("retransmissions on a clean path: %+v", st)
	}
	// Coordination: acknowledgements ride on data both ways; few pure acks.
	if per := 1000 * float64(st.CoordPackets) / 2000; per > 50 {
		t.Fatalf("%.1f coordination packets per 1000 messages on a clean path", per)
	}
}

func TestSimLossDupReorder(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.05, 0.1, 0.2, 0.3} {
		for seed := uint64(1); seed <= 25; seed++ {
			t.Run(fmt.Sprintf("loss%.0f%%/seed%d", loss*100, seed), func(t *testing.T) {
				exchange(t, seed, netConf{loss: loss, dup: 0.05, delay: 10 * time.Millisecond, jitter: 15 * time.Millisecond,
					spikeP: 0.01, spike: 300 * time.Millisecond}, 800)
			})
		}
	}
}

// TestSimPathChange: mid-stream the path changes (an address change) to one with a
// much shorter or longer delay, with loss; everything still arrives once and in order.
func TestSimPathChange(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		for _, d2 := range []time.Duration{time.Millisecond, 120 * time.Millisecond} {
			exchange(t, seed, netConf{loss: 0.05, delay: 30 * time.Millisecond, jitter: 5 * time.Millisecond,
				switchAt: 100 * time.Millisecond, switchDelay: d2}, 800)
		}
	}
}

func TestSimBlackout(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		s := exchange(t, seed, netConf{loss: 0.02, delay: 10 * time.Millisecond, jitter: 5 * time.Millisecond,
			blackoutFrom: 50 * time.Millisecond, blackoutTo: 10*time.Second + 50*time.Millisecond}, 1000)
		if st := s.eps[0].Stats(); st.RTO > 10*time.Second {
			t.Fatalf("RTO %v beyond MaxRTO", st.RTO)
		}
	}
}

func TestSimOneWaySteadyStreamCoordination(t *testing.T) {
	// A steady one-way stream of small messages: the receiver acknowledges every
	// AckEvery packets or AckDelay, so coordination stays far below one per message.
	s := newSim(t, 3, netConf{delay: 2 * time.Millisecond}, Config{})
	rng := rand.New(rand.NewPCG(3, 3))
	const n = 20000
	sent := 0
	s.run(time.Minute, func() bool {
		for sent < n && s.now.Sub(s.start) >= time.Duration(sent)*20*time.Microsecond {
			m := make([]byte, 16)
			copy(m, fmt.Sprintf("%d:%d", sent, rng.IntN(10)))
			if err := s.eps[0].Send(s.now, m); err != nil {
				t.Fatal(err)
			}
			s.collect(0)
			sent++
		}
		return sent == n && len(s.got[1]) == n && s.eps[0].Idle()
	})
	coord := s.eps[0].Stats().CoordPackets + s.eps[1].Stats().CoordPackets
	if per := 1000 * float64(coord) / n; per > 10 {
		t.Fatalf("%.2f coordination packets per 1000 messages, want ≤ 10 (A %+v, B %+v)", per, s.eps[0].Stats(), s.eps[1].Stats())
	}
	t.Logf("coordination packets per 1000 messages: %.2f; data packets %d", 1000*float64(coord)/n, s.eps[0].Stats().DataPackets)
}

// bulk sends n messages of size bytes one way as fast as the windows allow and
// returns the virtual time until all were delivered.
func bulk(t *testing.T, seed uint64, nc netConf, cfg Config, n, size int) (*sim, time.Duration) {
	s := newSim(t, seed, nc, cfg)
	rng := rand.New(rand.NewPCG(seed, 11))
	sent := 0
	s.run(10*time.Minute, func() bool {
		for sent < n && s.eps[0].Stats().Queued < 256<<10 {
			m := make([]byte, size)
			copy(m, fmt.Sprintf("%d:%d:", sent, rng.IntN(10)))
			if err := s.eps[0].Send(s.now, m); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		s.collect(0)
		return sent == n && len(s.got[1]) == n && s.eps[0].Idle()
	})
	return s, s.now.Sub(s.start)
}

// TestSimBulkLossyLink: a bulk one-way transfer over a 1 Gbit/s link with a short
// queue keeps most of the link's capacity at 0, 1 and 5 % random loss (the
// controller does not take random loss for congestion), resends about what was
// lost, and overflows the queue rarely (pacing, slow start ending on delay).
func TestSimBulkLossyLink(t *testing.T) {
	const n, size, bandwidth = 30000, 1024, 125e6
	for _, loss := range []float64{0, 0.01, 0.05} {
		nc := netConf{loss: loss, delay: 50 * time.Microsecond, bandwidth: bandwidth, queueLimit: 2 * time.Millisecond}
		s, took := bulk(t, 1, nc, Config{}, n, size)
		st := s.eps[0].Stats()
		capacity := bandwidth / float64(size+16) // messages per second the link carries at best
		rate := n / took.Seconds()
		t.Logf("loss %.0f%%: %.0f msgs/s (%.0f%% of the link), retransmits %d of %d packets, tail drops %d, cwnd %.0f",
			loss*100, rate, 100*rate/capacity, st.Retransmits, st.DataPackets, s.tailDrops, st.Cwnd)
		if want := 0.75 - 3*loss; rate < want*capacity {
			t.Errorf("loss %.0f%%: %.0f msgs/s, under %.0f%% of the link's %.0f", loss*100, rate, 100*want, capacity)
		}
		if lost := float64(st.DataPackets) * loss; float64(st.Retransmits) > 2*lost+float64(s.tailDrops)+50 {
			t.Errorf("loss %.0f%%: %d retransmissions for about %.0f lost and %d dropped", loss*100, st.Retransmits, lost, s.tailDrops)
		}
		if s.tailDrops > int(st.DataPackets)/50 {
			t.Errorf("loss %.0f%%: %d of %d packets dropped at the queue", loss*100, s.tailDrops, st.DataPackets)
		}
	}
}

// TestSimCongestionBacksOff: on a path whose queue is the bottleneck, the window
// settles near the path's capacity instead of growing until the queue drops a
// large share: Tern yields on a shared link.
func TestSimCongestionBacksOff(t *testing.T) {
	const bandwidth = 12.5e6 // 100 Mbit/s, 10 ms each way: about 230 packets in flight fill it
	nc := netConf{delay: 10 * time.Millisecond, bandwidth: bandwidth, queueLimit: 20 * time.Millisecond}
	s, _ := bulk(t, 2, nc, Config{}, 20000, 1024)
	st := s.eps[0].Stats()
	if s.tailDrops > int(st.DataPackets)/20 {
		t.Fatalf("%d of %d packets dropped at the bottleneck queue", s.tailDrops, st.DataPackets)
	}
	if st.Cwnd > 1000 {
		t.Fatalf("window %.0f packets on a path that holds about 460 with its queue", st.Cwnd)
	}
}

// TestSimFlowControl: a receiver whose application reads nothing closes its window;
// the sender stops with at most a window's worth unread at the receiver, and goes
// on once the application reads.
func TestSimFlowControl(t *testing.T) {
	cfg := Config{Window: 64}
	s := newSim(t, 5, netConf{delay: time.Millisecond}, cfg)
	msg := make([]byte, 1000)
	for range 500 {
		if err := s.eps[0].Send(s.now, msg); err != nil {
			t.Fatal(err)
		}
	}
	s.collect(0)
	unread := func() int {
		n := 0
		for _, m := range s.got[1] {
			n += len(m)
		}
		return n
	}
	// The application reads nothing: every delivered byte stays unread, until
	// nothing moves any more.
	s.run(time.Minute, func() bool {
		s.eps[1].SetUnread(s.now, unread())
		s.collect(1)
		return len(s.q) == 0 && s.eps[0].Deadline().IsZero() && s.eps[1].Deadline().IsZero()
	})
	mtu := s.eps[1].cfg.MTU
	if got := unread(); got > (cfg.Window+2)*mtu || got == 500*len(msg) {
		t.Fatalf("%d bytes delivered unread with a window of %d packets", got, cfg.Window)
	}
	// It reads everything; the rest follows.
	s.run(time.Minute, func() bool {
		s.eps[1].SetUnread(s.now, 0)
		s.collect(1)
		return unread() == 500*len(msg)
	})
}
