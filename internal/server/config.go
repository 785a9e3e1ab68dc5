package server

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	envprovider "github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/tern-mq/tern/internal/cliflags"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/mqtt"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/tlsconf"
)

// Config is the whole configuration of a server process.
type Config struct {
	Host               string
	Port               int    // native protocol TCP port; 0 picks a free port, -1 disables it
	HTTPAddr           string // monitoring listener host:port; "" disables it
	ServerName         string
	MaxPayload         int
	MaxConnections     int
	MaxSubscriptions   int
	MaxPending         int64
	SlowConsumerPolicy string
	PingInterval       time.Duration
	MaxPingsOut        int
	WriteTimeout       time.Duration
	ConnectTimeout     time.Duration
	// TCPNotSentLowat bounds the unsent bytes in each client socket's kernel
	// buffer (TCP_NOTSENT_LOWAT); 0 leaves the kernel's default.
	TCPNotSentLowat int
	// GCPercent and MemoryLimit tune the Go collector of the process running the
	// server (GOGC and GOMEMLIMIT); 0 lets the process choose (cmd/tern: the
	// environment variable if set, else its own default). GCPercent -1 turns
	// collection off until MemoryLimit is reached.
	GCPercent   int
	MemoryLimit int64
	LogLevel    string // debug, info, warn, error
	LogFormat   string // text or json
	// StoreDir holds durable streams; "" disables them.
	StoreDir     string
	Sync         string // fsync policy of stream logs: always, interval or never
	SyncInterval time.Duration
	SegmentSize  int64
	MaxStreams   int
	MaxConsumers int
	// UDPPort is the native protocol's reliable-UDP port; 0 means the same number as
	// the native TCP port, -1 disables it.
	UDPPort int
	// UDPIdleTimeout ends a UDP session that has heard nothing from its peer this
	// long: the longest outage a session rides out without losing anything.
	UDPIdleTimeout time.Duration
	// UDPMTU is the largest datagram the UDP transport sends.
	UDPMTU int
	// UDPBundleDelay is how long the UDP transport waits to fill a datagram; 0
	// sends at once.
	UDPBundleDelay time.Duration
	// UDPKeyFile names a file holding the server's private key (`tern udp-keygen`);
	// set, every UDP session is encrypted (docs/udp.md, "Security").
	UDPKeyFile string
	// UDPPSKFile names a file holding a pre-shared key that UDP clients must also
	// have; it needs UDPKeyFile.
	UDPPSKFile string
	// MQTTPort is the MQTT TCP port; 0 picks a free port, -1 disables MQTT.
	MQTTPort int
	// MQTTWSPort is the MQTT-over-WebSocket port; 0 picks a free port, -1 disables it.
	MQTTWSPort int
	MQTT       mqtt.Config
	// KafkaPort is the Kafka API's TCP port; 0 picks a free port, -1 disables it.
	KafkaPort int
	// KafkaAdvertise is the host:port Metadata tells Kafka clients to connect to;
	// "" means the listener's own address (127.0.0.1 when bound to 0.0.0.0).
	KafkaAdvertise string
	// KafkaAutoCreate creates a topic's stream on the first Produce or Metadata
	// request that names it.
	KafkaAutoCreate bool
	// KafkaCompression is the compression.type of topics made by the Kafka API
	// that do not set one: "producer" (S2 blocks in the stream's logs) or
	// "uncompressed".
	KafkaCompression string
	// KafkaGroupInitialDelay holds an empty consumer group's first rebalance this
	// long (Kafka's group.initial.rebalance.delay.ms); negative: no delay.
	KafkaGroupInitialDelay time.Duration
	// UsersFile names the users file (docs/security.md); "" means no users.
	UsersFile string
	// Anonymous is who may connect without credentials: loopback, all or none;
	// "" means loopback without a users file and none with one.
	Anonymous string
	// ClusterPort is the port of the routes to other cluster nodes; -1 (the
	// default) runs the server alone, 0 picks a free port.
	ClusterPort int
	// GossipPort is the membership (gossip) port; 0 means ClusterPort + 1.
	GossipPort int
	// ClusterName keeps clusters on one network apart.
	ClusterName string
	// ClusterSecretFile names a file holding the secret every node of the cluster
	// shares (`tern cluster keygen`); set, gossip is encrypted and routes
	// authenticated (docs/security.md, "Cluster security").
	ClusterSecretFile string
	// ClusterTLS carries the routes over mutual TLS (docs/security.md, "Routes
	// over TLS"): each node presents ClusterTLSCertFile and verifies its peer's
	// against ClusterTLSCAFile (and ClusterTLSCRLFile). Empty files default to
	// their tls_* counterparts: cert and key as a pair, the CRL only along with
	// the CA. ClusterTLSVerifyNames: a peer's certificate must also name the node
	// it says it is (its server_name).
	ClusterTLS                            bool
	ClusterTLSCertFile, ClusterTLSKeyFile string
	ClusterTLSCAFile, ClusterTLSCRLFile   string
	ClusterTLSVerifyNames                 bool
	// Join lists members' route addresses, HOST:PORT, comma-separated.
	Join string
	// ClusterAdvertise is the host other nodes reach this one at, when it differs
	// from Host.
	ClusterAdvertise string
	// Failure detection (internal/cluster/membership/doc.go): how often a node
	// probes another, how long it waits for the direct answer, and how many probe
	// intervals a suspected node has to refute before it is declared dead.
	ClusterProbeInterval time.Duration
	ClusterProbeTimeout  time.Duration
	ClusterSuspicionMult int
	// ClusterSize is how many nodes the cluster is first started with: replication
	// (the meta group) forms once that many are members. 0: no replication.
	ClusterSize int
	// StreamReplicas is the replica count of a stream created without one, in a
	// cluster that replicates: 1, 3 or 5.
	StreamReplicas int
	// RaftSnapshotEntries: each Raft group snapshots its state after this many
	// applied entries and keeps half as many behind the snapshot in its log.
	RaftSnapshotEntries int

	// TLS (docs/security.md): the files and policy of every TLS listener, which
	// run beside the plaintext ones; each port is -1 (off) unless set.
	TLSCertFile, TLSKeyFile string
	TLSCAFile, TLSCRLFile   string
	TLSClientAuth           string // none, request, verify or require
	TLSMinVersion           string // 1.2 or 1.3
	TLSCiphers              string // TLS 1.2 cipher suite names, comma-separated; "" = Go's defaults
	TLSPort                 int    // native protocol over TLS
	MQTTTLSPort             int    // MQTT over TLS
	MQTTWSSPort             int    // MQTT over secure WebSocket
	KafkaTLSPort            int    // Kafka API over TLS
	// KafkaTLSAdvertise is the host:port Metadata gives the Kafka API's TLS
	// clients; "" means the TLS listener's own address.
	KafkaTLSAdvertise string
	HTTPSAddr         string // monitoring over TLS, host:port; "" disables it
}

