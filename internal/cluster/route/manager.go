package route

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/acceptloop"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/tlsconf"
	"github.com/tern-mq/tern/internal/wire"
)

// Config is a node's route settings.
type Config struct {
	// Hello is how this node introduces itself (cluster, name, id, route address,
	// version, client URLs).
	Hello  wire.RouteHello
	Broker *broker.Broker
	Local  *interest.Local
	// Outbound configures the routes' outbound queues (pending limit, write timeout).
	Outbound outbound.Config
	// Lease: a peer's interest is dropped when its full refresh has not come for
	// this long; each node refreshes every Lease/3. Default 30 s.
	Lease time.Duration
	// PingInterval is how often each route is pinged: it measures the round trip
	// and keeps an idle route heard. Default 500 ms.
	PingInterval time.Duration
	// StaleAfter closes a route that has heard nothing from its peer for this
	// long, purging the peer's interest with it; the dialling side keeps trying
	// while the node is wanted. Membership alone cannot be relied on for this: a
	// link cut between two nodes that a third still reaches leaves both alive to
	// it, and a route left up would swallow what it is given. Default
	// 4 × PingInterval, at least 2 × PingInterval.
	StaleAfter time.Duration
	// HandshakeTimeout bounds the handshake (RHELLO, and RAUTH with AuthKey).
	// Default 5 s.
	HandshakeTimeout time.Duration
	// AuthKey, when set, is the key both ends of a route prove knowledge of the
	// cluster secret with (secret.RouteKey): a peer that cannot is refused, as is
	// one that asks for a proof while AuthKey is nil. It must be 32 bytes.
	AuthKey []byte
	// TLS, when set, carries every route over mutual TLS from its first byte
	// (tls.go): the store's certificate is presented at both ends, and the peer's
	// verified against its CA file and CRL; a peer without such a certificate, or
	// without TLS, is refused. The store must require client certificates
	// (ClientAuth "require"). Reloads of the store apply to new routes.
	TLS *tlsconf.Store
	// TLSAnyName accepts a peer's certificate from the CA whatever node it names;
	// by default it must name the node the peer says it is in its RHELLO (a DNS
	// subject alternative name or the common name).
	TLSAnyName bool
	// ExcludeBacklog: a route with more bytes than this waiting for its socket, or
	// with bytes waiting and no progress for ExcludeAfter, gets no traffic until
	// its backlog falls under a quarter of it (Raft's only while it makes no
	// progress: Raft bounds what it has in flight itself, and a group missing its
	// heartbeats would elect again). Defaults 32 MiB and 500 ms.
	ExcludeBacklog int
	ExcludeAfter   time.Duration
	// RedialMin and RedialMax bound the backoff between dials of a wanted node.
	RedialMin, RedialMax time.Duration
	Logger               *slog.Logger
}

// Refusals of a peer's RHELLO.
var (
	ErrOtherCluster = errors.New("route: node of another cluster")
	ErrSelf         = errors.New("route: route to this node itself")
	ErrVersion      = errors.New("route: unsupported route protocol version")
)

// Manager keeps one route to each node it is told about.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	group *outbound.Group

	mu     sync.Mutex
	routes map[string]*Route    // by node name, established
	wanted map[string]*wantNode // nodes membership says are there
	ln     net.Listener
	// leaving: the node is on its way out; it dials nobody any more.
	leaving bool
	outs    map[string]*outSession // by peer node name
	ins     map[string]*inSession  // by peer node id
	gen     uint64
	// watchers get a signal when a route comes or goes (WatchClientURLs).
	watchers map[chan struct{}]struct{}
	done     chan struct{}
	wg       sync.WaitGroup
	// flush wakes the flusher, which flushes the routes with interest frames queued.
	flush chan struct{}
	// raft receives the RRAFT batches of every route (HandleRaft).
	raft atomic.Pointer[raftReceiver]
	// authFailures counts the routes refused for ErrUnauthenticated or ErrTLS.
	authFailures atomic.Uint64
}

