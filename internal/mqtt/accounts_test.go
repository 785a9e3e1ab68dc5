package mqtt_test

import (
	"github.com/tern-mq/tern/internal/auth/authtest"
	"net"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// accountsUsers writes a users file with accounts: acme exports public.> to beta,
// which sees it under "acme/" and takes two connections and three subscriptions
// at most; slow's clients publish 20 messages a second. Users: a and a-ro (acme;
// a-ro may not read orders/secret), b (beta), s (slow), root (global). Every
// password is "pw".
func accountsUsers(t *testing.T) string {
	t.Helper()
	file := authtest.Users(t, `
[[accounts]]
name = "acme"
exports = [{ subjects = "public.>", to = ["beta"] }]

[[accounts]]
name = "beta"
max_connections = 2
max_subscriptions = 3
imports = [{ account = "acme", subjects = "public.>", prefix = "acme" }]

[[accounts]]
name = "slow"
max_msg_rate = 20

[[users]]
name = "a"
account = "acme"
password = %[1]q

[[users]]
name = "a-ro"
account = "acme"
password = %[1]q
subscribe = { deny = ["orders.secret"] }

[[users]]
name = "b"
account = "beta"
password = %[1]q

[[users]]
name = "s"
account = "slow"
password = %[1]q

[[users]]
name = "root"
password = %[1]q
`)
	return file
}

func withAccounts(t *testing.T) func(*server.Config) {
	users := accountsUsers(t)
	return func(c *server.Config) { c.UsersFile = users }
}

// TestPahoAccountsApart: clients of two accounts and of the global account, all
// with the same client id and the same topics, each have a session of their own
// (no takeover) and see only their account's messages and retained messages; an
// import delivers acme's public/ topics to beta under acme/, retained ones too;
// a filter that reaches what a user may not read withholds it.
func TestPahoAccountsApart(t *testing.T) {
	_, port := startTern(t, withAccounts(t))
	out := runPaho(t, port, `
subacks = threading.Event()
def wait_sub(c, *subs):
    ev = threading.Event()
    c.on_subscribe = lambda cl, ud, mid, rcs, props: ev.set()
    c.subscribe(list(subs))
    if not ev.wait(10):
        sys.exit("no SUBACK")
def got(c, secs=0.7):
    out = []
    while True:
        m = none_within(c, secs)
        if m is None:
            return sorted(out)
        out.append("%s=%s%s" % (m.topic, m.payload.decode(), " (retained)" if m.retain else ""))

a = client("dev", v5=True, user="a", password="pw")
b = client("dev", v5=True, user="b", password="pw")
r = client("dev", v5=True, user="root", password="pw")
ro = client("ro", v5=True, user="a-ro", password="pw")
for c in (a, b, r):
    wait_sub(c, ("#", 1))
wait_sub(ro, ("orders/#", 1))
a.publish("orders/new", "acme", qos=1).wait_for_publish(5)
a.publish("orders/secret", "acme-secret", qos=0).wait_for_publish(5)
b.publish("orders/new", "beta", qos=1).wait_for_publish(5)
r.publish("orders/new", "global", qos=1).wait_for_publish(5)
a.publish("public/news", "news", qos=1).wait_for_publish(5)
b.publish("public/news", "beta-news", qos=0).wait_for_publish(5)
emit(who="a", got=got(a), connected=a.is_connected())
emit(who="b", got=got(b), connected=b.is_connected())
emit(who="root", got=got(r), connected=r.is_connected())
emit(who="a-ro", got=got(ro))

a.publish("status/x", "acme-r", qos=1, retain=True).wait_for_publish(5)
b.publish("status/x", "beta-r", qos=1, retain=True).wait_for_publish(5)
r.publish("status/x", "global-r", qos=1, retain=True).wait_for_publish(5)
a.publish("public/state", "st", qos=1, retain=True).wait_for_publish(5)
time.sleep(0.3)
for who, user in (("a2", "a"), ("b2", "b"), ("root2", "root")):
    c = client("late-" + who, v5=True, user=user, password="pw")
    wait_sub(c, ("status/#", 0), ("acme/#", 0), ("public/#", 0))
    emit(who=who, got=got(c))
`, 90*time.Second)
	want := map[string][]string{
		"a":     {"orders/new=acme", "orders/secret=acme-secret", "public/news=news"},
		"b":     {"acme/public/news=news", "orders/new=beta", "public/news=beta-news"},
		"root":  {"orders/new=global"},
		"a-ro":  {"orders/new=acme"},
		"a2":    {"public/state=st (retained)", "status/x=acme-r (retained)"},
		"b2":    {"acme/public/state=st (retained)", "status/x=beta-r (retained)"},
		"root2": {"status/x=global-r (retained)"},
	}
	res := decode(t, out)
	if len(res) != len(want) {
		t.Fatalf("got %d results, want %d:\n%s", len(res), len(want), out)
	}
	for _, r := range res {
		who := r["who"].(string)
		if got := toStrings(r["got"]); !slices.Equal(got, want[who]) {
			t.Errorf("%s got %q, want %q", who, got, want[who])
		}
		if c, ok := r["connected"]; ok && c != true {
			t.Errorf("%s: client id dev of another account took its session over", who)
		}
	}
}

// TestMosquittoAccountsAndNative: mosquitto clients of an account meet the native
// clients of that account, on the same subjects, and nobody else.
func TestMosquittoAccountsAndNative(t *testing.T) {
	s, port := startTern(t, withAccounts(t))
	nc, err := tern.Connect(s.URL(), tern.Credentials([]byte("a:pw")), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	native, err := nc.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mqttA := mosqSub(t, port, "-u", "a", "-P", "pw", "-t", "cmd/#", "-v", "-C", "1", "-W", "10")
	mqttB := mosqSub(t, port, "-u", "b", "-P", "pw", "-t", "cmd/#", "-v", "-W", "4")
	mqttRoot := mosqSub(t, port, "-u", "root", "-P", "pw", "-t", "#", "-v", "-W", "4")
	waitSubs(t, s, 1+2+2+1)

	mosqPub(t, port, "-u", "b", "-P", "pw", "-t", "orders/new", "-m", "from-beta", "-q", "1")
	mosqPub(t, port, "-u", "a", "-P", "pw", "-t", "orders/new", "-m", "from-acme", "-q", "1", "-V", "mqttv5")
	if m, err := native.NextMsg(5 * time.Second); err != nil || m.Subject != "orders.new" || string(m.Data) != "from-acme" {
		t.Fatalf("native client of acme got %v %v, want acme's MQTT publish on orders.new", m, err)
	}
	if m, err := native.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("native client of acme got %s %q from another account", m.Subject, m.Data)
	}
	if err := nc.Publish("cmd.k1", []byte("reboot")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := lines(mqttA.wait(t, 15*time.Second)); !slices.Equal(got, []string{"cmd/k1 reboot"}) {
		t.Fatalf("mosquitto_sub of acme got %q, want the native publish as cmd/k1", got)
	}
	if got := timedOut(t, mqttB); got != "" {
		t.Fatalf("mosquitto_sub of beta got %q", got)
	}
	if got := timedOut(t, mqttRoot); got != "" {
		t.Fatalf("mosquitto_sub of the global account got %q", got)
	}

	// Retained messages of the same topic, one per account.
	for _, u := range []string{"a", "b", "root"} {
		mosqPub(t, port, "-u", u, "-P", "pw", "-t", "state/door", "-m", "door-"+u, "-r", "-q", "1")
	}
	for _, u := range []string{"a", "b", "root"} {
		p := mosqSub(t, port, "-u", u, "-P", "pw", "-t", "state/#", "-v", "-W", "2")
		if got := lines(timedOut(t, p)); !slices.Equal(got, []string{"state/door door-" + u}) {
			t.Errorf("retained messages of %s: %q", u, got)
		}
	}
}

// timedOut waits for a mosquitto_sub run with -W to time out (its exit status
// then says so) and returns what it printed.
func timedOut(t *testing.T, p *proc) string {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s still running", p.cmd.Path)
	}
	return p.out.String()
}

// accountsAtDir is startAtDir with the accounts' users file.
func accountsAtDir(t *testing.T, dir, users string) (*server.Server, string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", 0, -1, dir, -1
	cfg.KafkaPort, cfg.UsersFile = -1, users
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

// TestRestartKeepsAccountSessions: persistent sessions of the same client id in
// two accounts and the global one survive a restart apart: each resumes with the
// messages queued in its account only, and still gets its account's only.
func TestRestartKeepsAccountSessions(t *testing.T) {
	dir, users := t.TempDir(), accountsUsers(t)
	s, port := accountsAtDir(t, dir, users)
	for _, u := range []string{"a", "b", "root"} {
		dev := dialRaw(t, port, packet.V311)
		if ca := dev.connectAs("dev", false, u, "pw", nil); ca.Reason != 0 || ca.SessionPresent {
			t.Fatalf("%s: CONNACK %+v", u, ca)
		}
		if r := dev.subscribe(1, "cmd/#", 1); r[0] != 1 {
			t.Fatalf("%s: SUBACK %v", u, r)
		}
		_ = dev.nc.Close()
	}
	publish := func(user, payload string) {
		t.Helper()
		p := dialRaw(t, port, packet.V311)
		p.connectAs("pub-"+user, true, user, "pw", nil)
		p.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "cmd/k1", Payload: []byte(payload)})
		if a, ok := p.must(5 * time.Second).(*packet.Ack); !ok || a.Type != packet.TypePuback {
			t.Fatalf("%s: want PUBACK, got %+v", user, a)
		}
		_ = p.nc.Close()
	}
	for _, u := range []string{"a", "b", "root"} {
		publish(u, "before-"+u)
	}
	stopServer(t, s)

	s, port = accountsAtDir(t, dir, users)
	defer stopServer(t, s)
	devs := map[string]*rawClient{}
	for _, u := range []string{"a", "b", "root"} {
		dev := dialRaw(t, port, packet.V311)
		if ca := dev.connectAs("dev", false, u, "pw", nil); ca.Reason != 0 || !ca.SessionPresent {
			t.Fatalf("%s after the restart: CONNACK %+v, want its session", u, ca)
		}
		devs[u] = dev
	}
	for _, u := range []string{"a", "b", "root"} {
		publish(u, "after-"+u)
	}
	for _, u := range []string{"a", "b", "root"} {
		var got []string
		for {
			p, err := devs[u].next(700 * time.Millisecond)
			if err != nil {
				break
			}
			if pub, ok := p.(*packet.Publish); ok {
				got = append(got, pub.Topic+"="+string(pub.Payload))
				devs[u].send(&packet.Ack{Type: packet.TypePuback, PacketID: pub.PacketID})
			}
		}
		sort.Strings(got)
		if want := []string{"cmd/k1=after-" + u, "cmd/k1=before-" + u}; !slices.Equal(got, want) {
			t.Errorf("session dev of %s got %q, want %q", u, got, want)
		}
	}
}

