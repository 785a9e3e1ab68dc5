package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Transport carries encoded batches (AppendBatch) from this node to others. A
// cluster route can carry them as opaque frames; the receiving side passes each
// to its Host's Receive.
type Transport interface {
	// Send hands one encoded batch for node to. b is valid only during the call.
	// Send must not block for long (it runs on the host's loop): a transport
	// that cannot take the batch now drops it and returns an error, and raft
	// sends again.
	Send(to uint64, b []byte) error
}

// Host runs a Core on real time: one goroutine per node serves every group,
// ticking them on a ticker, taking batches from Receive and requests from the
// methods below, and running the loop of the package documentation (which a
// transport reader runs itself when the loop is idle, Kick). All methods are
// safe for concurrent use.
type Host struct {
	cfg  Config
	tr   Transport
	core *Core

	mu       sync.Mutex
	inbox    []*Batch
	reqs     []*request
	free     []*Batch
	snaps    int // batches in inbox carrying a snapshot
	stopping bool
	started  bool
	err      error // fatal: a storage failed to sync

	// role is held by whoever runs the Core: the loop goroutine, or a transport
	// reader in Kick. Everything below "Owned by the loop" belongs to its holder.
	role sync.Mutex
	live atomic.Bool // Start was called and the loop has not ended

	wake  chan struct{}
	stopc chan struct{}
	done  chan struct{}

	// Owned by the loop (the role's holder).
	over     bool // the Core is stopped: nobody runs it again
	waiters  map[uint64]*request
	token    uint64
	enc      []byte
	onLeader func(LeaderChange)
	taken    []*request
	takenB   []*Batch
	syncq    chan syncJob
	syncErrs []error
}

type syncJob struct {
	st  Storage
	err *error
	wg  *sync.WaitGroup
}

// syncWorkers is how many storages the loop syncs at once when an iteration
// wrote several (separate files fsync in parallel).
const syncWorkers = 8

type reqKind uint8

const (
	reqPropose reqKind = iota
	reqConf
	reqTransfer
	reqRead
	reqLeaderRead
	reqStatus
	reqAdd
	reqRemove
	reqCampaign
	reqStats
)

type request struct {
	kind  reqKind
	group uint64
	node  uint64
	data  []byte
	cc    *raftpb.ConfChangeV2
	gc    GroupConfig
	done  chan struct{}
	index uint64
	err   error
	st    Status
	stats Stats
}

var reqPool = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// NewHost returns a Host for cfg.NodeID that sends through tr. Add groups with
// AddGroup, then Start it.
func NewHost(cfg Config, tr Transport) (*Host, error) {
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	return &Host{cfg: core.Config(), tr: tr, core: core, wake: make(chan struct{}, 1),
		stopc: make(chan struct{}), done: make(chan struct{}), waiters: make(map[uint64]*request)}, nil
}

// OnLeaderChange sets a function the loop calls whenever a local replica sees
// its group's leader change. It must not block; call it before Start.
func (h *Host) OnLeaderChange(fn func(LeaderChange)) { h.onLeader = fn }

// ID returns the node id.
func (h *Host) ID() uint64 { return h.cfg.NodeID }

// Config returns the configuration with its defaults.
func (h *Host) Config() Config { return h.cfg }

// Start starts the loop.
func (h *Host) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started && !h.stopping {
		h.started = true
		h.syncq = make(chan syncJob)
		h.live.Store(true)
		go h.run()
	}
}

// Stop stops the loop and waits for it; pending requests fail with ErrStopped.
// Storages and state machines are left to the caller.
func (h *Host) Stop() {
	h.mu.Lock()
	already, started := h.stopping, h.started
	h.stopping = true
	h.mu.Unlock()
	if !already {
		close(h.stopc)
		if !started {
			close(h.done)
		}
	}
	<-h.done
}

// Err returns the error that stopped the host (a storage that failed to sync),
// or nil.
func (h *Host) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Receive takes one encoded batch from the transport. It decodes it on the
// caller's goroutine (b is not retained) and queues it for the loop. A batch
// that does not decode, or is not addressed to this node, gets an error and
// changes nothing.
func (h *Host) Receive(b []byte) error {
	if err := h.Enqueue(b); err != nil {
		return err
	}
	h.signal()
	return nil
}

