package store

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
)

// indexEntry locates one record of a segment. Entries are taken every
// Config.IndexEvery bytes, so a lookup reads at most about that many bytes of
// records before the one wanted. 16 bytes per entry: 4 MiB per GiB of log at the
// default spacing.
type indexEntry struct {
	rel uint32 // seq - segment base
	off uint32 // file offset
	// tmax is the largest Time of the segment's records before this one
	// (math.MinInt64 for the first). It never decreases along the index, so
	// SeqForTime can binary-search it even when appenders' clocks go backwards.
	tmax int64
}

// search returns the last entry with rel <= rel, or false if there is none.
func searchIndex(idx []indexEntry, rel uint32) (indexEntry, bool) {
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if idx[m].rel <= rel {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return indexEntry{}, false
	}
	return idx[lo-1], true
}

// searchTime returns the last entry whose tmax < t: every record before it is
// older than t, so the first record with Time >= t is at or after it.
func searchTime(idx []indexEntry, t int64) (indexEntry, bool) {
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if idx[m].tmax < t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return indexEntry{}, false
	}
	return idx[lo-1], true
}

// indexBuilder adds entries while records are appended or scanned in order.
type indexBuilder struct {
	lastOff int64 // offset of the last entry; -1 forces an entry at the next record
	tmax    int64 // largest Time so far
}

func newIndexBuilder() indexBuilder { return indexBuilder{lastOff: -1, tmax: math.MinInt64} }

func (b *indexBuilder) add(idx []indexEntry, every int, rel uint32, off int64, ts int64) []indexEntry {
	if b.lastOff < 0 || off-b.lastOff >= int64(every) {
		idx = append(idx, indexEntry{rel: rel, off: uint32(off), tmax: b.tmax})
		b.lastOff = off
	}
	b.tmax = max(b.tmax, ts)
	return idx
}

// .idx file, written when a segment is sealed (little endian):
//
//	0  4  magic "TNIX"
//	4  4  version 1
//	8  8  base seq
//	16 8  last seq
//	24 8  segment size in bytes
//	32 8  largest record Time
//	40 4  entry count N
//	44 16*N entries: rel seq u32, offset u32, tmax i64
//	.. 4  CRC32C of everything before it
const idxHdrSize = 44

var idxMagic = [4]byte{'T', 'N', 'I', 'X'}

var errBadIndex = errors.New("bad index file")

type idxFile struct {
	base, last uint64
	size       int64
	tmax       int64
	entries    []indexEntry
}

func encodeIndex(dst []byte, x idxFile) []byte {
	n := idxHdrSize + 16*len(x.entries) + 4
	dst = append(dst[:0], make([]byte, n)...)
	copy(dst, idxMagic[:])
	binary.LittleEndian.PutUint32(dst[4:], 1)
	binary.LittleEndian.PutUint64(dst[8:], x.base)
	binary.LittleEndian.PutUint64(dst[16:], x.last)
	binary.LittleEndian.PutUint64(dst[24:], uint64(x.size))
	binary.LittleEndian.PutUint64(dst[32:], uint64(x.tmax))
	binary.LittleEndian.PutUint32(dst[40:], uint32(len(x.entries)))
	p := idxHdrSize
	for _, e := range x.entries {
		binary.LittleEndian.PutUint32(dst[p:], e.rel)
		binary.LittleEndian.PutUint32(dst[p+4:], e.off)
		binary.LittleEndian.PutUint64(dst[p+8:], uint64(e.tmax))
		p += 16
	}
	binary.LittleEndian.PutUint32(dst[p:], crc32.Checksum(dst[:p], crcTable))
	return dst
}

func decodeIndex(b []byte) (idxFile, error) {
	var x idxFile
	if len(b) < idxHdrSize+4 || [4]byte(b[:4]) != idxMagic || binary.LittleEndian.Uint32(b[4:]) != 1 {
		return x, errBadIndex
	}
	n := int(binary.LittleEndian.Uint32(b[40:]))
	if len(b) != idxHdrSize+16*n+4 {
		return x, errBadIndex
	}
	p := len(b) - 4
	if crc32.Checksum(b[:p], crcTable) != binary.LittleEndian.Uint32(b[p:]) {
		return x, errBadIndex
	}
	x.base = binary.LittleEndian.Uint64(b[8:])
	x.last = binary.LittleEndian.Uint64(b[16:])
	x.size = int64(binary.LittleEndian.Uint64(b[24:]))
	x.tmax = int64(binary.LittleEndian.Uint64(b[32:]))
	x.entries = make([]indexEntry, n)
	p = idxHdrSize
	for i := range x.entries {
		x.entries[i] = indexEntry{
			rel:  binary.LittleEndian.Uint32(b[p:]),
			off:  binary.LittleEndian.Uint32(b[p+4:]),
			tmax: int64(binary.LittleEndian.Uint64(b[p+8:])),
		}
		p += 16
	}
	return x, nil
}
