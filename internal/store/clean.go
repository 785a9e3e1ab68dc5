package store

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
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
//
// Segments that cleaning left small are merged, as Kafka's cleaner groups
// them: the rewrite of a segment takes the sealed segments after it along
// while their bytes, less what is dead in them, fit in one segment (and two
// or more small ones are merged even when none is dirty), so a compacted log
// keeps about as many files as its live records fill. The merged file, under
// the first segment's name, holds all their sequences, the gaps between them
// (sequences of segments removed whole) as holes. Once it is renamed in, its
// .del file is rewritten with every tombstone of the sequences it holds, and
// only then are the other segments' files removed: a crash in between leaves
// them beside a segment that holds their sequences too, and Open, finding the
// first one's records going on past their start, removes them.

// CleanStats says what Clean did.
type CleanStats struct {
	Segments int   // segments rewritten (a merge counts those it merged)
	Before   int64 // their bytes before
	After    int64 // and after
}

// Clean rewrites, from the oldest, up to limit sealed segments (0: all) in
// which at least minDirty (0 to 1) of the sequences died since the segment was
// last cleaned (or, after a restart, are dead and not holes), and which hold
// no damage, each with the small segments after it merged in (cleanGroup); a
// merge of small segments none of which is dirty counts as one too. Writer
// only; a rewrite takes one sequential read and write of its segments' bytes
// (even when it is dropped for not being smaller, which counts against limit
// too), so an owner that must stay responsive cleans a few at a time.
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
		group := l.cleanGroup(i, minDirty)
		if group == nil {
			continue
		}
		tried++
		j := l.startClean(group, false)
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
		group := l.cleanGroup(i, minDirty)
		if group == nil {
			continue
		}
		j := l.startClean(group, true)
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

// cleanGroup returns the segments a rewrite starting at l.segs[i] takes: that
// one and the sealed ones after it while their bytes, less what died since
// they were last cleaned, fit in a segment. It returns nil when the rewrite is
// not worth it: the first segment is not dirty enough (minDirty) and no other
// is small enough to merge with it.
func (l *Log) cleanGroup(i int, minDirty float64) []*segment {
	s := l.segs[i]
	dead, ok := l.rewritable(s)
	if !ok {
		return nil
	}
	span := s.count()
	dirty := dead > s.holed && float64(dead-s.holed) >= minDirty*float64(span)
	est := cleanedSize(s, dead)
	end := i + 1
	for ; end < len(l.segs)-1; end++ {
		n := l.segs[end]
		nd, ok := l.rewritable(n)
		// A merged segment's sequences are counted from its base in 32 bits.
		if !ok || n.last-s.base >= math.MaxUint32 || est+cleanedSize(n, nd) > l.cfg.SegmentBytes {
			break
		}
		est += cleanedSize(n, nd)
	}
	if !dirty && end-i < 2 {
		return nil
	}
	return slices.Clone(l.segs[i:end]) // a merge deletes from l.segs
}

// rewritable reports whether s may be rewritten — sealed, undamaged, and not
// dead whole (retention removes those) — and how many of its sequences are
// dead.
func (l *Log) rewritable(s *segment) (dead uint64, ok bool) {
	if !s.sealed || s.removed || s.last < s.base {
		return 0, false
	}
	for _, c := range l.corrupt {
		if c.seg == s {
			return 0, false
		}
	}
	dead = s.dead
	if l.first > s.base {
		dead = max(dead, min(l.first, s.last+1)-s.base) // the front's dead are not tombstoned
	}
	return dead, dead < s.count()
}

// cleanedSize estimates s's bytes once rewritten: those of the sequences that
// died since it was last cleaned go.
func cleanedSize(s *segment, dead uint64) int64 {
	fresh := dead - min(dead, s.holed)
	return int64(float64(s.size) * float64(s.count()-fresh) / float64(s.count()))
}

// isDead reports whether seq of s is deleted.
func (l *Log) isDead(s *segment, seq uint64) bool {
	return seq < l.first || s.dels.has(uint32(seq-s.base))
}

// cleanJob is the rewrite of a segment, or the merge of consecutive ones:
// started by the writer (startClean), written by whoever runs it (run: the
// writer for Clean, a goroutine of its own for CleanAside), and installed or
// dropped by the writer (finishClean). While it runs it reads only the
// segments' files as they were when it started, and which sequences are dead,
// under the log's lock.
type cleanJob struct {
	gen  uint64 // Log.gen at the start: a cut or a rewrite since voids the job
	size int64  // the segments' bytes at the start
	tmp  string
	out  *os.File
	c    cleaner
	err  error
	done chan struct{} // closed when an aside job's run returns
}