// DefaultStoreDir is where streams live when no store_dir is configured:
// $XDG_DATA_HOME/tern, else ~/.local/share/tern, else ./tern-data.
func DefaultStoreDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "tern")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" && h != "/" {
		return filepath.Join(h, ".local", "share", "tern")
	}
	return "tern-data"
}

// DefaultConfig is the configuration of `tern server` with no file, flag or variable:
// everything on its default port on all interfaces.
func DefaultConfig() Config {
	return Config{
		Host:                   "0.0.0.0",
		Port:                   7400,
		HTTPAddr:               "0.0.0.0:7480",
		MaxPayload:             1 << 20,
		MaxConnections:         65536,
		MaxSubscriptions:       0,
		MaxPending:             64 << 20,
		SlowConsumerPolicy:     outbound.PolicyDrop.String(),
		PingInterval:           2 * time.Minute,
		UDPIdleTimeout:         30 * time.Second,
		UDPMTU:                 1200,
		UDPBundleDelay:         time.Millisecond,
		MaxPingsOut:            2,
		WriteTimeout:           10 * time.Second,
		TCPNotSentLowat:        128 << 10,
		ConnectTimeout:         2 * time.Second,
		LogLevel:               "info",
		LogFormat:              "text",
		StoreDir:               DefaultStoreDir(),
		Sync:                   "interval",
		SyncInterval:           100 * time.Millisecond,
		SegmentSize:            64 << 20,
		MQTTPort:               1883,
		MQTTWSPort:             8083,
		MQTT:                   mqtt.DefaultConfig(),
		KafkaPort:              9092,
		KafkaAutoCreate:        true,
		KafkaCompression:       "producer",
		KafkaGroupInitialDelay: 3 * time.Second,
		ClusterPort:            -1,
		ClusterName:            "tern",
		ClusterTLSVerifyNames:  true,

		ClusterProbeInterval: membership.DefaultProbeInterval,
		ClusterProbeTimeout:  membership.DefaultProbeTimeout,
		ClusterSuspicionMult: membership.DefaultSuspicionMult,
		StreamReplicas:       1,
		RaftSnapshotEntries:  replica.DefaultSnapshotEntries,

		TLSClientAuth: "none",
		TLSMinVersion: "1.2",
		TLSPort:       -1,
		MQTTTLSPort:   -1,
		MQTTWSSPort:   -1,
		KafkaTLSPort:  -1,
	}
}

// The groups options are listed under in `tern server --help` and the docs.
const (
	groupNetwork  = "Network"
	groupTLS      = "TLS"
	groupLimits   = "Limits"
	groupKeepTime = "Keepalive and timeouts"
	groupStorage  = "Storage"
	groupMQTT     = "MQTT"
	groupKafka    = "Kafka"
	groupUDP      = "UDP"
	groupLogging  = "Logging"
	groupRuntime  = "Runtime"
	groupCluster  = "Cluster"
	groupSecurity = "Security"
)

