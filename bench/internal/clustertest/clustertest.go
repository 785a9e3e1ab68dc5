// Package clustertest starts in-process Tern clusters on loopback for the bench
// module's tests.
package clustertest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
)

// routePort finds a free port whose next port (gossip, TCP and UDP) is free too.
func routePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		g, gerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		u, uerr := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		_ = l.Close()
		if gerr == nil {
			_ = g.Close()
		}
		if uerr == nil {
			_ = u.Close()
		}
		if gerr == nil && uerr == nil && p < 65535 {
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// Cluster is n Tern servers joined into one cluster.
type Cluster struct {
	Nodes []*server.Server
}

// StartTern runs n in-process servers on loopback, named n1…nn, each with its
// monitoring HTTP on a free port, joined into one cluster, and waits until every node
// has a route to every other. They are shut down when the test ends.
func StartTern(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = routePort(t)
	}
	join := "127.0.0.1:" + strconv.Itoa(ports[0])
	c := &Cluster{}
	for i := range n {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "127.0.0.1:0", "", -1
		cfg.MQTTPort, cfg.MQTTWSPort = -1, -1
		cfg.ServerName = fmt.Sprintf("n%d", i+1)
		cfg.ClusterPort, cfg.Join, cfg.ClusterName = ports[i], join, "bench-test"
		s, err := server.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Stop(s) })
		c.Nodes = append(c.Nodes, s)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.meshed() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a full mesh of routes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

func (c *Cluster) meshed() bool {
	for _, s := range c.Nodes {
		if len(s.ClusterNode().Status().Routes) != len(c.Nodes)-1 {
			return false
		}
	}
	return true
}

// Stop shuts s down (again is harmless).
func (c *Cluster) Stop(s *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}

// URLs are the nodes' client URLs, in node order.
func (c *Cluster) URLs() []string {
	var u []string
	for _, s := range c.Nodes {
		u = append(u, "tern://"+s.Addr().String())
	}
	return u
}

// Monitors are the nodes' monitoring base URLs (http://host:port), in node order.
func (c *Cluster) Monitors() []string {
	var u []string
	for _, s := range c.Nodes {
		u = append(u, "http://"+s.HTTPAddr().String())
	}
	return u
}
