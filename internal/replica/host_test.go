package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// cluster is nodes Hosts on a LocalNetwork with groups groups of 3 replicas.
type cluster struct {
	t      testing.TB
	net    *LocalNetwork
	cfg    Config
	hosts  map[uint64]*Host
	stores map[[2]uint64]*memStorage // node, group
	sms    map[[2]uint64]*chainSM
	nodes  []uint64
	leader sync.Map // group -> node, from OnLeaderChange
	// lazyCommit: the groups addGroup adds have GroupConfig.LazyCommit.
	lazyCommit bool
}

func newCluster(t testing.TB, cfg Config, nodes int) *cluster {
	c := &cluster{t: t, net: NewLocalNetwork(), cfg: cfg, hosts: map[uint64]*Host{},
		stores: map[[2]uint64]*memStorage{}, sms: map[[2]uint64]*chainSM{}}
	for i := 1; i <= nodes; i++ {
		c.nodes = append(c.nodes, uint64(i))
		c.startHost(uint64(i))
	}
	t.Cleanup(c.stopAll)
	return c
}

func (c *cluster) startHost(id uint64) *Host {
	cfg := c.cfg
	cfg.NodeID = id
	h, err := NewHost(cfg, c.net.Transport(id))
	if err != nil {
		c.t.Fatal(err)
	}
	h.OnLeaderChange(func(lc LeaderChange) {
		if lc.Leader == id {
			c.leader.Store(lc.Group, id)
		}
	})
	c.hosts[id] = h
	c.net.Attach(h)
	return h
}

func (c *cluster) stopAll() {
	for _, h := range c.hosts {
		h.Stop()
	}
}

// addGroup creates group g with voters on every given node.
func (c *cluster) addGroup(g uint64, voters []uint64) {
	for _, n := range voters {
		st := newMemStorage()
		sm := &chainSM{}
		c.stores[[2]uint64{n, g}], c.sms[[2]uint64{n, g}] = st, sm
		if err := c.hosts[n].AddGroup(GroupConfig{ID: g, Storage: st, StateMachine: sm, Voters: voters, LazyCommit: c.lazyCommit}); err != nil {
			c.t.Fatal(err)
		}
	}
}

// propose sends data to the group's leader, following NotLeader hints, until
// it is acknowledged or ctx ends.
func (c *cluster) propose(ctx context.Context, g uint64, data []byte) (uint64, error) {
	try := uint64(1)
	if v, ok := c.leader.Load(g); ok {
		try = v.(uint64)
	}
	for {
		h := c.hosts[try]
		var err error
		var idx uint64
		if h == nil {
			err = ErrStopped
		} else {
			idx, err = h.Propose(ctx, g, data)
		}
		if err == nil {
			return idx, nil
		}
		if ctx.Err() != nil {
			return 0, err
		}
		var nl *NotLeaderError
		if errors.As(err, &nl) && nl.Leader != 0 && c.hosts[nl.Leader] != nil {
			try = nl.Leader
			continue
		}
		time.Sleep(5 * time.Millisecond)
		try = try%uint64(len(c.nodes)) + 1
	}
}

