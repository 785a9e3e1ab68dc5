package store

import (
	"io"
	"os"
)

// window caches a stretch of one file so that sequential record parsing costs one
// pread per chunk instead of one per record. Committed segment bytes never change,
// so cached bytes stay valid for as long as the file is the same.
type window struct {
	f   *os.File
	buf []byte
	off int64 // file offset of buf[0]
	n   int   // valid bytes in buf
}

func (w *window) reset() { w.f, w.n = nil, 0 }

// get returns the file bytes [off, off+size). When it has to read, it reads at
// least chunk bytes (but never past limit, the committed size of the file).
// The result is valid until the next call.
func (w *window) get(f *os.File, off int64, size int, limit int64, chunk int) ([]byte, error) {
	if f == w.f && off >= w.off && off+int64(size) <= w.off+int64(w.n) {
		s := int(off - w.off)
		return w.buf[s : s+size], nil
	}
	if off < 0 || off+int64(size) > limit {
		return nil, io.ErrUnexpectedEOF
	}
	want := max(size, chunk)
	if rem := limit - off; int64(want) > rem {
		want = int(rem)
	}
	if cap(w.buf) < want {
		w.buf = make([]byte, max(want, 2*cap(w.buf)))
	}
	w.buf = w.buf[:cap(w.buf)]
	w.f, w.n = nil, 0
	m, err := f.ReadAt(w.buf[:want], off)
	if m < size {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	w.f, w.off, w.n = f, off, m
	return w.buf[:size], nil
}

// record returns the raw bytes of the record that starts at off, checking the
// fixed header but not the CRC. Decode errors are errMagic/errLength/errFields;
// anything else is an I/O error (io.ErrUnexpectedEOF if the record runs past limit).
func (w *window) record(f *os.File, off, limit int64, chunk int) ([]byte, error) {
	h, err := w.get(f, off, recHdrSize, limit, chunk)
	if err != nil {
		return nil, err
	}
	n, err := peekRecord(h)
	if err != nil {
		return nil, err
	}
	if off+int64(n) > limit {
		return nil, errLength
	}
	return w.get(f, off, n, limit, chunk)
}

// unit is what skip learns of the record or block at an offset.
type unit struct {
	n     int    // bytes
	count uint64 // sequences it stands for
	block bool
	hole  bool // a block of deleted sequences (Clean), never expanded
}

// skip returns the length of the record or block at off and how many sequences
// it stands for, without reading all of it.
func (w *window) skip(f *os.File, off, limit int64, chunk int) (unit, error) {
	h, err := w.get(f, off, recHdrSize, limit, chunk)
	if err != nil {
		return unit{}, err
	}
	n, err := peekRecord(h)
	if err != nil {
		return unit{}, err
	}
	if off+int64(n) > limit {
		return unit{}, errLength
	}
	if recFlags(h)&flagBlock == 0 {
		return unit{n: n, count: 1}, nil
	}
	if h, err = w.get(f, off, blockHdrSize, limit, chunk); err != nil {
		return unit{}, err
	}
	count := unitCount(h)
	if count == 0 {
		return unit{}, errBlock
	}
	return unit{n: n, count: count, block: true, hole: recFlags(h)&flagHole != 0}, nil
}
