package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/mqtt"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/cluster/secret"
	"github.com/tern-mq/tern/internal/cluster/streams"
	"github.com/tern-mq/tern/internal/kafka"
	"github.com/tern-mq/tern/internal/kafka/group"
	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/native"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/tlsconf"
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
	auth    *auth.Authenticator
	mqtt    *mqtt.Server  // nil when MQTT is disabled
	kafka   *kafka.Server // nil when the Kafka API is disabled or streams are
	// usage shares the accounts' usage with the cluster's other nodes, nil
	// alone or without a users file.
	usage *usageExchange
	// mqttState is this node's replica of the cluster's MQTT group, nil alone.
	mqttState *mqtt.State
	// interest counts local subscriptions for the cluster from the first one; nil
	// when the server runs alone. cluster is the running node, set by Start.
	interest *interest.Local
	cluster  *cluster.Node
	// clusterSecret is the content of cluster_secret_file, nil without one.
	clusterSecret []byte
	// replicated is the node's share of the cluster's streams (cluster_size).
	replicated *streams.Service
	// stopURLWatch ends the passing of connect_urls changes to native clients and
	// the taking of MQTT sessions no node hosts; safe to call twice.
	stopURLWatch func()

	// tls holds the TLS listeners' certificates, nil when none is configured.
	tls *tlsconf.Store
	// clusterTLS holds the routes' certificates (cluster_tls), nil without.
	clusterTLS *tlsconf.Store
	// reloaders are what Reload reads anew, in order.
	reloaders []reloader

	// The protocol servers shut down once, by whichever front end or stopAll
	// comes first.
	nativeStop, mqttStop once

	mu        sync.Mutex
	frontends []Frontend // in the order Start opened them
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
	if cfg.Join != "" && cfg.ClusterPort < 0 {
		cfg.ClusterPort = membership.DefaultRoutePort
		s.cfg.ClusterPort = cfg.ClusterPort
	}
	if cfg.ClusterSize > 0 && (cfg.ClusterPort < 0 || cfg.StoreDir == "") {
		return nil, errors.New("cluster_size needs a cluster (cluster_port or join) and a store_dir: replication keeps its Raft logs there")
	}
	if r := cfg.StreamReplicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return nil, &OptionError{Key: "stream_replicas", Err: fmt.Errorf("%d: want 1, 3 or 5", r)}
	}
	if cfg.ClusterPort < 0 && cfg.ClusterSecretFile != "" {
		log.Warn("cluster_secret_file is set but the server runs alone (no cluster_port or join): not read", "file", cfg.ClusterSecretFile)
	}
	if cfg.ClusterPort < 0 && cfg.ClusterTLS {
		log.Warn("cluster_tls is set but the server runs alone (no cluster_port or join): no route to secure")
	}
	if err := s.setupTLS(); err != nil {
		return nil, err
	}
	if cfg.ClusterPort >= 0 {
		if err := checkClusterTiming(cfg); err != nil {
			return nil, err
		}
		if cfg.ClusterSecretFile != "" {
			if s.clusterSecret, err = secret.ReadFile(cfg.ClusterSecretFile, log); err != nil {
				return nil, fmt.Errorf("cluster_secret_file: %w", err)
			}
		}
		if err := s.setupClusterTLS(); err != nil {
			return nil, err
		}
		// Before anything subscribes: stream captures and restored MQTT sessions are
		// interest the other nodes must learn of.
		s.interest = interest.NewLocal()
		if err := s.broker.SetObserver(s.interest); err != nil {
			return nil, err
		}
	}
	s.auth, err = auth.New(auth.Options{UsersFile: cfg.UsersFile, Anonymous: cfg.Anonymous, Log: log.With("component", "auth")})
	if err != nil {
		return nil, err
	}
	if cfg.UsersFile != "" {
		s.reloaders = append(s.reloaders, reloader{what: "users_file", reload: func() ([]any, error) {
			if err := s.auth.Reload(); err != nil {
				return nil, err
			}
			return []any{"users", s.auth.Users()}, nil
		}})
	}
	ncfg := native.Config{
		Auth:               s.auth,
		MaxPayload:         cfg.MaxPayload,
		MaxConnections:     cfg.MaxConnections,
		MaxSubscriptions:   cfg.MaxSubscriptions,
		MaxPending:         cfg.MaxPending,
		SlowConsumerPolicy: cfg.SlowConsumerPolicy,
		PingInterval:       cfg.PingInterval,
		MaxPingsOut:        cfg.MaxPingsOut,
		WriteTimeout:       cfg.WriteTimeout,
		ConnectTimeout:     cfg.ConnectTimeout,
		NotSentLowat:       cfg.TCPNotSentLowat,
	}
	if s.interest != nil {
		ncfg.ConnectURLs = s.connectURLs
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
			// In a cluster that replicates, the catalogue's front answers the API.
			ExternalAPI: cfg.ClusterSize > 0,
			Accounts:    s.accountLimits,
			Imports:     s.accountImports,
		}, s.broker, log.With("component", "streams"))
		if err != nil {
			return nil, err
		}
		s.streams = mgr
	}
	if cfg.MQTTPort >= 0 || cfg.MQTTTLSPort >= 0 || cfg.MQTTWSSPort >= 0 {
		mcfg := cfg.MQTT
		if mcfg.MaxPacketSize <= 0 {
			mcfg.MaxPacketSize = cfg.MaxPayload + 64<<10
		}
		if mcfg.MaxConnections <= 0 {
			mcfg.MaxConnections = cfg.MaxConnections
		}
		// One outbound limit and policy for every protocol.
		mcfg.MaxPending, mcfg.SlowConsumerPolicy = cfg.MaxPending, cfg.SlowConsumerPolicy
		mcfg.NotSentLowat = cfg.TCPNotSentLowat
		mcfg.WriteTimeout, mcfg.ConnectTimeout = cfg.WriteTimeout, cfg.ConnectTimeout
		mcfg.Version = Version
		mcfg.Auth = s.auth
		if cfg.StoreDir != "" {
			policy, err := store.ParseSyncPolicy(cfg.Sync)
			if err != nil {
				return nil, fmt.Errorf("sync: %w", err)
			}
			mcfg.StoreDir, mcfg.Sync, mcfg.SyncInterval = filepath.Join(cfg.StoreDir, "mqtt"), policy, cfg.SyncInterval
		}
		// A cluster keeps MQTT state in its MQTT group (startCluster), not in StoreDir.
		mcfg.Replicated = cfg.ClusterSize > 0
		ms, err := mqtt.NewServer(mcfg, s.broker, log.With("proto", "mqtt"))
		if err != nil {
			if s.streams != nil {
				s.streams.Close()
			}
			return nil, err
		}
		s.mqtt = ms
	}
	switch {
	case cfg.KafkaPort < 0 && cfg.KafkaTLSPort < 0:
	case s.streams == nil:
		log.Warn("Kafka API off: it serves streams, and streams are off (store_dir is empty)")
	default:
		ks, err := kafka.NewServer(kafka.Config{
			Advertise: cfg.KafkaAdvertise, TLSAdvertise: cfg.KafkaTLSAdvertise, AutoCreate: cfg.KafkaAutoCreate, Uncompressed: cfg.KafkaCompression == "uncompressed", MaxConnections: cfg.MaxConnections,
			ClusterID: cfg.ClusterName, MaxPayload: cfg.MaxPayload, SegmentBytes: cfg.SegmentSize, DefaultReplicas: cfg.StreamReplicas,
			MaxPending: cfg.MaxPending, SlowConsumerPolicy: cfg.SlowConsumerPolicy, WriteTimeout: cfg.WriteTimeout,
			NotSentLowat: cfg.TCPNotSentLowat, Auth: s.auth,
			Groups: group.Config{InitialRebalanceDelay: kafkaDelay(cfg.KafkaGroupInitialDelay)},
		}, s.broker, s.streams, log.With("proto", "kafka"))
		if err != nil {
			if s.mqtt != nil {
				_ = s.mqtt.Shutdown(0)
			}
			s.streams.Close()
			return nil, err
		}
		s.kafka = ks
	}
	if cfg.ClusterSize > 0 {
		s.mqttState = mqtt.NewState(cfg.MQTT.MaxQueued, log.With("proto", "mqtt"))
	}
	return s, nil
}

