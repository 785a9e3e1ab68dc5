package udp

import (
	"time"

	"github.com/tern-mq/tern/internal/transport/arq"
)

// Config tunes a session. Zero values take the defaults shown.
type Config struct {
	// The ARQ (arq.Config). MTU is the whole UDP payload; the session header and,
	// when encrypted, the seal's overhead come out of it.
	MTU         int           // largest datagram, bytes (1200, at least 256 for the ARQ)
	AckEvery    int           // acknowledge after this many data packets (32)
	AckDelay    time.Duration // ... or this long after the first unacknowledged one (50ms)
	BundleDelay time.Duration // wait up to this long to fill a datagram; <0 disables (1ms)
	Window      int           // packets the receiver buffers out of order (4096, at most 2^21)
	MaxMessage  int           // largest message (1 MiB)
	MaxQueued   int           // bytes queued for sending before a write waits (16 MiB)
	MinRTO      time.Duration // 200ms
	MaxRTO      time.Duration // 10s
	InitialRTO  time.Duration // 1s (RFC 6298)

	// Sessions (Conn, Listener).
	KeepAlive   time.Duration // ping after this long with nothing sent (5s)
	IdleTimeout time.Duration // end a session that heard nothing this long (30s): the longest outage it rides out

	// Encryption (noise.go), off while the keys are zero.
	PrivateKey Key // listener: its static key; with one it accepts only encrypted sessions
	ServerKey  Key // dialer: the listener's public key; with one the session is encrypted and the server proven
	PSK        Key // both sides, optional: a shared secret that also authenticates the client
}

// defaults sets the session's own defaults; arq.New sets the ARQ's.
func (c *Config) defaults() {
	if c.KeepAlive == 0 {
		c.KeepAlive = 5 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
}

// arq is the ARQ's part of the configuration.
func (c *Config) arq() arq.Config {
	return arq.Config{
		MTU: c.MTU, AckEvery: c.AckEvery, AckDelay: c.AckDelay, BundleDelay: c.BundleDelay,
		Window: c.Window, MaxMessage: c.MaxMessage, MaxQueued: c.MaxQueued,
		MinRTO: c.MinRTO, MaxRTO: c.MaxRTO, InitialRTO: c.InitialRTO,
	}
}

// Errors a Write can return, from the ARQ.
var (
	ErrTooLarge  = arq.ErrTooLarge  // a message larger than MaxMessage
	ErrQueueFull = arq.ErrQueueFull // the send queue is full
)

// Stats counts what a session sent (arq.Stats) and what it dropped.
type Stats struct {
	arq.Stats

	// Encrypted sessions (Conn) only: datagrams dropped before the ARQ saw them.
	Forged   uint64 // failed authentication
	Replayed uint64 // a counter already seen or older than the replay window
}

// add sums the counters of o into s (not the gauges).
func (s *Stats) add(o *Stats) {
	s.Stats.Add(&o.Stats)
	s.Forged += o.Forged
	s.Replayed += o.Replayed
}
