package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tern-mq/tern/bench/internal/jsbus"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/bench/internal/ternstream"
	tern "github.com/tern-mq/tern/client/go"
)

// ackTimeout is how long a publisher waits for one attempt's acknowledgement before
// counting it failed (and retrying): Tern's client fails an async publish after its
// APITimeout, 5 s by default; nats.go's jetstream package has no such limit by
// default, so WithPublishAsyncTimeout gives it the same.
const ackTimeout = 5 * time.Second

// system is one broker under test: its stream management (create, where a stream's
// leader is, read back) and a publisher with message ids. Management goes through the
// stream drivers of bench/internal (ternstream, jsbus) where they have the call, and
// through each broker's own Go client for what they do not (the group's leader).
type system interface {
	Key() string
	Name() string
	// admin connects for management to the first reachable of urls.
	admin(ctx context.Context, urls []string) (admin, error)
	// publisher connects a publisher to urls, the first one first, with the client's
	// default reconnection (moving to the next node of the list when its node goes).
	publisher(urls []string, ev *clientEvents) (publisher, error)
}

type admin interface {
	Version() string
	// CreateStream creates a file-storage stream with limits retention.
	CreateStream(ctx context.Context, name string, subjects []string, replicas int) error
	// Group describes the stream's replication group as the answering node sees it.
	Group(ctx context.Context, name string) (group, error)
	// State counts the stream's messages.
	State(ctx context.Context, name string) (uint64, error)
	// Replay reads the stream from its first message (see streambench.Conn.Replay).
	Replay(ctx context.Context, name string, handler func(data []byte) bool) error
	Close()
}

// group is a stream's replication group: its leader's node name and whether every
// replica is caught up with it.
type group struct {
	Leader   string
	Replicas int
	Current  int // replicas (the leader included) that are current
}

func (g group) ready(replicas int) bool {
	return g.Leader != "" && g.Replicas == replicas && g.Current == replicas
}

// publisher publishes with a message id and hands back the acknowledgement's future.
type publisher interface {
	PublishAsync(subject string, data []byte, id string) (future, error)
	Close()
}

// future resolves once with the stream's acknowledgement or an error.
type future interface {
	// Wait returns whether the stream said it already had the message id, or the
	// error; it gives up when ctx ends.
	Wait(ctx context.Context) (dup bool, err error)
}

// clientEvents records, as Unix nanoseconds (0: not yet), when a publisher's client
// first lost its server and first got another.
type clientEvents struct {
	disconnected, reconnected atomic.Int64
	mu                        sync.Mutex
	reconnectedTo             string
}

func (e *clientEvents) disconnect() { e.disconnected.CompareAndSwap(0, time.Now().UnixNano()) }

func (e *clientEvents) reconnect(url string) {
	if e.reconnected.CompareAndSwap(0, time.Now().UnixNano()) {
		e.mu.Lock()
		e.reconnectedTo = url
		e.mu.Unlock()
	}
}

func (e *clientEvents) to() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reconnectedTo
}

var systems = map[string]system{"tern": ternSystem{}, "js": jsSystem{}}

func systemOf(key string) (system, error) {
	s, ok := systems[key]
	if !ok {
		return nil, fmt.Errorf("unknown system %q (want tern or js)", key)
	}
	return s, nil
}