// accountLimits tells the stream engine which accounts the users file defines,
// with their limits on streams.
func (s *Server) accountLimits(name string) (stream.AccountLimits, bool) {
	a := s.auth.Account(name)
	if a == nil {
		return stream.AccountLimits{}, false
	}
	return stream.AccountLimits{MaxStorage: int64(a.Limits.MaxStorage), MaxStreams: a.Limits.MaxStreams}, true
}

// accountImports is what a filter of the named account reaches of other
// accounts' exported subjects.
func (s *Server) accountImports(name, filter string) []auth.ImportedSubscription {
	return s.auth.Account(name).Imports(filter)
}

// Streams is the stream engine, nil when streams are disabled.
func (s *Server) Streams() *stream.Manager { return s.streams }

// Start opens every listener and returns once all accept connections. A Start that
// fails stops everything it had started and everything New made: the server is
// then unusable and leaves nothing running.
func (s *Server) Start() (err error) {
	s.start = time.Now()
	defer func() {
		if err != nil {
			s.stopAll(context.Background())
		}
	}()
	if err := s.broker.Subscribe(&broker.Subscription{Sink: clusterAPI{s}, Subject: streamapi.ClusterPrefix + ">", NodeLocal: true}); err != nil {
		return err
	}
	if s.streams != nil {
		if err := s.streams.Start(); err != nil {
			return err
		}
	}
	fes, err := s.openFrontends()
	s.mu.Lock()
	s.frontends = fes
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if s.interest != nil {
		if err := s.startCluster(); err != nil {
			return err
		}
	}
	for _, fe := range fes {
		go func() {
			if err := fe.Serve(); err != nil {
				s.log.Error("listener stopped", "listener", fe.Name(), "err", err)
			}
		}()
	}
	attrs := []any{"version", Version, "server_id", s.id, "name", s.cfg.ServerName}
	for _, fe := range fes {
		attrs = append(attrs, fe.Name(), fe.Addr().String())
	}
	attrs = append(attrs, "max_payload", s.cfg.MaxPayload, "max_pending", s.cfg.MaxPending,
		"slow_consumer_policy", s.cfg.SlowConsumerPolicy, "store_dir", s.cfg.StoreDir, "sync", s.cfg.Sync)
	s.log.Info("tern server ready", attrs...)
	return nil
}

