package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/mqtt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/native"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/transport/udp"
	"github.com/tern-mq/tern/internal/wire"
)

// Version is the server's version, reported to clients and in monitoring.
var Version = "0.1.0-dev"

// Server is one running broker process.
type Server struct {
	cfg     Config
	log     *slog.Logger
	id      string
	start   time.Time
	broker  *broker.Broker
	native  *native.Server
	streams *stream.Manager // nil when streams are disabled
	mqtt    *mqtt.Server    // nil when MQTT is disabled

	mu       sync.Mutex
	listener net.Listener
	mqttLn   net.Listener
	udpLn    net.Listener
	mqttWS   *http.Server
	mqttWSLn net.Listener
	monitor  *monitor.Server
	serveErr chan error
}

// New validates cfg and prepares a server; Start opens its listeners. A server
// that cannot be made leaves nothing running and its store_dir free.
func New(cfg Config, log *slog.Logger) (_ *Server, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _ = os.Hostname()
	}
	idb := make([]byte, 8)
	_, _ = rand.Read(idb)
	s := &Server{cfg: cfg, log: log, id: hex.EncodeToString(idb), broker: broker.New()}
	ncfg := native.Config{
		MaxPayload:         cfg.MaxPayload,
		MaxConnections:     cfg.MaxConnections,
		MaxSubscriptions:   cfg.MaxSubscriptions,
		MaxPending:         cfg.MaxPending,
		SlowConsumerPolicy: cfg.SlowConsumerPolicy,
		PingInterval:       cfg.PingInterval,
		MaxPingsOut:        cfg.MaxPingsOut,
		WriteTimeout:       cfg.WriteTimeout,
		ConnectTimeout:     cfg.ConnectTimeout,
	}
	info := wire.Info{ServerID: s.id, ServerName: cfg.ServerName, ServerVersion: Version}
	ns, err := native.NewServer(ncfg, s.broker, info, log.With("proto", "native"))
	if err != nil {
		return nil, err
	}
	s.native = ns
	defer func() {
		if err != nil {
			_ = ns.Shutdown(time.Second) // nothing connected yet: ends its ping loop
		}
	}()
	// The stream engine first: it locks store_dir, which the MQTT state lives in too.
	if cfg.StoreDir != "" {
		policy, err := store.ParseSyncPolicy(cfg.Sync)
		if err != nil {
			return nil, fmt.Errorf("sync: %w", err)
		}
		mgr, err := stream.New(stream.Config{
			Dir: cfg.StoreDir, Sync: policy, SyncInterval: cfg.SyncInterval, MaxPayload: cfg.MaxPayload,
			MaxStreams: cfg.MaxStreams, MaxConsumers: cfg.MaxConsumers, SegmentBytes: cfg.SegmentSize,
		}, s.broker, log.With("component", "streams"))
		if err != nil {
			return nil, err
		}
		s.streams = mgr
	}
	if cfg.MQTTPort >= 0 {
		mcfg := cfg.MQTT
		if mcfg.MaxPacketSize <= 0 {
			mcfg.MaxPacketSize = cfg.MaxPayload + 64<<10
		}
		if mcfg.MaxConnections <= 0 {
			mcfg.MaxConnections = cfg.MaxConnections
		}
		if mcfg.MaxPending <= 0 {
			mcfg.MaxPending = cfg.MaxPending
		}
		mcfg.WriteTimeout, mcfg.ConnectTimeout = cfg.WriteTimeout, cfg.ConnectTimeout
		mcfg.Version = Version
		if cfg.StoreDir != "" {
			policy, err := store.ParseSyncPolicy(cfg.Sync)
			if err != nil {
				return nil, fmt.Errorf("sync: %w", err)
			}
			mcfg.StoreDir, mcfg.Sync, mcfg.SyncInterval = filepath.Join(cfg.StoreDir, "mqtt"), policy, cfg.SyncInterval
		}
		ms, err := mqtt.NewServer(mcfg, s.broker, log.With("proto", "mqtt"))
		if err != nil {
			if s.streams != nil {
				s.streams.Close()
			}
			return nil, err
		}
		s.mqtt = ms
	}
	return s, nil
}

// Streams is the stream engine, nil when streams are disabled.
func (s *Server) Streams() *stream.Manager { return s.streams }

