package server_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// routePort finds a free port whose next port (gossip, TCP and UDP) is free too.
func routePort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		g, gerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		u, uerr := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		l.Close()
		if gerr == nil {
			g.Close()
		}
		if uerr == nil {
			u.Close()
		}
		if gerr == nil && uerr == nil && p < 65535 {
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// startCluster runs n in-process servers on loopback joined into one cluster, every
// node given the same join list (the first node's cluster port).
func startCluster(t *testing.T, n int, mutate func(i int, c *server.Config)) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = routePort(t)
	}
	join := "127.0.0.1:" + strconv.Itoa(ports[0])
	var nodes []*server.Server
	for i := 0; i < n; i++ {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", t.TempDir(), -1
		cfg.MQTTPort, cfg.MQTTWSPort = 0, -1
		cfg.ServerName = fmt.Sprintf("n%d", i+1)
		cfg.ClusterPort, cfg.Join, cfg.ClusterName = ports[i], join, "test-"+t.Name()
		if mutate != nil {
			mutate(i, &cfg)
		}
		s, err := server.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
		nodes = append(nodes, s)
	}
	waitUntil(t, "a full mesh of routes", 15*time.Second, func() bool {
		for _, s := range nodes {
			if len(s.ClusterNode().Status().Routes) != n-1 {
				return false
			}
		}
		return true
	})
	return nodes
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// interestAt reports how many interest entries node s holds from node peer.
func interestAt(s *server.Server, peer string) int {
	for _, r := range s.ClusterNode().Status().Routes {
		if r.Node == peer {
			return r.Interest
		}
	}
	return -1
}

func connect(t *testing.T, s *server.Server) *tern.Conn {
	t.Helper()
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestClusterDeliversAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	c1, c2, c3 := connect(t, n1), connect(t, n2), connect(t, n3)

	// Broadcast with wildcards: one copy per subscription on every node.
	s2, err := c2.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	s3, err := c3.SubscribeSync("orders.*")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "interest at n1", 5*time.Second, func() bool { return interestAt(n1, "n2") >= 1 && interestAt(n1, "n3") >= 1 })
	if err := c1.PublishMsg(&tern.Msg{Subject: "orders.eu", Data: []byte("o1"), Header: tern.Header{"Trace": []string{"abc"}}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*tern.Subscription{s2, s3} {
		m, err := s.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != "o1" || m.Header.Get("Trace") != "abc" {
			t.Fatalf("got %q %v", m.Data, m.Header)
		}
		if extra, err := s.NextMsg(100 * time.Millisecond); err == nil {
			t.Fatalf("a second copy: %q", extra.Data)
		}
	}

	// A queue group spread over n2 and n3 gets each message once.
	var mu sync.Mutex
	got := map[string]int{}
	perNode := map[string]int{}
	for _, c := range []struct {
		name string
		nc   *tern.Conn
	}{{"n2", c2}, {"n3", c3}} {
		if _, err := c.nc.QueueSubscribe("jobs", "workers", func(m *tern.Msg) {
			mu.Lock()
			got[string(m.Data)]++
			perNode[c.name]++
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "group interest at n1", 5*time.Second, func() bool { return interestAt(n1, "n2") >= 2 && interestAt(n1, "n3") >= 2 })
	const jobs = 200
	for i := 0; i < jobs; i++ {
		if err := c1.Publish("jobs", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every job", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == jobs })
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	for k, n := range got {
		if n != 1 {
			t.Fatalf("job %s delivered %d times", k, n)
		}
	}
	if perNode["n2"] == 0 || perNode["n3"] == 0 {
		t.Fatalf("jobs per node %v: not spread", perNode)
	}
	mu.Unlock()

	// Request/reply across nodes, and no responders when nobody anywhere answers.
	if _, err := c3.Subscribe("svc.time", func(m *tern.Msg) { _ = m.Respond([]byte("now")) }); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "service interest at n1", 5*time.Second, func() bool { return interestAt(n1, "n3") >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := c1.Request(ctx, "svc.time", nil)
	if err != nil || string(rep.Data) != "now" {
		t.Fatalf("request across nodes: %v %v", rep, err)
	}
	if _, err := c1.Request(ctx, "svc.nobody", nil); err == nil || !strings.Contains(err.Error(), "no responders") {
		t.Fatalf("request without responders anywhere: %v", err)
	}
}

// TestClusterMQTTAndNative: an MQTT subscriber on one node gets what a native client
// publishes on another, under the topic mapping.
func TestClusterMQTTAndNative(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_sub"); err != nil {
		t.Fatal("mosquitto_sub not installed (scripts/deps.sh installs it)")
	}
	nodes := startCluster(t, 2, nil)
	addr := nodes[1].MQTTAddr().(*net.TCPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, "mosquitto_sub", "-h", "127.0.0.1", "-p", strconv.Itoa(addr.Port), "-t", "sensors/+/temp", "-C", "1", "-q", "1", "-V", "mqttv311")
	var out strings.Builder
	sub.Stdout = &out
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "MQTT interest at n1", 5*time.Second, func() bool { return interestAt(nodes[0], "n2") >= 1 })
	c1 := connect(t, nodes[0])
	if err := c1.Publish("sensors.k1.temp", []byte("21.5")); err != nil {
		t.Fatal(err)
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	if strings.TrimSpace(out.String()) != "21.5" {
		t.Fatalf("MQTT subscriber on n2 got %q", out.String())
	}
}

// TestClusterForgetsAStoppedNode: a node that leaves takes its interest with it.
func TestClusterForgetsAStoppedNode(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	c3 := connect(t, nodes[2])
	if _, err := c3.SubscribeSync("gone.soon"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "interest", 5*time.Second, func() bool { return interestAt(nodes[0], "n3") >= 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := nodes[2].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "n3 gone from n1", 5*time.Second, func() bool {
		st := nodes[0].ClusterNode().Status()
		for _, m := range st.Members {
			if m.Name == "n3" {
				return false
			}
		}
		return len(st.Routes) == 1
	})
	c1 := connect(t, nodes[0])
	if _, err := c1.Request(ctx, "gone.soon", nil); err == nil || !strings.Contains(err.Error(), "no responders") {
		t.Fatalf("a request to the stopped node's subject: %v, want no responders", err)
	}
}
