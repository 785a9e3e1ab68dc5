package replica

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// GroupConfig describes one group replica for AddGroup.
type GroupConfig struct {
	ID uint64
	// Storage holds the group's log and hard state; StateMachine its applied
	// state. Both belong to the caller; the Core uses them from its loop only.
	Storage      Storage
	StateMachine StateMachine
	// Voters and Learners bootstrap a new group: when Storage is empty and
	// Voters is not, the Core writes an initial snapshot (index 1, term 1) with
	// that membership. Every founding replica must be given the same lists. A
	// replica that joins an existing group later is added with both empty (and
	// an empty Storage): it waits for the leader's snapshot.
	Voters, Learners []uint64
	// Applied is the index of the last entry the StateMachine already holds (a
	// durable state machine after a restart). 0: the Core restores the state
	// machine from the Storage's snapshot, if any, and re-applies the log after
	// it.
	Applied uint64
	// LazyCommit: a leader does not send a follower that is replicating a
	// message of its own only to tell it of a new commit index (the empty
	// append raft broadcasts after each commit); the follower learns it with
	// the next append, the next coalesced heartbeat or the quiescing one. For
	// groups whose followers serve nothing from their state machine before
	// they lead (a new leader applies what is committed first): a commit then
	// costs each follower one message and wake-up instead of two, and a
	// one-at-a-time proposer's next entry does not queue behind the previous
	// one's bookkeeping.
	LazyCommit bool
}

// Result completes a request given to the Core with a token.
type Result struct {
	Token uint64
	// Index is the log index of a committed proposal or membership change, or
	// the read index of a completed read (the state machine has applied it).
	Index uint64
	Err   error
}

// LeaderChange reports that a replica of this node saw a group's leadership
// change (including to no leader).
type LeaderChange struct {
	Group, Term, Leader uint64
}

// Ready is the work of one loop iteration: send every batch in Early, Sync every
// storage in Sync, then send every batch in Out, then call Advance. It stays
// valid until Advance.
type Ready struct {
	// Early are batches that may be sent before Sync (Config.SendBeforeSync),
	// Out those that must wait for it.
	Early   []*Batch
	Sync    []Storage
	Out     []*Batch
	Leaders []LeaderChange

	groups []*group
	synced map[Storage]struct{}
}

// Status describes one group replica.
type Status struct {
	Group, Node uint64
	Leader      uint64
	Term        uint64
	Commit      uint64
	Applied     uint64
	LastIndex   uint64
	// State is raft's role: StateFollower, StateCandidate, StateLeader or
	// StatePreCandidate.
	State          string
	LeadTransferee uint64
	Quiesced       bool
	Failed         error
	// Voters and Learners are the current membership.
	Voters, Learners []uint64
	// Progress is filled on the leader only, one row per replica, by id.
	Progress []Progress
}

// Progress is the leader's view of one replica.
type Progress struct {
	Node         uint64
	Learner      bool
	Match, Next  uint64
	State        string // probe, replicate or snapshot
	RecentActive bool
	// Lag is how many committed entries the replica lacks (Commit - Match).
	Lag uint64
}

// Stats counts what the Core dropped and did.
type Stats struct {
	UnknownGroupMsgs uint64 // messages and beats for groups this node lacks
	Misaddressed     uint64 // messages whose ends did not match their batch
	Quiesces         uint64 // times a group stopped ticking
	Unquiesces       uint64
	Snapshots        uint64 // snapshots taken of local state machines
	LazyCommits      uint64 // empty appends not sent (GroupConfig.LazyCommit)
	// Failed lists the groups whose local replica stopped on an error (see
	// StateMachine.Apply): the owner removes the group and adds it again.
	Failed []uint64
}

type proposal struct {
	token       uint64
	index, term uint64
	conf        bool
	data        []byte
	cc          *raftpb.ConfChangeV2
}

type readReq struct {
	token    uint64
	index    uint64
	known    bool // index arrived
	deadline uint64
	// leaderTerm, for a read that proves leadership (LeaderReadIndex): the
	// term this replica led when it was asked; 0 for any read.
	leaderTerm uint64
}

type transferReq struct {
	token    uint64
	to       uint64
	deadline uint64
}

type group struct {
	id      uint64
	rn      *raft.RawNode
	st      Storage
	sm      StateMachine
	cs      *raftpb.ConfState
	members []uint64 // other nodes of the membership

	term, commit, lastIndex uint64
	vote                    uint64
	// termOrVoteChanged: the Ready being handled changes the term or the vote,
	// which must be durable before any message of the group goes out.
	termOrVoteChanged  bool
	lead               uint64
	state              raft.StateType
	applied, snapIndex uint64

	queued    []proposal // not yet stepped
	unindexed []proposal // stepped; their index comes with the next Ready
	waiting   []proposal // indexed; completed when applied
	reads     []readReq
	transfers []transferReq

	active   bool
	rd       raft.Ready
	snapsTo  []uint64 // MsgSnap destinations of rd
	quiesced bool
	failed   error
	// snapDue: a membership change was applied. A replica it adds may need a
	// snapshot, which raft accepts only if its membership names the replica,
	// so the next snapshot is taken right away.
	snapDue bool
	wokeAt  uint64 // tick of the last unquiesce
	// lazyCommit: GroupConfig.LazyCommit.
	lazyCommit bool
}

type peer struct {
	id        uint64
	out       Batch
	early     Batch  // messages that need not wait for this iteration's sync
	beats     []Beat // coalesced heartbeats waiting for the next flush
	lastHeard uint64
	refs      int // replicas of local groups on this node
	dead      bool
	unreach   bool // a send failed this iteration
}

