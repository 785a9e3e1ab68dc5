package kafka_test

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/kafka"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// TestKafkaAndMQTT: a record a Kafka producer sends to a topic reaches an MQTT
// subscriber of its subject (topic levels for subject tokens), and a message an
// MQTT client publishes on a subject the topic's stream captures is read by a Kafka
// consumer, with its subject in the Tern-Subject header.
func TestKafkaAndMQTT(t *testing.T) {
	s, addr := startTern(t, nil)
	ctx := ctxT(t)
	if _, err := native(t, s).Streams().AddStream(ctx, tern.StreamConfig{Name: "SENSORS", Subjects: []string{"sensors.>"}}); err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialTimeout("tcp", s.MQTTAddr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := packet.NewReader(nc, 1<<20)
	r.SetVersion(packet.V311)
	send := func(p packet.Packet) {
		t.Helper()
		b, err := packet.Append(nil, p, packet.V311)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	next := func() packet.Packet {
		t.Helper()
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		p, err := r.ReadPacket()
		if err != nil {
			t.Fatalf("mqtt: %v", err)
		}
		if pub, ok := p.(*packet.Publish); ok {
			cp := *pub
			cp.Payload = slices.Clone(pub.Payload)
			return &cp
		}
		return p
	}
	send(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311, CleanStart: true, ClientID: "bridge"})
	if _, ok := next().(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	send(&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: "sensors/kafka/#", QoS: 1}}})
	if _, ok := next().(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}

	cl := newClient(t, addr)
	rec := &kgo.Record{Topic: "SENSORS", Value: []byte("21.5"),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderSubject, Value: []byte("sensors.kafka.t1")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if p, ok := next().(*packet.Publish); !ok || p.Topic != "sensors/kafka/t1" || string(p.Payload) != "21.5" {
		t.Fatalf("MQTT subscriber got %+v, want the Kafka record on sensors/kafka/t1", p)
	}

	send(&packet.Publish{QoS: 1, PacketID: 9, Topic: "sensors/mqtt/t2", Payload: []byte("19.0")})
	if a, ok := next().(*packet.Ack); !ok || a.Type != packet.TypePuback || a.PacketID != 9 {
		t.Fatalf("want PUBACK 9, got %+v", a)
	}
	got := consume(t, addr, "SENSORS", 2)
	if len(got) != 2 || string(got[1].Value) != "19.0" {
		t.Fatalf("Kafka consumer read %d records, the second %q", len(got), got[len(got)-1].Value)
	}
	subj := ""
	for _, h := range got[1].Headers {
		if h.Key == kafka.HeaderSubject {
			subj = string(h.Value)
		}
	}
	if subj != "sensors.mqtt.t2" {
		t.Fatalf("the MQTT message's %s header is %q, want sensors.mqtt.t2", kafka.HeaderSubject, subj)
	}
}
