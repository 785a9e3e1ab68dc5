package replica

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func sampleBatch() *Batch {
	return &Batch{
		From: 1, To: 3,
		Msgs: []Msg{
			{Group: 7, M: &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)),
				Term: new(uint64(4)), LogTerm: new(uint64(4)), Index: new(uint64(10)), Commit: new(uint64(9)),
				Entries: []*raftpb.Entry{{Term: new(uint64(4)), Index: new(uint64(11)), Data: []byte("hello")}}}},
			{Group: 1 << 40, M: &raftpb.Message{Type: raftpb.MsgVote.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(5))}},
			{Group: 2, M: &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(3)),
				Snapshot: &raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(3)),
					ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}},
		},
		Beats:     []Beat{{Group: 7, Term: 4, Commit: 11}, {Group: 9, Term: 1, Commit: 0, Quiesce: true}},
		BeatResps: []Beat{{Group: 8, Term: 2}},
	}
}

func batchesEqual(a, b *Batch) bool {
	if a.From != b.From || a.To != b.To || len(a.Msgs) != len(b.Msgs) || len(a.Beats) != len(b.Beats) || len(a.BeatResps) != len(b.BeatResps) {
		return false
	}
	for i := range a.Msgs {
		if a.Msgs[i].Group != b.Msgs[i].Group || !proto.Equal(a.Msgs[i].M, b.Msgs[i].M) {
			return false
		}
	}
	for i := range a.Beats {
		if a.Beats[i] != b.Beats[i] {
			return false
		}
	}
	for i := range a.BeatResps {
		if a.BeatResps[i] != b.BeatResps[i] {
			return false
		}
	}
	return true
}

func TestBatchRoundTrip(t *testing.T) {
	for _, b := range []*Batch{sampleBatch(), {From: 2, To: 1}} {
		enc, err := AppendBatch(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		var got Batch
		if err := DecodeBatch(enc, &got); err != nil {
			t.Fatal(err)
		}
		if !batchesEqual(b, &got) {
			t.Fatalf("round trip changed the batch:\n%+v\n%+v", b, &got)
		}
		// Decoded messages do not alias the input.
		for i := range enc {
			enc[i] = 0xff
		}
		if !batchesEqual(b, &got) {
			t.Fatal("decoded batch aliases its input")
		}
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	enc, err := AppendBatch(nil, sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	// Every proper prefix is refused.
	for n := 0; n < len(enc); n++ {
		if err := DecodeBatch(enc[:n], &b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d/%d bytes: %v", n, len(enc), err)
		}
	}
	cases := map[string][]byte{
		"trailing":     append(bytes.Clone(enc), 0),
		"version":      append([]byte{2}, enc[1:]...),
		"huge count":   {1, 1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge length":  {1, 1, 2, 1, 7, 0xff, 0xff, 0x03, 0},
		"bad flags":    {1, 1, 2, 0, 1, 1, 1, 1, 0x80, 0},
		"bad protobuf": {1, 1, 2, 1, 7, 2, 0xff, 0xff, 0, 0},
		"long varint":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, in := range cases {
		if err := DecodeBatch(in, &b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
		if !b.Empty() {
			t.Errorf("%s: batch not emptied after an error", name)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range []*Batch{sampleBatch(), {From: 1, To: 2}} {
		enc, err := AppendBatch(nil, b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte{1, 1, 2, 0, 1, 5, 6, 7, 1, 1, 5, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		if err := DecodeBatch(data, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		// What decodes encodes again and decodes to the same batch.
		enc, err := AppendBatch(nil, &b)
		if err != nil {
			t.Fatal(err)
		}
		var again Batch
		if err := DecodeBatch(enc, &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !batchesEqual(&b, &again) {
			t.Fatal("re-encoding changed the batch")
		}
	})
}
