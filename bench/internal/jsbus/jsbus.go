// Package jsbus is the NATS JetStream driver of the stream benchmarks: it adapts the
// NATS Go client (github.com/nats-io/nats.go and its jetstream package) to
// streambench.Driver, so JetStream runs the same workload code as Tern.
//
// It works with nats-server 2.9 and later (the benchmarks use the release pinned in
// bench/lib.sh, started with -js). Client settings are nats.go's defaults, except that the client's own limit
// on outstanding async publishes is raised to streambench.MaxWindow (the engine keeps
// its window itself) and reconnection is off.
//
// Mapping: a StreamSpec becomes a file-storage stream with its Replicas (one unless
// asked for more, which needs a nats-server cluster with JetStream), no limits,
// limits or work-queue retention; a ConsumerSpec a durable pull consumer delivering
// everything; Fetch is the jetstream package's Fetch (messages are handed over as they
// arrive); Replay is an ordered consumer (ephemeral, no acks, recreated by the client
// if it ever sees a gap): the push-based one of nats.go's JetStreamContext by default,
// the jetstream package's pull-based one with PullReplay. JetStream has no per-stream fsync
// policy (by default nats-server acknowledges a publish once its file store has the
// message, writes to the operating system without fsync, and fsyncs every two minutes,
// its sync_interval), so
// only streambench.SyncDefault is accepted.
package jsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tern-mq/tern/bench/internal/streambench"
)

// Driver connects to one NATS server with JetStream enabled.
type Driver struct {
	url         string
	natsOpts    []nats.Option
	pullReplay  bool
	localLeader bool
}

var _ streambench.Driver = (*Driver)(nil)

// Option changes a setting of New.
type Option func(*Driver)

// NATSOptions adds options to every connection's.
func NATSOptions(opts ...nats.Option) Option {
	return func(d *Driver) { d.natsOpts = append(d.natsOpts, opts...) }
}

// PullReplay makes Replay use the jetstream package's ordered consumer (pull-based,
// read with Consume) instead of the JetStreamContext's push-based ordered consumer.
// The push consumer is the default because it is the faster of the two: on the
// reference machine (2 CPUs, nats-server 2.9.10) it replays 1 KiB messages at about
// 150–165k msgs/s where the pull one does 115–130k.
func PullReplay() Option { return func(d *Driver) { d.pullReplay = true } }

// LocalLeader makes CreateStream move a replicated stream's leader to the server
// the connection is to (a leader step-down naming it as preferred), so that a
// run's publishes take no hop to another server: JetStream at its best placement.
// Without it the leader is wherever JetStream put it.
func LocalLeader() Option { return func(d *Driver) { d.localLeader = true } }

// Replay modes, for ReplayMode.
const (
	ReplayPush = "push"
	ReplayPull = "pull"
)

// ReplayMode is an Option from a name: ReplayPush (the default) or ReplayPull.
func ReplayMode(mode string) (Option, error) {
	switch mode {
	case ReplayPush, "":
		return func(d *Driver) { d.pullReplay = false }, nil
	case ReplayPull:
		return PullReplay(), nil
	}
	return nil, fmt.Errorf("jsbus: replay mode %q: want %q or %q", mode, ReplayPush, ReplayPull)
}

// New returns a driver for the server at url (nats://host:port). url may list several
// servers, comma-separated (the nodes of a cluster); every connection goes to the
// first one that accepts it, in the order given.
func New(url string, opts ...Option) *Driver {
	d := &Driver{url: url}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Connect opens one connection and its JetStream context.
func (d *Driver) Connect(ctx context.Context, name string) (streambench.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.NoReconnect(), nats.DontRandomize()}, d.natsOpts...)
	nc, err := nats.Connect(d.url, opts...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(streambench.MaxWindow))
	if err != nil {
		nc.Close()
		return nil, err
	}
	// Fail now, not in the first workload call, if JetStream is off.
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream at %s: %w", d.url, err)
	}
	return &Conn{nc: nc, js: js, pullReplay: d.pullReplay, localLeader: d.localLeader}, nil
}

// Conn is one NATS connection with its JetStream context.
type Conn struct {
	nc          *nats.Conn
	js          jetstream.JetStream
	pullReplay  bool
	localLeader bool
}

var _ streambench.Conn = (*Conn)(nil)

// ServerVersion is the version the server announced.
func (c *Conn) ServerVersion() string { return c.nc.ConnectedServerVersion() }

// CreateStream creates a file-storage stream with spec.Replicas replicas (one by
// default) and no limits.
func (c *Conn) CreateStream(ctx context.Context, spec streambench.StreamSpec) error {
	if spec.Sync != streambench.SyncDefault {
		return fmt.Errorf("%w: JetStream has no per-stream fsync policy (asked %q)", streambench.ErrUnsupported, spec.Sync)
	}
	if err := spec.CheckStorage(); err != nil {
		return err
	}
	workQueue, err := spec.WorkQueue()
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{
		Name:      spec.Name,
		Subjects:  spec.Subjects,
		Storage:   jetstream.FileStorage,
		Replicas:  max(1, spec.Replicas),
		Retention: jetstream.LimitsPolicy,
	}
	if workQueue {
		cfg.Retention = jetstream.WorkQueuePolicy
	}
	if _, err = c.js.CreateStream(ctx, cfg); err != nil || !c.localLeader || cfg.Replicas == 1 {
		return err
	}
	return c.moveLeaderHere(ctx, spec.Name)
}

