package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bus is one client connection to a broker, as the workloads use it. An adapter
// wraps a client library (see package ternbus, and bench/internal/natsbus).
//
// Contract:
//   - Publish must not keep data after it returns (the caller reuses the buffer).
//   - A handler is never called concurrently with itself for one subscription, and the
//     data it gets is only valid during the call.
//   - Flush returns once the broker has processed everything sent before it on this
//     connection (a round trip), so a subscription followed by Flush is in place.
//   - Respond serves requests on subject (in queue group queue if not empty): the
//     handler's return value is sent to the request's reply subject.
type Bus interface {
	Publish(subject string, data []byte) error
	Subscribe(subject string, handler func(data []byte)) (unsub func() error, err error)
	QueueSubscribe(subject, queue string, handler func(data []byte)) (unsub func() error, err error)
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
	Respond(subject, queue string, handler func(req []byte) []byte) (unsub func() error, err error)
	Flush() error
	Close() error
}

// Dialer opens one connection; name identifies it to the broker. Run names its
// connections "bench-<role>-<index>" (for example "bench-pub-0"), with the roles below
// and the index counting from 0 within the role; ConnRole reads a name back, so a
// Dialer can put the roles on different servers (a cluster benchmark places
// publishers on one node and subscribers on others).
type Dialer func(name string) (Bus, error)

// Roles of the connections Run opens, as they appear in the names given to the Dialer.
const (
	RolePub       = "pub"       // publishers (pub, pubsub and queue modes)
	RoleSub       = "sub"       // subscribers and queue group members
	RoleReq       = "req"       // requesters (reqrep)
	RoleResponder = "responder" // responders (reqrep)
)

// connPrefix starts the name of every connection Run opens.
const connPrefix = "bench-"

func connName(role string, index int) string { return connPrefix + role + "-" + strconv.Itoa(index) }

