package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/acceptloop"
	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/kafka/group"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream"
)

// DefaultMaxRequestSize is the largest request accepted by default, as Kafka's
// socket.request.max.bytes.
const DefaultMaxRequestSize = 100 << 20

// maxOtherRequest bounds every request but Produce: none needs more, and a small
// bound keeps what a malformed request can make the decoder allocate small.
const maxOtherRequest = 8 << 20

// Config is the Kafka front end's configuration.
type Config struct {
	// Advertise is the host:port Metadata gives clients; "" means the listener's
	// address, with 127.0.0.1 for an unspecified host. TLSAdvertise is the same
	// for the clients of a TLS listener (ServeTLS).
	Advertise, TLSAdvertise string
	// AutoCreate creates a topic's stream on the first Produce or Metadata request
	// that names a topic that does not exist.
	AutoCreate bool
	// Uncompressed makes topics made by the Kafka API store their messages as
	// they are unless their compression.type says otherwise (the broker's
	// compression.type=uncompressed); by default they store S2 blocks
	// (compression.type=producer).
	Uncompressed bool
	// MaxRequestSize bounds a request's size; a larger one closes the connection,
	// as Kafka does. 0 means DefaultMaxRequestSize.
	MaxRequestSize int
	// MaxConnections bounds the connections at once; 0 means no limit.
	MaxConnections int
	// ClusterID is the cluster id Metadata and DescribeCluster report.
	ClusterID string
	// MaxPayload is the server's largest message, reported as the broker's
	// message.max.bytes.
	MaxPayload int
	// SegmentBytes is the server's stream segment size (segment_size),
	// reported as the segment.bytes of a topic that does not set its own.
	SegmentBytes int64
	// DefaultReplicas is the replica count of a topic made without a
	// replication factor in a cluster (the server's stream_replicas); 0 is 1.
	DefaultReplicas int
	// Coordinators chooses each consumer group's coordinator; nil: this node
	// coordinates every group.
	Coordinators Coordinators
	// Groups bounds the consumer groups' session timeouts and sets their initial
	// rebalance delay (zero fields: Kafka's defaults).
	Groups group.Config
	// Auth checks the clients' SASL credentials and gives each its permissions,
	// and decides whether a client may stay anonymous (sasl.go, authz.go); nil:
	// every client may do anything, and SASL is refused.
	Auth *auth.Authenticator
	// Outbound limits shared with the other front ends.
	MaxPending         int64
	SlowConsumerPolicy string
	WriteTimeout       time.Duration
	NotSentLowat       int
}

// Server serves Kafka clients from the streams of one node.
type Server struct {
	cfg     Config
	broker  *broker.Broker
	streams *stream.Manager
	log     *slog.Logger
	// groups of the connections of each transport ("tcp", "tls"): their counters.
	tgroups map[string]*outbound.Group
	acks    *inbox
	prods   *producers
	// fetchSessions are the incremental fetch sessions of every connection.
	fetchSessions fetchSessions
	api           *apiClient // stream API requests (committed offsets)
	coords        Coordinators
	groups        *groups

	advertise    atomic.Pointer[string]  // host:port, set by Serve
	advertiseTLS atomic.Pointer[string]  // host:port, set by ServeTLS
	clusterOf    atomic.Pointer[Cluster] // set by SetCluster
	maxWait      time.Duration           // bounds a fetch's max.wait.ms
	parkMax      time.Duration           // when set, bounds a parked join or sync (the fuzz target's)

	// createMu serialises topic creation, so that concurrent auto-creations of one
	// topic make it once.
	createMu sync.Mutex
	// ids caches topic ids to names (topics.go).
	idMu sync.Mutex
	ids  map[[16]byte]string

	// Records fetched (and their batches' bytes) by connections that have gone,
	// of plain TCP [0] and of TLS [1].
	goneOut, goneOutBytes [2]atomic.Uint64

	mu        sync.Mutex
	conns     map[uint64]*conn
	listeners []net.Listener
	closing   bool
	wg        sync.WaitGroup
	done      chan struct{} // closed at Shutdown: waiting fetches and produces end
	// stopReloads ends the checks of the connections after each reload of the
	// users file (sasl.go); nil without authentication.
	stopReloads func()
}

