package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
)

// Cleaning: deleting a record (Delete, Compact) only tombstones it, and its
// bytes stay in its segment until every record there is dead. A compacted log
// whose old segments each keep a few latest records would so grow without
// bound. Clean rewrites a sealed segment that is mostly dead: its live records
// are copied, and each run of dead sequences becomes a hole (a 44-byte block
// header, block.go), so the segment keeps its contiguous sequences and
// everything that walks it, the index and recovery stay as they are. A block
// mostly dead is opened and its live records copied out: packed into blocks
// again, holes among them, in a log that compresses; plain, when that takes
// less room than the block, in one that does not.
//
// The new file is written beside the old one (a .tmp, which Open removes),
// fsynced whatever the sync policy — a crash must never lose records written
// long ago — and renamed over it. Readers then see the new file: Clean moves
// Log.gen, as a cut does, so a Reader finds its place again by sequence, and a
// Read that was reading the old file reads again.

// CleanStats says what Clean did.
type CleanStats struct {
	Segments int   // segments rewritten
	Before   int64 // their bytes before
	After    int64 // and after
}

// Clean rewrites, from the oldest, up to limit sealed segments (0: all) in
// which at least minDirty (0 to 1) of the sequences died since the segment was
// last cleaned (or, after a restart, are dead and not holes), and which hold
// no damage. Writer only; a segment takes one sequential read and write of its
// bytes (even when the rewrite is dropped for not being smaller, which counts
// against limit too), so an owner that must stay responsive cleans a few at a
// time.
func (l *Log) Clean(minDirty float64, limit int) (CleanStats, error) {
	var st CleanStats
	if l.shut.Load() {
		return st, ErrClosed
	}
	if l.broken != nil {
		return st, l.broken
	}
	if j := l.job; j != nil { // one rewrite at a time: CleanAside's first
		<-j.done
		l.job = nil
		if _, err := l.finishClean(j); err != nil {
			return st, err
		}
	}
	tried := 0
	for i := 0; i < len(l.segs)-1 && (limit <= 0 || tried < limit); i++ {
		s := l.segs[i]
		if !l.cleanable(s, minDirty) {
			continue
		}
		tried++
		j := l.startClean(s, false)
		j.err = j.run()
		done, err := l.finishClean(j)
		if err != nil {
			return st, err
		}
		st.add(done)
	}
	return st, nil
}

func (st *CleanStats) add(o CleanStats) {
	st.Segments += o.Segments
	st.Before += o.Before
	st.After += o.After
}

// CleanAside does what Clean(minDirty, 1) does, but reads and writes the
// segment on a goroutine of its own, so that the writer is held only while a
// finished rewrite is swapped in: each call installs the rewrite the last
// one started, when it is done, and starts the next. done, if not nil, is
// called on that goroutine once the rewrite is written (or failed), so that
// the writer can come back for it without waiting for its next round. Writer
// only; the stats are of the rewrite installed. A rewrite under way when the
// segment is cut (TruncateAfter) or removed is dropped; Close waits for it and
// drops it.
func (l *Log) CleanAside(minDirty float64, done func()) (CleanStats, error) {
	st, err := l.FinishCleaning()
	if err != nil || l.job != nil || l.shut.Load() || l.broken != nil {
		return st, err
	}
	for i := 0; i < len(l.segs)-1; i++ {
		s := l.segs[i]
		if !l.cleanable(s, minDirty) {
			continue
		}
		j := l.startClean(s, true)
		l.job = j
		go func() {
			j.err = j.run()
			close(j.done)
			if done != nil {
				done()
			}
		}()
		break
	}
	return st, nil
}

// FinishCleaning installs the rewrite CleanAside started if it is done,
// without starting another; it costs nothing when none is. Writer only.
func (l *Log) FinishCleaning() (CleanStats, error) {
	j := l.job
	if j == nil {
		return CleanStats{}, nil
	}
	select {
	case <-j.done:
	default:
		return CleanStats{}, nil
	}
	l.job = nil
	if l.shut.Load() || l.broken != nil {
		j.drop()
		return CleanStats{}, nil
	}
	return l.finishClean(j)
}

