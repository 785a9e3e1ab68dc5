package raftlog

import (
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/fileutil"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tern-mq/tern/internal/store"
)

// Storage is what a replication host needs of one group's raft state: raft's
// read side and the writes the host makes for each Ready. *Log implements it;
// *raft.MemoryStorage has every method but Sync.
type Storage interface {
	raft.Storage // InitialState, Entries, Term, LastIndex, FirstIndex, Snapshot

	// Append adds entries; those that overlap the log replace its suffix from
	// the first of them on (entries at or below FirstIndex-1 are ignored).
	Append(ents []*pb.Entry) error
	SetHardState(st *pb.HardState) error
	// ApplySnapshot replaces the whole log: it then starts after the
	// snapshot's index. raft.ErrSnapOutOfDate if it is not newer.
	ApplySnapshot(snap *pb.Snapshot) error
	// CreateSnapshot records a snapshot of the state at index i (the log is
	// unchanged). cs nil keeps the previous ConfState.
	CreateSnapshot(i uint64, cs *pb.ConfState, data []byte) (*pb.Snapshot, error)
	// Compact drops the entries before compactIndex (raft.ErrCompacted if
	// there are none).
	Compact(compactIndex uint64) error
	// Sync makes everything written so far durable.
	Sync() error
}

var _ Storage = (*Log)(nil)

const (
	DefaultSegmentBytes = 8 << 20
	DefaultCacheBytes   = 4 << 20
)

// Config configures one group's log.
type Config struct {
	Dir          string           // owned by the log; created if missing
	Name         string           // in errors, e.g. "orders/2"; default Dir
	Sync         store.SyncPolicy // when writes are fsynced (see the package comment)
	SyncInterval time.Duration    // for store.SyncInterval; default 100ms
	SegmentBytes int64            // size of the entry segments; default 8 MiB
	CacheBytes   int              // recent entries kept in memory (their Data plus 64 bytes each); default 4 MiB
}

// Report says what Open found.
type Report struct {
	TruncatedBytes  int64 // torn tail cut off the entries (written, never synced)
	FinishedInstall bool  // an ApplySnapshot cut short by a crash was completed
	Entries         uint64
	Duration        time.Duration
}

// File names in Config.Dir.
const (
	logDir      = "log"
	hsFile      = "hardstate"
	hsTmpFile   = "hardstate.tmp"
	hsSyncFile  = "hardstate.sync" // a hard state Sync is making durable
	snapFile    = "snapshot"
	snapTmpFile = "snapshot.tmp"
	installFile = "snapshot.install"
	markerFile  = "compacted"
)

// Log is one raft group's durable state in a directory of its own: entries in
// a store.Log, the hard state and the latest snapshot in files beside it. Its
// methods are safe for concurrent use; they take one lock.
type Log struct {
	cfg Config

	mu     sync.Mutex
	st     *store.Log
	closed bool
	// syncRun serializes Sync and Close; Sync holds mu only to take what it
	// makes durable, not while it fsyncs.
	syncRun sync.Mutex
	// syncing, if set (tests), runs in Sync once the lock is let go, before
	// the fsyncs.
	syncing func()

	// The log holds the dummy entry (dummy, terms.at(dummy)) and the entries
	// dummy+1 … last. In the store the dummy is the first record, except in a
	// log never compacted nor reset (no marker file): its dummy is index 0,
	// term 0, and its records start at 1.
	dummy, last uint64
	marker      bool
	terms       termRuns

	// cache holds the entries cacheFrom … last (a suffix of the log, possibly
	// empty) as Append received them; cacheBytes is its size by CacheBytes'
	// measure.
	cache      []*pb.Entry
	cacheFrom  uint64
	cacheBytes int

	hs    *pb.HardState
	hsTmp *os.File // hardstate.tmp, holding hs until Sync renames it (not under SyncAlways)

	snap       *pb.SnapshotMetadata // of the snapshot file (ensured; index 0 if none)
	snapOnDisk bool                 // the snapshot file exists

	broken error // a write failed half way: the log refuses writes until opened again

	meta []byte // one entry header, reused by Append
	// isync schedules Sync under store.SyncInterval (nil otherwise): Append and
	// SetHardState mark the log dirty.
	isync *store.IntervalSync
}

func (l *Log) path(name string) string { return filepath.Join(l.cfg.Dir, name) }