// Enqueue is Receive without waking the loop: a transport reader queues the
// batches of one read with it, then calls Kick once.
func (h *Host) Enqueue(b []byte) error {
	h.mu.Lock()
	var bt *Batch
	if n := len(h.free); n > 0 {
		bt = h.free[n-1]
		h.free = h.free[:n-1]
	} else {
		bt = new(Batch)
	}
	h.mu.Unlock()
	if err := DecodeBatch(b, bt); err != nil {
		h.putBatch(bt)
		return err
	}
	if bt.To != h.cfg.NodeID {
		h.putBatch(bt)
		return fmt.Errorf("%w: batch for node %d reached node %d", ErrMalformed, bt.To, h.cfg.NodeID)
	}
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return ErrStopped
	}
	h.inbox = append(h.inbox, bt)
	if hasSnapshot(bt) {
		h.snaps++
	}
	h.mu.Unlock()
	return nil
}

// maxInlineIterations bounds the loop iterations Kick runs on its caller's
// goroutine; more work is left to the loop.
const maxInlineIterations = 4

// Kick gets what Enqueue queued stepped. When the loop is idle the caller runs
// it on its own goroutine — the transport reader that just read the batches, as
// the outbound queues flush inline — so that a received append is written,
// answered and, once committed, applied without a hand-off to the loop's
// goroutine: two fewer goroutine wake-ups on a replicated publish's path (the
// follower's and the leader's). Otherwise, and for a batch carrying a snapshot
// (whose install may take long, and the reader must keep reading), it wakes the
// loop. Kick never waits for the loop.
func (h *Host) Kick() {
	if !h.live.Load() || !h.role.TryLock() {
		h.signal()
		return
	}
	if h.over {
		h.role.Unlock()
		return
	}
	more, err := h.work(true)
	if err != nil {
		h.fail(err)
		h.role.Unlock()
		return
	}
	h.role.Unlock()
	if more {
		h.signal()
	}
	// Work queued while the role was held here found it taken and woke the loop.
}

func hasSnapshot(b *Batch) bool {
	for _, m := range b.Msgs {
		if m.M.GetType() == raftpb.MsgSnap {
			return true
		}
	}
	return false
}

func (h *Host) putBatch(b *Batch) {
	b.Reset()
	h.mu.Lock()
	if len(h.free) < 64 {
		h.free = append(h.free, b)
	}
	h.mu.Unlock()
}

func (h *Host) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// do queues r for the loop and waits for its completion or ctx.
func (h *Host) do(ctx context.Context, r *request) error {
	if err := h.submit(r); err != nil {
		return err
	}
	return h.wait(ctx, r)
}

// submit queues r for the loop; a proposal is appended and sent by the caller
// itself when the loop is idle.
func (h *Host) submit(r *request) error {
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		reqPool.Put(r)
		return ErrStopped
	}
	h.reqs = append(h.reqs, r)
	h.mu.Unlock()
	if r.kind == reqPropose {
		// The proposer appends and sends its entry itself when the loop is
		// idle, as a transport reader steps what it read.
		h.Kick()
	} else {
		h.signal()
	}
	return nil
}

// wait waits for the loop to complete r.
func (h *Host) wait(ctx context.Context, r *request) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		// The loop still holds r and completes it later; it is not reused.
		return ctx.Err()
	case <-h.done:
		select {
		case <-r.done:
			return nil
		default:
		}
		return ErrStopped
	}
}

func newReq(kind reqKind, group uint64) *request {
	r := reqPool.Get().(*request)
	*r = request{kind: kind, group: group, done: r.done}
	return r
}

func finish(r *request) (uint64, error) {
	idx, err := r.index, r.err
	reqPool.Put(r)
	return idx, err
}

// Propose replicates data as one entry of group and returns its index once the
// entry is committed and applied on this node (the caller's acknowledgement).
// Concurrent proposals to a group are stepped together, one append and one
// sync for all of them. Only the leader takes proposals: elsewhere the error is
// a *NotLeaderError naming the leader. A ctx that ends first leaves the outcome
// unknown.
//
// data belongs to the group from the call on until Propose (or a Submit's Wait)
// returns an index: committed, the entry lives on in the group's own copy (the
// Raft library copies a proposal as the leader appends it to its log;
// TestProposalDataReusableAfterCommit holds it to that), and the caller may
// reuse data. After an error data may still be queued or in flight: leave it.
func (h *Host) Propose(ctx context.Context, group uint64, data []byte) (uint64, error) {
	p, err := h.Submit(group, data)
	if err != nil {
		return 0, err
	}
	return p.Wait(ctx)
}

// Proposal is an entry submitted with Submit, whose outcome Wait gives.
type Proposal struct {
	h *Host
	r *request
}