// Core is the deterministic multi-group raft host of one node: every group
// replica of the node, driven by explicit calls. It has no goroutines, no clock
// and no I/O beyond calling the groups' Storage and StateMachine; Host drives it
// on real time, tests on virtual time. It is not safe for concurrent use.
type Core struct {
	cfg     Config
	id      uint64
	groups  map[uint64]*group
	sorted  []*group // by id
	active  []*group // touched since their last Ready
	ticks   uint64
	flush   bool // heartbeats due with the next Ready
	peers   map[uint64]*peer
	plist   []*peer // by id
	rd      Ready
	results []Result
	// leftLeads are the failed groups this node followed or led: the next
	// Ready tells that it no longer does (LeaderChange, leader 0).
	leftLeads []LeaderChange
	spare     []Result
	dirty     []Storage // written outside a Ready (snapshots); synced with the next
	applyBuf  []Entry
	props     []*raftpb.Entry
	stats     Stats

	hbMsg, hbResp raftpb.Message
	hbFrom, hbTo  uint64
	hbTerm, hbCmt uint64

	// onlyCommit's walk of a group's progress.
	probeTo       uint64
	probeOK       bool
	probeProgress func(uint64, raft.ProgressType, tracker.Progress)
}

var (
	msgHeartbeat     = raftpb.MsgHeartbeat.Enum()
	msgHeartbeatResp = raftpb.MsgHeartbeatResp.Enum()
	msgProp          = raftpb.MsgProp.Enum()
)

// NewCore returns a Core with no groups.
func NewCore(cfg Config) (*Core, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	core := &Core{cfg: c, id: c.NodeID, groups: make(map[uint64]*group), peers: make(map[uint64]*peer)}
	core.rd.synced = make(map[Storage]struct{})
	core.hbFrom, core.hbTo = 0, c.NodeID
	core.hbMsg = raftpb.Message{Type: msgHeartbeat, From: &core.hbFrom, To: &core.hbTo, Term: &core.hbTerm, Commit: &core.hbCmt}
	core.hbResp = raftpb.Message{Type: msgHeartbeatResp, From: &core.hbFrom, To: &core.hbTo, Term: &core.hbTerm}
	core.probeProgress = core.checkProgress
	return core, nil
}

// Config returns the configuration with its defaults filled in.
func (c *Core) Config() Config { return c.cfg }

// Ticks returns the number of Tick calls so far.
func (c *Core) Ticks() uint64 { return c.ticks }

// Stats returns the counters.
func (c *Core) Stats() Stats {
	st := c.stats
	for _, g := range c.sorted {
		if g.failed != nil {
			st.Failed = append(st.Failed, g.id)
		}
	}
	return st
}

// Groups returns the ids of the groups, in order.
func (c *Core) Groups() []uint64 {
	ids := make([]uint64, len(c.sorted))
	for i, g := range c.sorted {
		ids[i] = g.id
	}
	return ids
}

func isEmptyStorage(st Storage) (bool, error) {
	last, err := st.LastIndex()
	if err != nil {
		return false, err
	}
	hs, _, err := st.InitialState()
	if err != nil {
		return false, err
	}
	snap, err := st.Snapshot()
	if err != nil {
		return false, err
	}
	return last == 0 && raft.IsEmptyHardState(hs) && snap.GetMetadata().GetIndex() == 0, nil
}

// AddGroup starts a replica of a group on this node: a new group (bootstrapped
// from gc.Voters), a replica joining one, or one restarting from its Storage.
func (c *Core) AddGroup(gc GroupConfig) error {
	if gc.ID == 0 {
		return errors.New("replica: group id must not be 0")
	}
	if c.groups[gc.ID] != nil {
		return fmt.Errorf("%w: %d", ErrGroupExists, gc.ID)
	}
	if gc.Storage == nil || gc.StateMachine == nil {
		return errors.New("replica: GroupConfig needs a Storage and a StateMachine")
	}
	st := gc.Storage
	empty, err := isEmptyStorage(st)
	if err != nil {
		return fmt.Errorf("replica: group %d: reading storage: %w", gc.ID, err)
	}
	if empty && len(gc.Voters) > 0 {
		cs := &raftpb.ConfState{Voters: slices.Clone(gc.Voters), Learners: slices.Clone(gc.Learners)}
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{ConfState: cs, Index: new(uint64(1)), Term: new(uint64(1))}}
		if err := st.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("replica: group %d: bootstrap: %w", gc.ID, err)
		}
		if err := st.SetHardState(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}); err != nil {
			return fmt.Errorf("replica: group %d: bootstrap: %w", gc.ID, err)
		}
		if err := st.Sync(); err != nil {
			return fmt.Errorf("replica: group %d: bootstrap: %w", gc.ID, err)
		}
	}
	hs, cs, err := st.InitialState()
	if err != nil {
		return fmt.Errorf("replica: group %d: reading storage: %w", gc.ID, err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		return fmt.Errorf("replica: group %d: reading snapshot: %w", gc.ID, err)
	}
	last, err := st.LastIndex()
	if err != nil {
		return fmt.Errorf("replica: group %d: reading storage: %w", gc.ID, err)
	}
	applied := gc.Applied
	snapIndex := snap.GetMetadata().GetIndex()
	if applied == 0 && snapIndex > 0 {
		if err := gc.StateMachine.Restore(snap.GetData()); err != nil {
			return fmt.Errorf("replica: group %d: restoring the state machine: %w", gc.ID, err)
		}
		applied = snapIndex
	}
	rc := &raft.Config{
		ID:                        c.id,
		ElectionTick:              c.cfg.ElectionTicks,
		HeartbeatTick:             c.cfg.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             c.cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  c.cfg.MaxSizePerMsg * 4,
		MaxUncommittedEntriesSize: c.cfg.MaxUncommittedSize,
		MaxInflightMsgs:           c.cfg.MaxInflightMsgs,
		MaxInflightBytes:          c.cfg.MaxInflightBytes,
		CheckQuorum:               !c.cfg.DisableCheckQuorum,
		PreVote:                   !c.cfg.DisablePreVote,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    slogLogger{c.cfg.Log.With("component", "raft")},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return fmt.Errorf("replica: group %d: %w", gc.ID, err)
	}
	g := &group{id: gc.ID, rn: rn, st: st, sm: gc.StateMachine, cs: cs,
		term: hs.GetTerm(), commit: hs.GetCommit(), lastIndex: last,
		applied: applied, snapIndex: snapIndex, state: raft.StateFollower, lazyCommit: gc.LazyCommit}
	c.groups[g.id] = g
	i, _ := slices.BinarySearchFunc(c.sorted, g.id, func(a *group, id uint64) int { return cmp.Compare(a.id, id) })
	c.sorted = slices.Insert(c.sorted, i, g)
	c.setMembers(g)
	c.markActive(g)
	return nil
}

