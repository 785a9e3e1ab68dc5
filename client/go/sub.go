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

// Filter makes the server deliver only messages the expression accepts, e.g.
// `hdr.sender == "s1" && size <= 512` (see docs/protocol.md for the language).
func Filter(expr string) SubOpt { return func(s *Subscription) { s.filter = expr } }

// Queue makes the subscription a member of a queue group.
func Queue(name string) SubOpt { return func(s *Subscription) { s.queue = name } }

type subKind int

const (
	asyncSub subKind = iota
	chanSub
	syncSub
	internalSub // runs in the reader; used by the request multiplexer
)

// Subscription is interest in a subject.
type Subscription struct {
	conn    *Conn
	sid     uint64
	subject string
	queue   string
	filter  string
	kind    subKind
	cb      MsgHandler
	ch      chan *Msg
	max     int64 // auto-unsubscribe budget, 0 = none

	delivered atomic.Int64
	dropped   atomic.Uint64

	mu           sync.Mutex
	cond         *sync.Cond
	head, tail   *Msg
	pendingMsgs  int
	pendingBytes int
	closed       bool
	done         chan struct{} // closed when the delivery goroutine ends
	stopped      chan struct{} // closed by close; the message channel itself never is
	slowReported bool
}

func (c *Conn) subscribe(subject string, kind subKind, cb MsgHandler, ch chan *Msg, opts []SubOpt) (*Subscription, error) {
	if subject == "" {
		return nil, ErrBadSubject
	}
	s := &Subscription{conn: c, subject: subject, kind: kind, cb: cb, ch: ch, done: make(chan struct{}), stopped: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.cond = sync.NewCond(&s.mu)
	s.sid = c.ssid.Add(1)
	c.mu.Lock()
	if c.status == Closed {
		c.mu.Unlock()
		return nil, ErrConnectionClosed
	}
	c.subs[s.sid] = s
	c.mu.Unlock()
	if kind == asyncSub {
		go s.run()
	} else {
		close(s.done)
	}
	err := c.control(func(dst []byte, id uint64) []byte {
		return wire.AppendSub(dst, id, s.sid, s.subject, s.queue, s.filter)
	})
	if err != nil {
		c.mu.Lock()
		delete(c.subs, s.sid)
		c.mu.Unlock()
		s.close()
		var se *wire.Error
		if errors.As(err, &se) && (se.Code == wire.CodeBadSubject || se.Code == wire.CodeBadQueue || se.Code == wire.CodeBadFilter) {
			return nil, fmt.Errorf("%w: %w", ErrBadSubscription, err)
		}
		return nil, err
	}
	return s, nil
}

// Subscribe calls cb for every message on subject, one at a time, in order. It
// returns once the server has accepted the subscription, so a bad subject or filter
// is reported here.
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

// ChanSubscribe sends every message on subject to ch; when ch is full the message is
// dropped and ErrSlowConsumer reported.
func (c *Conn) ChanSubscribe(subject string, ch chan *Msg, opts ...SubOpt) (*Subscription, error) {
	return c.subscribe(subject, chanSub, nil, ch, opts)
}

// ChanQueueSubscribe is ChanSubscribe in queue group queue.
func (c *Conn) ChanQueueSubscribe(subject, queue string, ch chan *Msg, opts ...SubOpt) (*Subscription, error) {
	return c.ChanSubscribe(subject, ch, append(opts, Queue(queue))...)
}

// SubscribeSync subscribes for reading with NextMsg.
func (c *Conn) SubscribeSync(subject string, opts ...SubOpt) (*Subscription, error) {
	return c.subscribe(subject, syncSub, nil, make(chan *Msg, c.opts.SyncQueueLen), opts)
}

// newMsg copies a MSG frame into one allocation for the bytes and one for the Msg.
func (s *Subscription) newMsg(f *wire.Frame) *Msg {
	buf := make([]byte, len(f.Subject)+len(f.Reply)+len(f.Payload))
	n := copy(buf, f.Subject)
	n += copy(buf[n:], f.Reply)
	copy(buf[n:], f.Payload)
	m := &Msg{Sub: s, Data: buf[n:len(buf):len(buf)]}
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

// deliver runs in the connection's reader.
func (s *Subscription) deliver(f *wire.Frame) {
	if s.max > 0 && s.delivered.Load() >= s.max {
		return
	}
	m := s.newMsg(f)
	switch s.kind {
	case internalSub:
		s.cb(m)
	case chanSub, syncSub:
		select {
		case s.ch <- m:
		default:
			s.slow()
			return
		}
	case asyncSub:
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		o := &s.conn.opts
		if s.pendingMsgs >= o.PendingMsgsLimit || s.pendingBytes+len(m.Data) > o.PendingBytesLimit {
			s.mu.Unlock()
			s.slow()
			return
		}
		if s.tail == nil {
			s.head = m
		} else {
			s.tail.next = m
		}
		s.tail = m
		s.pendingMsgs++
		s.pendingBytes += len(m.Data)
		s.mu.Unlock()
		s.cond.Signal()
	}
	if n := s.delivered.Add(1); s.max > 0 && n >= s.max {
		s.conn.removeSub(s)
	}
}

func (s *Subscription) slow() {
	s.dropped.Add(1)
	s.mu.Lock()
	first := !s.slowReported
	s.slowReported = true
	s.mu.Unlock()
	if first {
		s.conn.asyncError(s, fmt.Errorf("%w on %q", ErrSlowConsumer, s.subject))
	}
}

// run is the delivery goroutine of an asynchronous subscription.
func (s *Subscription) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for s.head == nil && !s.closed {
			s.cond.Wait()
		}
		m := s.head
		if m == nil { // closed and empty
			s.mu.Unlock()
			return
		}
		s.head = m.next
		if s.head == nil {
			s.tail = nil
		}
		m.next = nil
		s.mu.Unlock()
		s.cb(m)
		s.mu.Lock()
		s.pendingMsgs--
		s.pendingBytes -= len(m.Data)
		s.mu.Unlock()
	}
}

