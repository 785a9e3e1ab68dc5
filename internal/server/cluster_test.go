package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

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
	nodes := servertest.StartCluster(t, 3, nil)
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

	// A receiver-side filter applies on the subscriber's node.
	filtered, err := c2.SubscribeSync("prices.>", tern.Filter(`hdr.region == "eu"`))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "filtered interest at n1", 5*time.Second, func() bool { return interestAt(n1, "n2") >= 2 })
	for _, region := range []string{"us", "eu"} {
		if err := c1.PublishMsg(&tern.Msg{Subject: "prices.x", Data: []byte(region), Header: tern.Header{"region": []string{region}}}); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := filtered.NextMsg(5 * time.Second); err != nil || string(m.Data) != "eu" {
		t.Fatalf("filtered subscriber across nodes: %v %v", m, err)
	}
	if m, err := filtered.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the filter let %q through", m.Data)
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
	waitUntil(t, "group interest at n1", 5*time.Second, func() bool { return interestAt(n1, "n2") >= 3 && interestAt(n1, "n3") >= 2 })
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
	nodes := servertest.StartCluster(t, 2, nil)
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
	nodes := servertest.StartCluster(t, 3, nil)
	// A client that stays with its node (one that follows the cluster would
	// subscribe again on another node).
	c3, err := tern.Connect(nodes[2].URL(), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
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

// TestClusterMQTTSharedSubscription: an MQTT shared subscription with members on two
// nodes gets each message once, from a publisher on a third.
func TestClusterMQTTSharedSubscription(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_sub"); err != nil {
		t.Fatal("mosquitto_sub not installed (scripts/deps.sh installs it)")
	}
	nodes := servertest.StartCluster(t, 3, nil)
	var outs [2]strings.Builder
	var subs []*exec.Cmd
	for i, n := range nodes[1:] {
		port := n.MQTTAddr().(*net.TCPAddr).Port
		// -W ends it after 3 s: long enough for every message, bounded in any case.
		cmd := exec.Command("mosquitto_sub", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "$share/g/jobs/#", "-q", "1", "-V", "mqttv5", "-W", "3")
		cmd.Stdout = &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, cmd)
	}
	waitUntil(t, "shared interest at n1", 5*time.Second, func() bool { return interestAt(nodes[0], "n2") >= 1 && interestAt(nodes[0], "n3") >= 1 })
	c1 := connect(t, nodes[0])
	const n = 30
	for i := 0; i < n; i++ {
		if err := c1.Publish("jobs.j"+strconv.Itoa(i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range subs {
		_ = cmd.Wait() // ends by its -W timeout
	}
	seen := map[string]int{}
	for i := range outs {
		lines := strings.Fields(outs[i].String())
		if len(lines) == 0 {
			t.Errorf("the member on n%d got nothing: not spread over nodes", i+2)
		}
		for _, l := range lines {
			seen[l]++
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages of %d reached the group", len(seen), n)
	}
	for m, k := range seen {
		if k != 1 {
			t.Fatalf("message %s reached the group %d times", m, k)
		}
	}
}

// TestClusterMetrics: /metrics of a node has the cluster's and every route's series,
// labelled by the other node's name, and the route counters move with traffic.
func TestClusterMetrics(t *testing.T) {
	nodes := servertest.StartCluster(t, 3, func(_ int, c *server.Config) { c.HTTPAddr = "127.0.0.1:0" })
	c1, c2 := connect(t, nodes[0]), connect(t, nodes[1])
	sub, err := c2.SubscribeSync("metrics.test")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "interest at n1", 5*time.Second, func() bool { return interestAt(nodes[0], "n2") >= 1 })
	if err := c1.Publish("metrics.test", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	scrape := func(s *server.Server) string {
		resp, err := http.Get("http://" + s.HTTPAddr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var n1, n2 string
	// A round trip is measured as soon as a route is up; wait for its pong.
	waitUntil(t, "round trips", 5*time.Second, func() bool {
		n1, n2 = scrape(nodes[0]), scrape(nodes[1])
		return strings.Contains(n1, `tern_route_rtt_seconds{node="n3"}`) && strings.Contains(n2, `tern_route_rtt_seconds{node="n1"}`)
	})
	for _, want := range []string{
		"\ntern_cluster_members 3\n",
		"\ntern_cluster_routes 2\n",
		`tern_route_out_msgs_total{node="n2"} 1` + "\n",
		`tern_route_out_bytes_total{node="n2"} 5` + "\n",
		`tern_route_in_msgs_total{node="n2"} 0` + "\n",
		`tern_route_in_msgs_total{node="n3"} 0` + "\n",
		`tern_route_interest{node="n2"} `,
		`tern_route_pending_bytes{node="n3"} `,
		`tern_route_unacked_msgs{node="n3"} 0` + "\n",
		`tern_route_dropped_msgs_total{node="n2"} 0` + "\n",
		`tern_route_excluded{node="n3"} 0` + "\n",
		`tern_route_exclusions_total{node="n3"} 0` + "\n",
		`tern_route_excluded_drops_total{node="n2"} 0` + "\n",
		`tern_route_rtt_seconds{node="n2"} `,
		"\ntern_cluster_local_interest ",
	} {
		if !strings.Contains(n1, want) {
			t.Errorf("n1's /metrics lacks %q", want)
		}
	}
	for _, want := range []string{
		`tern_route_in_msgs_total{node="n1"} 1` + "\n",
		`tern_route_in_bytes_total{node="n1"} 5` + "\n",
		"\ntern_cluster_local_interest 1\n",
	} {
		if !strings.Contains(n2, want) {
			t.Errorf("n2's /metrics lacks %q", want)
		}
	}
	if strings.Contains(n1, `node="n1"`) {
		t.Error("n1 reports a route to itself")
	}
	if t.Failed() {
		t.Logf("n1:\n%s", grepLines(n1, "tern_cluster_", "tern_route_"))
	}

	// A server alone has no cluster series.
	alone := servertest.Start(t, func(c *server.Config) { c.HTTPAddr = "127.0.0.1:0" })
	if text := scrape(alone); strings.Contains(text, "tern_cluster_") || strings.Contains(text, "tern_route_") {
		t.Errorf("a server alone reports cluster metrics:\n%s", grepLines(text, "tern_cluster_", "tern_route_"))
	}
}

// grepLines keeps the lines of text that start with one of prefixes.
func grepLines(text string, prefixes ...string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}

// TestClusterTimingOptions: failure-detection settings membership cannot use are
// refused by New, naming the option; usable ones reach membership.
func TestClusterTimingOptions(t *testing.T) {
	for _, c := range []struct {
		set  func(*server.Config)
		want string
	}{
		{func(c *server.Config) { c.ClusterProbeTimeout = c.ClusterProbeInterval }, "option cluster_probe_timeout: 200ms: want less than cluster_probe_interval (200ms)"},
		{func(c *server.Config) { c.ClusterProbeInterval = 0 }, "option cluster_probe_interval: 0s: want a positive duration"},
		{func(c *server.Config) { c.ClusterSuspicionMult = 0 }, "option cluster_suspicion_mult: 0: want at least 1"},
	} {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort, cfg.MQTTPort, cfg.MQTTWSPort = "127.0.0.1", 0, "", "", -1, -1, -1
		cfg.ServerName, cfg.ClusterPort = "n1", 0
		c.set(&cfg)
		_, err := server.New(cfg, nil)
		var oe *server.OptionError
		if err == nil || !errors.As(err, &oe) || err.Error() != c.want {
			t.Errorf("New: %v, want OptionError %q", err, c.want)
		}
	}

	// Slower probing still forms the cluster and still finds a node gone.
	nodes := servertest.StartCluster(t, 2, func(_ int, c *server.Config) {
		c.ClusterProbeInterval, c.ClusterProbeTimeout, c.ClusterSuspicionMult = 400*time.Millisecond, 200*time.Millisecond, 2
	})
	if err := nodes[1].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "n2 gone from n1", 5*time.Second, func() bool { return len(nodes[0].ClusterNode().Status().Members) == 1 })
}
