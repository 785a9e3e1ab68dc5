package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// joinNode starts one more node, called name, joining the cluster of nodes (made by
// servertest.StartCluster in the same test), and waits until every node has a route to it.
func joinNode(t *testing.T, nodes []*server.Server, name string) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", t.TempDir(), -1
	cfg.MQTTPort, cfg.MQTTWSPort, cfg.KafkaPort = 0, -1, -1 // never the machine's default ports
	cfg.ServerName = name
	cfg.ClusterPort, cfg.Join, cfg.ClusterName = servertest.RoutePort(t), nodes[0].ClusterNode().RouteAddr(), "test-"+t.Name()
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
	all := append(slices.Clip(nodes), s)
	waitUntil(t, name+" in a full mesh", 15*time.Second, func() bool {
		for _, n := range all {
			if len(n.ClusterNode().Status().Routes) != len(all)-1 {
				return false
			}
		}
		return true
	})
	return s
}

func hasAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestClientFollowsTheCluster: a client given only n1 learns n2 from the handshake
// and n3, which joins later, from an INFO update; when n1 shuts down it moves to
// another node with its subscription, where publishers on both other nodes reach it
// and its requests are answered across nodes.
func TestClientFollowsTheCluster(t *testing.T) {
	nodes := servertest.StartCluster(t, 2, nil)
	n1, n2 := nodes[0], nodes[1]

	reconnected := make(chan struct{}, 1)
	// What the client knew while on n1, as each change of it arrived: n1 leaving
	// the cluster must not shrink it, or the client would have nowhere to go.
	var (
		mu   sync.Mutex
		onN1 [][]string
	)
	nc, err := tern.Connect(n1.URL(), tern.Name("follower"), tern.ReconnectWait(20*time.Millisecond),
		tern.MaxReconnectWait(200*time.Millisecond), tern.PingInterval(0),
		tern.ReconnectHandler(func(*tern.Conn) { reconnected <- struct{}{} }),
		tern.DiscoveredServersHandler(func(c *tern.Conn) {
			mu.Lock()
			defer mu.Unlock()
			if c.ConnectedURL() == n1.URL() {
				onN1 = append(onN1, c.Servers())
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if got := nc.ServerInfo().ConnectURLs; !hasAll(got, n1.URL(), n2.URL()) {
		t.Fatalf("handshake connect_urls %v, want n1 and n2", got)
	}
	// A client of n2 that learns n1 and n3 the same way, to watch n1 go.
	watcher := connect(t, n2)

	n3 := joinNode(t, nodes, "n3")
	waitUntil(t, "the client to learn n3", 10*time.Second, func() bool {
		return hasAll(nc.Servers(), n1.URL(), n2.URL(), n3.URL())
	})
	waitUntil(t, "n3's arrival at the DiscoveredServersHandler", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(onN1) > 0
	})
	if got := nc.Servers(); got[0] != n1.URL() || len(got) != 3 {
		t.Fatalf("Servers %v: want n1 (given) first, then n2 and n3", got)
	}
	if got := nc.DiscoveredServers(); len(got) != 2 || slices.Contains(got, n1.URL()) {
		t.Fatalf("DiscoveredServers %v", got)
	}
	waitUntil(t, "n2's client to learn n3", 10*time.Second, func() bool {
		return hasAll(watcher.DiscoveredServers(), n1.URL(), n3.URL())
	})

	sub, err := nc.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("no reconnect after n1 shut down (status %s, servers %v)", nc.Status(), nc.Servers())
	}
	mu.Lock()
	for _, servers := range onN1 {
		if len(servers) < 2 {
			t.Errorf("while on n1 the client was told the cluster is %v", servers)
		}
	}
	mu.Unlock()
	var here, there *server.Server
	switch url := nc.ConnectedURL(); url {
	case n2.URL():
		here, there = n2, n3
	case n3.URL():
		here, there = n3, n2
	default:
		t.Fatalf("reconnected to %q, want n2 or n3", url)
	}
	if got := nc.ServerInfo().ServerName; got != here.ClusterNode().Status().Node {
		t.Fatalf("ServerInfo names %q", got)
	}
	// n2's client was told n1 is gone; the client given n1 keeps it.
	waitUntil(t, "n2's client to forget n1", 10*time.Second, func() bool {
		d := watcher.DiscoveredServers()
		return !slices.Contains(d, n1.URL()) && slices.Contains(d, n3.URL())
	})
	if got := nc.Servers(); got[0] != n1.URL() {
		t.Fatalf("Servers %v: the given server went", got)
	}

	// The re-created subscription gets what publishers on n3 and on the other node
	// publish. Interest takes a moment to reach the other node: publish until it
	// arrives.
	for _, pubNode := range []*server.Server{n3, there} {
		pub := connect(t, pubNode)
		want := "from " + pubNode.URL()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := pub.Publish("orders.new", []byte(want)); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(50 * time.Millisecond)
			if err == nil && string(m.Data) == want {
				break
			}
			if err != nil && !errors.Is(err, tern.ErrTimeout) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing from a publisher on %s", pubNode.URL())
			}
		}
	}

	// A request from the client, answered by a responder on the node it is not on.
	responder, err := tern.Connect(there.URL(), tern.NoClusterDiscovery(), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(responder.Close)
	if _, err := responder.Subscribe("svc.where", func(m *tern.Msg) {
		_ = m.Respond([]byte(fmt.Sprint("answered on ", there.URL())))
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		rep, err := nc.Request(rctx, "svc.where", nil)
		rcancel()
		if err == nil {
			if string(rep.Data) != "answered on "+there.URL() {
				t.Fatalf("reply %q", rep.Data)
			}
			break
		}
		if !errors.Is(err, tern.ErrNoResponders) || time.Now().After(deadline) {
			t.Fatalf("request across nodes: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
