/*
Package replica is the multi-group Raft host of one Tern node: every replica the
node holds — of the meta group and of each stream partition's group — driven by
one loop, with heartbeats coalesced per node pair, proposals batched per group,
idle groups quiesced, and each group's committed entries applied to a state
machine the caller provides. Consensus itself is go.etcd.io/raft/v3's RawNode;
this package writes its driver (the "multi-raft" approach of CockroachDB and
TiKV), never its own consensus.

# What the package owns, and what it does not

The package owns the RawNodes, their clock (ticks), the order of the loop (what
is written, synced, sent and applied when), proposal tracking, membership
changes, leadership transfer, read-index requests, snapshot triggering and log
compaction, heartbeat coalescing and quiescence, and the wire format of the
batches nodes exchange (AppendBatch, DecodeBatch).

The caller owns:

  - Storage, one per group (interface Storage: raft.Storage plus the writes and
    Sync). Writes may be buffered until Sync; the loop syncs every Storage it
    wrote in an iteration, once, before it sends anything that depends on it.
    internal/replica/raftlog is the durable implementation; raft.MemoryStorage
    plus a Sync method serves tests. Storage values must be comparable (pointers),
    as the loop deduplicates them per iteration.
  - StateMachine, one per group: Apply(entries), Snapshot, Restore. It must be
    deterministic — its result may depend only on the entries, their index and
    term, and its prior state, never on the wall clock or the node — because it
    runs on every replica and they must agree. The stream and MQTT session
    state machines are meant to be applied this way.
  - Transport: Send(node, encoded batch) on the sending side, Host.Receive(bytes)
    on the receiving side. A cluster route carries a batch as one opaque frame;
    LocalNetwork is the in-process transport of tests and benchmarks.
  - Placement: which nodes hold which groups, creating a replica with AddGroup on
    a node before adding it to the group's membership, and removing it with
    RemoveGroup afterwards. A node's replica id in every group is its node id,
    so a node holds at most one replica of a group.

# Two layers: Core and Host

Core is the deterministic part: no goroutines, no clock, no I/O other than its
calls to Storage and StateMachine. It is driven by explicit calls — Tick (time is
counted in ticks), Step (a received batch), Propose, ChangeMembership,
TransferLeadership, ReadIndex — and hands back, like raft's own Ready, what to do:

	rd := core.Ready()        // entries, hard states and snapshots are written
	for _, b := range rd.Early { send(b) }  // SendBeforeSync: a leader's appends
	for _, st := range rd.Sync { st.Sync() }
	for _, b := range rd.Out  { send(b) }    // one batch per destination node
	results := core.Advance(rd)              // apply, complete requests, snapshot

Tests drive a Core per node through a simulated network on virtual time (see
sim_test.go): any failing seed replays exactly.

Host runs a Core on real time: one goroutine per node serves all of its groups
(not one per group), waking on its ticker, on received batches and on requests.
Each wake-up it steps everything queued since the last one, then repeats
Ready → sync → send → Advance while the Core has work. Requests wait on a
channel for their Result; every Host method is safe for concurrent use.

Whoever runs the Core holds the host's loop role. A transport reader that
queued a read's batches with Enqueue calls Kick: when the loop is idle the
reader takes the role and runs the loop's work itself (a few iterations at
most), so a follower writes and answers an append, and a leader commits and
applies, on the goroutine that read it — the outbound queues' inline flush,
for Raft — instead of waking the loop's goroutine for it. A batch carrying a
snapshot, and anything past those few iterations, is left to the loop.

# Starting a host

	h, err := replica.NewHost(replica.Config{NodeID: 1}, transport)
	// a new group, the same Voters on each founding replica:
	err = h.AddGroup(replica.GroupConfig{ID: 7, Storage: st, StateMachine: sm, Voters: []uint64{1, 2, 3}})
	h.Start()
	// the transport's reader, for each frame from another node:
	err = h.Receive(frame)   // or Enqueue for each frame of a read, then Kick once
	...
	idx, err := h.Propose(ctx, 7, data)   // returns once committed and applied here
	h.Stop()

A new group is bootstrapped with an initial snapshot (index 1, term 1) holding its
voters, written to each founding replica's empty Storage. A replica restarting
from a non-empty Storage ignores Voters: its membership is in the log. A replica
that joins later starts from an empty Storage with no Voters and is then added by
the leader (AddLearner, later Promote); it receives a snapshot. GroupConfig.Applied
tells a durable state machine's position; 0 means the Core restores the state
machine from the Storage's snapshot and re-applies the log after it.

# The loop, and what may be sent when

Per iteration, for every group with a Ready: a received snapshot is written
(ApplySnapshot), then new entries (Append), then the hard state. Each Storage
written with raft's MustSync (new entries, a changed term or vote) or a snapshot
is synced once — several storages in parallel — and only then is anything sent:
raft's rule that messages go out only after the hard state and earlier entries
are durable holds for every message, including a follower's MsgAppResp and a
vote, which is what makes an acknowledged entry survive a kill -9. With
Config.SendBeforeSync a leader's own traffic (appends, heartbeats, read answers)
goes out before the sync instead, in Ready.Early, as raft's thesis allows
(§10.2.1): the leader counts itself in a quorum only once raft hears its own
append is durable, so its fsync and the followers' overlap, halving a proposal's
latency when every iteration fsyncs (BenchmarkProposeOneAtATime). Answers and
votes, and every message of a group whose term or vote changed in the
iteration, still wait. Then committed entries are applied in order, a batch per
Apply call, membership changes between them applied to raft; proposals, reads
and transfers complete; and a snapshot is taken if one is due.

# Proposals and their results

Propose returns the entry's index once the entry is committed and applied on
this node. Only the leader takes proposals (raft's forwarding is off): elsewhere
the error is a *NotLeaderError naming the known leader, for the caller to
forward to. All proposals that reach a group in one wake-up of the loop are
stepped as one raft message: one append, one sync, one MsgApp per follower
(group commit; with a slow fsync, many proposals share each sync).

A proposal is tracked by the index and term raft gives its entry. When the entry
at that index is applied, the proposal succeeded if the terms match; otherwise
another leader's entry took its place and the proposal fails with
ErrProposalDropped — as do all of a term's proposals once an entry of a later
term is applied, since they can no longer be committed. Errors, all for
errors.Is:

  - ErrNotLeader (a *NotLeaderError with the leader, 0 if unknown): forward.
  - ErrGroupUnknown: no such group on this node. ErrGroupExists: AddGroup twice.
  - ErrStopped: the host stopped or the group was removed first; the outcome of
    a proposal is unknown.
  - ErrProposalDropped: not committed and never will be; safe to retry.
  - ErrOutcomeUnknown: a snapshot overtook the proposal here; it may or may not
    have been committed.
  - ErrConfChangeRefused: raft refused a membership change (one at a time).
  - ErrTransferFailed, ErrReadDropped: no result within two election timeouts.
  - ErrGroupFailed: the group's Storage or StateMachine returned an error; the
    replica has stopped taking part. A failed Sync stops the whole Host (Err).
  - ErrEmptyProposal: raft reserves empty entries.
  - context errors: the caller's ctx ended first; the outcome is unknown.

# Membership, leadership, reads, status

ChangeMembership takes a raft ConfChangeV2; AddVoter, AddLearner, Promote and
RemoveReplica make the single-change ones. A membership change is applied when
it commits, and a snapshot is taken right after it, because raft accepts a
snapshot only from a membership that names the receiving replica (a new replica
catches up from it). TransferLeadership returns once this replica sees the
target lead. ReadIndex gives a linearizable read: the index has been confirmed by
a quorum after the call and applied here, so the state machine then reflects
every write acknowledged before the call; any replica can serve it.
LeaderReadIndex is the read of a leader that serves from its own state (a
stream's consumers): it is refused unless this replica leads when asked and
still leads, in the same term, when the quorum confirms. Status
reports leader, term, commit, applied, membership and, on the leader, every
replica's progress and lag. OnLeaderChange reports leadership changes as the
loop sees them; a replica that fails (ErrGroupFailed: its storage or state
machine erred) is reported as seeing no leader (leader 0), so that a node whose
failed replica led stops acting as the group's leader.

# Coalesced heartbeats

raft makes every group's leader send a MsgHeartbeat per follower every
HeartbeatTicks. The Core takes them out of the groups' messages and holds them
per destination node; once per heartbeat interval each node pair exchanges one
batch carrying a (group, term, commit) triple for every group the pair shares,
which the receiver expands back into each group's MsgHeartbeat; the responses
come back the same way, in one batch. Heartbeats that carry a read-index context
go as ordinary messages, uncoalesced, at once. (CockroachDB does the same with
its coalesced heartbeats.)

The commit index rides on those heartbeats too, which is what
GroupConfig.LazyCommit relies on: a group with it drops the empty append raft
sends each replicating follower after every commit, and its followers learn the
commit with the next append, the next heartbeat batch or the quiescing
heartbeat. Probes, and appends sent while a follower's in-flight window is full,
still go.

# Quiescence

A group whose leader finds nothing left to do — the whole log committed, applied
and acknowledged by every replica, nothing pending, every member's node alive —
stops ticking: the leader sends each follower a quiescing heartbeat and the
follower stops ticking too if it agrees on the term, the leader and the commit
index. A quiesced group costs nothing per tick. Any raft message for it, a
proposal, read, transfer or campaign wakes it (a heartbeat response does not: it
answers the quiescing heartbeat). Liveness then rests on a node-level heartbeat:
every heartbeat interval each node sends every node it shares a group with a
batch, empty if there is nothing else, and a node not heard from for ElectionTicks
is taken as down, which wakes every quiesced group it is a member of — so a
dead leader's groups elect a new one, and a leader cut off from its followers
wakes and steps down through CheckQuorum. Raft's safety does not depend on
ticking; quiescence only changes when elections can start. DisableQuiescence turns
it off. Measured by BenchmarkIdleGroups: 1,000 idle groups of 3 replicas on 3
in-process nodes use about 15 ms of CPU per second quiesced, about 140 ms not.

# Timing defaults, and why

The goal is a new acknowledged publish within one second of a leader's kill -9.

  - TickInterval 50 ms, ElectionTicks 8 (400 ms), HeartbeatTicks 2 (100 ms).
    A follower campaigns after a randomized 400–800 ms without its leader
    (quiesced groups: up to 400 ms for the node to be declared down, then the
    same); PreVote and the vote take two round trips, then the first commit of
    the term: a new leader commits within about 0.85 s on a LAN. Elections in
    TestHostFailover took about 0.75 s. Lower values fail over faster but make
    a GC pause or a loaded machine look like a dead leader.
  - PreVote and CheckQuorum are on: a node back from a partition does not
    disrupt a healthy group, and a leader cut off from its quorum steps down
    after an election timeout, so it cannot keep serving stale reads.
  - MaxSizePerMsg 1 MiB, MaxInflightMsgs 256, MaxUncommittedSize 64 MiB per
    group (past it proposals are dropped, which pushes back on producers).
  - SnapshotEntries 10,000 and CompactionOverhead 5,000: a snapshot every
    10,000 applied entries, keeping 5,000 entries behind it so that a follower
    briefly behind catches up from the log.
*/
package replica
