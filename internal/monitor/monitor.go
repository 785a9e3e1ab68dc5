package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/auth"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultPort is the monitoring endpoint's port when the configuration names none.
const DefaultPort = 7480

// DefaultConnectionsLimit is the number of connections /connections returns when the
// request has no limit parameter.
const DefaultConnectionsLimit = 1024

// shutdownTimeout bounds how long Close waits for in-flight requests.
const shutdownTimeout = 3 * time.Second

// Status is a point-in-time snapshot of the broker.
type Status struct {
	ServerID         string            `json:"server_id"`
	ServerName       string            `json:"server_name"`
	Version          string            `json:"version"`
	Start            time.Time         `json:"start"`
	Now              time.Time         `json:"now"`
	Uptime           string            `json:"uptime"` // filled by the monitor from Start and Now
	Connections      int               `json:"connections"`
	TotalConnections uint64            `json:"total_connections"`
	Subscriptions    int               `json:"subscriptions"`
	InMsgs           uint64            `json:"in_msgs"`
	OutMsgs          uint64            `json:"out_msgs"`
	InBytes          uint64            `json:"in_bytes"`
	OutBytes         uint64            `json:"out_bytes"`
	SlowConsumers    uint64            `json:"slow_consumers"` // connections/subscribers that hit the pending limit
	DroppedMsgs      uint64            `json:"dropped_msgs"`   // messages dropped by the drop policy
	MaxConnections   int               `json:"max_connections"`
	MaxPayload       int               `json:"max_payload"`
	MaxPending       int64             `json:"max_pending"`
	Listeners        map[string]string `json:"listeners"` // e.g. "native": "127.0.0.1:7400"
	// ByListener has the connection counters of each listener, by the names of
	// Listeners.
	ByListener map[string]ListenerStats `json:"by_listener,omitempty"`
}

// ListenerStats are the counters of the connections of one listener (a front end).
type ListenerStats struct {
	Connections      int    `json:"connections"`
	TotalConnections uint64 `json:"total_connections"`
	InMsgs           uint64 `json:"in_msgs"`
	OutMsgs          uint64 `json:"out_msgs"`
	InBytes          uint64 `json:"in_bytes"`
	OutBytes         uint64 `json:"out_bytes"`
	SlowConsumers    uint64 `json:"slow_consumers"`
	DroppedMsgs      uint64 `json:"dropped_msgs"`
}

// ConnInfo describes one client connection.
type ConnInfo struct {
	ID            uint64    `json:"id"`
	Name          string    `json:"name"`
	Remote        string    `json:"remote"`
	Protocol      string    `json:"protocol"`
	Transport     string    `json:"transport"` // tcp, udp (a reliable-UDP session) or ws
	Start         time.Time `json:"start"`
	Subscriptions int       `json:"subscriptions"`
	InMsgs        uint64    `json:"in_msgs"`
	OutMsgs       uint64    `json:"out_msgs"`
	InBytes       uint64    `json:"in_bytes"`
	OutBytes      uint64    `json:"out_bytes"`
	PendingBytes  int       `json:"pending_bytes"`
	Dropped       uint64    `json:"dropped"`
	SlowConsumer  bool      `json:"slow_consumer"` // hit its pending limit at least once
}

// Source is implemented by the broker. Both methods may be called concurrently, from
// any goroutine, and must return values the monitor may keep and modify.
type Source interface {
	Status() Status
	Connections() []ConnInfo
}

// ClusterSource is implemented by a Source that can be a cluster node. Cluster
// returns what /cluster shows and ClusterStats the numbers /metrics reports; both
// return nil while the server runs alone.
type ClusterSource interface {
	Cluster() any
	ClusterStats() *ClusterStats
}

