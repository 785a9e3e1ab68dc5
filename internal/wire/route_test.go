package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// qlist is the QueueList Decode yields for names.
func qlist(names ...string) QueueList {
	var l []byte
	for _, n := range names {
		l = appendStr(l, n)
	}
	return l
}

// names collects a decoded list.
func names(l QueueList) [][]byte {
	var out [][]byte
	for q, rest := l.Next(); q != nil; q, rest = rest.Next() {
		out = append(out, q)
	}
	return out
}

func sampleHello() *RouteHello {
	return &RouteHello{Version: Version, Cluster: "prod", NodeName: "n1", NodeID: "a1b2c3", RouteAddr: "10.0.0.1:7401",
		ServerVersion: "0.4.0", ClientURLs: []string{"tern://10.0.0.1:7400", "mqtt://10.0.0.1:1883"}}
}

// sampleAuthHello is sampleHello from a node with the cluster secret.
func sampleAuthHello() *RouteHello {
	h := sampleHello()
	h.Flags = HelloAuth
	h.Nonce = bytes.Repeat([]byte{0xa5}, RouteNonceLen)
	return h
}

func sampleProof() []byte {
	p := make([]byte, RouteAuthLen)
	for i := range p {
		p[i] = byte(i * 7)
	}
	return p
}

// routeSamples are the route frames of samples(), one of each kind and flag.
func routeSamples() []struct {
	name string
	enc  []byte
	want Frame
} {
	h := AppendHeader(nil, "trace", "t1")
	hello := AppendRouteHello(nil, sampleHello())
	authHello := AppendRouteHello(nil, sampleAuthHello())
	return []struct {
		name string
		enc  []byte
		want Frame
	}{
		{"rhello", hello, Frame{Type: TypeRouteHello, Payload: hello[2:]}},
		{"rhello auth", authHello, Frame{Type: TypeRouteHello, Payload: authHello[2:]}},
		{"rauth", AppendRouteAuth(nil, sampleProof()), Frame{Type: TypeRouteAuth, Payload: sampleProof()}},
		{"rint", AppendRouteInterest(nil, "a.*", "", 3), Frame{Type: TypeRouteInterest, Subject: []byte("a.*"), Weight: 3}},
		{"rint queue", AppendRouteInterest(nil, "jobs.>", "workers", math.MaxUint32),
			Frame{Type: TypeRouteInterest, Flags: FlagQueue, Subject: []byte("jobs.>"), Queue: []byte("workers"), Weight: math.MaxUint32}},
		{"rint gone", AppendRouteInterest(nil, []byte("a.b"), nil, 0), Frame{Type: TypeRouteInterest, Subject: []byte("a.b")}},
		{"rrefresh begin", AppendRouteRefresh(nil, RefreshBegin, 1), Frame{Type: TypeRouteRefresh, Phase: RefreshBegin, Generation: 1}},
		{"rrefresh end", AppendRouteRefresh(nil, RefreshEnd, 1<<40), Frame{Type: TypeRouteRefresh, Phase: RefreshEnd, Generation: 1 << 40}},
		{"rmsg", AppendRouteMsg[string, string](nil, 0, 0, "a.b", "", "", nil, nil, []byte("hi")),
			Frame{Type: TypeRouteMsg, Subject: []byte("a.b"), Payload: []byte("hi")}},
		{"rmsg all fields", AppendRouteMsg(nil, 300, 1|AttrRetain, []byte("a.b"), []byte("inbox.7"), []byte("r.1"), []string{"g1", "g2"}, h, []byte("x")),
			Frame{Type: TypeRouteMsg, Flags: FlagSeq | FlagRoute | FlagReply | FlagQueues | FlagHeaders, Attrs: 1 | AttrRetain, Seq: 300,
				Subject: []byte("a.b"), Route: []byte("inbox.7"), Reply: []byte("r.1"), Queues: qlist("g1", "g2"), Header: h, Payload: []byte("x")}},
		{"rmsg group only", AppendRouteMsg(nil, 0, AttrGroupOnly, "push.x", "", "", []string{"deliver"}, nil, nil),
			Frame{Type: TypeRouteMsg, Flags: FlagQueues, Attrs: AttrGroupOnly, Subject: []byte("push.x"), Queues: qlist("deliver")}},
		{"rack", AppendRouteAck(nil, 300), Frame{Type: TypeRouteAck, Seq: 300}},
		{"rraft", AppendRouteRaft(nil, []byte{1, 2, 3}), Frame{Type: TypeRouteRaft, Payload: []byte{1, 2, 3}}},
	}
}

