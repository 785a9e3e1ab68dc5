package replica

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Storage is one group's raft log and hard state. raft reads it through
// raft.Storage; the Core writes it. Writes need not be durable when they return:
// the driver calls Sync once per loop iteration on every Storage written in it,
// before it sends the messages that depend on those writes (see the package
// documentation, "The loop"). Several groups may share one Storage value only if
// it keeps their logs apart; the Core calls Sync once per distinct value.
//
// raft.MemoryStorage has every method but Sync.
type Storage interface {
	raft.Storage
	// Append writes entries, discarding any stored entries at or after the
	// first one's index.
	Append(ents []*raftpb.Entry) error
	SetHardState(st *raftpb.HardState) error
	// ApplySnapshot replaces the log with snap (a snapshot received from the
	// leader).
	ApplySnapshot(snap *raftpb.Snapshot) error
	// CreateSnapshot records a snapshot of the state machine at applied index i
	// with membership cs; Compact then discards entries before compactIndex.
	CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error)
	Compact(compactIndex uint64) error
	// Sync makes every write so far durable.
	Sync() error
}

// Entry is one committed entry handed to a StateMachine.
type Entry struct {
	Index uint64
	Term  uint64
	// Data is what the proposer passed to Propose. It is valid only during the
	// Apply call; a state machine that keeps it copies it.
	Data []byte
}

// StateMachine is a group's applied state, provided by the caller. The Core calls
// it from the host's loop, one call at a time per group, with every committed
// entry in log order, exactly once per entry for the life of the Core (after a
// restart it starts again from GroupConfig.Applied, or from the stored snapshot).
//
// To be the same on every replica a StateMachine must be deterministic: what it
// does depends only on the entries (and their index and term) and on its prior
// state; never on the wall clock, the node it runs on or anything outside the log.
type StateMachine interface {
	// Apply applies committed entries, in order. Entries that carry no data
	// (raft's own empty entries) and membership changes are not passed. An
	// error stops the group: its replica can no longer follow the log.
	Apply(ents []Entry) error
	// Snapshot returns the state after the last applied entry, for a new or
	// lagging replica and for log compaction.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot's (nil or empty: the empty
	// state, before any entry).
	Restore(data []byte) error
}
