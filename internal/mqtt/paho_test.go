package mqtt_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// decode parses the JSON lines a paho script emits.
func decode(t *testing.T, out string) []map[string]any {
	t.Helper()
	var res []map[string]any
	for _, l := range lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("script output %q: %v", l, err)
		}
		res = append(res, m)
	}
	return res
}

// TestPahoPersistentSession: a v3.1.1 client with clean_session=False gets the QoS 1
// messages published while it was away, and session_present on return; a clean
// session does not keep them.
func TestPahoPersistentSession(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
c = client("keeper", clean=False)
c.subscribe("jobs/#", qos=1)[0]
time.sleep(0.3)
emit(first_present=c.connack["present"])
c.disconnect(); c.loop_stop()
p = client("producer")
for i in range(20):
    p.publish("jobs/a", "j%d" % i, qos=1).wait_for_publish(5)
p.disconnect(); p.loop_stop()
c = client("keeper", clean=False)
got = [m.payload.decode() for m in take(c, 20)]
emit(present=c.connack["present"], got=got, extra=none_within(c, 0.2) is not None)
c.disconnect(); c.loop_stop()
c = client("keeper", clean=True)
emit(clean_present=c.connack["present"])
c.disconnect(); c.loop_stop()
`, 60*time.Second)
	res := decode(t, out)
	if len(res) != 3 || res[0]["first_present"] != false || res[1]["present"] != true || res[1]["extra"] != false || res[2]["clean_present"] != false {
		t.Fatalf("session flags: %v", res)
	}
	got := res[1]["got"].([]any)
	if len(got) != 20 {
		t.Fatalf("resumed session got %d messages, want 20: %v", len(got), got)
	}
	for i, g := range got {
		if g != "j"+strconv.Itoa(i) {
			t.Fatalf("message %d = %v, want j%d (in order)", i, g, i)
		}
	}
}

// TestPahoTakeoverAndWill: a second connection with the same client id takes the
// session over (the first is told 0x8E in v5), and an abnormal close publishes the
// will while a clean DISCONNECT does not.
func TestPahoTakeoverAndWill(t *testing.T) {
	t.Parallel() // waits on the clock: beside the others that do
	s, port := startTern(t, nil)
	watcher := mosqSub(t, port, "-t", "wills/#", "-C", "1", "-W", "20", "-F", "%t=%p")
	waitSubs(t, s, 2)
	out := runPaho(t, port, `
import socket
gone = threading.Event()
reason = {}
a = client("dup", v5=True)
def on_disconnect(cl, ud, flags, rc, props):
    reason["rc"] = rc.value
    gone.set()
a.on_disconnect = on_disconnect
b = client("dup", v5=True)
emit(taken_over=gone.wait(5), rc=reason.get("rc"))
b.disconnect(); b.loop_stop(); a.loop_stop()
# A clean disconnect: no will.
w = client("polite", will=("wills/polite", "bye", 1, False))
w.disconnect(); w.loop_stop()
# A dropped socket: the will goes out.
w = client("rude", will=("wills/rude", "lost", 1, False))
w.socket().shutdown(socket.SHUT_RDWR)
time.sleep(0.5)
w.loop_stop()
`, 30*time.Second)
	res := decode(t, out)
	if len(res) != 1 || res[0]["taken_over"] != true || res[0]["rc"] != float64(0x8E) {
		t.Fatalf("takeover: %v", res)
	}
	if got := lines(watcher.wait(t, 25*time.Second)); !slices.Equal(got, []string{"wills/rude=lost"}) {
		t.Fatalf("wills: got %q, want only the rude client's", got)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestPahoV5Properties: user properties, content type, correlation data and expiry
// travel MQTT→MQTT and MQTT↔native as Tern headers; no-local, retain-as-published,
// retain handling and subscription identifiers behave as MQTT 5 says.
func TestPahoV5Properties(t *testing.T) {
	s, port := startTern(t, nil)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nsub, err := nc.SubscribeSync("props.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	out := runPaho(t, port, `
from paho.mqtt.subscribeoptions import SubscribeOptions
r = client("recv", v5=True)
sp = Properties(PacketTypes.SUBSCRIBE); sp.SubscriptionIdentifier = 7
r.subscribe("props/#", options=SubscribeOptions(qos=1), properties=sp)
time.sleep(0.2)
pp = Properties(PacketTypes.PUBLISH)
pp.UserProperty = [("k1", "v1"), ("k1", "v2"), ("trace", "abc")]
pp.ContentType = "application/json"
pp.CorrelationData = b"corr-1"
pp.MessageExpiryInterval = 30
pp.PayloadFormatIndicator = 1
r.publish("props/a", '{"x":1}', qos=1, properties=pp).wait_for_publish(5)
m = take(r, 1)[0]
p = m.properties
emit(up=p.UserProperty, ct=p.ContentType, corr=p.CorrelationData.decode(), exp=p.MessageExpiryInterval,
     pfi=p.PayloadFormatIndicator, subid=p.SubscriptionIdentifier)
# no-local: own messages are not echoed.
nl = client("nolocal", v5=True)
nl.subscribe("nl/x", options=SubscribeOptions(qos=1, noLocal=True))
time.sleep(0.2)
nl.publish("nl/x", "mine", qos=1).wait_for_publish(5)
other = client("other", v5=True)
other.publish("nl/x", "theirs", qos=1).wait_for_publish(5)
emit(nolocal=[m.payload.decode() for m in take(nl, 2, timeout=1)])
# retain as published and retain handling.
other.publish("rap/x", "kept", qos=1, retain=True).wait_for_publish(5)
rap = client("rap", v5=True)
rap.subscribe([("rap/#", SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=0))])
first = take(rap, 1)[0]
other.publish("rap/x", "live", qos=1, retain=True).wait_for_publish(5)
live = take(rap, 1)[0]
plain = client("plain", v5=True)
plain.subscribe([("rap/#", SubscribeOptions(qos=1, retainHandling=0))])
pfirst = take(plain, 1)[0]
other.publish("rap/x", "live2", qos=1, retain=True).wait_for_publish(5)
plive = take(plain, 1)[0]
rh2 = client("rh2", v5=True)
rh2.subscribe([("rap/#", SubscribeOptions(qos=1, retainHandling=2))])
emit(rap=[first.retain, live.retain], plain=[pfirst.retain, plive.retain], rh2=none_within(rh2, 0.2) is None)
`, 40*time.Second)
	res := decode(t, out)
	if len(res) != 3 {
		t.Fatalf("script output: %v", res)
	}
	p := res[0]
	wantUp := []any{[]any{"k1", "v1"}, []any{"k1", "v2"}, []any{"trace", "abc"}}
	if jsonOf(p["up"]) != jsonOf(wantUp) || p["ct"] != "application/json" || p["corr"] != "corr-1" ||
		p["pfi"] != float64(1) || jsonOf(p["subid"]) != "[7]" {
		t.Fatalf("v5 properties: %v", p)
	}
	if exp := p["exp"].(float64); exp < 28 || exp > 30 {
		t.Fatalf("message expiry %v, want about 30", exp)
	}
	if got := toStrings(res[1]["nolocal"]); !slices.Equal(got, []string{"theirs"}) {
		t.Fatalf("no local: got %q", got)
	}
	if jsonOf(res[2]["rap"]) != "[true,true]" || jsonOf(res[2]["plain"]) != "[true,false]" || res[2]["rh2"] != true {
		t.Fatalf("retain flags: %v", res[2])
	}
	// The same message reached a native subscriber with the properties as headers.
	m, err := nsub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "props.a" || !slices.Equal(m.Header.Values("k1"), []string{"v1", "v2"}) || m.Header.Get("trace") != "abc" ||
		m.Header.Get("Content-Type") != "application/json" || m.Header.Get("Tern-Correlation") != "corr-1" || m.Header.Get("Tern-Expires") == "" {
		t.Fatalf("native view: %s %v", m.Subject, m.Header)
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestPahoRequestReplyWithNative: a native request reaches an MQTT 5 responder as a
// response topic, and the answer comes back to the native requester.
func TestPahoRequestReplyWithNative(t *testing.T) {
	s, port := startTern(t, nil)
	responder := startPaho(t, port, `
