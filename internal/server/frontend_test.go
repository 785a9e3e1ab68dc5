package server

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/wire"
)

// freePort returns a TCP port number that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestFailedStartLeavesNothingRunning: a server whose last listener cannot be opened
// closes every listener it had opened, stops its protocol servers and stream engine,
// frees its store directory and leaves no goroutine behind.
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Host = "127.0.0.1"
	cfg.Port, cfg.UDPPort, cfg.MQTTPort, cfg.MQTTWSPort = freePort(t), 0, freePort(t), freePort(t)
	cfg.KafkaPort = freePort(t)
	cfg.HTTPAddr = taken.Addr().String() // the monitoring listener, opened last, fails
	cfg.StoreDir = dir
	before := runtime.NumGoroutine()

	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	if err == nil || !strings.Contains(err.Error(), "monitoring listener") {
		t.Fatalf("Start with the monitoring port taken: %v, want a monitoring listener error", err)
	}

	for _, port := range []int{cfg.Port, cfg.MQTTPort, cfg.MQTTWSPort} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("TCP port %d still held after the failed start: %v", port, err)
		}
		l.Close()
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port)))
	if err != nil {
		t.Fatalf("UDP port %d still held after the failed start: %v", cfg.Port, err)
	}
	pc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the failed start, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}

	// The store directory is free for the next server.
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Port, cfg.MQTTPort, cfg.MQTTWSPort = 0, 0, 0
	s2, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("store_dir still locked: %v", err)
	}
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// mqttConnect opens a raw MQTT 5 connection and completes its CONNECT.
func mqttConnect(t *testing.T, s *Server, clientID string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", s.MQTTAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	b, err := packet.Append(nil, &packet.Connect{ProtocolLevel: packet.V5, ClientID: clientID, CleanStart: true}, packet.V5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	r := packet.NewReader(nc, 1<<20)
	r.SetVersion(packet.V5)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := r.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if ca, ok := p.(*packet.Connack); !ok || ca.Reason != packet.Success {
		t.Fatalf("CONNACK %+v", p)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return nc
}

// TestConnectionsNameTheirTransport: /connections says which transport each
// connection came by, and /status counts each listener apart.
func TestConnectionsNameTheirTransport(t *testing.T) {
	s := startServer(t, func(c *Config) { c.UDPPort = 0 })
	overTCP, err := tern.Connect(s.URL(), tern.Name("over-tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer overTCP.Close()
	overUDP, err := tern.Connect("udp://"+s.UDPAddr().String(), tern.Name("over-udp"))
	if err != nil {
		t.Fatal(err)
	}
	defer overUDP.Close()
	mqttConnect(t, s, "device-1")

	want := map[string]string{"over-tcp": "native/tcp", "over-udp": "native/udp", "device-1": "mqtt5/tcp"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := map[string]string{}
		for _, c := range s.Connections() {
			got[c.Name] = c.Protocol + "/" + c.Transport
		}
		match := len(got) == len(want)
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Status()
	for name, n := range map[string]int{"native": 1, "udp": 1, "mqtt": 1, "mqtt_ws": 0} {
		if got := st.ByListener[name].Connections; got != n {
			t.Errorf("listener %s: %d connections, want %d (%+v)", name, got, n, st.ByListener)
		}
	}
	if st.Connections != 3 || st.Listeners["udp"] == "" || st.Listeners["http"] == "" {
		t.Errorf("status %+v", st)
	}
}

// TestMQTTSlowConsumerReportedLikeNative: an MQTT subscriber that stops reading is
// a slow consumer in /status, /connections and /metrics exactly as a native one,
// and its QoS 0 drops are counted.
func TestMQTTSlowConsumerReportedLikeNative(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxPayload = 64 << 10
		c.MaxPending = 256 << 10
	})
	sub := mqttConnect(t, s, "stuck-device")
	if err := sub.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	b, _ := packet.Append(nil, &packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: "flood/#"}}}, packet.V5)
	if _, err := sub.Write(b); err != nil {
		t.Fatal(err)
	}
	// Wait for the subscription, then flood without reading.
	deadline := time.Now().Add(5 * time.Second)
	for !s.Broker().HasInterest([]byte("flood.x")) {
		if time.Now().After(deadline) {
			t.Fatal("MQTT subscription never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pub, _ := connectRaw(t, s, 0)
	payload := make([]byte, 16<<10)
	for i := 0; i < 4000 && s.Status().SlowConsumers == 0; i++ {
		pub.send(wire.AppendPub(nil, 0, "flood.x", "", nil, payload))
	}
	pub.sync()
	st := s.Status()
	if st.SlowConsumers != 1 || st.DroppedMsgs == 0 || st.ByListener["mqtt"].SlowConsumers != 1 || st.ByListener["native"].SlowConsumers != 0 {
		t.Fatalf("status after flooding a stuck MQTT subscriber: %+v", st)
	}
	var info monitor.ConnInfo
	for _, c := range s.Connections() {
		if c.Name == "stuck-device" {
			info = c
		}
	}
	if !info.SlowConsumer || info.Dropped == 0 || info.Transport != "tcp" {
		t.Fatalf("stuck MQTT connection %+v, want slow with drops", info)
	}
	body := scrapeMetrics(t, s)
	for _, want := range []string{
		`tern_listener_slow_consumers_total{listener="mqtt"} 1`,
		`tern_listener_slow_consumers_total{listener="native"} 0`,
		"tern_slow_consumers_total 1",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
}
