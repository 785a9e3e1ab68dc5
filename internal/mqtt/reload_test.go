package mqtt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// mqttUsersBefore and mqttUsersAfter are the users file of the MQTT reload tests
// before and after the reload: gone5, gone3 and gonepaho are removed, rekeyed's
// password changes, pub may publish elsewhere, sub and away lose s.> and have
// t.secret withheld, wide may subscribe to more, same does not change, lvl
// loses the parent level "p" of its p/#; acme's user acme-a loses x.>, within
// the account's limit of 2 subscriptions.
const mqttUsersBefore = `
[[accounts]]
name = "acme"
max_subscriptions = 2

[[users]]
name = "root"
password = %[1]q

[[users]]
name = "gone5"
password = %[1]q

[[users]]
name = "gone3"
password = %[1]q

[[users]]
name = "gonepaho"
password = %[1]q

[[users]]
name = "rekeyed"
password = %[1]q

[[users]]
name = "pub"
password = %[1]q
publish = { allow = ["a.>"] }

[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["s.>", "t.>"] }

[[users]]
name = "away"
password = %[1]q
subscribe = { allow = ["s.>", "t.>"] }

[[users]]
name = "wide"
password = %[1]q
subscribe = { allow = ["w.one"] }

[[users]]
name = "same"
password = %[1]q
subscribe = { allow = ["u.>"] }

[[users]]
name = "lvl"
password = %[1]q
subscribe = { allow = ["p", "p.>"] }

[[users]]
name = "acme-a"
account = "acme"
password = %[1]q
subscribe = { allow = ["x.>", "y.>", "z.>"] }
`