// startClean begins the rewrite of group (cleanGroup): what it is to rewrite,
// from what the writer knows of its segments now. Writer only.
func (l *Log) startClean(group []*segment, aside bool) *cleanJob {
	s := group[0]
	j := &cleanJob{gen: l.gen, tmp: s.logPath + ".clean.tmp", done: make(chan struct{})}
	j.c = cleaner{l: l, base: s.base, aside: aside, pack: l.cfg.Compression != CompressNone}
	for _, g := range group {
		j.size += g.size
		j.c.srcs = append(j.c.srcs, cleanSrc{s: g, f: g.f, size: g.size, last: g.last, tmax: g.tmax})
	}
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
	if !j.keeps() {
		return nil // finishClean drops it
	}
	return j.c.l.fsync(j.out)
}

// keeps reports whether the rewrite, written, is worth installing: a merge
// always is (fewer files, about the bytes of those it replaces), a segment's
// own rewrite when it is smaller (a compressed segment repacked may not be).
func (j *cleanJob) keeps() bool { return len(j.c.srcs) > 1 || j.c.off < j.size }

// drop forgets the rewrite and its file.
func (j *cleanJob) drop() {
	if j.out != nil {
		j.out.Close()
		os.Remove(j.tmp)
	}
}

// finishClean renames the rewrite over the first segment and swaps it in for
// the segments it holds, unless one of them was removed, cut or rewritten
// meanwhile, the rewrite failed, or it is not worth it (keeps). Writer only.
func (l *Log) finishClean(j *cleanJob) (CleanStats, error) {
	s := j.c.srcs[0].s
	for _, src := range j.c.srcs {
		if src.s.removed || src.s.size != src.size {
			j.drop() // its records are not the segment's any more
			return CleanStats{}, nil
		}
	}
	if l.gen != j.gen {
		j.drop()
		return CleanStats{}, nil
	}
	if j.err != nil {
		j.drop()
		return CleanStats{}, fmt.Errorf("store %q: clean %s: %w", l.cfg.Name, s.logPath, j.err)
	}
	if !j.keeps() {
		s.holed = j.c.dead // clean as it can be until more of it dies
		j.drop()
		return CleanStats{}, nil
	}
	if err := os.Rename(j.tmp, s.logPath); err != nil {
		j.drop()
		return CleanStats{}, fmt.Errorf("store %q: clean %s: %w", l.cfg.Name, s.logPath, err)
	}
	var merged []*segment
	for _, src := range j.c.srcs[1:] {
		merged = append(merged, src.s)
	}
	if len(merged) == 0 {
		if err := l.syncDir(); err != nil {
			// The rename may not be durable yet; either file holds the same
			// records, so go on with the new one.
			l.markDirty(nil, true)
		}
	}
	// A merge's rename is made durable with its .del file's (dropMerged).

	l.mu.Lock()
	olds := []*os.File{s.f}
	s.f, s.size, s.index, s.ib = j.out, j.c.off, j.c.index, j.c.ib
	s.holed = j.c.dead
	for _, g := range merged {
		// The sequences between the segments, of segments removed whole,
		// are the merged one's holes.
		for q := s.last + 1; q < g.base; q++ {
			s.dels.add(uint32(q - s.base))
			s.dead++
		}
		for _, r := range g.dels.sorted() {
			s.dels.add(uint32(g.base + uint64(r) - s.base))
		}
		s.last, s.dead, s.liveBytes = g.last, s.dead+g.dead, s.liveBytes+g.liveBytes
		s.tmax = max(s.tmax, g.tmax)
		olds = append(olds, g.f)
		g.removed = true
	}
	if len(merged) > 0 {
		l.segs = slices.Delete(l.segs, l.segIndex(merged[0].base), l.segIndex(merged[len(merged)-1].base)+1)
	}
	l.gen++
	l.mu.Unlock()
	// The old files' last links go with the rename and the removals below:
	// closing them afterwards frees their pages, which takes milliseconds for
	// a large segment, and is not the writer's to wait for.
	defer func() {
		go func() {
			for _, f := range olds {
				f.Close()
			}
		}()
	}()
	for _, src := range j.c.srcs {
		if l.head.seg == src.s {
			l.head = cursor{}
		}
		if l.rc.seg == src.s {
			l.rc = cursor{}
		}
	}
	l.writeIndex(s)
	if len(merged) > 0 {
		if err := l.dropMerged(s, merged); err != nil {
			return CleanStats{}, err
		}
	}
	return CleanStats{Segments: len(j.c.srcs), Before: j.size, After: s.size}, nil
}

