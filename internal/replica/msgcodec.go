package replica

import (
	"fmt"
	"math"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The raft library's messages are proto2 structs whose every scalar is a
// pointer, so the generic protobuf decoder makes a dozen allocations for one
// MsgApp of one entry, and its reflective encoder walks descriptors for what is a
// handful of varints. Nearly all traffic between nodes is MsgApp, MsgAppResp,
// votes and their responses: this codec reads and writes those on the protobuf
// wire directly and places a message's scalars, entries and bytes in a few
// allocations. A message it does not handle whole (a snapshot, responses, a
// field or value it does not know, anything malformed) goes to the generic
// codec, so the result is always what proto.Unmarshal and proto.Marshal give.

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	msgFieldType       = 1
	msgFieldTo         = 2
	msgFieldFrom       = 3
	msgFieldTerm       = 4
	msgFieldLogTerm    = 5
	msgFieldIndex      = 6
	msgFieldEntries    = 7
	msgFieldCommit     = 8
	msgFieldReject     = 10
	msgFieldRejectHint = 11
	msgFieldContext    = 12
	msgFieldVote       = 13

	entryFieldType  = 1
	entryFieldTerm  = 2
	entryFieldIndex = 3
	entryFieldData  = 4
)

// messageBox holds a decoded message with the values its pointer fields point
// to, in one allocation.
type messageBox struct {
	m                                                        raftpb.Message
	typ                                                      raftpb.MessageType
	reject                                                   bool
	to, from, term, logTerm, index, commit, rejectHint, vote uint64
}

// entryBox is the same for an entry.
type entryBox struct {
	e           raftpb.Entry
	typ         raftpb.EntryType
	term, index uint64
}

// messageLayout is what a first pass over an encoded message learns: whether
// the lean decoder can take it, and how much room its entries and bytes need.
type messageLayout struct {
	entries, dataBytes int
}

// field is one varint or length-delimited field of an encoded message.
type field struct {
	num   protowire.Number
	typ   protowire.Type
	v     uint64 // a varint's value
	bytes []byte // a length-delimited field's contents
}

// nextField reads the field at the start of b and returns it with the rest of
// b; ok is false for a field of another wire type or malformed input.
func nextField(b []byte) (f field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return f, nil, false
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(b)
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, b[n:], true
}

// scanMessage checks that b is a message the lean decoder handles whole.
func scanMessage(b []byte) (messageLayout, bool) {
	var l messageLayout
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			return l, false
		}
		b = rest
		switch f.num {
		case msgFieldType, msgFieldTo, msgFieldFrom, msgFieldTerm, msgFieldLogTerm, msgFieldIndex,
			msgFieldCommit, msgFieldReject, msgFieldRejectHint, msgFieldVote:
			if f.typ != protowire.VarintType || f.num == msgFieldType && !knownMessageType(f.v) {
				return l, false
			}
		case msgFieldContext:
			if f.typ != protowire.BytesType {
				return l, false
			}
			l.dataBytes += len(f.bytes)
		case msgFieldEntries:
			if f.typ != protowire.BytesType {
				return l, false
			}
			data, ok := scanEntry(f.bytes)
			if !ok {
				return l, false
			}
			l.entries++
			l.dataBytes += data
		default:
			return l, false
		}
	}
	return l, true
}

// scanEntry checks one encoded entry and returns the bytes its data fields need.
func scanEntry(b []byte) (int, bool) {
	data := 0
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			return 0, false
		}
		b = rest
		switch f.num {
		case entryFieldType, entryFieldTerm, entryFieldIndex:
			if f.typ != protowire.VarintType || f.num == entryFieldType && !knownEntryType(f.v) {
				return 0, false
			}
		case entryFieldData:
			if f.typ != protowire.BytesType {
				return 0, false
			}
			data += len(f.bytes)
		default:
			return 0, false
		}
	}
	return data, true
}

// A proto2 enum is closed: a number it does not name is kept as an unknown
// field, which the generic decoder does.
func knownMessageType(v uint64) bool {
	if v > math.MaxInt32 {
		return false
	}
	_, ok := raftpb.MessageType_name[int32(v)]
	return ok
}

func knownEntryType(v uint64) bool {
	if v > math.MaxInt32 {
		return false
	}
	_, ok := raftpb.EntryType_name[int32(v)]
	return ok
}

// decodeMessage decodes one encoded raftpb.Message. The message does not alias
// b.
func decodeMessage(b []byte) (*raftpb.Message, error) {
	layout, ok := scanMessage(b)
	if !ok {
		m := new(raftpb.Message)
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, err
		}
		return m, nil
	}
	box := new(messageBox)
	m := &box.m
	var entries []entryBox
	if layout.entries > 0 {
		entries = make([]entryBox, layout.entries)
		m.Entries = make([]*raftpb.Entry, 0, layout.entries)
	}
	// Present but empty bytes decode to a non-nil empty slice, as the generic
	// decoder's do; make gives one even for no bytes.
	data := make([]byte, 0, layout.dataBytes)
	// scanMessage accepted every field: each is what its number says.
	for len(b) > 0 {
		var f field
		f, b, _ = nextField(b)
		switch f.num {
		case msgFieldContext:
			m.Context, data = carve(data, f.bytes)
		case msgFieldEntries:
			eb := &entries[len(m.Entries)]
			data = decodeEntry(f.bytes, eb, data)
			m.Entries = append(m.Entries, &eb.e)
		case msgFieldType:
			box.typ = raftpb.MessageType(f.v)
			m.Type = &box.typ
		case msgFieldTo:
			box.to = f.v
			m.To = &box.to
		case msgFieldFrom:
			box.from = f.v
			m.From = &box.from
		case msgFieldTerm:
			box.term = f.v
			m.Term = &box.term
		case msgFieldLogTerm:
			box.logTerm = f.v
			m.LogTerm = &box.logTerm
		case msgFieldIndex:
			box.index = f.v
			m.Index = &box.index
		case msgFieldCommit:
			box.commit = f.v
			m.Commit = &box.commit
		case msgFieldReject:
			box.reject = f.v != 0
			m.Reject = &box.reject
		case msgFieldRejectHint:
			box.rejectHint = f.v
			m.RejectHint = &box.rejectHint
		case msgFieldVote:
			box.vote = f.v
			m.Vote = &box.vote
		}
	}
	return m, nil
}

