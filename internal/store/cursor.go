package store

import (
	"fmt"
	"io"
)

const (
	headChunk = 256 << 10 // read-ahead of the writer's front cursor
	randChunk = 16 << 10  // read size for the writer's random reads
)

// cursor is a position in the log: the record (or block) holding seq starts at
// off in seg. exp holds the block last expanded through it.
type cursor struct {
	seg *segment
	off int64
	seq uint64
	win window
	exp expander
	u   unit // the unit at off, once rawAt has read it
}

func (l *Log) notFound(seq uint64) error {
	return fmt.Errorf("store %q: message %d: %w", l.cfg.Name, seq, ErrNotFound)
}

// rawAt reads record seq for the writer through cursor c, which it leaves at the
// record (or block) holding seq so that reading seq+1 next costs one header
// parse. The record's slices point into c's window or expander; the int is the
// record's length (uncompressed). Damage gives a *Corruption.
func (l *Log) rawAt(c *cursor, seq uint64, chunk int) (Record, int, error) {
	s := l.segFor(seq)
	if s == nil || s.removed {
		return Record{}, 0, l.notFound(seq)
	}
	if c.seg != s || c.seq > seq || seq-c.seq > 64 {
		e, ok := searchIndex(s.index, uint32(seq-s.base))
		if c.seg != s || c.seq > seq || !ok || s.base+uint64(e.rel) > c.seq {
			c.seg, c.off, c.seq = s, 0, s.base
			if ok {
				c.off, c.seq = int64(e.off), s.base+uint64(e.rel)
			}
		}
	}
	corrupt := func(err error) error {
		return &Corruption{Log: l.cfg.Name, Segment: s.logPath, Offset: c.off, FirstSeq: seq, LastSeq: seq, Err: err}
	}
	for {
		u, err := c.win.skip(s.f, c.off, s.size, chunk)
		if err != nil {
			c.seg = nil
			return Record{}, 0, l.readErr(s, err, corrupt)
		}
		c.u = u
		if seq < c.seq+u.count {
			break
		}
		c.off += int64(u.n)
		c.seq += u.count
	}
	if c.u.hole {
		return Record{}, 0, l.notFound(seq) // deleted; c stays at the hole
	}
	if c.u.block {
		if err := c.exp.expand(&c.win, s.f, c.off, s.size, chunk, c.seq, l.cfg.SegmentBytes); err != nil {
			c.seg = nil
			return Record{}, 0, l.readErr(s, err, corrupt)
		}
		rec, n := c.exp.at(seq)
		return rec, n, nil
	}
	raw, err := c.win.record(s.f, c.off, s.size, chunk)
	if err != nil {
		c.seg = nil
		return Record{}, 0, l.readErr(s, err, corrupt)
	}
	rec, err := decodeRecord(raw)
	if err == nil && rec.Seq != seq {
		err = errSeq
	}
	if err != nil {
		c.seg = nil
		return Record{}, 0, corrupt(err)
	}
	return rec, len(raw), nil
}

// readErr sorts a failed read into damage (a *Corruption) or an I/O error.
func (l *Log) readErr(s *segment, err error, corrupt func(error) error) error {
	if isDecodeErr(err) {
		return corrupt(err)
	}
	return l.ioErr("read segment", s.logPath, err)
}

func isDecodeErr(err error) bool {
	switch err {
	case errMagic, errLength, errFields, errCRC, errSeq, errMissing, errBlock, io.ErrUnexpectedEOF:
		return true
	}
	return false
}
