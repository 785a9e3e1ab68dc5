package store

import (
	"errors"
	"io"
	"os"
)

// Read returns the record at seq. Its byte slices point into buf (grown and returned) and
// are valid until buf is reused. ErrNotFound if absent; an error wrapping ErrCorrupt
// (and a *Corruption via errors.As) if its CRC fails.
func (l *Log) Read(seq uint64, buf []byte) (Record, []byte, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return Record{}, buf, ErrClosed
	}
	if seq < l.first || seq > l.last {
		l.mu.RUnlock()
		return Record{}, buf, l.notFound(seq)
	}
	s := l.segFor(seq)
	if s == nil || s.dels.has(uint32(seq-s.base)) {
		l.mu.RUnlock()
		return Record{}, buf, l.notFound(seq)
	}
	if len(l.corrupt) > 0 {
		if c := l.corruptAt(seq); c != nil {
			err := l.corruptErr(c)
			l.mu.RUnlock()
			return Record{}, buf, err
		}
	}
	off, at := int64(0), s.base
	if e, ok := searchIndex(s.index, uint32(seq-s.base)); ok {
		off, at = int64(e.off), s.base+uint64(e.rel)
	}
	f, limit, gen := s.f, s.size, l.gen
	l.mu.RUnlock()

	// One pread usually covers the index block and the record.
	w := window{buf: buf}
	chunk := l.cfg.IndexEvery + 1024
	var (
		u   unit
		err error
	)
	for err == nil {
		if u, err = w.skip(f, off, limit, chunk); err == nil {
			if seq < at+u.count {
				break
			}
			off += int64(u.n)
			at += u.count
		}
	}
	var rec Record
	switch {
	case err != nil:
	case u.block:
		rec, err = l.readInBlock(f, off, limit, chunk, gen, at, seq, &w)
	default:
		var raw []byte
		if raw, err = w.record(f, off, limit, chunk); err == nil {
			if rec, err = decodeRecord(raw); err == nil && rec.Seq != seq {
				err = errSeq
			}
		}
	}
	switch {
	case err == nil:
		return rec, w.buf, nil
	case isDecodeErr(err):
		return Record{}, w.buf, &Corruption{Log: l.cfg.Name, Segment: s.logPath, Offset: off, FirstSeq: seq, LastSeq: seq, Err: err}
	case errors.Is(err, os.ErrClosed):
		l.mu.RLock()
		moved := l.gen != gen
		l.mu.RUnlock()
		if moved {
			// Cut, or rewritten by Clean, while we read: look again.
			return l.Read(seq, w.buf)
		}
		return Record{}, w.buf, l.notFound(seq) // removed while we read
	}
	return Record{}, w.buf, l.ioErr("read segment", s.logPath, err)
}

// timeSeek returns the first sequence, live or not, whose record has Time >= t,
// or LastSeq+1 if there is none. Safe for readers and the writer.
func (l *Log) timeSeek(t int64, w *window) (uint64, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, ErrClosed
	}
	if l.first > l.last {
		last := l.last
		l.mu.RUnlock()
		return last + 1, nil
	}
	var s *segment
	for _, x := range l.segs[l.segIndex(l.first):] {
		if x.tmax >= t {
			s = x
			break
		}
	}
	if s == nil {
		last := l.last
		l.mu.RUnlock()
		return last + 1, nil
	}
	off, seq := int64(0), s.base
	if e, ok := searchTime(s.index, t); ok {
		off, seq = int64(e.off), s.base+uint64(e.rel)
	}
	f, limit, last := s.f, s.size, s.last
	var bad []corruptRange
	for _, c := range l.corrupt {
		if c.seg == s {
			bad = append(bad, *c)
		}
	}
	l.mu.RUnlock()

	for seq <= last {
		for _, c := range bad {
			if seq >= c.first && seq <= c.last {
				// The index has an entry at the record after the damage.
				seq, off = c.last+1, c.end
			}
		}
		if seq > last || off >= limit {
			break
		}
		raw, err := w.record(f, off, limit, randChunk)
		if err != nil {
			if isDecodeErr(err) || errors.Is(err, os.ErrClosed) {
				return seq, nil // no better answer past unreadable bytes
			}
			return 0, l.ioErr("read segment", s.logPath, err)
		}
		count := unitCount(raw)
		if recTime(raw) >= t {
			if recFlags(raw)&(flagBlock|flagHole) != flagBlock {
				// A record, or a hole: its deleted sequences come before
				// the records of its time.
				return recSeq(raw), nil
			}
			// A block's time is its newest record's: look inside.
			q, ok, err := firstInBlockAtOrAfter(f, off, raw, l.cfg.SegmentBytes, t)
			if err != nil {
				return seq, nil // no better answer past unreadable bytes
			}
			if ok {
				return q, nil
			}
		}
		off += int64(len(raw))
		seq += max(count, 1)
	}
	return last + 1, nil
}

// readInBlock returns record seq of the block at off in f (holding the
// sequences from first on; gen is Log.gen when Read found it), copied into w's buffer, which Read hands back to its
// caller. The log keeps the block it last expanded for Read, so that reads of
// neighbouring messages (an interest stream's acks, redeliveries) expand it once.
func (l *Log) readInBlock(f *os.File, off, limit int64, chunk int, gen, first, seq uint64, w *window) (Record, error) {
	c := &l.readBlock
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.exp
	if c.gen != gen {
		// A cut or reset moves gen: the same offset may hold other bytes.
		c.gen = gen
		e.reset()
	}
	if err := e.expand(w, f, off, limit, chunk, first, l.cfg.SegmentBytes); err != nil {
		return Record{}, err
	}
	if seq >= first+e.count {
		return Record{}, errSeq
	}
	// The window's bytes are not needed any more: the record goes there.
	w.reset()
	var rec Record
	w.buf, rec = e.appendRecordAt(w.buf[:0], seq)
	return rec, nil
}

// SeqForTime returns the first live seq whose Time >= t (LastSeq+1 if none).
func (l *Log) SeqForTime(t int64) uint64 {
	var w window
	seq, err := l.timeSeek(t, &w)
	if err != nil {
		return l.State().FirstSeq
	}
	r := l.newReader(seq, randChunk)
	r.cur.win = w
	defer r.Close()
	for {
		rec, err := r.Next()
		switch {
		case err == nil:
			if rec.Time >= t {
				return rec.Seq
			}
		case errors.Is(err, ErrCorrupt):
		default:
			return l.State().LastSeq + 1
		}
	}
}

var _ = io.EOF