// Cleaning reports whether a rewrite CleanAside started is under way or
// waiting to be installed.
func (l *Log) Cleaning() bool { return l.job != nil }

// stopCleaning waits for a rewrite under way, which sees the log shut and
// stops early, and drops it (Close).
func (l *Log) stopCleaning() {
	if j := l.job; j != nil {
		<-j.done
		l.job = nil
		j.drop()
	}
}

// cleanable reports whether s is sealed, undamaged, and dirty enough.
func (l *Log) cleanable(s *segment, minDirty float64) bool {
	if !s.sealed || s.removed || s.last < s.base {
		return false
	}
	for _, c := range l.corrupt {
		if c.seg == s {
			return false
		}
	}
	span := s.last - s.base + 1
	dead := s.dead
	if l.first > s.base {
		dead = max(dead, min(l.first, s.last+1)-s.base) // the front's dead are not tombstoned
	}
	if dead >= span {
		return false // removed whole by retention, not rewritten
	}
	return dead > s.holed && float64(dead-s.holed) >= minDirty*float64(span)
}

// isDead reports whether seq of s is deleted.
func (l *Log) isDead(s *segment, seq uint64) bool {
	return seq < l.first || s.dels.has(uint32(seq-s.base))
}

// cleanJob is the rewrite of one segment: started by the writer
// (startClean), written by whoever runs it (run: the writer for Clean, a
// goroutine of its own for CleanAside), and installed or dropped by the
// writer (finishClean). While it runs it reads only the segment's file as it
// was when it started, and which sequences are dead, under the log's lock.
type cleanJob struct {
	s    *segment
	gen  uint64 // Log.gen at the start: a cut or a rewrite since voids the job
	size int64  // the segment's bytes at the start
	tmp  string
	out  *os.File
	c    cleaner
	err  error
	done chan struct{} // closed when an aside job's run returns
}

// startClean begins the rewrite of s: what it is to rewrite, from what the
// writer knows of s now. Writer only.
func (l *Log) startClean(s *segment, aside bool) *cleanJob {
	j := &cleanJob{s: s, gen: l.gen, size: s.size, tmp: s.logPath + ".clean.tmp", done: make(chan struct{})}
	j.c = cleaner{l: l, s: s, f: s.f, size: s.size, last: s.last, aside: aside, pack: l.cfg.Compression != CompressNone}
	return j
}