// RemoveGroup stops the replica of a group on this node; its pending requests
// complete with ErrStopped. The storage and state machine are left as they are.
func (c *Core) RemoveGroup(id uint64) error {
	g := c.groups[id]
	if g == nil {
		return fmt.Errorf("%w: %d", ErrGroupUnknown, id)
	}
	c.failPending(g, ErrStopped)
	delete(c.groups, id)
	if i := slices.Index(c.sorted, g); i >= 0 {
		c.sorted = slices.Delete(c.sorted, i, i+1)
	}
	if i := slices.Index(c.active, g); i >= 0 {
		c.active = slices.Delete(c.active, i, i+1)
	}
	for _, m := range g.members {
		c.peer(m).refs--
	}
	g.members = nil
	g.failed = ErrStopped
	return nil
}

// Stop completes every pending request with ErrStopped (the results come out of
// TakeResults or the next Advance).
func (c *Core) Stop() {
	for _, g := range c.sorted {
		c.failPending(g, ErrStopped)
	}
}

func (c *Core) failPending(g *group, err error) {
	for _, list := range [][]proposal{g.queued, g.unindexed, g.waiting} {
		for _, p := range list {
			c.results = append(c.results, Result{Token: p.token, Err: err})
		}
	}
	for _, r := range g.reads {
		c.results = append(c.results, Result{Token: r.token, Err: err})
	}
	for _, t := range g.transfers {
		c.results = append(c.results, Result{Token: t.token, Err: err})
	}
	g.queued, g.unindexed, g.waiting, g.reads, g.transfers = nil, nil, nil, nil, nil
}

func (c *Core) fail(g *group, err error) {
	if g.failed != nil {
		return
	}
	g.failed = fmt.Errorf("%w: group %d: %w", ErrGroupFailed, g.id, err)
	c.failPending(g, g.failed)
	if g.lead != 0 {
		// The replica no longer runs: a leader here would not lead, nor can
		// it name another. Told, the node stops acting for the group.
		c.leftLeads = append(c.leftLeads, LeaderChange{Group: g.id, Term: g.term})
		g.lead = 0
	}
}

func (c *Core) peer(id uint64) *peer {
	p := c.peers[id]
	if p == nil {
		p = &peer{id: id, lastHeard: c.ticks}
		p.out.From, p.out.To = c.id, id
		p.early.From, p.early.To = c.id, id
		c.peers[id] = p
		i, _ := slices.BinarySearchFunc(c.plist, id, func(a *peer, id uint64) int { return cmp.Compare(a.id, id) })
		c.plist = slices.Insert(c.plist, i, p)
	}
	return p
}

// setMembers recomputes the other nodes of g's membership.
func (c *Core) setMembers(g *group) {
	for _, m := range g.members {
		c.peer(m).refs--
	}
	g.members = g.members[:0]
	for _, ids := range [][]uint64{g.cs.GetVoters(), g.cs.GetLearners(), g.cs.GetVotersOutgoing(), g.cs.GetLearnersNext()} {
		for _, id := range ids {
			if id != c.id && !slices.Contains(g.members, id) {
				g.members = append(g.members, id)
			}
		}
	}
	slices.Sort(g.members)
	for _, m := range g.members {
		c.peer(m).refs++
	}
}

func (c *Core) markActive(g *group) {
	if !g.active {
		g.active = true
		c.active = append(c.active, g)
	}
}

func (c *Core) unquiesce(g *group) {
	if g.quiesced {
		g.quiesced = false
		g.wokeAt = c.ticks
		c.stats.Unquiesces++
	}
}

func (c *Core) lookup(id uint64) (*group, error) {
	g := c.groups[id]
	if g == nil {
		return nil, fmt.Errorf("%w: %d", ErrGroupUnknown, id)
	}
	if g.failed != nil {
		return nil, g.failed
	}
	return g, nil
}