r = client("responder", v5=True)
r.subscribe("svc/echo", qos=1)
print("ready", flush=True)
m = take(r, 1, timeout=20)[0]
rp = Properties(PacketTypes.PUBLISH)
if getattr(m.properties, "CorrelationData", None):
    rp.CorrelationData = m.properties.CorrelationData
r.publish(m.properties.ResponseTopic, b"echo:" + m.payload, qos=1, properties=rp).wait_for_publish(5)
time.sleep(0.3)
`)
	waitSubs(t, s, 1)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := nc.Request(ctx, "svc.echo", []byte("hi"))
	if err != nil {
		t.Fatalf("request: %v (responder output %q %q)", err, responder.out.String(), responder.errOut.String())
	}
	if string(resp.Data) != "echo:hi" {
		t.Fatalf("response %q", resp.Data)
	}
}

// TestPahoQoS2ExactlyOnceAcrossReconnects: QoS 2 in both directions while the clients
// drop their connections mid-flow; every message arrives exactly once.
func TestPahoQoS2ExactlyOnceAcrossReconnects(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
import socket
N = 200
sub = client("q2sub", clean=False)
sub.reconnect_delay_set(0.1, 0.5)
sub.subscribe("q2/t", qos=2)
time.sleep(0.2)
pub = client("q2pub", clean=False)
pub.reconnect_delay_set(0.1, 0.5)
seen = []
for i in range(N):
    pub.publish("q2/t", str(i), qos=2)
    if i % 50 == 25:
        # Drop both connections with exchanges in flight, then resume the sessions.
        pub.socket().shutdown(socket.SHUT_RDWR)
        sub.socket().shutdown(socket.SHUT_RDWR)
        time.sleep(0.2)
        back = time.time() + 15
        while not (pub.is_connected() and sub.is_connected()) and time.time() < back:
            time.sleep(0.05)
deadline = time.time() + 30
while len(seen) < N and time.time() < deadline:
    try:
        m = sub.msgs.get(timeout=1)
        seen.append(int(m.payload))
    except queue.Empty:
        pass
time.sleep(0.3) # duplicates would follow the last message closely
while True:
    try:
        seen.append(int(sub.msgs.get(timeout=0.2).payload))
    except queue.Empty:
        break
emit(count=len(seen), distinct=len(set(seen)), missing=sorted(set(range(N)) - set(seen))[:10])
`, 90*time.Second)
	res := decode(t, out)
	if len(res) != 1 || res[0]["count"] != float64(200) || res[0]["distinct"] != float64(200) {
		t.Fatalf("QoS 2 across reconnects: %v, want 200 messages each once", res)
	}
}

