package mqtt_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// withUsers gives a test server the users of authtest.File: alice may publish
// under sensors/ (not sensors/secret) and subscribe under cmd/ and _INBOX/; bob
// logs in with a token and may subscribe to anything but private/; root may do
// anything.
func withUsers(t *testing.T) func(*server.Config) {
	users := authtest.File(t)
	return func(c *server.Config) { c.UsersFile = users }
}

// pahoAttempt is a paho function that connects and returns the CONNACK's code:
// the MQTT 3.1.1 return code as sent (paho's version 1 callbacks), the MQTT 5
// reason code.
const pahoAttempt = `
def attempt(user, pw, v5=False, host="127.0.0.1", port=PORT, transport="tcp", will=None):
    proto = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
    api = mqtt.CallbackAPIVersion.VERSION2 if v5 else mqtt.CallbackAPIVersion.VERSION1
    c = mqtt.Client(api, client_id="", protocol=proto, transport=transport)
    res = {}
    done = threading.Event()
    def on_connect(cl, ud, flags, rc, *rest):
        res["rc"] = rc.value if hasattr(rc, "value") else int(rc)
        done.set()
    c.on_connect = on_connect
    if user is not None:
        c.username_pw_set(user, pw)
    if will:
        c.will_set(*will)
    try:
        c.connect(host, port)
    except OSError as e:
        return "connect: %s" % e
    c.loop_start()
    done.wait(15)
    c.disconnect()
    c.loop_stop()
    return res.get("rc")
`

// TestPahoAuthentication: wrong passwords and anonymous clients are refused with
// the CONNACK code of each protocol version; passwords and bearer tokens (as the
// password, with the user name "" or "token") are accepted, over TCP and
// WebSocket.
func TestPahoAuthentication(t *testing.T) {
	s, port := startTern(t, withUsers(t))
	wsPort := strconv.Itoa(s.MQTTWebSocketAddr().(*net.TCPAddr).Port)
	// Successes between failures: each failure from an address doubles the pause
	// before its next login, a success clears it.
	out := runPaho(t, port, pahoAttempt+`
emit(what="v311 wrong password", rc=attempt("alice", "wrong"))
emit(what="v311 alice", rc=attempt("alice", "alice-pw"))
emit(what="v5 wrong password", rc=attempt("alice", "wrong", v5=True))
emit(what="v5 token, empty user name", rc=attempt("", "`+authtest.BobToken+`", v5=True))
emit(what="v311 anonymous", rc=attempt(None, None))
emit(what="v311 token, user name token", rc=attempt("token", "`+authtest.BobToken+`"))
emit(what="v5 anonymous", rc=attempt(None, None, v5=True))
emit(what="v5 root", rc=attempt("root", "root-pw", v5=True))
emit(what="v311 unknown token", rc=attempt("", "not-a-token"))
emit(what="ws v5 root", rc=attempt("root", "root-pw", v5=True, port=int(os.environ["WSPORT"]), transport="websockets"))
emit(what="ws v5 wrong password", rc=attempt("root", "wrong", v5=True, port=int(os.environ["WSPORT"]), transport="websockets"))
emit(what="ws v311 alice", rc=attempt("alice", "alice-pw", port=int(os.environ["WSPORT"]), transport="websockets"))
emit(what="v5 will alice may not publish", rc=attempt("alice", "alice-pw", v5=True, will=("orders/gone", "x", 0, False)))
emit(what="v311 will alice may not publish", rc=attempt("alice", "alice-pw", will=("orders/gone", "x", 0, False)))
emit(what="v311 will alice may publish", rc=attempt("alice", "alice-pw", will=("sensors/gone", "x", 0, False)))
`, 90*time.Second, "WSPORT="+wsPort)
	want := map[string]float64{
		"v311 wrong password": 4, "v311 alice": 0, "v5 wrong password": 0x86, "v5 token, empty user name": 0,
		"v311 anonymous": 5, "v311 token, user name token": 0, "v5 anonymous": 0x87, "v5 root": 0,
		"v311 unknown token": 4, "ws v5 root": 0, "ws v5 wrong password": 0x86, "ws v311 alice": 0,
		"v5 will alice may not publish": 0x87, "v311 will alice may not publish": 5, "v311 will alice may publish": 0,
	}
	res := decode(t, out)
	if len(res) != len(want) {
		t.Fatalf("got %d results, want %d: %v", len(res), len(want), res)
	}
	for _, r := range res {
		what := r["what"].(string)
		if r["rc"] != want[what] {
			t.Errorf("%s: CONNACK code %v, want %v", what, r["rc"], want[what])
		}
	}
}

