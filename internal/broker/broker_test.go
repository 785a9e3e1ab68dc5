package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tern-mq/tern/internal/filter"
	"github.com/tern-mq/tern/internal/header"
)

// recorder is a Sink that keeps copies of what it is given.
type recorder struct {
	mu      sync.Mutex
	got     []string // subject|payload
	flushes atomic.Int32
	full    bool // refuse deliveries, as a slow consumer under the drop policy
}

func (r *recorder) Deliver(sub *Subscription, m *Message) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return false
	}
	r.got = append(r.got, string(m.Subject)+"|"+string(m.Payload))
	return true
}

func (r *recorder) Flush() { r.flushes.Add(1) }

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func subscribe(t *testing.T, b *Broker, s Sink, subj, queue string) *Subscription {
	t.Helper()
	sub := &Subscription{Sink: s, Subject: subj, Queue: queue}
	if err := b.Subscribe(sub); err != nil {
		t.Fatalf("subscribe %q: %v", subj, err)
	}
	return sub
}

func publish(b *Broker, p *Batch, subj, payload string) int {
	return b.Publish(p, &Message{Subject: []byte(subj), Payload: []byte(payload)})
}

func TestBroadcastToEveryMatchingSubscriber(t *testing.T) {
	b := New()
	exact, star, full, other := &recorder{}, &recorder{}, &recorder{}, &recorder{}
	subscribe(t, b, exact, "sensors.k1.temp", "")
	subscribe(t, b, star, "sensors.*.temp", "")
	subscribe(t, b, full, "sensors.>", "")
	subscribe(t, b, other, "sensors.k2.temp", "")
	var p Batch
	if n := publish(b, &p, "sensors.k1.temp", "21.5"); n != 3 {
		t.Fatalf("matched %d subscriptions, want 3", n)
	}
	p.Flush()
	for name, r := range map[string]*recorder{"exact": exact, "star": star, "full": full} {
		if r.count() != 1 || r.got[0] != "sensors.k1.temp|21.5" {
			t.Errorf("%s got %v", name, r.got)
		}
		if r.flushes.Load() != 1 {
			t.Errorf("%s flushed %d times, want once per batch", name, r.flushes.Load())
		}
	}
	if other.count() != 0 {
		t.Errorf("non-matching subscriber got %v", other.got)
	}
}

func TestOneFlushPerSinkPerBatch(t *testing.T) {
	b := New()
	r := &recorder{}
	subscribe(t, b, r, "a", "")
	subscribe(t, b, r, "a.>", "")
	var p Batch
	for i := 0; i < 100; i++ {
		publish(b, &p, "a", "x")
		publish(b, &p, "a.b", "y")
	}
	p.Flush()
	if r.count() != 200 || r.flushes.Load() != 1 {
		t.Fatalf("got %d messages and %d flushes, want 200 and 1", r.count(), r.flushes.Load())
	}
}

func TestQueueGroupDeliversEachMessageToExactlyOneMemberEvenly(t *testing.T) {
	b := New()
	members := make([]*recorder, 4)
	for i := range members {
		members[i] = &recorder{}
		// Members subscribe with different but overlapping filters: still one group.
		subj := "jobs.*"
		if i%2 == 1 {
			subj = "jobs.>"
		}
		subscribe(t, b, members[i], subj, "workers")
	}
	plain := &recorder{}
	subscribe(t, b, plain, "jobs.*", "")
	var p Batch
	const n = 4000
	for i := 0; i < n; i++ {
		if got := publish(b, &p, "jobs.resize", fmt.Sprint(i)); got != 2 {
			t.Fatalf("matched %d, want 2 (group + plain)", got)
		}
	}
	total := 0
	for i, m := range members {
		c := m.count()
		total += c
		if c != n/4 {
			t.Errorf("member %d got %d, want %d (round robin)", i, c, n/4)
		}
	}
	if total != n || plain.count() != n {
		t.Fatalf("group total %d, plain %d, want %d each", total, plain.count(), n)
	}
}

func TestQueueGroupSkipsMemberThatDrops(t *testing.T) {
	b := New()
	slow, fast := &recorder{full: true}, &recorder{}
	subscribe(t, b, slow, "q", "g")
	subscribe(t, b, fast, "q", "g")
	var p Batch
	for i := 0; i < 10; i++ {
		publish(b, &p, "q", "m")
	}
	if fast.count() != 10 {
		t.Fatalf("healthy member got %d of 10 while the other was full", fast.count())
	}
}

func TestFilterSelectsSenderAndSize(t *testing.T) {
	b := New()
	flt, err := filter.Compile(`hdr.sender == "s1" && size <= 4`)
	if err != nil {
		t.Fatal(err)
	}
	want, all := &recorder{}, &recorder{}
	if err := b.Subscribe(&Subscription{Sink: want, Subject: "ev", Filter: flt}); err != nil {
		t.Fatal(err)
	}
	subscribe(t, b, all, "ev", "")
	var p Batch
	send := func(sender, payload string) {
		var h header.Block
		if sender != "" {
			h = header.Append(h, "sender", sender)
		}
		b.Publish(&p, &Message{Subject: []byte("ev"), Header: h, Payload: []byte(payload)})
	}
	send("s1", "ok")     // passes
	send("s2", "ok")     // wrong sender
	send("s1", "toobig") // too large
	send("", "ok")       // no headers
	send("s1", "fine")   // passes
	if want.count() != 2 || want.got[0] != "ev|ok" || want.got[1] != "ev|fine" {
		t.Fatalf("filtered subscriber got %v", want.got)
	}
	if all.count() != 5 {
		t.Fatalf("unfiltered subscriber got %d, want 5", all.count())
	}
}