// option is one server setting, declared once. Its key names it in the TOML file;
// the flag is --key with '_' as '-' and the environment variable TERN_KEY. bind
// gives the typed value bound to the option's field of a Config, which parses it,
// prints it and, bound to DefaultConfig(), gives its default.
type option struct {
	key, group, help string
	bind             func(c *Config) pflag.Value
	// defaultText, when set, is shown instead of the default value (which then
	// depends on the machine); docDefault likewise in the generated documentation.
	defaultText, docDefault string
}

const (
	anyPort     = 65535
	unlimited   = math.MaxInt
	portHelpOff = " (0 = any free port, -1 = off)"
)

func str(p *string) pflag.Value                    { return cliflags.NewString(p) }
func count(p *int) pflag.Value                     { return cliflags.NewInt(p, 0, unlimited) }
func dur(p *time.Duration) pflag.Value             { return cliflags.NewDuration(p) }
func enum(p *string, values ...string) pflag.Value { return cliflags.NewEnum(p, values...) }

// options lists every server option in the order of `tern server --help`.
var options = []option{
	{key: "host", group: groupNetwork, help: "interface the protocol listeners bind to",
		bind: func(c *Config) pflag.Value { return str(&c.Host) }},
	{key: "port", group: groupNetwork, help: "native protocol TCP port" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.Port, -1, anyPort) }},
	{key: "http", group: groupNetwork, help: "monitoring HTTP address host:port (/healthz, /status, /connections, /cluster, /metrics); empty disables it",
		bind: func(c *Config) pflag.Value { return str(&c.HTTPAddr) }},
	{key: "server_name", group: groupNetwork, help: "name reported to clients (INFO) and in monitoring",
		bind: func(c *Config) pflag.Value { return str(&c.ServerName) }, defaultText: "the host name"},

	{key: "tls_cert_file", group: groupTLS, help: "PEM certificate (chain) of the TLS listeners; needed by every TLS port",
		bind: func(c *Config) pflag.Value { return str(&c.TLSCertFile) }},
	{key: "tls_key_file", group: groupTLS, help: "PEM private key of tls_cert_file",
		bind: func(c *Config) pflag.Value { return str(&c.TLSKeyFile) }},
	{key: "tls_ca_file", group: groupTLS, help: "PEM certificates of the authorities client certificates must chain to (tls_client_auth verify or require)",
		bind: func(c *Config) pflag.Value { return str(&c.TLSCAFile) }},
	{key: "tls_crl_file", group: groupTLS, help: "certificate revocation list(s), PEM or DER, signed by a CA of tls_ca_file: client certificates they list are refused",
		bind: func(c *Config) pflag.Value { return str(&c.TLSCRLFile) }},
	{key: "tls_client_auth", group: groupTLS, help: "client certificates: none (not asked for), request (asked for, not verified), verify (verified if given) or require (required and verified)",
		bind: func(c *Config) pflag.Value { return enum(&c.TLSClientAuth, tlsconf.ClientAuthModes...) }},
	{key: "tls_min_version", group: groupTLS, help: "oldest TLS version accepted",
		bind: func(c *Config) pflag.Value { return enum(&c.TLSMinVersion, tlsconf.MinVersions...) }},
	{key: "tls_ciphers", group: groupTLS, help: "TLS 1.2 cipher suites allowed, Go names, comma-separated (TLS 1.3 suites are always on); empty = Go's secure defaults",
		bind: func(c *Config) pflag.Value { return str(&c.TLSCiphers) }},
	{key: "tls_port", group: groupTLS, help: "native protocol over TLS (clients use tls://host:port)" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.TLSPort, -1, anyPort) }},
	{key: "mqtt_tls_port", group: groupTLS, help: "MQTT over TLS, 8883 by convention" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTTTLSPort, -1, anyPort) }},
	{key: "mqtt_wss_port", group: groupTLS, help: "MQTT over secure WebSocket (wss://), subprotocol mqtt, any path" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTTWSSPort, -1, anyPort) }},
	{key: "kafka_tls_port", group: groupTLS, help: "Kafka API over TLS (security.protocol=SSL)" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.KafkaTLSPort, -1, anyPort) }},
	{key: "kafka_tls_advertise", group: groupTLS, help: "host:port Kafka clients of kafka_tls_port are told to connect to (Metadata); empty = that listener's address",
		bind: func(c *Config) pflag.Value { return str(&c.KafkaTLSAdvertise) }},
	{key: "https", group: groupTLS, help: "monitoring over TLS, host:port (the endpoints of http); empty disables it",
		bind: func(c *Config) pflag.Value { return str(&c.HTTPSAddr) }},

	{key: "max_payload", group: groupLimits, help: "largest message payload accepted",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.MaxPayload) }},
	{key: "max_connections", group: groupLimits, help: "most client connections at once (0 = unlimited)",
		bind: func(c *Config) pflag.Value { return count(&c.MaxConnections) }},
	{key: "max_subscriptions", group: groupLimits, help: "most subscriptions per connection (0 = unlimited)",
		bind: func(c *Config) pflag.Value { return count(&c.MaxSubscriptions) }},
	{key: "max_pending", group: groupLimits, help: "outbound bytes queued per connection before the slow-consumer policy applies",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.MaxPending) }},
	{key: "tcp_notsent_lowat", group: groupLimits, help: "unsent bytes a client's TCP socket may hold in the kernel (Linux TCP_NOTSENT_LOWAT; 0 = kernel default): keeps a subscriber's backlog where flow control sees it",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.TCPNotSentLowat) }},
	{key: "slow_consumer_policy", group: groupLimits, help: "what happens to a connection over max_pending: drop (its new messages are dropped and counted) or disconnect",
		bind: func(c *Config) pflag.Value {
			return enum(&c.SlowConsumerPolicy, outbound.PolicyDrop.String(), outbound.PolicyDisconnect.String())
		}},

	{key: "ping_interval", group: groupKeepTime, help: "how often the server pings each client",
		bind: func(c *Config) pflag.Value { return dur(&c.PingInterval) }},
	{key: "max_pings_out", group: groupKeepTime, help: "unanswered pings before a client is closed as stale",
		bind: func(c *Config) pflag.Value { return count(&c.MaxPingsOut) }},
	{key: "write_timeout", group: groupKeepTime, help: "a write to a client blocked longer than this closes the connection",
		bind: func(c *Config) pflag.Value { return dur(&c.WriteTimeout) }},
	{key: "connect_timeout", group: groupKeepTime, help: "time a new connection has to send CONNECT",
		bind: func(c *Config) pflag.Value { return dur(&c.ConnectTimeout) }},

	{key: "store_dir", group: groupStorage, help: "directory of streams, consumers and MQTT sessions; empty disables streams",
		bind:       func(c *Config) pflag.Value { return str(&c.StoreDir) },
		docDefault: "`$XDG_DATA_HOME/tern`, else `~/.local/share/tern`, else `./tern-data`"},
	{key: "sync", group: groupStorage, help: "fsync policy of stream logs and consumer journals: always (before every publish ack), interval (every sync_interval) or never (left to the OS)",
		bind: func(c *Config) pflag.Value { return enum(&c.Sync, "always", "interval", "never") }},
	{key: "sync_interval", group: groupStorage, help: "fsync period under the interval policy",
		bind: func(c *Config) pflag.Value { return dur(&c.SyncInterval) }},
	{key: "segment_size", group: groupStorage, help: "size at which a stream log starts a new segment file",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.SegmentSize) }},
	{key: "max_streams", group: groupStorage, help: "most streams (0 = unlimited)",
		bind: func(c *Config) pflag.Value { return count(&c.MaxStreams) }},
	{key: "max_consumers", group: groupStorage, help: "most consumers per stream, durable and ephemeral (0 = unlimited)",
		bind: func(c *Config) pflag.Value { return count(&c.MaxConsumers) }},

	{key: "cluster_port", group: groupCluster, help: "port of the routes to the other cluster nodes (-1 = run alone, 0 = any free port); gossip uses gossip_port",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.ClusterPort, -1, anyPort) }},
	{key: "join", group: groupCluster, help: "members to join, HOST:PORT of their cluster ports, comma-separated; may name this node and DNS names with several addresses; implies a cluster (cluster_port 7401 unless set)",
		bind: func(c *Config) pflag.Value { return str(&c.Join) }},
	{key: "cluster_name", group: groupCluster, help: "name of the cluster: nodes of another cluster are refused",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterName) }},
	{key: "cluster_secret_file", group: groupCluster, help: "file with the secret every node of the cluster shares (tern cluster keygen -o FILE): gossip is encrypted and routes authenticated with keys derived from it, and nodes without it are refused; empty = neither",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterSecretFile) }},
	{key: "cluster_tls", group: groupCluster, help: "routes over mutual TLS from the first byte: each node presents its certificate and verifies its peer's against the CA; a node without a valid certificate gets no route (gossip is encrypted by cluster_secret_file, not TLS)",
		bind: func(c *Config) pflag.Value { return cliflags.NewBool(&c.ClusterTLS) }},
	{key: "cluster_tls_cert_file", group: groupCluster, help: "PEM certificate (chain) of this node on its routes, for both server and client authentication, naming the node (server_name); empty = tls_cert_file (with tls_key_file)",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterTLSCertFile) }},
	{key: "cluster_tls_key_file", group: groupCluster, help: "PEM private key of cluster_tls_cert_file; empty = tls_key_file (with tls_cert_file)",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterTLSKeyFile) }},
	{key: "cluster_tls_ca_file", group: groupCluster, help: "PEM certificates of the authorities the other nodes' certificates must chain to; empty = tls_ca_file",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterTLSCAFile) }},
	{key: "cluster_tls_crl_file", group: groupCluster, help: "revocation list(s) of node certificates, signed by a CA of cluster_tls_ca_file; empty = tls_crl_file when cluster_tls_ca_file is empty too, else none",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterTLSCRLFile) }},
	{key: "cluster_tls_verify_names", group: groupCluster, help: "a peer's route certificate must name the node it says it is (its server_name, as a DNS name or the common name); false = any certificate of the CA for any node",
		bind: func(c *Config) pflag.Value { return cliflags.NewBool(&c.ClusterTLSVerifyNames) }},
	{key: "gossip_port", group: groupCluster, help: "membership (gossip) port, UDP and TCP (0 = cluster_port + 1)",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.GossipPort, 0, anyPort) }},
	{key: "cluster_advertise", group: groupCluster, help: "host other nodes reach this one at, when it differs from host (0.0.0.0, NAT, containers)",
		bind: func(c *Config) pflag.Value { return str(&c.ClusterAdvertise) }},
	{key: "cluster_probe_interval", group: groupCluster, help: "failure detection: how often a node probes one other node; one that stops answering is declared dead after about 5 to 8 intervals (docs/cluster.md): shorter finds dead nodes sooner, and takes a shorter stall (GC, starved CPU) for death",
		bind: func(c *Config) pflag.Value { return dur(&c.ClusterProbeInterval) }},
	{key: "cluster_probe_timeout", group: groupCluster, help: "failure detection: wait for a probe's direct answer before asking other nodes to probe; shorter than cluster_probe_interval, above the round trip between nodes",
		bind: func(c *Config) pflag.Value { return dur(&c.ClusterProbeTimeout) }},
	{key: "cluster_suspicion_mult", group: groupCluster, help: "failure detection: a suspected node has this many probe intervals (times log10 of the node count, at least 1) to refute before it is declared dead",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.ClusterSuspicionMult, 1, 100) }},
	{key: "cluster_size", group: groupCluster, help: "how many nodes the cluster is first started with: replication (the meta group, docs/cluster.md) forms once that many nodes are members; 0 = no replication",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.ClusterSize, 0, 1000) }},
	{key: "raft_snapshot_entries", group: groupCluster, help: "each Raft group snapshots its state after this many log entries and keeps half as many behind the snapshot: a replica further behind catches up from a snapshot and the leader's stream log instead of the Raft log",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.RaftSnapshotEntries, 2, 10_000_000) }},
	{key: "stream_replicas", group: groupCluster, help: "replicas (1, 3 or 5) of a stream created without a count, in a cluster that replicates (cluster_size); more than the nodes there are fails the create",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.StreamReplicas, 1, 5) }},

	{key: "mqtt_port", group: groupMQTT, help: "MQTT TCP port (0 = any free port, -1 = no plaintext MQTT: neither TCP nor WebSocket)",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTTPort, -1, anyPort) }},
	{key: "mqtt_ws_port", group: groupMQTT, help: "MQTT over WebSocket port, subprotocol mqtt, any path" + portHelpOff,
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTTWSPort, -1, anyPort) }},
	{key: "mqtt_max_inflight", group: groupMQTT, help: "QoS 1 and 2 messages sent to an MQTT client and not yet acknowledged (a v5 client's receive maximum may lower it)",
		bind: func(c *Config) pflag.Value { return count(&c.MQTT.MaxInflight) }},
	{key: "mqtt_receive_maximum", group: groupMQTT, help: "QoS 2 publishes an MQTT client may have unreleased at once (advertised to v5 clients)",
		bind: func(c *Config) pflag.Value { return count(&c.MQTT.ReceiveMaximum) }},
	{key: "mqtt_max_queued", group: groupMQTT, help: "messages an MQTT session queues behind its in-flight window or while its client is away",
		bind: func(c *Config) pflag.Value { return count(&c.MQTT.MaxQueued) }},
	{key: "mqtt_queue_policy", group: groupMQTT, help: "when an MQTT session queue is full: drop-new (refuse the newest) or drop-old (evict the oldest)",
		bind: func(c *Config) pflag.Value { return enum(&c.MQTT.QueuePolicy, mqtt.PolicyDropNew, mqtt.PolicyDropOld) }},
	{key: "mqtt_max_session_expiry", group: groupMQTT, help: "longest an MQTT session outlives its connection (0 = as long as the client asks; MQTT 3 persistent sessions then never expire)",
		bind: func(c *Config) pflag.Value { return dur(&c.MQTT.MaxSessionExpiry) }},
	{key: "mqtt_topic_alias_maximum", group: groupMQTT, help: "topic aliases an MQTT 5 client may set (0 disables them)",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTT.TopicAliasMaximum, 0, 65535) }},
	{key: "mqtt_outbound_topic_aliases", group: groupMQTT, help: "topic aliases the server uses on messages to an MQTT 5 client that allows them (the client's topic alias maximum may lower it; 0 disables them)",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.MQTT.OutboundTopicAliases, 0, 65535) }},
	{key: "mqtt_max_keepalive", group: groupMQTT, help: "largest keepalive granted to MQTT 5 clients (0 = what the client asks)",
		bind: func(c *Config) pflag.Value { return dur(&c.MQTT.MaxKeepAlive) }},

	{key: "kafka_port", group: groupKafka, help: "Kafka API TCP port (docs/kafka.md; 0 = any free port, -1 = no Kafka API)",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.KafkaPort, -1, anyPort) }},
	{key: "kafka_advertise", group: groupKafka, help: "host:port Kafka clients are told to connect to (Metadata); empty = the listener's address, 127.0.0.1 when host is 0.0.0.0",
		bind: func(c *Config) pflag.Value { return str(&c.KafkaAdvertise) }},
	{key: "kafka_auto_create", group: groupKafka, help: "create a topic (a stream of the same name capturing that subject) on the first Produce or Metadata request naming it",
		bind: func(c *Config) pflag.Value { return cliflags.NewBool(&c.KafkaAutoCreate) }},
	{key: "kafka_compression", group: groupKafka, help: "compression.type of topics made by the Kafka API that set none: producer = their streams store S2-compressed blocks, uncompressed = messages as they are (docs/kafka.md)",
		bind: func(c *Config) pflag.Value { return enum(&c.KafkaCompression, "producer", "uncompressed") }},
	{key: "kafka_group_initial_delay", group: groupKafka, help: "how long an empty consumer group's first rebalance waits for more members to join (Kafka's group.initial.rebalance.delay.ms; 0 = none)",
		bind: func(c *Config) pflag.Value { return dur(&c.KafkaGroupInitialDelay) }},

	{key: "udp_port", group: groupUDP, help: "native protocol over reliable UDP (docs/udp.md): 0 = the native TCP port's number (off when port is -1), -1 = off",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.UDPPort, -1, anyPort) }},
	{key: "udp_idle_timeout", group: groupUDP, help: "a UDP session that hears nothing from its client this long ends: the longest outage it rides out with nothing lost",
		bind: func(c *Config) pflag.Value { return dur(&c.UDPIdleTimeout) }},
	{key: "udp_mtu", group: groupUDP, help: "largest datagram the UDP transport sends (at least 265, 289 with encryption); a client's may be up to twice this",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.UDPMTU) }},
	{key: "udp_bundle_delay", group: groupUDP, help: "how long the UDP transport waits to fill a datagram with more small frames (0 = send every write at once)",
		bind: func(c *Config) pflag.Value { return dur(&c.UDPBundleDelay) }},
	{key: "udp_key_file", group: groupUDP, help: "file with the server's private key (tern udp-keygen -o FILE): UDP sessions are encrypted and only clients with the server's public key accepted; empty = plaintext",
		bind: func(c *Config) pflag.Value { return str(&c.UDPKeyFile) }},
	{key: "udp_psk_file", group: groupUDP, help: "file with a pre-shared key (tern udp-keygen --psk -o FILE) that UDP clients must also have; needs udp_key_file",
		bind: func(c *Config) pflag.Value { return str(&c.UDPPSKFile) }},

	{key: "users_file", group: groupSecurity, help: "file of users, groups and permissions (docs/security.md); re-read on SIGHUP, applied to open connections too; empty = no users",
		bind: func(c *Config) pflag.Value { return str(&c.UsersFile) }},
	{key: "anonymous", group: groupSecurity, help: "who may connect without credentials: loopback (clients on 127.0.0.0/8 and ::1), all, or none",
		bind:        func(c *Config) pflag.Value { return enum(&c.Anonymous, "loopback", "all", "none") },
		defaultText: "loopback without users_file, none with it", docDefault: "loopback without `users_file`, none with it"},

	{key: "log_level", group: groupLogging, help: "least severe level logged",
		bind: func(c *Config) pflag.Value { return enum(&c.LogLevel, "debug", "info", "warn", "error") }},
	{key: "log_format", group: groupLogging, help: "text, or json (one object per line)",
		bind: func(c *Config) pflag.Value { return enum(&c.LogFormat, "text", "json") }},

	{key: "gc_percent", group: groupRuntime, help: "heap growth between Go garbage collections, in percent of the live heap (GOGC; -1 = only at memory_limit); 0 = GOGC if set, else 400: fewer collections, so fewer pauses on the publish path",
		bind: func(c *Config) pflag.Value { return cliflags.NewInt(&c.GCPercent, -1, 1_000_000) }},
	{key: "memory_limit", group: groupRuntime, help: "soft limit of the process's memory: the collector runs as often as it must to stay under it (GOMEMLIMIT); 0 = GOMEMLIMIT if set, else half of the machine's or the cgroup's memory",
		bind: func(c *Config) pflag.Value { return cliflags.NewByteSize(&c.MemoryLimit) }},
}

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }
func envName(key string) string  { return "TERN_" + strings.ToUpper(key) }

