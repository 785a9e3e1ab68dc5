package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/wire"
)

// BenchmarkPubSubLoopback measures the broker end to end over loopback TCP with the
// raw codec: one connection publishes batches of 16-byte messages, another receives.
func BenchmarkPubSubLoopback(b *testing.B) {
	s := startServer(b, func(c *Config) { c.HTTPAddr = "" })
	sub, _ := connectRaw(b, s, 0)
	pub, _ := connectRaw(b, s, 0)
	sub.send(wire.AppendSub(nil, 0, 1, "bench", "", ""))
	sub.sync()
	payload := make([]byte, 16)
	var batch []byte
	for i := 0; i < 512; i++ {
		batch = wire.AppendPub(batch, 0, "bench", "", nil, payload)
	}
	done := make(chan int)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		got := 0
		buf := make([]byte, 256<<10)
		n := 0
		for got < b.N {
			k, err := sub.nc.Read(buf[n:])
			if err != nil {
				break
			}
			n += k
			off := 0
			var f wire.Frame
			for {
				c, err := f.Decode(buf[off:n], 0)
				if errors.Is(err, wire.ErrIncomplete) {
					break
				}
				if err != nil {
					panic(err)
				}
				off += c
				got++
			}
			n = copy(buf, buf[off:n])
		}
		done <- got
	}()
	for sent := 0; sent < b.N; sent += 512 {
		k := min(512, b.N-sent)
		if _, err := pub.nc.Write(batch[:k*len(batch)/512]); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.SetBytes(16)
}

// benchMQTTClient connects an MQTT 3.1.1 client over loopback TCP, outside the timer.
func benchMQTTClient(b *testing.B, s *Server, id string, subscribe string) net.Conn {
	return benchMQTTClientAs(b, s, id, subscribe, "", "")
}

// benchMQTTClientAs is benchMQTTClient logging in with user and password, when
// either is set (a bearer token is the password of user "").
func benchMQTTClientAs(b *testing.B, s *Server, id, subscribe, user, password string) net.Conn {
	b.Helper()
	nc, err := net.Dial("tcp", s.MQTTAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	cp := &packet.Connect{ProtocolLevel: packet.V311, ClientID: id, CleanStart: true}
	if user != "" || password != "" {
		cp.Username, cp.HasUsername, cp.Password, cp.HasPassword = user, true, []byte(password), true
	}
	out, _ := packet.Append(nil, cp, packet.V311)
	want := 4 // CONNACK
	if subscribe != "" {
		out, _ = packet.Append(out, &packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: subscribe}}}, packet.V311)
		want += 5 // SUBACK with one reason
	}
	if _, err := nc.Write(out); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(nc, make([]byte, want)); err != nil {
		b.Fatal(err)
	}
	return nc
}

// BenchmarkMQTTPubSubLoopback measures the MQTT path end to end over loopback TCP:
// one MQTT client publishes batches of 16-byte QoS 0 messages, another receives. Its
// allocations are the server's per message (the clients here are raw bytes).
func BenchmarkMQTTPubSubLoopback(b *testing.B) {
	s := startServer(b, func(c *Config) { c.HTTPAddr = "" })
	sub := benchMQTTClient(b, s, "bench-sub", "bench/x")
	pub := benchMQTTClient(b, s, "bench-pub", "")
	deadline := time.Now().Add(5 * time.Second)
	for !s.Broker().HasInterest([]byte("bench.x")) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	msg, _ := packet.Append(nil, &packet.Publish{Topic: "bench/x", Payload: make([]byte, 16)}, packet.V311)
	streamLoopback(b, pub, sub, msg, len(msg)) // every delivery is the same PUBLISH
}

// BenchmarkMQTTPubSubLoopbackAuth: as BenchmarkMQTTPubSubLoopback, with users:
// the publisher may publish under sensors.> but not sensors.secret (each publish
// checked), and the subscriber's "#" reaches subjects it may not read (each
// delivery checked).
func BenchmarkMQTTPubSubLoopbackAuth(b *testing.B) {
	users := authtest.File(b)
	s := startServer(b, func(c *Config) { c.HTTPAddr, c.UsersFile = "", users })
	sub := benchMQTTClientAs(b, s, "bench-sub", "#", "", authtest.BobToken)
	pub := benchMQTTClientAs(b, s, "bench-pub", "", authtest.Alice, authtest.AlicePassword)
	deadline := time.Now().Add(5 * time.Second)
	for !s.Broker().HasInterest([]byte("sensors.x")) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	msg, _ := packet.Append(nil, &packet.Publish{Topic: "sensors/x", Payload: make([]byte, 16)}, packet.V311)
	streamLoopback(b, pub, sub, msg, len(msg))
}

