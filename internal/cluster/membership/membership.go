package membership

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// NodeState is what this node last learned about another node.
//
// memberlist v0.7.0 does not tell its users which nodes are suspect (it keeps that
// state unexported), so a suspect node is reported alive until it is declared dead
// or refutes the suspicion.
type NodeState int

const (
	StateAlive NodeState = iota
	StateLeft            // left gracefully
	StateDead            // declared dead by failure detection
)

func (s NodeState) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateLeft:
		return "left"
	case StateDead:
		return "dead"
	}
	return "NodeState(" + strconv.Itoa(int(s)) + ")"
}

// Node is one member of the cluster as this node knows it.
type Node struct {
	Name      string
	ID        string // random per process: a restarted node keeps its name, not its ID
	Addr      string // gossip HOST:PORT
	RouteAddr string
	Version   string
	Tags      map[string]string // a copy: the caller may keep or change it
	RaftID    uint64            // see Config.RaftID
	// MetaGroup: the node holds a replica of the meta group (SetMetaGroup).
	MetaGroup bool
	State     NodeState
}

// EventKind says what happened to a node.
type EventKind int

const (
	// NodeJoined: a node became a member (first seen, or back after leaving or
	// failing). Every other member is reported this way, in the order discovered.
	NodeJoined EventKind = iota + 1
	// NodeUpdated: a member changed its tags, route address or version.
	NodeUpdated
	// NodeLeft: a member left gracefully (Leave).
	NodeLeft
	// NodeFailed: failure detection declared a member dead. Also reported, before
	// a NodeJoined for the new process, when a node is seen restarted under the same
	// name (a new ID) before it was declared dead.
	NodeFailed
)

