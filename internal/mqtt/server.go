package mqtt

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/acceptloop"
	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/store"
)

// Queue-full policies of offline and over-window sessions.
const (
	PolicyDropNew = "drop-new" // refuse the newest message
	PolicyDropOld = "drop-old" // evict the oldest queued message
)

// Config bounds what clients may do. Zero values are replaced by the defaults of
// DefaultConfig when the server is made.
type Config struct {
	MaxConnections int // MQTT connections at once
	// MaxPacketSize bounds a whole packet from a client; larger ones close the
	// connection (reason 0x95). Advertised to v5 clients.
	MaxPacketSize int
	// ReceiveMaximum bounds the QoS 2 publishes a client may have unreleased at once;
	// advertised to v5 clients (reason 0x93 when exceeded).
	ReceiveMaximum int
	// MaxInflight bounds QoS 1 and 2 messages sent to a client and not yet acknowledged;
	// a v5 client's smaller receive maximum wins.
	MaxInflight int
	// MaxQueued bounds the messages a session holds behind its in-flight window and
	// while its client is away; QueuePolicy says which message goes when it is full.
	MaxQueued   int
	QueuePolicy string
	// MaxSessionExpiry caps the session expiry a client asks for; it is also the
	// expiry of MQTT 3.x sessions that are not clean. 0 means sessions never expire.
	MaxSessionExpiry time.Duration
	// TopicAliasMaximum is how many topic aliases a v5 client may set (0 disables).
	TopicAliasMaximum int
	// OutboundTopicAliases is how many topic aliases the server uses on the PUBLISH
	// packets it sends one v5 client, if the client's Topic Alias Maximum allows as
	// many (0 disables). Each alias keeps a copy of its topic while the connection lasts.
	OutboundTopicAliases int
	// MaxPending bounds bytes queued for a client's socket; QoS 0 messages over it
	// meet the slow-consumer policy (QoS 1 and 2 are bounded by the in-flight
	// window instead).
	MaxPending int64
	// SlowConsumerPolicy is "drop" (count and drop the QoS 0 message, the default)
	// or "disconnect" (close the connection; a v5 client gets reason 0x97).
	SlowConsumerPolicy string
	// NotSentLowat bounds the unsent bytes of a client's TCP socket
	// (outbound.Config.NotSentLowat); 0 leaves the kernel's default.
	NotSentLowat   int
	ConnectTimeout time.Duration
	WriteTimeout   time.Duration
	// MaxKeepAlive caps the keepalive a client asks for (and replaces 0, "none"); the
	// v5 server keep alive property tells the client. 0 accepts what clients ask.
	MaxKeepAlive time.Duration
	// StoreDir, when set, keeps persistent sessions and retained messages across
	// restarts in this directory, written with the given fsync policy.
	StoreDir     string
	Sync         store.SyncPolicy
	SyncInterval time.Duration
	// Replicated: the server is a cluster node and keeps persistent sessions and
	// retained messages in the cluster's MQTT group (SetReplication), not in
	// StoreDir.
	Replicated bool
	// SysInterval is how often the $SYS/broker/... topics are published; 0 means
	// every 10 s, negative never.
	SysInterval time.Duration
	// Version is the server version shown in $SYS/broker/version.
	Version string
	// Auth, when set, authenticates each CONNECT and gives its client the
	// permissions of its user (docs/mqtt.md); without it every client may do
	// anything.
	Auth *auth.Authenticator
	// IdleAfter is how long a connection goes without a byte from its client before
	// it gives up its reader goroutine and waits in the server's epoll set (Linux),
	// so that idle connections cost little memory; 0 means 2 s, negative never
	// parks. A freshly connected client is not parked before it has been idle
	// this long either: its first SUBSCRIBE is read by a running reader.
	IdleAfter time.Duration
}

// DefaultConfig is the configuration `tern server` uses unless told otherwise.
func DefaultConfig() Config {
	return Config{
		MaxConnections:       65536,
		MaxPacketSize:        1<<20 + 64<<10,
		ReceiveMaximum:       1024,
		MaxInflight:          1024,
		MaxQueued:            10000,
		QueuePolicy:          PolicyDropNew,
		MaxSessionExpiry:     0,
		TopicAliasMaximum:    1024,
		OutboundTopicAliases: 16,
		MaxPending:           64 << 20,
		ConnectTimeout:       10 * time.Second,
		WriteTimeout:         10 * time.Second,
	}
}