func TestRouteTypeNames(t *testing.T) {
	want := map[Type]string{TypeRouteHello: "RHELLO", TypeRouteInterest: "RINT", TypeRouteRefresh: "RREFRESH",
		TypeRouteMsg: "RMSG", TypeRouteAck: "RACK", TypeRouteRaft: "RRAFT", TypeRouteAuth: "RAUTH", 0x2f: "TYPE(0x2f)"}
	for ty, s := range want {
		if ty.String() != s {
			t.Errorf("%#x: %s, want %s", uint8(ty), ty, s)
		}
	}
	var f Frame
	if _, err := f.Decode([]byte{0x2f, 0}, 0); !errors.Is(err, ErrUnknownType) {
		t.Errorf("0x2f: %v", err)
	}
}

// TestRouteMsgCombinations round-trips RMSG with every combination of optional fields
// and attributes.
func TestRouteMsgCombinations(t *testing.T) {
	h := Header(AppendHeader(nil, "k", "v"))
	for fields := range 16 {
		for qos := range uint8(3) {
			for _, extra := range []uint8{0, AttrRetain, AttrGroupOnly, AttrRetain | AttrGroupOnly} {
				var seq uint64
				var reply string
				var queues []string
				var hdr Header
				payload := []byte(fmt.Sprint("p", fields, qos, extra))
				if fields&1 != 0 {
					seq = uint64(fields)<<30 + 1
				}
				if fields&2 != 0 {
					reply = "_INBOX.r"
				}
				if fields&4 != 0 {
					queues = []string{"q1", strings.Repeat("q", 300)}
				}
				if fields&8 != 0 {
					hdr = h
				}
				attrs := qos | extra
				if attrs&AttrGroupOnly != 0 && len(queues) == 0 {
					continue
				}
				name := fmt.Sprintf("fields=%04b attrs=%02x", fields, attrs)
				enc := AppendRouteMsg(nil, seq, attrs, "a.b", "", reply, queues, hdr, payload)
				if l := RouteMsgLen(seq, "a.b", "", reply, queues, hdr, payload); l != len(enc) {
					t.Fatalf("%s: RouteMsgLen %d, encoded %d", name, l, len(enc))
				}
				var f Frame
				n, err := f.Decode(enc, 0)
				if err != nil || n != len(enc) {
					t.Fatalf("%s: n=%d err=%v", name, n, err)
				}
				if f.Seq != seq || f.Attrs != attrs || string(f.Subject) != "a.b" || string(f.Reply) != reply ||
					!bytes.Equal(f.Header, hdr) || !bytes.Equal(f.Payload, payload) {
					t.Fatalf("%s: decoded %+v", name, f)
				}
				var got []string
				for q := range f.Queues.All() {
					got = append(got, string(q))
				}
				if !slices.Equal(got, queues) || f.Queues.Len() != len(queues) {
					t.Fatalf("%s: queues %q (len %d), want %q", name, got, f.Queues.Len(), queues)
				}
				if again := reencode(&f); !bytes.Equal(again, enc) {
					t.Fatalf("%s: re-encodes as %x, want %x", name, again, enc)
				}
			}
		}
	}
}

