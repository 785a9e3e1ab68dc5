package packet

import (
	"bytes"
	"reflect"
	"testing"
)

// seedPackets adds every sample packet of every version, and a few broken ones.
func seedPackets(f *testing.F) {
	for _, v := range []byte{V31, V311, V5} {
		for _, p := range samples(v) {
			b, err := Append(nil, p, v)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, versionFor(p, v))
		}
	}
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}, V311)
	f.Add([]byte{0x10, 0x00}, byte(0))
	f.Add([]byte{0x82, 0x02, 0x00, 0x01}, V5)
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to a packet that
// decodes to the same thing.
func FuzzDecode(f *testing.F) {
	seedPackets(f)
	f.Fuzz(func(t *testing.T, b []byte, v byte) {
		v %= 6
		p, n, err := Decode(b, v)
		if err != nil {
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
		p2, _, err := Decode(enc, v)
		if err != nil {
			t.Fatalf("re-decoding % x (from % x): %v", enc, b[:n], err)
		}
		if !reflect.DeepEqual(normalize(p), normalize(p2)) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, p2)
		}
	})
}

// FuzzReader: the streaming reader agrees with Decode on any byte stream.
func FuzzReader(f *testing.F) {
	seedPackets(f)
	f.Fuzz(func(t *testing.T, b []byte, v byte) {
		v %= 6
		r := NewReader(bytes.NewReader(b), 1<<16)
		r.SetVersion(v)
		off := 0
		for i := 0; i < 64; i++ {
			p, err := r.ReadPacket()
			if err != nil {
				return
			}
			want, n, derr := Decode(b[off:], v)
			if derr != nil {
				t.Fatalf("Reader accepted what Decode refuses: %v", derr)
			}
			if !reflect.DeepEqual(normalize(p), normalize(want)) {
				t.Fatalf("Reader %+v, Decode %+v", p, want)
			}
			off += n
		}
	})
}