func optionByKey(key string) (option, bool) {
	for _, o := range options {
		if o.key == key {
			return o, true
		}
	}
	return option{}, false
}

// OptionError is a value an option does not take, from whichever source.
type OptionError struct {
	Key string
	Err error // says what was given and what is accepted
}

func (e *OptionError) Error() string { return "option " + e.Key + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// OptionInfo describes one option for help, completion and documentation.
type OptionInfo struct {
	Key   string // the name in the TOML file
	Flag  string // the command-line flag, without dashes
	Env   string // the environment variable
	Group string
	// Type is int, string, duration, bytes, or an enumeration's values separated
	// by '|'.
	Type string
	// Values are an enumeration's values, nil for other types.
	Values []string
	// Default is the value with nothing configured, as help shows it.
	Default string
	// DocDefault is the default as the documentation shows it, Markdown.
	DocDefault string
	Help       string
}

// Options describes every server option, in the order of `tern server --help`.
func Options() []OptionInfo {
	def := DefaultConfig()
	out := make([]OptionInfo, 0, len(options))
	for _, o := range options {
		v := o.bind(&def)
		info := OptionInfo{Key: o.key, Flag: flagName(o.key), Env: envName(o.key), Group: o.group,
			Type: v.Type(), Default: o.defaultText, Help: o.help}
		if e, ok := v.(*cliflags.Enum); ok {
			info.Values = e.Allowed()
		}
		if info.Default == "" {
			info.Default = v.String()
			if v.Type() == "string" {
				info.Default = strconv.Quote(info.Default)
			}
		}
		info.DocDefault = o.docDefault
		if info.DocDefault == "" {
			info.DocDefault = "`" + v.String() + "`"
			switch {
			case o.defaultText != "":
				info.DocDefault = o.defaultText
			case v.String() == "":
				info.DocDefault = "empty"
			}
		}
		out = append(out, info)
	}
	return out
}

// OptionsIntro says where options come from, for the top of `tern server --help`.
const OptionsIntro = `Every option can also be set in the TOML file given by --config (or
TERN_CONFIG) under its name with '_' for '-' (max_pending = "128MiB"), or in
the environment as TERN_ and the name in capitals (TERN_MAX_PENDING=128MiB).
Flags override the environment, which overrides the file. Sizes take KiB, MiB,
GiB (also K, M, G) or KB, MB, GB; durations are Go durations (500ms, 30s, 2m).`

// WriteOptionsHelp writes --config and every option with its type, help and
// default, grouped, as `tern server --help` lists them; extra lines (such as
// -h, --help) are added under "Other".
func WriteOptionsHelp(w io.Writer, extra ...[2]string) {
	type line struct{ group, left, right string }
	lines := []line{{"Configuration file", "--config file", "TOML file with any of the options below (default $TERN_CONFIG, else none)"}}
	for _, o := range Options() {
		lines = append(lines, line{o.Group, "--" + o.Flag + " " + o.Type, o.Help + " (default " + o.Default + ")"})
	}
	for _, e := range extra {
		lines = append(lines, line{"Other", e[0], e[1]})
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l.left))
	}
	group := ""
	for _, l := range lines {
		if l.group != group {
			if group != "" {
				fmt.Fprintln(w)
			}
			group = l.group
			fmt.Fprintf(w, "%s:\n", group)
		}
		fmt.Fprintf(w, "  %-*s   %s\n", width, l.left, l.right)
	}
}