// Open opens (creating if needed) the log in cfg.Dir and recovers it: it takes
// the newest intact hard state, finishes a snapshot install a crash cut short,
// cuts a torn tail off the entries and reads them all once, checking their
// CRCs and that they run without a hole from the first index to the last. Any
// damage fails Open with an error matching ErrCorrupt.
func Open(cfg Config) (*Log, Report, error) {
	start := time.Now()
	var rep Report
	if cfg.Dir == "" {
		return nil, rep, errors.New("raftlog: Config.Dir is empty")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Dir
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = store.DefaultSyncInterval
	}
	l := &Log{cfg: cfg}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, rep, l.ioErr("create directory", cfg.Dir, err)
	}
	os.Remove(l.path(snapTmpFile)) // a CreateSnapshot that did not finish
	if err := l.loadHardState(); err != nil {
		return nil, rep, err
	}
	if err := l.loadSnapshot(); err != nil {
		return nil, rep, err
	}
	install, err := l.loadInstall()
	if err != nil {
		return nil, rep, err
	}
	if _, err := os.Stat(l.path(markerFile)); err == nil {
		l.marker = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, rep, l.ioErr("stat", l.path(markerFile), err)
	}
	_, err = os.Stat(l.path(logDir))
	fresh := errors.Is(err, os.ErrNotExist)
	st, srep, err := store.Open(store.Config{
		Dir: l.path(logDir), Name: cfg.Name, SegmentBytes: cfg.SegmentBytes,
		Sync: cfg.Sync, SyncInterval: cfg.SyncInterval, OwnerSyncs: true,
	})
	if err != nil {
		return nil, rep, fmt.Errorf("raftlog %q: %w", cfg.Name, err)
	}
	if len(srep.Corrupt) > 0 {
		st.Close()
		errs := make([]error, len(srep.Corrupt))
		for i := range srep.Corrupt {
			errs[i] = &srep.Corrupt[i]
		}
		return nil, rep, l.damaged("entries", errors.Join(errs...))
	}
	l.st = st
	if fresh {
		// The store's directory entry must last as long as what goes in it.
		if err := l.syncDir(); err != nil {
			st.Close()
			return nil, rep, err
		}
	}
	rep.TruncatedBytes = srep.TruncatedBytes
	if install != nil {
		if err := l.install(install); err != nil {
			st.Close()
			return nil, rep, err
		}
		rep.FinishedInstall = true
	}
	if err := l.recoverEntries(); err != nil {
		st.Close()
		return nil, rep, err
	}
	if err := l.checkState(); err != nil {
		st.Close()
		return nil, rep, err
	}
	l.meta = make([]byte, 0, metaSize)
	if cfg.Sync == store.SyncInterval {
		l.isync = store.NewIntervalSync(cfg.SyncInterval, func() error {
			if err := l.Sync(); err != nil && !errors.Is(err, ErrClosed) {
				return err
			}
			return nil
		})
	}
	rep.Entries = l.last - l.dummy
	rep.Duration = time.Since(start)
	return l, rep, nil
}

// checkState checks that the hard state and the snapshot fit the entries
// recovered, as raft needs them to.
func (l *Log) checkState() error {
	if i := l.snap.GetIndex(); i > l.last {
		return l.damage(snapFile, "snapshot at index %d, but the entries end at %d", i, l.last)
	}
	if l.hs != nil {
		if c := l.hs.GetCommit(); c > l.last {
			return l.damage(hsFile, "commit index %d, but the entries end at %d", c, l.last)
		}
		if l.hs.GetCommit() < l.dummy {
			// Everything up to the dummy is committed: a crash between
			// ApplySnapshot and the SetHardState of the same Ready leaves the
			// old commit behind, which raft would refuse.
			l.hs.Commit = new(l.dummy)
		}
	}
	return nil
}

