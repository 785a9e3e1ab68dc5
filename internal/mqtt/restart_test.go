package mqtt_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// startAtDir runs a server whose streams and MQTT state live in dir; stop it with
// stopServer to restart on the same directory.
func startAtDir(t *testing.T, dir string) (*server.Server, string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", 0, -1, dir, -1
	cfg.KafkaPort = -1
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	baselines.Store(s, s.Broker().Count())
	return s, strconv.Itoa(s.MQTTAddr().(*net.TCPAddr).Port)
}

func stopServer(t *testing.T, s *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRestartKeepsSessionsAndRetained: persistent sessions (subscriptions, queued
// QoS 1 messages, QoS 2 exchanges half done in both directions) and retained messages
// survive a server restart.
func TestRestartKeepsSessionsAndRetained(t *testing.T) {
	dir := t.TempDir()
	s, port := startAtDir(t, dir)

	// dev1 subscribes and goes away; messages queue for it.
	dev1 := dialRaw(t, port, packet.V311)
	dev1.connect("dev1", false, 0, nil)
	dev1.subscribe(1, "cmd/#", 1)
	_ = dev1.nc.Close()

	// dev2 gets a QoS 2 message, sends PUBREC, and drops before PUBCOMP.
	dev2 := dialRaw(t, port, packet.V311)
	dev2.connect("dev2", false, 0, nil)
	dev2.subscribe(1, "exact/#", 2)
	waitSubs(t, s, 4) // cmd/# is two broker subscriptions, exact/# two more

	pub := dialRaw(t, port, packet.V5)
	pub.connect("pub", true, 0, nil)
	for i := range 5 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: "cmd/k1", Payload: []byte{'0' + byte(i)}})
		pub.must(5 * time.Second)
	}
	pub.send(&packet.Publish{QoS: 1, PacketID: 9, Retain: true, Topic: "status/k1", Payload: []byte("online")})
	pub.must(5 * time.Second)
	pub.send(&packet.Publish{QoS: 2, PacketID: 10, Topic: "exact/k2", Payload: []byte("once")})
	pub.must(5 * time.Second) // PUBREC
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 10})
	pub.must(5 * time.Second) // PUBCOMP

	got := dev2.must(5 * time.Second).(*packet.Publish)
	dev2.send(&packet.Ack{Type: packet.TypePubrec, PacketID: got.PacketID})
	if a := dev2.must(5 * time.Second).(*packet.Ack); a.Type != packet.TypePubrel {
		t.Fatalf("dev2: want PUBREL, got %+v", a)
	}
	_ = dev2.nc.Close()

	// sender publishes QoS 2 and drops before PUBREL.
	sender := dialRaw(t, port, packet.V5)
	sender.connect("sender", false, 0, &packet.Properties{SessionExpiry: 3600, HasSessionExpiry: true})
	sender.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: "in/q2", Payload: []byte("x")})
	if a := sender.must(5 * time.Second).(*packet.Ack); a.Type != packet.TypePubrec {
		t.Fatalf("sender: want PUBREC, got %+v", a)
	}
	_ = sender.nc.Close()
	_ = pub.nc.Close()                 // a v5 client the server says goodbye to is waited for a while
	time.Sleep(200 * time.Millisecond) // let the connections' ends be recorded
	stopServer(t, s)

	s, port = startAtDir(t, dir)
	defer stopServer(t, s)

	dev1 = dialRaw(t, port, packet.V311)
	if ca := dev1.connect("dev1", false, 0, nil); !ca.SessionPresent {
		t.Fatal("dev1: session lost in the restart")
	}
	var payloads string
	for range 5 {
		p := dev1.must(5 * time.Second).(*packet.Publish)
		payloads += string(p.Payload)
		dev1.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
	if payloads != "01234" {
		t.Fatalf("dev1 got %q after the restart, want 01234", payloads)
	}
	// Its subscription came back too: a new message reaches it.
	pub = dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	pub.send(&packet.Publish{Topic: "cmd/k9", Payload: []byte("live")})
	if p := dev1.must(5 * time.Second).(*packet.Publish); string(p.Payload) != "live" {
		t.Fatalf("dev1 after restart: %+v", p)
	}

	dev2 = dialRaw(t, port, packet.V311)
	if ca := dev2.connect("dev2", false, 0, nil); !ca.SessionPresent {
		t.Fatal("dev2: session lost in the restart")
	}
	if p := dev2.must(5 * time.Second); p.PacketType() != packet.TypePubrel {
		t.Fatalf("dev2 after restart: %+v, want PUBREL (the message was received before the restart)", p)
	}

	sender = dialRaw(t, port, packet.V5)
	sender.connect("sender", false, 0, &packet.Properties{SessionExpiry: 3600, HasSessionExpiry: true})
	sender.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	if a := sender.must(5 * time.Second).(*packet.Ack); a.Type != packet.TypePubcomp || a.Reason != packet.Success {
		t.Fatalf("sender PUBREL after restart: %+v, want PUBCOMP success", a)
	}

	watch := dialRaw(t, port, packet.V311)
	watch.connect("watch", true, 0, nil)
	watch.subscribe(1, "status/+", 1)
	if p := watch.must(5 * time.Second).(*packet.Publish); !p.Retain || string(p.Payload) != "online" {
		t.Fatalf("retained after restart: %+v", p)
	}
	_ = sender.nc.Close() // not waited for at the shutdown
}
