package server

import (
	"flag"
	"fmt"
	"github.com/tern-mq/tern/internal/mqtt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/tern-mq/tern/internal/native"
)

// Config is the whole configuration of a server process.
type Config struct {
	Host               string
	Port               int    // native protocol TCP port; 0 picks a free port
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
	LogLevel           string // debug, info, warn, error
	LogFormat          string // text or json
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
		Host:               "0.0.0.0",
		Port:               7400,
		HTTPAddr:           "0.0.0.0:7480",
		MaxPayload:         1 << 20,
		MaxConnections:     65536,
		MaxSubscriptions:   0,
		MaxPending:         64 << 20,
		SlowConsumerPolicy: native.PolicyDrop,
		PingInterval:       2 * time.Minute,
		UDPIdleTimeout:     30 * time.Second,
		UDPMTU:             1200,
		UDPBundleDelay:     time.Millisecond,
		MaxPingsOut:        2,
		WriteTimeout:       10 * time.Second,
		ConnectTimeout:     2 * time.Second,
		LogLevel:           "info",
		LogFormat:          "text",
		StoreDir:           DefaultStoreDir(),
		Sync:               "interval",
		SyncInterval:       100 * time.Millisecond,
		SegmentSize:        64 << 20,
		MQTTPort:           1883,
		MQTTWSPort:         8083,
		MQTT:               mqtt.DefaultConfig(),
	}
}

// option is one setting, known by the same name in the file (key), on the command
// line (--key with '_' as '-') and in the environment (TERN_KEY).
type option struct {
	key  string
	help string
	get  func(c *Config) string
	set  func(c *Config, v string) error
}

func intOpt(p func(*Config) *int) (func(*Config) string, func(*Config, string) error) {
	return func(c *Config) string { return strconv.Itoa(*p(c)) },
		func(c *Config, v string) error {
			n, err := parseSize(v)
			if err != nil {
				return err
			}
			*p(c) = int(n)
			return nil
		}
}

func strOpt(p func(*Config) *string) (func(*Config) string, func(*Config, string) error) {
	return func(c *Config) string { return *p(c) },
		func(c *Config, v string) error { *p(c) = v; return nil }
}

func durOpt(p func(*Config) *time.Duration) (func(*Config) string, func(*Config, string) error) {
	return func(c *Config) string { return p(c).String() },
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			*p(c) = d
			return nil
		}
}

func opt(key, help string, get func(*Config) string, set func(*Config, string) error) option {
	return option{key: key, help: help, get: get, set: set}
}