// run writes the rewrite beside the segment, and fsyncs it, whatever the sync
// policy, when it is smaller: a crash must never lose records written long
// ago.
func (j *cleanJob) run() error {
	out, err := os.OpenFile(j.tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	j.out = out
	j.c.bw, j.c.ib = bufio.NewWriterSize(out, 1<<20), newIndexBuilder()
	if err := j.c.run(); err != nil {
		return err
	}
	if err := j.c.bw.Flush(); err != nil {
		return err
	}
	if j.c.off >= j.size {
		return nil // not smaller: finishClean drops it
	}
	return j.c.l.fsync(j.out)
}

// drop forgets the rewrite and its file.
func (j *cleanJob) drop() {
	if j.out != nil {
		j.out.Close()
		os.Remove(j.tmp)
	}
}

// finishClean renames the rewrite over the segment and swaps it in, unless the
// segment was removed, cut or rewritten meanwhile, the rewrite failed, or it is
// not smaller (a compressed segment repacked). Writer only.
func (l *Log) finishClean(j *cleanJob) (CleanStats, error) {
	s := j.s
	if s.removed || l.gen != j.gen || s.size != j.size {
		j.drop() // its records are not the segment's any more
		return CleanStats{}, nil
	}
	if j.err != nil {
		j.drop()
		return CleanStats{}, fmt.Errorf("store %q: clean %s: %w", l.cfg.Name, s.logPath, j.err)
	}
	if j.c.off >= s.size {
		s.holed = j.c.dead // clean as it can be until more of it dies
		j.drop()
		return CleanStats{}, nil
	}
	if err := os.Rename(j.tmp, s.logPath); err != nil {
		j.drop()
		return CleanStats{}, fmt.Errorf("store %q: clean %s: %w", l.cfg.Name, s.logPath, err)
	}
	if err := l.syncDir(); err != nil {
		// The rename may not be durable yet; either file holds the same
		// records, so go on with the new one.
		l.markDirty(nil, true)
	}

	l.mu.Lock()
	old := s.f
	s.f, s.size, s.index, s.ib = j.out, j.c.off, j.c.index, j.c.ib
	s.holed = j.c.dead
	l.gen++
	l.mu.Unlock()
	// The old file's last link went with the rename: closing it frees its
	// pages, which takes milliseconds for a large segment, and is not the
	// writer's to wait for.
	go old.Close()
	if l.head.seg == s {
		l.head = cursor{}
	}
	if l.rc.seg == s {
		l.rc = cursor{}
	}
	l.writeIndex(s)
	return CleanStats{Segments: 1, Before: j.size, After: s.size}, nil
}

// cleaner copies a segment's live units to a new file. In a log that
// compresses (pack), the live records it takes out of blocks and the plain
// ones, with the holes between them, are packed into blocks again (flagHoles),
// so they stay compressed; otherwise they are written plain between holes.
type cleaner struct {
	l *Log
	s *segment
	// f, size and last are the segment's when the job started.
	f     *os.File
	size  int64
	last  uint64
	aside bool // running beside the writer: dead sequences are read under l.mu
	bw    *bufio.Writer
	off   int64 // bytes written
	index []indexEntry
	ib    indexBuilder
	dead  uint64 // dead sequences seen, in holes or in blocks kept whole
	pack  bool

	// the run of dead sequences not written yet
	holeFirst, holeCount uint64
	holeTime             int64

	pending []byte // pack: bare records and holes not written yet
	buf     []byte
	packed  []byte
}

func (c *cleaner) run() error {
	l, s := c.l, c.s
	var (
		w   window
		exp expander
	)
	defer exp.release()
	off, seq := int64(0), s.base
	for off < c.size {
		if c.aside && l.shut.Load() {
			return ErrClosed
		}
		raw, err := w.record(c.f, off, c.size, readerChunk)
		if err != nil {
			return err
		}
		first, count, err := checkUnit(raw)
		if err == nil && first != seq {
			err = errSeq
		}
		if err != nil {
			return err
		}
		flags := recFlags(raw)
		dead := c.deadIn(seq, count)
		c.dead += dead
		switch {
		case dead == count:
			c.addHole(seq, count, recTime(raw))
		case flags&flagHole != 0:
			return errHoleLive
		case flags == 0 && c.pack:
			rec, err := parseRecord(raw) // its CRC checked by checkUnit
			if err != nil {
				return err
			}
			if err := c.addRecord(rec); err != nil {
				return err
			}
		case flags&flagBlock == 0 || 2*dead < count:
			// Kept whole: a live record, or a block mostly alive.
			if err := c.keep(raw, seq); err != nil {
				return err
			}
		default:
			if err := exp.load(c.f, off, raw, l.cfg.SegmentBytes); err != nil {
				return err
			}
			if !c.pack && !c.worthOpening(&exp, seq, count, len(raw)) {
				exp.reset()
				if err := c.keep(raw, seq); err != nil {
					return err
				}
				break
			}
			for q := seq; q < seq+count; q++ {
				rec, n := exp.at(q)
				if n == 0 || c.isDead(q) {
					c.addHole(q, 1, rec.Time)
					continue
				}
				if err := c.addRecord(rec); err != nil {
					return err
				}
			}
			exp.reset()
		}
		off += int64(len(raw))
		seq += count
	}
	if seq != c.last+1 {
		return errMissing
	}
	return c.flush()
}

// isDead reports whether seq of the segment is deleted.
func (c *cleaner) isDead(seq uint64) bool {
	if c.aside {
		c.l.mu.RLock()
		defer c.l.mu.RUnlock()
	}
	return c.l.isDead(c.s, seq)
}

// deadIn counts the deleted sequences of [first, first+count).
func (c *cleaner) deadIn(first, count uint64) uint64 {
	if c.aside {
		c.l.mu.RLock()
		defer c.l.mu.RUnlock()
	}
	dead := uint64(0)
	for q := first; q < first+count; q++ {
		if c.l.isDead(c.s, q) {
			dead++
		}
	}
	return dead
}

// worthOpening reports whether writing the live records of the loaded block
// plain, with holes between them, takes at most three quarters of the block's
// bytes: a block compresses its records, and they lose that apart.
func (c *cleaner) worthOpening(exp *expander, first, count uint64, size int) bool {
	n, wasDead := 0, false
	for q := first; q < first+count; q++ {
		if c.isDead(q) {
			if !wasDead {
				n += blockHdrSize
			}
			wasDead = true
			continue
		}
		_, m := exp.at(q)
		n += m
		wasDead = false
	}
	return 4*n <= 3*size
}

func (c *cleaner) addHole(first, count uint64, ts int64) {
	if c.holeCount == 0 {
		c.holeFirst, c.holeTime = first, ts
	}
	c.holeCount += count
	c.holeTime = max(c.holeTime, ts)
}

// takeHole appends the pending hole to dst (as several when it is longer than
// a hole's 32-bit count) and forgets it.
func (c *cleaner) takeHole(dst []byte) []byte {
	for c.holeCount > 0 {
		n := min(c.holeCount, 1<<32-1)
		dst = appendHole(dst, c.holeFirst, n, c.holeTime)
		c.holeFirst += n
		c.holeCount -= n
	}
	return dst
}

// addRecord adds a live record after the pending hole.
func (c *cleaner) addRecord(rec Record) error {
	if c.pack {
		c.pending = c.takeHole(c.pending)
		c.pending = appendBareRecord(c.pending, rec.Seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
		if len(c.pending) >= maxBlockRaw {
			return c.flushRun()
		}
		return nil
	}
	if err := c.flush(); err != nil {
		return err
	}
	c.buf = appendRecord(c.buf[:0], rec.Seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
	return c.write(c.buf, rec.Seq, rec.Time)
}

// keep writes raw, a unit copied whole, after what is pending.
func (c *cleaner) keep(raw []byte, seq uint64) error {
	if err := c.flush(); err != nil {
		return err
	}
	return c.write(raw, seq, recTime(raw))
}

// flush writes what is pending: the run, then the hole.
func (c *cleaner) flush() error {
	if c.pack {
		c.pending = c.takeHole(c.pending)
		return c.flushRun()
	}
	c.buf = c.takeHole(c.buf[:0])
	return c.writeUnits(c.buf)
}

// flushRun writes the run as one block, or its units one by one when it
// holds no record or does not shrink.
func (c *cleaner) flushRun() error {
	run := c.pending
	c.pending = c.pending[:0]
	records := false
	for u := run; len(u) > 0; u = u[recLen(u):] {
		records = records || recFlags(u) == 0
	}
	if records {
		var ok bool
		if c.packed, ok = appendRun(c.packed[:0], run, true); ok {
			return c.write(c.packed, recSeq(c.packed), recTime(c.packed))
		}
		sealRecords(run)
	}
	return c.writeUnits(run)
}

// writeUnits writes whole records and holes one by one.
func (c *cleaner) writeUnits(b []byte) error {
	for len(b) > 0 {
		n := recLen(b)
		if err := c.write(b[:n], recSeq(b), recTime(b)); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// write appends one unit (record, block or hole) whose first sequence is seq.
func (c *cleaner) write(unit []byte, seq uint64, ts int64) error {
	if c.off+int64(len(unit)) > 1<<32-1 {
		return errors.New("cleaned segment larger than 4 GiB")
	}
	c.index = c.ib.add(c.index, c.l.cfg.IndexEvery, uint32(seq-c.s.base), c.off, ts)
	if _, err := c.bw.Write(unit); err != nil {
		return err
	}
	c.off += int64(len(unit))
	return nil
}
