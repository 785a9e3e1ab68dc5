package native

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/auth"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/acceptloop"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/services"
	"github.com/tern-mq/tern/internal/wire"
)

// Config holds the limits and timers of native connections.
type Config struct {
	MaxPayload         int           // largest PUB payload accepted
	MaxConnections     int           // 0 = unlimited
	MaxSubscriptions   int           // per connection, 0 = unlimited
	MaxPending         int64         // outbound bytes queued per connection before the slow-consumer policy applies
	SlowConsumerPolicy string        // "drop" or "disconnect" (outbound.ParsePolicy)
	PingInterval       time.Duration // server PING period
	MaxPingsOut        int           // unanswered PINGs before the connection is closed as stale
	WriteTimeout       time.Duration // a write blocked longer than this closes the connection
	ConnectTimeout     time.Duration // time allowed for the CONNECT frame
	// NotSentLowat bounds the unsent bytes of a client's TCP socket
	// (outbound.Config.NotSentLowat); 0 leaves the kernel's default.
	NotSentLowat int
	// Auth, when set, checks CONNECT credentials and gives each client its
	// permissions; without it every client may do anything.
	Auth *auth.Authenticator
	// ConnectURLs, when set, lists the native URLs of the cluster's nodes, this one
	// included, for INFO's connect_urls. The server reads it at the first CONNECT
	// and at each ConnectURLsChanged, so it may take locks of its own.
	ConnectURLs func() []string
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.MaxPayload <= 0:
		return fmt.Errorf("max payload must be positive, got %d", c.MaxPayload)
	case c.MaxPending < int64(c.MaxPayload):
		return fmt.Errorf("max pending (%d) must be at least max payload (%d)", c.MaxPending, c.MaxPayload)
	case c.PingInterval <= 0 || c.MaxPingsOut <= 0 || c.WriteTimeout <= 0 || c.ConnectTimeout <= 0:
		return errors.New("ping interval, max pings out, write timeout and connect timeout must be positive")
	}
	_, err := outbound.ParsePolicy(c.SlowConsumerPolicy)
	return err
}

// Server accepts native-protocol connections and serves them against a broker.
type Server struct {
	cfg    Config
	broker *broker.Broker
	log    *slog.Logger
	info   wire.Info

	mu        sync.Mutex
	conns     map[uint64]*Conn
	listeners []net.Listener
	closing   bool
	wg        sync.WaitGroup
	stopPing  chan struct{}

	// groups hold the outbound configuration and the counters of the connections
	// of each transport ("tcp", "udp", "tls").
	groups map[string]*outbound.Group

	noRespHeader wire.Header
	// services carries requests to other accounts' services and their
	// responses back (internal/services).
	services *services.Router

	// urlMu orders connect_urls changes with the INFO frames that carry them, so
	// that each connection is sent each list once, and the lists in order.
	urlMu  sync.Mutex
	urls   []string // the latest list, never modified (INFO frames share it)
	urlGen uint64   // counts list changes; 0 until the list is first read

	// stopReloads ends the checks of the connections after each reload of the
	// users file (reload.go); nil without authentication.
	stopReloads func()
}

// NewServer returns a server routing through b. info is sent to every client after its
// CONNECT (ClientID filled per connection).
func NewServer(cfg Config, b *broker.Broker, info wire.Info, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("native config: %w", err)
	}
	info.Version = wire.Version
	info.MaxPayload = uint64(cfg.MaxPayload)
	info.PingIntervalMS = uint64(cfg.PingInterval / time.Millisecond)
	info.Flags |= wire.InfoHeaders
	if cfg.Auth != nil && cfg.Auth.AnonymousPolicy() != auth.AnonymousAll {
		info.Flags |= wire.InfoAuthRequired
	}
	policy, _ := outbound.ParsePolicy(cfg.SlowConsumerPolicy) // checked by Validate
	s := &Server{
		cfg: cfg, broker: b, log: log, info: info,
		conns:    make(map[uint64]*Conn),
		stopPing: make(chan struct{}),
		groups:   make(map[string]*outbound.Group),
		services: services.New(b),
	}
	for _, transport := range []string{"tcp", "udp", "tls"} {
		g, err := outbound.NewGroup(outbound.Config{MaxPending: cfg.MaxPending, Policy: policy, WriteTimeout: cfg.WriteTimeout,
			NotSentLowat: cfg.NotSentLowat},
			log.With("transport", transport))
		if err != nil {
			return nil, fmt.Errorf("native config: %w", err)
		}
		s.groups[transport] = g
	}
	if cfg.Auth != nil {
		s.stopReloads = cfg.Auth.OnReload(s.usersReloaded)
	}
	s.noRespHeader = wire.AppendHeader(nil, wire.HeaderStatus, wire.StatusNoResponders)
	s.noRespHeader = wire.AppendHeader(s.noRespHeader, wire.HeaderDescription, "no responders")
	go s.pingLoop()
	return s, nil
}

// Serve accepts connections on l until l is closed or the server shuts down.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	transport := "tcp"
	if l.Addr().Network() == "udp" {
		transport = "udp"
	}
	closing := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closing
	}
	if err := acceptloop.Run(l, s.log, closing, func(nc net.Conn) { s.serveConn(nc, transport) }); err != nil {
		return fmt.Errorf("accept on %s: %w", l.Addr(), err)
	}
	return nil
}