var options = func() []option {
	var o []option
	add := func(key, help string, get func(*Config) string, set func(*Config, string) error) {
		o = append(o, opt(key, help, get, set))
	}
	g, s := strOpt(func(c *Config) *string { return &c.Host })
	add("host", "interface the protocol listeners bind to", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.Port })
	add("port", "native protocol TCP port (0 = any free port)", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.HTTPAddr })
	add("http", "monitoring HTTP address host:port (/healthz, /status, /connections, /metrics); empty disables", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.ServerName })
	add("server_name", "name reported to clients and in monitoring (default: host name)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MaxPayload })
	add("max_payload", "largest message payload accepted, bytes (suffixes KiB, MiB allowed)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MaxConnections })
	add("max_connections", "most client connections at once (0 = unlimited)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MaxSubscriptions })
	add("max_subscriptions", "most subscriptions per connection (0 = unlimited)", g, s)
	add("max_pending", "outbound bytes queued per connection before the slow-consumer policy applies (suffixes KiB, MiB, GiB)",
		func(c *Config) string { return strconv.FormatInt(c.MaxPending, 10) },
		func(c *Config, v string) error {
			n, err := parseSize(v)
			c.MaxPending = n
			return err
		})
	g, s = strOpt(func(c *Config) *string { return &c.SlowConsumerPolicy })
	add("slow_consumer_policy", "what happens to a connection over max_pending: drop (drop and count its new messages) or disconnect", g, s)
	gd, sd := durOpt(func(c *Config) *time.Duration { return &c.PingInterval })
	add("ping_interval", "how often the server pings each client", gd, sd)
	g, s = intOpt(func(c *Config) *int { return &c.MaxPingsOut })
	add("max_pings_out", "unanswered pings before a client is closed as stale", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.WriteTimeout })
	add("write_timeout", "a write to a client blocked longer than this closes it", gd, sd)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.ConnectTimeout })
	add("connect_timeout", "time a new connection has to send CONNECT", gd, sd)
	g, s = strOpt(func(c *Config) *string { return &c.LogLevel })
	add("log_level", "debug, info, warn or error", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.LogFormat })
	add("log_format", "text or json", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.StoreDir })
	add("store_dir", "directory of durable streams and consumers; empty disables streams", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.Sync })
	add("sync", "fsync policy of streams: always (fsync before every publish ack), interval (fsync every sync_interval) or never (leave it to the OS)", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.SyncInterval })
	add("sync_interval", "fsync period under the interval policy", gd, sd)
	add("segment_size", "size at which a stream log starts a new segment file (suffixes KiB, MiB, GiB)",
		func(c *Config) string { return strconv.FormatInt(c.SegmentSize, 10) },
		func(c *Config, v string) error {
			n, err := parseSize(v)
			c.SegmentSize = n
			return err
		})
	g, s = intOpt(func(c *Config) *int { return &c.MaxStreams })
	add("max_streams", "most streams (0 = unlimited)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MaxConsumers })
	add("max_consumers", "most consumers per stream (0 = unlimited)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.UDPPort })
	add("udp_port", "native protocol over reliable UDP (docs/udp.md): 0 = the native TCP port's number, -1 = off", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.UDPIdleTimeout })
	add("udp_idle_timeout", "a UDP session that hears nothing from its client this long ends: the longest outage it rides out", gd, sd)
	g, s = intOpt(func(c *Config) *int { return &c.UDPMTU })
	add("udp_mtu", "largest datagram the UDP transport sends, bytes (at least 265)", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.UDPBundleDelay })
	add("udp_bundle_delay", "how long the UDP transport waits to fill a datagram with more small frames (0: send every write at once)", gd, sd)
	g, s = strOpt(func(c *Config) *string { return &c.UDPKeyFile })
	add("udp_key_file", "file with the server's private key (tern udp-keygen): UDP sessions are encrypted and only encrypted clients accepted; empty = plaintext", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.UDPPSKFile })
	add("udp_psk_file", "file with a pre-shared key UDP clients must also have (needs udp_key_file); empty = none", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MQTTPort })
	add("mqtt_port", "MQTT TCP port (0 = any free port, -1 = no MQTT)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MQTTWSPort })
	add("mqtt_ws_port", "MQTT over WebSocket port, subprotocol mqtt, any path (0 = any free port, -1 = none)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MQTT.MaxInflight })
	add("mqtt_max_inflight", "QoS 1 and 2 messages sent to an MQTT client and not yet acknowledged (a v5 client's receive maximum may lower it)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MQTT.ReceiveMaximum })
	add("mqtt_receive_maximum", "QoS 2 publishes an MQTT client may have unreleased at once (advertised to v5 clients)", g, s)
	g, s = intOpt(func(c *Config) *int { return &c.MQTT.MaxQueued })
	add("mqtt_max_queued", "messages an MQTT session queues behind its in-flight window or while its client is away", g, s)
	g, s = strOpt(func(c *Config) *string { return &c.MQTT.QueuePolicy })
	add("mqtt_queue_policy", "when an MQTT session queue is full: drop-new (refuse the newest) or drop-old (evict the oldest)", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.MQTT.MaxSessionExpiry })
	add("mqtt_max_session_expiry", "longest an MQTT session outlives its connection (0 = as long as the client asks; MQTT 3 persistent sessions then never expire)", gd, sd)
	g, s = intOpt(func(c *Config) *int { return &c.MQTT.TopicAliasMaximum })
	add("mqtt_topic_alias_maximum", "topic aliases an MQTT 5 client may set (0 disables them)", g, s)
	gd, sd = durOpt(func(c *Config) *time.Duration { return &c.MQTT.MaxKeepAlive })
	add("mqtt_max_keepalive", "largest keepalive granted to MQTT 5 clients (0 = what the client asks)", gd, sd)
	return o
}()

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }
func envName(key string) string  { return "TERN_" + strings.ToUpper(key) }

// parseSize reads an integer with an optional KiB/MiB/GiB (or K/M/G, KB/MB/GB as
// powers of 1000) suffix.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	return n * mult, nil
}

// LoadConfig builds the configuration from defaults, the TOML file named by --config
// (or TERN_CONFIG), TERN_* environment variables and the flags in args, later sources
// overriding earlier ones. out receives --help text.
func LoadConfig(args []string, environ func(string) (string, bool), out io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("tern server", flag.ContinueOnError)
	fs.SetOutput(out)
	configPath := fs.String("config", "", "TOML configuration file (env TERN_CONFIG)")
	flagVals := map[string]*string{}
	for _, o := range options {
		flagVals[o.key] = fs.String(flagName(o.key), o.get(&cfg), fmt.Sprintf("%s (env %s)", o.help, envName(o.key)))
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: tern server [options]\n\nRuns the broker. Every option can also be set in the TOML file given by\n--config (same name, with '_' for '-') or in the environment (TERN_<NAME>);\nflags override the environment, which overrides the file.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	path := *configPath
	if path == "" {
		path, _ = environ("TERN_CONFIG")
	}
	if path != "" {
		if err := applyFile(&cfg, path); err != nil {
			return cfg, err
		}
	}
	for _, o := range options {
		if v, ok := environ(envName(o.key)); ok {
			if err := o.set(&cfg, v); err != nil {
				return cfg, fmt.Errorf("%s: %w", envName(o.key), err)
			}
		}
	}
	var ferr error
	byFlag := map[string]option{}
	for _, o := range options {
		byFlag[flagName(o.key)] = o
	}
	fs.Visit(func(f *flag.Flag) {
		o, ok := byFlag[f.Name]
		if !ok || ferr != nil {
			return
		}
		if err := o.set(&cfg, *flagVals[o.key]); err != nil {
			ferr = fmt.Errorf("--%s: %w", f.Name, err)
		}
	})
	return cfg, ferr
}

func applyFile(cfg *Config, path string) error {
	raw := map[string]any{}
	_, err := toml.DecodeFile(path, &raw)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	byKey := map[string]option{}
	for _, o := range options {
		byKey[o.key] = o
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := byKey[k]
		if !ok {
			return fmt.Errorf("config file %s: unknown setting %q", path, k)
		}
		if err := o.set(cfg, fmt.Sprint(raw[k])); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// EnvLookup is os.LookupEnv, for LoadConfig.
func EnvLookup(k string) (string, bool) { return os.LookupEnv(k) }