// TestRawAccountLimits: beta's connections over its maximum are refused with
// CONNACK 0x97 (MQTT 5) or 3, server unavailable (MQTT 3.1.1); its subscriptions
// over the maximum with SUBACK 0x97 (MQTT 5) or 0x80 (MQTT 3.1.1), counted one per
// filter and freed by UNSUBSCRIBE; slow's publishers are slowed to its message
// rate.
func TestRawAccountLimits(t *testing.T) {
	s, port := startTern(t, withAccounts(t))
	c5 := dialRaw(t, port, packet.V5)
	if ca := c5.connectAs("b1", true, "b", "pw", nil); ca.Reason != 0 {
		t.Fatalf("first connection of beta: %+v", ca)
	}
	c3 := dialRaw(t, port, packet.V311)
	if ca := c3.connectAs("b2", true, "b", "pw", nil); ca.Reason != 0 {
		t.Fatalf("second connection of beta: %+v", ca)
	}
	if ca := dialRaw(t, port, packet.V5).connectAs("b3", true, "b", "pw", nil); ca.Reason != packet.QuotaExceeded {
		t.Fatalf("third connection of beta (MQTT 5): %+v, want 0x97", ca)
	}
	if ca := dialRaw(t, port, packet.V311).connectAs("b3", true, "b", "pw", nil); ca.Reason != 3 {
		t.Fatalf("third connection of beta (MQTT 3.1.1): %+v, want 3", ca)
	}
	// Another account is not bound by beta's maximum.
	if ca := dialRaw(t, port, packet.V311).connectAs("x", true, "a", "pw", nil); ca.Reason != 0 {
		t.Fatalf("a connection of acme: %+v", ca)
	}

	for i, f := range []string{"s/0", "s/1/#", "s/2", "s/1/#"} { // the last replaces the second
		if r := c5.subscribe(uint16(i+1), f, 1); r[0] != 1 {
			t.Fatalf("subscription %d of beta (%s): %v", i, f, r)
		}
	}
	if r := c5.subscribe(10, "s/3", 1); r[0] != packet.QuotaExceeded {
		t.Fatalf("fourth subscription of beta (MQTT 5): %v, want 0x97", r)
	}
	if r := c3.subscribe(11, "s/4", 1); r[0] != 0x80 {
		t.Fatalf("fourth subscription of beta (MQTT 3.1.1): %v, want 0x80", r)
	}
	c5.send(&packet.Unsubscribe{PacketID: 12, Filters: []string{"s/0"}})
	if _, ok := c5.must(5 * time.Second).(*packet.Unsuback); !ok {
		t.Fatal("no UNSUBACK")
	}
	if r := c3.subscribe(13, "s/4", 1); r[0] != 1 {
		t.Fatalf("a subscription of beta after an UNSUBSCRIBE: %v, want granted", r)
	}
	// A connection's end frees it: the next one is accepted.
	_ = c3.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dialRaw(t, port, packet.V5)
		ca := c.connectAs("b4", true, "b", "pw", nil)
		if ca.Reason == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection of beta after one closed: %+v", ca)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// slow publishes 20 messages a second, with a burst of 20: 60 take 2 s.
	sub := dialRaw(t, port, packet.V311)
	sub.connectAs("slow-sub", true, "s", "pw", nil)
	sub.subscribe(1, "t", 0)
	pub := dialRaw(t, port, packet.V311)
	pub.connectAs("slow-pub", true, "s", "pw", nil)
	start := time.Now()
	for range 60 {
		pub.send(&packet.Publish{Topic: "t", Payload: []byte("x")})
	}
	for i := range 60 {
		if _, err := sub.next(10 * time.Second); err != nil {
			t.Fatalf("message %d of slow: %v", i, err)
		}
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("60 messages of an account limited to 20 a second arrived in %v", d)
	}
	_ = s
}

