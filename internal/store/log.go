package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/s2pace"
)

const minTime = math.MinInt64

// Record is one message as stored.
type Record struct {
	Seq     uint64
	Time    int64 // unix nanoseconds, set by the appender
	Subject []byte
	Header  []byte // opaque encoded header block, may be nil
	Payload []byte
}

// State is a snapshot of the log's counters.
type State struct {
	Msgs, Bytes         uint64 // live messages and their record bytes
	FirstSeq, LastSeq   uint64 // FirstSeq = LastSeq+1 when empty; LastSeq survives purges
	FirstTime, LastTime int64  // Time of the first live and of the last record
	Deleted             uint64 // interior deletions (tombstoned seqs between FirstSeq and LastSeq)
	Segments            int
	Keys                int // distinct live keys of a compacted log (Config.Keys)
}

// Report says what Open found and repaired.
type Report struct {
	TruncatedBytes int64 // torn tail removed from the last segment
	Corrupt        []Corruption
	Msgs           uint64
	Duration       time.Duration
}

type subjInfo struct {
	subj       string
	msgs, last uint64
}

// corruptRange is a run of sequences whose records recovery could not read.
// They count as live messages (Read returns a *Corruption for them) until they
// are deleted or fall off the front of the log.
type corruptRange struct {
	seg         *segment
	off, end    int64 // damaged bytes
	first, last uint64
	bytes       uint64 // counted in Log.bytes while any of the range is live
	err         error
}

// part is the slice of the write batch that goes to one segment.
type part struct {
	seg   *segment // nil until Commit creates the segment
	base  uint64   // base of seg
	start int      // offset in Log.batch
	off   int64    // file offset it is written at
	n     int      // records
	// packed is where its bytes went into Log.packed, as compressed blocks
	// and records (Config.Compression); to == 0 when written as appended.
	packedFrom, packedTo int
}