// Tick advances every non-quiesced group's raft clock by one tick, expires
// read-index and transfer requests, and decides quiescence.
func (c *Core) Tick() {
	c.ticks++
	if c.ticks%uint64(c.cfg.HeartbeatTicks) == 0 {
		c.flush = true
	}
	quiesce := !c.cfg.DisableQuiescence
	if quiesce {
		// A node not heard from for an election timeout is taken as down: the
		// quiesced groups it is a member of wake up (and elect a new leader if
		// it led them).
		for _, p := range c.plist {
			dead := p.refs > 0 && c.ticks-p.lastHeard >= uint64(c.cfg.ElectionTicks)
			if dead && !p.dead {
				for _, g := range c.sorted {
					if g.failed != nil || !slices.Contains(g.members, p.id) {
						continue
					}
					if g.lead == p.id && (g.quiesced || g.wokeAt >= p.lastHeard) {
						// Nothing came from the leader for an election
						// timeout, but this replica's raft clock stood still
						// for part of it (quiesced, or woken since by a
						// message): let the clock show it, so that the group
						// campaigns, and grants votes, within what is left
						// of its randomized timeout instead of a whole one.
						for range c.cfg.ElectionTicks {
							g.rn.Tick()
						}
					}
					c.unquiesce(g)
				}
			}
			p.dead = dead
		}
	}
	for _, g := range c.sorted {
		if g.failed != nil {
			continue
		}
		if len(g.reads) > 0 || len(g.transfers) > 0 {
			c.expire(g)
		}
		if g.quiesced {
			continue
		}
		g.rn.Tick()
		c.markActive(g)
		if quiesce && g.state == raft.StateLeader {
			c.maybeQuiesce(g)
		}
	}
}

func (c *Core) expire(g *group) {
	g.reads = slices.DeleteFunc(g.reads, func(r readReq) bool {
		if c.ticks >= r.deadline {
			c.results = append(c.results, Result{Token: r.token, Err: fmt.Errorf("%w: group %d", ErrReadDropped, g.id)})
			return true
		}
		return false
	})
	g.transfers = slices.DeleteFunc(g.transfers, func(t transferReq) bool {
		if c.ticks >= t.deadline {
			c.results = append(c.results, Result{Token: t.token,
				Err: fmt.Errorf("%w: group %d to node %d (leader %d)", ErrTransferFailed, g.id, t.to, g.lead)})
			return true
		}
		return false
	})
}

// maybeQuiesce stops a leader's group from ticking when nothing is left to do
// in it: every replica holds and has been told the whole log, nothing is
// pending, and every member's node is alive. The followers are told with a
// quiescing heartbeat.
func (c *Core) maybeQuiesce(g *group) {
	if len(g.queued)+len(g.unindexed)+len(g.waiting)+len(g.reads)+len(g.transfers) > 0 ||
		g.commit != g.lastIndex || g.applied != g.commit || len(g.members) == 0 || g.rn.HasReady() {
		return
	}
	for _, m := range g.members {
		if c.peers[m].dead {
			return
		}
	}
	ok := true
	n := 0
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == c.id {
			return
		}
		n++
		if pr.Match != g.lastIndex || pr.State != tracker.StateReplicate || pr.PendingSnapshot != 0 || !pr.RecentActive {
			ok = false
		}
	})
	if !ok || n != len(g.members) {
		return
	}
	if bs := g.rn.BasicStatus(); bs.LeadTransferee != 0 || bs.GetTerm() != g.term || bs.Lead != c.id {
		return
	}
	g.quiesced = true
	c.stats.Quiesces++
	for _, m := range g.members {
		p := c.peer(m)
		p.out.Beats = append(p.out.Beats, Beat{Group: g.id, Term: g.term, Commit: g.commit, Quiesce: true})
	}
}

// Step takes a batch received from another node.
func (c *Core) Step(b *Batch) {
	if b.To != c.id || b.From == c.id || b.From == 0 {
		c.stats.Misaddressed++
		return
	}
	p := c.peer(b.From)
	p.lastHeard = c.ticks
	p.dead = false
	for i := range b.Msgs {
		m := &b.Msgs[i]
		g := c.groups[m.Group]
		if g == nil || g.failed != nil {
			c.stats.UnknownGroupMsgs++
			continue
		}
		if m.M.GetTo() != c.id || m.M.GetFrom() != b.From || raft.IsLocalMsg(m.M.GetType()) ||
			m.M.GetType() == raftpb.MsgProp {
			c.stats.Misaddressed++
			continue
		}
		c.unquiesce(g)
		_ = g.rn.Step(m.M)
		c.markActive(g)
	}
	c.hbFrom = b.From
	c.hbMsg.From, c.hbMsg.To, c.hbMsg.Term, c.hbMsg.Commit = &c.hbFrom, &c.hbTo, &c.hbTerm, &c.hbCmt
	c.hbResp.From, c.hbResp.To, c.hbResp.Term = &c.hbFrom, &c.hbTo, &c.hbTerm
	for i := range b.Beats {
		h := &b.Beats[i]
		g := c.groups[h.Group]
		if g == nil || g.failed != nil {
			c.stats.UnknownGroupMsgs++
			continue
		}
		if !h.Quiesce {
			c.unquiesce(g)
		}
		c.hbTerm, c.hbCmt = h.Term, h.Commit
		_ = g.rn.Step(&c.hbMsg)
		c.markActive(g)
		if h.Quiesce && !g.quiesced && !c.cfg.DisableQuiescence {
			// Follow the leader into quiescence only if this replica now
			// knows the leader's whole log to be committed.
			bs := g.rn.BasicStatus()
			if bs.RaftState == raft.StateFollower && bs.Lead == b.From && bs.GetTerm() == h.Term && bs.GetCommit() == h.Commit &&
				len(g.queued)+len(g.unindexed)+len(g.waiting)+len(g.reads)+len(g.transfers) == 0 {
				g.quiesced = true
				c.stats.Quiesces++
			}
		}
	}
	for i := range b.BeatResps {
		h := &b.BeatResps[i]
		g := c.groups[h.Group]
		if g == nil || g.failed != nil {
			c.stats.UnknownGroupMsgs++
			continue
		}
		// A response does not wake a quiesced leader: it answers the quiescing
		// heartbeat itself.
		c.hbTerm = h.Term
		_ = g.rn.Step(&c.hbResp)
		c.markActive(g)
	}
}