// RaftHandler takes an RRAFT batch from the named node, on that route's reader
// goroutine: it must not block for long, and batch is only valid during the call. An
// error says the batch is malformed: the route is closed as for any bad frame.
type RaftHandler func(from string, batch []byte) error

type raftReceiver struct {
	take      RaftHandler
	afterRead func()
}

// HandleRaft installs h as the receiver of the RRAFT batches of every route, and
// afterRead (if not nil) as what a route's reader calls, on its goroutine, once it
// has handed h every batch of one read and flushed what it queued itself: the
// receiver may queue batches in h and step them in afterRead. Before HandleRaft is
// called, batches that arrive are dropped, as Raft allows of any message.
func (m *Manager) HandleRaft(h RaftHandler, afterRead func()) {
	m.raft.Store(&raftReceiver{take: h, afterRead: afterRead})
}

// SendRaft queues an RRAFT frame carrying batch (copied) to the named node and wakes
// the route's writer. It reports false, having sent nothing, when there is no route
// to the node, or the route is excluded and makes no progress: Raft repeats what
// matters, and piling up behind a stalled peer only delays it. A route excluded
// for its backlog alone still carries Raft: each group bounds what it has in
// flight, and dropping its heartbeats would make the group elect again.
func (m *Manager) SendRaft(node string, batch []byte) bool {
	m.mu.Lock()
	r := m.routes[node]
	m.mu.Unlock()
	if r == nil || r.stalled.Load() {
		return false
	}
	if !r.q.Append(func(b []byte) []byte { return wire.AppendRouteRaft(b, batch) }) {
		return false
	}
	r.q.Flush()
	return true
}

type wantNode struct {
	addr   string
	cancel chan struct{} // closed when the node is dropped
}

// NewManager checks cfg and returns a manager; Serve accepts routes, Want dials.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Broker == nil || cfg.Local == nil {
		return nil, errors.New("route: a broker and a local interest count are required")
	}
	if cfg.Hello.NodeName == "" || cfg.Hello.NodeID == "" {
		return nil, errors.New("route: the node needs a name and an id")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 500 * time.Millisecond
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 4 * cfg.PingInterval
	}
	cfg.StaleAfter = max(cfg.StaleAfter, 2*cfg.PingInterval)
	if cfg.AuthKey != nil && len(cfg.AuthKey) != 32 {
		return nil, fmt.Errorf("route: an authentication key of %d bytes, want 32", len(cfg.AuthKey))
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	if cfg.TLS != nil {
		if set := cfg.TLS.Settings(); set.ClientAuth != "require" || set.CAFile == "" {
			return nil, fmt.Errorf("route: tls needs a CA file and client auth \"require\" (have %q, CA %q): both ends of a route present a certificate",
				set.ClientAuth, set.CAFile)
		}
	}
	if cfg.RedialMin <= 0 {
		cfg.RedialMin = 50 * time.Millisecond
	}
	if cfg.RedialMax < cfg.RedialMin {
		cfg.RedialMax = max(2*time.Second, cfg.RedialMin)
	}
	if cfg.ExcludeBacklog <= 0 {
		// Well above what a busy node falls behind by for a moment (50 ms of
		// 1 KiB publishes at 80 MB/s is 4 MiB): a peer that still reads is
		// excluded only far behind; one that stops is caught by ExcludeAfter.
		cfg.ExcludeBacklog = 32 << 20
	}
	if cfg.ExcludeAfter <= 0 {
		cfg.ExcludeAfter = 500 * time.Millisecond
	}
	if cfg.Outbound.NotSentLowat == 0 {
		// Keep a lagging peer's backlog in the route's queue, where the health
		// check sees it, not in a kernel buffer of megabytes.
		cfg.Outbound.NotSentLowat = 128 << 10
	}
	if cfg.Outbound.MaxPending <= 0 {
		cfg.Outbound.MaxPending = 64 << 20
	}
	if cfg.Outbound.WriteTimeout <= 0 {
		cfg.Outbound.WriteTimeout = 10 * time.Second
	}
	cfg.Hello.Version = wire.Version
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "route")
	g, err := outbound.NewGroup(cfg.Outbound, log)
	if err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	m := &Manager{cfg: cfg, log: log, group: g, routes: make(map[string]*Route), wanted: make(map[string]*wantNode),
		outs: make(map[string]*outSession), ins: make(map[string]*inSession), watchers: make(map[chan struct{}]struct{}),
		done: make(chan struct{}), flush: make(chan struct{}, 1)}
	m.wg.Add(2)
	go m.tick()
	go m.flusher()
	return m, nil
}

