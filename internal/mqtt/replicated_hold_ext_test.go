package mqtt_test

import (
	"net"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// TestReplicatedQoS2WaitsForCommit: with MQTT state in the cluster's group, a QoS 2
// PUBLISH to a client goes out only once its packet id is committed, a PUBREL to it
// only once its PUBREC is, and a PUBCOMP only once the release of the packet id it
// completes is: a node taking over the session from the group then neither sends
// the message again (under another id, or after the client delivered it) nor drops
// the publisher's next message reusing the id as a duplicate.
func TestReplicatedQoS2WaitsForCommit(t *testing.T) {
	addr, hold := mqtt.StartHeldReplicated(t)
	_, port, _ := net.SplitHostPort(addr)
	sub := dialRaw(t, port, packet.V311)
	sub.connect("sub", false, 0, nil)
	if r := sub.subscribe(1, "t/q2", 2); len(r) != 1 || r[0] != 2 {
		t.Fatalf("SUBACK %v", r)
	}
	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", false, 0, nil)
	none := func(c *rawClient, what string) {
		t.Helper()
		if p, err := c.next(300 * time.Millisecond); err == nil {
			t.Fatalf("%s: got %T %+v before the MQTT group committed", what, p, p)
		}
	}

	release := hold("sub", "message")
	pub.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: "t/q2", Payload: []byte("m")})
	if a, ok := pub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrec || a.PacketID != 7 {
		t.Fatalf("want PUBREC 7, got %+v", a)
	}
	none(sub, "QoS 2 PUBLISH to the subscriber")
	release()
	p, ok := sub.must(5 * time.Second).(*packet.Publish)
	if !ok || p.QoS != 2 || string(p.Payload) != "m" {
		t.Fatalf("subscriber got %+v, want the QoS 2 message", p)
	}

	release = hold("pub", "qos2")
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	none(pub, "PUBCOMP")
	release()
	if a, ok := pub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubcomp || a.PacketID != 7 {
		t.Fatalf("want PUBCOMP 7, got %+v", a)
	}
	// The subscriber's PUBREL waits for its PUBREC to be stored: the client
	// delivers the message at the PUBREL and forgets the packet id at its PUBCOMP,
	// so a node taking over the session without the PUBREC would send the PUBLISH
	// again, and the client would deliver it twice.
	release = hold("sub", "message")
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
	none(sub, "PUBREL")
	release()
	if a, ok := sub.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrel || a.PacketID != p.PacketID {
		t.Fatalf("want PUBREL %d, got %+v", p.PacketID, a)
	}
}