func TestRouteQueueLimit(t *testing.T) {
	queues := make([]string, MaxRouteQueues)
	for i := range queues {
		queues[i] = fmt.Sprint("g", i)
	}
	enc := AppendRouteMsg(nil, 1, 0, "a", "", "", queues, nil, nil)
	var f Frame
	if _, err := f.Decode(enc, 0); err != nil || f.Queues.Len() != MaxRouteQueues {
		t.Fatalf("%d queues: %v", MaxRouteQueues, err)
	}
	enc = AppendRouteMsg(nil, 1, 0, "a", "", "", append(queues, "one-more"), nil, nil)
	if _, err := f.Decode(enc, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%d queues: %v", MaxRouteQueues+1, err)
	}
}

func TestQueueListOnForeignBytes(t *testing.T) {
	for _, l := range []QueueList{nil, {}, {0}, {5, 'a'}, {0x80}, {1, 'a', 0xff, 0xff}} {
		n := 0
		for range l.All() {
			n++
		}
		if n != l.Len() || n > 1 {
			t.Errorf("%x: All %d, Len %d", []byte(l), n, l.Len())
		}
	}
	all := qlist("a", "b", "c")
	var seen []string
	for q := range all.All() {
		seen = append(seen, string(q))
		if len(seen) == 2 {
			break
		}
	}
	if fmt.Sprint(seen) != "[a b]" {
		t.Errorf("early break: %v", seen)
	}
}

// body rebuilds a frame of type ty around body, so tests can write bodies by hand.
func body(ty Type, b ...byte) []byte {
	return append(appendHead(nil, ty, len(b)), b...)
}

func TestRouteMalformed(t *testing.T) {
	rmsg := func(b ...byte) []byte { return body(TypeRouteMsg, b...) }
	cases := map[string][]byte{
		"rint unknown flag":          body(TypeRouteInterest, FlagAck, 1, 'a', 1),
		"rint filter flag":           body(TypeRouteInterest, FlagFilter, 1, 'a', 1),
		"rint empty flagged queue":   body(TypeRouteInterest, FlagQueue, 1, 'a', 0, 1),
		"rint weight over 32 bits":   body(TypeRouteInterest, 0, 1, 'a', 0x80, 0x80, 0x80, 0x80, 0x10),
		"rint no weight":             body(TypeRouteInterest, 0, 1, 'a'),
		"rint trailing":              body(TypeRouteInterest, 0, 1, 'a', 1, 0),
		"rint non-minimal weight":    body(TypeRouteInterest, 0, 1, 'a', 0x81, 0),
		"rrefresh phase 0":           body(TypeRouteRefresh, 0, 1),
		"rrefresh phase 3":           body(TypeRouteRefresh, 3, 1),
		"rrefresh generation 0":      body(TypeRouteRefresh, RefreshBegin, 0),
		"rrefresh empty":             body(TypeRouteRefresh),
		"rrefresh no generation":     body(TypeRouteRefresh, RefreshEnd),
		"rrefresh trailing":          body(TypeRouteRefresh, RefreshEnd, 1, 1),
		"rack 0":                     body(TypeRouteAck, 0),
		"rack empty":                 body(TypeRouteAck),
		"rack trailing":              body(TypeRouteAck, 1, 1),
		"rraft empty":                body(TypeRouteRaft),
		"rmsg empty":                 rmsg(),
		"rmsg no attrs":              rmsg(0),
		"rmsg ack flag":              rmsg(FlagAck, 0, 1, 'a'),
		"rmsg queue flag":            rmsg(FlagQueue, 0, 1, 'a', 1, 'g'),
		"rmsg unknown attrs":         rmsg(0, 0x10, 1, 'a'),
		"rmsg qos 3":                 rmsg(0, 3, 1, 'a'),
		"rmsg group only, no queues": rmsg(0, AttrGroupOnly, 1, 'a'),
		"rmsg seq 0":                 rmsg(FlagSeq, 0, 0, 1, 'a'),
		"rmsg empty flagged reply":   rmsg(FlagReply, 0, 1, 'a', 0),
		"rmsg queues count 0":        rmsg(FlagQueues, 0, 1, 'a', 0),
		"rmsg empty queue name":      rmsg(FlagQueues, 0, 1, 'a', 2, 1, 'g', 0),
		"rmsg fewer queues":          rmsg(FlagQueues, 0, 1, 'a', 3, 1, 'g', 1, 'h'),
		"rmsg queue past body":       rmsg(FlagQueues, 0, 1, 'a', 1, 5, 'g'),
		"rmsg huge queue count":      rmsg(FlagQueues, 0, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 'g'),
		"rmsg empty flagged headers": rmsg(FlagHeaders, 0, 1, 'a', 0),
		"rmsg subject past body":     rmsg(0, 0, 4, 'a'),
	}
	for name, b := range cases {
		var f Frame
		if _, err := f.Decode(b, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		} else if !strings.Contains(err.Error(), Type(b[0]).String()+": ") {
			t.Errorf("%s: error %q does not name the frame type", name, err)
		}
	}
}

