package tern

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tern-mq/tern/internal/wire"
)

// MsgHandler is called for each message of an asynchronous subscription.
type MsgHandler func(*Msg)

// SubOpt changes one setting of a subscription.
type SubOpt func(*Subscription)

// Filter makes the server deliver only the messages the expression accepts, e.g.
// `hdr.sender == "s1" && size <= 512` (the language is in docs/protocol.md). An
// expression that does not compile makes Subscribe fail with ErrBadSubscription.
func Filter(expr string) SubOpt { return func(s *Subscription) { s.filter = expr } }

// Queue makes the subscription a member of queue group name: each message goes to
// one member of the group.
func Queue(name string) SubOpt { return func(s *Subscription) { s.queue = name } }

// SubscribeAck makes Subscribe wait for the server's acknowledgement, so that a bad
// subject, queue name or filter is returned by Subscribe itself. This is always the
// case — subscriptions are rare and a synchronous error is worth a round trip — and
// the option only states it.
func SubscribeAck() SubOpt { return func(*Subscription) {} }

type subKind int

const (
	asyncSub    subKind = iota // handler on the subscription's goroutine
	chanSub                    // the caller's channel
	syncSub                    // NextMsg
	internalSub                // handler in the reader; the request multiplexer
)

// Subscription is interest in a subject. Its methods are safe for concurrent use.
type Subscription struct {
	conn    *Conn
	sid     uint64
	subject string
	queue   string
	filter  string
	kind    subKind
	cb      MsgHandler
	ch      chan *Msg

	max       atomic.Int64 // AutoUnsubscribe budget, 0 = none
	delivered atomic.Int64
	dropped   atomic.Uint64
	slow      atomic.Bool // in a slow-consumer episode (reported once per episode)

	// The pending queue of async and sync subscriptions: the reader appends, the
	// delivery goroutine or NextMsg takes.
	pendingMsgs  atomic.Int64
	pendingBytes atomic.Int64
	mu           sync.Mutex
	cond         *sync.Cond    // async: wakes the delivery goroutine
	notify       chan struct{} // sync: wakes NextMsg
	head, tail   *Msg
	closed       bool
	discard      atomic.Bool   // Close: queued messages are not delivered
	done         chan struct{} // closed when delivery has ended
	stopped      chan struct{} // closed by close

	// Owned by the connection's reader: where newMsg carves messages from.
	msgSlab []Msg
	arena   []byte
}

// subscribe registers the subscription and sends SUB, waiting for the server's answer.
func (c *Conn) subscribe(subject string, kind subKind, cb MsgHandler, ch chan *Msg, opts []SubOpt) (*Subscription, error) {
	if c == nil {
		return nil, ErrInvalidConnection
	}
	if subject == "" {
		return nil, ErrBadSubject
	}
	s := &Subscription{conn: c, subject: subject, kind: kind, cb: cb, ch: ch,
		done: make(chan struct{}), stopped: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	switch kind {
	case asyncSub:
		s.cond = sync.NewCond(&s.mu)
	case syncSub:
		s.notify = make(chan struct{}, 1)
	}
	s.sid = c.ssid.Add(1)
	register := func() error {
		if c.status == Draining && kind != internalSub {
			return ErrConnectionDraining
		}
		c.subsMu.Lock()
		c.subs[s.sid] = s
		c.subsMu.Unlock()
		return nil
	}
	err := c.control(register, func(dst []byte, id uint64) []byte {
		return wire.AppendSub(dst, id, s.sid, s.subject, s.queue, s.filter)
	}, ackWait)
	if errors.Is(err, ErrConnectionLost) {
		// The link broke before the answer; the reconnect re-creates the
		// subscription from the table.
		err = nil
	}
	if err != nil {
		c.subsMu.Lock()
		delete(c.subs, s.sid)
		c.subsMu.Unlock()
		if errors.Is(err, ErrTimeout) {
			// The server may still create it: make sure it goes away.
			_ = c.control(nil, func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, 0) }, ackQuiet)
		}
		var se *wire.Error
		if errors.As(err, &se) {
			if se.Code == wire.CodeBadSubject {
				return nil, fmt.Errorf("%w: %w: %w", ErrBadSubscription, ErrBadSubject, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrBadSubscription, err)
		}
		return nil, err
	}
	if kind == asyncSub {
		go s.run()
	} else if kind != syncSub {
		close(s.done)
	}
	return s, nil
}

