package streambench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Driver is one broker's durable-stream client, as the workloads use it. A driver is
// a thin adapter over the broker's own Go client (bench/internal/jsbus over NATS
// JetStream; bench/internal/ternstream over Tern), and holds nothing but what it needs
// to connect (a URL, options).
//
// The engine opens one Conn per role (the publisher, each consumer, the reader), so a
// driver must allow several Conns at once.
type Driver interface {
	// Connect opens one client connection; name identifies it to the server (for
	// example "streambench-wq-consumer-2").
	Connect(ctx context.Context, name string) (Conn, error)
}

// Conn is one client connection with its stream API.
//
// Contract:
//   - Management calls (CreateStream, DeleteStream, StreamState, AddConsumer) are
//     synchronous: when they return, the server has done it.
//   - PublishAsync sends without waiting and returns a PubFuture that resolves with the
//     stream's acknowledgement. It may keep data until that future has resolved, and
//     must not change it. The engine bounds the number of unresolved futures itself
//     (Config.Window, at most MaxWindow), so a client-side limit on outstanding async
//     publishes must be lifted or set to at least MaxWindow: PublishAsync should not
//     block on it.
//   - PublishSync publishes and returns once the stream has acknowledged (stored) the
//     message, or with the error that refused it.
//   - A publish the stream refuses, or to a subject no stream captures, is an error
//     (from PublishSync, or from the future's Wait), never a silent success.
//   - Replay calls handler from one goroutine at a time, and never again after it
//     returned false.
//   - A Conn is used by one goroutine at a time, except that PubFuture.Wait is called
//     from a second goroutine while the first keeps publishing.
//   - Every call that waits returns once its ctx ends (Fetch at the latest when
//     maxWait has passed): that is what bounds a run by Config.Timeout and Stall.
type Conn interface {
	// ServerVersion is the version the server reports (for the results).
	ServerVersion() string

	// CreateStream creates a stream. A stream of that name must not exist yet (the
	// engine uses fresh random names).
	CreateStream(ctx context.Context, spec StreamSpec) error
	// DeleteStream deletes a stream and its stored messages.
	DeleteStream(ctx context.Context, name string) error
	// StreamState reports how many messages a stream holds.
	StreamState(ctx context.Context, name string) (StreamState, error)

	// PublishAsync publishes data to subject and returns at once; see the contract
	// above.
	PublishAsync(subject string, data []byte) (PubFuture, error)
	// PublishSync publishes data to subject and waits for the stream's
	// acknowledgement.
	PublishSync(ctx context.Context, subject string, data []byte) error

	// AddConsumer creates a durable pull consumer named spec.Durable on stream.
	AddConsumer(ctx context.Context, stream string, spec ConsumerSpec) error
	// Pull binds to the existing pull consumer named consumer on stream. Several
	// Conns may bind to one consumer and share its messages, each message going to
	// one of them.
	Pull(ctx context.Context, stream, consumer string) (Consumer, error)

	// Replay reads stream from its first message, in stream order, with an
	// ephemeral (or ordered) consumer that needs no acknowledgements, and calls
	// handler with each message's payload until handler returns false, ctx ends or
	// an error stops it. The data passed to handler is only valid during the call.
	// Replay returns nil when handler asked to stop, and removes its consumer before
	// it returns (or leaves it for the server to expire).
	Replay(ctx context.Context, stream string, handler func(data []byte) bool) error

	// Close closes the connection.
	Close() error
}

// PubFuture is the pending acknowledgement of one PublishAsync.
type PubFuture interface {
	// Wait blocks until the stream acknowledged the message (nil), refused it or the
	// publish failed (an error), or ctx ended (ctx's error).
	Wait(ctx context.Context) error
}

// Consumer is a binding to a pull consumer.
type Consumer interface {
	// Fetch asks the server for up to batch messages, waiting at most maxWait for
	// them, and calls handler with each message it receives, in order, from the
	// calling goroutine. It returns the number of messages handed to handler and nil
	// when the batch is complete or maxWait passed (a short or empty batch is not an
	// error); it returns early with ctx's error when ctx ends.
	//
	// Hand each message to handler as soon as it arrives if the client can: the
	// workqueue workload acknowledges from handler, and a client that only returns
	// whole batches holds the run's last messages until maxWait (100 ms by default)
	// has passed, which then counts in the run's time.
	Fetch(ctx context.Context, batch int, maxWait time.Duration, handler func(Msg)) (int, error)
	// Close releases the binding (not the consumer, which the stream's deletion
	// removes).
	Close() error
}

// Msg is one message delivered by a pull consumer.
type Msg interface {
	// Data is the payload; valid until the next Fetch.
	Data() []byte
	// Ack acknowledges the message (and, under AckAll, every earlier message of the
	// consumer). It need not wait for the server.
	Ack() error
}

