package stream

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/testenv"
)

// submitRecorder is a node's real Raft host that also notes which goroutine
// submits each entry.
type submitRecorder struct {
	*replica.Host
	mu    sync.Mutex
	gorts []uint64
}

func (r *submitRecorder) Submit(group uint64, data []byte) (replica.Proposal, error) {
	r.mu.Lock()
	r.gorts = append(r.gorts, testenv.GoroutineID())
	r.mu.Unlock()
	return r.Host.Submit(group, data)
}

func (r *submitRecorder) submitters() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.gorts...)
}

// writerIdle waits until the writer runs, no one does its work and no inline
// batch waits.
func writerIdle(t *testing.T, s *Stream) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.role.TryLock() {
			idle := s.writerLive && !s.inPass
			s.role.Unlock()
			if idle {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the writer did not become idle")
}

// stableElectionTicks keeps the recorded cluster's leader in place while a
// loaded machine stalls its Raft loops: 80 ms (the fast default of these tests)
// is short enough for an election in the middle of a test, after which the old
// leader no longer captures the subjects and its publishes go unanswered.
const stableElectionTicks = 50

func startRecordedCluster(t *testing.T) (leader *replNode, rec *submitRecorder) {
	t.Helper()
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}
	recs := map[uint64]*submitRecorder{}
	var nodes []*replNode
	for id := uint64(1); id <= 3; id++ {
		nodes = append(nodes, startReplNodeWith(t, net, id, cfg, stableElectionTicks, func(h *replica.Host) Replicator {
			recs[id] = &submitRecorder{Host: h}
			return recs[id]
		}))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(net)
		}
	})
	leader = leaderOf(t, nodes)
	return leader, recs[leader.id]
}

// A publisher flushing inline to an idle replicated stream proposes its batch
// on its own goroutine: the writer goroutine is not woken before the entry
// goes out, and the publish is acknowledged and stored in order.
func TestInlinePublisherProposesItself(t *testing.T) {
	leader, rec := startRecordedCluster(t)
	me := testenv.GoroutineID()
	const n = 20
	for i := range n {
		writerIdle(t, leader.s)
		reply := fmt.Sprintf("_ACK.I.%d", i)
		var p broker.Batch
		leader.b.Publish(&p, &broker.Message{Subject: []byte("orders.x"), Reply: []byte(reply), Payload: []byte(fmt.Sprint("m", i))})
		p.FlushInline()
		if a := leader.waitAck(t, reply); a != fmt.Sprintf("+OK ORDERS 0 %d", i+1) {
			t.Fatalf("publish %d answered %q", i, a)
		}
	}
	subs := rec.submitters()
	if len(subs) != n {
		t.Fatalf("%d entries submitted for %d publishes", len(subs), n)
	}
	for i, g := range subs {
		if g != me {
			t.Errorf("entry %d submitted by goroutine %d, not the publisher's (%d)", i, g, me)
		}
	}
}

// While the writer is busy, a publisher flushing inline does not wait for it:
// it wakes the writer, which proposes the batch once free.
func TestInlinePublisherLeavesABusyWriter(t *testing.T) {
	leader, rec := startRecordedCluster(t)
	writerIdle(t, leader.s)
	release := make(chan struct{})
	busy := make(chan struct{})
	opDone := make(chan error, 1)
	go func() {
		opDone <- leader.s.onWriter(func() {
			close(busy)
			<-release
		})
	}()
	<-busy
	var p broker.Batch
	leader.b.Publish(&p, &broker.Message{Subject: []byte("orders.x"), Reply: []byte("_ACK.busy"), Payload: []byte("m")})
	p.FlushInline() // returns with the writer still busy
	if _, ok := leader.inbox.get("_ACK.busy"); ok {
		t.Fatal("acknowledged while the writer was held")
	}
	if subs := rec.submitters(); len(subs) != 0 {
		t.Fatalf("%d entries submitted while the writer was held", len(subs))
	}
	close(release)
	if err := <-opDone; err != nil {
		t.Fatal(err)
	}
	if a := leader.waitAck(t, "_ACK.busy"); a != "+OK ORDERS 0 1" {
		t.Fatalf("answered %q", a)
	}
	if subs := rec.submitters(); len(subs) != 1 || subs[0] == testenv.GoroutineID() {
		t.Fatalf("submitted by %v, want once by the writer", subs)
	}
}

// Publishers on many goroutines flushing inline at once, each waiting for its
// answer before the next publish: every message is acknowledged once, in one
// sequence without gaps, and the stream holds each once.
func TestInlinePublishersConcurrently(t *testing.T) {
	leader, _ := startRecordedCluster(t)
	const pubs, each = 8, 40
	var wg sync.WaitGroup
	for g := range pubs {
		wg.Go(func() {
			for i := range each {
				reply := fmt.Sprintf("_ACK.C.%d.%d", g, i)
				var p broker.Batch
				leader.b.Publish(&p, &broker.Message{Subject: []byte("orders.x"), Reply: []byte(reply), Payload: []byte(reply)})
				p.FlushInline()
				leader.waitAck(t, reply)
			}
		})
	}
	wg.Wait()
	seqs := map[string]bool{}
	leader.inbox.mu.Lock()
	for r, answers := range leader.inbox.all {
		if len(answers) != 1 {
			t.Errorf("%s answered %d times: %q", r, len(answers), answers)
		}
		seqs[answers[0]] = true
	}
	leader.inbox.mu.Unlock()
	for i := 1; i <= pubs*each; i++ {
		if !seqs[fmt.Sprintf("+OK ORDERS 0 %d", i)] {
			t.Errorf("no publish acknowledged with sequence %d", i)
		}
	}
	if st := leader.s.state(); st.Msgs != pubs*each {
		t.Errorf("stream holds %d messages, want %d", st.Msgs, pubs*each)
	}
}

// On a stream of one node, a publisher flushing inline to an idle writer
// commits its batch itself: the acknowledgement is out when FlushInline
// returns, and the message is stored.
func TestInlinePublisherCommitsItself(t *testing.T) {
	b := broker.New()
	m, err := New(Config{Dir: t.TempDir()}, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.AddStream(streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	inbox := &ackInbox{acks: map[string]string{}}
	if err := b.Subscribe(&broker.Subscription{Sink: inbox, Subject: "_ACK.>"}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		writerIdle(t, s)
		reply := fmt.Sprintf("_ACK.%d", i)
		var p broker.Batch
		b.Publish(&p, &broker.Message{Subject: []byte("orders.x"), Reply: []byte(reply), Payload: []byte("m")})
		p.FlushInline()
		if a, ok := inbox.get(reply); !ok || a != fmt.Sprintf("+OK ORDERS 0 %d", i+1) {
			t.Fatalf("publish %d: answered %q (%v) when FlushInline returned", i, a, ok)
		}
	}
	if st := s.state(); st.Msgs != 20 {
		t.Fatalf("stream holds %d messages, want 20", st.Msgs)
	}
}