// TestRouteTruncations cuts every route sample at every length: as a prefix of the
// stream it is incomplete; re-framed as a shorter body it is malformed or, where the
// cut only shortens a payload, a frame that re-encodes to exactly those bytes. No cut
// panics.
func TestRouteTruncations(t *testing.T) {
	for _, s := range routeSamples() {
		_, k := binary.Uvarint(s.enc[1:])
		b := s.enc[1+k:]
		for i := range len(s.enc) {
			var f Frame
			if n, err := f.Decode(s.enc[:i], 0); !errors.Is(err, ErrIncomplete) || n != 0 {
				t.Fatalf("%s: prefix %d gave n=%d err=%v", s.name, i, n, err)
			}
		}
		for i := range len(b) {
			cut := body(s.want.Type, b[:i]...)
			var f Frame
			n, err := f.Decode(cut, 0)
			switch {
			case err == nil:
				if n != len(cut) {
					t.Fatalf("%s: body cut at %d: n=%d", s.name, i, n)
				}
				if enc := reencode(&f); enc != nil && !bytes.Equal(enc, cut) {
					t.Fatalf("%s: body cut at %d decoded to a frame that encodes as %x", s.name, i, enc)
				}
				if f.Type == TypeRouteHello {
					if _, err := ParseRouteHello(f.Payload); !errors.Is(err, ErrMalformed) {
						t.Fatalf("%s: body cut at %d parsed: %v", s.name, i, err)
					}
				}
			case !errors.Is(err, ErrMalformed):
				t.Fatalf("%s: body cut at %d: %v", s.name, i, err)
			}
		}
	}
}