// openFrontends binds every configured listener. On error it returns those it
// opened, for the caller to shut down.
func (s *Server) openFrontends() ([]Frontend, error) {
	var fes []Frontend
	listen := func(what string, port int) (net.Listener, error) {
		l, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("%s listener: %w", what, err)
		}
		return l, nil
	}
	// listenTLS opens a TLS listener whose handshakes run in each connection's
	// goroutine, bounded by connect_timeout.
	listenTLS := func(what string, port int) (net.Listener, error) {
		l, err := listen(what, port)
		if err != nil {
			return nil, err
		}
		return tlsconf.NewListener(l, s.tls.ServerConfig(), s.cfg.ConnectTimeout), nil
	}
	nativeStop, mqttStop := &s.nativeStop, &s.mqttStop
	udpPort := s.cfg.UDPPort
	if s.cfg.Port >= 0 {
		l, err := listen("native", s.cfg.Port)
		if err != nil {
			return fes, err
		}
		fes = append(fes, &nativeFrontend{name: "native", transport: "tcp", ln: l, srv: s.native, stop: nativeStop})
		if udpPort == 0 {
			udpPort = l.Addr().(*net.TCPAddr).Port
		}
	} else if udpPort == 0 {
		udpPort = -1 // follows the native TCP listener, which is off
	}
	if s.cfg.TLSPort >= 0 {
		l, err := listenTLS("native tls", s.cfg.TLSPort)
		if err != nil {
			return fes, err
		}
		fes = append(fes, &nativeFrontend{name: "native_tls", transport: "tls", ln: l, srv: s.native, stop: nativeStop})
	}
	if udpPort >= 0 {
		ucfg := udp.Config{MaxMessage: s.cfg.MaxPayload + 64<<10, MTU: s.cfg.UDPMTU, IdleTimeout: s.cfg.UDPIdleTimeout,
			BundleDelay: s.cfg.UDPBundleDelay}
		if ucfg.BundleDelay <= 0 {
			ucfg.BundleDelay = -1 // off; in udp.Config 0 would mean the default
		}
		if err := loadUDPKeys(&ucfg, s.cfg); err != nil {
			return fes, err
		}
		ul, err := udp.Listen(net.JoinHostPort(s.cfg.Host, strconv.Itoa(udpPort)), ucfg)
		if err != nil {
			return fes, fmt.Errorf("udp listener: %w", err)
		}
		fes = append(fes, &nativeFrontend{name: "udp", transport: "udp", ln: ul, srv: s.native, stop: nativeStop})
		if !ucfg.PrivateKey.IsZero() {
			s.log.Info("udp sessions encrypted", "udp_public_key", ucfg.PrivateKey.Public().String(), "psk", !ucfg.PSK.IsZero())
		}
	}
	if s.mqtt != nil {
		wsServer := func() *http.Server {
			return &http.Server{Handler: s.mqtt.WebSocketHandler(), ReadHeaderTimeout: s.cfg.ConnectTimeout,
				ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
		}
		if s.cfg.MQTTPort >= 0 {
			ml, err := listen("mqtt", s.cfg.MQTTPort)
			if err != nil {
				return fes, err
			}
			fes = append(fes, &mqttFrontend{name: "mqtt", transport: "tcp", ln: ml, srv: s.mqtt, stop: mqttStop})
			if s.cfg.MQTTWSPort >= 0 {
				wl, err := listen("mqtt websocket", s.cfg.MQTTWSPort)
				if err != nil {
					return fes, err
				}
				fes = append(fes, &mqttFrontend{name: "mqtt_ws", transport: "ws", ln: wl, srv: s.mqtt, ws: wsServer(), stop: mqttStop})
			}
		}
		if s.cfg.MQTTTLSPort >= 0 {
			ml, err := listenTLS("mqtt tls", s.cfg.MQTTTLSPort)
			if err != nil {
				return fes, err
			}
			fes = append(fes, &mqttFrontend{name: "mqtt_tls", transport: "tls", ln: ml, srv: s.mqtt, stop: mqttStop})
		}
		if s.cfg.MQTTWSSPort >= 0 {
			l, err := listen("mqtt secure websocket", s.cfg.MQTTWSSPort)
			if err != nil {
				return fes, err
			}
			// The HTTP server runs each handshake in the connection's goroutine,
			// bounded by its ReadHeaderTimeout (connect_timeout), and gives the
			// handler the TLS state (the client's certificate).
			wl := tls.NewListener(tlsconf.BatchReadsListener(l), s.tls.ServerConfig())
			fes = append(fes, &mqttFrontend{name: "mqtt_wss", transport: "wss", ln: wl, srv: s.mqtt, ws: wsServer(), stop: mqttStop})
		}
	}
	if s.kafka != nil {
		if s.cfg.KafkaPort >= 0 {
			kl, err := listen("kafka", s.cfg.KafkaPort)
			if err != nil {
				return fes, err
			}
			fes = append(fes, &kafkaFrontend{name: "kafka", transport: "tcp", ln: kl, srv: s.kafka})
		}
		if s.cfg.KafkaTLSPort >= 0 {
			kl, err := listenTLS("kafka tls", s.cfg.KafkaTLSPort)
			if err != nil {
				return fes, err
			}
			fes = append(fes, &kafkaFrontend{name: "kafka_tls", transport: "tls", ln: kl, srv: s.kafka})
		}
	}
	for _, m := range []struct{ name, addr string }{{"http", s.cfg.HTTPAddr}, {"https", s.cfg.HTTPSAddr}} {
		if m.addr == "" {
			continue
		}
		hl, err := net.Listen("tcp", m.addr)
		if err != nil {
			return fes, fmt.Errorf("monitoring listener %s: %w", m.name, err)
		}
		if m.name == "https" {
			hl = tlsconf.NewListener(hl, s.tls.ServerConfig(), s.cfg.ConnectTimeout)
		}
		fes = append(fes, &monitorFrontend{name: m.name, ln: hl, srv: s.newMonitor(m.addr, fes)})
	}
	return fes, nil
}