// moveLeaderHere asks the stream's leader to step down in favour of the server
// the connection is to, until that server leads it.
func (c *Conn) moveLeaderHere(ctx context.Context, name string) error {
	here := c.nc.ConnectedServerName()
	req := fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, here)
	deadline := time.Now().Add(20 * time.Second)
	for {
		leader, local, err := c.StreamLeader(ctx, name)
		if err == nil && local {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %q: leader %q, not %q, after 20s of step-downs (%v)", name, leader, here, err)
		}
		if err == nil {
			msg, rerr := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, req)
			if rerr != nil {
				return fmt.Errorf("stream %q: leader step-down: %w", name, rerr)
			}
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if json.Unmarshal(msg.Data, &resp) == nil && resp.Error != nil {
				return fmt.Errorf("stream %q: leader step-down to %q: %s", name, here, resp.Error.Description)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StreamLeader names the server leading the stream and says whether the
// connection is to it.
func (c *Conn) StreamLeader(ctx context.Context, name string) (string, bool, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return "", false, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", false, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", false, fmt.Errorf("stream %q: no leader", name)
	}
	return info.Cluster.Leader, info.Cluster.Leader == c.nc.ConnectedServerName(), nil
}

var _ streambench.LeaderLocator = (*Conn)(nil)

// DeleteStream deletes a stream.
func (c *Conn) DeleteStream(ctx context.Context, name string) error {
	return c.js.DeleteStream(ctx, name)
}

// StreamState reports the stream's message count and size.
func (c *Conn) StreamState(ctx context.Context, name string) (streambench.StreamState, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return streambench.StreamState{}, err
	}
	st := s.CachedInfo().State
	return streambench.StreamState{Msgs: st.Msgs, Bytes: st.Bytes}, nil
}

// future adapts jetstream.PubAckFuture.
type future struct{ f jetstream.PubAckFuture }

func (f future) Wait(ctx context.Context) error {
	select {
	case <-f.f.Ok():
		return nil
	case err := <-f.f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PublishAsync publishes with the jetstream package's PublishAsync.
func (c *Conn) PublishAsync(subject string, data []byte) (streambench.PubFuture, error) {
	f, err := c.js.PublishAsync(subject, data)
	if err != nil {
		return nil, err
	}
	return future{f}, nil
}

// PublishSync publishes and waits for the stream's acknowledgement.
func (c *Conn) PublishSync(ctx context.Context, subject string, data []byte) error {
	_, err := c.js.Publish(ctx, subject, data)
	return err
}

// AddConsumer creates a durable pull consumer delivering every message.
func (c *Conn) AddConsumer(ctx context.Context, stream string, spec streambench.ConsumerSpec) error {
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       spec.AckWait,
		MaxAckPending: spec.MaxAckPending,
	}
	ackAll, err := spec.AcksAll()
	if err != nil {
		return err
	}
	if ackAll {
		cfg.AckPolicy = jetstream.AckAllPolicy
	}
	_, err = c.js.CreateConsumer(ctx, stream, cfg)
	return err
}

// Pull binds to a durable pull consumer.
func (c *Conn) Pull(ctx context.Context, stream, consumer string) (streambench.Consumer, error) {
	cons, err := c.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	return &puller{c: cons}, nil
}

// puller is a binding to a pull consumer.
type puller struct{ c jetstream.Consumer }

// Fetch sends one pull request for up to batch messages that the server ends after
// maxWait, and hands each message to handler as it arrives. The request's end is the
// server's to say (its timeout status, which follows every message it sent for the
// request): a client-side deadline as well would drop a message sent just before it
// that was still in flight, and that message would then wait out AckWait (30 s)
// before redelivery, stalling a work queue run. ctx ending returns at once; the
// abandoned request's messages then wait for redelivery, as the run is over anyway.
func (p *puller) Fetch(ctx context.Context, batch int, maxWait time.Duration, handler func(streambench.Msg)) (int, error) {
	b, err := p.c.Fetch(batch, jetstream.FetchMaxWait(maxWait))
	if err != nil {
		return 0, err
	}
	n := 0
	msgs := b.Messages()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return n, b.Error()
			}
			handler(msg{m})
			n++
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

func (p *puller) Close() error { return nil }

// msg adapts jetstream.Msg.
type msg struct{ m jetstream.Msg }

func (m msg) Data() []byte { return m.m.Data() }
func (m msg) Ack() error   { return m.m.Ack() }

// Replay reads the stream from its first message with an ordered consumer: the
// JetStreamContext's push-based one (flow control and heartbeats on, client-side
// pending limits lifted), or with PullReplay the jetstream package's pull-based one.
func (c *Conn) Replay(ctx context.Context, stream string, handler func(data []byte) bool) error {
	if c.pullReplay {
		return c.replayPull(ctx, stream, handler)
	}
	ljs, err := c.nc.JetStream()
	if err != nil {
		return err
	}
	gate := streambench.NewReplayGate(handler)
	sub, err := ljs.Subscribe("", func(m *nats.Msg) { gate.Deliver(m.Data) }, nats.BindStream(stream), nats.OrderedConsumer(), nats.DeliverAll(), nats.Context(ctx))
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	select {
	case <-gate.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Conn) replayPull(ctx context.Context, stream string, handler func(data []byte) bool) error {
	oc, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	var (
		gate    = streambench.NewReplayGate(handler)
		errMu   sync.Mutex
		lastErr error
	)
	cc, err := oc.Consume(func(m jetstream.Msg) { gate.Deliver(m.Data()) }, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		errMu.Lock()
		lastErr = err
		errMu.Unlock()
	}))
	if err != nil {
		return err
	}
	defer func() {
		cc.Stop()
		<-cc.Closed()
	}()
	select {
	case <-gate.Done():
		return nil
	case <-ctx.Done():
		errMu.Lock()
		defer errMu.Unlock()
		if lastErr != nil {
			return fmt.Errorf("%w (last consumer error: %v)", ctx.Err(), lastErr)
		}
		return ctx.Err()
	}
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.nc.Close()
	return nil
}
