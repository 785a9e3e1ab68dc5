package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// sample returns one encoded frame of every kind, with its expected decoding.
func samples() []struct {
	name string
	enc  []byte
	want Frame
} {
	h := AppendHeader(nil, "sender", "s1")
	h = AppendHeader(h, "sender", "s2")
	big := bytes.Repeat([]byte{0xAB}, 70000)
	client := []struct {
		name string
		enc  []byte
		want Frame
	}{
		{"pub", AppendPub(nil, 0, "a.b", "", nil, []byte("hello")), Frame{Type: TypePub, Subject: []byte("a.b"), Payload: []byte("hello")}},
		{"pub empty payload", AppendPub(nil, 0, "a", "", nil, nil), Frame{Type: TypePub, Subject: []byte("a")}},
		{"pub all fields", AppendPub(nil, 300, "a.b", "_INBOX.x.1", h, []byte("p")),
			Frame{Type: TypePub, Flags: FlagAck | FlagReply | FlagHeaders, ID: 300, Subject: []byte("a.b"), Reply: []byte("_INBOX.x.1"), Header: h, Payload: []byte("p")}},
		{"pub large", AppendPub(nil, 0, "big", "", nil, big), Frame{Type: TypePub, Subject: []byte("big"), Payload: big}},
		{"msg", AppendMsg(nil, 7, []byte("a.b"), nil, nil, []byte("x")), Frame{Type: TypeMsg, SID: 7, Subject: []byte("a.b"), Payload: []byte("x")}},
		{"msg all fields", AppendMsg(nil, 1<<40, []byte("a.b"), []byte("r"), h, []byte("x")),
			Frame{Type: TypeMsg, Flags: FlagReply | FlagHeaders, SID: 1 << 40, Subject: []byte("a.b"), Reply: []byte("r"), Header: h, Payload: []byte("x")}},
		{"sub", AppendSub(nil, 0, 1, "a.*", "", ""), Frame{Type: TypeSub, SID: 1, Subject: []byte("a.*")}},
		{"sub all fields", AppendSub(nil, 9, 2, "a.>", "workers", `size < 10`),
			Frame{Type: TypeSub, Flags: FlagAck | FlagQueue | FlagFilter, ID: 9, SID: 2, Subject: []byte("a.>"), Queue: []byte("workers"), Filter: []byte("size < 10")}},
		{"unsub", AppendUnsub(nil, 0, 3, 0), Frame{Type: TypeUnsub, SID: 3}},
		{"unsub max ack", AppendUnsub(nil, 4, 3, 10), Frame{Type: TypeUnsub, Flags: FlagAck | FlagMax, ID: 4, SID: 3, Max: 10}},
		{"ping", AppendPing(nil), Frame{Type: TypePing}},
		{"pong", AppendPong(nil), Frame{Type: TypePong}},
		{"ok", AppendOK(nil, 77), Frame{Type: TypeOK, ID: 77}},
		{"err", AppendErr(nil, CodeBadSubject, 5, "bad"), Frame{Type: TypeErr, Code: CodeBadSubject, ID: 5, Payload: []byte("bad")}},
	}
	return append(client, routeSamples()...)
}

func equal(a, b Frame) bool {
	return a.Type == b.Type && a.Flags == b.Flags && a.ID == b.ID && a.SID == b.SID && a.Max == b.Max && a.Code == b.Code &&
		a.Attrs == b.Attrs && a.Phase == b.Phase && a.Weight == b.Weight && a.Seq == b.Seq && a.Generation == b.Generation &&
		bytes.Equal(a.Subject, b.Subject) && bytes.Equal(a.Reply, b.Reply) && bytes.Equal(a.Queue, b.Queue) &&
		bytes.Equal(a.Filter, b.Filter) && bytes.Equal(a.Queues, b.Queues) && bytes.Equal(a.Header, b.Header) &&
		bytes.Equal(a.Payload, b.Payload)
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		var f Frame
		n, err := f.Decode(s.enc, 0)
		if err != nil || n != len(s.enc) {
			t.Fatalf("%s: n=%d err=%v", s.name, n, err)
		}
		if !equal(f, s.want) {
			t.Errorf("%s: decoded %+v\nwant %+v", s.name, f, s.want)
		}
		if f.Type == TypeMsg {
			if got := MsgLen(f.SID, f.Subject, f.Reply, f.Header, f.Payload); got != len(s.enc) {
				t.Errorf("%s: MsgLen %d, encoded %d", s.name, got, len(s.enc))
			}
		}
		l, err := FrameLen(s.enc)
		if err != nil || l != len(s.enc) {
			t.Errorf("%s: FrameLen %d %v", s.name, l, err)
		}
	}
}

func TestEveryPrefixIsIncomplete(t *testing.T) {
	for _, s := range samples() {
		if len(s.enc) > 1000 {
			continue
		}
		for i := 0; i < len(s.enc); i++ {
			var f Frame
			if n, err := f.Decode(s.enc[:i], 0); !errors.Is(err, ErrIncomplete) || n != 0 {
				t.Fatalf("%s: prefix %d gave n=%d err=%v", s.name, i, n, err)
			}
		}
	}
}