// recoverEntries reads every entry once: their terms, and that they run from
// the dummy to the last without a hole.
func (l *Log) recoverEntries() error {
	st := l.st.State()
	switch {
	case st.Msgs == 0 && st.LastSeq == 0:
		l.dummy = 0
	case st.Msgs == 0:
		return l.damage(logDir, "no entries, but the log ends at %d", st.LastSeq)
	case st.Deleted != 0:
		return l.damage(logDir, "%d entries missing between %d and %d", st.Deleted, st.FirstSeq, st.LastSeq)
	case l.marker:
		l.dummy = st.FirstSeq
	case st.FirstSeq != 1:
		return l.damage(logDir, "the entries start at %d, not 1", st.FirstSeq)
	default:
		l.dummy = 0
	}
	l.last = st.LastSeq
	l.terms = termRuns{{index: l.dummy}}
	l.cacheFrom = l.last + 1
	if st.Msgs == 0 {
		return nil
	}
	r := l.st.NewReader(st.FirstSeq)
	defer r.Close()
	for want := st.FirstSeq; want <= st.LastSeq; want++ {
		rec, err := r.Next()
		if err != nil {
			return l.readErr(want, err)
		}
		if rec.Seq != want {
			return l.damage(logDir, "entry %d missing", want)
		}
		m, err := decodeMeta(rec.Header, len(rec.Payload))
		if err != nil || len(rec.Subject) != 0 {
			return l.damage(logDir, "entry %d: %v", want, errMeta)
		}
		if want == l.dummy {
			l.terms[0].term = m.term
		} else {
			l.terms.add(want, m.term)
		}
	}
	return nil
}

// readErr sorts an error reading entry i from the store into damage or I/O.
func (l *Log) readErr(i uint64, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return l.damaged(fmt.Sprintf("entry %d", i), err)
	}
	if errors.Is(err, store.ErrNotFound) || err == io.EOF {
		return l.damage(logDir, "entry %d missing", i)
	}
	return fmt.Errorf("raftlog %q: reading entry %d: %w", l.cfg.Name, i, err)
}

func (l *Log) ioErr(op, path string, err error) error {
	return fmt.Errorf("raftlog %q: %s %s: %w", l.cfg.Name, op, path, err)
}

// Sync makes everything written so far durable: one fsync of each entry file
// written since the last Sync, then the hard state (fsync, rename, fsync of
// the directory) when it changed. Entries go first, so a hard state on disk
// never commits entries that are not.
//
// The fsyncs run without the log's lock: under SyncInterval a timer calls Sync
// while the Raft loop goes on appending and setting hard states, and an fsync
// (often milliseconds) must not stall it. The newest hard state is renamed out
// of SetHardState's way (hardstate.tmp to hardstate.sync) under the lock, so
// the next one starts a new hardstate.tmp; it was written after every entry it
// commits, so the entries synced next include them all.
func (l *Log) Sync() error {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	hs := l.hsTmp
	if hs != nil {
		if err := os.Rename(l.path(hsTmpFile), l.path(hsSyncFile)); err != nil {
			l.mu.Unlock()
			return l.ioErr("rename", l.path(hsTmpFile), err)
		}
		l.hsTmp = nil
		defer hs.Close()
	}
	st := l.st
	l.mu.Unlock()
	if l.syncing != nil {
		l.syncing()
	}
	if err := st.Sync(); err != nil {
		return fmt.Errorf("raftlog %q: %w", l.cfg.Name, err)
	}
	if hs == nil {
		return nil
	}
	if err := hs.Sync(); err != nil {
		return l.ioErr("fsync", l.path(hsSyncFile), err)
	}
	if err := os.Rename(l.path(hsSyncFile), l.path(hsFile)); err != nil {
		return l.ioErr("rename", l.path(hsSyncFile), err)
	}
	return l.syncDir()
}

// syncLocked is Sync holding the lock throughout, for Close.
func (l *Log) syncLocked() error {
	if err := l.st.Sync(); err != nil {
		return fmt.Errorf("raftlog %q: %w", l.cfg.Name, err)
	}
	if _, err := os.Stat(l.path(hsSyncFile)); err == nil {
		// Left by a Sync that failed after taking it: newer than hardstate.
		if err := l.adopt(l.path(hsSyncFile), l.path(hsFile)); err != nil {
			return err
		}
	}
	if l.hsTmp == nil {
		return nil
	}
	f := l.hsTmp
	if err := f.Sync(); err != nil {
		return l.ioErr("fsync", f.Name(), err)
	}
	if err := os.Rename(f.Name(), l.path(hsFile)); err != nil {
		return l.ioErr("rename", f.Name(), err)
	}
	l.hsTmp = nil
	f.Close()
	return l.syncDir()
}

func (l *Log) syncDir() error {
	if err := fileutil.SyncDir(l.cfg.Dir); err != nil {
		return l.ioErr("fsync directory", l.cfg.Dir, err)
	}
	return nil
}

// Close syncs and closes the log.
func (l *Log) Close() error {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	defer l.mu.Unlock()
	err := l.syncLocked()
	l.closed = true
	if l.hsTmp != nil {
		l.hsTmp.Close()
	}
	return errors.Join(err, l.st.Close())
}
