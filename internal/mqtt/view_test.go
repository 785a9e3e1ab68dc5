package mqtt

import (
	"net"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// viewClient is an MQTT 5 client speaking packet by packet to a server of this
// package's tests.
type viewClient struct {
	t  *testing.T
	nc net.Conn
	r  *packet.Reader
}

func (c *viewClient) send(p packet.Packet) {
	c.t.Helper()
	b, err := packet.Append(nil, p, packet.V5)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *viewClient) next() packet.Packet {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := c.r.ReadPacket()
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// TestQoS0StaleViewRoutesAgain: a QoS 0 delivery routed by a view of the session
// that has since been replaced queues nothing, and routing again by the current
// view decides: after UNSUBACK nothing arrives for the removed subscription; once
// the client is away nothing is written and nothing panics.
func TestQoS0StaleViewRoutesAgain(t *testing.T) {
	s := fuzzServer(t, "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Shutdown(5 * time.Second) })
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &viewClient{t: t, nc: nc, r: packet.NewReader(nc, 1<<20)}
	c.r.SetVersion(packet.V5)
	c.send(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V5, CleanStart: true, ClientID: "viewer"})
	if _, ok := c.next().(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	subscribe := func(pid uint16) {
		c.send(&packet.Subscribe{PacketID: pid, Subs: []packet.Subscription{{Filter: "a"}}})
		if _, ok := c.next().(*packet.Suback); !ok {
			t.Fatal("no SUBACK")
		}
	}
	subscribe(1)
	s.mu.Lock()
	sess := s.sessions["viewer"]
	s.mu.Unlock()
	x := sess.x.Load()
	view := func() (*routeView, *broker.Subscription) {
		v := x.view.Load()
		if len(v.subs) != 1 {
			t.Fatalf("view of %d subscriptions, want 1", len(v.subs))
		}
		for sub := range v.subs {
			return v, sub
		}
		return v, nil
	}
	m := &broker.Message{Subject: []byte("a"), Payload: []byte("m")}

	v, sub := view()
	if !sess.Deliver(sub, m) {
		t.Fatal("delivery to a live subscription refused")
	}
	sess.Flush()
	if p, ok := c.next().(*packet.Publish); !ok || p.Topic != "a" {
		t.Fatalf("got %v, want the PUBLISH", p)
	}

	c.send(&packet.Unsubscribe{PacketID: 2, Filters: []string{"a"}})
	if _, ok := c.next().(*packet.Unsuback); !ok {
		t.Fatal("no UNSUBACK")
	}
	if ok, current := v.conn.deliverQoS0(m, "", false, nil, 0, time.Time{}, x, v); ok || current {
		t.Fatalf("by the view before UNSUBSCRIBE: queued %v, view current %v; want neither", ok, current)
	}
	if sess.Deliver(sub, m) {
		t.Fatal("delivery to a removed subscription accepted")
	}
	c.send(&packet.Pingreq{})
	if p, ok := c.next().(*packet.Pingresp); !ok {
		t.Fatalf("got %T after UNSUBACK, want PINGRESP only", p)
	}

	subscribe(3)
	v, sub = view()
	_ = nc.Close()
	for deadline := time.Now().Add(5 * time.Second); sess.conn.Load() != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session still has its connection")
		}
	}
	if ok, _ := v.conn.deliverQoS0(m, "", false, nil, 0, time.Time{}, x, v); ok {
		t.Fatal("queued to a closed connection")
	}
	if sess.Deliver(sub, m) {
		t.Fatal("QoS 0 delivery to an absent client accepted")
	}
}