// Subscribe calls cb for every message on subject (wildcards allowed: "*" matches one
// token, ">" the rest). The calls are made one at a time, in order, on a goroutine of
// the subscription. Subscribe returns once the server has accepted the subscription,
// so a bad subject or filter is reported here (wrapping ErrBadSubscription and the
// *ServerError); while the client is reconnecting it returns at once and the
// subscription is created with the others when the link is back.
func (c *Conn) Subscribe(subject string, cb MsgHandler, opts ...SubOpt) (*Subscription, error) {
	if cb == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrBadSubscription)
	}
	return c.subscribe(subject, asyncSub, cb, nil, opts)
}

// QueueSubscribe is Subscribe as a member of queue group queue: each message goes to
// one member of the group.
func (c *Conn) QueueSubscribe(subject, queue string, cb MsgHandler, opts ...SubOpt) (*Subscription, error) {
	return c.Subscribe(subject, cb, append(opts, Queue(queue))...)
}

// ChanSubscribe sends every message on subject to ch, from the connection's reader,
// without blocking: when ch is full the message is dropped and ErrSlowConsumer
// reported. ch is never closed by the client.
func (c *Conn) ChanSubscribe(subject string, ch chan *Msg, opts ...SubOpt) (*Subscription, error) {
	if ch == nil {
		return nil, fmt.Errorf("%w: nil channel", ErrBadSubscription)
	}
	return c.subscribe(subject, chanSub, nil, ch, opts)
}

// ChanQueueSubscribe is ChanSubscribe in queue group queue.
func (c *Conn) ChanQueueSubscribe(subject, queue string, ch chan *Msg, opts ...SubOpt) (*Subscription, error) {
	return c.ChanSubscribe(subject, ch, append(opts, Queue(queue))...)
}

// SubscribeSync subscribes for reading with NextMsg. Messages wait in a queue bounded
// by PendingLimits.
func (c *Conn) SubscribeSync(subject string, opts ...SubOpt) (*Subscription, error) {
	return c.subscribe(subject, syncSub, nil, nil, opts)
}

// QueueSubscribeSync is SubscribeSync in queue group queue.
func (c *Conn) QueueSubscribeSync(subject, queue string, opts ...SubOpt) (*Subscription, error) {
	return c.SubscribeSync(subject, append(opts, Queue(queue))...)
}

// newMsg copies a MSG frame: one allocation for the subject, reply and payload bytes,
// one for the Msg, and the header map if there are headers.
func (s *Subscription) newMsg(f *wire.Frame) *Msg {
	buf := s.alloc(len(f.Subject) + len(f.Reply) + len(f.Payload))
	n := copy(buf, f.Subject)
	n += copy(buf[n:], f.Reply)
	copy(buf[n:], f.Payload)
	if len(s.msgSlab) == 0 {
		s.msgSlab = make([]Msg, msgSlabLen)
	}
	m := &s.msgSlab[0]
	s.msgSlab = s.msgSlab[1:]
	*m = Msg{Sub: s, Data: buf[n:len(buf):len(buf)]}
	// The subject and reply bytes are never exposed as a slice, so strings over them
	// stay immutable.
	if len(f.Subject) > 0 {
		m.Subject = unsafe.String(&buf[0], len(f.Subject))
	}
	if len(f.Reply) > 0 {
		m.Reply = unsafe.String(&buf[len(f.Subject)], len(f.Reply))
	}
	if len(f.Header) > 0 {
		m.Header = decodeHeader(f.Header)
	}
	return m
}

// Messages are carved out of slabs, so that a stream of small messages costs an
// allocation per slab rather than two per message: a Msg kept by the application
// keeps its slab (at most msgSlabLen messages, or msgArenaSize bytes) from the
// garbage collector.
const (
	msgSlabLen   = 32
	msgArenaSize = 32 << 10
)

// alloc returns n bytes of the subscription's arena, for one message's subject,
// reply and payload. Only the connection's reader calls it.
func (s *Subscription) alloc(n int) []byte {
	if n > msgArenaSize/4 {
		return make([]byte, n)
	}
	if cap(s.arena)-len(s.arena) < n {
		s.arena = make([]byte, 0, msgArenaSize)
	}
	off := len(s.arena)
	s.arena = s.arena[:off+n]
	return s.arena[off : off+n : off+n]
}