// Serve accepts routes from other nodes on l until Shutdown; with Config.TLS, as
// TLS servers, each handshake running in its route's goroutine.
func (m *Manager) Serve(l net.Listener) error {
	if m.cfg.TLS != nil {
		l = tlsconf.NewListener(l, m.cfg.TLS.ServerConfig(), m.cfg.HandshakeTimeout)
	}
	m.mu.Lock()
	m.ln = l
	m.mu.Unlock()
	closed := func() bool {
		select {
		case <-m.done:
			return true
		default:
			return false
		}
	}
	err := acceptloop.Run(l, m.log, closed, func(nc net.Conn) {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.serveRoute(nc, false)
		}()
	})
	if err != nil {
		return fmt.Errorf("route: accept: %w", err)
	}
	return nil
}

// Want tells the manager node name is a member reachable at addr: the node whose
// name sorts first keeps a route to it, dialling again while it is wanted.
func (m *Manager) Want(name, addr string) {
	if name == m.cfg.Hello.NodeName {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		return
	default:
	}
	if m.leaving {
		return
	}
	if w := m.wanted[name]; w != nil {
		if w.addr == addr {
			return
		}
		close(w.cancel)
	}
	w := &wantNode{addr: addr, cancel: make(chan struct{})}
	m.wanted[name] = w
	if m.cfg.Hello.NodeName < name {
		m.wg.Add(1)
		go m.dialLoop(name, w)
	}
}

// StopDialing keeps the routes that are up but dials no node again: a node leaving
// the cluster gracefully, whose peers are about to close their routes to it.
func (m *Manager) StopDialing() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaving = true
	for name, w := range m.wanted {
		close(w.cancel)
		delete(m.wanted, name)
	}
}

// Drop tells the manager node name left or was declared dead: its route closes and
// its interest is gone at once.
func (m *Manager) Drop(name string) {
	m.mu.Lock()
	if w := m.wanted[name]; w != nil {
		close(w.cancel)
		delete(m.wanted, name)
	}
	r := m.routes[name]
	// Gone for good: what it never acknowledged will not be wanted by anyone.
	delete(m.outs, name)
	m.mu.Unlock()
	if r != nil {
		r.dropInterest(true)
		r.q.Close(fmt.Errorf("node %s left the cluster", name))
	}
}