// close stops delivery once queued messages are handled. The message channel is
// not closed: the reader may still be handing it a message.
func (s *Subscription) close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if !already {
		close(s.stopped)
	}
	s.cond.Broadcast()
}

func (c *Conn) removeSub(s *Subscription) {
	c.mu.Lock()
	_, ok := c.subs[s.sid]
	delete(c.subs, s.sid)
	c.mu.Unlock()
	if ok {
		s.close()
	}
}

// Unsubscribe removes the subscription; messages already queued are still handled.
func (s *Subscription) Unsubscribe() error {
	c := s.conn
	c.mu.Lock()
	_, ok := c.subs[s.sid]
	delete(c.subs, s.sid)
	c.mu.Unlock()
	if !ok {
		return ErrBadSubscription
	}
	s.close()
	err := c.control(func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, 0) })
	if errors.Is(err, ErrConnectionClosed) {
		return nil
	}
	return err
}

// AutoUnsubscribe removes the subscription after n messages in total.
func (s *Subscription) AutoUnsubscribe(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: AutoUnsubscribe(%d)", ErrBadSubscription, n)
	}
	s.max = int64(n)
	left := int64(n) - s.delivered.Load()
	if left <= 0 {
		return s.Unsubscribe()
	}
	return s.conn.control(func(dst []byte, id uint64) []byte { return wire.AppendUnsub(dst, id, s.sid, uint64(left)) })
}

// Drain unsubscribes and waits until every queued message has been handled.
func (s *Subscription) Drain() error {
	if err := s.Unsubscribe(); err != nil && !errors.Is(err, ErrBadSubscription) {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(s.conn.opts.DrainTimeout):
		return ErrDrainTimeout
	}
}

// NextMsg returns the next message of a SubscribeSync subscription, waiting up to
// timeout.
func (s *Subscription) NextMsg(timeout time.Duration) (*Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.NextMsgContext(ctx)
}

// NextMsgContext is NextMsg bounded by ctx.
func (s *Subscription) NextMsgContext(ctx context.Context) (*Msg, error) {
	if s.kind != syncSub {
		return nil, ErrSyncSubRequired
	}
	// Messages that arrived before the end are still returned.
	select {
	case m := <-s.ch:
		return m, nil
	default:
	}
	select {
	case m := <-s.ch:
		return m, nil
	case <-s.stopped:
		return nil, ErrBadSubscription
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ErrTimeout
		}
		return nil, ctx.Err()
	}
}

// Pending reports the messages and bytes queued for the subscription.
func (s *Subscription) Pending() (msgs, bytes int) {
	if s.kind == chanSub || s.kind == syncSub {
		return len(s.ch), 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingMsgs, s.pendingBytes
}

// Dropped reports messages dropped because the subscription was too slow.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Delivered reports messages handed to the subscription.
func (s *Subscription) Delivered() int64 { return s.delivered.Load() }

// Subject is the subscribed subject.
func (s *Subscription) Subject() string { return s.subject }

// Queue is the queue group, or "".
func (s *Subscription) Queue() string { return s.queue }

// IsValid reports whether the subscription is still active.
func (s *Subscription) IsValid() bool {
	s.conn.mu.Lock()
	defer s.conn.mu.Unlock()
	return s.conn.subs[s.sid] == s
}
