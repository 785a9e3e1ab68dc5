package wire

import (
	"bytes"
	"testing"
)

// reencode writes f back with the encoder of its type; nil for CONNECT/INFO, whose
// bodies are checked by their own parsers.
func reencode(f *Frame) []byte {
	switch f.Type {
	case TypePub:
		return AppendPub(nil, f.ID, f.Subject, f.Reply, f.Header, f.Payload)
	case TypeMsg:
		return AppendMsg(nil, f.SID, f.Subject, f.Reply, f.Header, f.Payload)
	case TypeSub:
		return AppendSub(nil, f.ID, f.SID, f.Subject, f.Queue, f.Filter)
	case TypeUnsub:
		return AppendUnsub(nil, f.ID, f.SID, f.Max)
	case TypePing:
		return AppendPing(nil)
	case TypePong:
		return AppendPong(nil)
	case TypeOK:
		return AppendOK(nil, f.ID)
	case TypeErr:
		return AppendErr(nil, f.Code, f.ID, string(f.Payload))
	}
	return nil
}

// FuzzDecode decodes arbitrary bytes as a stream of frames. Decoding never panics,
// always makes progress, and every frame it accepts re-encodes to exactly the bytes it
// was decoded from (one encoding per frame).
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		if len(s.enc) < 4096 {
			f.Add(s.enc)
		}
	}
	f.Add(AppendConnect(nil, &Connect{Version: 1, Name: "x"}))
	f.Add([]byte{byte(TypePub), 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{0x7e, 0})
	f.Add([]byte{byte(TypeSub), 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for len(data) > 0 {
			var fr Frame
			n, err := fr.Decode(data, 1<<16)
			if err != nil {
				return
			}
			if n <= 0 || n > len(data) {
				t.Fatalf("Decode consumed %d of %d", n, len(data))
			}
			if enc := reencode(&fr); enc != nil {
				var again Frame
				m, err := again.Decode(enc, 1<<16)
				if err != nil || m != len(enc) || !equal(fr, again) {
					t.Fatalf("%s does not survive re-encoding: %v", fr.Type, err)
				}
				if !bytes.Equal(enc, data[:n]) {
					t.Fatalf("%s: decoded from %x but encodes as %x: frames must have one encoding", fr.Type, data[:n], enc)
				}
			}
			if fr.Type == TypeConnect {
				_, _ = ParseConnect(fr.Payload)
			}
			if fr.Type == TypeInfo {
				_, _ = ParseInfo(fr.Payload)
			}
			if len(fr.Header) > 0 {
				_ = fr.Header.Validate()
				fr.Header.Each(func(k, v []byte) bool { return true })
				_, _ = fr.Header.Lookup("k")
			}
			data = data[n:]
		}
	})
}

// FuzzHeader checks the header block functions agree with each other.
func FuzzHeader(f *testing.F) {
	f.Add([]byte(AppendHeader(nil, "k", "v")))
	f.Add([]byte{0})
	f.Add([]byte{3, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := Header(data)
		valid := h.Validate() == nil
		seen := 0
		h.Each(func(k, v []byte) bool {
			seen += len(k) + len(v)
			if valid {
				if got, ok := h.Lookup(string(k)); !ok || len(got) > len(data) {
					t.Fatalf("Each saw key %q that Lookup misses", k)
				}
			}
			return true
		})
		if valid && seen > len(data) {
			t.Fatal("Each visited more bytes than the block has")
		}
	})
}
