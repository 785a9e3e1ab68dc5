package mqtt_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv"
)

// These helpers drive MQTT clients Tern did not write: mosquitto_pub and mosquitto_sub
// from Debian and paho-mqtt from PyPI (in the project's .venv), all installed by
// scripts/deps.sh.

// startTern runs a server with its MQTT listener on a free loopback port.
func startTern(t *testing.T, mutate func(*server.Config)) (*server.Server, string) {
	t.Helper()
	s := servertest.Start(t, mutate)
	baselines.Store(s, s.Broker().Count())
	return s, strconv.Itoa(s.MQTTAddr().(*net.TCPAddr).Port)
}

// baselines holds each test server's own subscriptions (the stream API's) so that
// waitSubs counts only the clients'.
var baselines sync.Map

type proc struct {
	cmd    *exec.Cmd
	out    testenv.Buffer
	errOut testenv.Buffer
	done   chan error
}

// startProc runs a client in the background; it is killed when the test ends.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return runProc(t, exec.Command(name, args...))
}

func runProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v (run scripts/deps.sh to install the MQTT test clients)", cmd.Path, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

// wait waits for the process to exit and returns its output.
func (p *proc) wait(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", p.cmd.Path, err, p.out.String(), p.errOut.String())
		}
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v\nstdout: %s\nstderr: %s", p.cmd.Path, timeout, p.out.String(), p.errOut.String())
	}
	return p.out.String()
}

// mosqSub starts mosquitto_sub against port; args add topics, QoS, counts.
func mosqSub(t *testing.T, port string, args ...string) *proc {
	t.Helper()
	return startProc(t, "mosquitto_sub", append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
}

// mosqPub runs mosquitto_pub to completion.
func mosqPub(t *testing.T, port string, args ...string) {
	t.Helper()
	p := startProc(t, "mosquitto_pub", append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
	p.wait(t, 20*time.Second)
}

// clientSubs counts the subscriptions clients hold.
func clientSubs(s *server.Server) int {
	base, _ := baselines.Load(s)
	return s.Broker().Count() - base.(int)
}

// waitSubs waits until clients hold at least n subscriptions in the broker.
func waitSubs(t *testing.T, s *server.Server, n int) {
	t.Helper()
	base, _ := baselines.Load(s)
	n += base.(int)
	deadline := time.Now().Add(10 * time.Second)
	for s.Broker().Count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("broker has %d subscriptions, want %d", s.Broker().Count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// python returns the interpreter of the project's virtual environment.
func python(t *testing.T) string { return testenv.Python(t, "paho-mqtt") }

// runPaho runs a Python script using paho-mqtt with PORT in its environment and
// returns its standard output; a failing script fails the test.
func runPaho(t *testing.T, port, script string, timeout time.Duration, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python(t), "-c", pahoPrelude+script)
	cmd.Env = append(append(os.Environ(), "PORT="+port), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("paho script: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	return out.String()
}

// startPaho runs a paho script in the background.
func startPaho(t *testing.T, port, script string) *proc {
	t.Helper()
	cmd := exec.Command(python(t), "-c", pahoPrelude+script)
	cmd.Env = append(os.Environ(), "PORT="+port)
	return runProc(t, cmd)
}

// pahoPrelude gives scripts a connected-client helper and a queue of received
// messages.
const pahoPrelude = `
import os, sys, time, json, queue, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
PORT = int(os.environ["PORT"])

def client(cid, v5=False, clean=True, expiry=None, will=None, props=None, keepalive=30, user=None, password=None):
    proto = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
    kw = {} if v5 else {"clean_session": clean}
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=proto, **kw)
    c.msgs = queue.Queue()
    c.connected = threading.Event()
    c.connack = {}
    def on_connect(cl, ud, flags, rc, properties):
        c.connack["present"] = flags.session_present
        c.connack["rc"] = rc.value if hasattr(rc, "value") else int(rc)
        c.connack["props"] = properties
        c.connected.set()
    def on_message(cl, ud, m):
        c.msgs.put(m)
    c.on_connect = on_connect
    c.on_message = on_message
    if will:
        c.will_set(*will)
    if user is not None:
        c.username_pw_set(user, password)
    cp = None
    if v5:
        cp = props or Properties(PacketTypes.CONNECT)
        if expiry is not None:
            cp.SessionExpiryInterval = expiry
        c.connect("127.0.0.1", PORT, keepalive=keepalive, clean_start=clean, properties=cp)
    else:
        c.connect("127.0.0.1", PORT, keepalive=keepalive)
    c.loop_start()
    if not c.connected.wait(10):
        sys.exit("no CONNACK")
    return c

def take(c, n, timeout=10):
    out = []
    deadline = time.time() + timeout
    while len(out) < n:
        left = deadline - time.time()
        if left <= 0:
            break
        try:
            out.append(c.msgs.get(timeout=left))
        except queue.Empty:
            break
    return out

def none_within(c, secs):
    try:
        m = c.msgs.get(timeout=secs)
        return m
    except queue.Empty:
        return None

def emit(**kw):
    print(json.dumps(kw), flush=True)
`

// lines splits output into non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