// dialLoop keeps a route to a wanted node.
func (m *Manager) dialLoop(name string, w *wantNode) {
	defer m.wg.Done()
	wait := m.cfg.RedialMin
	for {
		select {
		case <-w.cancel:
			return
		case <-m.done:
			return
		default:
		}
		nc, err := net.DialTimeout("tcp", w.addr, m.cfg.HandshakeTimeout)
		if err == nil && m.cfg.TLS != nil {
			// The handshake runs in serveRoute, bounded like the rest of the
			// route's; the peer's name is checked once its RHELLO says it.
			nc = tlsconf.Client(nc, m.cfg.TLS.PeerConfig())
		}
		if err == nil {
			if m.serveRoute(nc, true) {
				wait = m.cfg.RedialMin // it was up: dial again at once
			}
			// Refused: back off, as for a failed dial, so that a peer that
			// will never do (no certificate, no secret) is not redialled,
			// and the refusal logged, many times a second.
		} else {
			m.log.Debug("route dial failed", "node", name, "addr", w.addr, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-w.cancel:
			t.Stop()
			return
		case <-m.done:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, m.cfg.RedialMax)
	}
}

// serveRoute runs one route connection to its end; it reports whether the route
// came up.
func (m *Manager) serveRoute(nc net.Conn, dialed bool) (up bool) {
	r := newRoute(m, nc, dialed)
	buf := make([]byte, readBufSize)
	rest, err := r.handshake(buf)
	if err != nil {
		switch {
		case errors.Is(err, ErrTLS) || (m.cfg.TLS != nil && tlsRefusal(err)):
			// A TLS alert may come after the handshake (TLS 1.3: the acceptor
			// verifies the dialler's certificate once the dialler has finished).
			m.authFailures.Add(1)
			attrs := []any{"remote", nc.RemoteAddr().String(), "dialed", dialed}
			if r.peer.NodeName != "" { // it said who it is; its certificate may not
				attrs = append(attrs, "claimed_node", r.peer.NodeName)
			}
			m.log.Warn("route refused: TLS", append(attrs, "err", err, "hint", tlsHint)...)
		case errors.Is(err, ErrUnauthenticated):
			m.authFailures.Add(1)
			// The name is the peer's claim, which nothing proved.
			m.log.Warn("route refused: peer not authenticated", "remote", nc.RemoteAddr().String(), "dialed", dialed,
				"claimed_node", r.peer.NodeName, "err", err)
		case errors.Is(err, ErrRefusedByPeer):
			m.log.Warn("route refused by the peer", "remote", nc.RemoteAddr().String(), "dialed", dialed,
				"node", r.peer.NodeName, "err", err)
		default:
			m.log.Warn("route refused", "remote", nc.RemoteAddr().String(), "dialed", dialed, "err", err)
		}
		r.q.Close(err)
		r.q.Finish()
		return false
	}
	r.table = interest.NewTable(m.cfg.Lease, time.Now())
	r.heard.Store(time.Now().UnixNano())
	if !m.register(r) {
		r.q.Close(errors.New("duplicate route"))
		r.q.Finish()
		return false
	}
	if r.peerCert != nil {
		m.log.Info("route up", "node", r.peer.NodeName, "addr", nc.RemoteAddr().String(), "dialed", dialed,
			"tls", tls.VersionName(r.tlsVersion), "peer_cert", r.peerCert.Subject.String(), "peer_cert_serial", r.peerCert.SerialNumber.Text(16))
	} else {
		m.log.Info("route up", "node", r.peer.NodeName, "addr", nc.RemoteAddr().String(), "dialed", dialed)
	}
	// What the peer may have missed when the last route broke, then our interest,
	// then every change as it happens.
	if n := r.out.resend(&r.q); n > 0 {
		m.log.Info("route: re-sending unacknowledged messages", "node", r.peer.NodeName, "msgs", n)
	}
	m.cfg.Local.Listen(r)
	r.q.Flush()
	// Measured at once rather than at the first tick, so that monitoring has a round
	// trip for a route as soon as it is up.
	r.ping()
	filled := copy(buf, rest)
	err = r.run(buf, filled)
	m.cfg.Local.Forget(r)
	r.dropInterest(true)
	m.unregister(r)
	r.q.Close(err)
	r.q.Finish()
	m.log.Info("route down", "node", r.peer.NodeName, "err", err)
	return true
}

// accept checks a peer's RHELLO.
func (m *Manager) accept(h *wire.RouteHello) error {
	switch {
	case h.Version != wire.Version:
		return fmt.Errorf("%w: %d", ErrVersion, h.Version)
	case h.Cluster != m.cfg.Hello.Cluster:
		return fmt.Errorf("%w: %q (this one is %q)", ErrOtherCluster, h.Cluster, m.cfg.Hello.Cluster)
	case h.NodeID == m.cfg.Hello.NodeID:
		return ErrSelf
	case h.NodeName == m.cfg.Hello.NodeName:
		return fmt.Errorf("%w: another node calls itself %q too", ErrSelf, h.NodeName)
	}
	return nil
}

// register makes r the route to its node; an older route to the same node (a
// reconnect the old side has not noticed yet) gives way.
func (m *Manager) register(r *Route) bool {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		return false
	default:
	}
	old := m.routes[r.peer.NodeName]
	m.routes[r.peer.NodeName] = r
	if r.out = m.outs[r.peer.NodeName]; r.out == nil {
		r.out = &outSession{}
		m.outs[r.peer.NodeName] = r.out
	}
	if r.in = m.ins[r.peer.NodeID]; r.in == nil {
		r.in = &inSession{}
		m.ins[r.peer.NodeID] = r.in
	}
	m.notifyLocked()
	m.mu.Unlock()
	if old != nil {
		old.dropInterest(true)
		old.q.Close(errors.New("replaced by a newer route"))
	}
	return true
}

