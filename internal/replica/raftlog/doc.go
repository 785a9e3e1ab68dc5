// Package raftlog is the durable state of one Raft group (go.etcd.io/raft/v3):
// its entries, its hard state and its latest snapshot, in a directory it owns.
// A *Log satisfies raft.Storage and the writes a host makes for each Ready
// (the Storage interface); its semantics are those of raft.MemoryStorage, which
// a model test checks operation by operation. It knows nothing of messages,
// transports, the state machine or other groups: the host owns those.
//
// # Files
//
//	<dir>/log/               the entries: an internal/store log, sequence = raft index
//	<dir>/hardstate          the hard state (40 bytes)
//	<dir>/hardstate.tmp      a newer hard state Sync has not taken yet
//	<dir>/hardstate.sync     a newer hard state a Sync is making durable
//	<dir>/snapshot           the latest snapshot: metadata and data
//	<dir>/snapshot.tmp       a CreateSnapshot in progress (removed by Open)
//	<dir>/snapshot.install   an ApplySnapshot in progress (finished by Open)
//	<dir>/compacted          empty; says the log's first record is its dummy entry
//
// Each entry is one store record: sequence = index, empty subject, the entry's
// Data as payload, and a 16-byte header block with the term, the type and which
// fields were set (so entries read back are proto.Equal to those appended). The
// log's first record is the dummy entry, the one at FirstIndex-1 whose term raft
// still asks for: Compact(i) purges the records below i, ApplySnapshot resets
// the store to a single record at the snapshot's index. A log never compacted
// nor reset (no compacted file) has the implicit dummy 0 with term 0 and its
// records start at 1. The byte layouts are in docs/storage.md.
//
// In memory the log keeps the term of every index as runs (Term never reads
// the disk) and the entries Append received most recently, up to
// Config.CacheBytes, as they were given: Entries for them, which raft asks for
// right after Append to build MsgApp and to apply, neither reads nor
// allocates. Older entries are read from the segments.
//
// # Driving it
//
// Open(cfg) recovers the directory. Then, for each raft.Ready, in this order:
//
//	if !raft.IsEmptySnap(rd.Snapshot) { l.ApplySnapshot(rd.Snapshot) }
//	l.Append(rd.Entries)
//	if !raft.IsEmptyHardState(rd.HardState) { l.SetHardState(rd.HardState) }
//	l.Sync() // before sending rd.Messages, unless the policy is SyncAlways
//	send rd.Messages; apply rd.CommittedEntries; rn.Advance(rd)
//
// and after applying, now and then, CreateSnapshot(applied, confState, data)
// and Compact(some index at or below it). raft.RawNode's Config.Storage is the
// *Log itself. Every method takes one lock, so raft's goroutine and the host's
// may call it at once. Sync holds it only to take what it makes durable, not
// while it fsyncs: a timer's Sync must not stall the Raft loop's appends.
//
// # Durability and crashes
//
// Config.Sync is a store.SyncPolicy. Under SyncAlways every Append,
// SetHardState and Compact is fsynced before it returns. Under SyncInterval a
// timer shared by every log of the process (store.IntervalSync) calls Sync within SyncInterval of a write; under SyncNever only
// Sync and Close do. Sync fsyncs each segment file written since the last Sync,
// then the hard state (fsync, rename, fsync of the directory): entries first,
// so a hard state on disk never commits entries that are not. A host that must
// not lose an acknowledged entry or a vote to a power failure calls Sync before
// it sends the Ready's messages (one fsync per file touched per Ready), or uses
// SyncAlways. After Append and SetHardState return, the data is in the page
// cache: a crash of the process alone (kill -9) loses nothing under any policy.
//
// Snapshots are written under every policy as a whole: CreateSnapshot writes
// snapshot.tmp, fsyncs it, renames it and fsyncs the directory. ApplySnapshot
// writes snapshot.install (fsynced) before it touches the log, then resets the
// log to the snapshot's dummy entry, syncs it, and renames the file to
// snapshot; a crash in between leaves snapshot.install, and Open finishes the
// install. A crash therefore leaves the old snapshot with the old log or the
// new snapshot with the new log, never a mix.
//
// Open recovers whatever a crash left: the newest intact hard state of
// hardstate.tmp, hardstate.sync and hardstate (a torn one is dropped: it was
// never synced), a torn
// tail of entries cut off (Report.TruncatedBytes; written, never synced), an
// interrupted install finished, an interrupted truncation or compaction taken
// as far as it got (store.TruncateAfter and Purge leave a prefix of the old log
// and a front anywhere between the old and the new). It raises a hard state
// commit below FirstIndex-1 to it: that is what a crash between ApplySnapshot
// and the SetHardState of the same Ready leaves, and raft would refuse it.
//
// # Damage
//
// Open reads every entry once and checks every file's CRC. Anything damaged or
// inconsistent (a flipped byte in an entry, the hard state or the snapshot; a
// missing segment; entries that do not run without a hole from the dummy to the
// last; a hard state that commits entries the log does not have; a snapshot
// beyond the last entry) fails Open with an error matching ErrCorrupt (and, for
// entries, store.ErrCorrupt with a *store.Corruption naming file, offset and
// index). Damage that appears later is reported the same way by the Entries or
// Snapshot call that reads it (raft panics on such an error, so a host that
// wants to survive it recovers around its RawNode calls). A replica whose log
// says ErrCorrupt cannot serve its group: its host removes the directory and
// rebuilds the replica from the other members. Damage to the last record of
// the last segment looks like a torn write and is cut off like one; if a hard
// state commits it, Open says ErrCorrupt.
//
// # Limits
//
// An entry's record (its Data plus 52 bytes) must fit in Config.SegmentBytes
// (8 MiB by default); a larger one fails Append with store.ErrTooLarge. Space
// comes back a segment at a time, when Compact passes the end of one. Unknown
// protobuf fields of an entry are not stored.
package raftlog