// errKind names an error for the counts in a result: the sentinel it wraps, or its
// text with digits kept (an API error's code) and long text cut.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, tern.ErrTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrTimeout):
		return "ack timeout"
	case errors.Is(err, tern.ErrNoResponders), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no responders"
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, tern.ErrConnectionLost),
		errors.Is(err, tern.ErrConnectionClosed):
		return "disconnected"
	case errors.Is(err, tern.ErrTooManyPending), errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return "window full"
	}
	var te *tern.APIError
	if errors.As(err, &te) {
		return fmt.Sprintf("api error %d", te.Code)
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return fmt.Sprintf("api error %d/%d", je.APIError().Code, je.APIError().ErrorCode)
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// ---------------------------------------------------------------------------------
// Tern

type ternSystem struct{}

func (ternSystem) Key() string  { return "tern" }
func (ternSystem) Name() string { return "Tern" }

func (ternSystem) admin(ctx context.Context, urls []string) (admin, error) {
	var lastErr error
	for _, u := range urls {
		d, _ := ternstream.New(u)
		c, err := d.Connect(ctx, "replicavs-admin")
		if err != nil {
			lastErr = err
			continue
		}
		nc, err := tern.Connect(u, tern.Name("replicavs-admin-info"), tern.NoReconnect())
		if err != nil {
			_ = c.Close()
			lastErr = err
			continue
		}
		return &ternAdmin{conn: c, nc: nc, js: nc.Streams()}, nil
	}
	return nil, lastErr
}

type ternAdmin struct {
	conn streambench.Conn
	nc   *tern.Conn
	js   *tern.Streams
}

func (a *ternAdmin) Version() string { return a.conn.ServerVersion() }

func (a *ternAdmin) CreateStream(ctx context.Context, name string, subjects []string, replicas int) error {
	return a.conn.CreateStream(ctx, streambench.StreamSpec{Name: name, Subjects: subjects, Replicas: replicas})
}

func (a *ternAdmin) Group(ctx context.Context, name string) (group, error) {
	info, err := a.js.StreamInfo(ctx, name)
	if err != nil {
		return group{}, err
	}
	if info.Cluster == nil {
		return group{}, errors.New("stream info has no cluster section (is cluster_size set?)")
	}
	g := group{Leader: info.Cluster.Leader, Replicas: len(info.Cluster.Replicas)}
	for _, r := range info.Cluster.Replicas {
		if r.Active && r.Lag == 0 && !r.Learner {
			g.Current++
		}
	}
	return g, nil
}

func (a *ternAdmin) State(ctx context.Context, name string) (uint64, error) {
	st, err := a.conn.StreamState(ctx, name)
	return st.Msgs, err
}

func (a *ternAdmin) Replay(ctx context.Context, name string, handler func([]byte) bool) error {
	return a.conn.Replay(ctx, name, handler)
}

func (a *ternAdmin) Close() {
	_ = a.conn.Close()
	a.nc.Close()
}

func (ternSystem) publisher(urls []string, ev *clientEvents) (publisher, error) {
	// The client's defaults (reconnection on, its reconnect buffer, APITimeout 5 s,
	// 4000 async publishes outstanding at most, a failed publish retried by the
	// client for 2 s: one that found no responders, and, as every message here has
	// an id, one answered 503, lost with its connection, or not acknowledged within
	// 1 s), cluster discovery included.
	nc, err := tern.Connect(strings.Join(urls, ","), tern.Name("replicavs-publisher"),
		tern.DisconnectErrHandler(func(*tern.Conn, error) { ev.disconnect() }),
		tern.ReconnectHandler(func(c *tern.Conn) { ev.reconnect(c.ConnectedURL()) }))
	if err != nil {
		return nil, err
	}
	return &ternPublisher{nc: nc, js: nc.Streams()}, nil
}

type ternPublisher struct {
	nc *tern.Conn
	js *tern.Streams
}

func (p *ternPublisher) PublishAsync(subject string, data []byte, id string) (future, error) {
	f, err := p.js.PublishAsync(subject, data, tern.MsgID(id))
	if err != nil {
		return nil, err
	}
	return ternFuture{f}, nil
}

func (p *ternPublisher) Close() { p.nc.Close() }

type ternFuture struct{ f *tern.PubAckFuture }

func (f ternFuture) Wait(ctx context.Context) (bool, error) {
	ack, err := f.f.Wait(ctx)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

// ---------------------------------------------------------------------------------
// NATS JetStream

type jsSystem struct{}

func (jsSystem) Key() string  { return "js" }
func (jsSystem) Name() string { return "JetStream" }

func (jsSystem) admin(ctx context.Context, urls []string) (admin, error) {
	var lastErr error
	for _, u := range urls {
		c, err := jsbus.New(u).Connect(ctx, "replicavs-admin")
		if err != nil {
			lastErr = err
			continue
		}
		nc, err := nats.Connect(u, nats.Name("replicavs-admin-info"), nats.NoReconnect())
		if err != nil {
			_ = c.Close()
			lastErr = err
			continue
		}
		js, err := jetstream.New(nc)
		if err != nil {
			_ = c.Close()
			nc.Close()
			return nil, err
		}
		return &jsAdmin{conn: c, nc: nc, js: js}, nil
	}
	return nil, lastErr
}

type jsAdmin struct {
	conn streambench.Conn
	nc   *nats.Conn
	js   jetstream.JetStream
}

func (a *jsAdmin) Version() string { return a.conn.ServerVersion() }

func (a *jsAdmin) CreateStream(ctx context.Context, name string, subjects []string, replicas int) error {
	return a.conn.CreateStream(ctx, streambench.StreamSpec{Name: name, Subjects: subjects, Replicas: replicas})
}

func (a *jsAdmin) Group(ctx context.Context, name string) (group, error) {
	s, err := a.js.Stream(ctx, name)
	if err != nil {
		return group{}, err
	}
	ci := s.CachedInfo().Cluster
	if ci == nil {
		return group{}, errors.New("stream info has no cluster section")
	}
	// The leader's view: the other replicas, each current or not; the leader itself
	// is not listed.
	g := group{Leader: ci.Leader, Replicas: len(ci.Replicas)}
	if ci.Leader != "" {
		g.Replicas++
		g.Current++
	}
	for _, r := range ci.Replicas {
		if r.Current && !r.Offline {
			g.Current++
		}
	}
	return g, nil
}

func (a *jsAdmin) State(ctx context.Context, name string) (uint64, error) {
	st, err := a.conn.StreamState(ctx, name)
	return st.Msgs, err
}

func (a *jsAdmin) Replay(ctx context.Context, name string, handler func([]byte) bool) error {
	return a.conn.Replay(ctx, name, handler)
}

func (a *jsAdmin) Close() {
	_ = a.conn.Close()
	a.nc.Close()
}

func (jsSystem) publisher(urls []string, ev *clientEvents) (publisher, error) {
	// nats.go's defaults (reconnection on, its reconnect buffer, 4000 async
	// publishes outstanding at most, a publish that finds no responders retried
	// twice 250 ms apart by the client), the server list in the order given, and an
	// async acknowledgement timeout as Tern's client has (ackTimeout).
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("replicavs-publisher"), nats.DontRandomize(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { ev.disconnect() }),
		nats.ReconnectHandler(func(c *nats.Conn) { ev.reconnect(c.ConnectedUrl()) }))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(ackTimeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &jsPublisher{nc: nc, js: js}, nil
}

type jsPublisher struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func (p *jsPublisher) PublishAsync(subject string, data []byte, id string) (future, error) {
	f, err := p.js.PublishAsync(subject, data, jetstream.WithMsgID(id))
	if err != nil {
		return nil, err
	}
	return jsFuture{f}, nil
}

func (p *jsPublisher) Close() { p.nc.Close() }

type jsFuture struct{ f jetstream.PubAckFuture }

func (f jsFuture) Wait(ctx context.Context) (bool, error) {
	select {
	case ack := <-f.f.Ok():
		return ack.Duplicate, nil
	case err := <-f.f.Err():
		return false, err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
