package replica

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func sampleMessages() []*raftpb.Message {
	return []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(4)),
			LogTerm: new(uint64(4)), Index: new(uint64(10)), Commit: new(uint64(9)),
			Entries: []*raftpb.Entry{
				{Term: new(uint64(4)), Index: new(uint64(11)), Data: []byte("hello")},
				{Term: new(uint64(4)), Index: new(uint64(12)), Type: raftpb.EntryConfChangeV2.Enum(), Data: []byte{}},
				{Term: new(uint64(4)), Index: new(uint64(13))},
			}},
		{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(3)), To: new(uint64(1)), Term: new(uint64(4)),
			Index: new(uint64(13)), Reject: new(true), RejectHint: new(uint64(7)), LogTerm: new(uint64(2))},
		{Type: raftpb.MsgVote.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(1 << 62)),
			Context: []byte("CampaignTransfer"), Vote: new(uint64(0))},
		{Type: raftpb.MsgHup.Enum()},
		{},
		{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(3)),
			Snapshot: &raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)),
				Term: new(uint64(3)), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}},
	}
}

// checkAgainstGeneric is the codec's contract: on any input it decodes what
// proto.Unmarshal decodes, fails where it fails, and what it encodes decodes,
// generically, to the message encoded.
func checkAgainstGeneric(t *testing.T, data []byte) {
	t.Helper()
	want := new(raftpb.Message)
	wantErr := proto.Unmarshal(data, want)
	got, err := decodeMessage(data)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("decode %x: lean error %v, generic error %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decode %x:\nlean    %v\ngeneric %v", data, got, want)
	}
	enc, err := appendMessage(nil, got)
	if err != nil {
		t.Fatal(err)
	}
	size, n := protowire.ConsumeVarint(enc)
	if n < 0 || int(size) != len(enc)-n {
		t.Fatalf("encoding of %v: length prefix %d for %d bytes", got, size, len(enc)-n)
	}
	again := new(raftpb.Message)
	if err := proto.Unmarshal(enc[n:], again); err != nil {
		t.Fatalf("encoding of %v does not decode: %v", got, err)
	}
	if !proto.Equal(again, want) {
		t.Fatalf("re-encoding changed the message:\n%v\n%v", want, again)
	}
}

func TestMessageCodecMatchesGeneric(t *testing.T) {
	for _, m := range sampleMessages() {
		enc, err := appendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		_, n := protowire.ConsumeVarint(enc)
		generic, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{enc[n:], generic} {
			checkAgainstGeneric(t, data)
			got, err := decodeMessage(data)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, m) {
				t.Fatalf("round trip:\n%v\n%v", m, got)
			}
		}
	}
	app := mustMarshal(t, sampleMessages()[0])
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5)
	unknownEnum := protowire.AppendVarint(protowire.AppendTag(nil, msgFieldType, protowire.VarintType), 1000)
	cases := map[string][]byte{
		"unknown field":          append(bytes.Clone(app), unknownField...),
		"unknown message type":   append(bytes.Clone(app), unknownEnum...),
		"wrong wire type":        append(bytes.Clone(app), protowire.AppendBytes(protowire.AppendTag(nil, msgFieldTerm, protowire.BytesType), []byte{1})...),
		"repeated scalar":        append(bytes.Clone(app), protowire.AppendVarint(protowire.AppendTag(nil, msgFieldTerm, protowire.VarintType), 77)...),
		"truncated":              app[:len(app)-1],
		"bad entry":              append(bytes.Clone(app), protowire.AppendBytes(protowire.AppendTag(nil, msgFieldEntries, protowire.BytesType), []byte{0xff})...),
		"field zero":             {0, 1},
		"reject other than 0, 1": append(bytes.Clone(app), protowire.AppendVarint(protowire.AppendTag(nil, msgFieldReject, protowire.VarintType), 300)...),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { checkAgainstGeneric(t, data) })
	}
}

func mustMarshal(t testing.TB, m *raftpb.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMessageDecodeDoesNotAlias(t *testing.T) {
	data := mustMarshal(t, sampleMessages()[0])
	m, err := decodeMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 0xff
	}
	if !proto.Equal(m, sampleMessages()[0]) {
		t.Fatal("decoded message aliases its input")
	}
	// An entry's data cannot grow into the next one's.
	first := m.Entries[0].Data
	_ = append(first, 'x')
	if string(first) != "hello" || len(m.Entries[1].Data) != 0 {
		t.Fatal("entries' data share room")
	}
}

// The lean codec's point: a MsgApp of one entry in three allocations (message,
// entries and their pointers, bytes), its response in one.
func TestMessageDecodeAllocations(t *testing.T) {
	app := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(4)),
		LogTerm: new(uint64(4)), Index: new(uint64(10)), Commit: new(uint64(9)),
		Entries: []*raftpb.Entry{{Term: new(uint64(4)), Index: new(uint64(11)), Data: make([]byte, 100)}}}
	resp := sampleMessages()[1]
	for _, c := range []struct {
		m    *raftpb.Message
		want float64
	}{{app, 4}, {resp, 2}} {
		data := mustMarshal(t, c.m)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := decodeMessage(data); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > c.want {
			t.Errorf("decoding a %v: %.0f allocations, want at most %.0f", c.m.GetType(), allocs, c.want)
		}
		buf := make([]byte, 0, 1024)
		allocs = testing.AllocsPerRun(100, func() {
			var err error
			if buf, err = appendMessage(buf[:0], c.m); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("encoding a %v: %.0f allocations", c.m.GetType(), allocs)
		}
	}
}

func FuzzMessageCodec(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(mustMarshal(f, m))
	}
	f.Add([]byte{0x08, 0x80, 0x80, 0x80, 0x80, 0x10})
	f.Add([]byte{0x3a, 0x02, 0x08, 0x09})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstGeneric(t, data)
	})
}

func BenchmarkMessageCodec(b *testing.B) {
	app := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(4)),
		LogTerm: new(uint64(4)), Index: new(uint64(10)), Commit: new(uint64(9)),
		Entries: []*raftpb.Entry{{Term: new(uint64(4)), Index: new(uint64(11)), Data: make([]byte, 100)}}}
	data := mustMarshal(b, app)
	b.Run("decode/lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeMessage(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/generic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(data, new(raftpb.Message)); err != nil {
				b.Fatal(err)
			}
		}
	})
	buf := make([]byte, 0, 1024)
	b.Run("encode/lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = appendMessage(buf[:0], app)
		}
	})
	b.Run("encode/generic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = protowire.AppendVarint(buf[:0], uint64(proto.Size(app)))
			buf, _ = marshalOpts.MarshalAppend(buf, app)
		}
	})
}
