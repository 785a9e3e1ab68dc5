package clustertest_test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// TestMQTTNemesis is the nemesis of MQTT on a cluster that replicates MQTT state.
// Each round starts 3 nodes (odd seeds) or 5 (even seeds) as TestNemesis does,
// each in a network namespace of its own with an MQTT listener, and runs paho-mqtt
// clients, each inside one node's namespace (a cut that isolates the node isolates
// its clients too), every one with a persistent session that moves to the next
// node when its connection is lost:
//
//   - a subscriber of nem/# at QoS 2;
//   - a QoS 1 publisher and a QoS 2 publisher, on two other nodes;
//
// while the nemesis injects TestNemesis's faults one after another (kill -9,
// SIGSTOP, cuts, splits). Then the publishers stop and finish what they have in
// flight, and the round checks that every QoS 1 message a publisher got its
// PUBACK for reached the subscriber, every QoS 2 message it got its PUBCOMP for
// reached it exactly once, one without a PUBCOMP at most once, nothing reached it
// that was not published, and no two nodes led one Raft group in one term.
//
// The suite runs seeds 1 and 2; TERN_CLUSTER_SEEDS and TERN_NEMESIS_FAULTS as for
// TestNemesis (make nemesis). Needs root (TERN_NO_NETNS=1 skips it).
func TestMQTTNemesis(t *testing.T) {
	skipWithoutNetns(t)
	py := python(t)
	for seed := uint64(1); seed <= twinSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { mqttNemesisRound(t, py, seed) })
	}
}

// mqttNemesisClient is one paho-mqtt client of the nemesis. Its hosts are tried
// in turn, the first (its home node) first, moving on whenever a connection is
// lost or cannot be made; its session is persistent (clean session off), so a
// publisher's messages in flight are sent again with their packet ids wherever it
// reconnects, and the subscriber's session keeps what is published meanwhile.
// The subscriber prints "subscribed" once and, for each message until the stop
// file exists, "msg <payload>" and "via <payload>|<how it came>" (packet id, DUP,
// time, node), shown for a message delivered more than once. A publisher sends "<topic> <n>" for n = 0, 1, ...
// every 5 ms, printing "acked <n>" at each PUBACK (QoS 1) or PUBCOMP (QoS 2),
// until the stop file exists; it then waits up to a minute for what is in
// flight and prints "done <count published>".
const mqttNemesisClient = `
import os, sys, time
import paho.mqtt.client as mqtt
mode, cid, topic, qos, stop = sys.argv[1], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
hosts = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[2].split(","))]
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False, protocol=mqtt.MQTTv311)
c.max_inflight_messages_set(20)
c.reconnect_delay_set(0.1, 0.5)
tries = [0]
def move(*args):
    tries[0] += 1
    c._host, c._port = hosts[tries[0] % len(hosts)]
c.on_disconnect, c.on_connect_fail = move, move
names, subscribed = {}, [False]
def on_connect(c, u, flags, rc, props=None):
    if mode == "sub" and not rc.is_failure:
        c.subscribe(topic, qos=qos)
def on_subscribe(c, u, mid, rcs, props=None):
    if not subscribed[0]:
        subscribed[0] = True
        print("subscribed", flush=True)
def on_message(c, u, m):
    print("msg %s" % m.payload.decode(), flush=True)
    print("via %s|packet id %d, dup %d, at %.3f from %s" % (m.payload.decode(), m.mid, m.dup, time.time(), c._host), flush=True)
def on_publish(c, u, mid, rc=None, props=None):
    n = names.pop(mid, None)
    if n is not None:
        print("acked %d" % n, flush=True)
c.on_connect, c.on_subscribe, c.on_message, c.on_publish = on_connect, on_subscribe, on_message, on_publish
c.connect_async(hosts[0][0], hosts[0][1], keepalive=2)
c.loop_start()
n = 0
while not os.path.exists(stop):
    if mode == "pub" and n < 30000:
        info = c.publish(topic, "%s %d" % (topic, n), qos=qos)
        names[info.mid] = n
        n += 1
    time.sleep(0.005)
if mode == "pub":
    deadline = time.time() + 60
    while names and time.time() < deadline:
        time.sleep(0.05)
    print("done %d" % n, flush=True)
c.disconnect()
c.loop_stop()
`

