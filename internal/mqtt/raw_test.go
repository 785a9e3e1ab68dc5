package mqtt_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// rawClient speaks MQTT packet by packet, for what the ready-made clients cannot do:
// malformed input, exact packet sequences, dropping a connection at a chosen point.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *packet.Reader
	v  byte
}

func dialRaw(t *testing.T, port string, v byte) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawClient{t: t, nc: nc, r: packet.NewReader(nc, 1<<24), v: v}
	c.r.SetVersion(v)
	return c
}

func (c *rawClient) send(p packet.Packet) {
	c.t.Helper()
	b, err := packet.Append(nil, p, c.v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendBytes(b)
}

func (c *rawClient) sendBytes(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// next reads one packet within d.
func (c *rawClient) next(d time.Duration) (packet.Packet, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	p, err := c.r.ReadPacket()
	if pub, ok := p.(*packet.Publish); ok && err == nil {
		cp := *pub
		cp.Payload = slices.Clone(pub.Payload)
		return &cp, nil
	}
	return p, err
}

func (c *rawClient) must(d time.Duration) packet.Packet {
	c.t.Helper()
	p, err := c.next(d)
	if err != nil {
		c.t.Fatalf("reading a packet: %v", err)
	}
	return p
}

// connect sends CONNECT and returns the CONNACK.
func (c *rawClient) connect(id string, clean bool, keepalive uint16, props *packet.Properties) *packet.Connack {
	c.t.Helper()
	name := "MQTT"
	if c.v == packet.V31 {
		name = "MQIsdp"
	}
	cp := &packet.Connect{ProtocolName: name, ProtocolLevel: c.v, CleanStart: clean, KeepAlive: keepalive, ClientID: id}
	if props != nil {
		cp.Props = *props
	}
	c.send(cp)
	ca, ok := c.must(5 * time.Second).(*packet.Connack)
	if !ok {
		c.t.Fatal("no CONNACK")
	}
	return ca
}

func (c *rawClient) subscribe(pid uint16, filter string, qos byte) []packet.ReasonCode {
	c.t.Helper()
	c.send(&packet.Subscribe{PacketID: pid, Subs: []packet.Subscription{{Filter: filter, QoS: qos}}})
	for {
		p := c.must(5 * time.Second)
		if sa, ok := p.(*packet.Suback); ok && sa.PacketID == pid {
			return sa.Reasons
		}
	}
}

// closedWith waits for the server to close the connection and returns the last
// DISCONNECT it sent, if any.
func (c *rawClient) closedWith(d time.Duration) *packet.Disconnect {
	c.t.Helper()
	var last *packet.Disconnect
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p, err := c.next(time.Until(deadline))
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
				return last
			}
			c.t.Fatalf("waiting for the close: %v", err)
		}
		if dp, ok := p.(*packet.Disconnect); ok {
			last = dp
		}
	}
	c.t.Fatal("connection still open")
	return nil
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// waitOffline waits until no MQTT client is connected (every session detached).
func waitOffline(t *testing.T, s *server.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.MQTT().Stats().Connections > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d MQTT connections still open", s.MQTT().Stats().Connections)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRawMalformedPacketIsolated: garbage from one client closes it with 0x81 (v5)
// while another client keeps working.
func TestRawMalformedPacketIsolated(t *testing.T) {
	s, port := startTern(t, nil)
	good := dialRaw(t, port, packet.V311)
	good.connect("good", true, 0, nil)
	good.subscribe(1, "still/works", 0)
	waitSubs(t, s, 1)

	for _, v := range []byte{packet.V311, packet.V5} {
		bad := dialRaw(t, port, v)
		bad.connect("bad", true, 0, nil)
		bad.sendBytes([]byte{0x36, 0x03, 0x00, 0x01, 'a'}) // PUBLISH with QoS 3
		d := bad.closedWith(5 * time.Second)
		if v == packet.V5 && (d == nil || d.Reason != packet.MalformedPacket) {
			t.Fatalf("v5: DISCONNECT %+v, want reason 0x81", d)
		}
		if v == packet.V311 && d != nil {
			t.Fatalf("v3.1.1 got a DISCONNECT from the server: %+v", d)
		}
	}
	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	pub.send(&packet.Publish{Topic: "still/works", Payload: []byte("yes")})
	if p, ok := good.must(5 * time.Second).(*packet.Publish); !ok || string(p.Payload) != "yes" {
		t.Fatalf("other client got %+v", p)
	}
}

// TestRawConnectRules: unsupported version, first packet not CONNECT, empty client ids.
func TestRawConnectRules(t *testing.T) {
	_, port := startTern(t, nil)
	c := dialRaw(t, port, packet.V311)
	c.sendBytes([]byte{0x10, 0x0d, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x07, 0x02, 0x00, 0x3c, 0x00, 0x01, 'a'})
	if ca, ok := c.must(5 * time.Second).(*packet.Connack); !ok || ca.Reason != packet.ReasonCode(packet.ConnRefusedVersion) {
		t.Fatalf("unknown level: %+v, want return code 1", ca)
	}
	c = dialRaw(t, port, packet.V311)
	c.sendBytes([]byte{0xc0, 0x00})
	if d := c.closedWith(5 * time.Second); d != nil {
		t.Fatalf("PINGREQ first: %+v", d)
	}
	c = dialRaw(t, port, packet.V311)
	if ca := c.connect("", false, 0, nil); ca.Reason != packet.ReasonCode(packet.ConnRefusedIdentifier) {
		t.Fatalf("3.1.1 empty id without clean session: %+v, want return code 2", ca)
	}
	c = dialRaw(t, port, packet.V5)
	if ca := c.connect("", true, 0, nil); ca.Reason != packet.Success || ca.Props.AssignedClientID == "" {
		t.Fatalf("v5 empty id: %+v, want an assigned client id", ca)
	}
}

// TestRawMalformedConnectV5: a v5 CONNECT that does not decode is answered with a
// CONNACK carrying the reason, as MQTT 5 requires.
func TestRawMalformedConnectV5(t *testing.T) {
	_, port := startTern(t, nil)
	c := dialRaw(t, port, packet.V5)
	// CONNECT v5, flags 0x03: the reserved bit is set.
	c.sendBytes([]byte{0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0x03, 0x00, 0x3c, 0x00, 0x00, 0x01, 'a'})
	ca, ok := c.must(5 * time.Second).(*packet.Connack)
	if !ok || ca.Reason != packet.MalformedPacket {
		t.Fatalf("got %+v, want CONNACK 0x81", ca)
	}
}

// TestRawKeepalive: a client silent for 1.5 times its keepalive is disconnected
// (0x8D): the socket's read deadline wakes the session machine, which decides. That a
// client heard from in time stays is the machine's (session/testdata/keepalive.txt).
func TestRawKeepalive(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	_, port := startTern(t, nil)
	c := dialRaw(t, port, packet.V5)
	c.connect("sleepy", true, 1, nil)
	start := time.Now()
	d := c.closedWith(5 * time.Second)
	if took := time.Since(start); took < 1400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("closed after %v, want about 1.5 s", took)
	}
	if d == nil || d.Reason != packet.KeepAliveTimeout {
		t.Fatalf("DISCONNECT %+v, want 0x8D", d)
	}
}

