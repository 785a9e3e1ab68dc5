package replica

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// earlyCluster is three Cores of one group driven by hand: each pump delivers
// what a node sends, early batches first, as Host does.
type earlyCluster struct {
	t      *testing.T
	cores  map[uint64]*Core
	stores map[uint64]*memStorage
	acked  map[uint64]uint64 // token -> index, of successful proposals
}

func newEarlyCluster(t *testing.T, sendBeforeSync bool) *earlyCluster {
	return newEarlyClusterGroup(t, sendBeforeSync, false)
}

// newEarlyClusterGroup is newEarlyCluster with the group's GroupConfig.LazyCommit.
func newEarlyClusterGroup(t *testing.T, sendBeforeSync, lazyCommit bool) *earlyCluster {
	ec := &earlyCluster{t: t, cores: map[uint64]*Core{}, stores: map[uint64]*memStorage{}, acked: map[uint64]uint64{}}
	for id := uint64(1); id <= 3; id++ {
		cfg := testConfig()
		cfg.NodeID, cfg.SendBeforeSync = id, sendBeforeSync
		c, err := NewCore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := newMemStorage()
		if err := c.AddGroup(GroupConfig{ID: 1, Storage: st, StateMachine: &chainSM{}, Voters: []uint64{1, 2, 3}, LazyCommit: lazyCommit}); err != nil {
			t.Fatal(err)
		}
		ec.cores[id], ec.stores[id] = c, st
	}
	return ec
}

// iteration is what one node's Ready sent, and whether its storage had
// unsynced writes when its early batches left.
type iteration struct {
	early, out []raftpb.MessageType
	unsynced   bool // at the time the early batches were sent
	batches    []Batch
}

func (ec *earlyCluster) ready(id uint64) iteration {
	c := ec.cores[id]
	rd := c.Ready()
	var it iteration
	it.unsynced = len(ec.stores[id].pending) > 0
	for _, b := range rd.Early {
		for _, m := range b.Msgs {
			it.early = append(it.early, m.M.GetType())
		}
		it.batches = append(it.batches, copyBatch(ec.t, b))
	}
	for _, st := range rd.Sync {
		if err := st.Sync(); err != nil {
			ec.t.Fatal(err)
		}
	}
	for _, b := range rd.Out {
		for _, m := range b.Msgs {
			it.out = append(it.out, m.M.GetType())
		}
		it.batches = append(it.batches, copyBatch(ec.t, b))
	}
	for _, r := range c.Advance(rd) {
		if r.Err == nil {
			ec.acked[r.Token] = r.Index
		}
	}
	return it
}

