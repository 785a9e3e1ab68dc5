package udp

import (
	"bytes"
	"encoding/binary"
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
