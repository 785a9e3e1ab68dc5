// Package native serves Tern's native binary protocol (package wire) on any byte
// stream — a TCP connection today, a reliable UDP session later — and translates its
// frames into broker calls.
//
// Each connection runs two goroutines. The reader decodes every frame in what one read
// returned, routes publications through the broker, and then wakes each subscriber
// connection it delivered to once (Batch.Flush). The writer sleeps until woken, takes
// the whole outbound buffer and sends it with one write, while deliveries keep
// appending to a second buffer. A connection whose pending outbound bytes exceed the
// limit is a slow consumer: by policy its new messages are dropped and counted, or it
// is disconnected; either way no publisher waits for it.
//
// The package owns connection state (handshake, subscriptions by id, keepalive, limits
// and counters). It does not own listeners or configuration files; package server does.
package native
