package streambench_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tern-mq/tern/bench/internal/streambench"
)

// memBroker is an in-process stream broker for testing the engine without a server:
// exact by default, with faults to inject.
type memBroker struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a message is stored
	streams map[string]*memStream

	// Faults.
	failEvery   int           // every n-th async publish is refused
	hangEvery   int           // every n-th async publish is never acknowledged
	dupEvery    int           // every n-th delivery is delivered twice
	swapReplay  bool          // replay delivers messages 1 and 2 the other way round
	ignoreAcks  bool          // acks are accepted but change nothing
	lazyCopy    bool          // async publishes keep the caller's slice and copy it when acknowledged
	blockAsync  chan struct{} // when set, PublishAsync blocks until it is closed
	lazy        chan lazyPub
	asyncCalls  int
	deliveries  int
	deleteCalls int
}

type lazyPub struct {
	subject string
	data    []byte
	f       *memFuture
}

// lazyWorker stores lazy publishes a little later, one at a time.
func (b *memBroker) lazyWorker(in <-chan lazyPub) {
	for p := range in {
		time.Sleep(20 * time.Microsecond)
		b.mu.Lock()
		p.f.err = b.store(p.subject, p.data)
		b.mu.Unlock()
		close(p.f.done)
	}
}

type memStream struct {
	spec      streambench.StreamSpec
	msgs      [][]byte
	acked     []bool
	stored    int
	consumers map[string]*memConsumer
}

type memConsumer struct {
	spec streambench.ConsumerSpec
	next int
}

func newMemBroker() *memBroker {
	return &memBroker{changed: make(chan struct{}), streams: map[string]*memStream{}}
}

func (b *memBroker) Connect(ctx context.Context, name string) (streambench.Conn, error) {
	return &memConn{b: b}, nil
}

func (b *memBroker) streamCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.streams)
}

// store appends data to the stream capturing subject; b.mu is held.
func (b *memBroker) store(subject string, data []byte) error {
	for _, s := range b.streams {
		if slices.Contains(s.spec.Subjects, subject) {
			s.msgs = append(s.msgs, slices.Clone(data))
			s.acked = append(s.acked, false)
			s.stored++
			close(b.changed)
			b.changed = make(chan struct{})
			return nil
		}
	}
	return fmt.Errorf("no stream captures %q", subject)
}

type memConn struct {
	b      *memBroker
	closed bool
}

func (c *memConn) ServerVersion() string { return "mem" }

func (c *memConn) CreateStream(ctx context.Context, spec streambench.StreamSpec) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if spec.Sync != streambench.SyncDefault {
		return streambench.ErrUnsupported
	}
	if _, ok := c.b.streams[spec.Name]; ok {
		return errors.New("stream exists")
	}
	c.b.streams[spec.Name] = &memStream{spec: spec, consumers: map[string]*memConsumer{}}
	return nil
}

func (c *memConn) DeleteStream(ctx context.Context, name string) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	c.b.deleteCalls++
	if _, ok := c.b.streams[name]; !ok {
		return errors.New("no such stream")
	}
	delete(c.b.streams, name)
	return nil
}

func (c *memConn) StreamState(ctx context.Context, name string) (streambench.StreamState, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	s, ok := c.b.streams[name]
	if !ok {
		return streambench.StreamState{}, errors.New("no such stream")
	}
	return streambench.StreamState{Msgs: uint64(s.stored)}, nil
}

type memFuture struct {
	done chan struct{}
	err  error
}

func (f *memFuture) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *memConn) PublishAsync(subject string, data []byte) (streambench.PubFuture, error) {
	b := c.b
	if b.blockAsync != nil {
		<-b.blockAsync
		return nil, errors.New("blocked")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asyncCalls++
	f := &memFuture{done: make(chan struct{})}
	switch {
	case b.hangEvery > 0 && b.asyncCalls%b.hangEvery == 0:
		return f, nil
	case b.failEvery > 0 && b.asyncCalls%b.failEvery == 0:
		f.err = errors.New("refused")
		close(f.done)
		return f, nil
	case b.lazyCopy:
		// Like a client that keeps the message until its ack: read the caller's
		// buffer only later, in publish order.
		if b.lazy == nil {
			b.lazy = make(chan lazyPub, streambench.MaxWindow)
			go b.lazyWorker(b.lazy)
		}
		b.lazy <- lazyPub{subject, data, f}
		return f, nil
	}
	f.err = b.store(subject, data)
	close(f.done)
	return f, nil
}

func (c *memConn) PublishSync(ctx context.Context, subject string, data []byte) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.b.store(subject, data)
}

func (c *memConn) AddConsumer(ctx context.Context, stream string, spec streambench.ConsumerSpec) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	s, ok := c.b.streams[stream]
	if !ok {
		return errors.New("no such stream")
	}
	s.consumers[spec.Durable] = &memConsumer{spec: spec}
	return nil
}

func (c *memConn) Pull(ctx context.Context, stream, consumer string) (streambench.Consumer, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	s, ok := c.b.streams[stream]
	if !ok || s.consumers[consumer] == nil {
		return nil, errors.New("no such consumer")
	}
	return &memPuller{b: c.b, s: s, c: s.consumers[consumer]}, nil
}

func (c *memConn) Replay(ctx context.Context, stream string, handler func([]byte) bool) error {
	c.b.mu.Lock()
	s, ok := c.b.streams[stream]
	var msgs [][]byte
	if ok {
		msgs = slices.Clone(s.msgs)
	}
	swap := c.b.swapReplay
	c.b.mu.Unlock()
	if !ok {
		return errors.New("no such stream")
	}
	if swap && len(msgs) > 1 {
		msgs[0], msgs[1] = msgs[1], msgs[0]
	}
	for _, m := range msgs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !handler(m) {
			return nil
		}
	}
	<-ctx.Done() // nothing more will come
	return ctx.Err()
}

func (c *memConn) Close() error {
	c.closed = true
	return nil
}

type memPuller struct {
	b *memBroker
	s *memStream
	c *memConsumer
}

type memMsg struct {
	p    *memPuller
	data []byte
	idx  int
}

func (m memMsg) Data() []byte { return m.data }

func (m memMsg) Ack() error {
	b := m.p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ignoreAcks {
		return nil
	}
	s := m.p.s
	from := m.idx
	if m.p.c.spec.AckPolicy == streambench.AckAll {
		from = 0
	}
	for i := from; i <= m.idx; i++ {
		if !s.acked[i] {
			s.acked[i] = true
			if s.spec.Retention == streambench.RetainWorkQueue {
				s.stored--
			}
		}
	}
	return nil
}

// Fetch hands over what is there, waiting up to maxWait for the first message.
func (p *memPuller) Fetch(ctx context.Context, batch int, maxWait time.Duration, handler func(streambench.Msg)) (int, error) {
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	n := 0
	for n < batch {
		p.b.mu.Lock()
		var got []memMsg
		for n+len(got) < batch && p.c.next < len(p.s.msgs) {
			i := p.c.next
			p.c.next++
			got = append(got, memMsg{p: p, data: p.s.msgs[i], idx: i})
			p.b.deliveries++
			if p.b.dupEvery > 0 && p.b.deliveries%p.b.dupEvery == 0 && n+len(got) < batch {
				got = append(got, memMsg{p: p, data: p.s.msgs[i], idx: i})
			}
		}
		changed := p.b.changed
		p.b.mu.Unlock()
		for _, m := range got {
			handler(m)
			n++
		}
		if n >= batch {
			break
		}
		select {
		case <-changed:
		case <-timer.C:
			return n, nil
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

func (p *memPuller) Close() error { return nil }