func (k EventKind) String() string {
	switch k {
	case NodeJoined:
		return "joined"
	case NodeUpdated:
		return "updated"
	case NodeLeft:
		return "left"
	case NodeFailed:
		return "failed"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one change of membership, about a node other than this one.
type Event struct {
	Kind EventKind
	Node Node
}

// ErrClosed is returned by Leave and UpdateTags after Shutdown, and by UpdateTags
// after Leave.
var ErrClosed = errors.New("membership: closed")

// Membership is this node's view of the cluster. Its methods are safe for
// concurrent use.
type Membership struct {
	cfg  Config
	log  *slog.Logger
	list *memberlist.Memberlist

	// isSelf reports whether a gossip address is this node's, to skip it in joins.
	isSelf func(ip net.IP, port int) bool

	// life serializes Leave, UpdateTags and Shutdown: memberlist panics on a Leave
	// after Shutdown.
	life     sync.Mutex
	shutDown bool

	mu       sync.Mutex
	selfMeta meta
	selfEnc  []byte
	left     bool
	closed   bool
	nodes    map[string]*Node // by name; self always, others while alive
	queue    []Event
	logged   map[string]time.Time // rate limit for refusal and conflict logs
	// keyLog rate-limits the warnings about gossip refused over the cluster
	// secret; it has a lock of its own, as memberlist logs from anywhere.
	keyLog *rateLimit

	wake       chan struct{} // the queue has an event
	alone      chan struct{} // this node knows no other member any more
	events     chan Event
	done       chan struct{} // closed by Shutdown
	joinCtx    context.Context
	joinCancel context.CancelFunc
	wg         sync.WaitGroup
}

const (
	// eventBuffer is the channel's buffer; the queue behind it has no bound.
	eventBuffer = 64
	// memberlist's stream timeout bounds a join or push/pull with a silent address,
	// and so how long Shutdown may wait for a join attempt under way. A LAN
	// exchanges a cluster's state in milliseconds; the default 10s only delays.
	streamTimeout = 5 * time.Second
	// memberlist lets a name move to a new address only once its holder has been
	// dead for this long (0 means never, which would keep a node restarted on a new
	// address, as a Kubernetes pod is, out until the dead entry is reaped). Names
	// are unique by configuration, so a dead holder frees its name at once.
	deadNodeReclaim = time.Nanosecond
	// pushPullInterval is how often a node exchanges its whole state with one other
	// live member (memberlist's LAN default is 30 s). It is how a node learns that
	// the others declared it dead while it did not notice them gone: cut off for
	// less than its own suspicion lasts (from four nodes on, Lifeguard makes that
	// up to six times the base when few other members confirm it: 4.8 s with the
	// default timing, so a node cut off alone, or two of five together, may still
	// believe the others alive), it hears nothing more of the verdict once the
	// network heals — gossip of it went out while it was cut off, and the others
	// no longer probe a dead node — and refutes it only at its next exchange,
	// until which it has no routes. Every 2 s keeps that to a second or two; an
	// exchange is one TCP round trip with a few hundred bytes per member, and
	// memberlist spaces them out for clusters of more than 32 nodes.
	pushPullInterval = 2 * time.Second
	// updateWait bounds how long UpdateTags and Leave wait for their news to go out.
	updateWait = time.Second
	// logEvery rate-limits the log line for one refused node or conflict: refused
	// nodes retry and gossip keeps re-delivering what was refused.
	logEvery  = 30 * time.Second
	maxLogged = 1024
)

// Start binds the gossip port, starts memberlist and begins joining Config.Join in
// the background. It returns once this node is a member of its own one-node cluster.
func Start(cfg Config) (*Membership, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	self := meta{
		format:  metaFormat,
		cluster: cfg.ClusterName,
		id:      rand.Text(),
		route:   cfg.RouteAddr,
		version: cfg.Version,
		tags:    maps.Clone(cfg.Tags),
		raftID:  cfg.RaftID,
	}
	enc, err := encodeMeta(self)
	if err != nil {
		return nil, fmt.Errorf("membership: start %s: %w", cfg.NodeName, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Membership{
		cfg:        cfg,
		log:        cfg.Logger,
		selfMeta:   self,
		selfEnc:    enc,
		nodes:      make(map[string]*Node),
		logged:     make(map[string]time.Time),
		keyLog:     &rateLimit{},
		wake:       make(chan struct{}, 1),
		alone:      make(chan struct{}, 1),
		events:     make(chan Event, eventBuffer),
		done:       make(chan struct{}),
		joinCtx:    ctx,
		joinCancel: cancel,
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeName
	mc.Label = cfg.ClusterName
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.GossipPort
	mc.AdvertisePort = cfg.GossipPort
	if cfg.AdvertiseAddr != "" {
		ip, port, err := m.advertise(cfg.AdvertiseAddr)
		if err != nil {
			cancel()
			return nil, err
		}
		mc.AdvertiseAddr = ip.String()
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.SuspicionMult = cfg.SuspicionMult
	mc.GossipInterval = cfg.GossipInterval
	mc.TCPTimeout = streamTimeout
	mc.PushPullInterval = pushPullInterval
	mc.DeadNodeReclaimTime = deadNodeReclaim
	mc.EnableCompression = !cfg.uncompressed
	d := &delegate{m: m}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Merge = d
	mc.Conflict = d
	mc.LogOutput = nil
	mc.Logger = log.New(logWriter{log: m.log, limit: m.keyLog}, "", 0)
	if len(cfg.SecretKey) > 0 {
		// Every packet and stream is sealed with AES-GCM under the key, the
		// cluster name (the label) authenticated with it; gossip that is not, in
		// either direction, is dropped.
		mc.SecretKey = cfg.SecretKey
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}

	// Create calls the delegates for this node itself before it returns.
	list, err := memberlist.Create(mc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("membership: start %s on %s: %w", cfg.NodeName,
			net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.GossipPort)), err)
	}
	m.list = list
	m.isSelf = selfMatcher(net.ParseIP(cfg.BindAddr), mc.BindPort, list.LocalNode())

	local := m.Local()
	m.log.Info("membership started", "node", local.Name, "id", local.ID, "gossip", local.Addr,
		"cluster", cfg.ClusterName, "route", cfg.RouteAddr, "join", cfg.Join, "encrypted", len(cfg.SecretKey) > 0)

	m.wg.Add(1)
	go m.pump()
	if len(cfg.Join) > 0 {
		m.wg.Add(1)
		go m.joinLoop()
	}
	return m, nil
}

// advertise turns Config.AdvertiseAddr into the IP and port memberlist wants.
func (m *Membership) advertise(addr string) (net.IP, int, error) {
	host, sport, err := net.SplitHostPort(addr)
	if err != nil {
		host, sport = addr, ""
	}
	port := 0
	if sport != "" {
		if port, err = strconv.Atoi(sport); err != nil || port < 1 || port > 65535 {
			return nil, 0, fmt.Errorf("%w: advertise address %q: bad port", ErrInvalidConfig, addr)
		}
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip, port, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	ips, err := m.cfg.Resolve(ctx, host)
	if err != nil {
		return nil, 0, fmt.Errorf("membership: resolve advertise address %q: %w", addr, err)
	}
	for _, s := range ips {
		if ip := net.ParseIP(s); ip != nil {
			return ip, port, nil
		}
	}
	return nil, 0, fmt.Errorf("membership: advertise address %q resolves to no IP address", addr)
}

// Events delivers membership changes of other nodes in the order this node learned
// them. memberlist's goroutines never wait for the reader: events go to an
// unbounded queue first, so a slow reader costs memory in proportion to the churn
// it has not read (a few hundred bytes an event), never lost or delayed gossip.
// The channel is closed by Shutdown; events not yet received then are dropped.
func (m *Membership) Events() <-chan Event { return m.events }

// Members returns the nodes believed alive, this one included, sorted by name.
func (m *Membership) Members() []Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		if n.State == StateAlive {
			out = append(out, copyNode(*n))
		}
	}
	slices.SortFunc(out, func(a, b Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Local returns this node.
func (m *Membership) Local() Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copyNode(*m.nodes[m.cfg.NodeName])
}

// UpdateTags replaces this node's tags and announces them; other nodes see a
// NodeUpdated event. It returns once the news has gone out or after a second, and
// with an error wrapping ErrMetaTooLarge when the tags do not fit (the old ones
// stay).
func (m *Membership) UpdateTags(tags map[string]string) error {
	if err := checkTags(tags); err != nil {
		return err
	}
	return m.announce("update tags", func(mt *meta, n *Node) {
		mt.tags = maps.Clone(tags)
		n.Tags = maps.Clone(tags)
	})
}

// SetMetaGroup announces that this node holds a replica of the meta group: a node
// that starts later joins the group instead of founding one. It returns as
// UpdateTags does.
func (m *Membership) SetMetaGroup() error {
	return m.announce("set meta group", func(mt *meta, n *Node) {
		mt.metaGroup = true
		n.MetaGroup = true
	})
}

// announce changes this node's metadata and spreads it; other nodes see a
// NodeUpdated event.
func (m *Membership) announce(what string, change func(*meta, *Node)) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutDown {
		return fmt.Errorf("membership: %s: %w", what, ErrClosed)
	}
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return fmt.Errorf("membership: %s after leaving: %w", what, ErrClosed)
	}
	next := m.selfMeta
	var scratch Node
	change(&next, &scratch)
	enc, err := encodeMeta(next)
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("membership: %s: %w", what, err)
	}
	m.selfMeta, m.selfEnc = next, enc
	change(&next, m.nodes[m.cfg.NodeName])
	m.mu.Unlock()

	if err := m.list.UpdateNode(updateWait); err != nil {
		// The alive message is queued; it keeps spreading after the wait.
		m.log.Debug(what+": still spreading", "err", err)
	}
	return nil
}

// Leave tells the cluster this node is going, so that the others report NodeLeft
// rather than NodeFailed, and stops joining. It waits up to timeout for the news
// to go out. Call Shutdown afterwards; until then this node still answers probes,
// which lets the news spread.
func (m *Membership) Leave(timeout time.Duration) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutDown {
		return fmt.Errorf("membership: leave: %w", ErrClosed)
	}
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.left = true
	m.selfMeta.leaving = true
	enc, err := encodeMeta(m.selfMeta)
	if err == nil {
		m.selfEnc = enc
	}
	m.mu.Unlock()
	m.joinCancel()

	start := time.Now()
	if err == nil {
		// memberlist's leave message says only "dead"; peers tell a leave from a
		// failure by this flag, sent first in an alive message.
		if err := m.list.UpdateNode(timeout / 2); err != nil {
			m.log.Debug("leave intent still spreading", "err", err)
		}
	}
	rest := max(timeout-time.Since(start), time.Millisecond)
	err = m.list.Leave(rest)

	m.mu.Lock()
	m.nodes[m.cfg.NodeName].State = StateLeft
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("membership: leave %s: %w", m.cfg.NodeName, err)
	}
	m.log.Info("left the cluster", "node", m.cfg.NodeName)
	return nil
}