// optionValue is an option's value on the command line: its errors name the option.
type optionValue struct {
	key string
	pflag.Value
}

func (v *optionValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		return &OptionError{Key: v.key, Err: err}
	}
	return nil
}

// ConfigFlags are the server's options on a command line, see AddConfigFlags.
type ConfigFlags struct {
	fs   *pflag.FlagSet
	path string
	set  Config // what the flags were given; only the flags changed are read
}

// AddConfigFlags defines --config and a flag for every option on fs. Once fs has
// parsed the command line, Load builds the configuration.
func AddConfigFlags(fs *pflag.FlagSet) *ConfigFlags {
	cf := &ConfigFlags{fs: fs, set: DefaultConfig()}
	fs.StringVar(&cf.path, "config", "", "TOML configuration `file` (env TERN_CONFIG)")
	for _, o := range options {
		fs.Var(&optionValue{o.key, o.bind(&cf.set)}, flagName(o.key), o.help)
	}
	return cf
}

// Load builds the configuration from the defaults, the TOML file named by
// --config (or TERN_CONFIG), the TERN_* variables that environ finds and the flags
// given, each source overriding the ones before. A value an option does not take,
// from any source, is an *OptionError; a key in the file that is no option is an
// error naming it.
func (cf *ConfigFlags) Load(environ func(string) (string, bool)) (Config, error) {
	merged := koanf.New(".")
	path := cf.path
	if path == "" {
		path, _ = environ("TERN_CONFIG")
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err) // it names the file
		}
		if err := layer(merged, rawbytes.Provider(b), tomlParser{}, func(string) string { return "config file " + path + ": " }); err != nil {
			return Config{}, err
		}
	}
	env := envprovider.Provider(".", envprovider.Opt{
		EnvironFunc: func() []string {
			var vars []string
			for _, o := range options {
				if v, ok := environ(envName(o.key)); ok {
					vars = append(vars, envName(o.key)+"="+v)
				}
			}
			return vars
		},
		TransformFunc: func(k, v string) (string, any) {
			return strings.ToLower(strings.TrimPrefix(k, "TERN_")), v
		},
	})
	if err := layer(merged, env, nil, func(key string) string { return "environment " + envName(key) + ": " }); err != nil {
		return Config{}, err
	}
	flags := posflag.ProviderWithValue(cf.fs, ".", nil, func(name, value string) (string, any) {
		key := strings.ReplaceAll(name, "-", "_")
		if _, ok := optionByKey(key); !ok || !cf.fs.Lookup(name).Changed {
			return "", nil // not given, or --config, --help or a flag the caller added
		}
		return key, value
	})
	if err := layer(merged, flags, nil, func(string) string { return "" }); err != nil {
		return Config{}, err
	}
	cfg := DefaultConfig()
	for _, key := range merged.Keys() {
		o, _ := optionByKey(key)
		v, _ := scalar(merged.Get(key))
		if err := o.bind(&cfg).Set(v); err != nil {
			return Config{}, &OptionError{Key: key, Err: err} // checked by layer; not reached
		}
	}
	return cfg, nil
}