// ServeConn serves one already-established connection in its own goroutine.
func (s *Server) ServeConn(nc net.Conn) {
	s.serveConn(nc, nc.LocalAddr().Network())
}

func (s *Server) serveConn(nc net.Conn, transport string) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if _, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		transport = "tls"
	}
	if s.groups[transport] == nil {
		transport = "tcp" // a stream socket of another kind: counted with TCP
	}
	id := outbound.NextConnID()
	c := newConn(s, id, nc, transport)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	if s.cfg.MaxConnections > 0 && len(s.conns) >= s.cfg.MaxConnections {
		s.mu.Unlock()
		s.log.Warn("connection refused: limit reached", "remote", nc.RemoteAddr().String(), "max_connections", s.cfg.MaxConnections)
		// Not in the accept loop: a TLS connection's write runs its handshake.
		go func() {
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = nc.Write(wire.AppendErr(nil, wire.CodeMaxConnections, 0, fmt.Sprintf("server has the maximum of %d connections", s.cfg.MaxConnections)))
			_ = nc.Close()
		}()
		return
	}
	s.conns[id] = c
	s.wg.Add(1)
	s.mu.Unlock()
	s.groups[transport].Opened(nc)
	go func() {
		defer s.wg.Done()
		c.run()
	}()
}

func (s *Server) remove(c *Conn) {
	// Under mu so that Stats never counts a connection twice or not at all.
	s.mu.Lock()
	s.groups[c.transport].Retire(&c.Queue, c.inMsgs.Load(), c.inBytes.Load())
	delete(s.conns, c.id)
	s.mu.Unlock()
}

// ConnectURLsChanged reads Config.ConnectURLs again and, when the list differs from
// the one last read, sends a new INFO with it to every connection that asked for
// updates (wire.ConnectInfoUpdates). The list's source calls it when the cluster's
// nodes come or go; a call that finds no change sends nothing.
func (s *Server) ConnectURLsChanged() {
	if s.cfg.ConnectURLs == nil {
		return
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return // its clients are about to move anyway; a shrinking list would only mislead them
	}
	s.urlMu.Lock()
	defer s.urlMu.Unlock()
	if !s.readURLsLocked() {
		return
	}
	for _, c := range s.snapshotConns() {
		if c.infoUpdates && c.urlGen != s.urlGen {
			c.sendInfoLocked()
		}
	}
}

// readURLsLocked refreshes urls and reports whether it changed. urlMu is held.
func (s *Server) readURLsLocked() bool {
	urls := s.cfg.ConnectURLs()
	if s.urlGen != 0 && slices.Equal(urls, s.urls) {
		return false
	}
	s.urls = slices.Clone(urls)
	s.urlGen++
	return true
}

// noResponders answers a request nobody subscribed to with a 503 status message on its
// reply subject.
func (s *Server) noResponders(b *broker.Batch, reply []byte) {
	s.broker.Publish(b, &broker.Message{Subject: reply, Header: s.noRespHeader})
}

func (s *Server) pingLoop() {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopPing:
			return
		case <-t.C:
			for _, c := range s.snapshotConns() {
				c.ping()
			}
		}
	}
}

func (s *Server) snapshotConns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Conn, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Shutdown stops accepting, tells every client the server is going away, closes all
// connections and waits for their goroutines (or until timeout).
func (s *Server) Shutdown(timeout time.Duration) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	ls := s.listeners
	s.mu.Unlock()
	if s.stopReloads != nil {
		s.stopReloads()
	}
	close(s.stopPing)
	s.services.Close()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, c := range s.snapshotConns() {
		c.sendErr(wire.CodeShutdown, 0, "server shutting down")
		c.CloseAfterGoodbye(errors.New("server shutdown"))
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return errors.New("native server: connections still open after shutdown timeout")
	}
}

// Stats is the view of the native connections of one transport, or of all.
type Stats = outbound.Totals

// Stats sums the counters of every live and closed connection.
func (s *Server) Stats() Stats { return s.TransportStats("") }

// TransportStats sums the counters of live and closed connections of transport
// ("tcp", "udp"), or of every transport when it is "".
func (s *Server) TransportStats(transport string) Stats {
	var st Stats
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, g := range s.groups {
		if transport == "" || t == transport {
			g.AddGone(&st)
		}
	}
	for _, c := range s.conns {
		if transport == "" || c.transport == transport {
			st.AddLive(&c.Queue, c.inMsgs.Load(), c.inBytes.Load())
		}
	}
	return st
}

// Connections returns a snapshot of every live connection, sorted by id.
func (s *Server) Connections() []Info { return s.TransportConnections("") }

// TransportConnections is Connections for the connections of one transport, or of
// all when it is "".
func (s *Server) TransportConnections(transport string) []Info {
	conns := s.snapshotConns()
	out := make([]Info, 0, len(conns))
	for _, c := range conns {
		if transport == "" || c.transport == transport {
			out = append(out, c.Snapshot())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