func (c *cluster) waitLeaders(t testing.TB, groups []uint64, d time.Duration, not uint64) map[uint64]uint64 {
	t.Helper()
	deadline := time.Now().Add(d)
	out := map[uint64]uint64{}
	for _, g := range groups {
		for {
			found := false
			for id, h := range c.hosts {
				if id == not {
					continue
				}
				st, err := h.Status(g)
				if err == nil && st.State == "StateLeader" {
					out[g], found = id, true
					break
				}
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d: no leader after %v", g, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return out
}

func testConfig() Config {
	return Config{SnapshotEntries: 200, CompactionOverhead: 50}
}

func TestHostFailover(t *testing.T) {
	for _, quiesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("quiesce=%v", quiesce), func(t *testing.T) {
			cfg := testConfig()
			cfg.DisableQuiescence = !quiesce
			testFailover(t, cfg)
		})
	}
}

func testFailover(t *testing.T, cfg Config) {
	const groups = 100
	c := newCluster(t, cfg, 3)
	var ids []uint64
	for g := uint64(1); g <= groups; g++ {
		c.addGroup(g, []uint64{1, 2, 3})
		ids = append(ids, g)
	}
	for _, h := range c.hosts {
		h.Start()
	}
	// Spread the first elections: each group's campaign starts on node g%3+1.
	for _, g := range ids {
		_ = c.hosts[g%3+1].Campaign(context.Background(), g)
	}
	c.waitLeaders(t, ids, 10*time.Second, 0)

	// Concurrent proposals to every group.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				g := uint64((w*20+i)%groups + 1)
				if _, err := c.propose(ctx, g, fmt.Appendf(nil, "w%d-%d", w, i)); err != nil {
					t.Errorf("propose to %d: %v", g, err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d proposals acknowledged", acked.Load())

	// Kill node 1, the leader of a third of the groups.
	leaders := c.waitLeaders(t, ids, 5*time.Second, 0)
	var led []uint64
	for g, n := range leaders {
		if n == 1 {
			led = append(led, g)
		}
	}
	if len(led) == 0 {
		t.Fatal("node 1 leads no group")
	}
	if !cfg.DisableQuiescence {
		// Kill node 1 with its groups quiesced: the slow path, where the
		// followers first have to find the node down.
		deadline := time.Now().Add(5 * time.Second)
		for _, g := range led {
			for {
				st, err := c.hosts[1].Status(g)
				if err != nil {
					t.Fatal(err)
				}
				if st.Quiesced {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("group %d not quiesced: %+v", g, st)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	killed := time.Now()
	c.net.Detach(1)
	c.hosts[1].Stop()
	delete(c.hosts, 1)
	c.leader.Range(func(k, v any) bool {
		if v.(uint64) == 1 {
			c.leader.Delete(k)
		}
		return true
	})
	electionMax := 2 * time.Duration(cfg.withDefaultsOrDie().ElectionTicks) * cfg.withDefaultsOrDie().TickInterval
	c.waitLeaders(t, led, 10*time.Second, 1)
	took := time.Since(killed)
	t.Logf("%d groups led by the killed node have new leaders after %v (randomized election timeout at most %v)",
		len(led), took, electionMax)
	// The bound of the brief: within the election time (plus scheduling slack
	// of the race detector on 2 cores).
	if took > electionMax+time.Second {
		t.Errorf("new leaders took %v, more than %v", took, electionMax+time.Second)
	}
	// And a new acknowledged proposal in each of them.
	for _, g := range led {
		if _, err := c.propose(ctx, g, []byte("after failover")); err != nil {
			t.Fatalf("group %d after failover: %v", g, err)
		}
	}
	t.Logf("first acknowledged proposal in every failed-over group %v after the kill", time.Since(killed))
}

func (c Config) withDefaultsOrDie() Config {
	c.NodeID = 1
	d, err := c.withDefaults()
	if err != nil {
		panic(err)
	}
	return d
}

func TestHostTransferLeadership(t *testing.T) {
	c := newCluster(t, testConfig(), 3)
	c.addGroup(7, []uint64{1, 2, 3})
	for _, h := range c.hosts {
		h.Start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.hosts[1].Campaign(ctx, 7); err != nil {
		t.Fatal(err)
	}
	from := c.waitLeaders(t, []uint64{7}, 5*time.Second, 0)[7]
	if _, err := c.propose(ctx, 7, []byte("x")); err != nil {
		t.Fatal(err)
	}
	to := from%3 + 1
	if err := c.hosts[from].TransferLeadership(ctx, 7, to); err != nil {
		t.Fatalf("transfer %d -> %d: %v", from, to, err)
	}
	st, err := c.hosts[to].Status(7)
	if err != nil || st.Leader != to {
		t.Fatalf("after transfer: %+v %v", st, err)
	}
	if _, err := c.hosts[from].Propose(ctx, 7, []byte("y")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old leader took a proposal: %v", err)
	}
	if _, err := c.hosts[to].Propose(ctx, 7, []byte("z")); err != nil {
		t.Fatalf("new leader: %v", err)
	}
	// Reads: any replica serves a linearizable read index.
	idx, err := c.hosts[from].ReadIndex(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	lst, _ := c.hosts[to].Status(7)
	if idx < lst.Commit-1 {
		t.Fatalf("read index %d behind the leader's commit %d", idx, lst.Commit)
	}
}

func TestHostLearnerCatchesUpBySnapshot(t *testing.T) {
	cfg := testConfig()
	cfg.SnapshotEntries, cfg.CompactionOverhead = 50, 10
	c := newCluster(t, cfg, 3)
	c.addGroup(9, []uint64{1, 2})
	for _, h := range c.hosts {
		h.Start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.hosts[1].Campaign(ctx, 9); err != nil {
		t.Fatal(err)
	}
	c.waitLeaders(t, []uint64{9}, 5*time.Second, 0)
	var last uint64
	for i := 0; i < 300; i++ {
		idx, err := c.propose(ctx, 9, fmt.Appendf(nil, "e%d", i))
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	leader := c.waitLeaders(t, []uint64{9}, time.Second, 0)[9]
	if first, _ := c.stores[[2]uint64{leader, 9}].FirstIndex(); first <= 2 {
		t.Fatalf("leader's log not compacted (first index %d)", first)
	}
	// Node 3 joins with an empty storage, as a learner.
	st3, sm3 := newMemStorage(), &chainSM{}
	c.stores[[2]uint64{3, 9}], c.sms[[2]uint64{3, 9}] = st3, sm3
	if err := c.hosts[3].AddGroup(GroupConfig{ID: 9, Storage: st3, StateMachine: sm3}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.hosts[leader].AddLearner(ctx, 9, 3); err != nil {
		t.Fatal(err)
	}
	for {
		s3, err := c.hosts[3].Status(9)
		if err != nil {
			t.Fatal(err)
		}
		if s3.Applied >= last {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("learner stuck at %d, want %d", s3.Applied, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if snap, _ := st3.Snapshot(); snap.GetMetadata().GetIndex() == 0 {
		t.Fatal("the learner caught up without a snapshot")
	}
	ls, _ := c.hosts[leader].Status(9)
	if len(ls.Learners) != 1 || ls.Learners[0] != 3 || len(ls.Progress) != 3 {
		t.Fatalf("leader's status: %+v", ls)
	}
	// Promote it; then the group survives the loss of the other follower.
	if _, err := c.hosts[leader].Promote(ctx, 9, 3); err != nil {
		t.Fatal(err)
	}
	other := uint64(3 - leader)
	c.net.Detach(other)
	c.hosts[other].Stop()
	delete(c.hosts, other)
	if _, err := c.propose(ctx, 9, []byte("after promotion")); err != nil {
		t.Fatal(err)
	}
	// The learner's state machine matches the leader's.
	c.stopAll()
	a, b := c.sms[[2]uint64{leader, 9}], sm3
	if a.digest != b.digest || a.applied != b.applied {
		t.Fatalf("state machines differ: leader %+v, new replica %+v", *a, *b)
	}
}

// A proposal's data is the caller's again once Wait returned its index: the
// stream reuses its entry buffers on that promise. Every entry here is
// proposed from one buffer, overwritten after each commit, and every replica
// must still apply and keep what was proposed.
func TestProposalDataReusableAfterCommit(t *testing.T) {
	c := newCluster(t, Config{SnapshotEntries: 20000, CompactionOverhead: 1000}, 3)
	c.addGroup(1, []uint64{1, 2, 3})
	var mu sync.Mutex
	applied := map[uint64][]string{}
	for _, n := range c.nodes {
		c.sms[[2]uint64{n, 1}].onApply = func(e Entry, _ uint64) {
			if len(e.Data) > 0 {
				mu.Lock()
				applied[n] = append(applied[n], string(e.Data))
				mu.Unlock()
			}
		}
	}
	leader := c.startGroupOne(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	buf := make([]byte, 0, 64)
	var want []string
	for i := range 200 {
		buf = fmt.Appendf(buf[:0], "entry %03d %s", i, strings.Repeat("x", i%40))
		want = append(want, string(buf))
		p, err := c.hosts[leader].Submit(1, buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		for j := range buf {
			buf[j] = '#'
		}
	}
	allApplied := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range c.nodes {
			if len(applied[n]) < len(want) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Second); !allApplied() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range c.nodes {
		if fmt.Sprint(applied[n]) != fmt.Sprint(want) {
			t.Fatalf("node %d applied other data than proposed:\n%q", n, applied[n])
		}
		st := c.stores[[2]uint64{n, 1}]
		first, _ := st.FirstIndex()
		last, _ := st.LastIndex()
		ents, err := st.Entries(first, last+1, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, e := range ents {
			if e.GetType() == raftpb.EntryNormal && len(e.Data) > 0 {
				kept = append(kept, string(e.Data))
			}
		}
		if fmt.Sprint(kept) != fmt.Sprint(want) {
			t.Fatalf("node %d's log keeps other data than proposed:\n%q", n, kept)
		}
	}
}

// brokenSM is a chainSM whose Apply fails once broken is set.
type brokenSM struct {
	chainSM
	broken atomic.Bool
}

func (m *brokenSM) Apply(ents []Entry) error {
	if m.broken.Load() {
		return errors.New("the disk went away")
	}
	return m.chainSM.Apply(ents)
}

// A group that fails on its leader's node (its state machine's Apply errs) is
// reported there as led by nobody (LeaderChange, leader 0), so that the node
// stops acting as its leader; the other replicas elect a leader of their own.
func TestFailedGroupReportsNoLeader(t *testing.T) {
	c := newCluster(t, testConfig(), 3)
	changes := map[uint64]chan LeaderChange{}
	for id, h := range c.hosts {
		ch := make(chan LeaderChange, 64)
		changes[id] = ch
		h.OnLeaderChange(func(lc LeaderChange) {
			select {
			case ch <- lc:
			default:
			}
		})
	}
	const g = 7
	voters := []uint64{1, 2, 3}
	sms := map[uint64]*brokenSM{}
	for _, n := range voters {
		sms[n] = &brokenSM{}
		if err := c.hosts[n].AddGroup(GroupConfig{ID: g, Storage: newMemStorage(), StateMachine: sms[n], Voters: voters}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range c.hosts {
		h.Start()
	}
	leader := c.waitLeaders(t, []uint64{g}, 10*time.Second, 0)[g]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.hosts[leader].Propose(ctx, g, []byte("fine")); err != nil {
		t.Fatal(err)
	}
	sms[leader].broken.Store(true)
	// Committed by a quorum, the entry is not applied on the leader, whose
	// replica of the group fails.
	_, _ = c.hosts[leader].Propose(ctx, g, []byte("fails here"))
	for {
		select {
		case lc := <-changes[leader]:
			if lc.Group == g && lc.Leader == 0 {
				if st, err := c.hosts[leader].Status(g); err != nil || st.Failed == nil {
					t.Fatalf("status of the failed group: %+v %v", st, err)
				}
				others := c.waitLeaders(t, []uint64{g}, 10*time.Second, leader)
				if others[g] == leader {
					t.Fatalf("the failed node %d still leads", leader)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("node %d never reported that it no longer leads the failed group", leader)
		}
	}
}