// newMonitor makes a monitoring endpoint with the collectors of the server's
// parts and of the front ends in fes.
func (s *Server) newMonitor(addr string, fes []Frontend) *monitor.Server {
	m := monitor.New(addr, s, s.log.With("component", "monitor"))
	m.RequireAuth(s.auth)
	m.Registry().MustRegister(authCollector{s.auth})
	if s.streams != nil {
		m.Registry().MustRegister(streamCollector{s.streams})
	}
	if s.mqtt != nil {
		m.Registry().MustRegister(mqttCollector{s.mqtt})
	}
	for _, fe := range fes {
		if nf, ok := fe.(*nativeFrontend); ok && nf.transport == "udp" {
			m.Registry().MustRegister(udpCollector{nf.ln.(*udp.Listener)})
		}
	}
	return m
}

// tlsListeners names the TLS listeners the configuration turns on.
func (c *Config) tlsListeners() []string {
	var on []string
	for _, l := range []struct {
		key string
		on  bool
	}{{"tls_port", c.TLSPort >= 0}, {"mqtt_tls_port", c.MQTTTLSPort >= 0}, {"mqtt_wss_port", c.MQTTWSSPort >= 0},
		{"kafka_tls_port", c.KafkaTLSPort >= 0}, {"https", c.HTTPSAddr != ""}} {
		if l.on {
			on = append(on, l.key)
		}
	}
	return on
}