// TestPahoTopicAlias: a v5 publisher that sends the topic once and then only its
// alias still reaches the subscriber under the full topic.
func TestPahoTopicAlias(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
r = client("alias-recv", v5=True)
r.subscribe("alias/long/topic/name", qos=1)
time.sleep(0.2)
p = client("alias-pub", v5=True)
pp = Properties(PacketTypes.PUBLISH); pp.TopicAlias = 3
p.publish("alias/long/topic/name", "first", qos=1, properties=pp).wait_for_publish(5)
p.publish("", "second", qos=1, properties=pp).wait_for_publish(5)
emit(got=[[m.topic, m.payload.decode()] for m in take(r, 2)], max=p.connack["props"].TopicAliasMaximum)
`, 30*time.Second)
	res := decode(t, out)
	if len(res) != 1 || jsonOf(res[0]["got"]) != `[["alias/long/topic/name","first"],["alias/long/topic/name","second"]]` {
		t.Fatalf("topic alias: %v", res)
	}
}

// TestPahoWebSocket: MQTT over WebSocket (subprotocol "mqtt") carries messages to and
// from clients on plain TCP.
func TestPahoWebSocket(t *testing.T) {
	s, port := startTern(t, nil)
	wsPort := strconv.Itoa(s.MQTTWebSocketAddr().(*net.TCPAddr).Port)
	sub := mosqSub(t, port, "-t", "ws/#", "-C", "1", "-W", "20", "-F", "%t=%p")
	waitSubs(t, s, 2)
	out := runPaho(t, port, `
WS = int(os.environ["WSPORT"])
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="browserish", protocol=mqtt.MQTTv311, transport="websockets")
c.ws_set_options(path="/mqtt")
c.msgs = queue.Queue()
c.on_message = lambda cl, ud, m: c.msgs.put(m)
c.connect("127.0.0.1", WS)
c.loop_start()
# The CONNACK is read by paho's loop thread: on a loaded machine, later than a fixed pause.
back = time.time() + 10
while not c.is_connected() and time.time() < back:
    time.sleep(0.01)
