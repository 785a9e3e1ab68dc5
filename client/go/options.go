package tern

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// Options configure a connection. Connect starts from DefaultOptions and applies the
// Option functions in order; Options.Connect uses a filled-in value directly. Each field
// is documented at the Option that sets it (DisconnectHandler is set by
// DisconnectErrHandler, AllowReconnect cleared by NoReconnect, PendingMsgsLimit and
// PendingBytesLimit by PendingLimits).
type Options struct {
	Name                string
	Credentials         []byte
	Timeout             time.Duration
	ReconnectWait       time.Duration
	MaxReconnectWait    time.Duration
	MaxReconnects       int // -1: forever
	AllowReconnect      bool
	ReconnectBufSize    int
	PingInterval        time.Duration
	MaxPingsOutstanding int
	FlushDelay          time.Duration
	WriteBufferSize     int
	ReadBufferSize      int
	NoEcho              bool
	NoClusterDiscovery  bool
	PendingMsgsLimit    int // per subscription; <= 0: unlimited
	PendingBytesLimit   int // per subscription; <= 0: unlimited
	DrainTimeout        time.Duration
	UDPBundleDelay      time.Duration // udp:// only
	UDPIdleTimeout      time.Duration // udp:// only
	UDPServerKey        []byte
	UDPPreSharedKey     []byte
	// tls:// only (tls.go).
	TLSConfig     *tls.Config
	TLSRootCAs    *x509.CertPool
	TLSCAFile     string
	TLSCertFile   string
	TLSKeyFile    string
	TLSServerName string

	ConnectHandler           func(*Conn)
	DisconnectHandler        func(*Conn, error)
	ReconnectHandler         func(*Conn)
	ClosedHandler            func(*Conn)
	ErrorHandler             func(*Conn, *Subscription, error)
	DiscoveredServersHandler func(*Conn)
	Logger                   *slog.Logger
}

// DefaultOptions are the options Connect starts from.
func DefaultOptions() Options {
	return Options{
		Timeout:             2 * time.Second,
		ReconnectWait:       250 * time.Millisecond,
		MaxReconnectWait:    5 * time.Second,
		MaxReconnects:       60,
		AllowReconnect:      true,
		ReconnectBufSize:    8 << 20,
		PingInterval:        2 * time.Minute,
		MaxPingsOutstanding: 2,
		WriteBufferSize:     32 << 10,
		PendingMsgsLimit:    512 << 10,
		PendingBytesLimit:   64 << 20,
		DrainTimeout:        30 * time.Second,
		UDPBundleDelay:      time.Millisecond,
	}
}

// Option changes one setting.
type Option func(*Options)

// UDPServerKey is the server's 32-byte public key (`tern udp-keygen` prints it; read
// text with ParseUDPKey). With it, udp:// connections are encrypted and succeed only
// with a server that proves it holds the private key; without it they are plaintext
// and a server that requires encryption refuses them (docs/udp.md, "Security"). TCP
// connections ignore it.
func UDPServerKey(pub []byte) Option { return func(o *Options) { o.UDPServerKey = pub } }

// UDPPreSharedKey is the 32-byte secret of a server configured with udp_psk_file; it
// needs UDPServerKey.
func UDPPreSharedKey(psk []byte) Option { return func(o *Options) { o.UDPPreSharedKey = psk } }

// ParseUDPKey reads a key as `tern udp-keygen` writes it (base64; hex is taken too).
func ParseUDPKey(s string) ([]byte, error) {
	k, err := udp.ParseKey(s)
	if err != nil {
		return nil, fmt.Errorf("tern: %w", err)
	}
	return k[:], nil
}

// udpConfig is the UDP session configuration the options ask for.
func (o *Options) udpConfig() (udp.Config, error) {
	cfg := udp.Config{BundleDelay: bundleDelay(o.UDPBundleDelay), IdleTimeout: o.UDPIdleTimeout}
	for _, k := range []struct {
		name string
		src  []byte
		dst  *udp.Key
	}{{"UDPServerKey", o.UDPServerKey, &cfg.ServerKey}, {"UDPPreSharedKey", o.UDPPreSharedKey, &cfg.PSK}} {
		switch len(k.src) {
		case 0:
		case len(k.dst):
			copy(k.dst[:], k.src)
		default:
			return udp.Config{}, fmt.Errorf("%w: %s of %d bytes, want %d", ErrBadOption, k.name, len(k.src), len(k.dst))
		}
	}
	return cfg, nil
}

// Name identifies the connection to the server (monitoring shows it).
func Name(name string) Option { return func(o *Options) { o.Name = name } }

// Credentials are sent in CONNECT for servers that check them.
func Credentials(c []byte) Option { return func(o *Options) { o.Credentials = c } }

// Timeout bounds dialling plus the handshake of each connection attempt, and how long
// Subscribe waits for the server's acknowledgement. Default 2s.
func Timeout(d time.Duration) Option { return func(o *Options) { o.Timeout = d } }

// ReconnectWait is the first delay between rounds of reconnect attempts (a lost
// connection first tries the list's other servers at once); it doubles after each
// failed round over the server list, up to MaxReconnectWait, and each delay is drawn at
// random between half and all of its value (jitter). Default 250ms.
func ReconnectWait(d time.Duration) Option { return func(o *Options) { o.ReconnectWait = d } }

// MaxReconnectWait caps the reconnect backoff. Default 5s.
func MaxReconnectWait(d time.Duration) Option { return func(o *Options) { o.MaxReconnectWait = d } }

// MaxReconnects is how many failed rounds over the server list end reconnecting, after
// which the connection closes; -1 never gives up. Default 60.
func MaxReconnects(n int) Option { return func(o *Options) { o.MaxReconnects = n } }

