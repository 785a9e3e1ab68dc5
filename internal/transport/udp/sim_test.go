package udp

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
	t     testing.TB
	rng   *rand.Rand
	nc    netConf
	start time.Time
	now   time.Time
	eps   [2]*Endpoint
	q     eventQ
	seq   int
	got   [2][][]byte
	sent  [2]int // datagrams offered to the network
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
	s.got[i] = append(s.got[i], del...)
	for _, d := range out {
		s.sent[i]++
		el := s.now.Sub(s.start)
		if el >= s.nc.blackoutFrom && el < s.nc.blackoutTo {
			continue
		}
		if s.rng.Float64() < s.nc.loss {
			continue
		}
		copies := 1
		if s.rng.Float64() < s.nc.dup {
			copies = 2
		}
		for range copies {
			delay := s.nc.delay
			if s.nc.jitter > 0 {
				delay += time.Duration(s.rng.Int64N(int64(s.nc.jitter)))
			}
			if s.rng.Float64() < s.nc.spikeP {
				delay += s.nc.spike
			}
			s.seq++
			heap.Push(&s.q, &event{at: s.now.Add(delay), to: 1 - i, data: d, n: s.seq})
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

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