func (m *Manager) unregister(r *Route) {
	m.mu.Lock()
	if m.routes[r.peer.NodeName] == r {
		delete(m.routes, r.peer.NodeName)
		m.notifyLocked()
	}
	m.mu.Unlock()
}

// tick refreshes our interest on every route, expires the interest of peers whose
// refreshes stopped, and measures round trips.
func (m *Manager) tick() {
	defer m.wg.Done()
	refresh := time.NewTicker(m.cfg.Lease / 3)
	ping := time.NewTicker(m.cfg.PingInterval)
	health := time.NewTicker(min(50*time.Millisecond, m.cfg.ExcludeAfter/4))
	defer refresh.Stop()
	defer ping.Stop()
	defer health.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-health.C:
			now := time.Now() // the tick's own time is old if this goroutine ran late
			m.mu.Lock()
			routes := m.routeList()
			m.mu.Unlock()
			for _, r := range routes {
				m.checkHealth(r, now)
			}
		case <-refresh.C:
			now := time.Now()
			m.mu.Lock()
			m.gen++
			gen := m.gen
			routes := m.routeList()
			m.mu.Unlock()
			for _, r := range routes {
				r.refresh(gen)
				r.imu.Lock()
				expired := r.table.Expired(now)
				if expired && r.table.Len() > 0 {
					m.log.Warn("route: peer interest lease expired", "node", r.peer.NodeName)
					r.applyLocked(r.table.Clear())
				}
				r.imu.Unlock()
			}
		case <-ping.C:
			m.mu.Lock()
			routes := m.routeList()
			m.mu.Unlock()
			now := time.Now()
			for _, r := range routes {
				if silent := now.Sub(time.Unix(0, r.heard.Load())); silent > m.cfg.StaleAfter {
					m.log.Warn("route: nothing heard from the peer, closing", "node", r.peer.NodeName, "silent", silent.Round(time.Millisecond))
					r.q.Close(fmt.Errorf("nothing heard from %s for %v", r.peer.NodeName, silent.Round(time.Millisecond)))
					continue
				}
				r.ping()
			}
		}
	}
}

func (m *Manager) kickFlusher() {
	select {
	case m.flush <- struct{}{}:
	default:
	}
}

// flusher flushes the routes that interest changes queued frames on, once per
// wake-up however many changes came in the meantime.
func (m *Manager) flusher() {
	defer m.wg.Done()
	for {
		select {
		case <-m.done:
			return
		case <-m.flush:
		}
		m.mu.Lock()
		routes := m.routeList()
		m.mu.Unlock()
		for _, r := range routes {
			if r.interestDirty.Swap(false) {
				r.q.Flush()
			}
		}
	}
}

// checkHealth excludes a route that is too far behind or whose writer is stuck,
// and re-admits it once it has drained. Stuck means a write to the socket that
// has sent nothing for ExcludeAfter: the peer stopped reading. Bytes waiting for
// the writer to take them say nothing about the peer, and neither does a pause of
// this process (a check that comes late: descheduled, stopped, a long GC), so a
// write is judged only from when the checks ran on time again.
func (m *Manager) checkHealth(r *Route, now time.Time) {
	pending := r.q.Pending()
	since, writing := r.q.WriteBlockedSince()
	stalled := r.stall.check(now, since, writing, m.cfg.ExcludeAfter)
	if r.excluded.Load() {
		r.stalled.Store(stalled)
	}
	if !r.excluded.Load() {
		if pending > m.cfg.ExcludeBacklog || stalled {
			r.stalled.Store(stalled)
			r.excluded.Store(true)
			r.exclusions.Add(1)
			m.log.Warn("route excluded: peer behind", "node", r.peer.NodeName, "pending_bytes", pending, "stalled", stalled)
		}
		return
	}
	if pending <= m.cfg.ExcludeBacklog/4 && !stalled {
		r.out.readmit(r)
		m.log.Info("route re-admitted", "node", r.peer.NodeName, "pending_bytes", pending)
	}
}