// deliver runs in the connection's reader for every MSG of the subscription.
func (s *Subscription) deliver(f *wire.Frame) {
	budget := s.max.Load()
	if budget > 0 && s.delivered.Load() >= budget {
		return
	}
	switch s.kind {
	case internalSub:
		s.cb(s.newMsg(f))
	case chanSub:
		if len(s.ch) == cap(s.ch) {
			s.slowConsumer()
			return
		}
		select {
		case s.ch <- s.newMsg(f):
		default:
			s.slowConsumer()
			return
		}
	default:
		o := &s.conn.opts
		size := int64(len(f.Payload))
		if s.pendingMsgs.Load() >= int64(o.PendingMsgsLimit) || s.pendingBytes.Load()+size > int64(o.PendingBytesLimit) {
			s.slowConsumer()
			return
		}
		m := s.newMsg(f)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.pendingMsgs.Add(1)
		s.pendingBytes.Add(size)
		if s.tail == nil {
			s.head = m
		} else {
			s.tail.next = m
		}
		s.tail = m
		s.mu.Unlock()
		if s.kind == asyncSub {
			s.cond.Signal()
		} else {
			s.wake()
		}
	}
	if s.slow.Load() {
		s.slow.Store(false)
	}
	if n := s.delivered.Add(1); budget > 0 && n >= budget {
		s.conn.removeSub(s)
	}
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// slowConsumer counts a dropped message and reports the start of an episode.
func (s *Subscription) slowConsumer() {
	s.dropped.Add(1)
	if !s.slow.Swap(true) {
		s.conn.asyncError(s, fmt.Errorf("%w on %q", ErrSlowConsumer, s.subject))
	}
}

// run is the delivery goroutine of an asynchronous subscription: it takes the whole
// queue at once and runs the handler for each message in order.
func (s *Subscription) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for s.head == nil && !s.closed {
			s.cond.Wait()
		}
		batch := s.head
		s.head, s.tail = nil, nil
		s.mu.Unlock()
		if batch == nil { // closed and empty
			return
		}
		for m := batch; m != nil; {
			next := m.next
			m.next = nil
			if !s.discard.Load() {
				s.cb(m)
			}
			s.pendingMsgs.Add(-1)
			s.pendingBytes.Add(-int64(len(m.Data)))
			m = next
		}
	}
}

// close ends the subscription on the client side. Messages already queued are still
// delivered unless discard is set.
func (s *Subscription) close(discard bool) {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	if discard {
		s.discard.Store(true)
		if s.kind == syncSub {
			s.head, s.tail = nil, nil
			s.pendingMsgs.Store(0)
			s.pendingBytes.Store(0)
		}
	}
	s.mu.Unlock()
	if already {
		return
	}
	close(s.stopped)
	switch s.kind {
	case asyncSub:
		s.cond.Broadcast()
	case syncSub:
		close(s.done)
	}
}

// removeSub forgets the subscription and closes it, if it is still registered.
func (c *Conn) removeSub(s *Subscription) {
	c.subsMu.Lock()
	ok := c.subs[s.sid] == s
	if ok {
		delete(c.subs, s.sid)
	}
	c.subsMu.Unlock()
	if ok {
		s.close(false)
	}
}

// Unsubscribe removes the subscription. It returns at once (the UNSUB frame is sent
// by the flusher); messages already queued in the client are still delivered, later
// ones are not. Use Drain to also receive the messages already on their way.
func (s *Subscription) Unsubscribe() error {
	if s == nil || s.conn == nil {
		return ErrBadSubscription
	}
	c := s.conn
	var removed bool
	err := c.control(func() error {
		c.subsMu.Lock()
		removed = c.subs[s.sid] == s
		if removed {
			delete(c.subs, s.sid)
		}
		c.subsMu.Unlock()
		if !removed {
			return ErrBadSubscription
		}
		return nil
	}, func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, 0) }, ackQuiet)
	if removed {
		s.close(false)
	}
	if errors.Is(err, ErrConnectionClosed) {
		return nil
	}
	return err
}

// AutoUnsubscribe removes the subscription after it has received n messages in total
// (counting those already received). The server stops sending at n as well; the
// budget left is carried over a reconnect.
func (s *Subscription) AutoUnsubscribe(n int) error {
	if s == nil || s.conn == nil {
		return ErrBadSubscription
	}
	if n <= 0 {
		return fmt.Errorf("%w: AutoUnsubscribe(%d)", ErrBadSubscription, n)
	}
	c := s.conn
	err := c.control(func() error {
		c.subsMu.Lock()
		valid := c.subs[s.sid] == s
		c.subsMu.Unlock()
		if !valid {
			return ErrBadSubscription
		}
		s.max.Store(int64(n))
		return nil
	}, func(dst []byte, id uint64) []byte {
		// Counted from when the server reads the frame, so the client's count decides.
		left := int64(n) - s.delivered.Load()
		if left <= 0 {
			return wire.AppendUnsub(dst, id, s.sid, 0)
		}
		return wire.AppendUnsub(dst, id, s.sid, uint64(left))
	}, ackQuiet)
	if err == nil && s.delivered.Load() >= int64(n) {
		c.removeSub(s)
	}
	return err
}

