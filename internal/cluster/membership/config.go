package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Ports: the route listener's default port, and where gossip sits relative to it.
const (
	DefaultRoutePort = 7401
	// GossipPortOffset is added to a route port to get the gossip port of the same
	// node, so that one port number on the command line names both.
	GossipPortOffset  = 1
	DefaultGossipPort = DefaultRoutePort + GossipPortOffset
)

// Failure-detection defaults Tern picks for a LAN; doc.go explains the arithmetic.
const (
	DefaultProbeInterval  = 200 * time.Millisecond
	DefaultProbeTimeout   = 100 * time.Millisecond
	DefaultSuspicionMult  = 4
	DefaultGossipInterval = 100 * time.Millisecond
	DefaultRejoinInterval = time.Second
	// MaxRejoinInterval caps the backoff between join attempts while alone.
	MaxRejoinInterval = 10 * time.Second
)

// DefaultClusterName is used when Config.ClusterName is empty.
const DefaultClusterName = "tern"

// maxClusterName keeps the name short: memberlist prefixes it to every packet.
const maxClusterName = 64

// ErrInvalidConfig wraps every error Start and UpdateTags return for a Config or
// tags they cannot use.
var ErrInvalidConfig = errors.New("membership: invalid configuration")

// Config says who this node is and how it finds and watches the others.
type Config struct {
	// NodeName is unique in the cluster (the server's --server-name).
	NodeName string
	// ClusterName keeps clusters that share a network apart: it labels every gossip
	// packet and stream (memberlist drops what carries another label) and is checked
	// again in every node's metadata. Default DefaultClusterName.
	ClusterName string

	// BindAddr is the host gossip listens on (UDP and TCP). Default 0.0.0.0.
	BindAddr string
	// GossipPort is the gossip port; the caller passes its route port plus
	// GossipPortOffset. 0 picks a free port (tests).
	GossipPort int
	// AdvertiseAddr, HOST:PORT or HOST, is where other nodes reach this node's
	// gossip when that differs from the bound address (NAT, containers). HOST may be
	// a name; it is resolved once at Start. Empty: memberlist picks the bound
	// address, or a private address of this host when bound to 0.0.0.0.
	AdvertiseAddr string

	// Join names members to join, each HOST or HOST:PORT. A HOST may be a DNS name
	// with several addresses (a Kubernetes headless service): every address is
	// tried. The list may include this node (so every node can share one command
	// line); those addresses are skipped. Nobody answering is fine: while this node
	// knows no other member it retries in the background.
	//
	// PORT is a route port, as on the server's command line (--join HOST:7401), and
	// the gossip port tried is PORT+GossipPortOffset; a missing PORT means
	// DefaultRoutePort. With JoinGossip set, PORT is a gossip port as is and a
	// missing PORT means DefaultGossipPort.
	Join       []string
	JoinGossip bool
	// Resolve looks a join host up; default net.DefaultResolver.LookupHost. Tests
	// replace it to have one name stand for several nodes.
	Resolve func(ctx context.Context, host string) ([]string, error)

	// RouteAddr is the HOST:PORT of this node's route listener, carried in its
	// metadata for the route layer.
	RouteAddr string
	// Version is Tern's version. Nodes whose major versions differ refuse each other.
	Version string
	// Tags are free-form labels (zone, rack) carried in the metadata. The whole
	// metadata must fit in MaxMetaSize (512) bytes: a fixed part of about
	// 6 + len(ClusterName) + 26 (node ID) + len(RouteAddr) + len(Version) bytes, then
	// 1 byte plus 2 + len(key) + len(value) per tag, so a few hundred bytes of tags.
	// Keys are non-empty; keys and values are UTF-8 of at most 255 bytes.
	Tags map[string]string
	// RaftID is this node's identity in the Raft groups it replicates
	// (internal/replica), stable across restarts; 0 when it replicates nothing.
	RaftID uint64

	// Failure detection; zero means the Default* value above. Faster probing finds
	// dead nodes sooner at the price of more packets and of false suspicions when a
	// node stalls (GC, an overloaded CPU) for longer than about the suspicion time.
	// doc.go gives the formula.
	ProbeInterval  time.Duration // between probes of one random member
	ProbeTimeout   time.Duration // wait for a direct ack before asking others to probe; ~p99 RTT and then some
	SuspicionMult  int           // suspicion lasts SuspicionMult × max(1, log10 N) × ProbeInterval
	GossipInterval time.Duration // between gossip rounds that spread news

	// SecretKey, when set, encrypts and authenticates all gossip, UDP and TCP, with
	// AES-GCM (memberlist's keyring): a node without the same key cannot join, and
	// its gossip, and this node's to it, is dropped. 16, 24 or 32 bytes; the
	// cluster derives it from the shared secret (secret.GossipKey).
	SecretKey []byte

	// RejoinInterval is the first wait between join attempts while this node knows
	// no other member; it doubles up to MaxRejoinInterval. Default 1s.
	RejoinInterval time.Duration

	Logger *slog.Logger

	// uncompressed turns memberlist's compression off, for tests that read the
	// gossip they record.
	uncompressed bool
}

