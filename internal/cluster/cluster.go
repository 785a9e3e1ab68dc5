// Package cluster makes a Tern server a node of a cluster: it starts membership
// (internal/cluster/membership, memberlist's SWIM), the routes to the other nodes
// (internal/cluster/route) and the local interest count they advertise
// (internal/cluster/interest), and lets membership events drive the routes: a node
// that joins gets a route, one that leaves or is declared dead loses it and its
// interest at once.
//
// The broker core knows none of this: routes are broker.Remote sinks and the
// interest count is the broker's InterestObserver.
package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/cluster/secret"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/tlsconf"
	"github.com/tern-mq/tern/internal/wire"
)

// Config is a node's cluster settings.
type Config struct {
	NodeName string
	Cluster  string // cluster name; default membership.DefaultClusterName
	Host     string // interface routes and gossip listen on
	// RoutePort is the route listener's port (the server's --cluster-port); 0 picks
	// a free one (tests).
	RoutePort int
	// GossipPort defaults to RoutePort + 1; with RoutePort 0, 0 picks a free one.
	GossipPort int
	// Advertise is the host other nodes reach this one at, when it differs from
	// Host (0.0.0.0, NAT, containers).
	Advertise string
	// Join names any members' route addresses (HOST:PORT); see membership.Config.
	Join []string
	// JoinGossip: Join names gossip ports instead (tests with free ports).
	JoinGossip bool
	ClientURLs []string
	Version    string
	Broker     *broker.Broker
	// Interest is the local interest count, the broker's observer since before its
	// first subscription; nil makes one and installs it (the broker must have no
	// subscription yet).
	Interest *interest.Local
	// Secret is the secret every node of the cluster shares (cluster_secret_file,
	// internal/cluster/secret), nil for none. With it gossip is encrypted and routes
	// authenticated, each with a key of its own derived from it; nodes without it,
	// or with another, are refused.
	Secret []byte
	// TLS, when set, carries the routes over mutual TLS with its certificate and
	// CA (cluster_tls; route.Config.TLS): a node without a certificate of the CA
	// gets no route. Gossip is not TLS: only the Secret encrypts it.
	TLS *tlsconf.Store
	// TLSAnyName accepts any certificate of the CA for any node; by default a
	// peer's certificate must name the node it says it is.
	TLSAnyName bool
	Membership membership.Config // timing and tags; the fields above override its own
	Routes     route.Config      // lease, pings, outbound; the fields above override its own
	Logger     *slog.Logger

	// DataDir is where the node keeps its Raft id and the logs of the groups it
	// replicates (DataDir/raft). ClusterSize is how many nodes the cluster is
	// first started with: the meta group forms once that many nodes that
	// replicate are members. Replication runs when both are set.
	DataDir     string
	ClusterSize int
	// Replica tunes the Raft host (ticks, batching); NodeID and Logger are set here.
	Replica replica.Config
	// OpenStorage opens the durable Raft storage of one group in dir.
	OpenStorage func(dir string) (Storage, error)
	// MQTTState is this node's replica of the MQTT group's state (persistent
	// sessions and retained messages), nil for a cluster without MQTT state.
	MQTTState replica.StateMachine
}

// Storage is a group's durable Raft storage, closed at Shutdown.
type Storage interface {
	replica.Storage
	Close() error
}