// NewServer returns a Kafka front end publishing through b and serving the streams
// of m.
func NewServer(cfg Config, b *broker.Broker, m *stream.Manager, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		return nil, errors.New("kafka: the Kafka API needs streams (store_dir)")
	}
	if cfg.MaxRequestSize <= 0 {
		cfg.MaxRequestSize = DefaultMaxRequestSize
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = store.DefaultSegmentBytes
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = "tern"
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 64 << 20
	}
	if cfg.SlowConsumerPolicy == "" {
		cfg.SlowConsumerPolicy = outbound.PolicyDrop.String()
	}
	for _, adv := range []string{cfg.Advertise, cfg.TLSAdvertise} {
		if adv != "" {
			if _, _, err := splitHostPort(adv); err != nil {
				return nil, fmt.Errorf("kafka: advertise %q: %w", adv, err)
			}
		}
	}
	policy, err := outbound.ParsePolicy(cfg.SlowConsumerPolicy)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	// A response is never refused as a slow consumer's delivery would be: pending
	// bytes bound how far a connection reads ahead instead (conn.go).
	tgroups := make(map[string]*outbound.Group)
	for _, transport := range []string{"tcp", "tls"} {
		g, err := outbound.NewGroup(outbound.Config{MaxPending: cfg.MaxPending, Policy: policy,
			WriteTimeout: cfg.WriteTimeout, NotSentLowat: cfg.NotSentLowat}, log)
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		tgroups[transport] = g
	}
	s := &Server{cfg: cfg, broker: b, streams: m, log: log, tgroups: tgroups,
		prods: newProducers(), ids: make(map[[16]byte]string),
		conns: make(map[uint64]*conn), done: make(chan struct{}), maxWait: maxFetchWait}
	s.acks, err = newInbox(b)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s.api = newAPIClient(b)
	s.coords = cfg.Coordinators
	if s.coords == nil {
		s.coords = nodeCoordinators{s}
	}
	s.groups = newGroups(s, cfg.Groups)
	if cfg.Auth != nil {
		s.stopReloads = cfg.Auth.OnReload(s.usersReloaded)
	}
	return s, nil
}

func splitHostPort(hp string) (string, int32, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q: want 1 to 65535", p)
	}
	return host, int32(port), nil
}

// advertised is the host and port Metadata gives clients of plain TCP, and of
// TLS (0 when no TLS listener is served).
func (s *Server) advertised() (host string, port int32, tlsHost string, tlsPort int32) {
	host, port = "127.0.0.1", 9092
	if p := s.advertise.Load(); p != nil {
		if h, pt, err := splitHostPort(*p); err == nil {
			host, port = h, pt
		}
	}
	if p := s.advertiseTLS.Load(); p != nil {
		if h, pt, err := splitHostPort(*p); err == nil {
			tlsHost, tlsPort = h, pt
		}
	}
	return host, port, tlsHost, tlsPort
}

// Serve accepts connections on l until l is closed or the server shuts down.
func (s *Server) Serve(l net.Listener) error { return s.serve(l, false) }

// ServeTLS is Serve for a listener whose connections are TLS (the caller wraps
// it): Metadata tells its clients the brokers' TLS addresses.
func (s *Server) ServeTLS(l net.Listener) error { return s.serve(l, true) }

