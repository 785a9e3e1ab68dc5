package mqtt

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/replica"
)

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

type testClient struct {
	t  *testing.T
	nc net.Conn
	r  *packet.Reader
}

func (c *testClient) send(p packet.Packet) {
	c.t.Helper()
	b, err := packet.Append(nil, p, packet.V311)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *testClient) next(d time.Duration) (packet.Packet, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	p, err := c.r.ReadPacket()
	if pub, ok := p.(*packet.Publish); ok && err == nil {
		cp := *pub
		cp.Payload = slices.Clone(pub.Payload)
		return &cp, nil
	}
	return p, err
}

func (c *testClient) must(d time.Duration) packet.Packet {
	c.t.Helper()
	p, err := c.next(d)
	if err != nil {
		c.t.Fatalf("reading a packet: %v", err)
	}
	return p
}

func (c *testClient) none(what string) {
	c.t.Helper()
	if p, err := c.next(300 * time.Millisecond); err == nil {
		c.t.Fatalf("%s: got %T %+v before the MQTT group committed", what, p, p)
	}
}

func dialTest(t *testing.T, addr, id string) *testClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &testClient{t: t, nc: nc, r: packet.NewReader(nc, 1<<20)}
	c.r.SetVersion(packet.V311)
	c.send(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311, ClientID: id})
	if _, ok := c.must(5 * time.Second).(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	return c
}

// TestReplicatedQoS2WaitsForCommit: with MQTT state in the cluster's group, a QoS 2
// PUBLISH to a client goes out only once its packet id is committed, and a PUBCOMP
// only once the release of the packet id it completes is: a node taking over the
// session from the group then neither sends the message again under another id nor
// drops the publisher's next message reusing the id as a duplicate.
func TestReplicatedQoS2WaitsForCommit(t *testing.T) {
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

	sub := dialTest(t, ln.Addr().String(), "sub")
	sub.send(&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: "t/q2", QoS: 2}}})
	if sa, ok := sub.must(5 * time.Second).(*packet.Suback); !ok || len(sa.Reasons) != 1 || sa.Reasons[0] != 2 {
		t.Fatalf("SUBACK %+v", sa)
	}
	pub := dialTest(t, ln.Addr().String(), "pub")

	release := g.holdContaining(kvMessage + "sub\x00")
	pub.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: "t/q2", Payload: []byte("m")})
	if a, ok := pub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrec || a.PacketID != 7 {
		t.Fatalf("want PUBREC 7, got %+v", a)
	}
	sub.none("QoS 2 PUBLISH to the subscriber")
	release()
	p, ok := sub.must(5 * time.Second).(*packet.Publish)
	if !ok || p.QoS != 2 || string(p.Payload) != "m" {
		t.Fatalf("subscriber got %+v, want the QoS 2 message", p)
	}

	release = g.holdContaining(kvQoS2 + "pub\x00")
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	pub.none("PUBCOMP")
	release()
	if a, ok := pub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubcomp || a.PacketID != 7 {
		t.Fatalf("want PUBCOMP 7, got %+v", a)
	}
	// The subscriber's side of the exchange goes on as usual.
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
	if a, ok := sub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrel || a.PacketID != p.PacketID {
		t.Fatalf("want PUBREL %d, got %+v", p.PacketID, a)
	}
}
