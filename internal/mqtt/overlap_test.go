package mqtt_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// A message that several of one client's subscriptions match reaches it once (MQTT
// 5, 3.3.4): at the highest QoS they were granted, with every one's subscription
// identifier. Shared subscriptions are delivered on their own.

// pahoOverlapPrelude: sub subscribes with a subscription identifier and options;
// one publishes and returns what the receiver got within half a second of the first.
const pahoOverlapPrelude = `
from paho.mqtt.subscribeoptions import SubscribeOptions
def sub(c, filt, qos, sid=None, **kw):
    p = None
    if sid:
        p = Properties(PacketTypes.SUBSCRIBE); p.SubscriptionIdentifier = sid
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    c.subscribe(filt, options=SubscribeOptions(qos=qos, **kw), properties=p)
    if not done.wait(5):
        sys.exit("no SUBACK for " + filt)
def got(r, n=1):
    ms = take(r, n)
    while True:
        m = none_within(r, 0.2)  # a duplicate would follow closely; the rules are the machine's (session/testdata/overlap.txt)
        if m is None:
            break
        ms.append(m)
    return [dict(payload=m.payload.decode(), qos=m.qos, retain=bool(m.retain),
                 ids=sorted(getattr(m.properties, "SubscriptionIdentifier", None) or [])) for m in ms]
def one(pub, r, topic, qos, retain=False, n=1):
    pub.publish(topic, "q%d" % qos, qos=qos, retain=retain).wait_for_publish(5)
    return got(r, n)
`

type overlapGot struct {
	Payload string   `json:"payload"`
	QoS     int      `json:"qos"`
	Retain  bool     `json:"retain"`
	IDs     []uint32 `json:"ids"`
}

func overlapResult(t *testing.T, v any) []overlapGot {
	t.Helper()
	var out []overlapGot
	b := jsonOf(v)
	if err := jsonUnmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

// TestPahoOverlappingSubscriptions: paho-mqtt, v5 and v3.1.1.
func TestPahoOverlappingSubscriptions(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, pahoOverlapPrelude+`
pub = client("ov-pub", v5=True)
r = client("ov-recv", v5=True)
sub(r, "a/+", 1, 1)
sub(r, "a/b", 2, 2)
sub(r, "#", 0)
emit(case="qos2", got=one(pub, r, "a/b", 2))
emit(case="qos1", got=one(pub, r, "a/b", 1))
emit(case="qos0", got=one(pub, r, "a/b", 0))
emit(case="retained, none as published", got=one(pub, r, "a/b", 1, retain=True))
emit(case="one match", got=one(pub, r, "a/c", 2))
emit(case="only #", got=one(pub, r, "x/y", 2))

# No local: the client's own message does not count for a no-local subscription.
# Retain as published: one subscription asking for it keeps the flag.
n = client("ov-nl", v5=True)
sub(n, "nl/+", 1, 5, noLocal=True)
sub(n, "nl/x", 2, 6)
sub(n, "nl/#", 0, 7, retainAsPublished=True)
emit(case="own", got=one(n, n, "nl/x", 2))
emit(case="theirs, retained", got=one(pub, n, "nl/x", 2, retain=True))

# Shared: delivered apart from the client's other subscriptions.
s = client("ov-shared", v5=True)
sub(s, "$share/g/s/#", 1, 3)
sub(s, "s/+", 1, 4)
sub(s, "s/x", 1, 5)
emit(case="shared", got=one(pub, s, "s/x", 1, n=2))

# MQTT 3.1.1: one copy at the highest QoS, no identifiers.
v3 = client("ov-v3")
for f, q in (("v3/+", 1), ("v3/b", 2), ("v3/#", 0)):
    done = threading.Event()
    v3.on_subscribe = lambda *a: done.set()
    v3.subscribe(f, q)
    if not done.wait(5):
        sys.exit("no SUBACK")
emit(case="v3 qos2", got=one(pub, v3, "v3/b", 2))
emit(case="v3 qos1", got=one(pub, v3, "v3/b", 1))
`, 90*time.Second)
	want := map[string][]overlapGot{
		"qos2":                        {{"q2", 2, false, []uint32{1, 2}}},
		"qos1":                        {{"q1", 1, false, []uint32{1, 2}}},
		"qos0":                        {{"q0", 0, false, []uint32{1, 2}}},
		"retained, none as published": {{"q1", 1, false, []uint32{1, 2}}},
		"one match":                   {{"q2", 1, false, []uint32{1}}},
		"only #":                      {{"q2", 0, false, []uint32{}}},
		"own":                         {{"q2", 2, false, []uint32{6, 7}}},
		"theirs, retained":            {{"q2", 2, true, []uint32{5, 6, 7}}},
		"v3 qos2":                     {{"q2", 2, false, []uint32{}}},
		"v3 qos1":                     {{"q1", 1, false, []uint32{}}},
	}
	res := decode(t, out)
	if len(res) != len(want)+1 {
		t.Fatalf("script output: %v", res)
	}
	for _, r := range res {
		name := r["case"].(string)
		got := overlapResult(t, r["got"])
		if name == "shared" {
			// One copy from the group, one for the two plain subscriptions; either first.
			slices.SortFunc(got, func(a, b overlapGot) int { return len(a.IDs) - len(b.IDs) })
			if jsonOf(got) != jsonOf([]overlapGot{{"q1", 1, false, []uint32{3}}, {"q1", 1, false, []uint32{4, 5}}}) {
				t.Errorf("shared: got %s, want one copy with [3] and one with [4 5]", jsonOf(got))
			}
			continue
		}
		if jsonOf(got) != jsonOf(want[name]) {
			t.Errorf("%s: got %s, want %s", name, jsonOf(got), jsonOf(want[name]))
		}
	}
}

