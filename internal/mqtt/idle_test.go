package mqtt_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// The tests here use a short idle time so that connections park (give up their
// reader goroutine and wait in the server's epoll set) within the test.

const testIdleAfter = 50 * time.Millisecond

func idleServer(t *testing.T) (*server.Server, string) {
	return startTern(t, func(c *server.Config) { c.MQTT.IdleAfter = testIdleAfter })
}

// waitIdle waits until n connections are parked.
func waitIdle(t *testing.T, s *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.MQTT().Stats().Idle != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections, want %d", s.MQTT().Stats().Idle, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitDormant waits until n connections are parked without a Go socket, as they
// are once their writers have stopped too.
func waitDormant(t *testing.T, s *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for mqtt.PollerDormant(s.MQTT()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d dormant connections, want %d", mqtt.PollerDormant(s.MQTT()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openFiles counts this process's descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestIdleConnectionWorksBothWays: a parked connection answers a PINGREQ, takes a
// PUBLISH and a SUBSCRIBE from its client, and gets what its subscription matches
// while parked, QoS 0 and 1.
func TestIdleConnectionWorksBothWays(t *testing.T) {
	s, port := idleServer(t)
	sub := dialRaw(t, port, packet.V311)
	sub.connect("idle-sub", true, 0, nil)
	sub.subscribe(1, "idle/#", 1)
	pub := dialRaw(t, port, packet.V5)
	pub.connect("idle-pub", true, 60, nil)
	waitIdle(t, s, 2)
	waitDormant(t, s, 2)

	pub.send(&packet.Pingreq{})
	if _, ok := pub.must(2 * time.Second).(*packet.Pingresp); !ok {
		t.Fatal("no PINGRESP from a parked connection")
	}
	waitIdle(t, s, 2)
	waitDormant(t, s, 2)
	// The subscriber is parked and dormant; messages reach it through its writer,
	// which gives it a socket again, and its PUBACK through the poller.
	pub.send(&packet.Publish{Topic: "idle/a", QoS: 0, Payload: []byte("zero")})
	pub.send(&packet.Publish{Topic: "idle/b", QoS: 1, PacketID: 7, Payload: []byte("one")})
	if pa, ok := pub.must(2 * time.Second).(*packet.Ack); !ok || pa.PacketID != 7 {
		t.Fatalf("PUBACK: %+v", pa)
	}
	got := map[string]string{}
	for len(got) < 2 {
		p, ok := sub.must(2 * time.Second).(*packet.Publish)
		if !ok {
			continue
		}
		got[p.Topic] = string(p.Payload)
		if p.QoS == 1 {
			sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
	}
	if got["idle/a"] != "zero" || got["idle/b"] != "one" {
		t.Fatalf("delivered %v", got)
	}
	// A new subscription from a parked connection.
	waitIdle(t, s, 2)
	waitDormant(t, s, 2)
	if rc := sub.subscribe(2, "other/+", 0); rc[0] != packet.GrantedQoS0 {
		t.Fatalf("SUBACK %v", rc)
	}
	pub.send(&packet.Publish{Topic: "other/x", Payload: []byte("x")})
	if p, ok := sub.must(2 * time.Second).(*packet.Publish); !ok || p.Topic != "other/x" {
		t.Fatalf("got %+v", p)
	}
}

// TestIdleKeepaliveExpiry: a parked connection whose client stays silent past 1.5×
// its keepalive is closed as any other (0x8D to a v5 client) and its will goes out.
func TestIdleKeepaliveExpiry(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	s, port := idleServer(t)
	watcher := dialRaw(t, port, packet.V311)
	watcher.connect("watcher", true, 0, nil)
	watcher.subscribe(1, "wills/#", 0)
	c := dialRaw(t, port, packet.V5)
	c.send(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V5, CleanStart: true, KeepAlive: 1,
		ClientID: "silent", WillFlag: true, WillTopic: "wills/silent", WillPayload: []byte("gone")})
	if _, ok := c.must(5 * time.Second).(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	start := time.Now()
	waitIdle(t, s, 2)
	waitDormant(t, s, 2)
	d := c.closedWith(10 * time.Second)
	// The poller's sweep looks once a second: up to a second late.
	if took := time.Since(start); took < 1400*time.Millisecond || took > 4*time.Second {
		t.Fatalf("closed after %v, want 1.5 to 2.5 s (1.5 × keepalive 1 s)", took)
	}
	if d == nil || d.Reason != packet.KeepAliveTimeout {
		t.Fatalf("DISCONNECT %+v, want 0x8D", d)
	}
	if p, ok := watcher.must(5 * time.Second).(*packet.Publish); !ok || string(p.Payload) != "gone" {
		t.Fatalf("will: %+v", p)
	}
}

// TestIdleTakeoverAndShutdown: a parked session is taken over by a new connection
// with its client id, and a server shutting down closes parked connections with
// 0x8B and ends every goroutine they had.
func TestIdleTakeoverAndShutdown(t *testing.T) {
	before := runtime.NumGoroutine()
	s, port := idleServer(t)
	old := dialRaw(t, port, packet.V5)
	old.connect("dup", false, 0, &packet.Properties{SessionExpiry: 60, HasSessionExpiry: true})
	old.subscribe(1, "keep/#", 1)
	waitIdle(t, s, 1)
	waitDormant(t, s, 1)
	nc := dialRaw(t, port, packet.V5)
	if ca := nc.connect("dup", false, 0, &packet.Properties{SessionExpiry: 60, HasSessionExpiry: true}); !ca.SessionPresent {
		t.Fatal("the session was not kept for the new connection")
	}
	if d := old.closedWith(5 * time.Second); d == nil || d.Reason != packet.SessionTakenOver {
		t.Fatalf("old connection: DISCONNECT %+v, want 0x8E", d)
	}
	others := make([]*rawClient, 20)
	for i := range others {
		others[i] = dialRaw(t, port, packet.V5)
		others[i].connect("", true, 0, nil)
	}
	waitIdle(t, s, len(others)+1)
	waitDormant(t, s, len(others)+1)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(others, nc) {
		if d := c.closedWith(5 * time.Second); d == nil || d.Reason != packet.ServerShuttingDown {
			t.Fatalf("DISCONNECT %+v, want 0x8B", d)
		}
	}
	waitGoroutines(t, before)
}

// TestIdleManyCloseNoLeak: many parked connections closed by their clients leave no
// goroutine and nothing in the poller.
func TestIdleManyCloseNoLeak(t *testing.T) {
	s, port := idleServer(t)
	before := runtime.NumGoroutine()
	fdsBefore := openFiles(t)
	cs := make([]*rawClient, 200)
	for i := range cs {
		cs[i] = dialRaw(t, port, packet.V311)
		cs[i].connect("", true, 30, nil)
	}
	waitIdle(t, s, len(cs))
	if n := mqtt.PollerTracked(s.MQTT()); n != len(cs) {
		t.Fatalf("poller holds %d, want %d", n, len(cs))
	}
	// Parked, they cost no goroutine each once their writers, which linger a
	// moment after the last write (the CONNACK), have ended; then they keep one
	// descriptor each and no Go socket.
	waitGoroutines(t, before)
	waitDormant(t, s, len(cs))
	if n := openFiles(t) - fdsBefore; n != 2*len(cs) {
		t.Fatalf("%d more descriptors, want %d (client and server side of each)", n, 2*len(cs))
	}
	for i, c := range cs {
		if i%2 == 0 {
			c.send(&packet.Disconnect{})
		}
		_ = c.nc.Close()
	}
	waitOffline(t, s)
	if n := mqtt.PollerTracked(s.MQTT()); n != 0 {
		t.Fatalf("poller still holds %d connections", n)
	}
	waitGoroutines(t, before)
	// Descriptors of other tests' connections may still be closing: the count has
	// to come back to where it was, not be there at once.
	deadline := time.Now().Add(5 * time.Second)
	for n := openFiles(t); n > fdsBefore; n = openFiles(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors open, %d before the connections: leaked", n, fdsBefore)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGoroutines waits for the goroutine count to come back to about n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n+5 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, want about %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFreshConnectionNotParkedBeforeIdle: a client that has just connected keeps its
// reader for a short while (freshIdleAfter), so the SUBSCRIBE it sends on its CONNACK
// is read at once; silent after that, it parks; once it has spoken, it parks only
// after the full idle time, like any connection.
func TestFreshConnectionNotParkedBeforeIdle(t *testing.T) {
	const idleAfter = 800 * time.Millisecond
	s, port := startTern(t, func(c *server.Config) { c.MQTT.IdleAfter = idleAfter })
	c := dialRaw(t, port, packet.V311)
	// Clocks start before each packet is sent: the server's start after it reads
	// them, so what the test measures is never longer than what the server waited.
	connected := time.Now()
	c.connect("fresh", true, 0, nil)
	if n := s.MQTT().Stats().Idle; n != 0 && time.Since(connected) < mqtt.FreshIdleAfter {
		t.Fatalf("%d connections parked %v after CONNACK", n, time.Since(connected))
	}
	waitIdle(t, s, 1)
	if waited := time.Since(connected); waited < mqtt.FreshIdleAfter {
		t.Fatalf("a fresh connection parked after %v, before %v", waited, mqtt.FreshIdleAfter)
	}
	// Spoken to, it reads again, and now waits the whole idle time before parking.
	spoke := time.Now()
	c.subscribe(1, "fresh/#", 0)
	waitIdle(t, s, 0)
	waitIdle(t, s, 1)
	if waited := time.Since(spoke); waited < idleAfter {
		t.Fatalf("parked %v after its SUBSCRIBE, before the %v idle time", waited, idleAfter)
	}
}

// splitConn writes through to its Conn, except that while split is set a write
// (a TLS record, under crypto/tls) goes out in two parts, pause apart.
type splitConn struct {
	net.Conn
	split atomic.Bool
	pause time.Duration
}

func (s *splitConn) Write(p []byte) (int, error) {
	if !s.split.Load() || len(p) < 8 {
		return s.Conn.Write(p)
	}
	n, err := s.Conn.Write(p[:3])
	if err != nil {
		return n, err
	}
	time.Sleep(s.pause)
	m, err := s.Conn.Write(p[3:])
	return n + m, err
}

// dialRawTLS is dialRaw over TLS, through a splitConn the test may switch on.
func dialRawTLS(t *testing.T, addr net.Addr, cs *testcerts.Set, v byte) (*rawClient, *splitConn) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sc := &splitConn{Conn: nc, pause: 3 * testIdleAfter}
	cfg := cs.CA.ClientConfig(nil)
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(sc, cfg)
	t.Cleanup(func() { _ = tc.Close() })
	c := &rawClient{t: t, nc: tc, r: packet.NewReader(tc, 1<<24), v: v}
	c.r.SetVersion(v)
	return c, sc
}

// TestIdleTLSConnections: MQTT connections over TLS park as plain ones do once
// crypto/tls holds nothing of what their clients sent, and work both ways from
// there: a PINGREQ, a run of PUBLISHes one TLS record each, deliveries to a parked
// subscriber, and a record that arrives in two parts further apart than the idle
// time (the reader woken by its first bytes must not park before the rest).
func TestIdleTLSConnections(t *testing.T) {
	cs := testcerts.New(t)
	s := servertest.Start(t, func(c *server.Config) {
		c.MQTT.IdleAfter = testIdleAfter
		c.MQTTTLSPort, c.TLSCertFile, c.TLSKeyFile = 0, cs.ServerFiles.Cert, cs.ServerFiles.Key
	})
	sub, _ := dialRawTLS(t, s.MQTTTLSAddr(), cs, packet.V311)
	sub.connect("tls-sub", true, 0, nil)
	sub.subscribe(1, "tls/#", 1)
	pub, split := dialRawTLS(t, s.MQTTTLSAddr(), cs, packet.V5)
	pub.connect("tls-pub", true, 0, nil)
	waitIdle(t, s, 2)

	pub.send(&packet.Pingreq{})
	if _, ok := pub.must(2 * time.Second).(*packet.Pingresp); !ok {
		t.Fatal("no PINGRESP from a parked TLS connection")
	}
	waitIdle(t, s, 2)

	const run = 300
	for i := range run {
		pub.send(&packet.Publish{Topic: "tls/run", Payload: []byte(strconv.Itoa(i))})
	}
	for i := range run {
		p, ok := sub.must(5 * time.Second).(*packet.Publish)
		if !ok || string(p.Payload) != strconv.Itoa(i) {
			t.Fatalf("delivery %d: %+v", i, p)
		}
	}
	waitIdle(t, s, 2)

	split.split.Store(true)
	pub.send(&packet.Publish{Topic: "tls/split", QoS: 1, PacketID: 9, Payload: []byte("in two parts")})
	split.split.Store(false)
	if pa, ok := pub.must(5 * time.Second).(*packet.Ack); !ok || pa.PacketID != 9 {
		t.Fatalf("PUBACK of the split record: %+v", pa)
	}
	p, ok := sub.must(5 * time.Second).(*packet.Publish)
	if !ok || p.Topic != "tls/split" || string(p.Payload) != "in two parts" {
		t.Fatalf("got %+v", p)
	}
	sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	waitIdle(t, s, 2)
}

// TestIdleConnectionReset: dormant connections whose clients reset them (RST) end
// cleanly. Such a socket has no peer any more when it is given back its Go socket
// to finish, so it has no remote address to log; the server carries on, and a new
// client connects and is answered.
func TestIdleConnectionReset(t *testing.T) {
	s, port := idleServer(t)
	cs := make([]*rawClient, 20)
	for i := range cs {
		cs[i] = dialRaw(t, port, packet.V311)
		cs[i].connect("", true, 30, nil)
	}
	waitDormant(t, s, len(cs))
	for _, c := range cs {
		tc := c.nc.(*net.TCPConn)
		if err := tc.SetLinger(0); err != nil {
			t.Fatal(err)
		}
		_ = tc.Close()
	}
	waitOffline(t, s)
	c := dialRaw(t, port, packet.V311)
	c.connect("after", true, 30, nil)
	c.send(&packet.Pingreq{})
	if p, ok := c.must(5 * time.Second).(*packet.Pingresp); !ok {
		t.Fatalf("want PINGRESP, got %T %+v", p, p)
	}
}