// Submit is Propose without the wait: it queues data for group and returns at
// once — having appended and sent the entry itself when the loop was idle — so
// that a caller can hand the wait to another goroutine. Wait must be called
// once for every Proposal Submit returned.
func (h *Host) Submit(group uint64, data []byte) (Proposal, error) {
	r := newReq(reqPropose, group)
	r.data = data
	if err := h.submit(r); err != nil {
		return Proposal{}, err
	}
	return Proposal{h: h, r: r}, nil
}

// Wait returns the proposal's index once it is committed and applied on this
// node, as Propose does.
func (p Proposal) Wait(ctx context.Context) (uint64, error) {
	if err := p.h.wait(ctx, p.r); err != nil {
		return 0, err
	}
	return finish(p.r)
}

// ChangeMembership proposes a membership change and returns its index once it
// is applied on this node (the leader).
func (h *Host) ChangeMembership(ctx context.Context, group uint64, cc *raftpb.ConfChangeV2) (uint64, error) {
	r := newReq(reqConf, group)
	r.cc = cc
	if err := h.do(ctx, r); err != nil {
		return 0, err
	}
	return finish(r)
}

// AddVoter adds node to group as a voter (or promotes it from learner).
func (h *Host) AddVoter(ctx context.Context, group, node uint64) (uint64, error) {
	return h.ChangeMembership(ctx, group, ConfChange(raftpb.ConfChangeAddNode, node))
}

// AddLearner adds node to group as a learner: it receives the log but does not
// vote (a new replica catches up as a learner before it is promoted).
func (h *Host) AddLearner(ctx context.Context, group, node uint64) (uint64, error) {
	return h.ChangeMembership(ctx, group, ConfChange(raftpb.ConfChangeAddLearnerNode, node))
}

// Promote makes learner node a voter of group.
func (h *Host) Promote(ctx context.Context, group, node uint64) (uint64, error) {
	return h.AddVoter(ctx, group, node)
}

// RemoveReplica removes node from group. A leader that removes itself steps
// down once the change is applied.
func (h *Host) RemoveReplica(ctx context.Context, group, node uint64) (uint64, error) {
	return h.ChangeMembership(ctx, group, ConfChange(raftpb.ConfChangeRemoveNode, node))
}

// TransferLeadership moves group's leadership to node to, returning once this
// replica sees to lead (ErrTransferFailed after an election timeout).
func (h *Host) TransferLeadership(ctx context.Context, group, to uint64) error {
	r := newReq(reqTransfer, group)
	r.node = to
	if err := h.do(ctx, r); err != nil {
		return err
	}
	_, err := finish(r)
	return err
}

// ReadIndex returns a read index of group for a linearizable read: it has been
// confirmed by a quorum after the call and is applied on this node, so reading
// the state machine now sees every write acknowledged before the call.
func (h *Host) ReadIndex(ctx context.Context, group uint64) (uint64, error) {
	r := newReq(reqRead, group)
	if err := h.do(ctx, r); err != nil {
		return 0, err
	}
	return finish(r)
}

// LeaderReadIndex is ReadIndex for a caller that must know this node leads the
// group (a leader serving from its own state): it fails with a *NotLeaderError
// unless the local replica leads when called and still leads, in the same term,
// once a quorum has confirmed the read.
func (h *Host) LeaderReadIndex(ctx context.Context, group uint64) (uint64, error) {
	r := newReq(reqLeaderRead, group)
	if err := h.do(ctx, r); err != nil {
		return 0, err
	}
	return finish(r)
}

// Campaign makes the local replica of group start an election.
func (h *Host) Campaign(ctx context.Context, group uint64) error {
	r := newReq(reqCampaign, group)
	if err := h.do(ctx, r); err != nil {
		return err
	}
	_, err := finish(r)
	return err
}

// Status returns the status of the local replica of group.
func (h *Host) Status(group uint64) (Status, error) {
	r := newReq(reqStatus, group)
	if err := h.do(context.Background(), r); err != nil {
		return Status{}, err
	}
	st := r.st
	_, err := finish(r)
	return st, err
}

// Stats returns the Core's counters.
func (h *Host) Stats() (Stats, error) {
	r := newReq(reqStats, 0)
	if err := h.do(context.Background(), r); err != nil {
		return Stats{}, err
	}
	s := r.stats
	_, err := finish(r)
	return s, err
}

