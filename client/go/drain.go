package tern

import (
	"errors"
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// Drain closes the connection gracefully: it unsubscribes every subscription, lets
// the messages already on their way and those queued in the client be handled, sends
// what was published (handlers may still publish and request meanwhile), waits for
// the server to have it all, and closes. The whole is bounded by DrainTimeout; past it
// Drain closes anyway and returns ErrDrainTimeout. New subscriptions fail with
// ErrConnectionDraining while it runs. A SubscribeSync subscription counts as drained
// once NextMsg has emptied its queue.
func (c *Conn) Drain() error {
	if c == nil {
		return ErrInvalidConnection
	}
	c.mu.Lock()
	switch c.status {
	case Closed:
		c.mu.Unlock()
		return ErrConnectionClosed
	case Draining:
		c.mu.Unlock()
		return ErrConnectionDraining
	case Reconnecting, Connecting:
		// Nothing can be drained from a server we are not connected to.
		c.closeLocked(nil)
		return ErrConnectionLost
	}
	c.status = Draining
	c.mu.Unlock()
	deadline := time.Now().Add(c.opts.DrainTimeout)

	c.subsMu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		if s.kind != internalSub {
			subs = append(subs, s)
		}
	}
	c.subsMu.Unlock()

	// One round trip covers every UNSUB: once the PONG is back, every message the
	// server sent for these subscriptions has arrived.
	var errs []error
	for _, s := range subs {
		_ = c.control(nil, func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, 0) }, ackQuiet)
	}
	if err := c.FlushTimeout(max(time.Until(deadline), time.Millisecond)); err != nil {
		errs = append(errs, err)
	}
	for _, s := range subs {
		c.removeSub(s)
	}
	for _, s := range subs {
		if err := s.waitDone(deadline); err != nil {
			errs = append(errs, err)
			break
		}
	}
	if err := c.FlushTimeout(max(time.Until(deadline), time.Millisecond)); err != nil {
		errs = append(errs, err)
	}
	c.Close()
	for i, err := range errs {
		if errors.Is(err, ErrTimeout) {
			errs[i] = ErrDrainTimeout
		}
	}
	return errors.Join(errs...)
}