func TestNoEchoSkipsOwnMessages(t *testing.T) {
	b := New()
	me, peer := &recorder{}, &recorder{}
	if err := b.Subscribe(&Subscription{Sink: me, Subject: "chat", NoEcho: true}); err != nil {
		t.Fatal(err)
	}
	subscribe(t, b, peer, "chat", "")
	var p Batch
	if n := b.Publish(&p, &Message{Subject: []byte("chat"), Payload: []byte("hi"), Origin: me}); n != 1 {
		t.Fatalf("matched %d, want 1", n)
	}
	if me.count() != 0 || peer.count() != 1 {
		t.Fatalf("me %d peer %d", me.count(), peer.count())
	}
}

func TestAutoUnsubscribeStopsAfterMax(t *testing.T) {
	b := New()
	r := &recorder{}
	sub := subscribe(t, b, r, "x", "")
	if err := b.AutoUnsubscribe(sub, 3); err != nil {
		t.Fatal(err)
	}
	var p Batch
	for i := 0; i < 10; i++ {
		publish(b, &p, "x", "m")
	}
	if r.count() != 3 || !sub.Closed() || b.Count() != 0 {
		t.Fatalf("got %d messages, closed=%v, count=%d; want 3, true, 0", r.count(), sub.Closed(), b.Count())
	}
	if err := b.Unsubscribe(sub); err != nil {
		t.Fatalf("unsubscribe after auto-removal: %v", err)
	}
}

func TestUnsubscribeAndErrors(t *testing.T) {
	b := New()
	r := &recorder{}
	sub := subscribe(t, b, r, "a.b", "")
	if err := b.Unsubscribe(sub); err != nil {
		t.Fatal(err)
	}
	var p Batch
	if n := publish(b, &p, "a.b", "m"); n != 0 || r.count() != 0 {
		t.Fatalf("delivered after unsubscribe")
	}
	if err := b.Subscribe(&Subscription{Sink: r, Subject: "a..b"}); !errors.Is(err, ErrBadSubject) {
		t.Fatalf("bad subject: %v", err)
	}
	if err := b.Subscribe(&Subscription{Sink: r, Subject: "a", Queue: "g h"}); !errors.Is(err, ErrBadQueue) {
		t.Fatalf("bad queue: %v", err)
	}
}

func TestConcurrentPublishSubscribe(t *testing.T) {
	b := New()
	stable := &recorder{}
	subscribe(t, b, stable, "load.>", "")
	var wg sync.WaitGroup
	const pubs, per = 4, 2000
	for i := 0; i < pubs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p Batch
			for j := 0; j < per; j++ {
				publish(b, &p, "load.x", "m")
				if j%64 == 0 {
					p.Flush()
				}
			}
			p.Flush()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := 0; j < 500; j++ {
			r := &recorder{}
			s := subscribe(t, b, r, "load.*", "g")
			_ = b.Unsubscribe(s)
		}
	}()
	wg.Wait()
	if stable.count() != pubs*per {
		t.Fatalf("stable subscriber got %d, want %d", stable.count(), pubs*per)
	}
}

// nopSink counts without locking, to measure the routing cost alone.
type nopSink struct{ n int }

func (s *nopSink) Deliver(*Subscription, *Message) bool { s.n++; return true }
func (s *nopSink) Flush()                               {}

func TestPublishDoesNotAllocate(t *testing.T) {
	b := New()
	s := &nopSink{}
	subscribe(t, b, s, "a.b", "")
	subscribe(t, b, s, "a.*", "g")
	m := &Message{Subject: []byte("a.b"), Payload: make([]byte, 16)}
	var p Batch
	b.Publish(&p, m)
	allocs := testing.AllocsPerRun(1000, func() {
		b.Publish(&p, m)
		p.Flush()
	})
	if allocs != 0 {
		t.Fatalf("Publish allocates %.1f times per message", allocs)
	}
}

func BenchmarkPublishFanout4(b *testing.B) {
	br := New()
	s := &nopSink{}
	for i := 0; i < 4; i++ {
		if err := br.Subscribe(&Subscription{Sink: s, Subject: "bench.subject"}); err != nil {
			b.Fatal(err)
		}
	}
	m := &Message{Subject: []byte("bench.subject"), Payload: make([]byte, 16)}
	var p Batch
	b.ReportAllocs()
	for b.Loop() {
		br.Publish(&p, m)
	}
	p.Flush()
}

