package replica

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"testing/cryptotest"
)

// The simulator drives one Core per node through a simulated network on a
// virtual clock (milliseconds): batches are encoded, then dropped, duplicated,
// delayed and reordered; nodes are partitioned (both ways or one way) and
// crashed, coming back with only what their storage had synced. Everything is
// deterministic for a seed — raft's own election randomness included, through
// cryptotest.SetGlobalRandom — so a failing seed replays exactly.
//
// Checked throughout: no two replicas lead a group in one term; every replica
// applies the same entries in the same order (a hash chain over the applied
// entries agrees at every index); an acknowledged proposal is the entry applied
// at its index. Checked at the end, after healing and a quiet period: every
// group makes progress again, and every replica holds every acknowledged entry.

type simConf struct {
	nodes, groups, replicas int
	duration, quiet         int // virtual ms
	drop, dup               float64
	faults                  bool
	noQuiesce               bool
	// sendBeforeSync turns on Config.SendBeforeSync, and crashes a node now and
	// then between sending its early batches and syncing its storage.
	sendBeforeSync bool
	// lazyCommit sets GroupConfig.LazyCommit on every group.
	lazyCommit bool
}

type delivery struct {
	at   int
	seq  int
	to   uint64
	data []byte
}

type deliveries []*delivery

func (q deliveries) Len() int { return len(q) }
func (q deliveries) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q deliveries) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *deliveries) Push(x any)   { *q = append(*q, x.(*delivery)) }
func (q *deliveries) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

type simNode struct {
	id      uint64
	core    *Core
	up      bool
	stores  map[uint64]*memStorage
	sms     map[uint64]*chainSM
	restart int // virtual time of the restart, when down
}

type simProposal struct {
	group uint64
	data  []byte
	// read: a read index request, which must not return an index below the
	// highest one acknowledged before it started (linearizability).
	read     bool
	floor    uint64
	transfer bool
}

type sim struct {
	t        testing.TB
	sc       simConf
	rng      *rand.Rand
	now      int
	seq      int
	q        deliveries
	nodes    []*simNode
	members  map[uint64][]uint64 // group -> nodes
	cut      map[[2]uint64]bool  // from, to
	cfg      Config
	leaderOf map[[2]uint64]uint64 // group, term -> node
	hint     map[uint64]uint64    // group -> node believed to lead
	refData  map[[2]uint64][]byte // group, index -> applied data
	refDig   map[[2]uint64]uint64 // group, index -> digest after it
	acked    map[[2]uint64][]byte
	maxAcked map[uint64]uint64
	pending  map[[2]uint64]simProposal // node, token
	token    uint64
	trace    uint64 // hash of everything that happened, for the replay check
	faulting bool   // within runFor with faults
	stats    struct {
		sent, dropped, dups, acks, proposals, crashes, elections, quiesces int
		reads, transfers, syncCrashes                                      int
	}
}

func newSim(t testing.TB, seed uint64, sc simConf) *sim {
	s := &sim{t: t, sc: sc, rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)),
		members: map[uint64][]uint64{}, cut: map[[2]uint64]bool{}, leaderOf: map[[2]uint64]uint64{},
		hint: map[uint64]uint64{}, refData: map[[2]uint64][]byte{}, refDig: map[[2]uint64]uint64{},
		acked: map[[2]uint64][]byte{}, maxAcked: map[uint64]uint64{}, pending: map[[2]uint64]simProposal{}}
	s.cfg = Config{ElectionTicks: 8, HeartbeatTicks: 2, SnapshotEntries: 40, CompactionOverhead: 10,
		MaxSizePerMsg: 2048, MaxInflightMsgs: 16, DisableQuiescence: sc.noQuiesce, SendBeforeSync: sc.sendBeforeSync}
	for i := 1; i <= sc.nodes; i++ {
		s.nodes = append(s.nodes, &simNode{id: uint64(i), stores: map[uint64]*memStorage{}, sms: map[uint64]*chainSM{}})
	}
	for g := 1; g <= sc.groups; g++ {
		var m []uint64
		for r := 0; r < sc.replicas; r++ {
			m = append(m, uint64((g+r)%sc.nodes+1))
		}
		s.members[uint64(g)] = m
		for _, n := range m {
			s.nodes[n-1].stores[uint64(g)] = newMemStorage()
		}
	}
	for _, n := range s.nodes {
		s.start(n)
	}
	return s
}