func TestRouteHello(t *testing.T) {
	h := sampleHello()
	enc := AppendRouteHello(nil, h)
	var f Frame
	if n, err := f.Decode(enc, 0); err != nil || n != len(enc) || f.Type != TypeRouteHello {
		t.Fatalf("decode: %d %v", n, err)
	}
	got, err := ParseRouteHello(f.Payload)
	if err != nil || !reflect.DeepEqual(got, *h) {
		t.Fatalf("parsed %+v %v", got, err)
	}
	if got, err := ParseRouteHello(append(slices.Clone(f.Payload), 7, 1, 2, 3)); err != nil || !reflect.DeepEqual(got, *h) {
		t.Fatalf("trailing fields refused: %+v %v", got, err)
	}
	if again := AppendRouteHello(nil, &got); !bytes.Equal(again, enc) {
		t.Fatalf("re-encoded %x, want %x", again, enc)
	}
	none := RouteHello{Version: Version, Flags: 1 << 40, Cluster: "c", NodeID: "x"}
	if got, err := ParseRouteHello(AppendRouteHello(nil, &none)[2:]); err != nil || !reflect.DeepEqual(got, none) {
		t.Fatalf("no client URLs: %+v %v", got, err)
	}
	// With the secret: the nonce round-trips (a copy, not the decoded buffer), and
	// the flag follows the nonce whatever Flags says.
	ah := sampleAuthHello()
	aenc := AppendRouteHello(nil, ah)
	if _, err := f.Decode(aenc, 0); err != nil {
		t.Fatal(err)
	}
	got, err = ParseRouteHello(f.Payload)
	if err != nil || !reflect.DeepEqual(got, *ah) {
		t.Fatalf("auth hello parsed %+v %v", got, err)
	}
	clear(aenc)
	if !bytes.Equal(got.Nonce, ah.Nonce) {
		t.Fatal("the parsed nonce points into the frame")
	}
	if noFlag := (RouteHello{Version: Version, Nonce: ah.Nonce}); !bytes.Equal(AppendRouteHello(nil, &noFlag), AppendRouteHello(nil, &RouteHello{Version: Version, Flags: HelloAuth, Nonce: ah.Nonce})) {
		t.Fatal("a nonce without the flag encodes differently")
	}
	if p, err := ParseRouteHello(AppendRouteHello(nil, &RouteHello{Version: Version, Flags: HelloAuth})[2:]); err != nil || p.Flags&HelloAuth != 0 {
		t.Fatalf("HelloAuth without a nonce was sent: %+v %v", p, err)
	}
	bad := map[string][]byte{
		"empty":          nil,
		"url count only": {1, 0, 0, 0, 0, 0, 0},
		"count too big":  {1, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 'u'},
		"missing url":    {1, 0, 0, 0, 0, 0, 0, 2, 1, 'u'},
		"empty url":      {1, 0, 0, 0, 0, 0, 0, 1, 0, 0},
		"bad flags":      {1, 0x80},
		// HelloAuth without a nonce, with an empty one and with one a byte short.
		"auth no nonce":    {1, 1, 0, 0, 0, 0, 0, 0},
		"auth empty nonce": {1, 1, 0, 0, 0, 0, 0, 0, 0},
		"auth short nonce": append([]byte{1, 1, 0, 0, 0, 0, 0, 0, RouteNonceLen - 1}, make([]byte, RouteNonceLen-1)...),
	}
	for name, b := range bad {
		if _, err := ParseRouteHello(b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "RHELLO") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRouteNoAllocations(t *testing.T) {
	queues := []string{"g1", "g2", "g3"}
	hdr := Header(AppendHeader(nil, "k", "v"))
	payload := make([]byte, 64)
	rmsg := AppendRouteMsg(nil, 12345, 1|AttrRetain, "a.b", "", "r", queues, hdr, payload)
	rint := AppendRouteInterest(nil, "a.*", "g", 7)
	rest := append(AppendRouteRefresh(nil, RefreshBegin, 9), AppendRouteAck(nil, 12345)...)
	dst := make([]byte, 0, 1024)
	var f Frame
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := f.Decode(rmsg, 0); err != nil {
			t.Fatal(err)
		}
		n := 0
		for q := range f.Queues.All() {
			n += len(q)
		}
		if n != 6 || f.Queues.Len() != 3 {
			t.Fatal("queues")
		}
		dst = AppendRouteMsg(dst[:0], f.Seq, f.Attrs, f.Subject, f.Route, f.Reply, queues, f.Header, f.Payload)
		if _, err := f.Decode(rint, 0); err != nil {
			t.Fatal(err)
		}
		dst = AppendRouteInterest(dst[:0], f.Subject, f.Queue, f.Weight)
		for b := rest; len(b) > 0; {
			k, err := f.Decode(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
		dst = AppendRouteAck(AppendRouteRefresh(dst[:0], RefreshEnd, 9), f.Seq)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per decode+encode", allocs)
	}
}

func BenchmarkDecodeRouteMsg(b *testing.B) {
	enc := AppendRouteMsg(nil, 1<<20, 1, "sensors.k1.temp", "", "", []string{"workers"}, nil, make([]byte, 16))
	var f Frame
	b.ReportAllocs()
	for b.Loop() {
		_, _ = f.Decode(enc, 0)
	}
}
