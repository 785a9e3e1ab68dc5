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
// mostly dead is opened, its live records copied out as plain records, when
// that takes less room than the block.
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
// no damage. Writer only; a segment takes one
// sequential read and write of its bytes, so an owner that must stay
// responsive cleans a few at a time.
func (l *Log) Clean(minDirty float64, limit int) (CleanStats, error) {
	var st CleanStats
	if l.shut.Load() {
		return st, ErrClosed
	}
	if l.broken != nil {
		return st, l.broken
	}
	for i := 0; i < len(l.segs)-1 && (limit <= 0 || st.Segments < limit); i++ {
		s := l.segs[i]
		if !l.cleanable(s, minDirty) {
			continue
		}
		before := s.size
		if err := l.cleanSegment(s); err != nil {
			return st, fmt.Errorf("store %q: clean %s: %w", l.cfg.Name, s.logPath, err)
		}
		st.Segments++
		st.Before += before
		st.After += s.size
	}
	return st, nil
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

// cleanSegment rewrites s without its dead records.
func (l *Log) cleanSegment(s *segment) error {
	tmp := s.logPath + ".clean.tmp"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		out.Close()
		os.Remove(tmp)
		return err
	}
	c := cleaner{l: l, s: s, bw: bufio.NewWriterSize(out, 1<<20), ib: newIndexBuilder()}
	if err := c.run(); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	if err := l.fsync(out); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, s.logPath); err != nil {
		return fail(err)
	}
	if err := l.syncDir(); err != nil {
		// The rename may not be durable yet; either file holds the same
		// records, so go on with the new one.
		l.markDirty(nil, true)
	}

	l.mu.Lock()
	old := s.f
	s.f, s.size, s.index, s.ib = out, c.off, c.index, c.ib
	s.holed = c.dead
	l.gen++
	l.mu.Unlock()
	old.Close()
	if l.head.seg == s {
		l.head = cursor{}
	}
	if l.rc.seg == s {
		l.rc = cursor{}
	}
	l.writeIndex(s)
	return nil
}

// cleaner copies a segment's live units to a new file.
type cleaner struct {
	l     *Log
	s     *segment
	bw    *bufio.Writer
	off   int64 // bytes written
	index []indexEntry
	ib    indexBuilder
	dead  uint64 // dead sequences seen, in holes or in blocks kept whole

	// the run of dead sequences not written yet
	holeFirst, holeCount uint64
	holeTime             int64

	buf []byte
}

func (c *cleaner) run() error {
	l, s := c.l, c.s
	var (
		w   window
		exp expander
	)
	defer exp.release()
	off, seq := int64(0), s.base
	for off < s.size {
		raw, err := w.record(s.f, off, s.size, readerChunk)
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
		dead := uint64(0)
		for q := seq; q < seq+count; q++ {
			if l.isDead(s, q) {
				dead++
			}
		}
		c.dead += dead
		switch {
		case dead == count:
			c.addHole(seq, count, recTime(raw))
		case flags&flagHole != 0:
			return errHoleLive
		case flags&flagBlock == 0 || 2*dead < count:
			// Kept whole: a live record, or a block mostly alive.
			if err := c.flushHole(); err != nil {
				return err
			}
			if err := c.write(raw, seq, recTime(raw)); err != nil {
				return err
			}
		default:
			if err := exp.load(s.f, off, raw, l.cfg.SegmentBytes); err != nil {
				return err
			}
			if !c.worthOpening(&exp, seq, count, len(raw)) {
				exp.reset()
				if err := c.flushHole(); err != nil {
					return err
				}
				if err := c.write(raw, seq, recTime(raw)); err != nil {
					return err
				}
				break
			}
			for q := seq; q < seq+count; q++ {
				rec, _ := exp.at(q)
				if l.isDead(s, q) {
					c.addHole(q, 1, rec.Time)
					continue
				}
				if err := c.flushHole(); err != nil {
					return err
				}
				c.buf = appendRecord(c.buf[:0], rec.Seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
				if err := c.write(c.buf, q, rec.Time); err != nil {
					return err
				}
			}
			exp.reset()
		}
		off += int64(len(raw))
		seq += count
	}
	if seq != s.last+1 {
		return errMissing
	}
	return c.flushHole()
}

// worthOpening reports whether writing the live records of the loaded block
// plain, with holes between them, takes at most three quarters of the block's
// bytes: a block compresses its records, and they lose that apart.
func (c *cleaner) worthOpening(exp *expander, first, count uint64, size int) bool {
	n, wasDead := 0, false
	for q := first; q < first+count; q++ {
		if c.l.isDead(c.s, q) {
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

func (c *cleaner) flushHole() error {
	for c.holeCount > 0 {
		// A hole's count is 32 bits, as a block's.
		n := min(c.holeCount, 1<<32-1)
		c.buf = appendHole(c.buf[:0], c.holeFirst, n, c.holeTime)
		if err := c.write(c.buf, c.holeFirst, c.holeTime); err != nil {
			return err
		}
		c.holeFirst += n
		c.holeCount -= n
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