// NoReconnect closes the connection at the first disconnect.
func NoReconnect() Option { return func(o *Options) { o.AllowReconnect = false } }

// ReconnectBufSize bounds the bytes of frames published while disconnected, which are
// sent once the connection is back; beyond it Publish returns ErrReconnectBufExceeded.
// 0 disables buffering: publishing while disconnected fails at once. Default 8 MiB.
func ReconnectBufSize(n int) Option { return func(o *Options) { o.ReconnectBufSize = n } }

// PingInterval is how often the client pings the server to detect a dead link; 0
// disables client pings. Default 2m.
func PingInterval(d time.Duration) Option { return func(o *Options) { o.PingInterval = d } }

// MaxPingsOutstanding is how many pings may go unanswered; one more and the client
// treats the link as dead and reconnects. Default 2.
func MaxPingsOutstanding(n int) Option { return func(o *Options) { o.MaxPingsOutstanding = n } }

// FlushDelay lets the flusher wait this long after a wake-up to coalesce more
// publishes into one write, trading latency for fewer system calls; 0 (the default)
// writes as soon as it wakes.
func FlushDelay(d time.Duration) Option { return func(o *Options) { o.FlushDelay = d } }

// WriteBufferSize is how many bytes publishers may buffer ahead of the socket. A
// publisher that finds the buffer full writes it to the socket itself, or waits while
// another write is in progress (backpressure). Default 32 KiB.
func WriteBufferSize(n int) Option { return func(o *Options) { o.WriteBufferSize = n } }

// ReadBufferSize sets the socket's kernel receive buffer (SO_RCVBUF); 0 leaves it to
// the operating system's autotuning. A subscriber that cares more for latency than for
// throughput on fast local links can set it small (e.g. 256 KiB): a backlog then stays
// in the server, where flow control slows publishers, instead of in the kernel. Keep it
// at 0 across long-distance links, where a small buffer caps throughput.
func ReadBufferSize(n int) Option { return func(o *Options) { o.ReadBufferSize = n } }

// NoEcho stops the server from delivering this connection's publications to its own
// subscriptions.
func NoEcho() Option { return func(o *Options) { o.NoEcho = true } }

// NoClusterDiscovery keeps the server list to the URLs given to Connect: the servers
// the cluster announces (INFO's connect_urls) are not added to it, and the server is
// not asked for updates. Use it when the announced addresses are not reachable from
// the client (NAT, another network), or to stay on udp://, since the cluster
// announces its TCP URLs.
func NoClusterDiscovery() Option { return func(o *Options) { o.NoClusterDiscovery = true } }

// PendingLimits bound the messages and bytes queued in the client for one
// subscription made with Subscribe, QueueSubscribe or SubscribeSync. A message that
// would exceed either is dropped, counted in Subscription.Dropped, and ErrSlowConsumer
// is reported to the ErrorHandler. A limit <= 0 is unlimited. Default 512 Ki messages,
// 64 MiB.
func PendingLimits(msgs, bytes int) Option {
	return func(o *Options) { o.PendingMsgsLimit, o.PendingBytesLimit = msgs, bytes }
}

// SubChanLen sets the message part of PendingLimits alone.
func SubChanLen(n int) Option { return func(o *Options) { o.PendingMsgsLimit = n } }

// DrainTimeout bounds Drain. Default 30s.
func DrainTimeout(d time.Duration) Option { return func(o *Options) { o.DrainTimeout = d } }

// ConnectHandler runs once, after Connect has succeeded.
//
// All handlers run one at a time on a goroutine of the connection reserved for them,
// never on the reader: a slow handler delays the handlers after it, not message
// delivery.
func ConnectHandler(f func(*Conn)) Option { return func(o *Options) { o.ConnectHandler = f } }

// DisconnectErrHandler runs when the connection breaks, with the cause.
func DisconnectErrHandler(f func(*Conn, error)) Option {
	return func(o *Options) { o.DisconnectHandler = f }
}

// ReconnectHandler runs after a successful reconnect.
func ReconnectHandler(f func(*Conn)) Option { return func(o *Options) { o.ReconnectHandler = f } }

// DiscoveredServersHandler runs when the servers learned from the cluster change
// after Connect: a node joined or left (Conn.DiscoveredServers lists them).
func DiscoveredServersHandler(f func(*Conn)) Option {
	return func(o *Options) { o.DiscoveredServersHandler = f }
}

// ClosedHandler runs once when the connection is closed for good.
func ClosedHandler(f func(*Conn)) Option { return func(o *Options) { o.ClosedHandler = f } }

// ErrorHandler receives asynchronous errors: ERR frames the server sends about a
// publish or a re-created subscription (as *ServerError), and ErrSlowConsumer with the
// subscription that dropped messages. Errors that arrive while the handler's queue is
// full are dropped rather than blocking the reader.
func ErrorHandler(f func(*Conn, *Subscription, error)) Option {
	return func(o *Options) { o.ErrorHandler = f }
}

// Logger receives the client's debug and warning logs.
func Logger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// UDPBundleDelay sets how long a udp:// connection waits to fill a datagram with
// more small frames (default 1ms; 0 sends every write at once): the price in latency
// of few packets and acknowledgements (docs/udp.md).
func UDPBundleDelay(d time.Duration) Option { return func(o *Options) { o.UDPBundleDelay = d } }

// UDPIdleTimeout sets how long a udp:// connection rides out hearing nothing from
// the server before it gives the link up and reconnects (default 30s).
func UDPIdleTimeout(d time.Duration) Option { return func(o *Options) { o.UDPIdleTimeout = d } }

// bundleDelay maps the option, where 0 disables bundling, to udp.Config, where 0
// takes the default and a negative value disables it.
func bundleDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
