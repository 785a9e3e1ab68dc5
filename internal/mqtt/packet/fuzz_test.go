package packet

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// seed adds every sample packet of every version, a whole session per version, and
// every malformed case.
func seed(f *testing.F, add func(b []byte, v byte)) {
	for _, v := range versions {
		for _, p := range samples(v) {
			b, err := Append(nil, p, v)
			if err != nil {
				f.Fatal(err)
			}
			add(b, decodeVersion(p, v))
		}
		_, stream, _ := session(f, v)
		add(stream, 0)
	}
	for _, c := range badCases() {
		add(c.b, c.v)
	}
	add(hx("30 ff ff ff ff 7f"), V311)
	add(hx("c0 80 00"), V311)
}

// checkError: Decode fails only with io.ErrUnexpectedEOF or an *Error carrying a
// failure reason.
func checkError(t *testing.T, err error, v byte) {
	var perr *Error
	switch {
	case errors.As(err, &perr):
		if perr.Reason < 0x80 || perr.Msg == "" {
			t.Fatalf("error %+v: want a failure reason and a message", perr)
		}
	case err == io.ErrUnexpectedEOF:
	case v == 1 || v == 2: // not a protocol level
	default:
		t.Fatalf("unexpected error %T %v", err, err)
	}
}

// FuzzDecode: no input panics; whatever decodes encodes again (to Size bytes), and
// that encoding decodes to an equal packet and is stable.
func FuzzDecode(f *testing.F) {
	seed(f, func(b []byte, v byte) { f.Add(b, v) })
	f.Fuzz(func(t *testing.T, b []byte, v byte) {
		v %= 6
		p, n, err := Decode(b, v)
		if err != nil {
			checkError(t, err, v)
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		ev := v
		if c, ok := p.(*Connect); ok {
			ev = c.ProtocolLevel
		}
		enc, err := Append(nil, p, ev)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", p, err)
		}
		if len(enc) != Size(p, ev) {
			t.Fatalf("Size %d, encoded %d", Size(p, ev), len(enc))
		}
		p2, n2, err := Decode(enc, v)
		if err != nil || n2 != len(enc) {
			t.Fatalf("re-decoding % x (from % x): %d bytes, %v", enc, b[:n], n2, err)
		}
		if !reflect.DeepEqual(normalize(p), normalize(p2)) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, p2)
		}
		if enc2, _ := Append(nil, p2, ev); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable:\n% x\n% x", enc, enc2)
		}
	})
}

// chunkReader returns at most n bytes per read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// FuzzReader: on any byte stream, read in chunks of any size, the Reader returns
// exactly what Decode says packet by packet (switching version after CONNECT like a
// server), apart from refusing packets over its size limit first; and what it
// returns round-trips like in FuzzDecode.
func FuzzReader(f *testing.F) {
	seed(f, func(b []byte, v byte) { f.Add(b, v, byte(0)) })
	f.Fuzz(func(t *testing.T, b []byte, v, chunk byte) {
		v %= 6
		const maxSize = 1 << 12
		r := NewReader(&chunkReader{b: b, n: int(chunk)%7 + 1}, maxSize)
		r.SetVersion(v)
		if checkVersion(v) != nil {
			if _, err := r.ReadPacket(); err == nil {
				t.Fatalf("Reader accepted version %d", v)
			}
			return
		}
		off := 0
		for range 64 {
			got, err := r.ReadPacket()
			want, n, derr := Decode(b[off:], v)
			// Once a valid header tells the size, the limit comes before the body.
			if t2, flags, rem, hdr, ok, herr := decodeHeader(b[off:]); herr == nil && ok && checkHeader(t2, flags, v) == nil && hdr+rem > maxSize {
				derr, want = &Error{Reason: PacketTooLarge}, nil
			}
			if derr == io.ErrUnexpectedEOF && off == len(b) {
				derr = io.EOF
			}
			var gerr, werr *Error
			switch {
			case errors.As(derr, &werr):
				if !errors.As(err, &gerr) || gerr.Reason != werr.Reason {
					t.Fatalf("at %d: Reader %v, Decode %v", off, err, derr)
				}
				return
			case derr != nil:
				if err != derr {
					t.Fatalf("at %d: Reader %v, Decode %v", off, err, derr)
				}
				return
			case err != nil:
				t.Fatalf("at %d: Reader %v, Decode %+v", off, err, want)
			}
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Fatalf("at %d: Reader %+v, Decode %+v", off, got, want)
			}
			ev := v
			if c, ok := got.(*Connect); ok {
				ev = c.ProtocolLevel
				if v == 0 {
					v = ev
					r.SetVersion(v)
				}
			}
			enc, err := Append(nil, got, ev)
			if err != nil {
				t.Fatalf("re-encoding %+v: %v", got, err)
			}
			if again, _, err := Decode(enc, decodeVersion(got, ev)); err != nil || !reflect.DeepEqual(normalize(again), normalize(got)) {
				t.Fatalf("round trip: %+v, %v; want %+v", again, err, got)
			}
			off += n
		}
	})
}
