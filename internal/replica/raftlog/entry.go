package raftlog

import (
	"encoding/binary"
	"errors"

	pb "go.etcd.io/raft/v3/raftpb"
)

// An entry is one store record whose sequence is the entry's index, whose
// subject is empty, whose payload is the entry's Data and whose header block is
// these 16 bytes (little endian):
//
//	0  1  version, 1
//	1  1  presence: 1 Term, 2 Index, 4 Type, 8 Data (set when the field is non-nil)
//	2  2  zero
//	4  4  type (raftpb.EntryType)
//	8  8  term
//
// Presence is kept so that an entry read back equals (proto.Equal) and sizes
// (proto.Size) like the one appended. The record's Time is the local clock at
// Append, for people reading the files; nothing depends on it.
const (
	metaSize    = 16
	metaVersion = 1

	hasTerm  = 1
	hasIndex = 2
	hasType  = 4
	hasData  = 8
	hasAll   = hasTerm | hasIndex | hasType | hasData
)

var errMeta = errors.New("bad entry header")

// appendMeta encodes e's header block into dst.
func appendMeta(dst []byte, e *pb.Entry) []byte {
	var b [metaSize]byte
	b[0] = metaVersion
	var p byte
	if e.Term != nil {
		p |= hasTerm
	}
	if e.Index != nil {
		p |= hasIndex
	}
	if e.Type != nil {
		p |= hasType
	}
	if e.Data != nil {
		p |= hasData
	}
	b[1] = p
	binary.LittleEndian.PutUint32(b[4:], uint32(int32(e.GetType())))
	binary.LittleEndian.PutUint64(b[8:], e.GetTerm())
	return append(dst, b[:]...)
}

// meta is a decoded header block.
type meta struct {
	presence byte
	typ      pb.EntryType
	term     uint64
}

// decodeMeta checks and decodes a header block; fields that are absent must be
// zero, so that every block it accepts encodes back to the same bytes.
func decodeMeta(b []byte, dataLen int) (meta, error) {
	if len(b) != metaSize || b[0] != metaVersion || b[1]&^hasAll != 0 || b[2] != 0 || b[3] != 0 {
		return meta{}, errMeta
	}
	m := meta{
		presence: b[1],
		typ:      pb.EntryType(int32(binary.LittleEndian.Uint32(b[4:]))),
		term:     binary.LittleEndian.Uint64(b[8:]),
	}
	if (m.presence&hasType == 0 && m.typ != 0) || (m.presence&hasTerm == 0 && m.term != 0) ||
		(m.presence&hasData == 0 && dataLen != 0) {
		return meta{}, errMeta
	}
	return m, nil
}

// diskEntry is an entry read back from disk with its fields in one allocation.
type diskEntry struct {
	e     pb.Entry
	term  uint64
	index uint64
	typ   pb.EntryType
}

// newEntry builds the entry at index from its header block and data (which it
// keeps, not copies).
func newEntry(index uint64, m meta, data []byte) *pb.Entry {
	return fillEntry(new(diskEntry), index, m, data)
}

// fillEntry builds the entry in d.
func fillEntry(d *diskEntry, index uint64, m meta, data []byte) *pb.Entry {
	d.term, d.index, d.typ = m.term, index, m.typ
	if m.presence&hasTerm != 0 {
		d.e.Term = &d.term
	}
	if m.presence&hasIndex != 0 {
		d.e.Index = &d.index
	}
	if m.presence&hasType != 0 {
		d.e.Type = &d.typ
	}
	if m.presence&hasData != 0 {
		if data == nil {
			data = []byte{}
		}
		d.e.Data = data
	}
	return &d.e
}

// entrySize is proto.Size of an entry as newEntry builds it, without the
// reflection: the sizes raft's limitSize adds up.
func entrySize(m meta, index uint64, dataLen int) uint64 {
	var n uint64
	if m.presence&hasTerm != 0 {
		n += 1 + varintSize(m.term)
	}
	if m.presence&hasIndex != 0 {
		n += 1 + varintSize(index)
	}
	if m.presence&hasType != 0 {
		n += 1 + varintSize(uint64(int64(m.typ))) // enums are int32, sign-extended
	}
	if m.presence&hasData != 0 {
		n += 1 + varintSize(uint64(dataLen)) + uint64(dataLen)
	}
	return n
}

func varintSize(v uint64) uint64 {
	n := uint64(1)
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