// ConnRole splits the name of a connection Run opened ("bench-sub-2") into its role
// (RoleSub) and index (2). ok is false for any other name.
func ConnRole(name string) (role string, index int, ok bool) {
	rest, found := strings.CutPrefix(name, connPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	switch role = rest[:i]; role {
	case RolePub, RoleSub, RoleReq, RoleResponder:
		return role, n, true
	}
	return "", 0, false
}

// Workload names, for Config.Mode.
const (
	ModePub    = "pub"
	ModePubSub = "pubsub"
	ModeQueue  = "queue"
	ModeReqRep = "reqrep"
)

// Modes lists the workloads in the order they are documented.
var Modes = []string{ModePub, ModePubSub, ModeQueue, ModeReqRep}

// Config describes one run.
type Config struct {
	// Mode is the workload: "pub", "pubsub", "queue" or "reqrep".
	Mode string
	// Subject the messages are published (or requests sent) to. Empty picks a fresh
	// random subject, so concurrent runs against one broker do not see each other.
	Subject string
	// Pubs is the number of publishers (requesters in reqrep); at least 1.
	Pubs int
	// Subs is the number of subscribers (queue members in queue, responders in
	// reqrep); ignored in pub mode, at least 1 otherwise.
	Subs int
	// Size is the payload size in bytes. Payloads of 8 bytes or more carry the send
	// time, so smaller payloads give no latency figures (except in reqrep, which
	// times round trips at the requester).
	Size int
	// Msgs is the number of messages (requests) each publisher sends; 0 means
	// unbounded, and then Duration must be set.
	Msgs int
	// Duration bounds the publishing time; 0 means unbounded, and then Msgs must be
	// set. With both, the run stops at whichever comes first.
	Duration time.Duration
	// Queue is the queue group name in queue and reqrep modes (default "loadgen").
	Queue string
	// Rate is the messages per second each publisher sends; 0 means as fast as it
	// can.
	Rate int
	// Timeout is the hard limit on the whole run, after which it stops and reports
	// what it got with an error. 0 computes one: Duration + 30s, or from Msgs a
	// generous allowance per message plus 30s.
	Timeout time.Duration
	// Stall ends the wait for outstanding deliveries once publishing has finished and
	// no delivery arrived for this long (default 5s): lost messages then give an
	// incomplete result promptly instead of running into Timeout.
	Stall time.Duration
	// Probe makes every publisher (requester) confirm, before the run starts, that its
	// server delivers to every subscriber (queue member, responder). Each of those
	// subscribes on its own connection, after its workload subscription, to a probe
	// subject of its own (Subject + ".probe.<index>"), and each publisher sends to the
	// probe subjects until every one has answered, within ProbeTimeout. It is for
	// clusters, where a subscription made on one node reaches the others
	// asynchronously: the brokers pass on one connection's subscriptions in order, so
	// a probe that got through shows that the workload subscription made before it has
	// arrived too. Probes are not counted and take no part in the timing.
	Probe bool
}

// ProbeTimeout bounds the probing of Config.Probe.
const ProbeTimeout = 30 * time.Second

// ErrIncomplete is wrapped by the error Run returns when a run ended (by its timeout,
// a stall or cancellation) before every expected message arrived.
var ErrIncomplete = errors.New("incomplete run")

// normalize checks cfg and fills in defaults.
func (cfg Config) normalize() (Config, error) {
	switch cfg.Mode {
	case ModePub, ModePubSub, ModeQueue, ModeReqRep:
	case "":
		return cfg, errors.New("loadgen: no mode (want pub, pubsub, queue or reqrep)")
	default:
		return cfg, fmt.Errorf("loadgen: unknown mode %q (want pub, pubsub, queue or reqrep)", cfg.Mode)
	}
	if cfg.Pubs < 0 || cfg.Subs < 0 || cfg.Size < 0 || cfg.Msgs < 0 || cfg.Duration < 0 || cfg.Rate < 0 || cfg.Timeout < 0 || cfg.Stall < 0 {
		return cfg, errors.New("loadgen: negative pubs, subs, size, msgs, duration, rate, timeout or stall")
	}
	if cfg.Msgs == 0 && cfg.Duration == 0 {
		return cfg, errors.New("loadgen: set a message count, a duration or both")
	}
	if cfg.Pubs == 0 {
		cfg.Pubs = 1
	}
	if cfg.Mode == ModePub {
		cfg.Subs = 0
	} else if cfg.Subs == 0 {
		cfg.Subs = 1
	}
	if cfg.Subject == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.Subject = "loadgen." + hex.EncodeToString(b)
	}
	if cfg.Queue == "" && (cfg.Mode == ModeQueue || cfg.Mode == ModeReqRep) {
		cfg.Queue = "loadgen"
	}
	if cfg.Stall == 0 {
		cfg.Stall = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = cfg.defaultTimeout()
	}
	return cfg, nil
}

// defaultTimeout is Duration + 30s for timed runs; for counted runs it allows 20µs per
// delivery (200µs per request in reqrep, whose requests are sequential), at least the
// paced time when Rate is set, plus 30s; probing adds ProbeTimeout.
func (cfg Config) defaultTimeout() time.Duration {
	const slack = 30 * time.Second
	if cfg.Duration > 0 {
		if cfg.Probe {
			return cfg.Duration + ProbeTimeout + slack
		}
		return cfg.Duration + slack
	}
	var work time.Duration
	n := int64(cfg.Msgs)
	switch cfg.Mode {
	case ModeReqRep:
		work = time.Duration(n) * 200 * time.Microsecond
	case ModePubSub:
		work = time.Duration(n*int64(cfg.Pubs)*int64(cfg.Subs)) * 20 * time.Microsecond
	default:
		work = time.Duration(n*int64(cfg.Pubs)) * 20 * time.Microsecond
	}
	if cfg.Rate > 0 {
		if paced := time.Duration(float64(n) / float64(cfg.Rate) * float64(time.Second)); paced > work {
			work = paced
		}
	}
	if cfg.Probe {
		work += ProbeTimeout
	}
	return work + slack
}

// Run dials the connections the workload needs, runs it and returns what it measured.
// It closes every connection it opened before returning. A run that ended before every
// expected message arrived returns its partial Result with an error wrapping
// ErrIncomplete.
func Run(ctx context.Context, dial Dialer, cfg Config) (Result, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	r := &runner{cfg: cfg, dial: dial}
	defer r.closeAll()
	switch cfg.Mode {
	case ModeReqRep:
		return r.reqrep(ctx)
	default:
		return r.stream(ctx)
	}
}
