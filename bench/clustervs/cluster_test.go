package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/clustertest"
	"github.com/tern-mq/tern/bench/internal/refserver"
)

// TestTernCluster runs mesh, interest and recovery against an in-process 3-node
// Tern cluster; the victim is shut down rather than killed (it is this process).
func TestTernCluster(t *testing.T) {
	c := clustertest.StartTern(t, 3)
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	mon := strings.Join(c.Monitors(), ",")
	if err := run(ctx, []string{"mesh", "--system", "tern", "--monitor", mon}, &stdout, &stderr); err != nil {
		t.Fatalf("mesh: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Tern: 3 nodes fully meshed (n1, n2, n3)") {
		t.Fatalf("mesh said %q", stdout.String())
	}

	ires, err := runInterest(ctx, kinds["tern"], interestConfig{URLs: c.URLs(), Monitors: c.Monitors(), Subs: 3000, Workers: 16,
		Settle: 10 * time.Millisecond, Timeout: time.Minute, Poll: 5 * time.Millisecond})
	if err != nil || ires.Error != "" {
		t.Fatalf("interest: %v %+v", err, ires)
	}
	if ires.AllSeenMs <= 0 || ires.SubscribedMs <= 0 || len(ires.PerNode) != 3 || ires.PerNode[2].SeenMs <= 0 {
		t.Fatalf("interest: %+v", ires)
	}

	victim := c.Nodes[2]
	rres, err := runRecovery(ctx, kinds["tern"], recoveryConfig{URLs: c.URLs(), Monitors: c.Monitors(), Victim: 2, Rate: 1000,
		ReconnectWait: time.Millisecond, Settle: 100 * time.Millisecond, Timeout: 20 * time.Second, Poll: 5 * time.Millisecond,
		Kill: func() error { go c.Stop(victim); return nil }})
	if err != nil || rres.Error != "" {
		t.Fatalf("recovery: %v %+v", err, rres)
	}
	checkRecovery(t, rres, "n3", c.URLs()[1])
	if rres.MemberGoneMs <= 0 {
		t.Fatalf("no membership figure: %+v", rres)
	}
}

func checkRecovery(t *testing.T, r recoveryResult, victim, movedTo string) {
	t.Helper()
	if r.Victim != victim || r.ResumedMs <= 0 || r.ReconnectedMs <= 0 || r.ResumedMs < r.ReconnectedMs || r.RoutesGoneMs <= 0 {
		t.Fatalf("recovery: %+v", r)
	}
	if hostPort(r.ReconnectedTo) != hostPort(movedTo) {
		t.Fatalf("the subscriber moved to %s, want node 2 (%s)", r.ReconnectedTo, movedTo)
	}
}

// freePorts returns n free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// TestNATSCluster runs mesh, interest and recovery (a real kill -9) against a
// 3-node cluster of the pinned nats-server.
func TestNATSCluster(t *testing.T) {
	bin := refserver.NATSServer(t)
	dir := t.TempDir()
	ports := freePorts(t, 9) // client, cluster, http per node
	var routes, urls, monitors []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+1]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[3*i]))
		monitors = append(monitors, fmt.Sprintf("http://127.0.0.1:%d", ports[3*i+2]))
	}
	var cmds []*exec.Cmd
	var pids []string
	for i := range 3 {
		conf := fmt.Sprintf("server_name: nt%d\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\ncluster {\n  name: bench-test\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n",
			i+1, ports[3*i], ports[3*i+2], ports[3*i+1], strings.Join(routes, ", "))
		path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i+1))
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		})
		cmds = append(cmds, cmd)
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
	}
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"mesh", "--system", "nats", "--monitor", strings.Join(monitors, ",")}, &stdout, &stderr); err != nil {
		t.Fatalf("mesh: %v\n%s", err, stderr.String())
	}

	out := filepath.Join(dir, "interest.jsonl")
	args := []string{"interest", "--system", "nats", "--urls", strings.Join(urls, ","), "--monitor", strings.Join(monitors, ","),
		"--pids", strings.Join(pids, ","), "--subs", "3000", "--settle", "10ms", "--quiet-wait", "0", "--out", out}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("interest: %v\n%s", err, stderr.String())
	}
	recs, err := readRecords(out)
	if err != nil || len(recs) != 1 || recs[0]["error"] != nil || recs[0]["all_seen_ms"].(float64) <= 0 || recs[0]["peer_bytes_per_entry"] == nil {
		t.Fatalf("interest record: %v %v", recs, err)
	}

	out = filepath.Join(dir, "recovery.jsonl")
	args = []string{"recovery", "--system", "nats", "--urls", strings.Join(urls, ","), "--monitor", strings.Join(monitors, ","),
		"--kill-pid", pids[2], "--rate", "1000", "--settle", "100ms", "--quiet-wait", "0", "--out", out}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("recovery: %v\n%s", err, stderr.String())
	}
	_ = cmds[2].Wait()
	recs, err = readRecords(out)
	if err != nil || len(recs) != 1 {
		t.Fatalf("recovery records: %v %v", recs, err)
	}
	sec := summarize(recs, recoveryMetrics)
	s := sec.Systems["nats"]
	if s == nil || len(s.Failed) != 0 || s.Metrics["resumed_ms"].Median <= 0 || s.Metrics["routes_gone_ms"].Median <= 0 || s.Details["victim"] != "nt3" {
		t.Fatalf("recovery summary: %+v\n%s", s, stderr.String())
	}
	if to := s.Details["reconnected_to"].(string); hostPort(to) != hostPort(urls[1]) {
		t.Fatalf("the subscriber moved to %s, want node 2 (%s)", to, urls[1])
	}
}