// Start opens the native listener and the monitoring endpoint and returns once both
// accept connections.
func (s *Server) Start() error {
	s.start = time.Now()
	if s.streams != nil {
		if err := s.streams.Start(); err != nil {
			return err
		}
	}
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("native listener: %w", err)
	}
	s.mu.Lock()
	s.listener = l
	s.serveErr = make(chan error, 1)
	s.mu.Unlock()
	go func() { s.serveErr <- s.native.Serve(l) }()
	if s.cfg.UDPPort >= 0 {
		port := s.cfg.UDPPort
		if port == 0 {
			port = l.Addr().(*net.TCPAddr).Port
		}
		ucfg := udp.Config{MaxMessage: s.cfg.MaxPayload + 64<<10, MTU: s.cfg.UDPMTU, IdleTimeout: s.cfg.UDPIdleTimeout,
			BundleDelay: s.cfg.UDPBundleDelay}
		if ucfg.BundleDelay <= 0 {
			ucfg.BundleDelay = -1 // off; in udp.Config 0 would mean the default
		}
		if err := loadUDPKeys(&ucfg, s.cfg); err != nil {
			_ = l.Close()
			return err
		}
		ul, err := udp.Listen(net.JoinHostPort(s.cfg.Host, strconv.Itoa(port)), ucfg)
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("udp listener: %w", err)
		}
		s.mu.Lock()
		s.udpLn = ul
		s.mu.Unlock()
		if !ucfg.PrivateKey.IsZero() {
			s.log.Info("udp sessions encrypted", "udp_public_key", ucfg.PrivateKey.Public().String(), "psk", !ucfg.PSK.IsZero())
		}
		go func() { _ = s.native.Serve(ul) }()
	}
	if s.mqtt != nil {
		ml, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.MQTTPort)))
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("mqtt listener: %w", err)
		}
		s.mu.Lock()
		s.mqttLn = ml
		s.mu.Unlock()
		go func() { _ = s.mqtt.Serve(ml) }()
		if s.cfg.MQTTWSPort >= 0 {
			wl, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.MQTTWSPort)))
			if err != nil {
				_ = l.Close()
				_ = ml.Close()
				return fmt.Errorf("mqtt websocket listener: %w", err)
			}
			hs := &http.Server{Handler: s.mqtt.WebSocketHandler(), ReadHeaderTimeout: s.cfg.ConnectTimeout}
			s.mu.Lock()
			s.mqttWS, s.mqttWSLn = hs, wl
			s.mu.Unlock()
			go func() { _ = hs.Serve(wl) }()
		}
	}
	if s.cfg.HTTPAddr != "" {
		m := monitor.New(s.cfg.HTTPAddr, s, s.log.With("component", "monitor"))
		if s.streams != nil {
			m.Registry().MustRegister(streamCollector{s.streams})
		}
		if s.mqtt != nil {
			m.Registry().MustRegister(mqttCollector{s.mqtt})
		}
		s.mu.Lock()
		ul, _ := s.udpLn.(*udp.Listener)
		s.mu.Unlock()
		if ul != nil {
			m.Registry().MustRegister(udpCollector{ul})
		}
		if err := m.Start(); err != nil {
			_ = l.Close()
			return fmt.Errorf("monitoring listener: %w", err)
		}
		s.mu.Lock()
		s.monitor = m
		s.mu.Unlock()
	}
	s.log.Info("tern server ready", "version", Version, "server_id", s.id, "name", s.cfg.ServerName,
		"native", l.Addr().String(), "mqtt", s.mqttAddr(), "mqtt_ws", addrString(s.MQTTWebSocketAddr()), "http", s.httpAddr(), "max_payload", s.cfg.MaxPayload,
		"max_pending", s.cfg.MaxPending, "slow_consumer_policy", s.cfg.SlowConsumerPolicy,
		"store_dir", s.cfg.StoreDir, "sync", s.cfg.Sync)
	return nil
}

func (s *Server) httpAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.monitor == nil {
		return ""
	}
	return s.monitor.Addr().String()
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (s *Server) mqttAddr() string {
	if a := s.MQTTAddr(); a != nil {
		return a.String()
	}
	return ""
}

// MQTTAddr is the MQTT listener's address, or nil if MQTT is disabled.
func (s *Server) MQTTAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mqttLn == nil {
		return nil
	}
	return s.mqttLn.Addr()
}

// MQTTWebSocketAddr is the MQTT-over-WebSocket listener's address, or nil.
func (s *Server) MQTTWebSocketAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mqttWSLn == nil {
		return nil
	}
	return s.mqttWSLn.Addr()
}

// UDPAddr is the native-over-UDP listener's address, or nil when it is off.
func (s *Server) UDPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udpLn == nil {
		return nil
	}
	return s.udpLn.Addr()
}

