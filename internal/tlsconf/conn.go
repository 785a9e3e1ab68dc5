package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// NewListener returns a listener whose connections are TLS servers with config
// (*Conn). Accept does no I/O: each handshake runs in the goroutine that first
// reads from or writes to its connection, and fails once timeout has passed
// (0: no bound of its own).
func NewListener(inner net.Listener, config *tls.Config, timeout time.Duration) net.Listener {
	return &listener{Listener: inner, config: config, timeout: timeout}
}

type listener struct {
	net.Listener
	config  *tls.Config
	timeout time.Duration
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Server(nc, l.config, l.timeout), nil
}

// BatchReadsListener returns a listener whose connections are read through
// BatchReads, for a TLS layer made over it elsewhere (an HTTP server needs its
// connections to be *tls.Conn itself).
func BatchReadsListener(inner net.Listener) net.Listener { return batchReadsListener{inner} }

type batchReadsListener struct{ net.Listener }

func (l batchReadsListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return BatchReads(nc), nil
}

// Conn is the server side of a TLS connection whose handshake happens once, on
// its first Read, Write or Handshake, and is bounded by the timeout it was made
// with.
type Conn struct {
	*tls.Conn
	timeout time.Duration

	done atomic.Bool // the handshake is over; err is its outcome
	mu   sync.Mutex
	err  error
}

// Client makes nc the client side of a TLS connection, read through BatchReads:
// what Tern dials over TLS (cluster routes, the Go client) goes through it.
func Client(nc net.Conn, config *tls.Config) *tls.Conn { return tls.Client(BatchReads(nc), config) }

// Server makes nc the server side of a TLS connection (see Conn).
func Server(nc net.Conn, config *tls.Config, timeout time.Duration) *Conn {
	return &Conn{Conn: tls.Server(BatchReads(nc), config), timeout: timeout}
}

// HandshakeContext runs the handshake unless it has run; it gives up when ctx
// ends or the connection's timeout passes, and the connection is then closed.
// Every later call returns the first one's outcome.
func (c *Conn) HandshakeContext(ctx context.Context) error {
	if c.done.Load() {
		return c.err
	}
	return c.handshake(ctx)
}

func (c *Conn) handshake(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done.Load() {
		if c.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		c.err = c.Conn.HandshakeContext(ctx)
		if c.err != nil {
			c.err = fmt.Errorf("tls handshake: %w", c.err)
		}
		c.done.Store(true)
	}
	return c.err
}

// Handshake is HandshakeContext without a context of its own.
func (c *Conn) Handshake() error { return c.HandshakeContext(context.Background()) }

func (c *Conn) Read(b []byte) (int, error) {
	if err := c.HandshakeContext(context.Background()); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *Conn) Write(b []byte) (int, error) {
	if err := c.HandshakeContext(context.Background()); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// PeerCertificate completes the handshake of a connection a TLS listener accepted
// (waiting at most timeout; 0: no bound) and returns the client's certificate,
// verified against the CA (and CRL) in force. It returns nil and no error for a
// connection that is not TLS, or whose client presented no certificate, or one
// that was not verified (client auth "request").
func PeerCertificate(nc net.Conn, timeout time.Duration) (*x509.Certificate, error) {
	h, ok := nc.(interface {
		HandshakeContext(context.Context) error
		ConnectionState() tls.ConnectionState
	})
	if !ok {
		return nil, nil
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := h.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls: client %s: %w", nc.RemoteAddr(), err)
	}
	cs := h.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, nil
	}
	return cs.VerifiedChains[0][0], nil
}