func (c *Config) fillDefaults() error {
	d := DefaultConfig()
	if c.IdleAfter == 0 {
		c.IdleAfter = 2 * time.Second
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = d.MaxPacketSize
	}
	if c.MaxPacketSize > 268435460 {
		return fmt.Errorf("mqtt: max packet size %d over the protocol's 268435460", c.MaxPacketSize)
	}
	if c.ReceiveMaximum <= 0 {
		c.ReceiveMaximum = d.ReceiveMaximum
	}
	if c.ReceiveMaximum > 65535 {
		c.ReceiveMaximum = 65535
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = d.MaxInflight
	}
	if c.MaxInflight > 65535 {
		c.MaxInflight = 65535
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = d.MaxQueued
	}
	switch c.QueuePolicy {
	case "":
		c.QueuePolicy = d.QueuePolicy
	case PolicyDropNew, PolicyDropOld:
	default:
		return fmt.Errorf("mqtt: queue policy %q: want %s or %s", c.QueuePolicy, PolicyDropNew, PolicyDropOld)
	}
	if c.TopicAliasMaximum < 0 || c.TopicAliasMaximum > 65535 {
		return fmt.Errorf("mqtt: topic alias maximum %d out of 0..65535", c.TopicAliasMaximum)
	}
	if c.OutboundTopicAliases < 0 || c.OutboundTopicAliases > 65535 {
		return fmt.Errorf("mqtt: outbound topic aliases %d out of 0..65535", c.OutboundTopicAliases)
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.SlowConsumerPolicy == "" {
		c.SlowConsumerPolicy = outbound.PolicyDrop.String()
	}
	if _, err := outbound.ParsePolicy(c.SlowConsumerPolicy); err != nil {
		return fmt.Errorf("mqtt: %w", err)
	}
	return nil
}

// Server accepts MQTT connections and keeps the sessions of MQTT clients.
type Server struct {
	cfg    Config
	smCfg  sm.Config // the session machines'
	broker *broker.Broker
	log    *slog.Logger
	start  time.Time

	retained *retainStore
	kv       *kvStore // nil without a store directory or cluster
	state    *State   // the cluster's MQTT group, nil alone
	nodeName string   // this cluster node's name, "" alone
	// pubIDs numbers the publications proposed to the MQTT group, from a random
	// start in the high half, so that ids of different nodes and lives differ.
	pubIDs atomic.Uint64
	// life tells this run of the node from its earlier ones (wills.go);
	// orphanWills is when each will record nobody will publish was found (owned
	// by AdoptOrphans' caller).
	life        string
	orphanWills map[string]time.Time
	// disowned is when this node let each session go to another node (guarded
	// by mu; AdoptOrphans leaves them alone a while).
	disowned map[string]time.Time

	mu        sync.Mutex
	sessions  map[string]*session
	conns     []*conn // by conn.slot
	attachedN int     // of conns, those that finished CONNECT
	lns       []net.Listener
	closing   bool

	wg      sync.WaitGroup
	poll    *poller       // idle connections; nil where there is no epoll or parking is off
	quit    chan struct{} // closed by Shutdown
	sysDone chan struct{}

	// groups hold the outbound configuration and the counters of the connections
	// of each transport ("tcp", "ws", "tls", "wss"); per-message counters live in each
	// connection and are added to its group when it goes.
	groups map[string]*outbound.Group
	// queueDrops counts QoS 1/2 messages refused by a full session queue.
	queueDrops atomic.Uint64
	// registry records the clients in the cluster (nil alone); claims are this
	// server's records, by client id. Both guarded by mu.
	registry Registry
	claims   map[string]claim
	// stopReloads ends the checks of the sessions after each reload of the
	// users file (reload.go); nil without authentication.
	stopReloads func()
}

// NewServer makes an MQTT server publishing into and subscribing on b.
func NewServer(cfg Config, b *broker.Broker, log *slog.Logger) (*Server, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	policy, _ := outbound.ParsePolicy(cfg.SlowConsumerPolicy) // checked by fillDefaults
	groups := make(map[string]*outbound.Group)
	for _, transport := range []string{"tcp", "ws", "tls", "wss"} {
		g, err := outbound.NewGroup(outbound.Config{MaxPending: cfg.MaxPending, Policy: policy, WriteTimeout: cfg.WriteTimeout,
			NotSentLowat: cfg.NotSentLowat},
			log.With("transport", transport))
		if err != nil {
			return nil, fmt.Errorf("mqtt: %w", err)
		}
		groups[transport] = g
	}
	s := &Server{
		groups: groups,
		cfg:    cfg, broker: b, log: log, start: time.Now(),
		retained: newRetainStore(),
		sessions: make(map[string]*session),
		quit:     make(chan struct{}),
		sysDone:  make(chan struct{}),
	}
	s.smCfg = sm.Config{
		MaxInflight: cfg.MaxInflight, MaxQueued: cfg.MaxQueued, DropOld: cfg.QueuePolicy == PolicyDropOld,
		ReceiveMaximum: cfg.ReceiveMaximum, MaxPacketSize: cfg.MaxPacketSize,
		TopicAliasMaximum: cfg.TopicAliasMaximum, OutboundTopicAliases: cfg.OutboundTopicAliases,
		MaxSessionExpiry: cfg.MaxSessionExpiry, MaxKeepAlive: cfg.MaxKeepAlive,
	}
	if cfg.Replicated {
		s.kv = newReplicatedKV(log)
		s.smCfg.Persist, s.smCfg.StoredElsewhere = true, true
		s.retained.kv = s.kv
	} else if cfg.StoreDir != "" {
		kv, data, err := openKV(cfg.StoreDir, cfg.Sync, cfg.SyncInterval, log)
		if err != nil {
			return nil, err
		}
		s.kv = kv
		s.smCfg.Persist = true
		s.retained.kv = kv
		s.restore(data)
	}
	if cfg.IdleAfter > 0 {
		p, err := newPoller()
		if err != nil {
			if s.kv != nil {
				_ = s.kv.close()
			}
			return nil, err
		}
		s.poll = p
	}
	if cfg.Auth != nil {
		s.stopReloads = cfg.Auth.OnReload(s.usersReloaded)
	}
	if cfg.SysInterval >= 0 {
		go func() {
			defer close(s.sysDone)
			s.sysLoop(cmp.Or(cfg.SysInterval, 10*time.Second))
		}()
	} else {
		close(s.sysDone)
	}
	return s, nil
}

// restore rebuilds persistent sessions and retained messages from storage. Sessions
// come back disconnected, their expiry counted from now.
func (s *Server) restore(data map[string][]byte) {
	type stored struct {
		mid uint64
		m   *outMsg
	}
	msgs := make(map[string][]stored)
	qos2 := make(map[string][]uint16)
	for key, val := range data {
		if len(key) < 2 {
			s.log.Error("mqtt state: bad key, dropped", "key", key)
			s.kv.del(key)
			continue
		}
		kind, rest := key[:2], key[2:]
		switch kind {
		case kvRetained:
			rm, err := decodeRetained(rest, val)
			if err != nil {
				s.log.Error("mqtt state: bad retained message, dropped", "subject", rest, "err", err)
				s.kv.del(key)
				continue
			}
			s.retained.m[rest] = rm
		case kvSession:
			var rec sessionRecord
			if err := json.Unmarshal(val, &rec); err != nil {
				s.log.Error("mqtt state: bad session record, dropped", keyAttr(rest), "err", err)
				s.kv.del(key)
				continue
			}
			sess := newSession(s, rest)
			sess.m.Restore(time.Duration(rec.Expiry))
			acc := sess.restoreOwner(rec.User)
			for _, sr := range rec.Subs {
				e, err := newSub(sr.Filter, sr.QoS, sr.NoLocal, sr.RAP, sr.SubID)
				if err != nil {
					s.log.Error("mqtt state: subscription not restored", keyAttr(rest), "filter", sr.Filter, "err", err)
					continue
				}
				if !s.mayKeep(acc, e) {
					s.log.Warn("mqtt state: subscription dropped, its user may no longer make it", keyAttr(rest), "user", rec.User, "filter", sr.Filter)
					continue
				}
				sess.m.RestoreSub(e)
			}
			s.sessions[rest] = sess
		case kvMessage, kvQoS2:
			// The id must be as msgKey and qos2Key write it: those keys are deleted later.
			client, n, ok := parseIDKey(kind, rest)
			if !ok {
				s.log.Error("mqtt state: bad key, dropped", "key", key)
				s.kv.del(key)
				continue
			}
			if kind == kvQoS2 {
				qos2[client] = append(qos2[client], uint16(n))
				continue
			}
			m, err := decodeOutMsg(val)
			if err != nil {
				s.log.Error("mqtt state: bad queued message, dropped", keyAttr(client), "err", err)
				s.kv.del(key)
				continue
			}
			m.MID = n
			msgs[client] = append(msgs[client], stored{n, m})
		default:
			s.kv.del(key)
		}
	}
	for client, list := range msgs {
		sess := s.sessions[client]
		if sess == nil {
			for _, st := range list {
				s.kv.del(msgKey(client, st.mid))
			}
			continue
		}
		slices.SortFunc(list, func(a, b stored) int { return cmp.Compare(a.mid, b.mid) })
		for _, st := range list {
			sess.m.RestoreMsg(st.m)
		}
	}
	for client, pids := range qos2 {
		sess := s.sessions[client]
		for _, pid := range pids {
			if sess == nil {
				s.kv.del(qos2Key(client, pid))
				continue
			}
			sess.m.RestoreQoS2(pid)
		}
	}
	// Each session subscribes and arms its timer; one that ends at once takes s.mu
	// to leave the map, so the loop works on a copy.
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	for _, sess := range sessions {
		_ = sess.step(func(now time.Time) error {
			sess.m.Restored(now)
			return nil
		})
	}
	if len(sessions) > 0 || len(s.retained.m) > 0 {
		s.log.Info("mqtt state restored", "sessions", len(sessions), "retained", len(s.retained.m))
	}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("mqtt: server closed")

// Serve accepts connections on l until Shutdown or an accept error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	closing := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closing
	}
	if err := acceptloop.Run(l, s.log, closing, s.ServeConn); err != nil {
		return err
	}
	return ErrServerClosed
}