// TestMQTTjsOverlappingSubscriptions: MQTT.js over TCP with MQTT 5 gets one PUBLISH
// whose subscriptionIdentifier property lists both subscriptions.
func TestMQTTjsOverlappingSubscriptions(t *testing.T) {
	_, port := startTern(t, nil)
	modules := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(python(t)))), ".node", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "mqtt")); err != nil {
		t.Fatalf("MQTT.js missing in %s: run scripts/deps.sh", modules)
	}
	cmd := exec.Command("node", "-e", `
const mqtt = require('mqtt');
const c = mqtt.connect('mqtt://127.0.0.1:' + process.env.PORT, {protocolVersion: 5, clientId: 'mqttjs-overlap', reconnectPeriod: 0});
const fail = (e) => { console.error(e); process.exit(1); };
c.on('error', fail);
const got = [];
c.on('message', (topic, payload, packet) => {
	got.push({topic, qos: packet.qos, ids: (packet.properties || {}).subscriptionIdentifier});
});
c.on('connect', () => {
	c.subscribe('ov/+', {qos: 1, properties: {subscriptionIdentifier: 1}}, (err) => {
		if (err) fail(err);
		c.subscribe('ov/b', {qos: 2, properties: {subscriptionIdentifier: 2}}, (err) => {
			if (err) fail(err);
			c.publish('ov/b', 'both', {qos: 2}, (err) => {
				if (err) fail(err);
				setTimeout(() => { console.log(JSON.stringify(got)); c.end(false, () => process.exit(0)); }, 500);
			});
		});
	});
});
setTimeout(() => { console.error('timed out'); process.exit(2); }, 20000);
`)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "PORT="+port)
	out := runProc(t, cmd).wait(t, 25*time.Second)
	var got []struct {
		Topic string `json:"topic"`
		QoS   int    `json:"qos"`
		IDs   any    `json:"ids"`
	}
	if err := jsonUnmarshal(strings.TrimSpace(out), &got); err != nil {
		t.Fatalf("MQTT.js output %q: %v", out, err)
	}
	if len(got) != 1 {
		t.Fatalf("MQTT.js got %d messages, want 1: %s", len(got), out)
	}
	ids, ok := got[0].IDs.([]any)
	if !ok {
		t.Fatalf("subscriptionIdentifier is %T (%v), want an array", got[0].IDs, got[0].IDs)
	}
	var set []int
	for _, id := range ids {
		set = append(set, int(id.(float64)))
	}
	slices.Sort(set)
	if got[0].Topic != "ov/b" || got[0].QoS != 2 || !slices.Equal(set, []int{1, 2}) {
		t.Fatalf("MQTT.js got %s, want ov/b at QoS 2 with identifiers 1 and 2", out)
	}
}