// Log is one partition's message log. See the package comment for who may call what.
type Log struct {
	cfg Config

	mu   sync.RWMutex
	segs []*segment // in order; the last is the active one
	// job is the segment rewrite CleanAside started and has not installed
	// (writer only).
	job       *cleanJob
	first     uint64
	last      uint64
	msgs      uint64
	bytes     uint64
	firstTime int64
	lastTime  int64
	subjects  map[string]*subjInfo
	corrupt   []*corruptRange
	closed    bool
	watches   []*RemovalWatch
	gen       uint64       // counts TruncateAfter and Reset: bytes a reader cached may be stale
	keys      *keyState    // Config.Keys: the writer's (and Open's) alone
	keyCount  atomic.Int64 // len(keys.latest) as the writer last left it, for State

	// Writer only.
	shut      atomic.Bool // Close started; checked without taking mu
	broken    error       // a failed write could not be undone; the log refuses writes
	batch     []byte
	bare      bool         // the batch holds records without their CRC (appendBareRecord)
	packed    []byte       // the batch with runs packed into compressed blocks
	runs      packRuns     // where the batch's runs to pack end, kept as it grows
	ready     []readyBlock // the batch's blocks made by AppendBlock, in order
	readyRuns []subjRun    // their messages' subjects, block after block; then the scanned one's
	readyUsed int          // the runs of the blocks in ready
	scanned   blockScan    // the block RoomFor or AppendBlock walked last
	gate      s2pace.Gate  // paces attempts at packing runs that do not shrink
	readBlock struct {     // the block Read last expanded
		mu  sync.Mutex
		gen uint64 // Log.gen when it was
		exp expander
	}
	parts     []part
	npend     int
	pendBytes uint64
	head      cursor               // at the front of the log, for removals
	rc        cursor               // random reads by the writer
	openDels  []*segment           // segments whose .del file is open
	delBuf    []byte               // .del entries being written
	subjBuf   []byte               // a subject copied out of a window
	dec       map[*subjInfo]uint64 // subject counts of a segment being dropped

	syncRun  sync.Mutex // one Sync at a time
	syncMu   sync.Mutex // guards dirty, spare and dirDirty
	dirty    []*os.File
	spare    []*os.File // the other half of dirty, so that Sync does not allocate
	dirDirty bool
	syncs    atomic.Int64  // fsyncs of data and tombstone files, for tests
	isync    *IntervalSync // under SyncInterval when the log syncs itself
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// segIndex returns the index of the segment holding seq, or of the first segment
// after it when seq falls in a hole left by a removed segment. Callers hold mu
// (or are the writer) and ensure seq <= l.last.
func (l *Log) segIndex(seq uint64) int {
	lo, hi := 0, len(l.segs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.segs[m].base <= seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := max(lo-1, 0)
	if seq > l.segs[i].last && i+1 < len(l.segs) {
		i++
	}
	return i
}

// segFor returns the segment holding seq, or nil.
func (l *Log) segFor(seq uint64) *segment {
	if len(l.segs) == 0 {
		return nil
	}
	s := l.segs[l.segIndex(seq)]
	if !s.contains(seq) {
		return nil
	}
	return s
}

func (l *Log) corruptAt(seq uint64) *corruptRange {
	for _, c := range l.corrupt {
		if seq >= c.first && seq <= c.last {
			return c
		}
	}
	return nil
}

func (l *Log) corruptErr(c *corruptRange) error {
	return &Corruption{Log: l.cfg.Name, Segment: c.seg.logPath, Offset: c.off, FirstSeq: c.first, LastSeq: c.last, Err: c.err}
}

// isLive reports whether seq is a live message. Callers hold mu or are the writer.
func (l *Log) isLive(seq uint64) bool {
	if seq < l.first || seq > l.last {
		return false
	}
	s := l.segFor(seq)
	return s != nil && !s.dels.has(uint32(seq-s.base))
}

// State returns the log's counters.
func (l *Log) State() State {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := State{
		Msgs: l.msgs, Bytes: l.bytes,
		FirstSeq: l.first, LastSeq: l.last,
		FirstTime: l.firstTime, LastTime: l.lastTime,
		Segments: len(l.segs),
		Keys:     int(l.keyCount.Load()),
	}
	if l.first <= l.last {
		st.Deleted = l.last - l.first + 1 - l.msgs
	} else {
		st.FirstTime = 0
	}
	return st
}

// FileBytes is what the log's segment files hold: State.Bytes compressed, or
// with deleted records still in them. It walks the segments, so it is kept out
// of State, which hot paths read.
func (l *Log) FileBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// ForEachSubject calls fn for every subject with live messages: its live count and
// its last live sequence. It stops when fn returns false. fn runs without locks
// held, on a snapshot, so it may call back into the log.
func (l *Log) ForEachSubject(fn func(subject string, msgs, last uint64) bool) {
	type ent struct {
		subj       string
		msgs, last uint64
	}
	l.mu.RLock()
	snap := make([]ent, 0, len(l.subjects))
	for s, si := range l.subjects {
		snap = append(snap, ent{s, si.msgs, si.last})
	}
	l.mu.RUnlock()
	for _, e := range snap {
		if !fn(e.subj, e.msgs, e.last) {
			return
		}
	}
}

// fsync forces f to stable storage, through the test hook if one is set.
func (l *Log) fsync(f *os.File) error {
	var err error
	if h := l.cfg.hooks; h != nil && h.fsync != nil {
		err = h.fsync(f)
	} else {
		err = f.Sync()
	}
	if err == nil {
		l.syncs.Add(1)
	}
	return err
}

func (l *Log) syncDir() error {
	d, err := os.Open(l.cfg.Dir)
	if err != nil {
		return l.ioErr("open directory", l.cfg.Dir, err)
	}
	defer d.Close()
	if err := l.fsync(d); err != nil {
		return l.ioErr("fsync directory", l.cfg.Dir, err)
	}
	return nil
}

// markDirty notes a file written without fsync, for the next Sync.
func (l *Log) markDirty(f *os.File, dir bool) {
	if l.cfg.Sync == SyncAlways && !dir {
		return
	}
	l.syncMu.Lock()
	if f != nil {
		found := false
		for _, d := range l.dirty {
			if d == f {
				found = true
				break
			}
		}
		if !found {
			l.dirty = append(l.dirty, f)
		}
	}
	l.dirDirty = l.dirDirty || dir
	l.syncMu.Unlock()
	if l.isync != nil {
		l.isync.Dirty()
	}
}

// Sync forces everything committed so far to stable storage. Safe to call from
// any goroutine; under SyncInterval the shared interval timer calls it
// (IntervalSync).
func (l *Log) Sync() error {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.syncMu.Lock()
	files := l.dirty
	l.dirty, l.spare = l.spare, nil
	dir := l.dirDirty
	l.dirDirty = false
	l.syncMu.Unlock()
	defer func() {
		clear(files)
		l.syncMu.Lock()
		l.spare = files[:0]
		l.syncMu.Unlock()
	}()
	var errs []error
	for i, f := range files {
		if err := l.fsync(f); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, l.ioErr("fsync", f.Name(), err))
			l.markDirty(f, false)
			for _, g := range files[i+1:] {
				l.markDirty(g, false)
			}
			break
		}
	}
	if dir {
		if err := l.syncDir(); err != nil {
			errs = append(errs, err)
			l.markDirty(nil, true)
		}
	}
	return errors.Join(errs...)
}

// Close syncs and closes the log. Readers get ErrClosed afterwards.
func (l *Log) Close() error {
	if l.shut.Swap(true) {
		return nil
	}
	l.stopCleaning() // before the files close: it reads the segment's
	l.batch, l.parts, l.npend, l.pendBytes = nil, nil, 0, 0
	var errs []error
	l.mu.Lock()
	l.closed = true
	segs := l.segs
	l.mu.Unlock()
	// Close syncs under every policy: a clean shutdown loses nothing.
	a := segs[len(segs)-1]
	l.markDirty(a.f, false)
	if err := l.Sync(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range segs {
		s.closeFiles()
	}
	return errors.Join(errs...)
}

// Remove closes the log and deletes its directory.
func (l *Log) Remove() error {
	cerr := l.Close()
	if err := os.RemoveAll(l.cfg.Dir); err != nil {
		return l.ioErr("remove", l.cfg.Dir, err)
	}
	if cerr != nil {
		return fmt.Errorf("store %q: close before remove: %w", l.cfg.Name, cerr)
	}
	return nil
}
