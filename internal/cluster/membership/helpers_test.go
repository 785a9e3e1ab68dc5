package membership

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain fails the package when goroutines outlive the tests: every test must stop
// exactly what it started.
func TestMain(m *testing.M) {
	flag.Parse()
	before := runtime.NumGoroutine()
	code := m.Run()
	// The fuzzing engine keeps goroutines of its own.
	fuzzing := flag.Lookup("test.fuzz").Value.String() != "" || flag.Lookup("test.fuzzworker").Value.String() == "true"
	if code == 0 && !fuzzing {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "%d goroutines left running (%d at start):\n%s\n", n, before, buf)
			code = 1
		}
	}
	os.Exit(code)
}

// logBuf collects one test's log lines; they are printed only if the test fails.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cluster is one test's set of nodes and their logs.
type cluster struct {
	t    *testing.T
	logs *logBuf
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, logs: &logBuf{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", c.logs.String())
		}
	})
	return c
}

// config is a node on 127.0.0.1 with fast failure detection: a probe every 100ms
// and a suspicion of 400ms, so a vanished node is declared dead in about a second.
func (c *cluster) config(name string, join ...string) Config {
	return Config{
		NodeName:       name,
		ClusterName:    "test",
		BindAddr:       "127.0.0.1",
		Join:           join,
		JoinGossip:     true,
		RouteAddr:      "127.0.0.1:7401",
		Version:        "1.2.3",
		Tags:           map[string]string{"zone": "z1"},
		ProbeInterval:  100 * time.Millisecond,
		ProbeTimeout:   50 * time.Millisecond,
		SuspicionMult:  4,
		GossipInterval: 50 * time.Millisecond,
		RejoinInterval: 50 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("n", name),
	}
}

// start starts a node and shuts it down when the test ends.
func (c *cluster) start(cfg Config) *Membership {
	c.t.Helper()
	m, err := Start(cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.NodeName, err)
	}
	c.t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

func names(ns []Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

// waitMembers waits until every node sees exactly the named members.
func waitMembers(t *testing.T, timeout time.Duration, want []string, ms ...*Membership) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		var got []string
		for _, m := range ms {
			got = names(m.Members())
			if !slices.Equal(got, want) {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after %v: %v, want %v", timeout, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEvent reads m's events until one matches, failing after timeout. Events that
// do not match are returned too, for tests that check nothing else happened.
func waitEvent(t *testing.T, m *Membership, timeout time.Duration, match func(Event) bool) (Event, []Event) {
	t.Helper()
	var skipped []Event
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed; skipped %v", skipped)
			}
			if match(ev) {
				return ev, skipped
			}
			skipped = append(skipped, ev)
		case <-timer.C:
			t.Fatalf("no matching event within %v; saw %v", timeout, skipped)
		}
	}
}

func is(kind EventKind, name string) func(Event) bool {
	return func(ev Event) bool { return ev.Kind == kind && ev.Node.Name == name }
}

// drain returns the events that arrive on m within d.
func drain(m *Membership, d time.Duration) []Event {
	var out []Event
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timer.C:
			return out
		}
	}
}

// freePort returns a port that is free for TCP and UDP on every given IP right now.
func freePort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			tl, err := net.Listen("tcp", addr)
			if err != nil {
				ok = false
				break
			}
			ul, err := net.ListenPacket("udp", addr)
			tl.Close()
			if err != nil {
				ok = false
				break
			}
			ul.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatalf("no port free on %v", ips)
	return 0
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func countLines(s, substr string) int {
	n := 0
	for line := range strings.Lines(s) {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}