func BenchmarkPublishQueueGroup(b *testing.B) {
	br := New()
	s := &nopSink{}
	for i := 0; i < 4; i++ {
		if err := br.Subscribe(&Subscription{Sink: s, Subject: "bench.subject", Queue: "g"}); err != nil {
			b.Fatal(err)
		}
	}
	m := &Message{Subject: []byte("bench.subject"), Payload: make([]byte, 16)}
	var p Batch
	b.ReportAllocs()
	for b.Loop() {
		br.Publish(&p, m)
	}
}

// TestGroupRestrictsDelivery: a message for one queue group reaches one member of it
// and nobody else on the subject.
func TestGroupRestrictsDelivery(t *testing.T) {
	b := New()
	g1, g2, other, plain := &recorder{}, &recorder{}, &recorder{}, &recorder{}
	subscribe(t, b, g1, "deliver.x", "g")
	subscribe(t, b, g2, "deliver.x", "g")
	subscribe(t, b, other, "deliver.x", "h")
	subscribe(t, b, plain, "deliver.x", "")
	var p Batch
	for i := 0; i < 10; i++ {
		if n := b.Publish(&p, &Message{Subject: []byte("deliver.x"), Payload: []byte("m"), Group: "g"}); n != 1 {
			t.Fatalf("matched %d, want 1", n)
		}
	}
	if g1.count()+g2.count() != 10 || g1.count() == 0 || g2.count() == 0 || other.count() != 0 || plain.count() != 0 {
		t.Fatalf("g %d+%d, other group %d, plain %d; want 10 over g only", g1.count(), g2.count(), other.count(), plain.count())
	}
	if n := b.Publish(&p, &Message{Subject: []byte("deliver.x"), Payload: []byte("m"), Group: "nobody"}); n != 0 {
		t.Fatalf("a group with no members matched %d", n)
	}
}

// TestQueueGroupSpreadsOverDistinctSubjects: a group subscribed with a wildcard gets
// messages on many distinct subjects spread over its members, not all on one.
func TestQueueGroupSpreadsOverDistinctSubjects(t *testing.T) {
	b := New()
	m1, m2 := &recorder{}, &recorder{}
	subscribe(t, b, m1, "jobs.*", "w")
	subscribe(t, b, m2, "jobs.*", "w")
	var p Batch
	for i := 0; i < 100; i++ {
		if got := publish(b, &p, fmt.Sprintf("jobs.j%d", i), "x"); got != 1 {
			t.Fatalf("matched %d", got)
		}
	}
	if m1.count()+m2.count() != 100 || m1.count() < 25 || m2.count() < 25 {
		t.Fatalf("members got %d and %d of 100 messages on distinct subjects", m1.count(), m2.count())
	}
}

// groupRecorder is a recorder that is also a Grouper: a group's messages are
// kept in a stage of their own and added to got at EndGroup, together.
type groupRecorder struct {
	recorder
	ends int
}

type groupStageT struct{ got []string }

func (g *groupRecorder) DeliverGroup(_ *Subscription, m *Message, stage any) (any, bool) {
	st, _ := stage.(*groupStageT)
	if st == nil {
		st = &groupStageT{}
	}
	st.got = append(st.got, string(m.Subject)+"|"+string(m.Payload))
	return st, true
}

func (g *groupRecorder) EndGroup(stage any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, stage.(*groupStageT).got...)
	g.ends++
}

// TestGroupedDelivery: between BeginGroup and the flush a Grouper gets its
// messages through one stage, queued together at the flush before it is woken;
// a sink that is not a Grouper gets each at once, and after the flush a
// Grouper gets plain deliveries again.
func TestGroupedDelivery(t *testing.T) {
	b := New()
	g1, g2, plain := &groupRecorder{}, &groupRecorder{}, &recorder{}
	subscribe(t, b, g1, "a.>", "")
	subscribe(t, b, g2, "a.two", "")
	subscribe(t, b, plain, "a.>", "")
	var p Batch
	p.BeginGroup()
	for _, subj := range []string{"a.one", "a.two", "a.one"} {
		if n := publish(b, &p, subj, "x"); n == 0 {
			t.Fatalf("%s: no subscriber", subj)
		}
	}
	if g1.count() != 0 || g2.count() != 0 || plain.count() != 3 {
		t.Fatalf("before the flush: groupers hold %d and %d, plain %d; want 0, 0, 3", g1.count(), g2.count(), plain.count())
	}
	p.Flush()
	if g1.count() != 3 || g2.count() != 1 || g1.ends != 1 || g2.ends != 1 {
		t.Fatalf("after the flush: %v (%d ends), %v (%d ends)", g1.got, g1.ends, g2.got, g2.ends)
	}
	if g1.flushes.Load() != 1 || g2.flushes.Load() != 1 {
		t.Fatalf("flushes %d and %d, want 1 each", g1.flushes.Load(), g2.flushes.Load())
	}
	publish(b, &p, "a.one", "y") // no group now
	if g1.count() != 4 || g1.ends != 1 {
		t.Fatalf("outside a group: %v, %d ends", g1.got, g1.ends)
	}
	p.Flush()
	if g1.ends != 1 {
		t.Fatalf("a flush with no group ended %d groups", g1.ends-1)
	}
}
