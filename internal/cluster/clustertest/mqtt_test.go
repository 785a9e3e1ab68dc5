package clustertest_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// TestMQTTSessionsSurviveNodeKills runs paho-mqtt clients against three nodes that
// replicate MQTT state: a persistent-session subscriber and a publisher on different
// nodes. The subscriber's node is killed (-9) under QoS 1 load, and the subscriber
// resumes its session on another node; then, with QoS 2, the publisher's node is
// killed and the publisher resumes its exchanges on another node. Every message a
// publisher got its PUBACK or PUBCOMP for must reach the subscriber; QoS 2 ones
// exactly once.
func TestMQTTSessionsSurviveNodeKills(t *testing.T) {
	py := python(t)
	c := clustertest.Start(t, clustertest.Options{N: 3, MQTT: true, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	port := func(i int) string { return strconv.Itoa(c.Nodes[i].MQTTPort) }
	ports := func(order ...int) string {
		var s []string
		for _, i := range order {
			s = append(s, port(i))
		}
		return strings.Join(s, ",")
	}

	// The subscriber starts on n2 and goes to n3, then n1, when its node dies.
	sub := startLines(t, py, "-c", pahoSessionSubscriber, ports(1, 2, 0), "durable", "cl/#", "2")
	if l := sub.next(t, 20*time.Second); l != "subscribed" {
		t.Fatalf("subscriber: %q", l)
	}
	got := map[string]int{}
	drain := func() {
		for {
			l, ok := sub.poll()
			if !ok {
				return
			}
			if m, ok := strings.CutPrefix(l, "msg "); ok {
				got[m]++
			}
		}
	}

	// A v5 client with a 3 s session expiry, on n2 too, which never comes back
	// after n2 dies: its session must end all the same.
	brief := startLines(t, py, "-c", pahoExpiringSession, port(1), "brief", "subscribe")
	if l := brief.next(t, 20*time.Second); l != "session_present=False" {
		t.Fatalf("brief client: %q", l)
	}

	// Wills on n2: one of a client still connected when n2 dies, which the
	// cluster must publish, one of a client that said goodbye, which nobody may.
	willful := startLines(t, py, "-c", pahoWillClient, port(1), "willful", "cl/will", "last words", "stay")
	polite := startLines(t, py, "-c", pahoWillClient, port(1), "polite", "cl/will", "never said", "leave")
	for _, w := range []*lineProc{willful, polite} {
		if l := w.next(t, 20*time.Second); l != "connected" {
			t.Fatalf("will client: %q", l)
		}
	}
	if l := polite.next(t, 20*time.Second); l != "disconnected" {
		t.Fatalf("polite client: %q", l)
	}

	// Phase 1: QoS 1 from n1; n2, the subscriber's node, is killed after 150 acks.
	pub := startLines(t, py, "-c", pahoRetryingPublisher, ports(0, 2), "pub1", "cl/q1", "1", "400")
	acked := map[string]bool{}
	waitAcks := func(p *lineProc, n int, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for len(acked) < n {
			if time.Now().After(deadline) {
				t.Fatalf("publisher: %d acknowledged within %v, want %d", len(acked), limit, n)
			}
			l := p.next(t, limit)
			if m, ok := strings.CutPrefix(l, "acked "); ok {
				acked[m] = true
			}
		}
	}
	waitAcks(pub, 150, 30*time.Second)
	c.Nodes[1].Kill()
	waitAcks(pub, 400, 60*time.Second)
	phase1 := len(acked)

	// n2 comes back, so that the groups keep a majority when n1 goes.
	c.Nodes[1].Restart(t)
	c.WaitFor("n2 back in the mqtt group", 30*time.Second, func() bool {
		st, err := c.Nodes[1].Status()
		return err == nil && st.MQTT != nil && st.MQTT.Running && st.MQTT.Leader != "" && st.MQTT.Applied > 0
	})

	// Phase 2: QoS 2 from n1 to the subscriber, now on n3; n1, the publisher's
	// node, is killed after 100 completions, and the publisher resumes its
	// exchanges on n3: every message exactly once.
	pub2 := startLines(t, py, "-c", pahoRetryingPublisher, ports(0, 2), "pub2", "cl/q2", "2", "300")
	waitAcks(pub2, phase1+100, 30*time.Second)
	c.Nodes[0].Kill()
	waitAcks(pub2, phase1+300, 60*time.Second)

	deadline := time.Now().Add(60 * time.Second)
	for {
		drain()
		missing := 0
		for m := range acked {
			if got[m] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages never reached the subscriber", missing, len(acked))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // a duplicate would arrive by now
	drain()
	for m, n := range got {
		if strings.HasPrefix(m, "cl/q2 ") && n != 1 {
			t.Errorf("QoS 2 message %q delivered %d times", m, n)
		}
	}
	t.Logf("acknowledged %d (QoS 1: %d, QoS 2: %d); received %d distinct", len(acked), phase1, len(acked)-phase1, len(got))
	if got["last words"] == 0 {
		t.Error("the will of the client connected to n2 when it was killed never came")
	}
	if got["never said"] != 0 {
		t.Error("the will of a client that disconnected properly was published")
	}

	// The brief client's session, hosted by no node since n2 died (and by n2
	// after its restart, or by the MQTT group's leader), has ended by now: it
	// expired 3 s after its node's death was noticed.
	clustertest.WaitFor(t, "the brief client's session to expire", 30*time.Second, func() bool {
		check := startLines(t, py, "-c", pahoExpiringSession, port(2), "brief", "check")
		return check.next(t, 20*time.Second) == "session_present=False"
	})
}

// pahoWillClient connects (MQTT 3.1.1, clean session) with a QoS 1 will of the
// topic and payload given and prints "connected"; "stay" then waits until it is
// killed, "leave" disconnects properly (the will is discarded) and prints
// "disconnected".
const pahoWillClient = `
import sys, threading
import paho.mqtt.client as mqtt
port, cid, topic, payload, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
done = threading.Event()
def on_connect(c, u, flags, rc, props=None):
    print("connected", flush=True)
    if mode == "leave":
        c.disconnect()
def on_disconnect(c, u, flags, rc=None, props=None):
    print("disconnected", flush=True)
    done.set()
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=True, protocol=mqtt.MQTTv311)
c.on_connect, c.on_disconnect = on_connect, on_disconnect
c.will_set(topic, payload, qos=1)
c.connect("127.0.0.1", port, keepalive=30)
c.loop_start()
done.wait(300)
c.loop_stop()
`

// pahoSessionSubscriber connects with a persistent session (clean session off, MQTT
// 3.1.1) to the first of the ports given, subscribes once at the QoS given, prints
// "subscribed", then "msg <payload>" per message; when its connection is
// lost it connects to the next port, without subscribing again: the session keeps
// the subscription.
const pahoSessionSubscriber = `
import sys, time, threading
import paho.mqtt.client as mqtt
ports = [int(p) for p in sys.argv[1].split(",")]
cid, topic, qos = sys.argv[2], sys.argv[3], int(sys.argv[4])
lost = threading.Event()
subscribed = [False]
def on_connect(c, u, flags, rc, props=None):
    if rc != 0:
        return
    if not subscribed[0]:
        c.subscribe(topic, qos=qos)
def on_subscribe(c, u, mid, rcs, props=None):
    subscribed[0] = True
    print("subscribed", flush=True)
def on_message(c, u, m):
    print("msg %s" % m.payload.decode(), flush=True)
def on_disconnect(c, u, flags, rc=None, props=None):
    lost.set()
i = 0
while True:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False, protocol=mqtt.MQTTv311)
    c.on_connect, c.on_subscribe, c.on_message, c.on_disconnect = on_connect, on_subscribe, on_message, on_disconnect
    lost.clear()
    try:
        c.connect("127.0.0.1", ports[i % len(ports)], keepalive=2)
    except OSError:
        i += 1
        time.sleep(0.2)
        continue
    c.loop_start()
    lost.wait()
    c.loop_stop()
    i += 1
`

// pahoRetryingPublisher publishes count messages "<topic> <n>" at the QoS given,
// printing "acked <topic> <n>" once each is acknowledged (PUBACK, or PUBCOMP for QoS
// 2). When its connection is lost the same client (clean session off) reconnects to
// the next port, so paho resends what was in flight with its packet ids and the
// broker, resuming the session, completes each exchange once.
const pahoRetryingPublisher = `
import sys, time
import paho.mqtt.client as mqtt
ports = [int(p) for p in sys.argv[1].split(",")]
cid, topic, qos, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False, protocol=mqtt.MQTTv311)
c.max_inflight_messages_set(20)
c.reconnect_delay_set(0.1, 0.5)
names = {}
def on_publish(c, u, mid, rc=None, props=None):
    n = names.pop(mid, None)
    if n is not None:
        print("acked %s %d" % (topic, n), flush=True)
tries = [0]
def on_disconnect(c, u, flags, rc=None, props=None):
    # paho reconnects by itself, to the next node: the same client keeps what
    # it has in flight and resends it there.
    tries[0] += 1
    c._port = ports[tries[0] % len(ports)]
c.on_publish, c.on_disconnect = on_publish, on_disconnect
c.connect("127.0.0.1", ports[0], keepalive=2)
c.loop_start()
for n in range(count):
    info = c.publish(topic, "%s %d" % (topic, n), qos=qos)
    names[info.mid] = n
    time.sleep(0.005)
deadline = time.time() + 60
while names and time.time() < deadline:
    time.sleep(0.1)
c.loop_stop()
`

// pahoExpiringSession connects an MQTT 5 client with clean start off to the port
// given and prints "session_present=<flag>" from its CONNACK; with "subscribe"
// (session expiry 3 s) it then subscribes at QoS 1 and stays connected until its
// connection is lost, with "check" (session expiry 0, so that checking leaves no
// session) it disconnects.
const pahoExpiringSession = `
import sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
port, cid, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
done = threading.Event()
def on_connect(c, u, flags, rc, props=None):
    print("session_present=%s" % bool(flags.session_present), flush=True)
    if mode == "subscribe":
        c.subscribe("cl/brief", qos=1)
    else:
        c.disconnect()
def on_disconnect(c, u, flags, rc=None, props=None):
    done.set()
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
c.on_connect, c.on_disconnect = on_connect, on_disconnect
p = Properties(PacketTypes.CONNECT)
p.SessionExpiryInterval = 3 if mode == "subscribe" else 0  # a check leaves no session behind
c.connect("127.0.0.1", port, keepalive=2, clean_start=False, properties=p)
c.loop_start()
done.wait(120)
c.loop_stop()
`