// Propose queues data as a new entry of group; it is stepped with the other
// proposals of this iteration in the next Ready, and its Result (the entry's
// index, or why it was not committed) comes from a later Advance once the entry
// is applied here. Only the leader takes proposals.
func (c *Core) Propose(group, token uint64, data []byte) error {
	if len(data) == 0 {
		return ErrEmptyProposal
	}
	g, err := c.leaderGroup(group)
	if err != nil {
		return err
	}
	g.queued = append(g.queued, proposal{token: token, data: data})
	return nil
}

func (c *Core) leaderGroup(id uint64) (*group, error) {
	g, err := c.lookup(id)
	if err != nil {
		return nil, err
	}
	if g.state != raft.StateLeader {
		return nil, &NotLeaderError{Group: id, Leader: g.lead}
	}
	c.unquiesce(g)
	c.markActive(g)
	return g, nil
}

// ChangeMembership proposes a membership change (raft's ConfChangeV2; one
// change at a time, see AddVoter and the others). Its Result comes once it is
// applied here.
func (c *Core) ChangeMembership(group, token uint64, cc *raftpb.ConfChangeV2) error {
	g, err := c.leaderGroup(group)
	if err != nil {
		return err
	}
	g.queued = append(g.queued, proposal{token: token, conf: true, cc: cc})
	return nil
}

// ConfChange builds the ConfChangeV2 of one membership change.
func ConfChange(typ raftpb.ConfChangeType, node uint64) *raftpb.ConfChangeV2 {
	return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(node)}}}
}

// TransferLeadership asks the group's leader to hand leadership to node to.
// The Result comes when this replica sees to lead, or with ErrTransferFailed
// after an election timeout.
func (c *Core) TransferLeadership(group, token, to uint64) error {
	g, err := c.lookup(group)
	if err != nil {
		return err
	}
	c.unquiesce(g)
	c.markActive(g)
	if g.lead == to {
		c.results = append(c.results, Result{Token: token})
		return nil
	}
	if g.lead == 0 {
		return &NotLeaderError{Group: group}
	}
	g.rn.TransferLeader(to)
	g.transfers = append(g.transfers, transferReq{token: token, to: to, deadline: c.ticks + 2*uint64(c.cfg.ElectionTicks)})
	return nil
}

// ReadIndex starts a linearizable read of group: the Result's Index is a
// commit index confirmed by a quorum after the call, and it comes once this
// replica has applied it, so a read of the state machine then sees every write
// acknowledged before ReadIndex was called. Any replica may serve it.
func (c *Core) ReadIndex(group, token uint64) error {
	return c.readIndex(group, token, false)
}

// LeaderReadIndex is ReadIndex for a replica that must prove it leads: it fails
// with a *NotLeaderError unless this replica leads the group when asked and still
// leads it, in the same term, when a quorum has confirmed the read. (ReadIndex
// alone is served on any replica, through the leader.)
func (c *Core) LeaderReadIndex(group, token uint64) error {
	return c.readIndex(group, token, true)
}

func (c *Core) readIndex(group, token uint64, leaderOnly bool) error {
	g, err := c.lookup(group)
	if err != nil {
		return err
	}
	bs := g.rn.BasicStatus()
	if g.lead == 0 || (leaderOnly && bs.RaftState != raft.StateLeader) {
		return &NotLeaderError{Group: group, Leader: g.lead}
	}
	c.unquiesce(g)
	c.markActive(g)
	g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, token))
	r := readReq{token: token, deadline: c.ticks + 2*uint64(c.cfg.ElectionTicks)}
	if leaderOnly {
		r.leaderTerm = bs.GetTerm()
	}
	g.reads = append(g.reads, r)
	return nil
}

// Campaign makes this replica start an election now (tests, and a caller that
// knows the leader is gone).
func (c *Core) Campaign(group uint64) error {
	g, err := c.lookup(group)
	if err != nil {
		return err
	}
	c.unquiesce(g)
	c.markActive(g)
	return g.rn.Campaign()
}

// ReportUnreachable tells the Core that sending to node failed: its groups'
// leaders slow down replication to it, and snapshots sent to it in the current
// Ready count as failed.
func (c *Core) ReportUnreachable(node uint64) {
	p := c.peers[node]
	if p == nil {
		return
	}
	p.unreach = true
	for _, g := range c.sorted {
		if g.failed == nil && g.state == raft.StateLeader && slices.Contains(g.members, node) {
			g.rn.ReportUnreachable(node)
			c.markActive(g)
		}
	}
}

// Status returns a group replica's status.
func (c *Core) Status(group uint64) (Status, error) {
	g := c.groups[group]
	if g == nil {
		return Status{}, fmt.Errorf("%w: %d", ErrGroupUnknown, group)
	}
	bs := g.rn.BasicStatus()
	s := Status{Group: g.id, Node: c.id, Leader: bs.Lead, Term: bs.GetTerm(), Commit: bs.GetCommit(),
		Applied: g.applied, LastIndex: g.lastIndex, State: bs.RaftState.String(),
		LeadTransferee: bs.LeadTransferee, Quiesced: g.quiesced, Failed: g.failed,
		Voters: slices.Clone(g.cs.GetVoters()), Learners: slices.Clone(g.cs.GetLearners())}
	if bs.RaftState == raft.StateLeader {
		g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
			p := Progress{Node: id, Learner: typ == raft.ProgressTypeLearner, Match: pr.Match, Next: pr.Next,
				State: pr.State.String(), RecentActive: pr.RecentActive}
			if bs.GetCommit() > pr.Match {
				p.Lag = bs.GetCommit() - pr.Match
			}
			s.Progress = append(s.Progress, p)
		})
		slices.SortFunc(s.Progress, func(a, b Progress) int { return cmp.Compare(a.Node, b.Node) })
	}
	return s, nil
}