// TestRawKeepaliveZero: a client with keepalive 0 is never timed out, not even by the
// connect timeout that guarded its CONNECT.
func TestRawKeepaliveZero(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	_, port := startTern(t, func(c *server.Config) { c.ConnectTimeout = 200 * time.Millisecond })
	c := dialRaw(t, port, packet.V5)
	c.connect("patient", true, 0, nil)
	if p, err := c.next(600 * time.Millisecond); err == nil {
		t.Fatalf("idle client got %+v", p)
	}
	c.send(&packet.Pingreq{})
	if _, ok := c.must(2 * time.Second).(*packet.Pingresp); !ok {
		t.Fatal("no PINGRESP after 0.6 s idle: the connection was closed")
	}
}

// TestRawLimits: packet size, connection count.
func TestRawLimits(t *testing.T) {
	s, port := startTern(t, func(c *server.Config) {
		c.MQTT.MaxPacketSize = 1024
		c.MQTT.MaxConnections = 2
	})
	c := dialRaw(t, port, packet.V5)
	ca := c.connect("big", true, 0, nil)
	if ca.Props.MaximumPacketSize != 1024 {
		t.Fatalf("CONNACK maximum packet size %d, want 1024", ca.Props.MaximumPacketSize)
	}
	c.send(&packet.Publish{Topic: "t", Payload: make([]byte, 2000)})
	if d := c.closedWith(5 * time.Second); d == nil || d.Reason != packet.PacketTooLarge {
		t.Fatalf("oversized publish: DISCONNECT %+v, want 0x95", d)
	}
	a := dialRaw(t, port, packet.V5)
	a.connect("one", true, 0, nil)
	b := dialRaw(t, port, packet.V5)
	b.connect("two", true, 0, nil)
	over := dialRaw(t, port, packet.V5)
	if ca := over.connect("three", true, 0, nil); ca.Reason != packet.ServerBusy {
		t.Fatalf("third connection: %+v, want 0x89", ca)
	}
	over3 := dialRaw(t, port, packet.V311)
	if ca := over3.connect("three", true, 0, nil); ca.Reason != packet.ReasonCode(packet.ConnRefusedServerUnavailable) {
		t.Fatalf("third 3.1.1 connection: reason %v, want return code 3 (MQTT stats %+v)", ca.Reason, s.MQTT().Stats())
	}
}