func (s *sim) mix(vals ...uint64) {
	h := fnv.New64a()
	var b [8]byte
	for _, v := range append([]uint64{s.trace}, vals...) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	s.trace = h.Sum64()
}

// start (re)starts node n from its storages' durable state.
func (s *sim) start(n *simNode) {
	cfg := s.cfg
	cfg.NodeID = n.id
	core, err := NewCore(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	n.core, n.up = core, true
	for g := uint64(1); g <= uint64(s.sc.groups); g++ {
		st := n.stores[g]
		if st == nil {
			continue
		}
		sm := &chainSM{}
		g := g
		sm.onApply = func(e Entry, digest uint64) { s.checkApply(n.id, g, e, digest) }
		n.sms[g] = sm
		if err := core.AddGroup(GroupConfig{ID: g, Storage: st, StateMachine: sm, Voters: s.members[g], LazyCommit: s.sc.lazyCommit}); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *sim) checkApply(node, g uint64, e Entry, digest uint64) {
	k := [2]uint64{g, e.Index}
	if d, ok := s.refDig[k]; ok {
		if d != digest || !bytes.Equal(s.refData[k], e.Data) {
			s.t.Fatalf("t=%d node %d group %d: applied %q at %d with digest %x; another replica applied %q with %x",
				s.now, node, g, e.Data, e.Index, digest, s.refData[k], d)
		}
		return
	}
	s.refDig[k] = digest
	s.refData[k] = bytes.Clone(e.Data)
}

func (s *sim) crash(n *simNode) {
	n.up = false
	n.core = nil
	for g, st := range n.stores {
		n.stores[g] = st.restart()
	}
	for k := range s.pending {
		if k[0] == n.id {
			delete(s.pending, k)
		}
	}
	s.stats.crashes++
	s.mix(0xdead, n.id)
}

func (s *sim) send(from uint64, b *Batch) {
	data, err := AppendBatch(nil, b)
	if err != nil {
		s.t.Fatal(err)
	}
	s.stats.sent++
	if s.cut[[2]uint64{from, b.To}] || s.rng.Float64() < s.sc.drop {
		s.stats.dropped++
		return
	}
	copies := 1
	if s.rng.Float64() < s.sc.dup {
		copies = 2
		s.stats.dups++
	}
	for range copies {
		delay := 1 + s.rng.IntN(4)
		switch r := s.rng.Float64(); {
		case r < 0.01:
			delay += 100 + s.rng.IntN(100)
		case r < 0.1:
			delay += s.rng.IntN(30)
		}
		s.seq++
		heap.Push(&s.q, &delivery{at: s.now + delay, seq: s.seq, to: b.To, data: data})
	}
}

// run lets node n work until it has nothing ready.
func (s *sim) run(n *simNode) {
	for round := 0; n.core.HasReady(); round++ {
		if round > 50 {
			s.t.Fatalf("t=%d node %d: still ready after %d rounds", s.now, n.id, round)
		}
		rd := n.core.Ready()
		for _, b := range rd.Early {
			s.send(n.id, b)
		}
		if len(rd.Early) > 0 && s.faulting && s.allUp() && s.rng.Float64() < 0.005 {
			// Killed during its fsync: the followers may get entries this
			// node's own log loses.
			s.crash(n)
			s.stats.syncCrashes++
			n.restart = s.now + 100 + s.rng.IntN(700)
			return
		}
		for _, st := range rd.Sync {
			if err := st.Sync(); err != nil {
				s.t.Fatal(err)
			}
		}
		for _, b := range rd.Out {
			s.send(n.id, b)
		}
		for _, lc := range rd.Leaders {
			s.mix(lc.Group, lc.Term, lc.Leader, n.id)
			if lc.Leader == 0 {
				continue
			}
			s.hint[lc.Group] = lc.Leader
			if lc.Leader != n.id {
				continue
			}
			s.stats.elections++
			k := [2]uint64{lc.Group, lc.Term}
			if other, ok := s.leaderOf[k]; ok && other != n.id {
				s.t.Fatalf("t=%d group %d term %d: nodes %d and %d both lead", s.now, lc.Group, lc.Term, other, n.id)
			}
			s.leaderOf[k] = n.id
		}
		for _, r := range n.core.Advance(rd) {
			s.result(n, r)
		}
	}
}

func (s *sim) result(n *simNode, r Result) {
	k := [2]uint64{n.id, r.Token}
	p, ok := s.pending[k]
	if !ok {
		s.t.Fatalf("t=%d node %d: result for unknown token %d", s.now, n.id, r.Token)
	}
	delete(s.pending, k)
	s.mix(r.Token, r.Index, n.id)
	if p.read || p.transfer {
		if r.Err != nil {
			if !errors.Is(r.Err, ErrReadDropped) && !errors.Is(r.Err, ErrTransferFailed) {
				s.t.Fatalf("t=%d node %d: read or transfer failed with %v", s.now, n.id, r.Err)
			}
			return
		}
		if p.read {
			if r.Index < p.floor {
				s.t.Fatalf("t=%d node %d group %d: read index %d, but %d was acknowledged before the read",
					s.now, n.id, p.group, r.Index, p.floor)
			}
			if st, err := n.core.Status(p.group); err != nil || st.Applied < r.Index {
				s.t.Fatalf("t=%d node %d group %d: read index %d completed with %d applied (%v)",
					s.now, n.id, p.group, r.Index, st.Applied, err)
			}
			s.stats.reads++
		} else {
			s.stats.transfers++
		}
		return
	}
	if r.Err != nil {
		if !errors.Is(r.Err, ErrProposalDropped) && !errors.Is(r.Err, ErrNotLeader) && !errors.Is(r.Err, ErrOutcomeUnknown) {
			s.t.Fatalf("t=%d node %d: proposal failed with %v", s.now, n.id, r.Err)
		}
		return
	}
	ak := [2]uint64{p.group, r.Index}
	if !bytes.Equal(s.refData[ak], p.data) {
		s.t.Fatalf("t=%d node %d group %d: acknowledged %q at %d, but %q was applied there",
			s.now, n.id, p.group, p.data, r.Index, s.refData[ak])
	}
	s.acked[ak] = p.data
	s.maxAcked[p.group] = max(s.maxAcked[p.group], r.Index)
	s.stats.acks++
}

func (s *sim) propose(g uint64) {
	target := s.hint[g]
	if target == 0 {
		target = s.members[g][s.rng.IntN(len(s.members[g]))]
	}
	n := s.nodes[target-1]
	if !n.up {
		return
	}
	s.token++
	data := fmt.Appendf(nil, "g%d-p%d", g, s.token)
	if err := n.core.Propose(g, s.token, data); err != nil {
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			s.hint[g] = nl.Leader
			return
		}
		s.t.Fatalf("propose: %v", err)
	}
	s.pending[[2]uint64{n.id, s.token}] = simProposal{group: g, data: data}
	s.stats.proposals++
}

// other issues a read index or a leadership transfer to a random replica.
func (s *sim) other(g uint64) {
	m := s.members[g]
	n := s.nodes[m[s.rng.IntN(len(m))]-1]
	if !n.up {
		return
	}
	s.token++
	p := simProposal{group: g}
	var err error
	if s.rng.IntN(4) == 0 {
		p.transfer = true
		err = n.core.TransferLeadership(g, s.token, m[s.rng.IntN(len(m))])
	} else {
		p.read, p.floor = true, s.maxAcked[g]
		err = n.core.ReadIndex(g, s.token)
	}
	if err != nil {
		if !errors.Is(err, ErrNotLeader) {
			s.t.Fatalf("read or transfer: %v", err)
		}
		return
	}
	s.pending[[2]uint64{n.id, s.token}] = p
}

func (s *sim) fault() {
	up := 0
	for _, n := range s.nodes {
		if n.up {
			up++
		}
	}
	switch r := s.rng.Float64(); {
	case r < 0.25:
		clear(s.cut)
		s.mix(0x4ea1)
	case r < 0.45:
		// Isolate one node both ways (a minority partition).
		x := uint64(1 + s.rng.IntN(s.sc.nodes))
		for _, n := range s.nodes {
			if n.id != x {
				s.cut[[2]uint64{x, n.id}], s.cut[[2]uint64{n.id, x}] = true, true
			}
		}
		s.mix(0x1501, x)
	case r < 0.55 && s.sc.nodes >= 5:
		// Split into a majority and a minority of two.
		a, b := uint64(1+s.rng.IntN(s.sc.nodes)), uint64(1+s.rng.IntN(s.sc.nodes))
		for _, n := range s.nodes {
			if n.id != a && n.id != b {
				for _, x := range []uint64{a, b} {
					s.cut[[2]uint64{x, n.id}], s.cut[[2]uint64{n.id, x}] = true, true
				}
			}
		}
		s.mix(0x5b1, a, b)
	case r < 0.7:
		a, b := uint64(1+s.rng.IntN(s.sc.nodes)), uint64(1+s.rng.IntN(s.sc.nodes))
		if a != b {
			s.cut[[2]uint64{a, b}] = true // one way
		}
		s.mix(0x1, a, b)
	case r < 0.85 && up == s.sc.nodes:
		n := s.nodes[s.rng.IntN(s.sc.nodes)]
		s.crash(n)
		n.restart = s.now + 100 + s.rng.IntN(700)
	}
}

func (s *sim) step(tick bool) {
	// Deliveries due now.
	for len(s.q) > 0 && s.q[0].at <= s.now {
		d := heap.Pop(&s.q).(*delivery)
		n := s.nodes[d.to-1]
		if !n.up {
			continue
		}
		var b Batch
		if err := DecodeBatch(d.data, &b); err != nil {
			s.t.Fatalf("decoding a batch the sim encoded: %v", err)
		}
		n.core.Step(&b)
		s.mix(uint64(d.at), d.to, uint64(len(d.data)))
	}
	for _, n := range s.nodes {
		if !n.up && n.restart > 0 && s.now >= n.restart {
			n.restart = 0
			s.start(n)
			s.mix(0x5747, n.id)
		}
		if !n.up {
			continue
		}
		if tick && (s.now+int(n.id))%10 == 0 {
			n.core.Tick()
		}
		s.run(n)
	}
}

// allUp reports whether every node is running.
func (s *sim) allUp() bool {
	for _, n := range s.nodes {
		if !n.up {
			return false
		}
	}
	return true
}

func (s *sim) runFor(ms int, faults bool, load float64) {
	s.faulting = faults
	defer func() { s.faulting = false }()
	end := s.now + ms
	for ; s.now < end; s.now++ {
		if faults && s.now%300 == 0 {
			s.fault()
		}
		if s.rng.Float64() < load {
			s.propose(uint64(1 + s.rng.IntN(s.sc.groups)))
		}
		if s.rng.Float64() < load/10 {
			s.other(uint64(1 + s.rng.IntN(s.sc.groups)))
		}
		s.step(true)
	}
}

func (s *sim) healAll() {
	clear(s.cut)
	for _, n := range s.nodes {
		if !n.up {
			n.restart = 0
			s.start(n)
		}
	}
}

// finish heals everything, waits, and checks that every group makes progress
// and every replica holds every acknowledged entry.
func (s *sim) finish() {
	s.healAll()
	saved := s.sc.drop
	s.sc.drop, s.sc.dup = 0, 0
	s.runFor(s.sc.quiet, false, 0.05)
	// Progress: one more acknowledged proposal per group.
	for g := uint64(1); g <= uint64(s.sc.groups); g++ {
		before := s.maxAcked[g]
		for try := 0; s.maxAcked[g] == before; try++ {
			if try > 100 {
				st := ""
				for _, n := range s.nodes {
					if ss, err := n.core.Status(g); err == nil {
						st += fmt.Sprintf("\n  %+v", ss)
					}
				}
				s.t.Fatalf("group %d makes no progress after healing:%s", g, st)
			}
			s.propose(g)
			s.runFor(50, false, 0)
		}
	}
	s.runFor(s.sc.quiet, false, 0)
	s.sc.drop = saved
	for g := uint64(1); g <= uint64(s.sc.groups); g++ {
		var first *chainSM
		for _, m := range s.members[g] {
			sm := s.nodes[m-1].sms[g]
			if sm.applied < s.maxAcked[g] {
				s.t.Fatalf("group %d node %d applied up to %d, an acknowledged entry is at %d", g, m, sm.applied, s.maxAcked[g])
			}
			if first == nil {
				first = sm
			} else if sm.digest != first.digest || sm.count != first.count {
				s.t.Fatalf("group %d: replicas differ at the end: %+v vs %+v", g, *first, *sm)
			}
		}
	}
	for _, n := range s.nodes {
		s.stats.quiesces += int(n.core.Stats().Quiesces)
	}
	for k, data := range s.acked {
		if !bytes.Equal(s.refData[k], data) {
			s.t.Fatalf("acknowledged entry %v lost", k)
		}
	}
}

// lazyCommits counts the empty appends the nodes' Cores did not send.
func (s *sim) lazyCommits() uint64 {
	var n uint64
	for _, node := range s.nodes {
		n += node.core.Stats().LazyCommits
	}
	return n
}

func simSeeds(t *testing.T, def int) int {
	if n, err := strconv.Atoi(os.Getenv("TERN_REPLICA_SEEDS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 1
	}
	return def
}

func runSim(t *testing.T, seed uint64, sc simConf) *sim {
	cryptotest.SetGlobalRandom(t, seed)
	s := newSim(t, seed, sc)
	s.runFor(sc.duration, sc.faults, 0.3)
	s.finish()
	return s
}

func TestSimulation(t *testing.T) {
	confs := []struct {
		name string
		sc   simConf
	}{
		{"3nodes", simConf{nodes: 3, groups: 6, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true}},
		{"5nodes", simConf{nodes: 5, groups: 8, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true}},
		{"5replicas", simConf{nodes: 5, groups: 4, replicas: 5, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true}},
		{"noquiesce", simConf{nodes: 3, groups: 6, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true, noQuiesce: true}},
		{"sendBeforeSync", simConf{nodes: 3, groups: 6, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true, sendBeforeSync: true}},
		{"lazyCommit", simConf{nodes: 3, groups: 6, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true, sendBeforeSync: true, lazyCommit: true}},
		{"lazyCommitNoQuiesce", simConf{nodes: 3, groups: 6, replicas: 3, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true, noQuiesce: true, lazyCommit: true}},
		{"sendBeforeSync5", simConf{nodes: 5, groups: 4, replicas: 5, duration: 6000, quiet: 1500, drop: 0.05, dup: 0.02, faults: true, sendBeforeSync: true}},
	}
	seeds := simSeeds(t, 2)
	for _, c := range confs {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				s := runSim(t, seed, c.sc)
				if t.Failed() {
					t.Fatalf("seed %d failed", seed)
				}
				if seed == 1 {
					t.Logf("seed 1: %+v", s.stats)
				}
				if lazy := s.lazyCommits(); c.sc.lazyCommit != (lazy > 0) {
					t.Fatalf("seed %d: %d empty appends left out, with lazyCommit %v", seed, lazy, c.sc.lazyCommit)
				}
				if s.stats.acks == 0 {
					t.Fatalf("seed %d: nothing acknowledged", seed)
				}
			}
		})
	}
}

// TestSimulationReplays runs one seed twice and compares the traces.
func TestSimulationReplays(t *testing.T) {
	sc := simConf{nodes: 3, groups: 4, replicas: 3, duration: 3000, quiet: 1000, drop: 0.05, dup: 0.02, faults: true}
	a := runSim(t, 42, sc).trace
	b := runSim(t, 42, sc).trace
	if a != b {
		t.Fatalf("seed 42 ran twice with different traces: %x, %x", a, b)
	}
}