// ServeConn serves one connection (any net.Conn: TCP, WebSocket) in new goroutines.
func (s *Server) ServeConn(nc net.Conn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	c := newConn(s, outbound.NextConnID(), nc)
	c.slot = int32(len(s.conns))
	s.conns = append(s.conns, c)
	s.wg.Add(1)
	s.mu.Unlock()
	s.groups[c.transport()].Opened(nc)
	go c.run() // its finish marks s.wg done, whichever goroutine reads by then
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.attached.Load() {
		s.attachedN--
	}
	s.releaseLocked(c)
	s.groups[c.transport()].Retire(&c.q, c.inMsgs.Load(), c.inBytes.Load())
	last := len(s.conns) - 1
	moved := s.conns[last]
	s.conns[c.slot], moved.slot = moved, c.slot
	s.conns[last] = nil
	s.conns = s.conns[:last]
	if cap(s.conns) > 1024 && len(s.conns) < cap(s.conns)/4 {
		s.conns = append([]*conn(nil), s.conns...) // let a crowd that left go
	}
}

// connected counts connections that finished CONNECT.
func (s *Server) connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attachedN
}

// Shutdown stops accepting, tells v5 clients the server is shutting down, closes every
// connection and waits up to timeout for them to end.
func (s *Server) Shutdown(timeout time.Duration) error {
	s.mu.Lock()
	if !s.closing {
		close(s.quit)
	}
	s.closing = true
	lns := s.lns
	s.lns = nil
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	if s.stopReloads != nil {
		s.stopReloads()
	}
	for _, l := range lns {
		_ = l.Close()
	}
	for _, c := range conns {
		c.disconnect(packet.ServerShuttingDown, "server shutting down")
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		return fmt.Errorf("mqtt: %d connections still open after %v", len(conns), timeout)
	}
	<-s.sysDone
	s.poll.close()
	s.mu.Lock()
	for _, sess := range s.sessions {
		sess.stopTimer()
	}
	s.mu.Unlock()
	if s.kv != nil {
		if err := s.kv.close(); err != nil {
			return fmt.Errorf("mqtt state: %w", err)
		}
	}
	return nil
}