// withDefaults fills in defaults and checks what would otherwise fail later or
// confuse other nodes.
func (c Config) withDefaults() (Config, error) {
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = DefaultSuspicionMult
	}
	if c.GossipInterval == 0 {
		c.GossipInterval = DefaultGossipInterval
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.Resolve == nil {
		c.Resolve = net.DefaultResolver.LookupHost
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	if err := checkName("node name", c.NodeName, maxField); err != nil {
		return c, err
	}
	if err := checkName("cluster name", c.ClusterName, maxClusterName); err != nil {
		return c, err
	}
	if net.ParseIP(c.BindAddr) == nil {
		return c, fmt.Errorf("%w: bind address %q is not an IP address", ErrInvalidConfig, c.BindAddr)
	}
	if c.GossipPort < 0 || c.GossipPort > 65535 {
		return c, fmt.Errorf("%w: gossip port %d", ErrInvalidConfig, c.GossipPort)
	}
	if _, err := majorVersion(c.Version); err != nil {
		return c, err
	}
	if c.ProbeInterval < 0 || c.ProbeTimeout < 0 || c.SuspicionMult < 0 || c.GossipInterval < 0 || c.RejoinInterval < 0 {
		return c, fmt.Errorf("%w: negative timing", ErrInvalidConfig)
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		// memberlist gives indirect probes the rest of the interval after the timeout.
		return c, fmt.Errorf("%w: probe timeout %v must be shorter than the probe interval %v", ErrInvalidConfig, c.ProbeTimeout, c.ProbeInterval)
	}
	for _, j := range c.Join {
		if _, _, err := joinTarget(j, c.JoinGossip); err != nil {
			return c, err
		}
	}
	if err := checkTags(c.Tags); err != nil {
		return c, err
	}
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return c, fmt.Errorf("%w: gossip key of %d bytes, want 16, 24 or 32", ErrInvalidConfig, n)
	}
	return c, nil
}

// checkName refuses names that would be ambiguous in logs or break the metadata.
func checkName(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidConfig, what)
	}
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidConfig, what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not UTF-8", ErrInvalidConfig, what, s)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has a space or control character", ErrInvalidConfig, what, s)
		}
	}
	return nil
}

func checkTags(tags map[string]string) error {
	for k, v := range tags {
		if k == "" {
			return fmt.Errorf("%w: empty tag key", ErrInvalidConfig)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: tag %q is not UTF-8", ErrInvalidConfig, k)
		}
	}
	return nil
}

// majorVersion returns the number before the first dot of a version such as
// "1.4.2", "v2.0.0-rc1" or "0.1.0-dev".
func majorVersion(v string) (int, error) {
	s := strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(s, ".-+"); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: version %q has no major number", ErrInvalidConfig, v)
	}
	return n, nil
}

// joinTarget splits a Join entry into the host and the gossip port to try there.
func joinTarget(entry string, gossip bool) (host string, port int, err error) {
	if entry == "" {
		return "", 0, fmt.Errorf("%w: empty join address", ErrInvalidConfig)
	}
	host, sport, err := net.SplitHostPort(entry)
	if err != nil {
		// No port: a bare host, or a bare IPv6 address in or out of brackets.
		host, sport = entry, ""
		if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
			host = host[1 : len(host)-1]
		}
		if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
			return "", 0, fmt.Errorf("%w: join address %q: %v", ErrInvalidConfig, entry, err)
		}
	}
	if host == "" {
		return "", 0, fmt.Errorf("%w: join address %q has no host", ErrInvalidConfig, entry)
	}
	switch {
	case sport != "":
		port, err = strconv.Atoi(sport)
		if err != nil || port < 1 || port > 65535 {
			return "", 0, fmt.Errorf("%w: join address %q: bad port", ErrInvalidConfig, entry)
		}
		if !gossip {
			port += GossipPortOffset
		}
	case gossip:
		port = DefaultGossipPort
	default:
		port = DefaultRoutePort + GossipPortOffset
	}
	if port > 65535 {
		return "", 0, fmt.Errorf("%w: join address %q: gossip port %d out of range", ErrInvalidConfig, entry, port)
	}
	return host, port, nil
}