// BenchmarkMQTTOverlapLoopback: as BenchmarkMQTTPubSubLoopback, to an MQTT 5
// subscriber with two overlapping subscriptions, so that each message is one PUBLISH
// carrying both subscription identifiers.
func BenchmarkMQTTOverlapLoopback(b *testing.B) {
	s := startServer(b, func(c *Config) { c.HTTPAddr = "" })
	nc, err := net.Dial("tcp", s.MQTTAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	out, _ := packet.Append(nil, &packet.Connect{ProtocolLevel: packet.V5, ClientID: "bench-overlap", CleanStart: true}, packet.V5)
	for i, f := range []string{"bench/x", "bench/+"} {
		out, _ = packet.Append(out, &packet.Subscribe{PacketID: uint16(i + 1), Props: packet.Properties{SubscriptionIDs: []uint32{uint32(i + 1)}},
			Subs: []packet.Subscription{{Filter: f}}}, packet.V5)
	}
	if _, err := nc.Write(out); err != nil {
		b.Fatal(err)
	}
	r := packet.NewReader(nc, 1<<16)
	r.SetVersion(packet.V5)
	for range 3 { // CONNACK and two SUBACKs; nothing follows them until the publishes
		if _, err := r.ReadPacket(); err != nil {
			b.Fatal(err)
		}
	}
	pub := benchMQTTClient(b, s, "bench-pub", "")
	msg, _ := packet.Append(nil, &packet.Publish{Topic: "bench/x", Payload: make([]byte, 16)}, packet.V311)
	want, _ := packet.Append(nil, &packet.Publish{Topic: "bench/x", Payload: make([]byte, 16), Props: packet.Properties{SubscriptionIDs: []uint32{1, 2}}}, packet.V5)
	streamLoopback(b, pub, nc, msg, len(want))
}

// BenchmarkMQTTToNativeLoopback: an MQTT publisher's QoS 0 messages delivered to a
// native subscriber, the cross-protocol path.
func BenchmarkMQTTToNativeLoopback(b *testing.B) {
	s := startServer(b, func(c *Config) { c.HTTPAddr = "" })
	sub, _ := connectRaw(b, s, 0)
	sub.send(wire.AppendSub(nil, 0, 1, "bench.x", "", ""))
	sub.sync()
	pub := benchMQTTClient(b, s, "bench-pub", "")
	msg, _ := packet.Append(nil, &packet.Publish{Topic: "bench/x", Payload: make([]byte, 16)}, packet.V311)
	streamLoopback(b, pub, sub.nc, msg, len(wire.AppendMsg(nil, 1, []byte("bench.x"), nil, nil, make([]byte, 16))))
}

// streamLoopback writes b.N copies of msg to pub in batches and reads from sub until
// b.N deliveries of delivered bytes each have arrived.
func streamLoopback(b *testing.B, pub, sub net.Conn, msg []byte, delivered int) {
	batch := bytes.Repeat(msg, 512)
	done := make(chan int)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		want := b.N * delivered
		buf := make([]byte, 256<<10)
		got := 0
		for got < want {
			k, err := sub.Read(buf)
			if err != nil {
				break
			}
			got += k
		}
		done <- got
	}()
	for sent := 0; sent < b.N; sent += 512 {
		k := min(512, b.N-sent)
		if _, err := pub.Write(batch[:k*len(msg)]); err != nil {
			b.Fatal(err)
		}
	}
	if got := <-done; got != b.N*delivered {
		b.Fatalf("received %d bytes, want %d", got, b.N*delivered)
	}
	b.SetBytes(16)
}

// TestPublishDeliverPathsDoNotAllocate: the publish → deliver path of every
// protocol, measured end to end over loopback by the benchmarks above, makes no
// allocation per message (amortised buffer growth rounds to zero).
func TestPublishDeliverPathsDoNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs benchmarks")
	}
	for name, bench := range map[string]func(*testing.B){
		"native":         BenchmarkPubSubLoopback,
		"mqtt":           BenchmarkMQTTPubSubLoopback,
		"mqtt-to-native": BenchmarkMQTTToNativeLoopback,
		"mqtt-overlap":   BenchmarkMQTTOverlapLoopback,
	} {
		r := testing.Benchmark(bench)
		if r.N == 0 {
			t.Fatalf("%s: benchmark failed", name)
		}
		if a := r.AllocsPerOp(); a != 0 {
			t.Errorf("%s: %d allocations per message (%d B/op over %d messages), want 0", name, a, r.AllocedBytesPerOp(), r.N)
		}
	}
}