// mqttNemWorkload is what the clients printed.
type mqttNemWorkload struct {
	sub, pub1, pub2 *lineProc
	subscribed      bool
	got             map[string]int      // payload → times the subscriber got it
	via             map[string][]string // payload → how each delivery came (packet id, DUP, time, node)
	acked           [3]map[int]bool
	done            [3]int // messages published, by QoS; -1 until the publisher is done
}

// drain takes every line the clients printed so far.
func (w *mqttNemWorkload) drain(t *testing.T) {
	t.Helper()
	for {
		l, ok := w.sub.poll()
		if !ok {
			break
		}
		if m, ok := strings.CutPrefix(l, "msg "); ok {
			w.got[m]++
		} else if v, ok := strings.CutPrefix(l, "via "); ok {
			m, how, _ := strings.Cut(v, "|")
			w.via[m] = append(w.via[m], how)
		} else if l == "subscribed" {
			w.subscribed = true
		} else {
			t.Errorf("subscriber: %q", l)
		}
	}
	for qos, p := range map[int]*lineProc{1: w.pub1, 2: w.pub2} {
		for p != nil {
			l, ok := p.poll()
			if !ok {
				break
			}
			var n int
			if _, err := fmt.Sscanf(l, "acked %d", &n); err == nil {
				w.acked[qos][n] = true
			} else if _, err := fmt.Sscanf(l, "done %d", &n); err == nil {
				w.done[qos] = n
			} else {
				t.Errorf("QoS %d publisher: %q", qos, l)
			}
		}
	}
}

func (w *mqttNemWorkload) progress() string {
	return fmt.Sprintf("%d QoS 1 and %d QoS 2 messages acknowledged, %d received", len(w.acked[1]), len(w.acked[2]),
		len(w.got))
}

// missing is how many acknowledged messages the subscriber has not got yet.
func (w *mqttNemWorkload) missing() int {
	n := 0
	for qos := 1; qos <= 2; qos++ {
		for i := range w.acked[qos] {
			if w.got[fmt.Sprintf("nem/q%d %d", qos, i)] == 0 {
				n++
			}
		}
	}
	return n
}

