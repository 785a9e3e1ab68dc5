package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/loadgen"
)

// memBroker is an in-process broker for testing the engine without a network: exact
// subject match, queue groups by round robin, one delivery goroutine per subscription.
type memBroker struct {
	mu    sync.Mutex
	subs  map[string][]*memSub
	rr    map[string]int
	inbox atomic.Uint64
	drop  int // when > 0, every drop-th published message is lost
	seq   atomic.Uint64
	// lag hides every subscription a memBus makes (not request inboxes) from
	// publishers for this long, as a subscription reaches the other nodes of a
	// cluster some time after it was made.
	lag time.Duration
}

type memSub struct {
	subject, queue string
	visible        time.Time // publishers skip it before then
	ch             chan memMsg
	done           chan struct{}
	closed         atomic.Bool
}

type memMsg struct {
	subject, reply string
	data           []byte
}

func newMemBroker() *memBroker {
	return &memBroker{subs: map[string][]*memSub{}, rr: map[string]int{}}
}

func (b *memBroker) dialer() loadgen.Dialer {
	return func(string) (loadgen.Bus, error) { return &memBus{b: b}, nil }
}

func (b *memBroker) add(subject, queue string, handler func(memMsg)) *memSub {
	s := &memSub{subject: subject, queue: queue, ch: make(chan memMsg, 4096), done: make(chan struct{})}
	go func() {
		for {
			select {
			case m := <-s.ch:
				handler(m)
			case <-s.done:
				return
			}
		}
	}()
	b.mu.Lock()
	b.subs[subject] = append(b.subs[subject], s)
	b.mu.Unlock()
	return s
}

func (b *memBroker) remove(s *memSub) {
	if s.closed.Swap(true) {
		return
	}
	b.mu.Lock()
	list := b.subs[s.subject]
	for i, x := range list {
		if x == s {
			b.subs[s.subject] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	close(s.done)
}

func (b *memBroker) publish(m memMsg) {
	if b.drop > 0 && b.seq.Add(1)%uint64(b.drop) == 0 {
		return
	}
	m.data = append([]byte(nil), m.data...)
	b.mu.Lock()
	var targets []*memSub
	groups := map[string][]*memSub{}
	now := time.Now()
	for _, s := range b.subs[m.subject] {
		if now.Before(s.visible) {
			continue
		}
		if s.queue == "" {
			targets = append(targets, s)
		} else {
			groups[s.queue] = append(groups[s.queue], s)
		}
	}
	for q, members := range groups {
		k := m.subject + " " + q
		targets = append(targets, members[b.rr[k]%len(members)])
		b.rr[k]++
	}
	b.mu.Unlock()
	for _, s := range targets {
		select {
		case s.ch <- m:
		case <-s.done:
		}
	}
}

type memBus struct {
	b      *memBroker
	mu     sync.Mutex
	subs   []*memSub
	closed atomic.Bool
}

var errClosed = errors.New("membus: closed")

func (c *memBus) track(s *memSub) func() error {
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	return func() error { c.b.remove(s); return nil }
}

func (c *memBus) Publish(subject string, data []byte) error {
	if c.closed.Load() {
		return errClosed
	}
	c.b.publish(memMsg{subject: subject, data: data})
	return nil
}

func (c *memBus) Subscribe(subject string, h func([]byte)) (func() error, error) {
	return c.QueueSubscribe(subject, "", h)
}

func (c *memBus) QueueSubscribe(subject, queue string, h func([]byte)) (func() error, error) {
	return c.track(c.lagged(c.b.add(subject, queue, func(m memMsg) { h(m.data) }))), nil
}

// lagged applies the broker's lag to a subscription just made.
func (c *memBus) lagged(s *memSub) *memSub {
	if c.b.lag > 0 {
		c.b.mu.Lock()
		s.visible = time.Now().Add(c.b.lag)
		c.b.mu.Unlock()
	}
	return s
}

func (c *memBus) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	inbox := fmt.Sprintf("_inbox.%d", c.b.inbox.Add(1))
	got := make(chan []byte, 1)
	s := c.b.add(inbox, "", func(m memMsg) {
		select {
		case got <- m.data:
		default:
		}
	})
	defer c.b.remove(s)
	c.b.publish(memMsg{subject: subject, reply: inbox, data: data})
	select {
	case d := <-got:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *memBus) Respond(subject, queue string, h func([]byte) []byte) (func() error, error) {
	return c.track(c.lagged(c.b.add(subject, queue, func(m memMsg) {
		c.b.publish(memMsg{subject: m.reply, data: h(m.data)})
	}))), nil
}

func (c *memBus) Flush() error {
	if c.closed.Load() {
		return errClosed
	}
	return nil
}

func (c *memBus) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.mu.Lock()
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	for _, s := range subs {
		c.b.remove(s)
	}
	return nil
}
