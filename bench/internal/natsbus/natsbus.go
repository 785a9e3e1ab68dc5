// Package natsbus adapts the NATS Go client (github.com/nats-io/nats.go) to
// loadgen.Bus, so the side-by-side benchmarks drive NATS with the same workload code
// as Tern.
package natsbus

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tern-mq/tern/internal/loadgen"
)

// flushTimeout bounds Flush: after a large burst the round trip waits for the server
// to work through everything queued before it.
const flushTimeout = time.Minute

// Bus is one NATS connection.
type Bus struct {
	nc *nats.Conn
	// AsyncErrors counts errors the client reports asynchronously (for example a
	// slow consumer dropping messages on the client side).
	AsyncErrors atomic.Int64
}

var _ loadgen.Bus = (*Bus)(nil)

// Dial connects to url; name identifies the connection to the server. Options, such
// as nats.RootCAs for a tls:// URL or nats.UserInfo, come after Dial's own.
func Dial(url, name string, options ...nats.Option) (*Bus, error) {
	b := &Bus{}
	opts := append([]nats.Option{nats.Name(name), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { b.AsyncErrors.Add(1) })}, options...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	b.nc = nc
	return b, nil
}

// New wraps a connection made with options of the caller's choosing (for example one
// that reconnects). Subscriptions it makes lift the client-side pending limits as
// Dial's do; AsyncErrors counts nothing unless the caller's error handler adds to it.
func New(nc *nats.Conn) *Bus { return &Bus{nc: nc} }

// Dialer returns a loadgen.Dialer connecting to url with Dial's options and those
// given.
func Dialer(url string, options ...nats.Option) loadgen.Dialer {
	return func(name string) (loadgen.Bus, error) { return Dial(url, name, options...) }
}

// ServerVersion is the version the connected server announced.
func (b *Bus) ServerVersion() string { return b.nc.ConnectedServerVersion() }

// Publish sends data to subject; the client copies it into its write buffer.
func (b *Bus) Publish(subject string, data []byte) error { return b.nc.Publish(subject, data) }

// unlimited lifts the client-side pending limits, so a burst is queued in the client
// rather than dropped there: the benchmark measures the server.
func unlimited(sub *nats.Subscription) (func() error, error) {
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub.Unsubscribe, nil
}

// Subscribe calls handler with the payload of every message on subject.
func (b *Bus) Subscribe(subject string, handler func([]byte)) (func() error, error) {
	sub, err := b.nc.Subscribe(subject, func(m *nats.Msg) { handler(m.Data) })
	if err != nil {
		return nil, err
	}
	return unlimited(sub)
}

// QueueSubscribe joins queue group queue on subject.
func (b *Bus) QueueSubscribe(subject, queue string, handler func([]byte)) (func() error, error) {
	sub, err := b.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) { handler(m.Data) })
	if err != nil {
		return nil, err
	}
	return unlimited(sub)
}

// Request sends data to subject and waits for one reply.
func (b *Bus) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := b.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Respond answers every request on subject (in queue group queue, if set) with
// handler's result.
func (b *Bus) Respond(subject, queue string, handler func([]byte) []byte) (func() error, error) {
	cb := func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		_ = m.Respond(handler(m.Data))
	}
	var (
		sub *nats.Subscription
		err error
	)
	if queue == "" {
		sub, err = b.nc.Subscribe(subject, cb)
	} else {
		sub, err = b.nc.QueueSubscribe(subject, queue, cb)
	}
	if err != nil {
		return nil, err
	}
	return unlimited(sub)
}

// Flush waits until the server has processed everything sent so far.
func (b *Bus) Flush() error { return b.nc.FlushTimeout(flushTimeout) }

// Close closes the connection.
func (b *Bus) Close() error {
	if b.nc == nil {
		return errors.New("natsbus: not connected")
	}
	b.nc.Close()
	return nil
}
