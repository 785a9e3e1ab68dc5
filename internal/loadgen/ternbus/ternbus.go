// Package ternbus adapts Tern's Go client to loadgen.Bus, for `tern bench` and the
// side-by-side benchmarks in bench/.
package ternbus

import (
	"context"

	tern "github.com/tern-mq/tern/client/go"

	"github.com/tern-mq/tern/internal/loadgen"
)

// Bus is one Tern connection.
type Bus struct {
	nc *tern.Conn
}

var _ loadgen.Bus = (*Bus)(nil)

// unlimited is the client-side pending limit used for subscriptions: a burst is
// queued in the client rather than dropped there, so the benchmark measures the
// server.
const unlimited = 1 << 40

// Dial connects to url (tern://host:port); name identifies the connection to the
// server.
func Dial(url, name string) (*Bus, error) {
	nc, err := tern.Connect(url, tern.Name(name), tern.NoReconnect(), Unlimited())
	if err != nil {
		return nil, err
	}
	return &Bus{nc: nc}, nil
}

// New wraps a connection made with options of the caller's choosing (for example one
// that reconnects). Subscriptions it makes keep the connection's pending limits.
func New(nc *tern.Conn) *Bus { return &Bus{nc: nc} }

// Unlimited is the option Dial uses to lift the client-side pending limits.
func Unlimited() tern.Option { return tern.PendingLimits(unlimited, unlimited) }

// Dialer returns a loadgen.Dialer connecting to url.
func Dialer(url string) loadgen.Dialer {
	return func(name string) (loadgen.Bus, error) { return Dial(url, name) }
}

// ServerVersion is the version the connected server announced.
func (b *Bus) ServerVersion() string { return b.nc.ServerInfo().Version }

// Conn is the underlying client connection.
func (b *Bus) Conn() *tern.Conn { return b.nc }

// Publish sends data to subject.
func (b *Bus) Publish(subject string, data []byte) error { return b.nc.Publish(subject, data) }

// Subscribe calls handler with the payload of every message on subject.
func (b *Bus) Subscribe(subject string, handler func([]byte)) (func() error, error) {
	sub, err := b.nc.Subscribe(subject, func(m *tern.Msg) { handler(m.Data) })
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

// QueueSubscribe joins queue group queue on subject.
func (b *Bus) QueueSubscribe(subject, queue string, handler func([]byte)) (func() error, error) {
	sub, err := b.nc.QueueSubscribe(subject, queue, func(m *tern.Msg) { handler(m.Data) })
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

// Request sends data to subject and waits for one reply.
func (b *Bus) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := b.nc.Request(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Respond answers every request on subject (in queue group queue, if set) with
// handler's result.
func (b *Bus) Respond(subject, queue string, handler func([]byte) []byte) (func() error, error) {
	cb := func(m *tern.Msg) {
		if m.Reply == "" {
			return
		}
		_ = m.Respond(handler(m.Data))
	}
	var (
		sub *tern.Subscription
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
	return sub.Unsubscribe, nil
}

// Flush waits until the server has processed everything sent so far.
func (b *Bus) Flush() error { return b.nc.Flush() }

// Close closes the connection.
func (b *Bus) Close() error {
	b.nc.Close()
	return nil
}
