package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tern-mq/tern/internal/testenv"
)

// A follower steps what it receives on the sender's goroutine when its loop is
// idle (LocalNetwork delivers as a route reader does: Enqueue, then Kick), so one
// goroutine applies entries of two nodes — with only each node's loop running its
// Core, no goroutine would; the log every node applies is the leader's, in order.
func TestKickStepsOnTheReceiversGoroutine(t *testing.T) {
	c := newCluster(t, testConfig(), 3)
	c.addGroup(1, []uint64{1, 2, 3})
	var mu sync.Mutex
	applyOn := map[uint64]map[uint64]bool{} // node -> goroutines that applied
	for _, n := range c.nodes {
		applyOn[n] = map[uint64]bool{}
		c.sms[[2]uint64{n, 1}].onApply = func(Entry, uint64) {
			mu.Lock()
			applyOn[n][testenv.GoroutineID()] = true
			mu.Unlock()
		}
	}
	for _, h := range c.hosts {
		h.Start()
	}
	if err := c.hosts[1].Campaign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	c.waitLeaders(t, []uint64{1}, 10*time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	for i := range 200 {
		idx, err := c.propose(ctx, 1, fmt.Appendf(nil, "e%d", i))
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
		last = idx
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range c.nodes {
		for {
			st, err := c.hosts[n].Status(1)
			if err == nil && st.Applied >= last {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: applied %d of %d", n, st.Applied, last)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	leader, _ := c.leader.Load(uint64(1))
	want := c.sms[[2]uint64{leader.(uint64), 1}].digest
	mu.Lock()
	defer mu.Unlock()
	shared := false
	for _, n := range c.nodes {
		if d := c.sms[[2]uint64{n, 1}].digest; d != want {
			t.Errorf("node %d applied a log of digest %x, the leader's is %x", n, d, want)
		}
		for _, m := range c.nodes {
			for g := range applyOn[n] {
				shared = shared || (m != n && applyOn[m][g])
			}
		}
	}
	if !shared {
		t.Errorf("every node applied on goroutines of its own: %v", applyOn)
	}
}

// A batch carrying a snapshot is never stepped inline (installing it may take
// long, and a route's reader must go on reading): Kick leaves it, and everything
// queued with it, to the loop.
func TestKickLeavesSnapshotsToTheLoop(t *testing.T) {
	h, err := NewHost(Config{NodeID: 2}, NewLocalNetwork().Transport(2))
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(b *Batch) {
		t.Helper()
		enc, err := AppendBatch(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Enqueue(enc); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(&Batch{From: 1, To: 2, Beats: []Beat{{Group: 9, Term: 1}}})
	if !h.drain(true) || len(h.inbox) != 0 {
		t.Fatalf("a heartbeat batch was not taken inline (inbox %d)", len(h.inbox))
	}
	enqueue(&Batch{From: 1, To: 2, Beats: []Beat{{Group: 9, Term: 1}}})
	snap := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(1)),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(1))}}}
	enqueue(&Batch{From: 1, To: 2, Msgs: []Msg{{Group: 9, M: snap}}})
	if h.drain(true) {
		t.Fatal("drain took a snapshot inline")
	}
	if len(h.inbox) != 2 {
		t.Fatalf("inline drain left %d batches, want 2", len(h.inbox))
	}
	if !h.drain(false) || len(h.inbox) != 0 || h.snaps != 0 {
		t.Fatalf("the loop's drain left %d batches, %d snapshots counted", len(h.inbox), h.snaps)
	}
	enqueue(&Batch{From: 1, To: 2, Beats: []Beat{{Group: 9, Term: 1}}})
	if !h.drain(true) {
		t.Fatal("after the snapshot was taken, a heartbeat batch was not taken inline")
	}
}

// Kick before Start and after Stop only wakes (or does nothing); it never runs
// the Core of a host whose loop is not running.
func TestKickOutsideTheLoop(t *testing.T) {
	c := newCluster(t, testConfig(), 1)
	h := c.hosts[1]
	h.Kick() // not started: the Core belongs to AddGroup
	c.addGroup(1, []uint64{1})
	h.Start()
	if err := h.Campaign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	c.waitLeaders(t, []uint64{1}, 5*time.Second, 0)
	h.Kick()
	h.Stop()
	h.Kick()
	if _, err := h.Propose(context.Background(), 1, []byte("x")); err != ErrStopped {
		t.Fatalf("Propose after Stop: %v, want ErrStopped", err)
	}
}