// setupTLS reads the TLS files when a TLS listener is configured (or the files
// are named) and makes Reload read them again.
func (s *Server) setupTLS() error {
	cfg := &s.cfg
	on := cfg.tlsListeners()
	if len(on) > 0 && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == "") {
		return &OptionError{Key: on[0], Err: errors.New("a TLS listener needs tls_cert_file and tls_key_file")}
	}
	if cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil
	}
	st, err := tlsconf.New(tlsconf.Settings{
		CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile, CRLFile: cfg.TLSCRLFile,
		ClientAuth: cfg.TLSClientAuth, MinVersion: cfg.TLSMinVersion, CipherSuites: strings.Split(cfg.TLSCiphers, ","),
	})
	if err != nil {
		return err
	}
	if len(on) == 0 {
		s.log.Warn("tls_cert_file is set but no TLS listener is (tls_port, mqtt_tls_port, mqtt_wss_port, kafka_tls_port, https)")
	}
	s.tls = st
	s.reloaders = append(s.reloaders, reloader{what: "tls", reload: func() ([]any, error) {
		if err := st.Reload(); err != nil {
			return nil, err
		}
		c := st.Certificate()
		return []any{"cert_serial", c.SerialNumber.Text(16), "cert_not_after", c.NotAfter}, nil
	}})
	return nil
}

// setupClusterTLS reads the routes' TLS files (cluster_tls), each defaulting to
// its tls_* counterpart, and makes Reload read them again.
func (s *Server) setupClusterTLS() error {
	cfg := &s.cfg
	named := cfg.ClusterTLSCertFile != "" || cfg.ClusterTLSKeyFile != "" || cfg.ClusterTLSCAFile != "" || cfg.ClusterTLSCRLFile != ""
	if !cfg.ClusterTLS {
		if named {
			s.log.Warn("cluster_tls_* files are set but cluster_tls is off: routes are not TLS, the files are not read")
		}
		return nil
	}
	cert, key := cfg.ClusterTLSCertFile, cfg.ClusterTLSKeyFile
	switch {
	case cert == "" && key == "":
		cert, key = cfg.TLSCertFile, cfg.TLSKeyFile
		if cert == "" || key == "" {
			return &OptionError{Key: "cluster_tls", Err: errors.New("routes over TLS need this node's certificate: cluster_tls_cert_file and cluster_tls_key_file (or tls_cert_file and tls_key_file)")}
		}
	case cert == "":
		return &OptionError{Key: "cluster_tls_key_file", Err: errors.New("needs cluster_tls_cert_file too")}
	case key == "":
		return &OptionError{Key: "cluster_tls_cert_file", Err: errors.New("needs cluster_tls_key_file too")}
	}
	ca, crl := cfg.ClusterTLSCAFile, cfg.ClusterTLSCRLFile
	if ca == "" {
		// The routes trust the listeners' CA, and so its revocations too.
		ca = cfg.TLSCAFile
		if crl == "" {
			crl = cfg.TLSCRLFile
		}
	}
	if ca == "" {
		return &OptionError{Key: "cluster_tls", Err: errors.New("routes over TLS need the CA other nodes' certificates chain to: cluster_tls_ca_file (or tls_ca_file)")}
	}
	name, anyName := cfg.ServerName, !cfg.ClusterTLSVerifyNames
	st, err := tlsconf.New(tlsconf.Settings{
		CertFile: cert, KeyFile: key, CAFile: ca, CRLFile: crl, ClientAuth: "require",
		MinVersion: cfg.TLSMinVersion, CipherSuites: strings.Split(cfg.TLSCiphers, ","),
		Check: func(leaf *x509.Certificate) error { return route.CheckCertificate(leaf, name, anyName) },
	})
	if err != nil {
		return fmt.Errorf("cluster_tls: %w", err)
	}
	s.clusterTLS = st
	s.reloaders = append(s.reloaders, reloader{what: "cluster_tls", reload: func() ([]any, error) {
		if err := st.Reload(); err != nil {
			return nil, err
		}
		c := st.Certificate()
		return []any{"cert_serial", c.SerialNumber.Text(16), "cert_not_after", c.NotAfter}, nil
	}})
	return nil
}