// layer loads one source over merged, after checking that every key it has is
// an option and every value one the option takes; where(key) says where the
// value came from in errors.
func layer(merged *koanf.Koanf, p koanf.Provider, parser koanf.Parser, where func(key string) string) error {
	k := koanf.New(".")
	if err := k.Load(p, parser); err != nil {
		return fmt.Errorf("%s%w", where(""), err)
	}
	for _, key := range k.Keys() {
		o, ok := optionByKey(key)
		if !ok {
			hint := ""
			if alt := strings.NewReplacer(".", "_", "-", "_").Replace(key); alt != key {
				if _, ok := optionByKey(alt); ok {
					hint = fmt.Sprintf(" (did you mean %s?)", alt)
				}
			}
			return fmt.Errorf("%sunknown option %q%s", where(key), key, hint)
		}
		v, err := scalar(k.Get(key))
		if err == nil {
			var scratch Config
			err = o.bind(&scratch).Set(v)
		}
		if err != nil {
			return fmt.Errorf("%s%w", where(key), &OptionError{Key: key, Err: err})
		}
	}
	return merged.Merge(k)
}

// scalar turns a value from a source into the text an option parses: TOML gives
// numbers and booleans typed, everything else gives strings.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", &cliflags.ValueError{Value: fmt.Sprint(v), Want: "is not a single value (want a string or a number)"}
}

