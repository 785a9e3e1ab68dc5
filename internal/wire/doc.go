// Package wire owns Tern's native binary protocol: the frame layout, the encoders that
// append frames to a caller's buffer, and the decoder that reads frames out of a byte
// slice without copying or allocating.
//
// Every frame is self-delimiting:
//
//	+---------+------------------------+-------------------+
//	| type u8 | body length (uvarint)  | body (length B)   |
//	+---------+------------------------+-------------------+
//
// so frames can be pipelined on a TCP stream and bundled several to a UDP datagram.
// Strings inside a body are a uvarint length followed by the bytes. The full layout of
// each frame type is in docs/protocol.md; testdata/vectors.json holds encoded frames that
// clients in other languages check their codecs against.
//
// Cluster routes between nodes speak the same frames with types of their own (RHELLO,
// RINT, RREFRESH, RMSG, RACK in route.go), so one decoder serves client connections and
// routes alike; which types a connection accepts is its reader's decision.
//
// The package knows nothing of sockets, subscriptions or routing: it turns frames into
// bytes and bytes into frames. Decoded frames point into the input buffer and are valid
// only until the caller reuses it.
package wire