// TestMosquittoOverlappingSubscriptions: mosquitto_sub with MQTT 3.1.1 and
// overlapping filters prints a message once (the marker after it is the second line).
func TestMosquittoOverlappingSubscriptions(t *testing.T) {
	s, port := startTern(t, nil)
	sub := mosqSub(t, port, "-V", "mqttv311", "-q", "1", "-t", "m/+", "-t", "m/b", "-t", "m/#", "-t", "end", "-C", "2", "-W", "20", "-F", "%t=%p")
	waitSubs(t, s, 5) // m/# is two broker subscriptions
	mosqPub(t, port, "-t", "m/b", "-m", "once", "-q", "1")
	mosqPub(t, port, "-t", "end", "-m", "marker", "-q", "1")
	if got := lines(sub.wait(t, 20*time.Second)); !slices.Equal(got, []string{"m/b=once", "end=marker"}) {
		t.Fatalf("got %q, want the message once, then the marker", got)
	}
}

// TestRestartKeepsSubscriptionIDs: a message queued for an offline session with
// several matching subscriptions is stored with all their identifiers and sent with
// them after a restart.
func TestRestartKeepsSubscriptionIDs(t *testing.T) {
	dir := t.TempDir()
	s, port := startAtDir(t, dir)
	dev := dialRaw(t, port, packet.V5)
	dev.connect("ov-dev", false, 0, &packet.Properties{SessionExpiry: 3600, HasSessionExpiry: true})
	for i, f := range []string{"q/+", "q/b", "q/#"} {
		id := uint32(i + 1)
		dev.send(&packet.Subscribe{PacketID: uint16(id), Props: packet.Properties{SubscriptionIDs: []uint32{id}},
			Subs: []packet.Subscription{{Filter: f, QoS: byte(i % 3)}}})
		if sa, ok := dev.must(5 * time.Second).(*packet.Suback); !ok || sa.Reasons[0] != packet.ReasonCode(i%3) {
			t.Fatalf("SUBACK for %s: %+v", f, sa)
		}
	}
	_ = dev.nc.Close()
	waitOffline(t, s)

	pub := dialRaw(t, port, packet.V5)
	pub.connect("ov-pub", true, 0, nil)
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "q/b", Payload: []byte("stored")})
	pub.must(5 * time.Second) // PUBACK: routed
	_ = pub.nc.Close()        // a v5 client the server says goodbye to is waited for a while
	time.Sleep(200 * time.Millisecond)
	stopServer(t, s)

	s, port = startAtDir(t, dir)
	defer stopServer(t, s)
	dev = dialRaw(t, port, packet.V5)
	if ca := dev.connect("ov-dev", false, 0, &packet.Properties{SessionExpiry: 3600, HasSessionExpiry: true}); !ca.SessionPresent {
		t.Fatal("session lost in the restart")
	}
	p, ok := dev.must(5 * time.Second).(*packet.Publish)
	if !ok {
		t.Fatalf("want the queued PUBLISH, got %+v", p)
	}
	ids := slices.Sorted(slices.Values(p.Props.SubscriptionIDs))
	if string(p.Payload) != "stored" || p.QoS != 1 || !slices.Equal(ids, []uint32{1, 2, 3}) {
		t.Fatalf("after the restart: %q QoS %d identifiers %v, want \"stored\" QoS 1 with 1, 2, 3", p.Payload, p.QoS, p.Props.SubscriptionIDs)
	}
	dev.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	if extra, err := dev.next(200 * time.Millisecond); err == nil {
		t.Fatalf("a second copy: %+v", extra)
	}
	_ = dev.nc.Close()
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