// AddGroup starts a replica of a group on this node (see GroupConfig). It may
// be called before or after Start.
func (h *Host) AddGroup(gc GroupConfig) error {
	h.mu.Lock()
	if !h.started && !h.stopping {
		// The loop is not running: the Core is ours for the moment.
		defer h.mu.Unlock()
		return h.core.AddGroup(gc)
	}
	h.mu.Unlock()
	r := newReq(reqAdd, gc.ID)
	r.gc = gc
	if err := h.do(context.Background(), r); err != nil {
		return err
	}
	_, err := finish(r)
	return err
}

// RemoveGroup stops the local replica of group; its pending requests fail with
// ErrStopped.
func (h *Host) RemoveGroup(group uint64) error {
	r := newReq(reqRemove, group)
	if err := h.do(context.Background(), r); err != nil {
		return err
	}
	_, err := finish(r)
	return err
}

func (h *Host) run() {
	defer close(h.done)
	defer close(h.syncq)
	for range syncWorkers {
		go func() {
			for j := range h.syncq {
				*j.err = j.st.Sync()
				j.wg.Done()
			}
		}()
	}
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		tick := false
		select {
		case <-h.stopc:
			// The role is kept: nobody runs the Core after this.
			h.role.Lock()
			h.live.Store(false)
			if !h.over {
				h.over = true
				h.shutdown(ErrStopped)
			}
			return
		case <-t.C:
			tick = true
		case <-h.wake:
		}
		h.role.Lock()
		if h.over {
			h.role.Unlock()
			continue // failed in Kick: Stop (or the fatal error's close of stopc) ends the loop
		}
		if tick {
			h.core.Tick()
		}
		if _, err := h.work(false); err != nil {
			h.fail(err)
		}
		h.role.Unlock()
	}
}

// work steps what is queued and runs the loop while the Core has work. Inline
// (Kick), it leaves a batch with a snapshot and anything past
// maxInlineIterations to the loop and reports more.
func (h *Host) work(inline bool) (more bool, err error) {
	if !h.drain(inline) {
		return true, nil
	}
	for n := 0; h.core.HasReady(); n++ {
		if inline && n == maxInlineIterations {
			return true, nil
		}
		if err := h.iterate(); err != nil {
			return false, err
		}
		if !h.drain(inline) {
			return true, nil
		}
	}
	return false, nil
}

// fail stops the host for a fatal error; the role is held.
func (h *Host) fail(err error) {
	h.mu.Lock()
	h.err = err
	already := h.stopping
	h.stopping = true
	h.mu.Unlock()
	if !already {
		close(h.stopc)
	}
	h.over = true
	h.shutdown(err)
}

// iterate runs one Ready: sync, send, advance, complete.
func (h *Host) iterate() error {
	rd := h.core.Ready()
	h.send(rd.Early)
	if err := h.syncAll(rd.Sync); err != nil {
		// What was written cannot be known durable: nothing that depends
		// on it may be sent, and the node must not go on.
		return fmt.Errorf("replica: syncing storage: %w", err)
	}
	h.send(rd.Out)
	if h.onLeader != nil {
		for _, lc := range rd.Leaders {
			h.onLeader(lc)
		}
	}
	for _, res := range h.core.Advance(rd) {
		r := h.waiters[res.Token]
		if r == nil {
			continue
		}
		delete(h.waiters, res.Token)
		r.index, r.err = res.Index, res.Err
		r.done <- struct{}{}
	}
	return nil
}

// send encodes and sends batches, one frame per node.
func (h *Host) send(batches []*Batch) {
	for _, b := range batches {
		var err error
		h.enc, err = AppendBatch(h.enc[:0], b)
		if err == nil {
			err = h.tr.Send(b.To, h.enc)
		}
		if err != nil {
			h.core.ReportUnreachable(b.To)
		}
	}
}

// syncAll syncs the storages written in an iteration, several at once.
func (h *Host) syncAll(sts []Storage) error {
	switch len(sts) {
	case 0:
		return nil
	case 1:
		return sts[0].Sync()
	}
	h.syncErrs = append(h.syncErrs[:0], make([]error, len(sts))...)
	var wg sync.WaitGroup
	wg.Add(len(sts))
	for i, st := range sts {
		h.syncq <- syncJob{st: st, err: &h.syncErrs[i], wg: &wg}
	}
	wg.Wait()
	return errors.Join(h.syncErrs...)
}