// TestRawQoS2InboundExactlyOnce: a QoS 2 publish resent after a reconnect (DUP, same
// packet id, before PUBREL) is not routed twice.
func TestRawQoS2InboundExactlyOnce(t *testing.T) {
	s, port := startTern(t, nil)
	sub := dialRaw(t, port, packet.V311)
	sub.connect("watch", true, 0, nil)
	sub.subscribe(1, "q2/once", 0)
	waitSubs(t, s, 1)

	c := dialRaw(t, port, packet.V311)
	c.connect("sender", false, 0, nil)
	c.send(&packet.Publish{QoS: 2, PacketID: 42, Topic: "q2/once", Payload: []byte("m")})
	if a, ok := c.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrec || a.PacketID != 42 {
		t.Fatalf("want PUBREC 42, got %+v", a)
	}
	_ = c.nc.Close() // gone before PUBREL

	c = dialRaw(t, port, packet.V311)
	if ca := c.connect("sender", false, 0, nil); !ca.SessionPresent {
		t.Fatal("session not resumed")
	}
	c.send(&packet.Publish{Dup: true, QoS: 2, PacketID: 42, Topic: "q2/once", Payload: []byte("m")})
	if a, ok := c.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrec {
		t.Fatalf("resend: want PUBREC, got %+v", a)
	}
	c.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 42})
	if a, ok := c.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubcomp || a.PacketID != 42 {
		t.Fatalf("want PUBCOMP 42, got %+v", a)
	}
	if p, ok := sub.must(5 * time.Second).(*packet.Publish); !ok || string(p.Payload) != "m" {
		t.Fatalf("subscriber got %+v", p)
	}
	if p, err := sub.next(200 * time.Millisecond); err == nil {
		t.Fatalf("subscriber got a second copy: %+v", p)
	}
	// The packet id is free again: the same id now carries a new message.
	c.send(&packet.Publish{QoS: 2, PacketID: 42, Topic: "q2/once", Payload: []byte("n")})
	c.must(5 * time.Second)
	if p, ok := sub.must(5 * time.Second).(*packet.Publish); !ok || string(p.Payload) != "n" {
		t.Fatalf("subscriber got %+v, want the new message", p)
	}
}

// TestRawOutboundResend: QoS 1 and 2 messages unacknowledged when a subscriber drops
// are resent with DUP on its return; a QoS 2 message whose PUBREC arrived is followed
// by PUBREL only.
func TestRawOutboundResend(t *testing.T) {
	s, port := startTern(t, nil)
	sub := dialRaw(t, port, packet.V311)
	sub.connect("resend", false, 0, nil)
	sub.subscribe(1, "out/#", 2)
	waitSubs(t, s, 2)
	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "out/a", Payload: []byte("one")})
	pub.send(&packet.Publish{QoS: 2, PacketID: 2, Topic: "out/b", Payload: []byte("two")})
	first := sub.must(5 * time.Second).(*packet.Publish)
	second := sub.must(5 * time.Second).(*packet.Publish)
	if first.QoS != 1 || second.QoS != 2 {
		t.Fatalf("got QoS %d and %d", first.QoS, second.QoS)
	}
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: second.PacketID})
	if a := sub.must(5 * time.Second).(*packet.Ack); a.Type != packet.TypePubrel {
		t.Fatalf("want PUBREL, got %+v", a)
	}
	_ = sub.nc.Close() // neither PUBACK nor PUBCOMP sent

	sub = dialRaw(t, port, packet.V311)
	if ca := sub.connect("resend", false, 0, nil); !ca.SessionPresent {
		t.Fatal("session not resumed")
	}
	p := sub.must(5 * time.Second)
	if rp, ok := p.(*packet.Publish); !ok || !rp.Dup || rp.PacketID != first.PacketID || string(rp.Payload) != "one" {
		t.Fatalf("first after reconnect: %+v, want the QoS 1 message again with DUP", p)
	}
	p = sub.must(5 * time.Second)
	if a, ok := p.(*packet.Ack); !ok || a.Type != packet.TypePubrel || a.PacketID != second.PacketID {
		t.Fatalf("second after reconnect: %+v, want PUBREL %d", p, second.PacketID)
	}
	sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: first.PacketID})
	sub.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: second.PacketID})
	if p, err := sub.next(200 * time.Millisecond); err == nil {
		t.Fatalf("unexpected %+v after the exchange ended", p)
	}
}

