// Package ternstream is the streambench.Driver for Tern's durable streams: a thin
// adapter over the Go client's stream API (client/go), so bench/streamvs runs the same
// workloads against Tern as against NATS JetStream.
package ternstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tern-mq/tern/bench/internal/streambench"
	tern "github.com/tern-mq/tern/client/go"
)

// replayBatch is how many messages each pull request of a replay asks for; the
// client keeps about one and a half of them in flight. 4,096 (4 MiB of 1 KiB
// messages in flight) rather than 1,024: with 1,024 a replay waits on the round
// trips of its pull requests — on an R3 stream 389k msgs/s on the leader's node
// and 280k through another node, against 578k and 331k with 4,096 (2026-11-25,
// RESULTS.md). JetStream's side is its ordered push consumer, which the server
// feeds under its own flow control, with the client's pending limits lifted.
const replayBatch = 4096

// Driver connects to one Tern server.
type Driver struct{ url string }

var _ streambench.Driver = (*Driver)(nil)

// New returns a driver for the server at url (tern://host:port).
func New(url string) (streambench.Driver, error) { return &Driver{url: url}, nil }

// Connect opens one connection. Reconnection is off, so a lost server ends a run with
// an error instead of stalling it, and the client-side pending limits are lifted
// (the consumers' own flow control bounds what is in flight).
func (d *Driver) Connect(ctx context.Context, name string) (streambench.Conn, error) {
	nc, err := tern.Connect(d.url, tern.Name(name), tern.NoReconnect(), tern.PendingLimits(-1, -1))
	if err != nil {
		return nil, err
	}
	js := nc.Streams(tern.PublishAsyncMaxPending(streambench.MaxWindow), tern.APITimeout(30*time.Second))
	if _, err := js.ListStreams(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("tern streams at %s: %w", d.url, err)
	}
	return &Conn{nc: nc, js: js}, nil
}

// Conn is one client connection.
type Conn struct {
	nc *tern.Conn
	js *tern.Streams
}

var _ streambench.Conn = (*Conn)(nil)

// ServerVersion is what the server said in its handshake.
func (c *Conn) ServerVersion() string { return c.nc.ServerInfo().Version }

// StreamLeader names the node leading the stream and says whether the
// connection is to it.
func (c *Conn) StreamLeader(ctx context.Context, name string) (string, bool, error) {
	info, err := c.js.StreamInfo(ctx, name)
	if err != nil {
		return "", false, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", false, fmt.Errorf("stream %q: no leader", name)
	}
	return info.Cluster.Leader, info.Cluster.Leader == c.nc.ServerInfo().ServerName, nil
}

var _ streambench.LeaderLocator = (*Conn)(nil)

// CreateStream creates a stream with the asked retention and fsync policy.
func (c *Conn) CreateStream(ctx context.Context, spec streambench.StreamSpec) error {
	if err := spec.CheckStorage(); err != nil {
		return err
	}
	workQueue, err := spec.WorkQueue()
	if err != nil {
		return err
	}
	// More than one replica needs a Tern cluster that replicates (cluster_size);
	// bench/replicated.sh starts one.
	cfg := tern.StreamConfig{Name: spec.Name, Subjects: spec.Subjects, Retention: tern.RetainLimits, Sync: string(spec.Sync)}
	if spec.Replicas > 1 {
		cfg.Replicas = spec.Replicas
	}
	if workQueue {
		cfg.Retention = tern.RetainWorkQueue
	}
	_, err = c.js.AddStream(ctx, cfg)
	return err
}

// DeleteStream deletes a stream.
func (c *Conn) DeleteStream(ctx context.Context, name string) error {
	return c.js.DeleteStream(ctx, name)
}

// StreamState reports a stream's message and byte counts.
func (c *Conn) StreamState(ctx context.Context, name string) (streambench.StreamState, error) {
	info, err := c.js.StreamInfo(ctx, name)
	if err != nil {
		return streambench.StreamState{}, err
	}
	return streambench.StreamState{Msgs: info.State.Msgs, Bytes: info.State.Bytes}, nil
}

type future struct{ f *tern.PubAckFuture }

func (f future) Wait(ctx context.Context) error {
	_, err := f.f.Wait(ctx)
	return err
}

// PublishAsync publishes and returns the acknowledgement's future.
func (c *Conn) PublishAsync(subject string, data []byte) (streambench.PubFuture, error) {
	f, err := c.js.PublishAsync(subject, data)
	if err != nil {
		return nil, err
	}
	return future{f}, nil
}

// PublishSync publishes and waits for the acknowledgement.
func (c *Conn) PublishSync(ctx context.Context, subject string, data []byte) error {
	_, err := c.js.Publish(ctx, subject, data)
	return err
}

// AddConsumer creates a durable pull consumer from the first message.
func (c *Conn) AddConsumer(ctx context.Context, stream string, spec streambench.ConsumerSpec) error {
	cfg := tern.ConsumerConfig{
		Durable:       spec.Durable,
		DeliverPolicy: tern.DeliverAll,
		AckPolicy:     tern.AckExplicit,
		AckWait:       tern.Duration(spec.AckWait),
		MaxAckPending: spec.MaxAckPending,
	}
	ackAll, err := spec.AcksAll()
	if err != nil {
		return err
	}
	if ackAll {
		cfg.AckPolicy = tern.AckAll
	}
	_, err = c.js.AddConsumer(ctx, stream, cfg)
	return err
}

// Pull binds to a pull consumer.
func (c *Conn) Pull(ctx context.Context, stream, consumer string) (streambench.Consumer, error) {
	if _, err := c.js.ConsumerInfo(ctx, stream, consumer); err != nil {
		return nil, err
	}
	return &puller{p: c.js.Pull(stream, consumer)}, nil
}

type puller struct{ p *tern.Pull }

// Fetch hands each message to handler as it arrives; a short or empty batch when
// maxWait passes is not an error.
func (p *puller) Fetch(ctx context.Context, batch int, maxWait time.Duration, handler func(streambench.Msg)) (int, error) {
	n, err := p.p.FetchEach(ctx, batch, func(m *tern.Msg) { handler(msg{m}) }, tern.FetchMaxWait(maxWait))
	if n == 0 && (isTimeout(err) || err == nil) {
		return 0, ctx.Err()
	}
	if err != nil && n > 0 {
		return n, nil
	}
	return n, err
}

func isTimeout(err error) bool {
	return err != nil && (errors.Is(err, tern.ErrTimeout) || errors.Is(err, tern.ErrNoMessages))
}

func (p *puller) Close() error { return p.p.Close() }

type msg struct{ m *tern.Msg }

func (m msg) Data() []byte { return m.m.Data }
func (m msg) Ack() error   { return m.m.Ack() }

// Replay reads the stream from the first message with an ephemeral consumer that
// needs no acknowledgements, pipelining pull requests of replayBatch messages.
func (c *Conn) Replay(ctx context.Context, stream string, handler func(data []byte) bool) error {
	info, err := c.js.AddConsumer(ctx, stream, tern.ConsumerConfig{DeliverPolicy: tern.DeliverAll, AckPolicy: tern.AckNone})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.js.DeleteConsumer(dctx, stream, info.Name)
	}()
	gate := streambench.NewReplayGate(handler)
	p := c.js.Pull(stream, info.Name)
	defer p.Close()
	cc, err := p.Consume(replayBatch, func(m *tern.Msg) { gate.Deliver(m.Data) })
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-gate.Done():
		return nil
	case <-ctx.Done():
		if err := cc.Err(); err != nil {
			return err
		}
		return ctx.Err()
	}
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.nc.Close()
	return nil
}
