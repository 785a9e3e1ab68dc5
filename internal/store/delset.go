package store

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
)

// delSet holds the sequences of one segment deleted out of order (interior
// tombstones). Deleting the first live message only advances Log.first, so a work
// queue acknowledged roughly in order keeps this empty. It starts as a map and
// turns into a bitmap once the bitmap would be the smaller of the two.
type delSet struct {
	m      map[uint32]struct{}
	bits   []uint64
	n      int
	maxRel uint32
}

func (d *delSet) len() int { return d.n }

func (d *delSet) has(rel uint32) bool {
	if d.bits != nil {
		w := int(rel >> 6)
		return w < len(d.bits) && d.bits[w]&(1<<(rel&63)) != 0
	}
	_, ok := d.m[rel]
	return ok
}

// add reports whether rel was not there before.
func (d *delSet) add(rel uint32) bool {
	if d.has(rel) {
		return false
	}
	d.n++
	d.maxRel = max(d.maxRel, rel)
	if d.bits != nil {
		d.setBit(rel)
		return true
	}
	if d.m == nil {
		d.m = make(map[uint32]struct{})
	}
	d.m[rel] = struct{}{}
	// A map entry costs a few dozen bytes, the bitmap one bit per sequence.
	if d.n >= 64 && d.n*32 > int(d.maxRel/8)+8 {
		for r := range d.m {
			d.setBit(r)
		}
		d.m = nil
	}
	return true
}

// remove reports whether rel was there.
func (d *delSet) remove(rel uint32) bool {
	if !d.has(rel) {
		return false
	}
	d.n--
	if d.bits != nil {
		d.bits[rel>>6] &^= 1 << (rel & 63)
		if d.n == 0 {
			d.bits, d.maxRel = nil, 0
		}
	} else {
		delete(d.m, rel)
	}
	return true
}

func (d *delSet) setBit(rel uint32) {
	w := int(rel >> 6)
	if w >= len(d.bits) {
		d.bits = slices.Grow(d.bits, w+1-len(d.bits))[:w+1]
	}
	d.bits[w] |= 1 << (rel & 63)
}

// sorted returns the members in increasing order.
func (d *delSet) sorted() []uint32 {
	out := make([]uint32, 0, d.n)
	if d.bits != nil {
		for w, x := range d.bits {
			for x != 0 {
				b := bits.TrailingZeros64(x)
				out = append(out, uint32(w<<6+b))
				x &= x - 1
			}
		}
		return out
	}
	for r := range d.m {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// seqRange is an inclusive range of sequences.
type seqRange struct{ a, b uint64 }

// mergeRanges sorts and coalesces overlapping or adjacent ranges in place.
func mergeRanges(r []seqRange) []seqRange {
	if len(r) < 2 {
		return r
	}
	slices.SortFunc(r, func(x, y seqRange) int {
		switch {
		case x.a < y.a:
			return -1
		case x.a > y.a:
			return 1
		}
		return 0
	})
	out := r[:1]
	for _, x := range r[1:] {
		last := &out[len(out)-1]
		if last.b == math.MaxUint64 || x.a <= last.b+1 {
			last.b = max(last.b, x.b)
			continue
		}
		out = append(out, x)
	}
	return out
}

// rangeCursor answers membership for increasing sequences in O(1) amortized.
type rangeCursor struct {
	r []seqRange
	i int
}

func (c *rangeCursor) has(seq uint64) bool {
	for c.i < len(c.r) && c.r[c.i].b < seq {
		c.i++
	}
	return c.i < len(c.r) && c.r[c.i].a <= seq
}

// .del file: a sequence of fixed 20-byte entries, each an inclusive range of
// deleted sequences (little endian): from u64, to u64, CRC32C of those 16 bytes.
// A partial entry at the end (torn write) is ignored.
const delEntrySize = 20

func appendDelEntry(dst []byte, a, b uint64) []byte {
	var e [delEntrySize]byte
	binary.LittleEndian.PutUint64(e[0:], a)
	binary.LittleEndian.PutUint64(e[8:], b)
	binary.LittleEndian.PutUint32(e[16:], crc32.Checksum(e[:16], crcTable))
	return append(dst, e[:]...)
}

// decodeDelEntries appends the valid entries of b to dst and returns the offset
// of the first bad entry (-1 if none). A torn trailing entry is not counted as bad.
func decodeDelEntries(dst []seqRange, b []byte) ([]seqRange, int) {
	bad := -1
	for p := 0; p+delEntrySize <= len(b); p += delEntrySize {
		e := b[p : p+delEntrySize]
		if crc32.Checksum(e[:16], crcTable) != binary.LittleEndian.Uint32(e[16:]) {
			if bad < 0 {
				bad = p
			}
			continue
		}
		a, z := binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint64(e[8:])
		if a <= z {
			dst = append(dst, seqRange{a, z})
		}
	}
	return dst, bad
}
