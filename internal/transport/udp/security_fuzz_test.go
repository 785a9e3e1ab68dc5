package udp

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

// FuzzHandshakeDecode: every decoder of bytes from outside on the encrypted paths —
// the init2, accept and refuse parsers, the server's reading of the client's Noise
// message and the client's of the server's, and the opening of sealed datagrams —
// refuses or accepts any input without panicking, and nothing that fails moves the
// replay window.
func FuzzHandshakeDecode(f *testing.F) {
	priv, _ := GenerateKey()
	keys, _ := newServerKeys(Config{PrivateKey: priv})
	h, _ := newClientHandshake(Config{ServerKey: priv.Public()}, 42)
	msg2, srv, _ := respond(keys, modeNK, 42, 9, h.msg1)
	cli, _ := h.finish(9, msg2)
	hdr := []byte{kindData, 0, 0, 0, 0, 0, 0, 0, 9}
	sealed, _ := cli.seal(nil, hdr, []byte{arqData, 1, 0x03, 1, 'x'})
	cookie := make([]byte, 24)
	f.Add(handshakeInit2(42, cookie, modeNK, h.msg1))
	f.Add(handshakeInit2(42, cookie, modePlain, nil))
	f.Add(append(binary.BigEndian.AppendUint64([]byte{kindAccept, 0, 0, 0, 0, 0, 0, 0, 42}, 9), msg2...))
	f.Add([]byte{kindRefuse, 0, 0, 0, 0, 0, 0, 0, 42, refuseAuth})
	f.Add(append(bytes.Clone(hdr), sealed...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, ok := parseInit2(b); ok && m.mode != modePlain {
			if reason := keys.refusal(m.mode); reason == 0 {
				_, _, _ = respond(keys, m.mode, m.nonce, 9, m.noise)
			}
		}
		if nonce, sid, msg2, ok := parseAccept(b); ok && nonce == 42 && len(msg2) > 0 {
			_, _ = h.finish(sid, msg2)
		}
		if _, reason, ok := parseRefuse(b); ok {
			_ = refusalError(reason)
		}
		if len(b) >= sessionHdr {
			before := srv.window
			if _, ok := srv.open(b[:sessionHdr], bytes.Clone(b[sessionHdr:])); !ok && srv.window != before {
				t.Fatal("a refused datagram moved the replay window")
			}
			srv.window = before
		}
	})
}

// FuzzParseKey: a key comes from a file or a URL. Parsing it refuses with
// ErrBadKey or gives a key that reads back the same from each form it is written
// in.
func FuzzParseKey(f *testing.F) {
	priv, _ := GenerateKey()
	pub := priv.Public()
	f.Add(pub.String())
	f.Add(priv.String() + "\n")
	f.Add(hex.EncodeToString(pub[:]))
	f.Add(" " + base64.RawURLEncoding.EncodeToString(pub[:]) + "\t")
	f.Add(base64.URLEncoding.EncodeToString(pub[:]))
	f.Add(hex.EncodeToString(pub[:31]) + "zz")
	f.Add(base64.StdEncoding.EncodeToString(pub[:31]))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrBadKey) || !k.IsZero() {
				t.Fatalf("ParseKey(%q) = %v, %v", s, k, err)
			}
			return
		}
		for _, form := range []string{k.String(), hex.EncodeToString(k[:]), base64.RawURLEncoding.EncodeToString(k[:])} {
			if again, err := ParseKey(form); err != nil || again != k {
				t.Fatalf("ParseKey(%q) = %v; its form %q reads %v, %v", s, k, form, again, err)
			}
		}
		_ = k.Public()
	})
}