// Node is this server's membership of the cluster.
type Node struct {
	cfg    Config
	log    *slog.Logger
	local  *interest.Local
	routes *route.Manager
	ms     *membership.Membership
	ln     net.Listener
	id     string

	// Replication, when configured (nil otherwise).
	host        *replica.Host
	tr          *raftTransport
	meta        *metaGroup
	metaStorage Storage
	groups      groupSet
	// The MQTT group (mqttgroup.go), when Config.MQTTState is set.
	mqttStorage Storage
	mqttSub     *broker.Subscription
	mqttStarted atomic.Bool
	// mqttLeader.ch is closed (and replaced) when the MQTT group's leadership
	// changes, to cancel forwards to the leader that was.
	mqttLeader struct {
		mu sync.Mutex
		ch chan struct{}
	}
	rpc *requester

	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Start joins the cluster. It must come before the broker has any subscription: the
// interest count has to see each from the first.
func Start(cfg Config) (*Node, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("cluster: the node needs a name (server_name)")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = membership.DefaultClusterName
	}
	if cfg.Secret != nil && len(cfg.Secret) < secret.MinLen {
		return nil, fmt.Errorf("cluster: a secret of %d bytes, want at least %d", len(cfg.Secret), secret.MinLen)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: log, local: cfg.Interest, done: make(chan struct{})}
	if n.local == nil {
		n.local = interest.NewLocal()
		if err := cfg.Broker.SetObserver(n.local); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.RoutePort)))
	if err != nil {
		return nil, fmt.Errorf("cluster: route listener: %w", err)
	}
	n.ln = ln
	port := ln.Addr().(*net.TCPAddr).Port
	host := cfg.Advertise
	if host == "" {
		host = cfg.Host
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = outboundIP()
	}
	routeAddr := net.JoinHostPort(host, strconv.Itoa(port))

	mc := cfg.Membership
	mc.NodeName, mc.ClusterName, mc.BindAddr = cfg.NodeName, cfg.Cluster, cfg.Host
	mc.GossipPort = cfg.GossipPort
	if mc.GossipPort == 0 && cfg.RoutePort != 0 {
		mc.GossipPort = port + membership.GossipPortOffset
	}
	if cfg.Advertise != "" {
		mc.AdvertiseAddr = cfg.Advertise
	}
	mc.Join, mc.JoinGossip, mc.RouteAddr, mc.Version, mc.Logger = cfg.Join, cfg.JoinGossip, routeAddr, cfg.Version, log
	if cfg.Secret != nil {
		mc.SecretKey = secret.GossipKey(cfg.Secret)
	}
	replicate := cfg.DataDir != "" && cfg.ClusterSize > 0 && cfg.OpenStorage != nil
	if replicate {
		if mc.RaftID, err = loadRaftID(filepath.Join(cfg.DataDir, "raft")); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if n.ms, err = membership.Start(mc); err != nil {
		ln.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// One id for the node in membership and on its routes.
	n.id = n.ms.Local().ID
	rc := cfg.Routes
	rc.Hello = wire.RouteHello{Cluster: cfg.Cluster, NodeName: cfg.NodeName, NodeID: n.id, RouteAddr: routeAddr,
		ServerVersion: cfg.Version, ClientURLs: cfg.ClientURLs}
	rc.Broker, rc.Local, rc.Logger = cfg.Broker, n.local, log
	if cfg.Secret != nil {
		rc.AuthKey = secret.RouteKey(cfg.Secret)
	}
	rc.TLS, rc.TLSAnyName = cfg.TLS, cfg.TLSAnyName
	if n.routes, err = route.NewManager(rc); err != nil {
		_ = n.ms.Shutdown()
		ln.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.routes.Serve(ln); err != nil {
			log.Error("cluster: route listener stopped", "err", err)
		}
	}()

	if replicate {
		if err := n.startReplication(mc.RaftID); err != nil {
			n.routes.Shutdown()
			_ = n.ms.Shutdown()
			ln.Close()
			return nil, err
		}
	}
	n.wg.Add(1)
	go n.follow()
	log.Info("cluster node started", "cluster", cfg.Cluster, "node", cfg.NodeName, "routes", routeAddr,
		"gossip", n.ms.Local().Addr, "join", cfg.Join, "secured", cfg.Secret != nil,
		"routes_tls", cfg.TLS != nil)
	return n, nil
}

// follow turns membership events into route changes.
func (n *Node) follow() {
	defer n.wg.Done()
	for {
		select {
		case <-n.done:
			return
		case ev, ok := <-n.ms.Events():
			if !ok {
				return
			}
			switch ev.Kind {
			case membership.NodeJoined, membership.NodeUpdated:
				n.log.Info("cluster: node up", "node", ev.Node.Name, "routes", ev.Node.RouteAddr, "event", ev.Kind.String())
				n.routes.Want(ev.Node.Name, ev.Node.RouteAddr)
				if n.tr != nil {
					n.tr.learn(ev.Node.RaftID, ev.Node.Name)
					n.meta.poke()
				}
			case membership.NodeLeft, membership.NodeFailed:
				n.log.Warn("cluster: node gone", "node", ev.Node.Name, "event", ev.Kind.String())
				n.routes.Drop(ev.Node.Name)
			}
		}
	}
}

// Shutdown leaves the cluster gracefully (peers learn it left rather than failed)
// and closes every route.
func (n *Node) Shutdown(leaveTimeout time.Duration) {
	n.once.Do(func() {
		if n.meta != nil {
			n.handOffGroups(leaveTimeout)
			n.meta.handOff(leaveTimeout)
		}
		n.routes.StopDialing()
		if err := n.ms.Leave(leaveTimeout); err != nil {
			n.log.Warn("cluster: leave", "err", err)
		}
		close(n.done)
		if n.host != nil {
			n.meta.stop()
			n.rpc.close()
			n.host.Stop()
			n.closeGroups()
			if err := n.metaStorage.Close(); err != nil {
				n.log.Warn("cluster: closing the meta group's storage", "err", err)
			}
			if n.mqttStorage != nil {
				if n.mqttSub != nil {
					_ = n.cfg.Broker.Unsubscribe(n.mqttSub)
				}
				if err := n.mqttStorage.Close(); err != nil {
					n.log.Warn("cluster: closing the mqtt group's storage", "err", err)
				}
			}
		}
		_ = n.ms.Shutdown()
		n.routes.Shutdown()
		n.wg.Wait()
	})
}

// Status is what /cluster shows.
type Status struct {
	Cluster   string       `json:"cluster"`
	Node      string       `json:"node"`
	NodeID    string       `json:"node_id"`
	RouteAddr string       `json:"route_addr"`
	Gossip    string       `json:"gossip_addr"`
	Members   []MemberInfo `json:"members"`
	Routes    []route.Info `json:"routes"`
	Interest  int          `json:"local_interest"`
	// Secured: the node has the cluster secret; its gossip is encrypted and its
	// routes authenticated.
	Secured bool `json:"secured"`
	// RoutesTLS: the node's routes run over mutual TLS (cluster_tls).
	RoutesTLS bool `json:"routes_tls"`
	// RouteAuthFailures counts the routes refused because their peer did not prove
	// the cluster secret (or asked for it when this node has none), or, with
	// cluster_tls, failed TLS: no valid certificate of the CA, or no TLS.
	RouteAuthFailures uint64 `json:"route_auth_failures"`
	// Meta is this node's view of the meta group, nil when it replicates nothing.
	Meta *GroupStatus `json:"meta,omitempty"`
	// MQTT is this node's view of the MQTT group, nil without one.
	MQTT *GroupStatus `json:"mqtt,omitempty"`
}

// MemberInfo is one member as membership sees it.
type MemberInfo struct {
	Name      string            `json:"name"`
	ID        string            `json:"id"`
	Addr      string            `json:"gossip_addr"`
	RouteAddr string            `json:"route_addr"`
	Version   string            `json:"version"`
	State     string            `json:"state"`
	Tags      map[string]string `json:"tags,omitempty"`
}

// Status describes the node, its members and routes.
func (n *Node) Status() Status {
	local := n.ms.Local()
	st := Status{Cluster: n.cfg.Cluster, Node: n.cfg.NodeName, NodeID: n.id, RouteAddr: local.RouteAddr, Gossip: local.Addr,
		Routes: n.routes.Routes(), Interest: n.local.Len(), Secured: n.routes.Authenticated(),
		RoutesTLS: n.routes.TLS(), RouteAuthFailures: n.routes.AuthFailures()}
	for _, m := range n.ms.Members() {
		st.Members = append(st.Members, MemberInfo{Name: m.Name, ID: m.ID, Addr: m.Addr, RouteAddr: m.RouteAddr,
			Version: m.Version, State: m.State.String(), Tags: m.Tags})
	}
	if n.meta != nil {
		st.Meta = n.groupStatus(meta.MetaGroup, n.meta.started.Load())
		st.MQTT = n.MQTTStatus()
	}
	return st
}

// ClientURLs lists the client URLs of this node and every node with a route.
func (n *Node) ClientURLs() []string { return n.routes.ClientURLs() }

// WatchClientURLs signals changes of ClientURLs (routes up or down); see
// route.Manager.WatchClientURLs. The channel closes at stop or Shutdown.
func (n *Node) WatchClientURLs() (ch <-chan struct{}, stop func()) { return n.routes.WatchClientURLs() }

// RouteAddr is where this node accepts routes.
func (n *Node) RouteAddr() string { return n.ln.Addr().String() }

// outboundIP is the address other hosts most likely reach this one at, for a node
// bound to every interface without an advertised address.
func outboundIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}