// drain steps the batches and requests queued since the last call. Inline, it
// takes nothing while a snapshot is queued and reports false.
func (h *Host) drain(inline bool) bool {
	h.mu.Lock()
	if inline && h.snaps > 0 {
		h.mu.Unlock()
		return false
	}
	h.snaps = 0
	h.takenB, h.inbox = h.inbox, h.takenB[:0]
	h.taken, h.reqs = h.reqs, h.taken[:0]
	h.mu.Unlock()
	for i, b := range h.takenB {
		h.core.Step(b)
		h.takenB[i] = nil
		h.putBatch(b)
	}
	for i, r := range h.taken {
		h.taken[i] = nil
		h.handle(r)
	}
	return true
}

func (h *Host) handle(r *request) {
	var err error
	wait := false
	switch r.kind {
	case reqPropose, reqConf, reqTransfer, reqRead, reqLeaderRead:
		h.token++
		tok := h.token
		switch r.kind {
		case reqPropose:
			err = h.core.Propose(r.group, tok, r.data)
		case reqConf:
			err = h.core.ChangeMembership(r.group, tok, r.cc)
		case reqTransfer:
			err = h.core.TransferLeadership(r.group, tok, r.node)
		case reqRead:
			err = h.core.ReadIndex(r.group, tok)
		case reqLeaderRead:
			err = h.core.LeaderReadIndex(r.group, tok)
		}
		if err == nil {
			h.waiters[tok] = r
			wait = true
		}
	case reqStatus:
		r.st, err = h.core.Status(r.group)
	case reqStats:
		r.stats = h.core.Stats()
	case reqAdd:
		err = h.core.AddGroup(r.gc)
	case reqRemove:
		err = h.core.RemoveGroup(r.group)
	case reqCampaign:
		err = h.core.Campaign(r.group)
	}
	if !wait {
		r.err = err
		r.done <- struct{}{}
	}
}

func (h *Host) shutdown(err error) {
	h.core.Stop()
	for _, res := range h.core.TakeResults() {
		if r := h.waiters[res.Token]; r != nil {
			delete(h.waiters, res.Token)
			r.err = res.Err
			r.done <- struct{}{}
		}
	}
	for tok, r := range h.waiters {
		delete(h.waiters, tok)
		r.err = err
		r.done <- struct{}{}
	}
	h.mu.Lock()
	reqs := h.reqs
	h.reqs = nil
	h.mu.Unlock()
	for _, r := range reqs {
		r.err = err
		r.done <- struct{}{}
	}
}

// LocalNetwork is an in-process Transport between Hosts: Send decodes the batch
// straight into the receiving Host. Links can be cut for tests.
type LocalNetwork struct {
	mu    sync.RWMutex
	hosts map[uint64]*Host
	cut   map[[2]uint64]bool
}

// NewLocalNetwork returns an empty network.
func NewLocalNetwork() *LocalNetwork {
	return &LocalNetwork{hosts: make(map[uint64]*Host), cut: make(map[[2]uint64]bool)}
}

// Attach makes h reachable (again) at its node id.
func (n *LocalNetwork) Attach(h *Host) {
	n.mu.Lock()
	n.hosts[h.ID()] = h
	n.mu.Unlock()
}

// Detach makes node unreachable.
func (n *LocalNetwork) Detach(node uint64) {
	n.mu.Lock()
	delete(n.hosts, node)
	n.mu.Unlock()
}

// Cut drops everything from node from to node to (one way) until Heal.
func (n *LocalNetwork) Cut(from, to uint64) {
	n.mu.Lock()
	n.cut[[2]uint64{from, to}] = true
	n.mu.Unlock()
}

// Heal restores every cut link.
func (n *LocalNetwork) Heal() {
	n.mu.Lock()
	clear(n.cut)
	n.mu.Unlock()
}

// ErrUnreachable is LocalNetwork's error for a node it cannot reach.
var ErrUnreachable = errors.New("replica: node unreachable")

// Transport returns node from's Transport on the network.
func (n *LocalNetwork) Transport(from uint64) Transport { return localTransport{n: n, from: from} }

type localTransport struct {
	n    *LocalNetwork
	from uint64
}

func (t localTransport) Send(to uint64, b []byte) error {
	t.n.mu.RLock()
	h := t.n.hosts[to]
	cut := t.n.cut[[2]uint64{t.from, to}]
	t.n.mu.RUnlock()
	if h == nil || cut {
		return fmt.Errorf("%w: %d", ErrUnreachable, to)
	}
	// As a route's reader does: the receiver steps the batch on this goroutine
	// when its loop is idle. The sender's own loop role is held meanwhile, so a
	// reply to it is left to its loop.
	if err := h.Enqueue(b); err != nil {
		return err
	}
	h.Kick()
	return nil
}