c.subscribe("back/to/ws", qos=1)
time.sleep(0.3)
c.publish("ws/hello", "from websocket", qos=1).wait_for_publish(5)
tcp = client("tcp-side")
tcp.publish("back/to/ws", "from tcp", qos=1).wait_for_publish(5)
emit(got=[m.payload.decode() for m in take(c, 1)])
`, 30*time.Second, "WSPORT="+wsPort)
	res := decode(t, out)
	if len(res) != 1 || jsonOf(res[0]["got"]) != `["from tcp"]` {
		t.Fatalf("websocket client received %v", res)
	}
	if got := lines(sub.wait(t, 20*time.Second)); !slices.Equal(got, []string{"ws/hello=from websocket"}) {
		t.Fatalf("TCP subscriber got %q", got)
	}
}

// TestPahoSharedSubscription spreads messages over a $share group, each message to
// exactly one member, and a native queue subscriber in the same group takes part.
func TestPahoSharedSubscription(t *testing.T) {
	s, port := startTern(t, nil)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	native, err := nc.QueueSubscribeSync("jobs.>", "workers")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	out := runPaho(t, port, `
N = 90
a = client("share-a", v5=True); a.subscribe("$share/workers/jobs/#", qos=1)
b = client("share-b", v5=True); b.subscribe("$share/workers/jobs/#", qos=1)
time.sleep(0.3)
p = client("share-pub", v5=True)
for i in range(N):
    p.publish("jobs/x", str(i), qos=1).wait_for_publish(5)
ga, gb = [], []
# Until nothing has come for a while: the native member takes its share too.
quiet = time.time() + 0.5
deadline = time.time() + 10
while time.time() < min(quiet, deadline):
    for c, g in ((a, ga), (b, gb)):
        try:
            while True:
                g.append(int(c.msgs.get_nowait().payload))
                quiet = time.time() + 0.5
        except queue.Empty:
            pass
    time.sleep(0.05)