// Shutdown stops gossip at once, without telling anyone (peers will declare this
// node dead unless Leave came first), stops the background goroutines and closes
// the Events channel. It is safe to call more than once.
func (m *Membership) Shutdown() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutDown {
		return nil
	}
	m.shutDown = true
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.joinCancel()
	err := m.list.Shutdown()
	close(m.done)
	m.wg.Wait()
	if err != nil {
		return fmt.Errorf("membership: shut down %s: %w", m.cfg.NodeName, err)
	}
	m.log.Info("membership stopped", "node", m.cfg.NodeName)
	return nil
}

// emit queues an event for the pump; called with m.mu held.
func (m *Membership) emit(kind EventKind, n Node) {
	if m.closed {
		return
	}
	m.queue = append(m.queue, Event{Kind: kind, Node: copyNode(n)})
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// pump moves events from the queue to the channel so that nothing memberlist calls
// ever waits for the reader.
func (m *Membership) pump() {
	defer m.wg.Done()
	defer close(m.events)
	for {
		m.mu.Lock()
		if len(m.queue) == 0 {
			m.mu.Unlock()
			select {
			case <-m.wake:
				continue
			case <-m.done:
				return
			}
		}
		ev := m.queue[0]
		m.queue[0] = Event{}
		m.queue = m.queue[1:]
		if len(m.queue) == 0 {
			m.queue = nil // let a burst's backing array go
		}
		m.mu.Unlock()
		select {
		case m.events <- ev:
		case <-m.done:
			return
		}
	}
}

// othersAlive reports whether this node knows another live member; m.mu held.
func (m *Membership) othersAlive() bool {
	for name, n := range m.nodes {
		if name != m.cfg.NodeName && n.State == StateAlive {
			return true
		}
	}
	return false
}

// logLimited reports whether a line about key may be logged now; m.mu held.
func (m *Membership) logLimited(key string) bool {
	now := time.Now()
	if t, ok := m.logged[key]; ok && now.Sub(t) < logEvery {
		return false
	}
	if len(m.logged) >= maxLogged {
		// Keys name refused nodes, which another network could invent without end.
		for k, t := range m.logged {
			if now.Sub(t) >= logEvery {
				delete(m.logged, k)
			}
		}
	}
	m.logged[key] = now
	return true
}

func copyNode(n Node) Node {
	n.Tags = maps.Clone(n.Tags)
	return n
}

// selfMatcher returns a test for "this address is this node's gossip address": the
// advertised one, the bound one, and when bound to every interface any local or
// loopback address on the bound port.
func selfMatcher(bind net.IP, bindPort int, local *memberlist.Node) func(net.IP, int) bool {
	advIP, advPort := local.Addr, int(local.Port)
	var localIPs []net.IP
	if bind.IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					localIPs = append(localIPs, ipn.IP)
				}
			}
		}
	}
	return func(ip net.IP, port int) bool {
		if port == advPort && ip.Equal(advIP) {
			return true
		}
		if port != bindPort {
			return false
		}
		if !bind.IsUnspecified() {
			return ip.Equal(bind)
		}
		if bind.To4() != nil && ip.To4() == nil {
			return false // bound to 0.0.0.0: IPv6 addresses are not ours
		}
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, l := range localIPs {
			if ip.Equal(l) {
				return true
			}
		}
		return false
	}
}