// TestPahoPermissions: publishes, subscriptions and deliveries follow the user's
// permissions in MQTT 3.1.1 and 5.
func TestPahoPermissions(t *testing.T) {
	s, port := startTern(t, withUsers(t))
	out := runPaho(t, port, `
acks = {}
def on_publish(cl, ud, mid, rc, props):
    acks[mid] = rc.value
subacks = {}
def on_subscribe(cl, ud, mid, rcs, props):
    subacks[mid] = [r.value for r in rcs]
def wait_for(d, key):
    deadline = time.time() + 10
    while key not in d and time.time() < deadline:
        time.sleep(0.01)
    return d.get(key)

root = client("root-watch", v5=True, user="root", password="root-pw")
root.subscribe("sensors/#", qos=1)
time.sleep(0.3)

# MQTT 5: a refused QoS 1 or 2 publish is acknowledged with 0x87.
a5 = client("alice-5", v5=True, user="alice", password="alice-pw")
a5.on_publish = on_publish
mids = []
for topic, qos in [("sensors/t1", 1), ("sensors/secret", 1), ("orders/new", 1), ("sensors/secret", 2), ("sensors/secret", 0), ("sensors/t2", 2)]:
    mids.append(a5.publish(topic, "v5 " + topic, qos=qos).mid)
emit(v5_acks=[wait_for(acks, m) for m in mids])
a5.on_subscribe = on_subscribe
mid = a5.subscribe([("cmd/#", 1), ("orders/#", 1), ("$SYS/#", 0)])[1]
emit(v5_suback=wait_for(subacks, mid))

# MQTT 3.1.1: a refused publish is acknowledged (3.1.1 has no code to say so) and
# dropped; the connection stays.
a3 = client("alice-3", user="alice", password="alice-pw")
a3.publish("sensors/secret", "v3 secret", qos=1).wait_for_publish(5)
a3.publish("orders/new", "v3 orders", qos=2).wait_for_publish(5)
a3.publish("sensors/t3", "v3 sensors/t3", qos=1).wait_for_publish(5)
a3.on_subscribe = on_subscribe
mid = a3.subscribe([("cmd/#", 1), ("orders/#", 1)])[1]
emit(v3_suback=wait_for(subacks, mid))
got = [m.payload.decode() for m in take(root, 3)]
extra = none_within(root, 0.3)
emit(root_got=got, root_extra=extra.payload.decode() if extra else None)

# What alice was granted she receives; what she was refused she does not.
root.publish("orders/x", "orders", qos=1).wait_for_publish(5)
root.publish("cmd/x", "cmd", qos=1).wait_for_publish(5)
emit(a3_got=[m.topic for m in take(a3, 1)], a3_extra=none_within(a3, 0.3) is not None)

# Bob may subscribe to everything but private/: "#" is granted, and delivers
# neither private/ messages (retained ones included) nor $SYS.
root.publish("private/r", "retained private", qos=1, retain=True).wait_for_publish(5)
root.publish("public/r", "retained public", qos=1, retain=True).wait_for_publish(5)
b = client("bob", user="", password="`+authtest.BobToken+`")
b.on_subscribe = on_subscribe
mid = b.subscribe([("#", 1), ("$SYS/#", 0), ("private/#", 0)])[1]
emit(bob_suback=wait_for(subacks, mid))
root.publish("private/x", "private", qos=1).wait_for_publish(5)
root.publish("public/x", "public", qos=1).wait_for_publish(5)
got = sorted(m.topic for m in take(b, 2))
extra = none_within(b, 0.5)
emit(bob_got=got, bob_extra=extra.topic if extra else None)
for c in (root, a5, a3, b):
    c.disconnect(); c.loop_stop()
`, 60*time.Second)
	res := decode(t, out)
	if len(res) != 7 {
		t.Fatalf("script results: %v", res)
	}
	check := func(i int, key, want string) {
		t.Helper()
		if got := jsonOf(res[i][key]); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	// sensors/t1 ok, sensors/secret refused, orders/new refused, sensors/secret at
	// QoS 2 refused (paho ignores the reason of the PUBREC, 0x87, which ends the
	// exchange, sends PUBREL anyway and reports the PUBCOMP's 0x92, packet id not
	// found; TestRawPermissions sees the PUBREC), QoS 0 (no acknowledgement: paho
	// counts it sent), sensors/t2 at QoS 2 ok.
	check(0, "v5_acks", "[0,135,135,146,0,0]")
	check(1, "v5_suback", "[1,135,135]")
	check(2, "v3_suback", "[1,128]")
	check(3, "root_got", `["v5 sensors/t1","v5 sensors/t2","v3 sensors/t3"]`)
	check(3, "root_extra", "null")
	check(4, "a3_got", `["cmd/x"]`)
	check(4, "a3_extra", "false")
	check(5, "bob_suback", "[1,128,128]")
	check(6, "bob_got", `["public/r","public/x"]`)
	check(6, "bob_extra", "null")
	_ = s
}

// TestMosquittoAuthentication: mosquitto_pub and mosquitto_sub with -u and -P,
// accepted and refused, and a refused subscription.
func TestMosquittoAuthentication(t *testing.T) {
	s, port := startTern(t, withUsers(t))
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Refused: wrong password (3.1.1 and 5), no credentials.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-u", "alice", "-P", "wrong"}, "bad user name or password"},
		{[]string{"-V", "mqttv5", "-u", "alice", "-P", "wrong"}, "bad user name or password"},
		{nil, "not authori"},
	} {
		out, err := run("mosquitto_pub", append(tc.args, "-t", "sensors/t", "-m", "x")...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(strings.ToLower(out), tc.want) {
			t.Errorf("mosquitto_pub %q: %v %q, want a failure saying %q", tc.args, err, out, tc.want)
		}
	}

	// Accepted: alice publishes under sensors/, root watches.
	watch := mosqSub(t, port, "-u", "root", "-P", "root-pw", "-t", "sensors/#", "-C", "1", "-W", "20", "-F", "%t=%p")
	waitSubs(t, s, 2)
	if out, err := run("mosquitto_pub", "-u", "alice", "-P", "alice-pw", "-q", "1", "-t", "sensors/secret", "-m", "hidden"); err != nil {
		t.Fatalf("alice's refused publish: %v %s (3.1.1 acknowledges it)", err, out)
	}
	if out, err := run("mosquitto_pub", "-u", "alice", "-P", "alice-pw", "-q", "1", "-t", "sensors/t1", "-m", "21.5"); err != nil {
		t.Fatalf("alice publishes: %v %s", err, out)
	}
	if got := lines(watch.wait(t, 20*time.Second)); !slices.Equal(got, []string{"sensors/t1=21.5"}) {
		t.Fatalf("root got %q", got)
	}

	// A refused subscription: mosquitto_sub says so.
	for _, v := range []string{"mqttv311", "mqttv5"} {
		out, err := run("mosquitto_sub", "-V", v, "-u", "alice", "-P", "alice-pw", "-t", "orders/#", "-C", "1", "-W", "5")
		if !strings.Contains(out, "All subscription requests were denied") {
			t.Errorf("%s: alice subscribes to orders/#: %v %q, want the subscription denied", v, err, out)
		}
	}
}

// TestMQTTAnonymousLoopbackOnly: without a users file, clients without
// credentials are welcome from loopback only: one on another address is refused
// with CONNACK 5 (not authorized).
func TestMQTTAnonymousLoopbackOnly(t *testing.T) {
	s, _ := startTern(t, func(c *server.Config) { c.Host = "0.0.0.0" })
	port := s.MQTTAddr().(*net.TCPAddr).Port
	wsPort := s.MQTTWebSocketAddr().(*net.TCPAddr).Port
	ip := nonLoopbackIP(t)
	out := runPaho(t, strconv.Itoa(port), pahoAttempt+`
WS = int(os.environ["WSPORT"])
IP = os.environ["IP"]
emit(loopback=attempt(None, None), other=attempt(None, None, host=IP),
     ws_loopback=attempt(None, None, v5=True, port=WS, transport="websockets"),
     ws_other=attempt(None, None, v5=True, host=IP, port=WS, transport="websockets"))
`, 60*time.Second, "WSPORT="+strconv.Itoa(wsPort), "IP="+ip)
	res := decode(t, out)
	if len(res) != 1 || jsonOf(res[0]) != `{"loopback":0,"other":5,"ws_loopback":0,"ws_other":135}` {
		t.Fatalf("anonymous clients: %v", res)
	}
}

func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to connect from")
	return ""
}