// decodeEntry decodes an entry scanEntry accepted into eb, its data carved from
// data.
func decodeEntry(b []byte, eb *entryBox, data []byte) []byte {
	e := &eb.e
	for len(b) > 0 {
		var f field
		f, b, _ = nextField(b)
		switch f.num {
		case entryFieldData:
			e.Data, data = carve(data, f.bytes)
		case entryFieldType:
			eb.typ = raftpb.EntryType(f.v)
			e.Type = &eb.typ
		case entryFieldTerm:
			eb.term = f.v
			e.Term = &eb.term
		case entryFieldIndex:
			eb.index = f.v
			e.Index = &eb.index
		}
	}
	return data
}

// carve copies v to the end of data, which has the room, and returns the copy
// (its capacity its length, so that an append to it cannot reach a neighbour).
func carve(data, v []byte) (out, rest []byte) {
	at := len(data)
	data = append(data, v...)
	return data[at:len(data):len(data)], data
}

// leanEncodable reports whether appendMessage writes m itself.
func leanEncodable(m *raftpb.Message) bool {
	if m.Snapshot != nil || len(m.Responses) > 0 || len(m.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, e := range m.Entries {
		if e == nil || len(e.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// appendMessage appends m's length as a varint and then its encoding.
func appendMessage(dst []byte, m *raftpb.Message) ([]byte, error) {
	if !leanEncodable(m) {
		dst = protowire.AppendVarint(dst, uint64(proto.Size(m)))
		out, err := marshalOpts.MarshalAppend(dst, m)
		if err != nil {
			return dst, fmt.Errorf("replica: encoding a %v: %w", m.GetType(), err)
		}
		return out, nil
	}
	dst = protowire.AppendVarint(dst, uint64(messageSize(m)))
	if m.Type != nil {
		dst = appendVarintField(dst, msgFieldType, uint64(*m.Type))
	}
	dst = appendOptional(dst, msgFieldTo, m.To)
	dst = appendOptional(dst, msgFieldFrom, m.From)
	dst = appendOptional(dst, msgFieldTerm, m.Term)
	dst = appendOptional(dst, msgFieldLogTerm, m.LogTerm)
	dst = appendOptional(dst, msgFieldIndex, m.Index)
	for _, e := range m.Entries {
		dst = protowire.AppendTag(dst, msgFieldEntries, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(entrySize(e)))
		if e.Type != nil {
			dst = appendVarintField(dst, entryFieldType, uint64(*e.Type))
		}
		dst = appendOptional(dst, entryFieldTerm, e.Term)
		dst = appendOptional(dst, entryFieldIndex, e.Index)
		if e.Data != nil {
			dst = protowire.AppendTag(dst, entryFieldData, protowire.BytesType)
			dst = protowire.AppendBytes(dst, e.Data)
		}
	}
	dst = appendOptional(dst, msgFieldCommit, m.Commit)
	if m.Reject != nil {
		dst = appendVarintField(dst, msgFieldReject, protowire.EncodeBool(*m.Reject))
	}
	dst = appendOptional(dst, msgFieldRejectHint, m.RejectHint)
	if m.Context != nil {
		dst = protowire.AppendTag(dst, msgFieldContext, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.Context)
	}
	dst = appendOptional(dst, msgFieldVote, m.Vote)
	return dst, nil
}

func appendVarintField(dst []byte, num protowire.Number, v uint64) []byte {
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, v)
}

func appendOptional(dst []byte, num protowire.Number, v *uint64) []byte {
	if v == nil {
		return dst
	}
	return appendVarintField(dst, num, *v)
}

// A tag of a field number below 16 is one byte.
func varintFieldSize(v uint64) int { return 1 + protowire.SizeVarint(v) }

func optionalSize(v *uint64) int {
	if v == nil {
		return 0
	}
	return varintFieldSize(*v)
}

func bytesFieldSize(b []byte) int {
	if b == nil {
		return 0
	}
	return 1 + protowire.SizeBytes(len(b))
}

func messageSize(m *raftpb.Message) int {
	n := 0
	if m.Type != nil {
		n += varintFieldSize(uint64(*m.Type))
	}
	n += optionalSize(m.To) + optionalSize(m.From) + optionalSize(m.Term) + optionalSize(m.LogTerm) +
		optionalSize(m.Index) + optionalSize(m.Commit) + optionalSize(m.RejectHint) + optionalSize(m.Vote)
	if m.Reject != nil {
		n += 2
	}
	n += bytesFieldSize(m.Context)
	for _, e := range m.Entries {
		n += 1 + protowire.SizeBytes(entrySize(e))
	}
	return n
}

func entrySize(e *raftpb.Entry) int {
	n := optionalSize(e.Term) + optionalSize(e.Index) + bytesFieldSize(e.Data)
	if e.Type != nil {
		n += varintFieldSize(uint64(*e.Type))
	}
	return n
}