// reloader is one part of the server that Reload reads anew: what names it in
// the log; reload returns attributes to log on success.
type reloader struct {
	what   string
	reload func() ([]any, error)
}

// Reload reads again the files the server takes anew while running (SIGHUP):
// the TLS certificate, key, CA and CRL files, of the listeners and of the routes,
// and the users file. Each part that fails keeps what it
// had; every outcome is logged, and the errors returned joined. Connections
// already made keep their TLS sessions; a new users file applies to them at
// once (each protocol checks its clients' logins again: auth.OnReload), before
// Reload returns.
func (s *Server) Reload() error {
	var errs []error
	for _, r := range s.reloaders {
		attrs, err := r.reload()
		if err != nil {
			s.log.Error("reload failed: the old configuration stays", "what", r.what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", r.what, err))
			continue
		}
		s.log.Info("reloaded", append([]any{"what", r.what}, attrs...)...)
	}
	if len(s.reloaders) == 0 {
		s.log.Info("reload: nothing to reload")
	}
	return errors.Join(errs...)
}

// frontend returns the front end called name, nil if there is none.
func (s *Server) frontend(name string) Frontend {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fe := range s.frontends {
		if fe.Name() == name {
			return fe
		}
	}
	return nil
}

// addrOf is the address of the front end called name, nil if there is none.
func (s *Server) addrOf(name string) net.Addr {
	if fe := s.frontend(name); fe != nil {
		return fe.Addr()
	}
	return nil
}

// MQTTAddr is the MQTT listener's address, or nil if MQTT is disabled.
func (s *Server) MQTTAddr() net.Addr { return s.addrOf("mqtt") }

// MQTTWebSocketAddr is the MQTT-over-WebSocket listener's address, or nil.
func (s *Server) MQTTWebSocketAddr() net.Addr { return s.addrOf("mqtt_ws") }

// KafkaAddr is the Kafka API listener's address, or nil when it is off.
func (s *Server) KafkaAddr() net.Addr { return s.addrOf("kafka") }

// UDPAddr is the native-over-UDP listener's address, or nil when it is off.
func (s *Server) UDPAddr() net.Addr { return s.addrOf("udp") }

// MQTT is the MQTT front end, nil when it is disabled.
func (s *Server) MQTT() *mqtt.Server { return s.mqtt }

// Addr is the native protocol listener's address, nil when it is off.
func (s *Server) Addr() net.Addr { return s.addrOf("native") }

// TLSAddr is the native-over-TLS listener's address, or nil when it is off.
func (s *Server) TLSAddr() net.Addr { return s.addrOf("native_tls") }

// MQTTTLSAddr is the MQTT-over-TLS listener's address, or nil when it is off.
func (s *Server) MQTTTLSAddr() net.Addr { return s.addrOf("mqtt_tls") }

// MQTTWSSAddr is the MQTT-over-secure-WebSocket listener's address, or nil.
func (s *Server) MQTTWSSAddr() net.Addr { return s.addrOf("mqtt_wss") }

// KafkaTLSAddr is the Kafka API's TLS listener's address, or nil when it is off.
func (s *Server) KafkaTLSAddr() net.Addr { return s.addrOf("kafka_tls") }

// HTTPSAddr is the monitoring TLS listener's address, or nil when it is off.
func (s *Server) HTTPSAddr() net.Addr { return s.addrOf("https") }

// Frontends lists the server's listeners in the order they were opened.
func (s *Server) Frontends() []Frontend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Frontend(nil), s.frontends...)
}

