// Package udp carries Tern's byte streams over UDP: a Listener and Dial set up
// sessions (with an address-proving handshake and optional Noise encryption), and
// each session is a Conn, a net.Conn whose bytes arrive once and in order. The
// reliability itself is the pure state machine of package arq; this package owns
// what that leaves to its caller: the sockets, the clock, the timers and the
// session framing around the ARQ datagrams.
package udp
