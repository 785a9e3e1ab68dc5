package tern

import (
	"errors"
	"time"
)

// Drain unsubscribes every subscription, lets their queued messages be handled,
// flushes what was published, and closes the connection.
func (c *Conn) Drain() error {
	c.mu.Lock()
	if c.status == Closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	deadline := time.Now().Add(c.opts.DrainTimeout)
	var errs []error
	for _, s := range subs {
		if s.kind == internalSub {
			continue
		}
		if err := s.Unsubscribe(); err != nil && !errors.Is(err, ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	for _, s := range subs {
		select {
		case <-s.done:
		case <-time.After(time.Until(deadline)):
			errs = append(errs, ErrDrainTimeout)
		}
	}
	c.mu.Lock()
	if c.status == Connected {
		c.status = Draining
	}
	c.mu.Unlock()
	if err := c.FlushTimeout(max(time.Until(deadline), time.Millisecond)); err != nil {
		errs = append(errs, err)
	}
	c.Close()
	return errors.Join(errs...)
}