// TestRawOfflineQueueLimit: an absent session queues at most mqtt_max_queued
// messages; drop-new keeps the oldest, drop-old the newest.
func TestRawOfflineQueueLimit(t *testing.T) {
	for _, policy := range []string{"drop-new", "drop-old"} {
		t.Run(policy, func(t *testing.T) {
			s, port := startTern(t, func(c *server.Config) {
				c.MQTT.MaxQueued = 3
				c.MQTT.QueuePolicy = policy
			})
			sub := dialRaw(t, port, packet.V311)
			sub.connect("away", false, 0, nil)
			sub.subscribe(1, "q/t", 1)
			waitSubs(t, s, 1)
			_ = sub.nc.Close()
			waitOffline(t, s)
			pub := dialRaw(t, port, packet.V311)
			pub.connect("p", true, 0, nil)
			for i := range 6 {
				pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: "q/t", Payload: []byte{'0' + byte(i)}})
				pub.must(5 * time.Second)
			}
			sub = dialRaw(t, port, packet.V311)
			sub.connect("away", false, 0, nil)
			var got string
			for {
				p, err := sub.next(200 * time.Millisecond)
				if err != nil {
					break
				}
				if pp, ok := p.(*packet.Publish); ok {
					got += string(pp.Payload)
					sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: pp.PacketID})
				}
			}
			want := map[string]string{"drop-new": "012", "drop-old": "345"}[policy]
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// TestRawSessionExpiry: a v5 session with a 1 s expiry is there right after its
// client leaves and gone 1.5 s later: the session's timer, armed from the machine's
// deadline, ends it. The rules of expiry are the machine's (session/testdata).
func TestRawSessionExpiry(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	_, port := startTern(t, nil)
	props := &packet.Properties{SessionExpiry: 1, HasSessionExpiry: true}
	c := dialRaw(t, port, packet.V5)
	c.connect("brief", false, 0, props)
	c.send(&packet.Disconnect{})
	c.closedWith(5 * time.Second)
	c = dialRaw(t, port, packet.V5)
	if ca := c.connect("brief", false, 0, props); !ca.SessionPresent {
		t.Fatal("session gone before its expiry")
	}
	c.send(&packet.Disconnect{})
	c.closedWith(5 * time.Second)
	time.Sleep(1500 * time.Millisecond)
	c = dialRaw(t, port, packet.V5)
	if ca := c.connect("brief", false, 0, props); ca.SessionPresent {
		t.Fatal("session outlived its expiry")
	}
}

// TestRawDollarTopics: '#' does not match '$' topics, and clients may not publish
// there (0x87 in v5).
func TestRawDollarTopics(t *testing.T) {
	s, port := startTern(t, nil)
	all := dialRaw(t, port, packet.V5)
	all.connect("all", true, 0, nil)
	all.subscribe(1, "#", 0)
	waitSubs(t, s, 1)
	c := dialRaw(t, port, packet.V5)
	c.connect("writer", true, 0, nil)
	c.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "$SYS/fake", Payload: []byte("x")})
	if a, ok := c.must(5 * time.Second).(*packet.Ack); !ok || a.Reason != packet.NotAuthorized {
		t.Fatalf("publish to $SYS: %+v, want PUBACK 0x87", a)
	}
	c.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: "plain", Payload: []byte("y")})
	if a, ok := c.must(5 * time.Second).(*packet.Ack); !ok || a.Reason != packet.Success {
		t.Fatalf("plain publish: %+v", a)
	}
	p := all.must(5 * time.Second).(*packet.Publish)
	if p.Topic != "plain" {
		t.Fatalf("'#' subscriber got %q", p.Topic)
	}
}