// HasReady reports whether Ready has work (or results) to hand out.
func (c *Core) HasReady() bool {
	if len(c.results) > 0 || len(c.dirty) > 0 || c.flush || len(c.leftLeads) > 0 {
		return true
	}
	for _, p := range c.plist {
		if !p.out.Empty() {
			return true
		}
	}
	for _, g := range c.active {
		if g.failed == nil && (len(g.queued) > 0 || g.rn.HasReady()) {
			return true
		}
	}
	return false
}

// TakeResults returns the results produced outside Advance (expired requests,
// removed groups); Advance returns them too.
func (c *Core) TakeResults() []Result {
	r := c.results
	c.results = nil
	return r
}

// Ready collects the work of every group that has some: it writes entries, hard
// states and snapshots to the groups' storages (without syncing them), and
// gathers outgoing messages into one batch per destination node, heartbeats
// coalesced. The caller then syncs rd.Sync, sends rd.Out and calls Advance.
func (c *Core) Ready() *Ready {
	rd := &c.rd
	rd.Sync = rd.Sync[:0]
	rd.Early = rd.Early[:0]
	rd.Out = rd.Out[:0]
	rd.Leaders = append(rd.Leaders[:0], c.leftLeads...)
	c.leftLeads = c.leftLeads[:0]
	rd.groups = rd.groups[:0]
	clear(rd.synced)
	for _, st := range c.dirty {
		c.needSync(st)
	}
	c.dirty = c.dirty[:0]

	keep := c.active[:0]
	for _, g := range c.active {
		if g.failed != nil {
			g.active = false
			continue
		}
		if len(g.queued) > 0 {
			c.stepProposals(g)
		}
		if !g.rn.HasReady() {
			g.active = false
			continue
		}
		keep = append(keep, g)
		g.rd = g.rn.Ready()
		if err := c.persist(g); err != nil {
			c.fail(g, err)
			continue
		}
		rd.groups = append(rd.groups, g)
		c.route(g)
	}
	clear(c.active[len(keep):])
	c.active = keep

	// Once per heartbeat interval the coalesced heartbeats go out, and every
	// node that shares a group with this one gets a batch even if it is empty:
	// a node-level heartbeat, which is what quiesced groups watch.
	flush := c.flush
	c.flush = false
	for _, p := range c.plist {
		if len(p.early.Msgs) > 0 {
			if len(rd.Sync) == 0 {
				// Nothing to wait for: one batch to the node, not two.
				p.out.Msgs = append(p.out.Msgs, p.early.Msgs...)
				p.early.Reset()
			} else {
				rd.Early = append(rd.Early, &p.early)
			}
		}
		if flush && len(p.beats) > 0 {
			p.out.Beats = append(p.out.Beats, p.beats...)
			p.beats = p.beats[:0]
		}
		if !p.out.Empty() || (flush && p.refs > 0 && !c.cfg.DisableQuiescence) {
			rd.Out = append(rd.Out, &p.out)
		}
	}
	return rd
}

func (c *Core) needSync(st Storage) {
	if _, ok := c.rd.synced[st]; !ok {
		c.rd.synced[st] = struct{}{}
		c.rd.Sync = append(c.rd.Sync, st)
	}
}

// stepProposals steps g's queued proposals: the normal ones as one MsgProp (one
// append, one message per follower), membership changes one by one.
func (c *Core) stepProposals(g *group) {
	q := g.queued
	if len(q) > c.cfg.MaxProposalBatch {
		q = q[:c.cfg.MaxProposalBatch]
	}
	g.queued = g.queued[len(q):]
	if len(g.queued) == 0 {
		g.queued = nil
	}
	for len(q) > 0 {
		if q[0].conf {
			p := q[0]
			q = q[1:]
			if err := g.rn.ProposeConfChange(p.cc); err != nil {
				c.results = append(c.results, Result{Token: p.token, Err: c.dropErr(g, err)})
				continue
			}
			g.unindexed = append(g.unindexed, p)
			continue
		}
		n := 0
		for n < len(q) && !q[n].conf {
			n++
		}
		ents := c.props[:0]
		for i := range q[:n] {
			ents = append(ents, &raftpb.Entry{Data: q[i].data})
		}
		err := g.rn.Step(&raftpb.Message{Type: msgProp, From: new(c.id), Entries: ents})
		clear(ents)
		c.props = ents[:0]
		for i := range q[:n] {
			q[i].data = nil
			if err != nil {
				c.results = append(c.results, Result{Token: q[i].token, Err: c.dropErr(g, err)})
			} else {
				g.unindexed = append(g.unindexed, q[i])
			}
		}
		q = q[n:]
	}
}

func (c *Core) dropErr(g *group, err error) error {
	if bs := g.rn.BasicStatus(); bs.RaftState != raft.StateLeader {
		return &NotLeaderError{Group: g.id, Leader: bs.Lead}
	}
	return fmt.Errorf("%w: group %d: %w", ErrProposalDropped, g.id, err)
}

