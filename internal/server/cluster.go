package server

import (
	"net"
	"strconv"
	"strings"

	"github.com/tern-mq/tern/internal/cluster"
)

// startCluster makes the server a cluster node: its listeners are bound, so the
// client URLs other nodes pass on to clients are known.
func (s *Server) startCluster() error {
	var join []string
	for _, j := range strings.Split(s.cfg.Join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			join = append(join, j)
		}
	}
	node, err := cluster.Start(cluster.Config{
		NodeName: s.cfg.ServerName, Cluster: s.cfg.ClusterName, Host: s.cfg.Host,
		RoutePort: s.cfg.ClusterPort, GossipPort: s.cfg.GossipPort, Advertise: s.cfg.ClusterAdvertise,
		Join: join, ClientURLs: s.clientURLs(), Version: Version, Broker: s.broker,
		Interest: s.interest, Logger: s.log,
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cluster = node
	s.mu.Unlock()
	return nil
}

// clientURLs are the native protocol URLs clients of other nodes may move to.
func (s *Server) clientURLs() []string {
	a, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return nil
	}
	host := s.cfg.ClusterAdvertise
	if host == "" && !a.IP.IsUnspecified() {
		host = a.IP.String()
	}
	if host == "" {
		return nil // bound to every interface with nothing advertised: no address to give
	}
	return []string{"tern://" + net.JoinHostPort(host, strconv.Itoa(a.Port))}
}

// Cluster implements monitor.ClusterSource.
func (s *Server) Cluster() any {
	s.mu.Lock()
	node := s.cluster
	s.mu.Unlock()
	if node == nil {
		return nil
	}
	return node.Status()
}

// ClusterNode is the running cluster node, nil when the server runs alone.
func (s *Server) ClusterNode() *cluster.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cluster
}