// connectAs sends a CONNECT with credentials and returns the CONNACK.
func (c *rawClient) connectAs(id string, clean bool, user, password string, props *packet.Properties) *packet.Connack {
	c.t.Helper()
	cp := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: c.v, CleanStart: clean, ClientID: id,
		Username: user, HasUsername: true, Password: []byte(password), HasPassword: true}
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

// TestRawPermissions: a refused QoS 2 publish ends at a PUBREC with 0x87 (v5), a
// refused QoS 1 publish of MQTT 3.1.1 gets its PUBACK and goes nowhere; a
// persistent session belongs to its user: another user with the same client id
// starts afresh, and its user finds its subscriptions decided again by the rights
// of the users file in force.
func TestRawPermissions(t *testing.T) {
	users := authtest.File(t)
	a, err := auth.New(auth.Options{UsersFile: users})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mqtt.NewServer(mqtt.Config{Auth: a, SysInterval: -1, IdleAfter: -1}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(time.Second) })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	persist := &packet.Properties{SessionExpiry: 300, HasSessionExpiry: true}

	alice := dialRaw(t, port, packet.V5)
	if ca := alice.connectAs("alice-raw", true, authtest.Alice, authtest.AlicePassword, nil); ca.Reason != packet.Success {
		t.Fatalf("alice: CONNACK %v", ca.Reason)
	}
	alice.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: "sensors/secret", Payload: []byte("x")})
	if a, ok := alice.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePubrec || a.Reason != packet.NotAuthorized {
		t.Fatalf("QoS 2 publish to sensors/secret: %+v, want PUBREC 0x87", a)
	}
	alice.nc.Close()

	root := dialRaw(t, port, packet.V5)
	root.connectAs("root-raw", true, authtest.Root, authtest.RootPassword, nil)
	if r := root.subscribe(1, "sensors/#", 1); r[0] != 1 {
		t.Fatalf("root subscribes: %v", r)
	}
	a3 := dialRaw(t, port, packet.V311)
	a3.connectAs("alice-311", true, authtest.Alice, authtest.AlicePassword, nil)
	a3.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "sensors/secret", Payload: []byte("hidden")})
	a3.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: "sensors/t", Payload: []byte("seen")})
	for pid := uint16(1); pid <= 2; pid++ {
		if a, ok := a3.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePuback || a.PacketID != pid {
			t.Fatalf("3.1.1 publish %d: %+v, want its PUBACK", pid, a)
		}
	}
	if p, ok := root.must(5 * time.Second).(*packet.Publish); !ok || p.Topic != "sensors/t" {
		t.Fatalf("root got %+v, want sensors/t only", p)
	}

	// Root's persistent session is not alice's to resume.
	dev := dialRaw(t, port, packet.V5)
	dev.connectAs("dev", false, authtest.Root, authtest.RootPassword, persist)
	dev.subscribe(1, "orders/#", 1)
	dev.nc.Close()
	dev = dialRaw(t, port, packet.V5)
	if ca := dev.connectAs("dev", false, authtest.Alice, authtest.AlicePassword, persist); ca.Reason != packet.Success || ca.SessionPresent {
		t.Fatalf("alice takes root's session: %+v, want a fresh session", ca)
	}
	if r := dev.subscribe(2, "cmd/#", 1); r[0] != 1 {
		t.Fatalf("alice subscribes to cmd/#: %v", r)
	}
	dev.nc.Close()
	dev = dialRaw(t, port, packet.V5)
	if ca := dev.connectAs("dev", false, authtest.Alice, authtest.AlicePassword, persist); !ca.SessionPresent {
		t.Fatalf("alice resumes her session: %+v", ca)
	}
	root.send(&packet.Publish{QoS: 0, Topic: "orders/x", Payload: []byte("root's")})
	root.send(&packet.Publish{QoS: 0, Topic: "cmd/x", Payload: []byte("alice's")})
	if p, ok := dev.must(5 * time.Second).(*packet.Publish); !ok || p.Topic != "cmd/x" {
		t.Fatalf("alice's session got %+v, want cmd/x only", p)
	}
	dev.nc.Close()

	// Alice loses cmd.> in the users file: her session, away, loses the
	// subscription at the reload, and she finds it gone when she comes back.
	data, err := os.ReadFile(users)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `allow = ["cmd.>", "_INBOX.>"]`, `allow = ["_INBOX.>"]`, 1))
	if err := os.WriteFile(users, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	dev = dialRaw(t, port, packet.V5)
	if ca := dev.connectAs("dev", false, authtest.Alice, authtest.AlicePassword, persist); !ca.SessionPresent {
		t.Fatalf("alice resumes her session after the reload: %+v", ca)
	}
	root.send(&packet.Publish{QoS: 0, Topic: "cmd/y", Payload: []byte("no longer hers")})
	if p, err := dev.next(300 * time.Millisecond); err == nil {
		t.Fatalf("alice got %+v after losing cmd.>", p)
	}
	if r := dev.subscribe(3, "cmd/#", 1); r[0] != packet.NotAuthorized {
		t.Fatalf("alice subscribes to cmd/# again: %v, want 0x87", r)
	}
}