func mqttNemesisRound(t *testing.T, py string, seed uint64) {
	r := startNemesis(t, seed, func(o *clustertest.Options) { o.MQTT = true })
	c, nodes := r.c, len(r.c.Nodes)
	waitCatalogue(c)
	dir := t.TempDir()
	stopPub, stopSub := filepath.Join(dir, "stop-publishers"), filepath.Join(dir, "stop-subscriber")
	start := func(home int, args ...string) *lineProc {
		var hosts []string
		for i := range nodes {
			n := c.Nodes[(home+i)%nodes]
			hosts = append(hosts, net.JoinHostPort(n.Host, strconv.Itoa(n.MQTTPort)))
		}
		args = append([]string{"netns", "exec", c.Nodes[home].NS, py, "-c", mqttNemesisClient, args[0],
			strings.Join(hosts, ",")}, args[1:]...)
		return startLines(t, "ip", args...)
	}
	w := &mqttNemWorkload{got: map[string]int{}, via: map[string][]string{}, acked: [3]map[int]bool{nil, {}, {}}, done: [3]int{-1, -1, -1}}
	w.sub = start(2, "sub", "nem-sub", "nem/#", "2", stopSub)
	c.WaitFor("the subscriber's SUBACK", 30*time.Second, func() bool {
		w.drain(t)
		return w.subscribed
	})
	w.pub1 = start(1, "pub", "nem-pub1", "nem/q1", "1", stopPub)
	w.pub2 = start(0, "pub", "nem-pub2", "nem/q2", "2", stopPub)
	r.whole.Store(int64(r.since()))

	r.injectFaults(seed, func() string {
		w.drain(t)
		return w.progress()
	})
	time.Sleep(500 * time.Millisecond) // a little more traffic on the healed cluster
	if err := os.WriteFile(stopPub, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the publishers to finish what they have in flight", 90*time.Second, func() bool {
		w.drain(t)
		return w.done[1] >= 0 && w.done[2] >= 0
	})
	deadline := time.Now().Add(60 * time.Second)
	for w.drain(t); w.missing() > 0; w.drain(t) {
		if time.Now().After(deadline) {
			break // the check below names them
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // for a duplicate on its way
	w.drain(t)
	if err := os.WriteFile(stopSub, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.logf("the workload is done: %d QoS 1 and %d QoS 2 messages published; %s", w.done[1], w.done[2], w.progress())
	if err := checkMQTTDelivered(w.done, w.acked, w.got); err != nil {
		t.Error(err)
		shown := 0
		for _, m := range slices.Sorted(maps.Keys(w.via)) {
			if len(w.via[m]) > 1 && strings.HasPrefix(m, "nem/q2 ") && shown < 5 {
				shown++
				t.Logf("%s delivered %d times: %s", m, len(w.via[m]), strings.Join(w.via[m], "; "))
			}
		}
	}
	r.checkLeaders()
}

// checkMQTTDelivered checks what the subscriber got ("nem/q<qos> <n>" → times)
// against what the publishers were told: each acknowledged QoS 1 message at least
// once, each acknowledged QoS 2 message exactly once, any other QoS 2 message at
// most once, and nothing that was not published (n below the publisher's count).
func checkMQTTDelivered(published [3]int, acked [3]map[int]bool, got map[string]int) error {
	var errs []string
	for qos := 1; qos <= 2; qos++ {
		for n := range acked[qos] {
			k := got[fmt.Sprintf("nem/q%d %d", qos, n)]
			if k == 0 || (qos == 2 && k != 1) {
				errs = append(errs, fmt.Sprintf("QoS %d message %d acknowledged, received %d times", qos, n, k))
			}
		}
	}
	for m, k := range got {
		var qos, n int
		if _, err := fmt.Sscanf(m, "nem/q%d %d", &qos, &n); err != nil || qos < 1 || qos > 2 || n < 0 ||
			n >= published[qos] || fmt.Sprintf("nem/q%d %d", qos, n) != m {
			errs = append(errs, fmt.Sprintf("received %q, which was never published", m))
			continue
		}
		if qos == 2 && k > 1 && !acked[2][n] {
			errs = append(errs, fmt.Sprintf("QoS 2 message %d received %d times", n, k))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Sprintf("and %d more", len(errs)-10))
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

// TestMQTTDeliveredCheck: checkMQTTDelivered passes a good history and fails each
// kind of bad one.
func TestMQTTDeliveredCheck(t *testing.T) {
	published := [3]int{-1, 3, 3}
	acked := func() [3]map[int]bool { return [3]map[int]bool{nil, {0: true, 1: true}, {0: true, 2: true}} }
	good := func() map[string]int {
		return map[string]int{"nem/q1 0": 1, "nem/q1 1": 2, "nem/q1 2": 1, "nem/q2 0": 1, "nem/q2 1": 1, "nem/q2 2": 1}
	}
	if err := checkMQTTDelivered(published, acked(), good()); err != nil {
		t.Fatalf("a good history: %v", err)
	}
	for name, change := range map[string]func(got map[string]int){
		"QoS 1 lost":          func(got map[string]int) { delete(got, "nem/q1 1") },
		"QoS 2 lost":          func(got map[string]int) { delete(got, "nem/q2 2") },
		"QoS 2 twice":         func(got map[string]int) { got["nem/q2 0"] = 2 },
		"unacked QoS 2 twice": func(got map[string]int) { got["nem/q2 1"] = 2 },
		"never published":     func(got map[string]int) { got["nem/q1 3"] = 1 },
		"another topic":       func(got map[string]int) { got["nem/q3 0"] = 1 },
		"garbled":             func(got map[string]int) { got["nem/q1 01"] = 1 },
	} {
		got := good()
		change(got)
		if err := checkMQTTDelivered(published, acked(), got); err == nil {
			t.Errorf("%s: passed the check", name)
		}
	}
}