// Drain unsubscribes without losing the messages already on their way: it sends
// UNSUB, waits for the server to confirm it (everything the server sent before
// arrives first), then waits until every queued message has been handled, for at
// most DrainTimeout.
func (s *Subscription) Drain() error {
	if s == nil || s.conn == nil {
		return ErrBadSubscription
	}
	if !s.IsValid() {
		return ErrBadSubscription
	}
	c := s.conn
	deadline := time.Now().Add(c.opts.DrainTimeout)
	err := c.control(nil, func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, 0) }, ackWait)
	c.removeSub(s)
	var se *wire.Error
	if errors.As(err, &se) && se.Code == wire.CodeUnknownSID {
		err = nil // it had reached its AutoUnsubscribe budget
	}
	if err != nil && !errors.Is(err, ErrConnectionLost) {
		return err
	}
	return s.waitDone(deadline)
}

// waitDone waits until delivery has ended (asynchronous subscriptions) or the queue is
// empty (synchronous ones), until deadline.
func (s *Subscription) waitDone(deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	if s.kind == syncSub {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for s.pendingMsgs.Load() > 0 {
			select {
			case <-tick.C:
			case <-t.C:
				return ErrDrainTimeout
			}
		}
		return nil
	}
	select {
	case <-s.done:
		return nil
	case <-t.C:
		return ErrDrainTimeout
	}
}

// NextMsg returns the next message of a SubscribeSync subscription, waiting up to
// timeout. It returns ErrTimeout when none arrives in time, and ErrBadSubscription
// once the subscription has ended and its queue is empty (ErrConnectionClosed after
// Close).
func (s *Subscription) NextMsg(timeout time.Duration) (*Msg, error) {
	if s == nil || s.kind != syncSub {
		return nil, ErrSyncSubRequired
	}
	if m := s.pop(); m != nil {
		return m, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	return s.next(t.C, nil)
}

// NextMsgContext is NextMsg bounded by ctx.
func (s *Subscription) NextMsgContext(ctx context.Context) (*Msg, error) {
	if s == nil || s.kind != syncSub {
		return nil, ErrSyncSubRequired
	}
	if m := s.pop(); m != nil {
		return m, nil
	}
	return s.next(nil, ctx)
}

func (s *Subscription) next(timeout <-chan time.Time, ctx context.Context) (*Msg, error) {
	var ctxDone <-chan struct{}
	if ctx != nil {
		ctxDone = ctx.Done()
	}
	for {
		select {
		case <-s.notify:
		case <-s.stopped:
		case <-timeout:
			return nil, fmt.Errorf("%w waiting for a message", ErrTimeout)
		case <-ctxDone:
			return nil, ctxErr(ctx)
		}
		if m := s.pop(); m != nil {
			return m, nil
		}
		select {
		case <-s.stopped:
			if s.discard.Load() {
				return nil, ErrConnectionClosed
			}
			return nil, ErrBadSubscription
		default:
		}
	}
}

// pop takes the first queued message of a sync subscription, or nil.
func (s *Subscription) pop() *Msg {
	s.mu.Lock()
	m := s.head
	if m != nil {
		s.head = m.next
		if s.head == nil {
			s.tail = nil
		} else {
			s.wake() // more for another waiter
		}
		m.next = nil
	}
	s.mu.Unlock()
	if m != nil {
		s.pendingMsgs.Add(-1)
		s.pendingBytes.Add(-int64(len(m.Data)))
	}
	return m
}

// Pending reports the messages and payload bytes queued in the client for the
// subscription (for ChanSubscribe, the channel's length and 0).
func (s *Subscription) Pending() (msgs, bytes int) {
	if s.kind == chanSub {
		return len(s.ch), 0
	}
	return int(s.pendingMsgs.Load()), int(s.pendingBytes.Load())
}

// Dropped reports the messages dropped because the subscription was too slow.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Delivered reports the messages handed to the subscription's queue, channel or
// handler.
func (s *Subscription) Delivered() int64 { return s.delivered.Load() }

// Subject is the subscribed subject.
func (s *Subscription) Subject() string { return s.subject }

// Queue is the queue group, or "".
func (s *Subscription) Queue() string { return s.queue }

// FilterExpr is the server-side filter expression, or "".
func (s *Subscription) FilterExpr() string { return s.filter }

// IsValid reports whether the subscription is still active.
func (s *Subscription) IsValid() bool {
	if s == nil || s.conn == nil {
		return false
	}
	s.conn.subsMu.Lock()
	defer s.conn.subsMu.Unlock()
	return s.conn.subs[s.sid] == s
}