// TestPahoAccountsSharedSubscriptions: a shared subscription inside an account
// shares its account's messages only, and one to imported subjects is a group of
// the importer's, not the exporter's group of the same name.
func TestPahoAccountsSharedSubscriptions(t *testing.T) {
	_, port := startTern(t, withAccounts(t))
	out := runPaho(t, port, `
def wait_sub(c, f):
    ev = threading.Event()
    c.on_subscribe = lambda cl, ud, mid, rcs, props: ev.set()
    c.subscribe(f, qos=1)
    if not ev.wait(10):
        sys.exit("no SUBACK")
a = client("a-member", v5=True, user="a", password="pw")
b = client("b-member", v5=True, user="b", password="pw")
r = client("r-member", v5=True, user="root", password="pw")
wait_sub(a, "$share/g/public/#")
wait_sub(b, "$share/g/acme/public/#")
wait_sub(r, "$share/g/public/#")
p = client("pub", v5=True, user="a", password="pw")
for i in range(6):
    p.publish("public/n", str(i), qos=1).wait_for_publish(5)
time.sleep(0.5)
for who, c in (("a", a), ("b", b), ("root", r)):
    got = []
    while True:
        m = none_within(c, 0.3)
        if m is None:
            break
        got.append(m.topic + "=" + m.payload.decode())
    emit(who=who, got=got)
`, 60*time.Second)
	want := map[string]int{"a": 6, "b": 6, "root": 0}
	res := decode(t, out)
	if len(res) != 3 {
		t.Fatalf("results: %s", out)
	}
	for _, r := range res {
		who := r["who"].(string)
		if got := toStrings(r["got"]); len(got) != want[who] {
			t.Errorf("%s got %q, want %d messages", who, got, want[who])
		}
	}
}
