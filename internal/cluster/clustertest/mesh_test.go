package clustertest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/testenv"
)

// TestFiveNodeMesh starts five nodes, waits for the full mesh, and makes one
// delivery of each kind (plain, queue group, request/reply) across nodes with
// native clients over TCP and over UDP and with MQTT clients Tern did not write.
func TestFiveNodeMesh(t *testing.T) {
	for _, tool := range []string{"mosquitto_sub", "mosquitto_pub", "mosquitto_rr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	py := python(t)
	c := clustertest.Start(t, clustertest.Options{N: 5, UDP: true, MQTT: true})
	for _, n := range c.Nodes {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Members) != 5 || len(st.Routes) != 4 {
			t.Fatalf("%s: %d members, %d routes", n.Name, len(st.Members), len(st.Routes))
		}
	}
	nd := func(i int) *clustertest.Node { return c.Nodes[i-1] }

	// Each part starts when the clients of the one before are gone everywhere, so
	// that it can wait for exactly its own interest.
	quiet := func(t *testing.T) {
		clustertest.WaitFor(t, "no interest left on any route", 5*time.Second, func() bool {
			for _, n := range c.Nodes {
				st, err := n.Status()
				if err != nil {
					return false
				}
				for _, r := range st.Routes {
					if r.Interest != 0 {
						return false
					}
				}
			}
			return true
		})
	}
	native := func(t *testing.T, url func(*clustertest.Node) string, prefix string, pubN, subN, q1, q2, qPub, reqN, repN int) {
		quiet(t)
		conn := func(i int) *tern.Conn { return nd(i).Connect(t, url(nd(i))) }
		// Plain.
		subject := prefix + ".plain"
		base := interestFrom(nd(pubN), nd(subN).Name)
		sub, err := conn(subN).SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		waitInterest(t, nd(pubN), nd(subN), base+1)
		pub := conn(pubN)
		if err := pub.Publish(subject, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hello" {
			t.Fatalf("plain n%d→n%d: %v %v", pubN, subN, m, err)
		}

		// Queue group with members on two nodes, published from a third.
		subject = prefix + ".jobs"
		rec := newTally()
		b1, b2 := interestFrom(nd(qPub), nd(q1).Name), interestFrom(nd(qPub), nd(q2).Name)
		if _, err := conn(q1).QueueSubscribe(subject, "w", rec.handler("a")); err != nil {
			t.Fatal(err)
		}
		if _, err := conn(q2).QueueSubscribe(subject, "w", rec.handler("b")); err != nil {
			t.Fatal(err)
		}
		waitInterest(t, nd(qPub), nd(q1), b1+1)
		waitInterest(t, nd(qPub), nd(q2), b2+1)
		qp := conn(qPub)
		const jobs = 20
		buf := make([]byte, 16)
		for i := uint64(0); i < jobs; i++ {
			if err := qp.Publish(subject, seqMsg(i, buf)); err != nil {
				t.Fatal(err)
			}
		}
		clustertest.WaitFor(t, "every job", 5*time.Second, func() bool {
			return rec.count("a")+rec.count("b") >= jobs
		})
		time.Sleep(50 * time.Millisecond)
		if d := rec.dupes("a", "b"); len(d) > 0 || rec.count("a")+rec.count("b") != jobs {
			t.Fatalf("queue group n%d→{n%d,n%d}: dupes %v, %d+%d of %d", qPub, q1, q2, d, rec.count("a"), rec.count("b"), jobs)
		}

		// Request/reply.
		subject = prefix + ".svc"
		base = interestFrom(nd(reqN), nd(repN).Name)
		rep := conn(repN)
		if _, err := rep.Subscribe(subject, func(m *tern.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) }); err != nil {
			t.Fatal(err)
		}
		waitInterest(t, nd(reqN), nd(repN), base+1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := conn(reqN).Request(ctx, subject, []byte("q"))
		if err != nil || string(r.Data) != "re:q" {
			t.Fatalf("request n%d→n%d: %v %v", reqN, repN, r, err)
		}
		t.Logf("plain n%d→n%d, queue group n%d→{n%d,n%d} (%d/%d), request n%d→n%d", pubN, subN, qPub, q1, q2,
			rec.count("a"), rec.count("b"), reqN, repN)
	}
	t.Run("TCP", func(t *testing.T) {
		native(t, (*clustertest.Node).URL, "mesh.tcp", 1, 2, 3, 4, 5, 1, 5)
	})
	t.Run("UDP", func(t *testing.T) {
		native(t, (*clustertest.Node).UDPURL, "mesh.udp", 2, 3, 1, 5, 4, 4, 2)
	})
	t.Run("MQTT", func(t *testing.T) {
		quiet(t)
		port := func(i int) string { return strconv.Itoa(nd(i).MQTTPort) }
		// Plain: mosquitto_sub on n4, mosquitto_pub on n1.
		base := interestFrom(nd(1), "n4")
		plain := startLines(t, "mosquitto_sub", "-h", "127.0.0.1", "-p", port(4), "-t", "mesh/mqtt/plain", "-q", "1", "-V", "mqttv311")
		waitInterest(t, nd(1), nd(4), base+1)
		runTool(t, "mosquitto_pub", "-h", "127.0.0.1", "-p", port(1), "-t", "mesh/mqtt/plain", "-m", "hello", "-q", "1")
		if got := plain.next(t, 5*time.Second); got != "hello" {
			t.Fatalf("plain n1→n4 over MQTT: %q", got)
		}

		// Shared subscription members on n2 and n3, ten messages from n5.
		b2, b3 := interestFrom(nd(5), "n2"), interestFrom(nd(5), "n3")
		sa := startLines(t, "mosquitto_sub", "-h", "127.0.0.1", "-p", port(2), "-t", "$share/w/mesh/mqtt/jobs", "-q", "1", "-V", "mqttv5")
		sb := startLines(t, "mosquitto_sub", "-h", "127.0.0.1", "-p", port(3), "-t", "$share/w/mesh/mqtt/jobs", "-q", "1", "-V", "mqttv5")
		waitInterest(t, nd(5), nd(2), b2+1)
		waitInterest(t, nd(5), nd(3), b3+1)
		const jobs = 10
		var lines []string
		for i := 0; i < jobs; i++ {
			lines = append(lines, "job"+strconv.Itoa(i))
		}
		runToolStdin(t, strings.Join(lines, "\n")+"\n", "mosquitto_pub", "-h", "127.0.0.1", "-p", port(5), "-t", "mesh/mqtt/jobs", "-q", "1", "-l")
		got := map[string]int{}
		per := map[string]int{}
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < jobs && time.Now().Before(deadline) {
			for name, p := range map[string]*lineProc{"n2": sa, "n3": sb} {
				if l, ok := p.poll(); ok {
					got[l]++
					per[name]++
				}
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		for name, p := range map[string]*lineProc{"n2": sa, "n3": sb} {
			for l, ok := p.poll(); ok; l, ok = p.poll() {
				got[l]++
				per[name]++
			}
		}
		for _, l := range lines {
			if got[l] != 1 {
				t.Fatalf("shared subscription n5→{n2,n3}: %s delivered %d times (all: %v)", l, got[l], got)
			}
		}

		// Request/reply: mosquitto_rr (MQTT 5 response topic and correlation data)
		// on n1, a paho responder on n3.
		base = interestFrom(nd(1), "n3")
		responder := startLines(t, py, "-c", pahoResponder, port(3))
		if l := responder.next(t, 10*time.Second); l != "ready" {
			t.Fatalf("paho responder: %q", l)
		}
		waitInterest(t, nd(1), nd(3), base+1)
		out := runTool(t, "mosquitto_rr", "-h", "127.0.0.1", "-p", port(1), "-t", "mesh/mqtt/svc", "-e", "mesh/mqtt/reply/1", "-m", "q", "-W", "5")
		if strings.TrimSpace(out) != "re:q" {
			t.Fatalf("MQTT request n1→n3: %q", out)
		}
		t.Logf("plain n1→n4, shared subscription n5→{n2,n3} (%d/%d), request n1→n3", per["n2"], per["n3"])
	})
}

// pahoResponder answers each request on mesh/mqtt/svc at its response topic with
// its correlation data.
const pahoResponder = `
import sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
ready = threading.Event()
def on_subscribe(c, ud, mid, rcs, props):
    print("ready", flush=True)
def on_message(c, ud, m):
    p = Properties(PacketTypes.PUBLISH)
    if getattr(m.properties, "CorrelationData", None) is not None:
        p.CorrelationData = m.properties.CorrelationData
    c.publish(m.properties.ResponseTopic, b"re:" + m.payload, qos=1, properties=p)
def on_connect(c, ud, flags, rc, props):
    c.subscribe("mesh/mqtt/svc", qos=1)
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="responder", protocol=mqtt.MQTTv5)
c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
c.connect("127.0.0.1", int(sys.argv[1]))
c.loop_forever()
`

// waitInterest waits until node at holds at least k interest entries from node from.
func waitInterest(t *testing.T, at, from *clustertest.Node, k int) {
	t.Helper()
	clustertest.WaitFor(t, fmt.Sprintf("%d interest entries from %s at %s", k, from.Name, at.Name), 5*time.Second,
		func() bool { return interestFrom(at, from.Name) >= k })
}

// lineProc is a child process whose standard output is read line by line.
type lineProc struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
	cmd   *exec.Cmd
}

func startLines(t *testing.T, name string, args ...string) *lineProc {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &lineProc{cmd: cmd, added: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.added <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	return p
}

// poll takes the next line if one has arrived.
func (p *lineProc) poll() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return "", false
	}
	l := p.lines[0]
	p.lines = p.lines[1:]
	return l, true
}

// next waits up to limit for the next line.
func (p *lineProc) next(t *testing.T, limit time.Duration) string {
	t.Helper()
	deadline := time.After(limit)
	for {
		if l, ok := p.poll(); ok {
			return l
		}
		select {
		case <-p.added:
		case <-deadline:
			t.Fatalf("%s: no output within %v", p.cmd.Path, limit)
		}
	}
}

// runTool runs a command to completion within 10 s and returns its output.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	return runToolStdin(t, "", name, args...)
}

func runToolStdin(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", name, err, out)
	}
	return string(out)
}

// python returns the interpreter of the project's virtual environment, which has
// paho-mqtt (scripts/deps.sh).
func python(t *testing.T) string { return testenv.Python(t, "paho-mqtt") }
