// Package jstest starts a nats-server with JetStream for tests: on a free loopback
// port, with its store in a temporary directory, stopped when the test ends.
package jstest

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tern-mq/tern/bench/internal/monitoring"
	"github.com/tern-mq/tern/bench/internal/refserver"
)

// Server is a running nats-server.
type Server struct {
	URL     string
	Pid     int
	Dir     string // the JetStream store directory
	Monitor string // the monitoring base URL; set by StartCluster only
}

// Start starts nats-server -js on a free port and waits until it accepts connections
// with JetStream enabled. The test fails if the project's nats-server is not installed
// (scripts/deps.sh installs it; see refserver.NATSServer). The server is killed and its
// store removed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	port, dir := freePort(t), t.TempDir()
	cmd, log, exited := run(t, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	s := &Server{URL: "nats://127.0.0.1:" + strconv.Itoa(port), Pid: cmd.Process.Pid, Dir: dir}
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(s.URL, nats.NoReconnect())
		if err == nil {
			// JetStream may start a moment after the client port opens.
			_, err = nc.Request("$JS.API.INFO", nil, time.Second)
			nc.Close()
			if err == nil {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("nats-server exited during start-up:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server -js did not come up on %s: %v", s.URL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartCluster starts n nats-server -js nodes named js1..jsn on free loopback
// ports, routed to each other; WaitJetStream waits for them. The servers are
// killed and their stores removed when the test ends.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	ports := make([]int, 3*n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []string
	for i := range n {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[n+i]))
	}
	servers := make([]*Server, n)
	for i := range n {
		dir := t.TempDir()
		cmd, _, _ := run(t, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(ports[i]),
			"-m", strconv.Itoa(ports[2*n+i]),
			"-n", "js"+strconv.Itoa(i+1), "--cluster_name", "r3", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		servers[i] = &Server{URL: "nats://127.0.0.1:" + strconv.Itoa(ports[i]), Pid: cmd.Process.Pid, Dir: dir,
			Monitor: "http://127.0.0.1:" + strconv.Itoa(ports[2*n+i])}
	}
	return servers
}

// WaitJetStream waits until every server answers JetStream's account info, which
// needs a meta leader, and, for a cluster, until the meta leader sees every other
// server as current: before that, placing an R3 stream can fail with "peer
// offline".
func WaitJetStream(t testing.TB, servers []*Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var bases []string
	for _, s := range servers {
		if s.Monitor != "" {
			bases = append(bases, s.Monitor)
		}
		for {
			nc, err := nats.Connect(s.URL, nats.NoReconnect())
			if err == nil {
				var msg *nats.Msg
				msg, err = nc.Request("$JS.API.INFO", nil, time.Second)
				nc.Close()
				if err == nil && !bytes.Contains(msg.Data, []byte(`"error"`)) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("JetStream on %s not ready: %v", s.URL, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(servers) > 1 && len(bases) == len(servers) {
		if err := monitoring.WaitJetStreamMeta(context.Background(), bases, time.Until(deadline)); err != nil {
			t.Fatalf("JetStream meta group: %v", err)
		}
	}
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts the project's nats-server with args; it is killed when the test
// ends, and its output logged if the test failed. exited is closed once it has
// exited.
func run(t testing.TB, args ...string) (cmd *exec.Cmd, log *bytes.Buffer, exited <-chan struct{}) {
	t.Helper()
	cmd = exec.Command(refserver.NATSServer(t), args...)
	log = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("nats-server %v:\n%s", args, log.String())
		}
	})
	return cmd, log, done
}