// MQTT is the MQTT front end, nil when it is disabled.
func (s *Server) MQTT() *mqtt.Server { return s.mqtt }

// Addr is the native protocol listener's address.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

// URL is the address clients connect to, as tern://host:port.
func (s *Server) URL() string {
	a, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "tern://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// HTTPAddr is the monitoring listener's address, or nil if it is disabled.
func (s *Server) HTTPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.monitor == nil {
		return nil
	}
	return s.monitor.Addr()
}

// Broker exposes the routing core, for front ends started beside the native one.
func (s *Server) Broker() *broker.Broker { return s.broker }

// Shutdown closes the listeners, tells clients the server is going away and waits for
// connections to close until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	var errs []error
	s.mu.Lock()
	hs := s.mqttWS
	s.mu.Unlock()
	if hs != nil {
		_ = hs.Close() // upgraded connections are the MQTT server's to close
	}
	if s.mqtt != nil {
		if err := s.mqtt.Shutdown(timeout); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.native.Shutdown(timeout); err != nil {
		errs = append(errs, err)
	}
	if s.streams != nil {
		s.streams.Close()
	}
	s.mu.Lock()
	m := s.monitor
	s.mu.Unlock()
	if m != nil {
		if err := m.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.log.Info("tern server stopped")
	return errors.Join(errs...)
}

// Status implements monitor.Source.
func (s *Server) Status() monitor.Status {
	st := s.native.Stats()
	listeners := map[string]string{}
	if a := s.Addr(); a != nil {
		listeners["native"] = a.String()
	}
	if a := s.httpAddr(); a != "" {
		listeners["http"] = a
	}
	if a := s.mqttAddr(); a != "" {
		listeners["mqtt"] = a
	}
	if a := s.UDPAddr(); a != nil {
		listeners["udp"] = a.String()
	}
	if a := s.MQTTWebSocketAddr(); a != nil {
		listeners["mqtt_ws"] = a.String()
	}
	if s.mqtt != nil {
		ms := s.mqtt.Stats()
		st.Connections += ms.Connections
		st.TotalConnections += ms.TotalConnections
		st.InMsgs += ms.InMsgs
		st.OutMsgs += ms.OutMsgs
		st.InBytes += ms.InBytes
		st.OutBytes += ms.OutBytes
		st.DroppedMsgs += ms.Dropped
	}
	return monitor.Status{
		ServerID:         s.id,
		ServerName:       s.cfg.ServerName,
		Version:          Version,
		Start:            s.start,
		Now:              time.Now(),
		Connections:      st.Connections,
		TotalConnections: st.TotalConnections,
		Subscriptions:    s.broker.Count(),
		InMsgs:           st.InMsgs,
		OutMsgs:          st.OutMsgs,
		InBytes:          st.InBytes,
		OutBytes:         st.OutBytes,
		SlowConsumers:    st.SlowConsumers,
		DroppedMsgs:      st.DroppedMsgs,
		MaxConnections:   s.cfg.MaxConnections,
		MaxPayload:       s.cfg.MaxPayload,
		MaxPending:       s.cfg.MaxPending,
		Listeners:        listeners,
	}
}

// Connections implements monitor.Source.
func (s *Server) Connections() []monitor.ConnInfo {
	conns := s.native.Connections()
	out := make([]monitor.ConnInfo, len(conns))
	for i, c := range conns {
		out[i] = monitor.ConnInfo{
			ID: c.ID, Name: c.Name, Remote: c.Remote, Protocol: "native", Start: c.Start,
			Subscriptions: c.Subscriptions, InMsgs: c.InMsgs, OutMsgs: c.OutMsgs,
			InBytes: c.InBytes, OutBytes: c.OutBytes, PendingBytes: c.Pending, Dropped: c.Dropped,
		}
	}
	if s.mqtt != nil {
		for _, c := range s.mqtt.Connections() {
			proto := "mqtt3.1.1"
			switch c.Version {
			case 3:
				proto = "mqtt3.1"
			case 5:
				proto = "mqtt5"
			}
			out = append(out, monitor.ConnInfo{
				ID: c.ID, Name: c.ClientID, Remote: c.Remote, Protocol: proto, Start: c.Start,
				Subscriptions: c.Subscriptions, InMsgs: c.InMsgs, OutMsgs: c.OutMsgs,
				InBytes: c.InBytes, OutBytes: c.OutBytes, PendingBytes: c.Pending,
			})
		}
	}
	return out
}

// NewLogger builds the process logger from the configured level and format.
func NewLogger(cfg Config, w *os.File) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", cfg.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch cfg.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", cfg.LogFormat)
}
