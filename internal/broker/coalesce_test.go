package broker

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tern-mq/tern/internal/filter"
	"github.com/tern-mq/tern/internal/header"
)

// multiRecorder is a MultiSink that records each call as the SIDs it was given.
type multiRecorder struct {
	mu      sync.Mutex
	calls   [][]uint64
	removed []uint64
	full    bool
}

func (r *multiRecorder) record(subs []*Subscription) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return false
	}
	var sids []uint64
	for _, s := range subs {
		sids = append(sids, s.SID)
	}
	slices.Sort(sids)
	r.calls = append(r.calls, sids)
	return true
}

func (r *multiRecorder) Deliver(sub *Subscription, _ *Message) bool {
	return r.record([]*Subscription{sub})
}

func (r *multiRecorder) DeliverMatched(subs []*Subscription, _ *Message) bool {
	if len(subs) < 2 {
		panic(fmt.Sprintf("DeliverMatched with %d subscriptions", len(subs)))
	}
	return r.record(subs)
}

func (r *multiRecorder) Flush() {}

func (r *multiRecorder) Removed(sub *Subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, sub.SID)
}

// take returns the calls so far and forgets them.
func (r *multiRecorder) take() [][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func coSub(t testing.TB, b *Broker, s Sink, sid uint64, subj string, mutate func(*Subscription)) *Subscription {
	t.Helper()
	sub := &Subscription{Sink: s, SID: sid, Subject: subj}
	sub.SetCoalesce(true)
	if mutate != nil {
		mutate(sub)
	}
	if err := b.Subscribe(sub); err != nil {
		t.Fatalf("subscribe %q: %v", subj, err)
	}
	return sub
}

func callsString(c [][]uint64) string { return fmt.Sprint(c) }

// TestCoalescedDeliveryOneCallPerSink: a sink's coalescing subscriptions that match
// one message come in one call; its other subscriptions, other sinks and queue groups
// are delivered as before, and the matched count is per subscription, as before.
func TestCoalescedDeliveryOneCallPerSink(t *testing.T) {
	b := New()
	ms, single, plain := &multiRecorder{}, &multiRecorder{}, &recorder{}
	coSub(t, b, ms, 1, "a.b", nil)
	coSub(t, b, ms, 2, "a.*", nil)
	coSub(t, b, ms, 3, "a.>", nil)
	coSub(t, b, ms, 4, "a.c", nil) // does not match a.b
	coSub(t, b, ms, 5, "a.b", func(s *Subscription) { s.SetCoalesce(false) })
	coSub(t, b, ms, 6, "a.b", func(s *Subscription) { s.Queue = "g" }) // a group member: never coalesced
	coSub(t, b, single, 7, "a.b", nil)
	subscribe(t, b, plain, "a.>", "")
	var p Batch
	if n := publish(b, &p, "a.b", "m"); n != 7 {
		t.Fatalf("matched %d, want 7 (each eligible subscription and the group)", n)
	}
	p.Flush()
	if got := callsString(ms.take()); got != "[[5] [1 2 3] [6]]" {
		t.Fatalf("coalescing sink got %s, want the non-coalescing one alone, then 1 2 3 at once, then the group's", got)
	}
	if got := callsString(single.take()); got != "[[7]]" {
		t.Fatalf("sink with one subscription got %s", got)
	}
	if plain.count() != 1 {
		t.Fatalf("plain sink got %d", plain.count())
	}
	if n := publish(b, &p, "a.c", "m"); n != 4 {
		t.Fatalf("matched %d, want 4", n)
	}
	if got := callsString(ms.take()); got != "[[2 3 4]]" {
		t.Fatalf("a.c: got %s", got)
	}
}

// TestCoalescedDeliveryNoEchoAndFilter: a subscription that would skip the message
// alone (no echo, filter) is left out of its sink's call.
func TestCoalescedDeliveryNoEchoAndFilter(t *testing.T) {
	b := New()
	flt, err := filter.Compile(`hdr.kind == "wanted"`)
	if err != nil {
		t.Fatal(err)
	}
	ms := &multiRecorder{}
	coSub(t, b, ms, 1, "x", nil)
	coSub(t, b, ms, 2, "x", func(s *Subscription) { s.NoEcho = true })
	coSub(t, b, ms, 3, "*", func(s *Subscription) { s.Filter = flt })
	var p Batch
	send := func(kind string, origin Sink) int {
		var h header.Block
		if kind != "" {
			h = header.Append(h, "kind", kind)
		}
		return b.Publish(&p, &Message{Subject: []byte("x"), Header: h, Payload: []byte("m"), Origin: origin})
	}
	for _, c := range []struct {
		kind    string
		origin  Sink
		matched int
		want    string
	}{
		{"wanted", nil, 3, "[[1 2 3]]"},
		{"other", nil, 2, "[[1 2]]"},
		{"wanted", ms, 2, "[[1 3]]"},
		{"other", ms, 1, "[[1]]"},
	} {
		if n := send(c.kind, c.origin); n != c.matched {
			t.Errorf("kind %q own %v: matched %d, want %d", c.kind, c.origin != nil, n, c.matched)
		}
		if got := callsString(ms.take()); got != c.want {
			t.Errorf("kind %q own %v: got %s, want %s", c.kind, c.origin != nil, got, c.want)
		}
	}
}

// TestCoalescedDeliveryLimits: each subscription's message limit holds inside a
// coalesced call, and a refused call counts for none of them.
func TestCoalescedDeliveryLimits(t *testing.T) {
	b := New()
	ms := &multiRecorder{}
	limited := coSub(t, b, ms, 1, "l", nil)
	other := coSub(t, b, ms, 2, "l", nil)
	if err := b.AutoUnsubscribe(limited, 2); err != nil {
		t.Fatal(err)
	}
	var p Batch
	for range 3 {
		publish(b, &p, "l", "m")
	}
	if got := callsString(ms.take()); got != "[[1 2] [1 2] [2]]" {
		t.Fatalf("got %s, want the limited subscription in the first two calls only", got)
	}
	if !limited.Closed() || limited.Delivered() != 2 || other.Delivered() != 3 || b.Count() != 1 {
		t.Fatalf("limited closed %v delivered %d, other %d, count %d", limited.Closed(), limited.Delivered(), other.Delivered(), b.Count())
	}
	if !slices.Equal(ms.removed, []uint64{1}) {
		t.Fatalf("removed %v, want [1]", ms.removed)
	}

	third := coSub(t, b, ms, 3, "l", nil)
	ms.full = true
	publish(b, &p, "l", "m")
	if other.Delivered() != 3 || third.Delivered() != 0 {
		t.Fatalf("a refused call counted: other %d, third %d", other.Delivered(), third.Delivered())
	}
}

// TestCoalescedDeliveryManySinks: past the length grouped by comparison, the map
// groups as well: each sink one call with exactly its subscriptions, in any order of
// matching.
func TestCoalescedDeliveryManySinks(t *testing.T) {
	for _, sinks := range []int{2, 3, coalesceScan, coalesceScan + 1, 40} {
		t.Run(fmt.Sprint(sinks), func(t *testing.T) {
			b := New()
			rs := make([]*multiRecorder, sinks)
			want := make([]string, sinks)
			sid := uint64(0)
			for i := range rs {
				rs[i] = &multiRecorder{}
			}
			// Interleaved: sink i subscribes i%3+1 times, round after round.
			per := make([][]uint64, sinks)
			for round := range 3 {
				for i, r := range rs {
					if round > i%3 {
						continue
					}
					sid++
					subj := []string{"m.n", "m.*", "m.>"}[round]
					coSub(t, b, r, sid, subj, nil)
					per[i] = append(per[i], sid)
				}
			}
			for i := range rs {
				want[i] = callsString([][]uint64{per[i]})
			}
			var p Batch
			for range 2 { // the second time on reused scratch
				if n := publish(b, &p, "m.n", "x"); n != int(sid) {
					t.Fatalf("matched %d, want %d", n, sid)
				}
				for i, r := range rs {
					if got := callsString(r.take()); got != want[i] {
						t.Fatalf("sink %d got %s, want %s", i, got, want[i])
					}
				}
			}
			if len(p.co.subs) != 0 || len(p.co.last) != 0 {
				t.Fatalf("scratch left with %d subscriptions, %d map entries", len(p.co.subs), len(p.co.last))
			}
			for _, s := range p.co.subs[:cap(p.co.subs)] {
				if s != nil {
					t.Fatal("scratch still holds a subscription")
				}
			}
		})
	}
}

// TestCoalesceWithoutMultiSink: a Coalesce mark on a sink that cannot take several
// subscriptions at once changes nothing.
func TestCoalesceWithoutMultiSink(t *testing.T) {
	b := New()
	r := &recorder{}
	coSub(t, b, r, 1, "k", nil)
	coSub(t, b, r, 2, "*", nil)
	var p Batch
	if n := publish(b, &p, "k", "m"); n != 2 || r.count() != 2 {
		t.Fatalf("matched %d, delivered %d; want 2 and 2", n, r.count())
	}
}

// nopMultiSink counts without locking, to measure the routing cost alone.
type nopMultiSink struct{ n int }

func (s *nopMultiSink) Deliver(*Subscription, *Message) bool { s.n++; return true }
func (s *nopMultiSink) DeliverMatched(subs []*Subscription, _ *Message) bool {
	s.n++
	return true
}
func (s *nopMultiSink) Flush() {}

func TestCoalescedPublishDoesNotAllocate(t *testing.T) {
	for _, sinks := range []int{1, 2, coalesceScan + 4} {
		t.Run(fmt.Sprint(sinks), func(t *testing.T) {
			b := New()
			for i := range sinks {
				s := &nopMultiSink{}
				coSub(t, b, s, uint64(2*i), "a.b", nil)
				if i%2 == 0 {
					coSub(t, b, s, uint64(2*i+1), "a.*", nil)
				}
			}
			m := &Message{Subject: []byte("a.b"), Payload: make([]byte, 16)}
			var p Batch
			b.Publish(&p, m)
			p.Flush()
			allocs := testing.AllocsPerRun(1000, func() {
				b.Publish(&p, m)
				p.Flush()
			})
			if allocs != 0 {
				t.Fatalf("Publish allocates %.1f times per message", allocs)
			}
		})
	}
}

func BenchmarkPublishCoalesced(b *testing.B) {
	for _, sinks := range []int{1, 4, 64} {
		b.Run(fmt.Sprint(sinks), func(b *testing.B) {
			br := New()
			for i := range sinks {
				s := &nopMultiSink{}
				coSub(b, br, s, uint64(2*i), "bench.subject", nil)
				coSub(b, br, s, uint64(2*i+1), "bench.*", nil)
			}
			m := &Message{Subject: []byte("bench.subject"), Payload: make([]byte, 16)}
			var p Batch
			b.ReportAllocs()
			for b.Loop() {
				br.Publish(&p, m)
			}
			p.Flush()
		})
	}
}
