// Package servertest starts real Tern servers on loopback for tests of other packages
// (the client, the CLI, the benchmark harness).
package servertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
)

// Start runs a server on 127.0.0.1 with free native, MQTT and Kafka ports, no HTTP listener and its streams
// in a temporary directory, after
// letting mutate adjust the configuration (it may be nil). The server is shut down
// when the test ends.
func Start(t testing.TB, mutate func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = "127.0.0.1", 0, "", 0, 0, -1
	cfg.KafkaPort = 0
	cfg.StoreDir = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
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
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return s
}

// RoutePort finds a free loopback port whose next port, the gossip port of a node
// with that cluster port, is free too, for TCP and UDP.
func RoutePort(t testing.TB) int {
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

// StartCluster runs n servers on loopback, named n1 to nN, joined into one cluster
// named after the test: every node is given the first node's cluster port to join.
// Each has free native and MQTT ports, no UDP, MQTT WebSocket or HTTP listener and
// its streams in a temporary directory, after letting mutate (which may be nil)
// adjust node i's configuration. It returns once every node has a route to every
// other; the servers are shut down when the test ends.
func StartCluster(t testing.TB, n int, mutate func(i int, c *server.Config)) []*server.Server {
	t.Helper()
	var join string
	var nodes []*server.Server
	for i := 0; i < n; i++ {
		// A port found free can be taken before the node binds it (an outgoing
		// connection of another test binary gets it as its local port): the node
		// is then started again on another.
		for attempt := 1; ; attempt++ {
			port := pickRoutePort(t)
			if i == 0 {
				join = "127.0.0.1:" + strconv.Itoa(port)
			}
			cfg := server.DefaultConfig()
			cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", t.TempDir(), -1
			cfg.MQTTPort, cfg.MQTTWSPort = 0, -1
			cfg.KafkaPort = -1 // off: tests of the Kafka API on a cluster start their own ports
			cfg.ServerName = fmt.Sprintf("n%d", i+1)
			cfg.ClusterPort, cfg.Join, cfg.ClusterName = port, join, "test-"+t.Name()
			if mutate != nil {
				mutate(i, &cfg)
			}
			s, err := server.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(); err != nil {
				if addrInUse(err) && attempt < 5 {
					t.Logf("node n%d: %v; again on another port", i+1, err)
					continue // a failed Start stopped what it had started
				}
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Tests may have stopped a node already: a second shutdown's error is no news.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			nodes = append(nodes, s)
			break
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for !fullMesh(nodes) {
		if time.Now().After(deadline) {
			t.Fatalf("no full mesh of routes between %d nodes after 15s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nodes
}

// pickRoutePort is RoutePort; a test of StartCluster's retry hands out a port
// that is taken.
var pickRoutePort = RoutePort

// addrInUse tells whether a Start failed on a port another process holds. The
// gossip library reports its listener's error as text only.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func fullMesh(nodes []*server.Server) bool {
	for _, s := range nodes {
		if len(s.ClusterNode().Status().Routes) != len(nodes)-1 {
			return false
		}
	}
	return true
}