// StreamSpec describes a stream.
type StreamSpec struct {
	Name      string
	Subjects  []string
	Retention Retention
	Storage   Storage
	// Sync is the fsync policy. SyncDefault leaves the server's default; a driver
	// that cannot set the asked policy per stream returns ErrUnsupported.
	Sync Sync
	// Replicas is the number of copies a clustered server keeps (0 or 1: one). A
	// driver whose broker cannot replicate a stream returns ErrUnsupported for more.
	Replicas int
}

// Retention is what removes messages from a stream.
type Retention string

// Retention policies.
const (
	// RetainLimits keeps messages until size, count or age limits remove them (the
	// engine sets none).
	RetainLimits Retention = "limits"
	// RetainWorkQueue removes a message once a consumer has acknowledged it.
	RetainWorkQueue Retention = "workqueue"
)

// Storage is where a stream keeps its messages.
type Storage string

// StorageFile is an on-disk log; the only storage the workloads use.
const StorageFile Storage = "file"

// Sync is an fsync policy.
type Sync string

// Fsync policies.
const (
	SyncDefault  Sync = ""         // the server's default
	SyncAlways   Sync = "always"   // fsync before acknowledging a publish
	SyncInterval Sync = "interval" // fsync periodically
	SyncNever    Sync = "never"    // leave it to the operating system
)

// AckPolicy is how a consumer's messages are acknowledged.
type AckPolicy string

// Acknowledgement policies.
const (
	// AckExplicit: each message is acknowledged on its own.
	AckExplicit AckPolicy = "explicit"
	// AckAll: acknowledging a message acknowledges every earlier one (cumulative).
	AckAll AckPolicy = "all"
)

// ConsumerSpec describes a durable pull consumer. It delivers every message of the
// stream from the first.
type ConsumerSpec struct {
	Durable   string
	AckPolicy AckPolicy
	// MaxAckPending bounds delivered-but-unacknowledged messages (0: the server's
	// default).
	MaxAckPending int
	// AckWait is how long a delivered message may stay unacknowledged before it is
	// delivered again (0: the server's default).
	AckWait time.Duration
}

// StreamState is what a stream holds.
type StreamState struct {
	Msgs  uint64
	Bytes uint64
}

// ErrUnsupported is returned (wrapped) by a driver asked for something its broker or
// client cannot do, such as a per-stream fsync policy.
var ErrUnsupported = errors.New("streambench: not supported by this driver")

// MaxWindow is the largest Config.Window; drivers must let at least this many async
// publishes be outstanding.
const MaxWindow = 1 << 16

// CheckStorage is nil when the spec asks for an on-disk log (StorageFile, or no
// storage named), the only storage the drivers keep; else ErrUnsupported.
func (s StreamSpec) CheckStorage() error {
	if s.Storage != "" && s.Storage != StorageFile {
		return fmt.Errorf("%w: storage %q", ErrUnsupported, s.Storage)
	}
	return nil
}

// WorkQueue says whether the spec asks for work-queue retention rather than limits
// (RetainLimits, or none named); another retention is ErrUnsupported.
func (s StreamSpec) WorkQueue() (bool, error) {
	switch s.Retention {
	case RetainLimits, "":
		return false, nil
	case RetainWorkQueue:
		return true, nil
	}
	return false, fmt.Errorf("%w: retention %q", ErrUnsupported, s.Retention)
}

// AcksAll says whether the spec asks for cumulative acknowledgement rather than
// each message on its own (AckExplicit, or no policy named); another policy is
// ErrUnsupported.
func (s ConsumerSpec) AcksAll() (bool, error) {
	switch s.AckPolicy {
	case AckExplicit, "":
		return false, nil
	case AckAll:
		return true, nil
	}
	return false, fmt.Errorf("%w: ack policy %q", ErrUnsupported, s.AckPolicy)
}

// ReplayGate passes the messages a client's delivery callbacks receive during a
// Replay on to its handler as the Conn contract wants: one call at a time, none
// after the handler returned false; Done is closed then.
type ReplayGate struct {
	handler func(data []byte) bool
	mu      sync.Mutex
	stopped bool
	done    chan struct{}
}

// NewReplayGate gates handler.
func NewReplayGate(handler func(data []byte) bool) *ReplayGate {
	return &ReplayGate{handler: handler, done: make(chan struct{})}
}

// Deliver hands data to the handler unless it has asked to stop.
func (g *ReplayGate) Deliver(data []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	if !g.handler(data) {
		g.stopped = true
		close(g.done)
	}
}

// Done is closed once the handler has returned false.
func (g *ReplayGate) Done() <-chan struct{} { return g.done }

// LeaderLocator is a Conn that can say which server leads a replicated stream
// and whether it is the server the connection is to.
type LeaderLocator interface {
	StreamLeader(ctx context.Context, name string) (leader string, local bool, err error)
}
