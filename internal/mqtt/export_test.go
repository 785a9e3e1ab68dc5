package mqtt

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/replica"
)

// PollerTracked is how many connections the idle poller holds, for tests.
func PollerTracked(s *Server) int { return s.poll.tracked() }

// PollerDormant is how many parked connections hold no Go socket, for tests.
func PollerDormant(s *Server) int { return s.poll.dormantCount() }

// FreshIdleAfter is how long a freshly connected client may be silent before its
// connection parks.
const FreshIdleAfter = freshIdleAfter

// heldGroup is a one-replica MQTT group whose commits a test can hold: a proposal
// the hold function picks waits until release.
type heldGroup struct {
	st      *State
	mu      sync.Mutex
	index   uint64
	hold    func(data []byte) bool
	release chan struct{}
}

func (g *heldGroup) ProposeMQTT(ctx context.Context, data []byte) (uint64, error) {
	g.mu.Lock()
	hold, release := g.hold, g.release
	g.mu.Unlock()
	if hold != nil && hold(data) {
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.index++
	return g.index, g.st.Apply([]replica.Entry{{Index: g.index, Data: data}})
}

// holdContaining holds the proposals whose bytes contain s until the returned
// function is called.
func (g *heldGroup) holdContaining(s string) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.hold = func(data []byte) bool { return bytes.Contains(data, []byte(s)) }
	g.release = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.hold = nil
		g.mu.Unlock()
		close(ch)
	}
}

// StartHeldReplicated starts a server whose MQTT state lives in a one-replica
// group (as a cluster node's does) and returns its address and a way to hold the
// group's commits: hold(client, what) holds, until release is called, every
// proposal that writes a record of what ("message": a message with its packet id,
// "qos2": a QoS 2 packet id received) for client.
func StartHeldReplicated(t *testing.T) (addr string, hold func(client, what string) (release func())) {
	t.Helper()
	srv, err := NewServer(Config{Replicated: true, SysInterval: -1, IdleAfter: -1, MaxQueued: 100}, broker.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g := &heldGroup{st: NewState(100, nil)}
	srv.SetReplication(g.st, g, "n1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(time.Second) })
	return ln.Addr().String(), func(client, what string) func() {
		prefix := map[string]string{"message": kvMessage, "qos2": kvQoS2}[what]
		if prefix == "" {
			t.Fatalf("no record %q", what)
		}
		return g.holdContaining(prefix + client + "\x00")
	}
}
