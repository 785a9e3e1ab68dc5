package store

import (
	"errors"
	"io"
	"os"
	"sync"
)

const readerChunk = 256 << 10

var readerBufs = sync.Pool{New: func() any { return new([]byte) }}

// Reader reads the log forward with large sequential reads. One goroutine may
// use a Reader; many Readers may run beside the writer.
type Reader struct {
	l      *Log
	seq    uint64 // next sequence wanted
	gen    uint64 // Log.gen when the cursor was last valid
	cur    cursor
	chunk  int
	pooled bool
	done   bool
}

// NewReader reads forward from the first live record with Seq >= seq, skipping deleted
// ones, using large sequential reads (for replays much larger than memory).
func (l *Log) NewReader(seq uint64) *Reader {
	r := l.newReader(seq, readerChunk)
	b := readerBufs.Get().(*[]byte)
	r.cur.win.buf = *b
	r.pooled = true
	return r
}

func (l *Log) newReader(seq uint64, chunk int) *Reader {
	l.mu.RLock()
	gen := l.gen
	l.mu.RUnlock()
	return &Reader{l: l, seq: max(seq, 1), chunk: chunk, gen: gen}
}

// Close releases the reader's buffer.
func (r *Reader) Close() {
	if r.done {
		return
	}
	r.done = true
	if r.pooled && cap(r.cur.win.buf) <= 4*readerChunk {
		b := r.cur.win.buf[:0]
		readerBufs.Put(&b)
	}
	r.cur.exp.release()
	r.cur = cursor{}
}

// Next returns the next live record; io.EOF at the committed end (a later Next may
// find more). The record's slices are valid until the next call. A damaged stretch
// gives one *Corruption error naming its sequences; the following call goes on
// after it.
func (r *Reader) Next() (Record, error) {
	l := r.l
	c := &r.cur
	for {
		l.mu.RLock()
		if l.closed || r.done {
			l.mu.RUnlock()
			return Record{}, ErrClosed
		}
		if r.gen != l.gen {
			// The log was cut or reset: what the window holds may be stale,
			// and a position past the new end continues right after it.
			r.gen = l.gen
			c.seg = nil
			c.win.reset()
			c.exp.reset()
			r.seq = min(r.seq, l.last+1)
		}
		if r.seq < l.first {
			r.seq = l.first
		}
		if r.seq > l.last {
			l.mu.RUnlock()
			return Record{}, io.EOF
		}
		if c.seg == nil || c.seg.removed || c.seq > r.seq || r.seq > c.seg.last {
			s := l.segs[l.segIndex(r.seq)]
			if r.seq < s.base {
				r.seq = s.base // a removed (all dead) segment left a hole
				l.mu.RUnlock()
				continue
			}
			c.seg, c.off, c.seq = s, 0, s.base
		}
		s := c.seg
		rel := uint32(r.seq - s.base)
		if c.seq < r.seq {
			// Recovery indexes the first record after any damage, so starting
			// from the index never walks across damaged bytes.
			if e, ok := searchIndex(s.index, rel); ok && s.base+uint64(e.rel) > c.seq {
				c.off, c.seq = int64(e.off), s.base+uint64(e.rel)
			}
		}
		if s.dels.has(rel) {
			r.seq++ // deleted: no need to read it
			l.mu.RUnlock()
			continue
		}
		if len(l.corrupt) > 0 {
			if cr := l.corruptAt(r.seq); cr != nil {
				r.seq = cr.last + 1
				c.seg = nil
				err := l.corruptErr(cr)
				l.mu.RUnlock()
				return Record{}, err
			}
		}
		f, limit, last := s.f, s.size, s.last
		l.mu.RUnlock()

		rec, err := r.advance(s, f, limit, last)
		if err != nil && errors.Is(err, os.ErrClosed) {
			c.seg = nil // the segment went away under us; look again
			continue
		}
		return rec, err
	}
}

// advance walks the cursor to r.seq in s and decodes that record, stepping over
// damage: bytes that hide no sequence are skipped, lost sequences are reported.
func (r *Reader) advance(s *segment, f *os.File, limit int64, last uint64) (Record, error) {
	l := r.l
	c := &r.cur
	for {
		var (
			raw []byte
			rec Record
			err error
		)
		var u unit
		if u, err = c.win.skip(f, c.off, limit, r.chunk); err == nil && r.seq >= c.seq+u.count {
			c.off += int64(u.n)
			c.seq += u.count
			continue
		}
		switch {
		case err != nil:
		case u.block:
			// The cursor stays at the block until the reader is past it.
			if err = c.exp.expand(&c.win, f, c.off, limit, r.chunk, c.seq, l.cfg.SegmentBytes); err == nil {
				rec, _ = c.exp.at(r.seq)
				r.seq++
				return rec, nil
			}
		default:
			if raw, err = c.win.record(f, c.off, limit, r.chunk); err == nil {
				if rec, err = decodeRecord(raw); err == nil && rec.Seq != r.seq {
					err = errSeq
				}
				if err == nil {
					c.off += int64(len(raw))
					c.seq++
					r.seq++
					return rec, nil
				}
			}
		}
		if !isDecodeErr(err) {
			if errors.Is(err, os.ErrClosed) {
				return Record{}, err
			}
			return Record{}, l.ioErr("read segment", s.logPath, err)
		}
		bad := c.off
		noff, nseq, found, rerr := resync(&c.win, f, bad, limit, c.seq, last, r.chunk)
		if rerr != nil {
			if errors.Is(rerr, os.ErrClosed) {
				return Record{}, rerr
			}
			return Record{}, l.ioErr("read segment", s.logPath, rerr)
		}
		corr := &Corruption{Log: l.cfg.Name, Segment: s.logPath, Offset: bad, FirstSeq: r.seq, Err: err}
		if found {
			c.off, c.seq = noff, nseq
			if nseq <= r.seq {
				continue // nothing we wanted was lost
			}
			corr.LastSeq = nseq - 1
			r.seq = nseq
			return Record{}, corr
		}
		corr.LastSeq = last
		r.seq = last + 1
		c.seg = nil
		return Record{}, corr
	}
}