// ClusterStats are a cluster node's numbers, as /metrics reports them.
type ClusterStats struct {
	Members       int // alive members, this node included
	LocalInterest int // interest entries this node advertises to the others
	// RouteAuthFailures counts the routes refused since the server started because
	// their peer did not prove the cluster secret (or asked for it when this node
	// has none), or failed TLS (cluster_tls).
	RouteAuthFailures uint64
	Routes            []RouteStats
}

// RouteStats are the numbers of the route to one other node. The counters start
// from zero on every new connection of the route.
type RouteStats struct {
	Node         string
	RTT          time.Duration // last measured round trip; 0 before the first
	InMsgs       uint64
	InBytes      uint64
	OutMsgs      uint64
	OutBytes     uint64
	DroppedMsgs  uint64 // let go by the route's slow-consumer policy
	PendingBytes int    // queued for the route and not yet written
	Unacked      int    // forwarded with a sequence (MQTT QoS ≥ 1) and not yet acknowledged
	Interest     int    // interest entries the node advertised
	// Excluded: the node is behind or stalled and gets no traffic until it drains.
	Excluded      bool
	Exclusions    uint64 // times the route was excluded
	ExcludedDrops uint64 // QoS 0 messages not forwarded while excluded
}

// ConnectionsPage is the body of /connections.
type ConnectionsPage struct {
	Now         time.Time  `json:"now"`
	Total       int        `json:"total"`  // connections open, before paging
	Offset      int        `json:"offset"` // index of the first connection returned
	Limit       int        `json:"limit"`  // most connections this page could hold
	Connections []ConnInfo `json:"connections"`
}

// Server is the HTTP monitoring endpoint.
type Server struct {
	addr string
	src  Source
	log  *slog.Logger
	reg  *prometheus.Registry
	mux  *http.ServeMux
	auth *auth.Authenticator // nil: endpoints open to all

	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener
	done   chan struct{} // closed when Serve returns
	closed bool
}

// New builds a monitoring server that will listen on addr (host:port; "" means all
// interfaces on DefaultPort) and report what src returns. A nil log discards.
func New(addr string, src Source, log *slog.Logger) *Server {
	if addr == "" {
		addr = ":" + strconv.Itoa(DefaultPort)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{addr: addr, src: src, log: log, reg: prometheus.NewRegistry()}
	s.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(src),
	)
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError,
	})

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /{$}", s.handleIndex)
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	s.mux.HandleFunc("GET /status", s.handleStatus)
	s.mux.HandleFunc("GET /connections", s.handleConnections)
	s.mux.HandleFunc("GET /cluster", s.handleCluster)
	s.mux.Handle("GET /metrics", metrics)
	return s
}

// Start binds the listener and serves in a goroutine. It returns once the listener is
// bound, so Addr is valid as soon as it returns without error.
func (s *Server) Start() error {
	s.mu.Lock()
	closed, started := s.closed, s.ln != nil
	s.mu.Unlock()
	if closed {
		return errors.New("monitor: server closed")
	}
	if started {
		return errors.New("monitor: already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("monitor: listen %s: %w", s.addr, err)
	}
	if err := s.attach(ln); err != nil {
		return err
	}
	go func() {
		if err := s.serve(); err != nil {
			s.log.Error("monitoring endpoint stopped", "err", err)
		}
	}()
	return nil
}

// Serve answers requests on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.attach(ln); err != nil {
		return err
	}
	return s.serve()
}

