package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	tern "github.com/tern-mq/tern/client/go"

	"github.com/tern-mq/tern/bench/internal/natsbus"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
)

// kind is one broker under test: how to read its nodes' monitoring and how to
// connect. Everything else the measurements do goes through loadgen.Bus, the same
// code for both.
type kind struct {
	Key, Name   string
	monitorPath string
	parseView   func([]byte) (view, error)
	// dial connects to one server without reconnecting, as the workloads do.
	dial func(url, name string) (bus loadgen.Bus, version string, err error)
	// dialFailover connects to the first reachable server of urls and, when that
	// connection breaks, moves to the next one in the list order (wait between
	// rounds over the list), telling ev.
	dialFailover func(urls []string, name string, wait time.Duration, ev *events) (loadgen.Bus, func() string, error)
}

// events records when a reconnecting client lost its server and when it got another,
// as nanoseconds since the Unix epoch (0: not yet).
type events struct {
	disconnected, reconnected atomic.Int64
}

func (e *events) disconnect() { e.disconnected.CompareAndSwap(0, time.Now().UnixNano()) }
func (e *events) reconnect()  { e.reconnected.CompareAndSwap(0, time.Now().UnixNano()) }

var kinds = map[string]*kind{
	"nats": {
		Key: "nats", Name: "NATS", monitorPath: "/routez", parseView: parseNATSRoutez,
		dial: func(url, name string) (loadgen.Bus, string, error) {
			b, err := natsbus.Dial(url, name)
			if err != nil {
				return nil, "", err
			}
			return b, b.ServerVersion(), nil
		},
		dialFailover: func(urls []string, name string, wait time.Duration, ev *events) (loadgen.Bus, func() string, error) {
			// In the list order (no shuffling), no limit on attempts. nats.go tries
			// the next server at once and waits (ReconnectWait, no jitter here)
			// only after a round over the whole list.
			nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(name), nats.DontRandomize(),
				nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0),
				nats.DisconnectErrHandler(func(*nats.Conn, error) { ev.disconnect() }),
				nats.ReconnectHandler(func(*nats.Conn) { ev.reconnect() }))
			if err != nil {
				return nil, nil, err
			}
			return natsbus.New(nc), nc.ConnectedUrl, nil
		},
	},
	"tern": {
		Key: "tern", Name: "Tern", monitorPath: "/cluster", parseView: parseTernCluster,
		dial: func(url, name string) (loadgen.Bus, string, error) {
			b, err := ternbus.Dial(url, name)
			if err != nil {
				return nil, "", err
			}
			return b, b.ServerVersion(), nil
		},
		dialFailover: func(urls []string, name string, wait time.Duration, ev *events) (loadgen.Bus, func() string, error) {
			// Tern's client starts each round over the list, the first included,
			// after a random delay between wait/2 and wait, beginning with the
			// server after the one that failed.
			nc, err := tern.Connect(strings.Join(urls, ","), tern.Name(name), ternbus.Unlimited(),
				tern.MaxReconnects(-1), tern.ReconnectWait(wait), tern.MaxReconnectWait(max(wait, time.Second)),
				tern.DisconnectErrHandler(func(*tern.Conn, error) { ev.disconnect() }),
				tern.ReconnectHandler(func(*tern.Conn) { ev.reconnect() }))
			if err != nil {
				return nil, nil, err
			}
			return ternbus.New(nc), nc.ConnectedURL, nil
		},
	},
}

func kindOf(key string) (*kind, error) {
	k, ok := kinds[key]
	if !ok {
		return nil, fmt.Errorf("unknown system %q (want nats or tern)", key)
	}
	return k, nil
}