func copyBatch(t *testing.T, b *Batch) Batch {
	data, err := AppendBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	var out Batch
	if err := DecodeBatch(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// settle delivers everything until no node has anything to do.
func (ec *earlyCluster) settle() {
	ec.settleCounting()
}

// settleCounting is settle; it returns how many appends without entries the
// nodes sent.
func (ec *earlyCluster) settleCounting() (emptyApps int) {
	for round := 0; round < 100; round++ {
		busy := false
		for id := uint64(1); id <= 3; id++ {
			if !ec.cores[id].HasReady() {
				continue
			}
			busy = true
			for _, b := range ec.ready(id).batches {
				for _, m := range b.Msgs {
					if m.M.GetType() == raftpb.MsgApp && len(m.M.GetEntries()) == 0 {
						emptyApps++
					}
				}
				ec.cores[b.To].Step(&b)
			}
		}
		if !busy {
			return emptyApps
		}
	}
	ec.t.Fatal("the nodes never settled")
	return emptyApps
}

// TestLazyCommit: with GroupConfig.LazyCommit a commit is not followed by an
// empty append to each follower; the followers learn it with the next
// proposal's append, or with the heartbeats of the next heartbeat interval.
// Without it they learn it at once.
func TestLazyCommit(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		ec := newEarlyClusterGroup(t, true, lazy)
		if err := ec.cores[1].Campaign(1); err != nil {
			t.Fatal(err)
		}
		ec.settle()
		followersApplied := func() uint64 {
			least := uint64(1 << 63)
			for id := uint64(2); id <= 3; id++ {
				st, _ := ec.cores[id].Status(1)
				least = min(least, st.Applied)
			}
			return least
		}
		before := ec.cores[1].Stats().LazyCommits
		if err := ec.cores[1].Propose(1, 7, []byte("x")); err != nil {
			t.Fatal(err)
		}
		empty := ec.settleCounting()
		idx, ok := ec.acked[7]
		if !ok {
			t.Fatalf("lazy=%v: the proposal was not acknowledged", lazy)
		}
		switch {
		case !lazy && (empty != 2 || followersApplied() < idx):
			t.Fatalf("eager commit: %d empty appends, followers applied %d of %d; want 2 and all of it", empty, followersApplied(), idx)
		case lazy && (empty != 0 || followersApplied() >= idx):
			t.Fatalf("lazy commit: %d empty appends, followers applied %d of %d; want none and not yet", empty, followersApplied(), idx)
		}
		if lazy {
			if got := ec.cores[1].Stats().LazyCommits - before; got != 2 {
				t.Fatalf("LazyCommits went up by %d, want 2 (one per follower)", got)
			}
			// The next proposal's append carries the commit.
			if err := ec.cores[1].Propose(1, 8, []byte("y")); err != nil {
				t.Fatal(err)
			}
			ec.settle()
			if followersApplied() < idx {
				t.Fatalf("followers applied %d after the next append, want %d", followersApplied(), idx)
			}
			// And the heartbeats carry the last one.
			last := ec.acked[8]
			for range ec.cores[1].Config().HeartbeatTicks {
				for id := uint64(1); id <= 3; id++ {
					ec.cores[id].Tick()
				}
				ec.settle()
			}
			if followersApplied() < last {
				t.Fatalf("followers applied %d a heartbeat interval after the commit of %d", followersApplied(), last)
			}
		}
	}
}

func has(ts []raftpb.MessageType, t raftpb.MessageType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// TestSendBeforeSync: with SendBeforeSync a leader's appends leave before its
// own log is synced, while the followers' answers wait for theirs; without it,
// nothing leaves early.
func TestSendBeforeSync(t *testing.T) {
	for _, on := range []bool{true, false} {
		ec := newEarlyCluster(t, on)
		if err := ec.cores[1].Campaign(1); err != nil {
			t.Fatal(err)
		}
		ec.settle()
		if st, _ := ec.cores[1].Status(1); st.State != "StateLeader" {
			t.Fatalf("node 1 is %s after its campaign", st.State)
		}
		if err := ec.cores[1].Propose(1, 7, []byte("x")); err != nil {
			t.Fatal(err)
		}
		lead := ec.ready(1)
		switch {
		case on && (!has(lead.early, raftpb.MsgApp) || has(lead.out, raftpb.MsgApp) || !lead.unsynced):
			t.Fatalf("leader sent early %v, late %v (unsynced at the early send: %v): want its appends before its sync", lead.early, lead.out, lead.unsynced)
		case !on && (len(lead.early) > 0 || !has(lead.out, raftpb.MsgApp)):
			t.Fatalf("without SendBeforeSync the leader sent early %v, late %v", lead.early, lead.out)
		}
		for _, b := range lead.batches {
			ec.cores[b.To].Step(&b)
		}
		for id := uint64(2); id <= 3; id++ {
			f := ec.ready(id)
			if len(f.early) > 0 || !has(f.out, raftpb.MsgAppResp) {
				t.Fatalf("follower %d sent early %v, late %v: its answer must wait for its sync", id, f.early, f.out)
			}
			for _, b := range f.batches {
				ec.cores[b.To].Step(&b)
			}
		}
		ec.settle()
		idx, ok := ec.acked[7]
		if !ok {
			t.Fatalf("sendBeforeSync=%v: the proposal was not acknowledged", on)
		}
		for id := uint64(1); id <= 3; id++ {
			if st, _ := ec.cores[id].Status(1); st.Applied < idx {
				t.Fatalf("sendBeforeSync=%v: node %d applied %d, want the proposal (%d) applied everywhere", on, id, st.Applied, idx)
			}
		}
	}
}

// TestLeaderReadIndex: a read index is served on any replica, through the
// leader, but one that must prove leadership is refused on a follower: a deposed
// leader serving from its own state would otherwise take it for proof that it
// still leads.
func TestLeaderReadIndex(t *testing.T) {
	ec := newEarlyCluster(t, false)
	if err := ec.cores[1].Campaign(1); err != nil {
		t.Fatal(err)
	}
	ec.settle()
	var nl *NotLeaderError
	if err := ec.cores[2].LeaderReadIndex(1, 21); !errors.As(err, &nl) || nl.Leader != 1 {
		t.Fatalf("a follower's leader read: %v, want a NotLeaderError naming node 1", err)
	}
	for id, token := range map[uint64]uint64{1: 22, 2: 23} {
		read := ec.cores[id].ReadIndex
		if id == 1 {
			read = ec.cores[id].LeaderReadIndex
		}
		if err := read(1, token); err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
	}
	ec.settle()
	for _, token := range []uint64{22, 23} {
		if _, ok := ec.acked[token]; !ok {
			t.Fatalf("read %d was not answered", token)
		}
	}
}
