package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		name                     string
		subject, header, payload []byte
	}{
		{"empty", []byte("s"), nil, nil},
		{"header", []byte("a.b.c"), []byte("k:v\r\n"), []byte("hello")},
		{"binary", []byte("x"), nil, bytes.Repeat([]byte{0xFE, 'T', 'N', 1}, 100)},
		{"long subject", bytes.Repeat([]byte("s"), maxSubject), nil, []byte("p")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := appendRecord([]byte("prefix"), 42, -7, tc.subject, tc.header, tc.payload)
			raw := b[6:]
			if len(raw) != recordSize(len(tc.subject), len(tc.header), len(tc.payload)) {
				t.Fatalf("size %d", len(raw))
			}
			n, err := peekRecord(raw)
			if err != nil || n != len(raw) {
				t.Fatalf("peek = %d, %v", n, err)
			}
			r, err := decodeRecord(raw)
			if err != nil {
				t.Fatal(err)
			}
			if r.Seq != 42 || r.Time != -7 || !bytes.Equal(r.Subject, tc.subject) || !bytes.Equal(r.Header, tc.header) || !bytes.Equal(r.Payload, tc.payload) {
				t.Fatalf("decoded %+v", r)
			}
			if tc.header == nil && r.Header != nil {
				t.Fatal("empty header should decode as nil")
			}
			// The slices are capped: appending to one never overwrites the next.
			_ = append(r.Subject, 'X')
			if r2, _ := decodeRecord(raw); !bytes.Equal(r2.Header, tc.header) || !bytes.Equal(r2.Payload, tc.payload) {
				t.Fatal("append to Subject overwrote the record")
			}
		})
	}
}

func TestRecordDecodeErrors(t *testing.T) {
	good := appendRecord(nil, 1, 2, []byte("subj"), []byte("hdr"), []byte("payload"))
	mod := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"magic", mod(func(b []byte) { b[0] = 0 }), errMagic},
		{"version", mod(func(b []byte) { b[3] = 2 }), errMagic},
		{"crc", mod(func(b []byte) { b[offCRC] ^= 1 }), errCRC},
		{"payload bit", mod(func(b []byte) { b[len(b)-1] ^= 0x80 }), errCRC},
		{"seq", mod(func(b []byte) { b[offSeq] ^= 1 }), errCRC},
		{"length short", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[offLen:], 10) }), errLength},
		{"length long", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[offLen:], uint32(len(good)+1)) }), errLength},
		{"flags", mod(func(b []byte) { b[offFlags] = 1 }), errFields},
		{"subject too long", mod(func(b []byte) { binary.LittleEndian.PutUint16(b[offSubj:], 1000) }), errFields},
		{"truncated", good[:len(good)-1], errLength},
		{"header only", good[:10], errLength},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeRecord(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzDecodeRecord: the decoder never panics, and whatever it accepts encodes
// back to exactly the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, 1, 2, []byte("a"), nil, []byte("b")))
	f.Add(appendRecord(nil, 1<<40, -1, []byte("a.b"), []byte("h"), nil))
	f.Add([]byte{0xFE, 'T', 'N', 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		again := appendRecord(nil, r.Seq, r.Time, r.Subject, r.Header, r.Payload)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	})
}

func TestParseSyncPolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SyncPolicy
		err  bool
	}{
		{"interval", SyncInterval, false},
		{"", SyncInterval, false},
		{"always", SyncAlways, false},
		{"never", SyncNever, false},
		{"sometimes", 0, true},
	} {
		got, err := ParseSyncPolicy(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseSyncPolicy(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.err && tc.in != "" && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}
