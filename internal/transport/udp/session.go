package udp

import "time"

// Session datagrams wrap the ARQ datagrams. Before a session exists a server answers
// only with datagrams no larger than the one it got, so it cannot be used to amplify
// traffic toward a spoofed address, and it keeps no state for a source until that
// source has echoed a cookie, proving it receives at the address it claims:
//
//	init    0x01 | nonce u64 | zero padding to minInit bytes          client → server
//	cookie  0x02 | nonce u64 | ts u64 | mac [16]                      server → client
//	init2   0x03 | nonce u64 | ts u64 | mac [16] | padding to minInit client → server
//	accept  0x04 | nonce u64 | session u64                            server → client
//	data    0x05 | session u64 | ARQ datagram                         both ways
//	ping    0x06 | session u64                                        both ways, when idle
//	close   0x07 | session u64                                        both ways
//	refuse  0x08 | nonce u64 | reason u8                              server → client
//	reset   0x09 | session u64                                        server → client
//
// With encryption (noise.go) init2 and accept also carry the Noise handshake, and
// everything after the session header of data, ping and close is sealed (seal.go).
//
// A server answers a data or ping datagram for a session it does not have (it
// restarted, or the session timed out) with a reset, no larger than what it got,
// so that the client learns at once that it must start a new session instead of
// retransmitting into the void until its idle timeout. A client takes a reset only
// from the address it dialled and only for its own session id, which an off-path
// sender does not know.
// mac is HMAC-SHA256(server secret, source address | nonce | ts), cut to 16 bytes;
// a cookie is good for cookieTTL. A session is found by its id, not by the source
// address, so it survives the client's address or port changing (NAT rebinding).
const (
	kindInit   = 0x01
	kindCookie = 0x02
	kindInit2  = 0x03
	kindAccept = 0x04
	kindData   = 0x05
	kindPing   = 0x06
	kindClose  = 0x07
	kindRefuse = 0x08
	kindReset  = 0x09

	minInit    = 256
	sessionHdr = 9
	cookieTTL  = 30 * time.Second
	readMax    = 64 << 10
	defaultMTU = 1200
)