// TestRawSubscribeReasons: invalid filters get per-filter failure codes, not a
// disconnect.
func TestRawSubscribeReasons(t *testing.T) {
	_, port := startTern(t, nil)
	c := dialRaw(t, port, packet.V5)
	c.connect("subs", true, 0, nil)
	c.send(&packet.Subscribe{PacketID: 3, Subs: []packet.Subscription{
		{Filter: "ok/+", QoS: 1}, {Filter: "bad#", QoS: 1}, {Filter: "$share/g/x/#", QoS: 2}, {Filter: "$share/g", QoS: 0},
	}})
	sa := c.must(5 * time.Second).(*packet.Suback)
	want := []packet.ReasonCode{packet.GrantedQoS1, packet.TopicFilterInvalid, packet.GrantedQoS2, packet.TopicFilterInvalid}
	if !slices.Equal(sa.Reasons, want) {
		t.Fatalf("SUBACK %v, want %v", sa.Reasons, want)
	}
	c.send(&packet.Unsubscribe{PacketID: 4, Filters: []string{"ok/+", "never"}})
	ua := c.must(5 * time.Second).(*packet.Unsuback)
	if !slices.Equal(ua.Reasons, []packet.ReasonCode{packet.Success, packet.NoSubscriptionExisted}) {
		t.Fatalf("UNSUBACK %v", ua.Reasons)
	}
}

// TestRawSysAndMonitoring: $SYS/broker topics are published retained, and the HTTP
// monitoring counts and lists MQTT clients.
func TestRawSysAndMonitoring(t *testing.T) {
	s, port := startTern(t, func(c *server.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.MQTT.SysInterval = 100 * time.Millisecond
	})
	c := dialRaw(t, port, packet.V311)
	c.connect("watcher", true, 0, nil)
	time.Sleep(250 * time.Millisecond) // a $SYS round after the connect
	c.subscribe(1, "$SYS/broker/clients/connected", 0)
	p := c.must(5 * time.Second).(*packet.Publish)
	if !p.Retain || string(p.Payload) != "1" {
		t.Fatalf("$SYS/broker/clients/connected: %+v, want retained 1", p)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + s.HTTPAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var st struct {
		Connections int               `json:"connections"`
		Listeners   map[string]string `json:"listeners"`
	}
	if err := json.Unmarshal([]byte(get("/status")), &st); err != nil || st.Connections != 1 || st.Listeners["mqtt"] == "" {
		t.Fatalf("/status: %+v %v", st, err)
	}
	if conns := get("/connections"); !strings.Contains(conns, `"watcher"`) || !strings.Contains(conns, `"mqtt3.1.1"`) {
		t.Fatalf("/connections does not list the MQTT client: %s", conns)
	}
	if m := get("/metrics"); !strings.Contains(m, "tern_mqtt_connections 1") || !strings.Contains(m, "tern_mqtt_sessions 1") {
		t.Fatalf("/metrics lacks the MQTT gauges")
	}
}

// TestRawWillDelay: a delayed will goes out when the session's timer, armed from the
// machine's deadline, fires, and not before. That a reconnect within the delay
// cancels it, and that a session ending first publishes it, is the machine's
// (session/testdata/will.txt).
func TestRawWillDelay(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	s, port := startTern(t, nil)
	watcher := dialRaw(t, port, packet.V311)
	watcher.connect("watcher", true, 0, nil)
	watcher.subscribe(1, "wills/#", 0)
	waitSubs(t, s, 1)
	c := dialRaw(t, port, packet.V5)
	cp := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V5, ClientID: "late", WillFlag: true,
		WillTopic: "wills/late", WillPayload: []byte("gone")}
	cp.Props.SessionExpiry, cp.Props.HasSessionExpiry = 60, true
	cp.WillProps.WillDelay, cp.WillProps.HasWillDelay = 1, true
	c.send(cp)
	if _, ok := c.must(5 * time.Second).(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	_ = c.nc.Close()
	start := time.Now()
	p, ok := watcher.must(5 * time.Second).(*packet.Publish)
	if !ok || string(p.Payload) != "gone" {
		t.Fatalf("will: %+v", p)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("will after %v, want after its 1 s delay", took)
	}
}