func mqttUsersAfter(t *testing.T) string {
	other, err := bcrypt.GenerateFromPassword([]byte("another-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return `
[[accounts]]
name = "acme"
max_subscriptions = 2

[[users]]
name = "root"
password = %[1]q

[[users]]
name = "rekeyed"
password = "` + string(other) + `"

[[users]]
name = "pub"
password = %[1]q
publish = { allow = ["b.>"] }

[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["t.>"], deny = ["t.secret"] }

[[users]]
name = "away"
password = %[1]q
subscribe = { allow = ["t.>"], deny = ["t.secret"] }

[[users]]
name = "wide"
password = %[1]q
subscribe = { allow = ["w.>"] }

[[users]]
name = "same"
password = %[1]q
subscribe = { allow = ["u.>"] }

[[users]]
name = "lvl"
password = %[1]q
subscribe = { allow = ["p.>"] }

[[users]]
name = "acme-a"
account = "acme"
password = %[1]q
subscribe = { allow = ["y.>", "z.>"] }
`
}

// publishQoS1 publishes and waits for the PUBACK, returning its reason.
func (c *rawClient) publishQoS1(pid uint16, topic string) packet.ReasonCode {
	c.t.Helper()
	c.send(&packet.Publish{QoS: 1, PacketID: pid, Topic: topic, Payload: []byte(topic)})
	for {
		if a, ok := c.must(5 * time.Second).(*packet.Ack); ok && a.Type == packet.TypePuback && a.PacketID == pid {
			return a.Reason
		}
	}
}

// received reads the PUBLISH packets that come within d (acknowledging QoS 1
// ones) and returns their topics.
func (c *rawClient) received(d time.Duration) []string {
	c.t.Helper()
	var topics []string
	deadline := time.Now().Add(d)
	for {
		p, err := c.next(time.Until(deadline))
		if err != nil {
			return topics
		}
		if pub, ok := p.(*packet.Publish); ok {
			topics = append(topics, pub.Topic)
			if pub.QoS == 1 {
				c.send(&packet.Ack{Type: packet.TypePuback, PacketID: pub.PacketID})
			}
		}
	}
}

// TestRawReloadUsers: a reload of the users file reaches MQTT clients already
// connected, and persistent sessions whose clients are away: removed users and
// users whose password changed are disconnected (DISCONNECT 0x87 in MQTT 5, the
// connection closed in 3.1.1), a revoked publish permission refuses the next
// publish (PUBACK 0x87), a subscription no longer allowed delivers no more and
// is gone from the session, one that stays has newly denied subjects withheld,
// wider rights are usable without reconnecting, an unchanged user is untouched,
// and the account's count of subscriptions follows.
func TestRawReloadUsers(t *testing.T) {
	users, write := authtest.ReloadableUsers(t, mqttUsersBefore)
	s, port := startTern(t, func(c *server.Config) { c.UsersFile = users })
	pw := authtest.Password
	persist := &packet.Properties{SessionExpiry: 300, HasSessionExpiry: true}
	connect := func(v byte, id, user string, clean bool, props *packet.Properties) *rawClient {
		t.Helper()
		c := dialRaw(t, port, v)
		if ca := c.connectAs(id, clean, user, pw, props); ca.Reason != packet.Success {
			t.Fatalf("%s: CONNACK %v", user, ca.Reason)
		}
		return c
	}
	root := connect(packet.V5, "root", "root", true, nil)
	gone5, gone3 := connect(packet.V5, "gone5", "gone5", true, nil), connect(packet.V311, "gone3", "gone3", true, nil)
	rekeyed := connect(packet.V5, "rekeyed", "rekeyed", true, nil)
	pub := connect(packet.V5, "pub", "pub", true, nil)
	sub := connect(packet.V5, "sub", "sub", false, persist)
	wide := connect(packet.V5, "wide", "wide", true, nil)
	same := connect(packet.V311, "same", "same", true, nil)
	lvl := connect(packet.V5, "lvl", "lvl", true, nil)
	if r := lvl.subscribe(1, "p/#", 1); r[0] != 1 {
		t.Fatalf("lvl subscribes: %v", r)
	}
	acme := connect(packet.V5, "acme-a", "acme-a", true, nil)
	for _, f := range []string{"s/#", "t/#"} {
		if r := sub.subscribe(1, f, 1); r[0] != 1 {
			t.Fatalf("sub subscribes to %s: %v", f, r)
		}
	}
	if r := same.subscribe(1, "u/#", 1); r[0] != 1 {
		t.Fatalf("same subscribes: %v", r)
	}
	if r := wide.subscribe(1, "w/one", 1); r[0] != 1 {
		t.Fatalf("wide subscribes: %v", r)
	}
	for i, f := range []string{"x/#", "y/#"} {
		if r := acme.subscribe(uint16(i+1), f, 1); r[0] != 1 {
			t.Fatalf("acme-a subscribes to %s: %v", f, r)
		}
	}
	if r := acme.subscribe(3, "z/#", 1); r[0] != packet.QuotaExceeded {
		t.Fatalf("acme-a's third subscription: %v, want 0x97", r)
	}
	if r := root.subscribe(1, "b/#", 1); r[0] != 1 {
		t.Fatalf("root subscribes: %v", r)
	}
	// A persistent session whose client is away when the file changes.
	away := connect(packet.V5, "away", "away", false, persist)
	for _, f := range []string{"s/#", "t/#"} {
		if r := away.subscribe(1, f, 1); r[0] != 1 {
			t.Fatalf("away subscribes to %s: %v", f, r)
		}
	}
	away.send(&packet.Disconnect{})
	away.closedWith(5 * time.Second)
	if r := pub.publishQoS1(1, "a/x"); r != packet.Success {
		t.Fatalf("pub publishes to a/x before the reload: %v", r)
	}

	write(mqttUsersAfter(t))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}

	// (a) Removed, or the password changed: DISCONNECT 0x87 (MQTT 5), closed (3.1.1).
	for name, c := range map[string]*rawClient{"gone5": gone5, "rekeyed": rekeyed} {
		if d := c.closedWith(5 * time.Second); d == nil || d.Reason != packet.NotAuthorized {
			t.Errorf("%s: closed with %+v, want DISCONNECT 0x87", name, d)
		}
	}
	if d := gone3.closedWith(5 * time.Second); d != nil {
		t.Errorf("gone3 (3.1.1) got %+v, want the connection closed", d)
	}

	// (b) Publish permissions: the next publish is decided by the new ones.
	if r := pub.publishQoS1(2, "a/y"); r != packet.NotAuthorized {
		t.Errorf("pub publishes to a/y after the reload: %v, want 0x87", r)
	}
	if r := pub.publishQoS1(3, "b/y"); r != packet.Success {
		t.Errorf("pub publishes to b/y after the reload: %v", r)
	}
	if got := root.received(time.Second); len(got) != 1 || got[0] != "b/y" {
		t.Errorf("root got %q, want b/y", got)
	}

	// (c) s/# is gone from sub's session, t/# stays with t/secret withheld; the
	// same for the session of away, whose client was not connected.
	for i, topic := range []string{"s/x", "t/secret", "t/x"} {
		if r := root.publishQoS1(uint16(10+i), topic); r != packet.Success {
			t.Fatalf("root publishes to %s: %v", topic, r)
		}
	}
	if got := sub.received(time.Second); len(got) != 1 || got[0] != "t/x" {
		t.Errorf("sub got %q, want t/x only", got)
	}
	away = dialRaw(t, port, packet.V5)
	if ca := away.connectAs("away", false, "away", pw, persist); !ca.SessionPresent {
		t.Fatalf("away resumes: %+v", ca)
	}
	if got := away.received(time.Second); len(got) != 1 || got[0] != "t/x" {
		t.Errorf("away got %q, want t/x only (queued while away)", got)
	}
	if r := sub.subscribe(5, "s/#", 1); r[0] != packet.NotAuthorized {
		t.Errorf("sub subscribes to s/# again: %v, want 0x87", r)
	}

	// (d) Wider rights, without reconnecting.
	if r := wide.subscribe(2, "w/two", 1); r[0] != 1 {
		t.Errorf("wide subscribes to w/two: %v", r)
	}
	if r := root.publishQoS1(20, "w/two"); r != packet.Success {
		t.Fatal(r)
	}
	if got := wide.received(time.Second); len(got) != 1 || got[0] != "w/two" {
		t.Errorf("wide got %q, want w/two", got)
	}

	// (e) Unchanged: still connected, its subscription delivers.
	if r := root.publishQoS1(21, "u/y"); r != packet.Success {
		t.Fatal(r)
	}
	if got := same.received(time.Second); len(got) != 1 || got[0] != "u/y" {
		t.Errorf("same got %q, want u/y", got)
	}

	// A subscription whose broker subscriptions change (p/# without "p"), made
	// again.
	for i, topic := range []string{"p", "p/x"} {
		if r := root.publishQoS1(uint16(30+i), topic); r != packet.Success {
			t.Fatal(r)
		}
	}
	if got := lvl.received(time.Second); len(got) != 1 || got[0] != "p/x" {
		t.Errorf("lvl got %q, want p/x only", got)
	}

	// The account's count: x/# was given back.
	if r := acme.subscribe(4, "z/#", 1); r[0] != 1 {
		t.Errorf("acme-a subscribes to z/# after x/# was removed: %v", r)
	}
	if r := acme.subscribe(5, "y/more", 1); r[0] != packet.QuotaExceeded {
		t.Errorf("acme-a's third subscription after the reload: %v, want 0x97", r)
	}
}

// TestPahoReloadUsers: paho clients see a reload of the users file: an MQTT 5
// client whose user was removed is disconnected with reason 135 (not
// authorized), a subscription no longer allowed stops delivering while the one
// that stays goes on, and an unchanged client (mosquitto_sub, MQTT 3.1.1) keeps
// its connection and subscription.
func TestPahoReloadUsers(t *testing.T) {
	users, write := authtest.ReloadableUsers(t, mqttUsersBefore)
	s, port := startTern(t, func(c *server.Config) { c.UsersFile = users })
	reloaded := filepath.Join(t.TempDir(), "reloaded")
	same := mosqSub(t, port, "-u", "same", "-P", authtest.Password, "-q", "1", "-t", "u/#", "-C", "2", "-W", "30", "-F", "%t")
	waitSubs(t, s, 1)
	p := startPaho(t, port, `
pw = "`+authtest.Password+`"
gone = client("gonepaho", v5=True, user="gonepaho", password=pw)
reason = {}
def on_disconnect(cl, ud, flags, rc, props):
    reason["rc"] = rc.value if hasattr(rc, "value") else int(rc)
gone.on_disconnect = on_disconnect
sub = client("subpaho", v5=True, user="sub", password=pw)
sub.subscribe([("s/#", 1), ("t/#", 1)])
root = client("rootpaho", v5=True, user="root", password=pw)
time.sleep(0.5)
root.publish("u/x", "before", qos=1).wait_for_publish(5)
emit(ready=True)
while not os.path.exists("`+reloaded+`"):
    time.sleep(0.01)
deadline = time.time() + 10
while "rc" not in reason and time.time() < deadline:
    time.sleep(0.01)
for topic in ["s/x", "t/x", "u/y"]:
    root.publish(topic, topic, qos=1).wait_for_publish(5)
got = [m.topic for m in take(sub, 1)]
extra = none_within(sub, 0.5)
emit(gone_reason=reason.get("rc"), sub_got=got, sub_extra=extra.topic if extra else None)
for c in (sub, root):
    c.disconnect(); c.loop_stop()
`)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.out.String(), `"ready"`) {
		if time.Now().After(deadline) {
			t.Fatalf("paho script not ready: %s %s", p.out.String(), p.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	write(mqttUsersAfter(t))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reloaded, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := decode(t, p.wait(t, 30*time.Second))
	if len(res) != 2 || jsonOf(res[1]) != `{"gone_reason":135,"sub_extra":null,"sub_got":["t/x"]}` {
		t.Fatalf("paho results: %v", res)
	}
	if got := lines(same.wait(t, 20*time.Second)); strings.Join(got, " ") != "u/x u/y" {
		t.Fatalf("mosquitto_sub as same got %q, want u/x and u/y", got)
	}
}

// TestRawReloadWhileSubscribing: clients connect and subscribe while the users
// file is reloaded again and again; once the last reload is in force, no
// subscription it denies delivers, whenever it was made.
func TestRawReloadWhileSubscribing(t *testing.T) {
	const wide, narrow = `
[[users]]
name = "root"
password = %[1]q

[[users]]
name = "u"
password = %[1]q
subscribe = { allow = ["p.>", "q.>"] }
`, `
[[users]]
name = "root"
password = %[1]q

[[users]]
name = "u"
password = %[1]q
subscribe = { allow = ["q.>"] }
`
	users, write := authtest.ReloadableUsers(t, wide)
	s, port := startTern(t, func(c *server.Config) { c.UsersFile = users })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 40 {
			if i%2 == 0 {
				write(narrow)
			} else {
				write(wide)
			}
			if err := s.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
		write(narrow)
		if err := s.Reload(); err != nil {
			t.Error(err)
		}
	}()
	var clients []*rawClient
	for i := range 20 {
		c := dialRaw(t, port, packet.V5)
		persist := i%2 == 0 // half of them persistent
		var props *packet.Properties
		if persist {
			props = &packet.Properties{SessionExpiry: 300, HasSessionExpiry: true}
		}
		if ca := c.connectAs("u"+string(rune('a'+i)), !persist, "u", authtest.Password, props); ca.Reason != packet.Success {
			t.Fatalf("CONNACK %v", ca.Reason)
		}
		c.subscribe(1, "p/#", 0) // granted or not, as the file in force says
		if r := c.subscribe(2, "q/#", 0); r[0] != 0 {
			t.Fatalf("q/#: %v", r)
		}
		clients = append(clients, c)
	}
	<-done
	root := dialRaw(t, port, packet.V5)
	root.connectAs("root", true, "root", authtest.Password, nil)
	root.publishQoS1(1, "p/x")
	root.publishQoS1(2, "q/x")
	for _, c := range clients {
		if got := c.received(300 * time.Millisecond); len(got) != 1 || got[0] != "q/x" {
			t.Fatalf("got %q, want q/x only", got)
		}
	}
}
