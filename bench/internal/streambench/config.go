package streambench

import (
	"errors"
	"fmt"
	"time"
)

// Workload names, for Config.Workload.
const (
	WorkPubAsync  = "pubasync"
	WorkPubSync   = "pubsync"
	WorkFetch     = "fetch"
	WorkReplay    = "replay"
	WorkWorkQueue = "workqueue"
)

// Workloads lists the workloads in the order they are documented.
var Workloads = []string{WorkPubAsync, WorkPubSync, WorkFetch, WorkReplay, WorkWorkQueue}

// Defaults of Config.
const (
	// DefaultWindow is the number of unacknowledged async publishes the publisher
	// keeps in flight (nats.go's own default is 4000). Measured with JetStream
	// (nats-server 2.9.10, 2 CPUs, median of 3): windows of 256 and 1024 hold it
	// back (84–86k msgs/s at 16 B, 64–77k at 1 KiB), 4096 gives 139k and 106k, and
	// 16384 158k and 99k, so 4096 is near JetStream's best without queueing much
	// more in the work queue (whose latency grows with the window).
	DefaultWindow        = 4096
	DefaultBatch         = 256
	DefaultConsumers     = 4
	DefaultMaxWait       = 100 * time.Millisecond
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 10_000
	DefaultStall         = 10 * time.Second
)

// Observation points, passed to Config.Observe.
const (
	// ObserveReady: the stream exists (and is pre-filled), the consumers are bound;
	// the clock starts right after.
	ObserveReady = "ready"
	// ObserveDone: the timed phase is over; the stream has not been deleted yet.
	ObserveDone = "done"
)

// Config describes one run.
type Config struct {
	// Workload is one of Workloads.
	Workload string
	// Size is the payload size in bytes, at least 8 (the sequence number); in
	// workqueue, 16 or more also carries the publish time for the latency.
	Size int
	// Msgs is the number of messages published (pubasync, pubsync, workqueue) or
	// pre-filled and consumed (fetch, replay).
	Msgs int
	// Window bounds unacknowledged async publishes (pubasync, workqueue, and every
	// pre-fill); default DefaultWindow, at most MaxWindow.
	Window int
	// Batch is the pull batch size (fetch, workqueue); default DefaultBatch.
	Batch int
	// AckAll makes the fetch consumer's ack policy cumulative (AckAll) and
	// acknowledges only the last message of each batch; otherwise every message is
	// acknowledged on its own (AckExplicit). Workqueue always acknowledges every
	// message.
	AckAll bool
	// Consumers is the number of pull consumers in workqueue; default
	// DefaultConsumers.
	Consumers int
	// MaxWait bounds each Fetch; default DefaultMaxWait. Fetch asks for exactly
	// what is left when fewer than Batch remain, so a backlog never waits for it;
	// in workqueue it bounds how long a client that returns whole batches holds the
	// last messages of the run.
	MaxWait time.Duration
	// AckWait and MaxAckPending configure the durable consumers; defaults
	// DefaultAckWait and DefaultMaxAckPending.
	AckWait       time.Duration
	MaxAckPending int
	// Sync is the stream's fsync policy (default: the server's).
	Sync Sync
	// Replicas is the number of copies of the run's stream a clustered server keeps
	// (JetStream's R, Tern's replication factor); 0 or 1 is one copy. A driver that
	// cannot replicate refuses more than one with ErrUnsupported.
	Replicas int
	// RandomPayloads fills every payload after its sequence number (and time)
	// with random bytes, each of the publisher's buffers different, so that a
	// broker that compresses what it stores or replicates gains nothing; by
	// default the rest of a payload is zero bytes.
	RandomPayloads bool
	// Timeout is the hard limit on the whole run, pre-fill and clean-up included.
	// 0 computes one from Msgs: 60s plus 2ms per message in pubsync, 100µs per
	// message otherwise.
	Timeout time.Duration
	// Stall ends a run in which no acknowledgement or delivery happened for this
	// long; default DefaultStall.
	Stall time.Duration
	// Name prefixes the connection names (default "streambench").
	Name string
	// Observe, if set, is called at ObserveReady and ObserveDone, from the run's
	// goroutine, outside the timed phase (bench/streamvs reads the server's memory
	// there).
	Observe func(point string)
}

// ErrIncomplete is wrapped by the error Run returns when a run ended (by its timeout,
// a stall, failures or cancellation) before every message was acknowledged or
// consumed.
var ErrIncomplete = errors.New("incomplete run")

// ErrViolation is wrapped by the error Run returns when every message arrived but a
// delivery guarantee was broken: a message consumed more than once, a replay out of
// order, a work queue not empty after every message was acknowledged.
var ErrViolation = errors.New("delivery guarantee violated")

// seqLen and stampEnd: the payload carries the sequence number in bytes 0–7 and, in
// workqueue, the publish time in bytes 8–15.
const (
	seqLen   = 8
	stampEnd = 16
)

// normalize checks cfg and fills in defaults.
func (cfg Config) normalize() (Config, error) {
	known := false
	for _, w := range Workloads {
		known = known || cfg.Workload == w
	}
	if !known {
		return cfg, fmt.Errorf("streambench: unknown workload %q (want one of %v)", cfg.Workload, Workloads)
	}
	if cfg.Size < seqLen {
		return cfg, fmt.Errorf("streambench: payload size %d is under %d bytes (the sequence number)", cfg.Size, seqLen)
	}
	if cfg.Msgs < 1 {
		return cfg, errors.New("streambench: Msgs must be at least 1")
	}
	if cfg.Window < 0 || cfg.Batch < 0 || cfg.Consumers < 0 || cfg.MaxWait < 0 || cfg.AckWait < 0 ||
		cfg.MaxAckPending < 0 || cfg.Timeout < 0 || cfg.Stall < 0 || cfg.Replicas < 0 {
		return cfg, errors.New("streambench: negative window, batch, consumers, wait, pending, timeout, stall or replicas")
	}
	if cfg.Window > MaxWindow {
		return cfg, fmt.Errorf("streambench: window %d is over MaxWindow (%d)", cfg.Window, MaxWindow)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Consumers == 0 {
		cfg.Consumers = DefaultConsumers
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = DefaultMaxAckPending
	}
	if cfg.Stall == 0 {
		cfg.Stall = DefaultStall
	}
	if cfg.Name == "" {
		cfg.Name = "streambench"
	}
	if cfg.Timeout == 0 {
		per := 100 * time.Microsecond
		if cfg.Workload == WorkPubSync {
			per = 2 * time.Millisecond
		}
		cfg.Timeout = time.Minute + time.Duration(cfg.Msgs)*per
	}
	return cfg, nil
}