// dropMerged removes the files of the segments merged into s, once s's .del
// file names every tombstone of theirs and s's new file is in place, durably
// (one fsync of the directory for both renames): until then Open finds their
// tombstones in their own .del files, and their records in their own files or
// s's. Either rename may reach the disk without the other: s's old file
// beside its new .del holds its own records under tombstones that are theirs
// or the merged segments', which keep their own files.
func (l *Log) dropMerged(s *segment, merged []*segment) error {
	err := l.compactDel(s)
	if err == nil {
		err = l.syncDir()
	}
	for _, g := range merged {
		l.forgetDel(g)
		if g.delf != nil {
			g.delf.Close()
			g.delf = nil
		}
		if err == nil {
			g.removeFiles()
		}
	}
	if err != nil {
		// The files stay beside the merged segment, which Open sorts out.
		return fmt.Errorf("store %q: clean %s: removing the segments merged into it: %w", l.cfg.Name, s.logPath, err)
	}
	l.markDirty(nil, true)
	return nil
}

// cleaner copies the live units of consecutive segments to a new file. In a
// log that compresses (pack), the live records it takes out of blocks and the
// plain ones, with the holes between them, are packed into blocks again
// (flagHoles), so they stay compressed; otherwise they are written plain
// between holes.
type cleaner struct {
	l    *Log
	srcs []cleanSrc
	base uint64   // the new file's first sequence, the first segment's base
	s    *segment // the segment being read
	// aside: running beside the writer, dead sequences are read under l.mu
	aside bool
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

// cleanSrc is a segment a cleaner reads, and its file, bytes and last
// sequence when the job started.
type cleanSrc struct {
	s    *segment
	f    *os.File
	size int64
	last uint64
	tmax int64
}

func (c *cleaner) run() error {
	var (
		w   window
		exp expander
	)
	defer exp.release()
	for k, src := range c.srcs {
		c.s = src.s
		if k > 0 {
			// Sequences of segments removed whole between the two.
			prev := c.srcs[k-1]
			if gap := src.s.base - prev.last - 1; gap > 0 {
				c.addHole(prev.last+1, gap, prev.tmax)
				c.dead += gap
			}
		}
		w.reset()
		if err := c.copySegment(src, &w, &exp); err != nil {
			return err
		}
	}
	return c.flush()
}

// copySegment copies the live units of one segment.
func (c *cleaner) copySegment(src cleanSrc, w *window, exp *expander) error {
	l := c.l
	off, seq := int64(0), src.s.base
	for off < src.size {
		if c.aside && l.shut.Load() {
			return ErrClosed
		}
		raw, err := w.record(src.f, off, src.size, readerChunk)
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
			if err := exp.load(src.f, off, raw, l.cfg.SegmentBytes); err != nil {
				return err
			}
			if !c.pack && !c.worthOpening(exp, seq, count, len(raw)) {
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
	if seq != src.last+1 {
		return errMissing
	}
	return nil
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
		mark := len(c.pending)
		c.pending = c.takeHole(c.pending)
		c.pending = appendBareRecord(c.pending, rec.Seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
		if len(c.pending) > maxBlockRaw && mark > 0 {
			// A block holds at most maxBlockRaw bytes but for one larger
			// record, as Append packs them (and a merge's records may come
			// to more than a segment's bytes, which reads also bound).
			if err := c.writeRun(c.pending[:mark]); err != nil {
				return err
			}
			c.pending = c.pending[:copy(c.pending, c.pending[mark:])]
		}
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
	return c.writeRun(run)
}

// writeRun writes run, bare records and holes, as one block, or its units one
// by one when it holds no record or does not shrink.
func (c *cleaner) writeRun(run []byte) error {
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
	c.index = c.ib.add(c.index, c.l.cfg.IndexEvery, uint32(seq-c.base), c.off, ts)
	if _, err := c.bw.Write(unit); err != nil {
		return err
	}
	c.off += int64(len(unit))
	return nil
}
