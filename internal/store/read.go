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
	f, limit := s.f, s.size
	l.mu.RUnlock()

	// One pread usually covers the index block and the record.
	w := window{buf: buf}
	chunk := l.cfg.IndexEvery + 1024
	var err error
	for at < seq && err == nil {
		var n int
		if n, err = w.skip(f, off, limit, chunk); err == nil {
			off += int64(n)
			at++
		}
	}
	var rec Record
	if err == nil {
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
		if recTime(raw) >= t {
			return recSeq(raw), nil
		}
		off += int64(len(raw))
		seq++
	}
	return last + 1, nil
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