// tomlParser lets koanf read TOML with BurntSushi/toml, whose errors give the line.
type tomlParser struct{}

func (tomlParser) Unmarshal(b []byte) (map[string]any, error) {
	m := map[string]any{}
	if err := toml.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (tomlParser) Marshal(m map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	err := toml.NewEncoder(&buf).Encode(m)
	return buf.Bytes(), err
}

// LoadConfig builds the configuration from defaults, the TOML file named by --config
// (or TERN_CONFIG), TERN_* environment variables and the flags in args, later sources
// overriding earlier ones. --help writes the options to out and returns an error
// that is flag.ErrHelp.
func LoadConfig(args []string, environ func(string) (string, bool), out io.Writer) (Config, error) {
	fs := pflag.NewFlagSet("tern server", pflag.ContinueOnError)
	fs.SetOutput(out)
	cf := AddConfigFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: tern server [options]\n\nRuns the broker.\n\n%s\n\n", OptionsIntro)
		WriteOptionsHelp(out, [2]string{"-h, --help", "show this help"})
	}
	err := fs.Parse(cliflags.GoStyleArgs(fs, args))
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return Config{}, flag.ErrHelp
	case err != nil:
		var oe *OptionError
		if errors.As(err, &oe) {
			return Config{}, oe
		}
		return Config{}, err
	case fs.NArg() > 0:
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return cf.Load(environ)
}

// EnvLookup is os.LookupEnv, for LoadConfig.
func EnvLookup(k string) (string, bool) { return os.LookupEnv(k) }