func TestPipelined(t *testing.T) {
	var buf []byte
	all := samples()
	for _, s := range all {
		buf = append(buf, s.enc...)
	}
	for i := 0; len(buf) > 0; i++ {
		var f Frame
		n, err := f.Decode(buf, 0)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if n != len(all[i].enc) || !equal(f, all[i].want) {
			t.Fatalf("frame %d (%s) decoded wrong", i, all[i].name)
		}
		buf = buf[n:]
	}
}

func TestTooLargeFromHeaderAlone(t *testing.T) {
	enc := AppendPub(nil, 0, "a", "", nil, make([]byte, 2000))
	var f Frame
	if _, err := f.Decode(enc[:4], 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge before the body arrives", err)
	}
}

func TestMalformed(t *testing.T) {
	cases := map[string][]byte{
		"unknown pub flag":     {byte(TypePub), 3, 0x80, 1, 'a'},
		"msg with ack flag":    {byte(TypeMsg), 4, FlagAck, 1, 1, 'a'},
		"string past body":     {byte(TypePub), 3, 0, 9, 'a'},
		"truncated sub":        {byte(TypeSub), 1, 0},
		"sub trailing bytes":   append(AppendSub(nil, 0, 1, "a", "", "")[:1:1], append([]byte{5}, append(AppendSub(nil, 0, 1, "a", "", "")[2:], 0xff)...)...),
		"ping with body":       {byte(TypePing), 1, 0},
		"ok trailing":          {byte(TypeOK), 2, 1, 1},
		"ack flag with id 0":   {byte(TypePub), 4, FlagAck, 0, 1, 'a'},
		"bad varint":           {byte(TypeOK), 1, 0x80},
		"err code too big":     {byte(TypeErr), 5, 0x80, 0x80, 0x04, 0, 0},
		"body length overflow": {byte(TypePub), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for name, b := range cases {
		var f Frame
		_, err := f.Decode(b, 1<<62)
		if !errors.Is(err, ErrMalformed) && !(name == "body length overflow" && errors.Is(err, ErrTooLarge)) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
	var f Frame
	if _, err := f.Decode([]byte{0x7e, 0}, 0); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestHeaderBlock(t *testing.T) {
	h := Header(AppendHeader(nil, "k", "v1"))
	h = AppendHeader(h, "k", "v2")
	h = AppendHeader(h, "empty", "")
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if v, ok := h.Lookup("k"); !ok || v != "v1" {
		t.Errorf("Lookup k = %q %v", v, ok)
	}
	if v, ok := h.Lookup("empty"); !ok || v != "" {
		t.Errorf("Lookup empty = %q %v", v, ok)
	}
	if _, ok := h.Lookup("absent"); ok || h.Get("absent") != "" {
		t.Error("absent key found")
	}
	var pairs []string
	h.Each(func(k, v []byte) bool { pairs = append(pairs, string(k)+"="+string(v)); return true })
	if fmt.Sprint(pairs) != "[k=v1 k=v2 empty=]" {
		t.Errorf("Each %v", pairs)
	}
	for _, bad := range []Header{AppendHeader(nil, "", "v"), {3, 'a'}, {1, 'k'}} {
		if err := bad.Validate(); !errors.Is(err, ErrBadHeader) {
			t.Errorf("Validate(%x) = %v", []byte(bad), err)
		}
	}
}

func TestConnectInfoRoundTripAndForwardCompatibility(t *testing.T) {
	c := Connect{Version: Version, Flags: ConnectNoEcho | ConnectNoResponders, Name: "svc", Lang: "go", ClientVersion: "1.2", Credentials: []byte("tok")}
	enc := AppendConnect(nil, &c)
	var f Frame
	if _, err := f.Decode(enc, 0); err != nil {
		t.Fatal(err)
	}
	got, err := ParseConnect(f.Payload)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(c) {
		t.Fatalf("connect %+v %v", got, err)
	}
	if got, err := ParseConnect(append(append([]byte{}, f.Payload...), 1, 2, 3)); err != nil || got.Name != "svc" {
		t.Fatalf("trailing fields refused: %v", err)
	}
	if _, err := ParseConnect(f.Payload[:len(f.Payload)-2]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated connect: %v", err)
	}
	in := Info{Version: Version, Flags: InfoHeaders, ServerID: "id", ServerName: "n", ServerVersion: "v", ClientID: 5, MaxPayload: 1 << 20, PingIntervalMS: 120000}
	enc = AppendInfo(nil, &in)
	if _, err := f.Decode(enc, 0); err != nil {
		t.Fatal(err)
	}
	gi, err := ParseInfo(append(append([]byte{}, f.Payload...), 9))
	if err != nil || !reflect.DeepEqual(gi, in) {
		t.Fatalf("info %+v %v", gi, err)
	}
}

// parseInfoV1 is ParseInfo as it was before connect_urls: what a client released
// then runs.
func parseInfoV1(body []byte) (Info, error) {
	r := reader{b: body}
	in := Info{Version: r.byte(), Flags: r.uvarint()}
	in.ServerID = string(r.str())
	in.ServerName = string(r.str())
	in.ServerVersion = string(r.str())
	in.ClientID = r.uvarint()
	in.MaxPayload = r.uvarint()
	in.PingIntervalMS = r.uvarint()
	if r.err != "" {
		return Info{}, errors.New(r.err)
	}
	return in, nil
}

func TestInfoConnectURLs(t *testing.T) {
	in := Info{Version: Version, Flags: InfoHeaders, ServerID: "id", ServerName: "n1", ServerVersion: "v", ClientID: 5,
		MaxPayload: 1 << 20, PingIntervalMS: 120000, ConnectURLs: []string{"tern://10.0.0.1:7400", "tern://10.0.0.2:7400"}}
	body := func(enc []byte) []byte {
		t.Helper()
		var f Frame
		if n, err := f.Decode(enc, 0); err != nil || n != len(enc) || f.Type != TypeInfo {
			t.Fatalf("decode: %d %v", n, err)
		}
		return f.Payload
	}
	withURLs := body(AppendInfo(nil, &in))
	got, err := ParseInfo(withURLs)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// A client that knows only the first fields reads the new INFO as before.
	old := in
	old.ConnectURLs = nil
	if got, err := parseInfoV1(withURLs); err != nil || !reflect.DeepEqual(got, old) {
		t.Fatalf("older client: %+v %v", got, err)
	}
	// An INFO from a server that predates the field: no URLs, no error.
	noURLs := body(AppendInfo(nil, &old))
	if noURLs[len(noURLs)-1] != 0 {
		t.Fatalf("an empty list is not written as count 0: % x", noURLs)
	}
	v1 := noURLs[:len(noURLs)-1]
	if got, err := ParseInfo(v1); err != nil || !reflect.DeepEqual(got, old) {
		t.Fatalf("INFO without connect_urls: %+v %v", got, err)
	}
	if got, err := ParseInfo(noURLs); err != nil || got.ConnectURLs != nil {
		t.Fatalf("INFO with 0 connect_urls: %+v %v", got, err)
	}
	// Fields appended after the list by a later server are ignored.
	if got, err := ParseInfo(append(append([]byte{}, withURLs...), 7, 1, 'x')); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("trailing fields: %+v %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"truncated list":    withURLs[:len(withURLs)-3],
		"empty URL":         append(append([]byte{}, v1...), 1, 0),
		"count too large":   append(append([]byte{}, v1...), 0xff, 0xff, 0x03, 1, 'x'),
		"non-minimal count": append(append([]byte{}, v1...), 0x81, 0x00, 1, 'x'),
	} {
		if _, err := ParseInfo(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
}

func TestCodes(t *testing.T) {
	if !CodeProtocol.Fatal() || CodeBadSubject.Fatal() || CodeBadSubject.String() != "bad subject" || Code(999).String() != "code 999" {
		t.Error("code metadata")
	}
	err := fmt.Errorf("wrapped: %w", &Error{Code: CodeBadFilter, Text: "x"})
	if !errors.Is(err, &Error{Code: CodeBadFilter}) || errors.Is(err, &Error{Code: CodeBadQueue}) {
		t.Error("errors.Is on codes")
	}
}

func TestNoAllocations(t *testing.T) {
	pub := AppendPub(nil, 1, "a.b", "r", AppendHeader(nil, "k", "v"), make([]byte, 64))
	dst := make([]byte, 0, 1024)
	var f Frame
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := f.Decode(pub, 0); err != nil {
			t.Fatal(err)
		}
		dst = AppendMsg(dst[:0], 9, f.Subject, f.Reply, f.Header, f.Payload)
		dst = AppendPub(dst[:0], 0, "a.b", "", nil, f.Payload)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per decode+encode", allocs)
	}
}

func BenchmarkDecodePub(b *testing.B) {
	pub := AppendPub(nil, 0, "sensors.k1.temp", "", nil, make([]byte, 16))
	var f Frame
	b.ReportAllocs()
	for b.Loop() {
		_, _ = f.Decode(pub, 0)
	}
}

func TestKeepTail(t *testing.T) {
	buf := make([]byte, 8)
	copy(buf, "abcdefgh")
	got, n, grew := KeepTail(buf, 5, 8)
	if grew || n != 3 || string(got[:n]) != "fgh" {
		t.Fatalf("tail kept as %q (%d, grew %v)", got[:n], n, grew)
	}
	// A buffer full of one frame's start grows to fit the frame its header announces.
	frame := AppendPub(nil, 0, "s", "", nil, make([]byte, 100))
	buf = append([]byte(nil), frame[:16]...)
	got, n, grew = KeepTail(buf, 0, 16)
	if !grew || n != 16 || len(got) != len(frame) || string(got[:16]) != string(frame[:16]) {
		t.Fatalf("full buffer: len %d filled %d grew %v, want len %d", len(got), n, grew, len(frame))
	}
}