// stallClock tells a peer that stopped reading from a pause of this process. A
// check that comes more than half the limit after the one before means this
// process did not run meanwhile; a write blocked across that gap is judged only
// from the late check on.
type stallClock struct {
	checkedAt time.Time // the last check
	resumedAt time.Time // the last check that came late
}

// check reports whether a write blocked since since (writing: one is under way)
// has sent nothing for longer than limit, as of now.
func (c *stallClock) check(now, since time.Time, writing bool, limit time.Duration) bool {
	if !c.checkedAt.IsZero() && now.Sub(c.checkedAt) > limit/2 {
		c.resumedAt = now
	}
	c.checkedAt = now
	if since.Before(c.resumedAt) {
		since = c.resumedAt
	}
	return writing && now.Sub(since) > limit
}

func (m *Manager) routeList() []*Route {
	out := make([]*Route, 0, len(m.routes))
	for _, r := range m.routes {
		out = append(out, r)
	}
	return out
}

// Routes describes the established routes, by node name.
func (m *Manager) Routes() []Info {
	m.mu.Lock()
	routes := m.routeList()
	m.mu.Unlock()
	out := make([]Info, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// AuthFailures counts the routes this node refused because their peer did not
// prove it has the cluster secret (or asked for a proof this node cannot give),
// or, with TLS, did not present a valid certificate of the CA (or refused ours,
// or spoke TLS to a node without).
func (m *Manager) AuthFailures() uint64 { return m.authFailures.Load() }

// Authenticated reports whether routes prove the cluster secret (Config.AuthKey).
func (m *Manager) Authenticated() bool { return m.cfg.AuthKey != nil }

// TLS reports whether routes run over mutual TLS (Config.TLS).
func (m *Manager) TLS() bool { return m.cfg.TLS != nil }

// Unacked reports how many messages forwarded to node name await its
// acknowledgement, and how many were let go over the limits.
func (m *Manager) Unacked(name string) (msgs int, dropped uint64) {
	m.mu.Lock()
	s := m.outs[name]
	m.mu.Unlock()
	if s == nil {
		return 0, 0
	}
	return s.pending()
}

// ClientURLs lists the client URLs of every node with a route, and ours.
func (m *Manager) ClientURLs() []string {
	urls := append([]string(nil), m.cfg.Hello.ClientURLs...)
	for _, in := range m.Routes() {
		urls = append(urls, in.ClientURLs...)
	}
	sort.Strings(urls)
	return urls
}

// WatchClientURLs returns a channel that receives a signal after a route comes or
// goes, when ClientURLs may have changed. Signals coalesce: a reader busy while
// several changes happen gets one for all of them, and reads ClientURLs afterwards.
// stop ends the watch and closes the channel; Shutdown closes every watch's channel.
func (m *Manager) WatchClientURLs() (ch <-chan struct{}, stop func()) {
	c := make(chan struct{}, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		close(c)
		return c, func() {}
	default:
	}
	m.watchers[c] = struct{}{}
	return c, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.watchers[c]; ok {
			delete(m.watchers, c)
			close(c)
		}
	}
}

// notifyLocked signals every watch without waiting for its reader. m.mu is held, so
// that no signal races with a watch's close.
func (m *Manager) notifyLocked() {
	for c := range m.watchers {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Shutdown closes the listener and every route and waits for their goroutines.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		return
	default:
	}
	close(m.done)
	if m.ln != nil {
		_ = m.ln.Close()
	}
	for name, w := range m.wanted {
		close(w.cancel)
		delete(m.wanted, name)
	}
	for c := range m.watchers {
		delete(m.watchers, c)
		close(c)
	}
	routes := m.routeList()
	m.mu.Unlock()
	for _, r := range routes {
		r.q.Close(errors.New("node shutting down"))
	}
	m.wg.Wait()
}