// persist writes g.rd's snapshot, entries and hard state, and notes what else
// the Ready tells (leadership, the indexes of new proposals).
func (c *Core) persist(g *group) error {
	rd := &g.rd
	g.termOrVoteChanged = false
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		g.termOrVoteChanged = rd.HardState.GetTerm() != g.term || rd.HardState.GetVote() != g.vote
		g.term, g.commit, g.vote = rd.HardState.GetTerm(), rd.HardState.GetCommit(), rd.HardState.GetVote()
	}
	if rd.SoftState != nil && (rd.SoftState.Lead != g.lead || rd.SoftState.RaftState != g.state) {
		if rd.SoftState.Lead != g.lead || (g.state == raft.StateLeader) != (rd.SoftState.RaftState == raft.StateLeader) {
			c.rd.Leaders = append(c.rd.Leaders, LeaderChange{Group: g.id, Term: g.term, Leader: rd.SoftState.Lead})
		}
		wasLeader := g.state == raft.StateLeader
		g.lead, g.state = rd.SoftState.Lead, rd.SoftState.RaftState
		if wasLeader && g.state != raft.StateLeader {
			// Proposals not yet stepped will not be: only a leader appends.
			for _, p := range g.queued {
				c.results = append(c.results, Result{Token: p.token, Err: &NotLeaderError{Group: g.id, Leader: g.lead}})
			}
			g.queued = nil
		}
		for i := 0; i < len(g.transfers); i++ {
			if g.transfers[i].to == g.lead {
				c.results = append(c.results, Result{Token: g.transfers[i].token})
				g.transfers = slices.Delete(g.transfers, i, i+1)
				i--
			}
		}
	}
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.st.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("applying a snapshot to storage: %w", err)
		}
		g.lastIndex = rd.Snapshot.GetMetadata().GetIndex()
		c.needSync(g.st)
	}
	if len(rd.Entries) > 0 {
		if err := g.st.Append(rd.Entries); err != nil {
			return fmt.Errorf("appending entries: %w", err)
		}
		g.lastIndex = rd.Entries[len(rd.Entries)-1].GetIndex()
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if err := g.st.SetHardState(rd.HardState); err != nil {
			return fmt.Errorf("writing the hard state: %w", err)
		}
	}
	if rd.MustSync {
		c.needSync(g.st)
	}
	if n := len(g.unindexed); n > 0 {
		ents := rd.Entries
		for i, p := range g.unindexed {
			if len(ents) < n {
				c.results = append(c.results, Result{Token: p.token, Err: fmt.Errorf("%w: group %d", ErrProposalDropped, g.id)})
				continue
			}
			e := ents[len(ents)-n+i]
			p.index, p.term = e.GetIndex(), e.GetTerm()
			g.waiting = append(g.waiting, p)
		}
		g.unindexed = g.unindexed[:0]
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		tok := binary.BigEndian.Uint64(rs.RequestCtx)
		for i := range g.reads {
			if g.reads[i].token == tok && !g.reads[i].known {
				g.reads[i].index, g.reads[i].known = rs.Index, true
			}
		}
	}
	return nil
}

// route sorts g's outgoing messages into the batches of their nodes.
func (c *Core) route(g *group) {
	g.snapsTo = g.snapsTo[:0]
	// Only a leader's traffic goes early: its appends, heartbeats and read
	// answers vouch for nothing it has not already made durable.
	early := c.cfg.SendBeforeSync && !g.termOrVoteChanged && g.state == raft.StateLeader
	for _, m := range g.rd.Messages {
		p := c.peer(m.GetTo())
		switch {
		case m.GetType() == raftpb.MsgHeartbeat && len(m.GetContext()) == 0:
			p.beats = append(p.beats, Beat{Group: g.id, Term: m.GetTerm(), Commit: m.GetCommit()})
		case m.GetType() == raftpb.MsgHeartbeatResp && len(m.GetContext()) == 0:
			p.out.BeatResps = append(p.out.BeatResps, Beat{Group: g.id, Term: m.GetTerm()})
		case g.lazyCommit && m.GetType() == raftpb.MsgApp && len(m.GetEntries()) == 0 && c.onlyCommit(g, m.GetTo()):
			c.stats.LazyCommits++
		default:
			if m.GetType() == raftpb.MsgSnap {
				g.snapsTo = append(g.snapsTo, m.GetTo())
			}
			if early && !afterAppend(m.GetType()) {
				p.early.Msgs = append(p.early.Msgs, Msg{Group: g.id, M: m})
			} else {
				p.out.Msgs = append(p.out.Msgs, Msg{Group: g.id, M: m})
			}
		}
	}
}

// onlyCommit reports whether an empty append from g's leader to follower to
// can only be telling it of a commit: raft also sends empty appends to probe a
// follower's log and, with its in-flight window full, to keep replication from
// stalling, and those must go.
func (c *Core) onlyCommit(g *group, to uint64) bool {
	if g.state != raft.StateLeader {
		return false
	}
	c.probeTo, c.probeOK = to, false
	g.rn.WithProgress(c.probeProgress)
	return c.probeOK
}

// checkProgress is onlyCommit's visitor (probeProgress, made once so that the
// walk allocates nothing).
func (c *Core) checkProgress(id uint64, _ raft.ProgressType, pr tracker.Progress) {
	if id == c.probeTo {
		// WithProgress leaves Inflights out; a replicating follower's flow is
		// paused exactly when its in-flight window is full.
		c.probeOK = pr.State == tracker.StateReplicate && !pr.MsgAppFlowPaused
	}
}

// afterAppend reports whether a message of type t vouches for this node's own
// log or vote, and so may leave only once they are durable (raft queues these
// as its msgsAfterAppend).
func afterAppend(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MsgAppResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		return true
	}
	return false
}