emit(a=ga, b=gb)
`, 40*time.Second)
	res := decode(t, out)
	var nativeGot []int
	for {
		m, err := native.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		n, _ := strconv.Atoi(string(m.Data))
		nativeGot = append(nativeGot, n)
	}
	var ga, gb []int
	for _, v := range res[0]["a"].([]any) {
		ga = append(ga, int(v.(float64)))
	}
	for _, v := range res[0]["b"].([]any) {
		gb = append(gb, int(v.(float64)))
	}
	if len(ga) == 0 || len(gb) == 0 || len(nativeGot) == 0 {
		t.Fatalf("a member got nothing: mqtt %d and %d, native %d", len(ga), len(gb), len(nativeGot))
	}
	all := append(append(ga, gb...), nativeGot...)
	slices.Sort(all)
	for i, v := range all {
		if v != i {
			t.Fatalf("messages across the group: got %v, want 0..89 each once", all)
		}
	}
	if len(all) != 90 {
		t.Fatalf("got %d messages, want 90", len(all))
	}
}

// TestMQTTjsWebSocket: MQTT.js, the client browser applications use, connects over
// WebSocket with MQTT 5, receives a native publish with its content type, and
// publishes to a native subscriber.
func TestMQTTjsWebSocket(t *testing.T) {
	s, _ := startTern(t, nil)
	root := filepath.Dir(filepath.Dir(python(t))) // .venv/bin/python → .venv
	modules := filepath.Join(filepath.Dir(root), ".node", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "mqtt")); err != nil {
		t.Fatalf("MQTT.js missing in %s: run scripts/deps.sh", modules)
	}
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	back, err := nc.SubscribeSync("js.out")
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	cmd := exec.Command("node", "-e", `
const mqtt = require('mqtt');
const c = mqtt.connect('ws://127.0.0.1:' + process.env.WSPORT + '/mqtt', {protocolVersion: 5, clientId: 'mqttjs', reconnectPeriod: 0});
c.on('error', (e) => { console.error(e); process.exit(1); });
c.on('connect', () => c.subscribe('js/in', {qos: 1}, (err) => {
	if (err) { console.error(err); process.exit(1); }
	console.log(JSON.stringify({ready: true}));
}));
c.on('message', (topic, payload, packet) => {
	console.log(JSON.stringify({topic, payload: payload.toString(), ct: (packet.properties || {}).contentType}));
	c.publish('js/out', 'from mqtt.js', {qos: 1}, () => c.end(false, () => process.exit(0)));
});
setTimeout(() => { console.error('timed out'); process.exit(2); }, 20000);
`)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "WSPORT="+strconv.Itoa(s.MQTTWebSocketAddr().(*net.TCPAddr).Port))
	p := runProc(t, cmd)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.out.String(), `"ready":true`) {
		if time.Now().After(deadline) {
			t.Fatalf("MQTT.js not ready: %s %s", p.out.String(), p.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := nc.PublishMsg(&tern.Msg{Subject: "js.in", Header: tern.Header{"Content-Type": {"text/plain"}}, Data: []byte("to the browser")}); err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, 20*time.Second)
	if !strings.Contains(out, `{"topic":"js/in","payload":"to the browser","ct":"text/plain"}`) {
		t.Fatalf("MQTT.js received: %s", out)
	}
	m, err := back.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != "from mqtt.js" {
		t.Fatalf("native subscriber: %v %v", m, err)
	}
}

// TestPahoServerCloseIsGraceful: a v5 client still publishing when the server ends
// its connection for a protocol error reads the DISCONNECT reason code, instead of
// losing it to a connection reset.
func TestPahoServerCloseIsGraceful(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
got = {}
done = threading.Event()
c = client("chatty", v5=True)
def on_disconnect(cl, ud, flags, rc, props):
    got.setdefault("rcs", []).append(rc.value if hasattr(rc, "value") else int(rc))
    done.set()
c.on_disconnect = on_disconnect
payload = b"x" * 4096
for i in range(200):
    c.publish("chat/x", payload, qos=0)
bad = Properties(PacketTypes.PUBLISH); bad.TopicAlias = 60000
c.publish("chat/x", payload, qos=0, properties=bad)
i = 0
while not done.is_set() and i < 20000:
    c.publish("chat/x", payload, qos=0)
    i += 1
    if i % 10 == 0:
        time.sleep(0.001) # a fast publisher, not one that starves paho's reading thread
done.wait(10)
c.loop_stop()
emit(rcs=got.get("rcs"))
`, 60*time.Second)
	res := decode(t, out)
	if len(res) != 1 || jsonOf(res[0]["rcs"]) != "[148]" {
		t.Fatalf("client saw %v, want the server's DISCONNECT reason 0x94 (topic alias invalid)", res)
	}
}

// TestPahoSubscribeRightAfterConnect: a client that subscribes right after it
// connects, while another client publishes at once, gets the message: the fresh
// connection's SUBSCRIBE is read by a running reader, not after an idle wake-up.
func TestPahoSubscribeRightAfterConnect(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
p = client("early-pub", v5=True)
N = 40
hits = 0
for i in range(N):
    s = client("early-sub-%d" % i, v5=True)
    s.subscribe("early/%d" % i, qos=0)
    time.sleep(0.0002)
    p.publish("early/%d" % i, "m", qos=0)
    try:
        s.msgs.get(timeout=1)
        hits += 1
    except queue.Empty:
        pass
    s.disconnect(); s.loop_stop()
emit(hits=hits, n=N)
`, 120*time.Second)
	res := decode(t, out)
	if len(res) != 1 || res[0]["hits"].(float64) < 36 {
		t.Fatalf("%v: a subscription sent just before a publish missed it too often", res)
	}
}
