package raftlog

import (
	"bytes"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzEntryHeader: the entry header decoder never panics, what it accepts
// encodes back to the same bytes, and the entry it builds sizes as proto.Size
// says (what Entries' size limit relies on).
func FuzzEntryHeader(f *testing.F) {
	for _, e := range []*pb.Entry{
		ent(7, 3, []byte("data")),
		{Index: new(uint64(1 << 40)), Term: new(uint64(1<<63 + 5)), Type: pb.EntryType_EntryConfChangeV2.Enum(), Data: []byte{}},
		{Type: pb.EntryType(-1).Enum()},
		{},
	} {
		f.Add(appendMeta(nil, e), e.Data, e.GetIndex())
	}
	f.Add([]byte{1, 0xF0, 0, 0}, []byte(nil), uint64(0))
	f.Fuzz(func(t *testing.T, hdr, data []byte, index uint64) {
		m, err := decodeMeta(hdr, len(data))
		if err != nil {
			return
		}
		e := newEntry(index, m, data)
		if again := appendMeta(nil, e); !bytes.Equal(again, hdr) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, hdr)
		}
		if got, want := entrySize(m, index, len(data)), uint64(proto.Size(e)); got != want {
			t.Fatalf("entrySize %d, proto.Size %d (%v)", got, want, e)
		}
		if got := sizeOf(e); got != uint64(proto.Size(e)) {
			t.Fatalf("sizeOf %d, proto.Size %d", got, proto.Size(e))
		}
	})
}

// FuzzHardState: the hard state decoder never panics and what it accepts
// encodes back to the same bytes.
func FuzzHardState(f *testing.F) {
	f.Add(encodeHardState(&pb.HardState{Term: new(uint64(5)), Vote: new(uint64(2)), Commit: new(uint64(1000))}))
	f.Add(encodeHardState(&pb.HardState{Term: new(uint64(1))}))
	f.Add(encodeHardState(nil))
	f.Add([]byte("TRHS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeHardState(b)
		if err != nil {
			return
		}
		if again := encodeHardState(st); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	})
}

// FuzzSnapshotFile: the snapshot file decoder never panics, and what it
// accepts encodes into a file that decodes to an equal snapshot. (Protobuf
// encodings are not unique, so the bytes themselves may differ.)
func FuzzSnapshotFile(f *testing.F) {
	for _, s := range []*pb.Snapshot{
		{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2)),
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, AutoLeave: new(false)}}},
		{Data: []byte{}, Metadata: pb.EnsureSnapshotMetadata(nil)},
		{},
	} {
		b, err := encodeSnapshot(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("TRSN\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSnapshot(b)
		if err != nil {
			return
		}
		again, err := encodeSnapshot(s)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		s2, err := decodeSnapshot(again)
		if err != nil || !proto.Equal(s, s2) || (s.Data == nil) != (s2.Data == nil) {
			t.Fatalf("round trip: %v, %v vs %v", err, s2, s)
		}
	})
}
