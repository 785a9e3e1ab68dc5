package packet

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

func encodeAll(t testing.TB, v byte, ps ...Packet) []byte {
	t.Helper()
	var b []byte
	for _, p := range ps {
		var err error
		if b, err = Append(b, p, v); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// session is a CONNECT at level v followed by every other sample of v, and where
// each packet ends in the encoding.
func session(t testing.TB, v byte) (ps []Packet, stream []byte, ends []int) {
	t.Helper()
	for _, p := range samples(v) {
		if _, ok := p.(*Connect); ok && len(ps) > 0 {
			continue
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		b, err := Append(stream, p, v)
		if err != nil {
			t.Fatal(err)
		}
		stream = b
		ends = append(ends, len(stream))
	}
	return ps, stream, ends
}

// readAll reads the packets of a session from r, switching to v after CONNECT as a
// server does, and compares them with want.
func readAll(t *testing.T, r *Reader, v byte, want []Packet) {
	t.Helper()
	for i, w := range want {
		got, err := r.ReadPacket()
		if err != nil {
			t.Fatalf("packet %d (%s): %v", i, w.PacketType(), err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(w)) {
			t.Fatalf("packet %d:\n got %+v\nwant %+v", i, got, w)
		}
		if i == 0 {
			r.SetVersion(v)
		}
	}
	for range 2 {
		if p, err := r.ReadPacket(); err != io.EOF {
			t.Fatalf("at the end: %+v, %v; want io.EOF", p, err)
		}
	}
}

// TestReaderSplitAtEveryOffset feeds a whole session split into two reads at every
// byte offset, and one byte per read, at every version.
func TestReaderSplitAtEveryOffset(t *testing.T) {
	for _, v := range versions {
		ps, stream, _ := session(t, v)
		for k := 0; k <= len(stream); k++ {
			src := io.MultiReader(bytes.NewReader(stream[:k]), bytes.NewReader(stream[k:]))
			readAll(t, NewReader(src, 1<<20), v, ps)
		}
		readAll(t, NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 1<<20), v, ps)
		readAll(t, NewReader(iotest.DataErrReader(iotest.OneByteReader(bytes.NewReader(stream))), 1<<20), v, ps)
		readAll(t, NewReader(iotest.HalfReader(bytes.NewReader(stream)), 1<<20), v, ps)
	}
}

// TestReaderEOF: a stream cut anywhere ends in io.EOF at a packet boundary and in
// io.ErrUnexpectedEOF inside a packet, after every whole packet before the cut.
func TestReaderEOF(t *testing.T) {
	ps, stream, ends := session(t, V5)
	for cut := 0; cut <= len(stream); cut++ {
		r := NewReader(iotest.OneByteReader(bytes.NewReader(stream[:cut])), 1<<20)
		whole := 0
		for whole < len(ends) && ends[whole] <= cut {
			whole++
		}
		for i := 0; i < whole; i++ {
			if _, err := r.ReadPacket(); err != nil {
				t.Fatalf("cut at %d: packet %d: %v", cut, i, err)
			}
			if i == 0 {
				r.SetVersion(V5)
			}
		}
		want := io.EOF
		if whole == 0 && cut > 0 || whole > 0 && ends[whole-1] != cut {
			want = io.ErrUnexpectedEOF
		}
		if p, err := r.ReadPacket(); err != want {
			t.Fatalf("cut at %d after %d of %d packets: %+v, %v; want %v", cut, whole, len(ps), p, err, want)
		}
	}
}

// failReader fails the test if read: the Reader must not get that far.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("Reader read the body of a packet it had already refused")
	return 0, io.EOF
}

// TestReaderMaxSize: the limit counts the whole packet, and a packet over it is
// refused from its header alone.
func TestReaderMaxSize(t *testing.T) {
	p := &Publish{QoS: 1, PacketID: 1, Topic: "t", Payload: make([]byte, 1000)}
	b := encodeAll(t, V311, p)
	for _, c := range []struct {
		max int
		ok  bool
	}{{len(b), true}, {len(b) - 1, false}, {0, true}, {-1, true}} {
		r := NewReader(bytes.NewReader(b), c.max)
		r.SetVersion(V311)
		_, err := r.ReadPacket()
		var perr *Error
		if c.ok && err != nil || !c.ok && (!errors.As(err, &perr) || perr.Reason != PacketTooLarge) {
			t.Errorf("%d-byte packet, limit %d: %v", len(b), c.max, err)
		}
	}

	// A header claiming 2 MB, then nothing the Reader may touch.
	r := NewReader(io.MultiReader(bytes.NewReader(hx("30 ff ff 7f")), failReader{t}), 1<<20)
	r.SetVersion(V5)
	var perr *Error
	if _, err := r.ReadPacket(); !errors.As(err, &perr) || perr.Reason != PacketTooLarge {
		t.Errorf("2 MB header with a 1 MB limit: %v", err)
	}
	// SetMaxSize applies from the next packet.
	r = NewReader(bytes.NewReader(b), 10)
	r.SetVersion(V311)
	r.SetMaxSize(len(b))
	if _, err := r.ReadPacket(); err != nil {
		t.Errorf("after SetMaxSize: %v", err)
	}
}

// TestReaderRefusesFromHeader: what the fixed header decides is refused before the
// body is read.
func TestReaderRefusesFromHeader(t *testing.T) {
	for _, c := range []struct {
		name   string
		hdr    string
		v      byte
		reason ReasonCode
	}{
		{"PUBLISH before CONNECT", "30 ff ff 7f", 0, ProtocolError},
		{"QoS 3", "36 ff ff 7f", V311, MalformedPacket},
		{"reserved type", "00 ff ff 7f", V5, MalformedPacket},
		{"SUBSCRIBE flags", "80 ff ff 7f", V5, MalformedPacket},
		{"second CONNECT", "10 ff ff 7f", V5, ProtocolError},
		{"AUTH in 3.1.1", "f0 ff ff 7f", V311, MalformedPacket},
	} {
		r := NewReader(io.MultiReader(bytes.NewReader(hx(c.hdr)), failReader{t}), 0)
		r.SetVersion(c.v)
		var perr *Error
		if _, err := r.ReadPacket(); !errors.As(err, &perr) || perr.Reason != c.reason {
			t.Errorf("%s: %v, want %s", c.name, err, c.reason)
		}
	}
}

// TestReaderMemory: the buffer grows with the bytes that arrive, not with what a
// header claims, and shrinks back after a large packet.
func TestReaderMemory(t *testing.T) {
	// Claims 2 MB, sends 10 bytes.
	r := NewReader(bytes.NewReader(append(hx("30 ff ff 7f 0001 61"), make([]byte, 7)...)), 0)
	r.SetVersion(V311)
	if _, err := r.ReadPacket(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut packet: %v", err)
	}
	if len(r.buf) > initialBuf {
		t.Errorf("buffer grew to %d bytes for 14 received", len(r.buf))
	}

	// An idle connection that saw only small packets keeps its small buffer.
	r = NewReader(iotest.HalfReader(bytes.NewReader(encodeAll(t, V311, &Pingreq{}, &Publish{Topic: "a", Payload: []byte("x")}))), 0)
	r.SetVersion(V311)
	for range 2 {
		if _, err := r.ReadPacket(); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.buf) != initialBuf {
		t.Errorf("idle buffer of %d bytes, want %d", len(r.buf), initialBuf)
	}

	// A busy one reads more per call, up to readChunk.
	busy := bytes.Repeat(encodeAll(t, V311, &Publish{Topic: "a", Payload: make([]byte, 100)}), 2000)
	r = NewReader(bytes.NewReader(busy), 0)
	r.SetVersion(V311)
	for range 1000 {
		if _, err := r.ReadPacket(); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.buf) != readChunk {
		t.Errorf("busy buffer of %d bytes, want %d", len(r.buf), readChunk)
	}

	big := &Publish{Topic: "big", Payload: bytes.Repeat([]byte("x"), 300<<10)}
	small := &Publish{Topic: "small", Payload: []byte("y")}
	r = NewReader(bytes.NewReader(encodeAll(t, V311, big, small, small)), 0)
	r.SetVersion(V311)
	p, err := r.ReadPacket()
	if err != nil || !bytes.Equal(p.(*Publish).Payload, big.Payload) {
		t.Fatalf("big publish: %v", err)
	}
	if len(r.buf) < 300<<10 {
		t.Fatalf("buffer of %d bytes holds a %d byte packet?", len(r.buf), Size(big, V311))
	}
	for range 2 {
		if p, err := r.ReadPacket(); err != nil || p.(*Publish).Topic != "small" {
			t.Fatalf("small publish after a big one: %+v, %v", p, err)
		}
		if len(r.buf) > readChunk {
			t.Errorf("buffer still %d bytes after the big packet was consumed", len(r.buf))
		}
	}
}

// TestReaderReuse: one *Publish for every PUBLISH, its payload in the buffer.
func TestReaderReuse(t *testing.T) {
	stream := encodeAll(t, V5,
		&Publish{Topic: "a", Payload: []byte("1"), Props: Properties{UserProperties: []UserProperty{{"k", "v"}}, SubscriptionIDs: []uint32{1, 2}}},
		&Publish{Topic: "b", Payload: []byte("2")},
		&Publish{QoS: 1, PacketID: 3, Topic: "c", Payload: []byte("3"), Props: Properties{SubscriptionIDs: []uint32{9}}},
	)
	r := NewReader(bytes.NewReader(stream), 0)
	r.SetVersion(V5)
	p1, err := r.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	inBuf := func(b []byte) bool {
		for i := range r.buf {
			if &r.buf[i] == &b[0] {
				return true
			}
		}
		return false
	}
	if !inBuf(p1.(*Publish).Payload) {
		t.Error("payload was copied, want it to alias the read buffer")
	}
	p2, err := r.ReadPacket()
	if err != nil || p1 != p2 {
		t.Fatalf("second publish %p, %v; want the same *Publish %p", p2, err, p1)
	}
	// Nothing of the first packet may leak into the second.
	want := &Publish{Topic: "b", Payload: []byte("2")}
	if !reflect.DeepEqual(normalize(p2), normalize(want)) {
		t.Errorf("reused publish %+v, want %+v", p2, want)
	}
	p3, err := r.ReadPacket()
	want = &Publish{QoS: 1, PacketID: 3, Topic: "c", Payload: []byte("3"), Props: Properties{SubscriptionIDs: []uint32{9}}}
	if err != nil || !reflect.DeepEqual(normalize(p3), normalize(want)) {
		t.Errorf("third publish %+v, %v; want %+v", p3, err, want)
	}
	// Decode, in contrast, returns a new value each time.
	a, _, _ := Decode(stream, V5)
	b, _, _ := Decode(stream, V5)
	if a == b {
		t.Error("Decode reused its *Publish")
	}
}

// stutterReader returns its data in two parts with an error between them, like a
// connection whose read deadline passed.
type stutterReader struct {
	parts [][]byte
	err   error
	calls int
}

func (s *stutterReader) Read(p []byte) (int, error) {
	s.calls++
	switch {
	case s.calls == 2:
		return 0, s.err
	case len(s.parts) == 0:
		return 0, io.EOF
	}
	n := copy(p, s.parts[0])
	s.parts = s.parts[1:]
	return n, nil
}

// TestReaderResumesAfterError: a read error inside a packet is returned as is, and
// the next call carries on with the same packet.
func TestReaderResumesAfterError(t *testing.T) {
	b := encodeAll(t, V311, &Publish{Topic: "a/b", Payload: []byte("payload")})
	timeout := errors.New("i/o timeout")
	r := NewReader(&stutterReader{parts: [][]byte{b[:4], b[4:]}, err: timeout}, 0)
	r.SetVersion(V311)
	if _, err := r.ReadPacket(); err != timeout {
		t.Fatalf("got %v, want the reader's error", err)
	}
	p, err := r.ReadPacket()
	if err != nil || p.(*Publish).Topic != "a/b" || string(p.(*Publish).Payload) != "payload" {
		t.Fatalf("after the error: %+v, %v", p, err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	if _, err := NewReader(emptyReader{}, 0).ReadPacket(); err != io.ErrNoProgress {
		t.Errorf("got %v, want io.ErrNoProgress", err)
	}
}

func TestReaderBadVersion(t *testing.T) {
	r := NewReader(bytes.NewReader(hx("c0 00")), 0)
	r.SetVersion(7)
	if _, err := r.ReadPacket(); err == nil {
		t.Error("version 7 accepted")
	}
}

// TestReaderAllocations: reading a QoS 0 PUBLISH allocates only its topic string;
// encoding one allocates nothing.
func TestReaderAllocations(t *testing.T) {
	for _, v := range []byte{V311, V5} {
		one := encodeAll(t, v, &Publish{Topic: "sensors/k1/temp", Payload: make([]byte, 32)})
		stream := bytes.Repeat(one, 200)
		src := bytes.NewReader(stream)
		r := NewReader(src, 0)
		r.SetVersion(v)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := r.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("v%d: %.1f allocations per QoS 0 PUBLISH read, want at most 1", v, allocs)
		}
	}
	p := &Publish{QoS: 1, PacketID: 1, Topic: "sensors/k1/temp", Payload: make([]byte, 32),
		Props: Properties{MessageExpiry: 10, HasMessageExpiry: true, UserProperties: []UserProperty{{"k", "v"}}, SubscriptionIDs: []uint32{3}}}
	ack := &Ack{Type: TypePuback, PacketID: 1, Reason: NoMatchingSubscribers}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = AppendPublish(buf[:0], p, V5) }); n != 0 {
		t.Errorf("AppendPublish: %.1f allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf, _ = Append(buf[:0], p, V5) }); n != 0 {
		t.Errorf("Append(PUBLISH): %.1f allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf, _ = Append(buf[:0], ack, V5) }); n != 0 {
		t.Errorf("Append(PUBACK): %.1f allocations", n)
	}
}

func TestReaderReady(t *testing.T) {
	one, err := Append(nil, &Publish{Topic: "t", Payload: []byte("12345")}, V311)
	if err != nil {
		t.Fatal(err)
	}
	stream := append(append([]byte{}, one...), one[:4]...) // a whole packet and part of one
	r := NewReader(bytes.NewReader(stream), 1<<20)
	r.SetVersion(V311)
	if r.Ready() {
		t.Fatal("Ready before anything was read")
	}
	if _, err := r.ReadPacket(); err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatalf("Ready with only %d bytes of the next packet buffered", r.Buffered())
	}
}
