// Package store is Tern's embedded message log: one segmented, append-only log
// per stream partition, in a directory it owns. It owns the files in that
// directory and nothing else; it knows nothing of subjects' wildcards,
// consumers, acknowledgements or replication, which belong to internal/stream.
//
// Layout: records go to segment files named by their first sequence
// (00000000000000000001.log), rolled at Config.SegmentBytes. A sealed segment
// has a sparse index (.idx); tombstones go to per-segment .del files. The
// byte-level formats, the sync policies and what each can lose, recovery and
// memory use are in docs/storage.md.
//
// How the owner drives a Log:
//
//   - Exactly one goroutine, the owner's writer, calls Append, Commit,
//     Rollback, Delete, Purge, ExpireOld, TruncateAfter and Reset (the last
//     two serve a replication log: cutting a conflicting suffix, starting
//     again after a snapshot install). Appends are encoded into one
//     buffer and become durable and visible together at Commit (one write per
//     segment touched). A replication layer can treat Append as "proposed" and
//     Commit as "acknowledged"; Rollback hands the sequences out again.
//   - Any number of goroutines call Read, NewReader/Reader.Next, State,
//     SeqForTime and ForEachSubject at the same time. A Reader itself belongs
//     to one goroutine.
//   - The owner calls ExpireOld periodically when Config.MaxAge is set; count
//     and byte limits are applied by Commit. Under SyncInterval the Log runs one
//     goroutine of its own that fsyncs (unless Config.OwnerSyncs: the owner
//     calls Sync); Close stops it.
//
// Open always recovers: it checks every record's CRC, cuts a torn tail off the
// last segment (Report.TruncatedBytes) and reports any other damage in
// Report.Corrupt without dropping the intact records around it. Reading a
// damaged message gives an error that matches ErrCorrupt and is a *Corruption.
package store