// Stats are the MQTT front end's counters.
type Stats struct {
	// Connections (those that finished CONNECT), TotalConnections, PUBLISH packets
	// and payload bytes received and sent, SlowConsumers, and Dropped: QoS 0
	// messages dropped for slow clients or their size limits, and messages full
	// session queues refused.
	outbound.Totals
	Idle     int // of the connections, idle ones waiting in the poller without a reader
	Sessions int // sessions kept, connected or not
	Retained int // retained messages held
}

// QueueDrops is how many QoS 1/2 messages full session queues refused.
func (s *Server) QueueDrops() uint64 { return s.queueDrops.Load() }

// Stats returns the counters of every connection and of the server.
func (s *Server) Stats() Stats { return s.TransportStats("") }

// TransportStats returns the counters of the connections of transport ("tcp", "ws", "tls", "wss"),
// or of all when it is ""; sessions, retained messages and session-queue drops are
// the server's and counted only with "".
func (s *Server) TransportStats(transport string) Stats {
	var st Stats
	if transport == "" {
		st.Dropped = s.queueDrops.Load()
		st.Idle, st.Retained = s.poll.parkedCount(), s.retained.count()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if transport == "" {
		st.Sessions = len(s.sessions)
	}
	for t, g := range s.groups {
		if transport == "" || t == transport {
			g.AddGone(&st.Totals)
		}
	}
	attached := 0
	for _, c := range s.conns {
		if transport != "" && c.transport() != transport {
			continue
		}
		if c.attached.Load() {
			attached++
		}
		st.AddLive(&c.q, c.inMsgs.Load(), c.inBytes.Load())
	}
	st.Connections = attached // those that finished CONNECT
	return st
}

// Connections returns a snapshot of every connection that finished CONNECT.
func (s *Server) Connections() []ConnInfo { return s.TransportConnections("") }

// TransportConnections is Connections for the connections of one transport, or of
// all when it is "".
func (s *Server) TransportConnections(transport string) []ConnInfo {
	s.mu.Lock()
	conns := make([]*conn, 0, s.attachedN)
	for _, c := range s.conns {
		if c.attached.Load() && (transport == "" || c.transport() == transport) {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	out := make([]ConnInfo, len(conns))
	for i, c := range conns {
		out[i] = c.snapshot()
	}
	return out
}

// attach binds c, whose CONNECT p was accepted from the user of access a, to the
// session of clientID, made if there is none (or it has just ended). The session machine negotiates, writes the
// CONNACK first on c, and kicks a connection that had the session. c counts as
// connected before the client can see its CONNACK, so that a connection it opens
// next meets the connection limit with this one in it. Under s.mu, so that the
// session cannot leave the map (forget) while it is being bound.
func (s *Server) attach(c *conn, clientID string, p *packet.Connect, opts sm.ConnectOpts, a *access) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrServerClosed
	}
	sess := s.sessions[clientID]
	if sess == nil || sess.ended() {
		sess = nil
		if s.state != nil {
			sess = s.replicatedSession(clientID)
			if sess != nil {
				sess.mu.Lock()
				sess.saveRecordLocked() // hosted here from now on
				sess.mu.Unlock()
			}
		}
		if sess == nil {
			sess = newSession(s, clientID)
		}
		s.sessions[clientID] = sess
	}
	c.readAt.Store(time.Now().UnixNano())
	c.attached.Store(true)
	s.attachedN++
	s.claimLocked(c, clientID)
	sess.connect(c, p, opts, a)
	return sess, nil
}

// forget removes a session that ended from the map, unless a client has connected
// to it again meanwhile.
func (s *Server) forget(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.id] == sess && sess.ended() {
		delete(s.sessions, sess.id)
		if s.state != nil {
			s.noteDisownedLocked(sess.id) // its record's delete may not be committed yet
		}
	}
}

// publish routes a message the server itself makes (wills, $SYS).
func (s *Server) publish(m *broker.Message) {
	var b broker.Batch
	if m.Retain {
		s.retained.set(m)
	}
	if s.state != nil && m.QoS > 0 {
		s.proposePublish(m, "", 0, 0, nil)
	}
	s.broker.Publish(&b, m)
	b.Flush()
}

// isReserved reports topics MQTT clients may not publish to.
func isReserved(topic string) bool { return strings.HasPrefix(topic, "$") }