func (s *Server) serve(l net.Listener, secure bool) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	adv, to := s.cfg.Advertise, &s.advertise
	if secure {
		adv, to = s.cfg.TLSAdvertise, &s.advertiseTLS
	}
	if adv == "" {
		adv = l.Addr().String()
		if a, ok := l.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
			adv = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
		}
	}
	to.CompareAndSwap(nil, &adv)
	if err := acceptloop.Run(l, s.log, s.isClosing, func(nc net.Conn) { s.serveConn(nc, secure) }); err != nil {
		return fmt.Errorf("kafka: accept on %s: %w", l.Addr(), err)
	}
	return nil
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) serveConn(nc net.Conn, secure bool) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := newConn(s, outbound.NextConnID(), nc, secure)
	s.mu.Lock()
	if s.closing || (s.cfg.MaxConnections > 0 && len(s.conns) >= s.cfg.MaxConnections) {
		closing := s.closing
		s.mu.Unlock()
		if !closing {
			s.log.Warn("connection refused: limit reached", "remote", nc.RemoteAddr().String(), "max_connections", s.cfg.MaxConnections)
		}
		_ = nc.Close() // Kafka has no way to say why before a request
		return
	}
	s.conns[c.id] = c
	s.wg.Add(1)
	s.mu.Unlock()
	s.tgroups[c.transport()].Opened(nc)
	go func() {
		defer s.wg.Done()
		c.run()
	}()
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	s.tgroups[c.transport()].Retire(&c.q, c.inMsgs.Load(), c.inBytes.Load())
	s.goneOut[c.tlsIndex()].Add(c.outMsgs.Load())
	s.goneOutBytes[c.tlsIndex()].Add(c.outByte.Load())
	delete(s.conns, c.id)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes every connection (requests being handled are
// answered first) and waits for them up to timeout.
func (s *Server) Shutdown(timeout time.Duration) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	close(s.done)
	if s.stopReloads != nil {
		s.stopReloads()
	}
	for _, l := range s.listeners {
		_ = l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.q.Close(errServerClosing)
	}
	waited := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(waited)
	}()
	var err error
	select {
	case <-waited:
	case <-time.After(timeout):
		err = fmt.Errorf("kafka: %d connections still open after %v", len(conns), timeout)
		for _, c := range conns {
			_ = c.nc.Close()
		}
	}
	s.acks.close()
	s.groups.close()
	s.api.close()
	return err
}

var errServerClosing = errors.New("server shutting down")

// Stats are the counters of the Kafka connections, live and gone: InMsgs counts
// records produced, OutMsgs records fetched.
func (s *Server) Stats() outbound.Totals { return s.TransportStats("") }

// TransportStats is Stats for the connections of one transport ("tcp", "tls"), or
// of all when it is "".
func (s *Server) TransportStats(transport string) outbound.Totals {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t outbound.Totals
	for tr, g := range s.tgroups {
		if transport == "" || tr == transport {
			g.AddGone(&t)
		}
	}
	for i, tr := range []string{"tcp", "tls"} {
		if transport == "" || tr == transport {
			t.OutMsgs += s.goneOut[i].Load()
			t.OutBytes += s.goneOutBytes[i].Load()
		}
	}
	for _, c := range s.conns {
		if transport == "" || c.transport() == transport {
			t.AddLive(&c.q, c.inMsgs.Load(), c.inBytes.Load())
			t.OutMsgs += c.outMsgs.Load()
			t.OutBytes += c.outByte.Load()
		}
	}
	return t
}

// ConnInfo describes one live connection.
type ConnInfo struct {
	ID                uint64
	ClientID          string
	Remote            string
	Transport         string // "tcp" or "tls"
	Start             time.Time
	InMsgs, InBytes   uint64
	OutMsgs, OutBytes uint64
	Pending           int
}

// Connections describes the live connections in id order.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	out := make([]ConnInfo, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, ConnInfo{ID: c.id, ClientID: c.clientID(), Remote: c.remote, Transport: c.transport(), Start: c.start,
			InMsgs: c.inMsgs.Load(), InBytes: c.inBytes.Load(), OutMsgs: c.outMsgs.Load(), OutBytes: c.outByte.Load(),
			Pending: c.q.Pending()})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