// URL is the address clients connect to, as tern://host:port; "" when the native
// TCP listener is off.
func (s *Server) URL() string { return localURL("tern://", s.Addr()) }

// TLSURL is the address clients connect to over TLS, as tls://host:port; "" when
// the native TLS listener is off.
func (s *Server) TLSURL() string { return localURL("tls://", s.TLSAddr()) }

func localURL(scheme string, addr net.Addr) string {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// HTTPAddr is the monitoring listener's address, or nil if it is disabled.
func (s *Server) HTTPAddr() net.Addr { return s.addrOf("http") }

// Broker exposes the routing core, for front ends started beside the native one.
func (s *Server) Broker() *broker.Broker { return s.broker }

// Shutdown closes the listeners, tells clients the server is going away and waits for
// connections to close until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.stopAll(ctx)
	s.log.Info("tern server stopped")
	return err
}

// stopAll shuts down every front end (the protocol servers with them, including
// those no listener was opened for), then the stream engine.
func (s *Server) stopAll(ctx context.Context) error {
	s.mu.Lock()
	fes := s.frontends
	s.mu.Unlock()
	var errs []error
	note := func(err error) {
		if err != nil && !slices.Contains(errs, err) { // a shared server's error once
			errs = append(errs, err)
		}
	}
	// Leave the cluster first: the other nodes stop routing here before the
	// clients are told to go.
	s.mu.Lock()
	node, stopURLWatch, usage := s.cluster, s.stopURLWatch, s.usage
	s.mu.Unlock()
	if usage != nil {
		usage.Stop()
	}
	// Before leaving: as its routes close, this node's list shrinks to itself, and
	// clients told so would have nowhere to go when it closes their connections.
	if stopURLWatch != nil {
		stopURLWatch()
	}
	if node != nil {
		if s.replicated != nil {
			s.replicated.Stop()
		}
		node.Shutdown(min(timeoutOf(ctx), time.Second))
	}
	// In the order opened: the monitoring endpoint last.
	for _, fe := range fes {
		note(fe.Shutdown(ctx))
	}
	if s.mqtt != nil {
		note(s.mqttStop.do(func() error { return s.mqtt.Shutdown(timeoutOf(ctx)) }))
	}
	if s.kafka != nil {
		note(s.kafka.Shutdown(timeoutOf(ctx))) // again if its front end did: a no-op
	}
	note(s.nativeStop.do(func() error { return s.native.Shutdown(timeoutOf(ctx)) }))
	if s.streams != nil {
		s.streams.Close()
	}
	return errors.Join(errs...)
}

// Status implements monitor.Source.
func (s *Server) Status() monitor.Status {
	st := monitor.Status{
		ServerID:       s.id,
		ServerName:     s.cfg.ServerName,
		Version:        Version,
		Start:          s.start,
		Now:            time.Now(),
		Subscriptions:  s.broker.Count(),
		MaxConnections: s.cfg.MaxConnections,
		MaxPayload:     s.cfg.MaxPayload,
		MaxPending:     s.cfg.MaxPending,
		Listeners:      map[string]string{},
		ByListener:     map[string]monitor.ListenerStats{},
	}
	for _, fe := range s.Frontends() {
		st.Listeners[fe.Name()] = fe.Addr().String()
		if _, ok := fe.(*monitorFrontend); ok {
			continue
		}
		ls := fe.Stats()
		st.ByListener[fe.Name()] = ls
		st.Connections += ls.Connections
		st.TotalConnections += ls.TotalConnections
		st.InMsgs += ls.InMsgs
		st.OutMsgs += ls.OutMsgs
		st.InBytes += ls.InBytes
		st.OutBytes += ls.OutBytes
		st.SlowConsumers += ls.SlowConsumers
		st.DroppedMsgs += ls.DroppedMsgs
	}
	if s.mqtt != nil {
		// Messages a full MQTT session queue refused belong to no listener.
		st.DroppedMsgs += s.mqtt.QueueDrops()
	}
	return st
}

// Connections implements monitor.Source.
func (s *Server) Connections() []monitor.ConnInfo {
	var out []monitor.ConnInfo
	for _, fe := range s.Frontends() {
		out = append(out, fe.Connections()...)
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

// kafkaDelay is the group machine's initial delay for the configured one: its
// zero means the default, so a configured 0 (no delay) becomes negative.
func kafkaDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