// Advance finishes the iteration of rd after its storages were synced and its
// batches sent: it applies committed entries to the state machines, completes
// requests, takes snapshots that are due and tells raft the Ready is done. The
// returned results stay valid until the next Advance.
func (c *Core) Advance(rd *Ready) []Result {
	for _, g := range rd.groups {
		if g.failed != nil {
			continue
		}
		for _, to := range g.snapsTo {
			status := raft.SnapshotFinish
			if p := c.peers[to]; p != nil && p.unreach {
				status = raft.SnapshotFailure
			}
			g.rn.ReportSnapshot(to, status)
		}
		if err := c.apply(g); err != nil {
			c.fail(g, err)
			continue
		}
		g.rn.Advance(g.rd)
		g.rd = raft.Ready{}
		c.markActive(g)
		if g.applied > g.snapIndex && (g.snapDue || g.applied-g.snapIndex >= c.cfg.SnapshotEntries) {
			g.snapDue = false
			if err := c.snapshot(g); err != nil {
				c.fail(g, err)
			}
		}
	}
	for _, p := range rd.Early {
		p.Reset()
	}
	for _, p := range rd.Out {
		p.Reset()
	}
	for _, p := range c.plist {
		p.unreach = false
	}
	rd.groups = rd.groups[:0]
	res := c.results
	clear(c.spare)
	c.results, c.spare = c.spare[:0], res
	return res
}

func (c *Core) apply(g *group) error {
	rd := &g.rd
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		md := rd.Snapshot.GetMetadata()
		if err := g.sm.Restore(rd.Snapshot.GetData()); err != nil {
			return fmt.Errorf("restoring a snapshot: %w", err)
		}
		g.applied, g.snapIndex = md.GetIndex(), md.GetIndex()
		g.cs = md.GetConfState()
		c.setMembers(g)
		// The log up to the snapshot came without its entries: whether a
		// proposal among them was committed cannot be told.
		n := 0
		for _, p := range g.waiting {
			if p.index <= g.applied {
				c.results = append(c.results, Result{Token: p.token, Index: p.index,
					Err: fmt.Errorf("%w: group %d index %d", ErrOutcomeUnknown, g.id, p.index)})
				n++
			}
		}
		g.waiting = g.waiting[n:]
	}
	batch := c.applyBuf[:0]
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := g.sm.Apply(batch)
		clear(batch)
		batch = batch[:0]
		return err
	}
	for _, e := range rd.CommittedEntries {
		idx := e.GetIndex()
		if idx <= g.applied {
			continue
		}
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) > 0 {
				batch = append(batch, Entry{Index: idx, Term: e.GetTerm(), Data: e.GetData()})
			}
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			if err := flush(); err != nil {
				c.applyBuf = batch
				return fmt.Errorf("applying entries: %w", err)
			}
			var cc raftpb.ConfChangeI
			if e.GetType() == raftpb.EntryConfChange {
				v1 := new(raftpb.ConfChange)
				if err := proto.Unmarshal(e.GetData(), v1); err != nil {
					return fmt.Errorf("decoding the membership change at %d: %w", idx, err)
				}
				cc = v1
			} else {
				v2 := new(raftpb.ConfChangeV2)
				if err := proto.Unmarshal(e.GetData(), v2); err != nil {
					return fmt.Errorf("decoding the membership change at %d: %w", idx, err)
				}
				cc = v2
			}
			g.cs = g.rn.ApplyConfChange(cc)
			c.setMembers(g)
			g.snapDue = true
		}
		g.applied = idx
		c.complete(g, e)
	}
	if err := flush(); err != nil {
		c.applyBuf = batch
		return fmt.Errorf("applying entries: %w", err)
	}
	c.applyBuf = batch
	if len(g.reads) > 0 {
		g.reads = slices.DeleteFunc(g.reads, func(r readReq) bool {
			if r.known && r.index <= g.applied {
				res := Result{Token: r.token, Index: r.index}
				if bs := g.rn.BasicStatus(); r.leaderTerm != 0 && (bs.RaftState != raft.StateLeader || bs.GetTerm() != r.leaderTerm) {
					res = Result{Token: r.token, Err: &NotLeaderError{Group: g.id, Leader: g.lead}}
				}
				c.results = append(c.results, res)
				return true
			}
			return false
		})
	}
	return nil
}

// complete resolves the proposals that applying e decides: the one at e's
// index (committed if its term matches, else replaced by another leader's
// entry), and every one from an older term than e's, which can no longer be
// committed at any later index.
func (c *Core) complete(g *group, e *raftpb.Entry) {
	if len(g.waiting) == 0 {
		return
	}
	idx, term := e.GetIndex(), e.GetTerm()
	n := 0
	for _, p := range g.waiting {
		switch {
		case p.index == idx && p.term == term:
			r := Result{Token: p.token, Index: idx}
			if p.conf && e.GetType() == raftpb.EntryNormal {
				r.Err = fmt.Errorf("%w: group %d", ErrConfChangeRefused, g.id)
			}
			c.results = append(c.results, r)
		case p.index <= idx || p.term < term:
			c.results = append(c.results, Result{Token: p.token,
				Err: fmt.Errorf("%w: group %d: index %d went to another leader's entry", ErrProposalDropped, g.id, p.index)})
		default:
			g.waiting[n] = p
			n++
		}
	}
	clear(g.waiting[n:])
	g.waiting = g.waiting[:n]
}

// snapshot takes a snapshot of g's state machine at its applied index and
// compacts the log behind it, keeping CompactionOverhead entries.
func (c *Core) snapshot(g *group) error {
	data, err := g.sm.Snapshot()
	if err != nil {
		return fmt.Errorf("taking a snapshot: %w", err)
	}
	if _, err := g.st.CreateSnapshot(g.applied, g.cs, data); err != nil {
		return fmt.Errorf("storing a snapshot: %w", err)
	}
	g.snapIndex = g.applied
	c.stats.Snapshots++
	if g.applied > c.cfg.CompactionOverhead {
		first, err := g.st.FirstIndex()
		if err != nil {
			return fmt.Errorf("compacting: %w", err)
		}
		if at := g.applied - c.cfg.CompactionOverhead; at > first {
			if err := g.st.Compact(at); err != nil {
				return fmt.Errorf("compacting: %w", err)
			}
		}
	}
	c.dirty = append(c.dirty, g.st)
	return nil
}