// attach makes the HTTP server for ln; ln is closed if the server cannot use it.
func (s *Server) attach(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ln != nil {
		_ = ln.Close()
		if s.closed {
			return errors.New("monitor: server closed")
		}
		return errors.New("monitor: already started")
	}
	s.srv = &http.Server{
		Handler:           s.guard(s.mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.ln, s.done = ln, make(chan struct{})
	return nil
}

func (s *Server) serve() error {
	s.mu.Lock()
	srv, ln, done := s.srv, s.ln, s.done
	s.mu.Unlock()
	defer close(done)
	s.log.Info("monitoring endpoint listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Addr is the bound listener's address, or nil before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops accepting connections and waits a short time for in-flight requests
// before closing the rest. Closing a server that never started, or closing twice, is
// not an error. A closed server cannot be started again.
func (s *Server) Close() error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already || srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		// Requests still running after the timeout are cut off.
		err = errors.Join(err, srv.Close())
	}
	<-done
	return err
}

// Handler is the endpoint's request multiplexer, usable without Start for tests or
// for mounting under another server.
func (s *Server) Handler() http.Handler { return s.mux }

// Registry is the Prometheus registry /metrics serves. Other subsystems register
// their collectors here; it is never the client library's global default registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

const indexText = `Tern monitoring endpoint

/healthz      liveness check: {"status":"ok"}
/status       server status snapshot (JSON)
/connections  client connections, sorted by ID (JSON; ?limit=N&offset=M)
/cluster      cluster node: members, routes, interest (JSON; 404 when alone)
/metrics      Prometheus metrics
`

func (s *Server) handleIndex(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(indexText))
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	st := s.src.Status()
	if st.Now.IsZero() {
		st.Now = time.Now()
	}
	st.Uptime = FormatUptime(uptime(st))
	if st.Listeners == nil {
		st.Listeners = map[string]string{}
	}
	s.writeJSON(w, st)
}

func (s *Server) handleCluster(w http.ResponseWriter, _ *http.Request) {
	var st any
	if cs, ok := s.src.(ClusterSource); ok {
		st = cs.Cluster()
	}
	if st == nil {
		http.Error(w, "this server is not a cluster node (cluster_port, join)", http.StatusNotFound)
		return
	}
	s.writeJSON(w, st)
}

func (s *Server) handleConnections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), DefaultConnectionsLimit)
	if err != nil {
		http.Error(w, "limit: "+err.Error(), http.StatusBadRequest)
		return
	}
	if limit == 0 {
		limit = DefaultConnectionsLimit
	}
	offset, err := queryInt(q.Get("offset"), 0)
	if err != nil {
		http.Error(w, "offset: "+err.Error(), http.StatusBadRequest)
		return
	}

	conns := slices.Clone(s.src.Connections())
	slices.SortFunc(conns, func(a, b ConnInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	page := ConnectionsPage{Now: time.Now(), Total: len(conns), Offset: offset, Limit: limit}
	lo := min(offset, len(conns))
	hi := lo + min(limit, len(conns)-lo)
	page.Connections = conns[lo:hi]
	if page.Connections == nil {
		page.Connections = []ConnInfo{}
	}
	s.writeJSON(w, page)
}

// queryInt parses a non-negative integer query parameter; empty gives def.
func queryInt(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", v)
	}
	if n < 0 {
		return 0, fmt.Errorf("%d is negative", n)
	}
	return n, nil
}

func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Error("encoding monitoring response", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// uptime is Now-Start, zero when Start is unset or after Now.
func uptime(st Status) time.Duration {
	if st.Start.IsZero() {
		return 0
	}
	now := st.Now
	if now.IsZero() {
		now = time.Now()
	}
	return max(now.Sub(st.Start), 0)
}

// FormatUptime renders d in whole seconds as days, hours, minutes and seconds,
// leaving out leading zero units: "45s", "3m7s", "2h0m5s", "1d4h0m0s".
func FormatUptime(d time.Duration) string {
	secs := int64(max(d, 0) / time.Second)
	days, secs := secs/86400, secs%86400
	hours, secs := secs/3600, secs%3600
	mins, secs := secs/60, secs%60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%dh%dm%ds", days, hours, mins, secs)
	case hours > 0:
		return fmt.Sprintf("%dh%dm%ds", hours, mins, secs)
	case mins > 0:
		return fmt.Sprintf("%dm%ds", mins, secs)
	}
	return fmt.Sprintf("%ds", secs)
}

// promLogger passes promhttp's error messages to the structured log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error("serving metrics", "err", fmt.Sprint(v...))
}
