package tern

import (
	"log/slog"
	"time"
)

// Options configure a connection; set them with the Option functions.
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
	PendingMsgsLimit    int
	PendingBytesLimit   int
	SyncQueueLen        int
	DrainTimeout        time.Duration

	ConnectHandler    func(*Conn)
	DisconnectHandler func(*Conn, error)
	ReconnectHandler  func(*Conn)
	ClosedHandler     func(*Conn)
	ErrorHandler      func(*Conn, *Subscription, error)
	Logger            *slog.Logger
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
		WriteBufferSize:     64 << 10,
		PendingMsgsLimit:    512 << 10,
		PendingBytesLimit:   64 << 20,
		SyncQueueLen:        64 << 10,
		DrainTimeout:        30 * time.Second,
	}
}

// Option changes one setting.
type Option func(*Options)

// Name identifies the connection to the server (monitoring shows it).
func Name(name string) Option { return func(o *Options) { o.Name = name } }

// Credentials are sent in CONNECT for servers that check them.
func Credentials(c []byte) Option { return func(o *Options) { o.Credentials = c } }

// Timeout bounds dialling plus the handshake, and synchronous acknowledgements.
func Timeout(d time.Duration) Option { return func(o *Options) { o.Timeout = d } }

// ReconnectWait is the first delay between reconnect attempts; it doubles (with
// jitter) up to MaxReconnectWait.
func ReconnectWait(d time.Duration) Option { return func(o *Options) { o.ReconnectWait = d } }

// MaxReconnectWait caps the reconnect backoff.
func MaxReconnectWait(d time.Duration) Option { return func(o *Options) { o.MaxReconnectWait = d } }

// MaxReconnects is how many failed attempts in a row end reconnecting; -1 never gives up.
func MaxReconnects(n int) Option { return func(o *Options) { o.MaxReconnects = n } }

// NoReconnect closes the connection at the first disconnect.
func NoReconnect() Option { return func(o *Options) { o.AllowReconnect = false } }

// ReconnectBufSize bounds the bytes published while disconnected; beyond it Publish
// returns ErrReconnectBufExceeded.
func ReconnectBufSize(n int) Option { return func(o *Options) { o.ReconnectBufSize = n } }

// PingInterval is how often the client pings the server to detect a dead link.
func PingInterval(d time.Duration) Option { return func(o *Options) { o.PingInterval = d } }

// MaxPingsOutstanding unanswered pings make the client treat the link as dead.
func MaxPingsOutstanding(n int) Option { return func(o *Options) { o.MaxPingsOutstanding = n } }

// FlushDelay lets the flusher wait this long after a wake-up to coalesce more
// publishes into one write; 0 writes as soon as it wakes.
func FlushDelay(d time.Duration) Option { return func(o *Options) { o.FlushDelay = d } }

// WriteBufferSize is how many bytes publishers may buffer ahead of the socket before
// they wait for the flusher.
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

// PendingLimits bound the messages and bytes queued for one asynchronous subscription.
func PendingLimits(msgs, bytes int) Option {
	return func(o *Options) { o.PendingMsgsLimit, o.PendingBytesLimit = msgs, bytes }
}

// SyncQueueLen is the message queue length of SubscribeSync subscriptions.
func SyncQueueLen(n int) Option { return func(o *Options) { o.SyncQueueLen = n } }

// DrainTimeout bounds Drain.
func DrainTimeout(d time.Duration) Option { return func(o *Options) { o.DrainTimeout = d } }

// ConnectHandler runs once the first connection is up.
func ConnectHandler(f func(*Conn)) Option { return func(o *Options) { o.ConnectHandler = f } }

// DisconnectErrHandler runs when the connection breaks, with the cause.
func DisconnectErrHandler(f func(*Conn, error)) Option {
	return func(o *Options) { o.DisconnectHandler = f }
}

// ReconnectHandler runs after a successful reconnect.
func ReconnectHandler(f func(*Conn)) Option { return func(o *Options) { o.ReconnectHandler = f } }

// ClosedHandler runs once when the connection is closed for good.
func ClosedHandler(f func(*Conn)) Option { return func(o *Options) { o.ClosedHandler = f } }

// ErrorHandler receives asynchronous errors: server ERR frames, slow consumers.
func ErrorHandler(f func(*Conn, *Subscription, error)) Option {
	return func(o *Options) { o.ErrorHandler = f }
}

// Logger receives the client's debug and warning logs.
func Logger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }
