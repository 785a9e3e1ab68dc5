package tern

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/transport/udp"
	"github.com/tern-mq/tern/internal/wire"
)

// Version of this client, sent in CONNECT.
const Version = "0.1.0"

// DefaultURL is where Connect goes when given "".
const DefaultURL = "tern://127.0.0.1:7400"

// udpPrefix marks a server reached over reliable UDP (URL scheme udp://).
const udpPrefix = "udp://"

// DefaultPort is the port of a server address given without one.
const DefaultPort = "7400"

// Status is a connection's state.
type Status int32

// Connection states.
const (
	Connecting   Status = iota // Connect is dialling
	Connected                  // the link is up
	Reconnecting               // the link broke; the client is dialling again and buffering publishes
	Draining                   // Drain is under way
	Closed                     // closed for good
)

func (s Status) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Reconnecting:
		return "reconnecting"
	case Draining:
		return "draining"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("status(%d)", int32(s))
}

// Statistics are a connection's counters. Bytes count payloads only.
type Statistics struct {
	InMsgs, OutMsgs, InBytes, OutBytes uint64
	Reconnects                         uint64
}

// ServerInfo is what the server said about itself in the handshake.
type ServerInfo struct {
	ServerID, ServerName, Version string
	ClientID                      uint64 // the server's id for this connection
	MaxPayload                    int    // largest payload the server accepts
	HeadersSupported              bool
	AuthRequired                  bool
	// ConnectURLs are the native URLs of the cluster's nodes as the server last
	// announced them (connect_urls), empty for a server that runs alone.
	ConnectURLs []string
}

// readBufSize is the reader's buffer; it grows for larger frames and shrinks back.
const readBufSize = 64 << 10

// Conn is a connection to a Tern server. It is safe for concurrent use.
//
// Locks are taken in the order writeMu, mu, subsMu, then a subscription's own.
type Conn struct {
	opts   Options
	tlsCfg *tls.Config // of tls:// servers, from the options
	given  []string    // the servers given to Connect, as host:port or udp://host:port
	log    *slog.Logger

	// writeMu is held by whoever is writing to the socket (the flusher, a publisher
	// that found the buffer full, Close); spare belongs to its holder.
	writeMu sync.Mutex
	spare   []byte

	mu      sync.Mutex
	wcond   *sync.Cond // publishers waiting for buffer room
	status  Status
	nc      net.Conn
	udpLink *udp.Conn // the latest reliable-UDP link, for TransportStats
	url     string
	info    ServerInfo
	epoch   uint64 // increments per physical connection
	bw      []byte // frames waiting for the socket (or for the reconnect)
	hdrBuf  []byte // scratch for encoding headers
	pings   int    // PINGs to append at the next write
	pongs   []chan error
	pingOut int
	acks    map[uint64]chan error
	// onLost are called (outside mu) each time the connection is lost: the
	// stream API fails its async publishes in flight at once, for their callers to
	// retry, rather than after their timeout.
	onLost   []func()
	ackID    uint64
	lastErr  error
	fatalErr error // a fatal ERR the server sent before closing the link
	// servers is given followed by discovered: the servers reconnecting tries.
	// Both are replaced, never modified, when a server announces other nodes.
	servers    []string
	discovered []string

	subsMu sync.Mutex
	subs   map[uint64]*Subscription
	ssid   atomic.Uint64

	flushCh chan struct{}
	done    chan struct{} // closed by Close
	events  chan func()

	respMu     sync.Mutex
	respPrefix string
	respMap    map[string]chan *Msg
	respToken  uint64

	inMsgs, outMsgs, inBytes, outBytes, reconnects atomic.Uint64
}

// Connect dials the first reachable server of url and performs the handshake. url is
// a comma-separated list of "tern://host:port" or "host:port" (the port defaults to
// 7400); "" means DefaultURL. The other servers of the list are used when
// reconnecting, followed by the other nodes of the cluster that the servers announce
// (unless NoClusterDiscovery).
func Connect(url string, options ...Option) (*Conn, error) {
	opts := DefaultOptions()
	for _, o := range options {
		o(&opts)
	}
	return opts.Connect(url)
}

// normalise replaces settings that cannot work with their defaults.
func (o *Options) normalise() {
	d := DefaultOptions()
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = time.Millisecond
	}
	if o.MaxReconnectWait < o.ReconnectWait {
		o.MaxReconnectWait = o.ReconnectWait
	}
	if o.MaxPingsOutstanding <= 0 {
		o.MaxPingsOutstanding = 1
	}
	if o.WriteBufferSize <= 0 {
		o.WriteBufferSize = d.WriteBufferSize
	}
	if o.PendingMsgsLimit <= 0 {
		o.PendingMsgsLimit = int(^uint(0) >> 1)
	}
	if o.PendingBytesLimit <= 0 {
		o.PendingBytesLimit = int(^uint(0) >> 1)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = d.DrainTimeout
	}
}

// parseServers turns a URL list into host:port addresses.
func parseServers(url string) ([]string, error) {
	if strings.TrimSpace(url) == "" {
		url = DefaultURL
	}
	var servers []string
	for _, u := range strings.Split(url, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		prefix := ""
		if scheme, rest, ok := strings.Cut(u, "://"); ok {
			switch scheme {
			case "tern", "tcp":
			case "udp":
				prefix = udpPrefix
			case "tls":
				prefix = tlsPrefix
			default:
				return nil, fmt.Errorf("%w: %q: scheme %q, want tern://, tls:// or udp://", ErrBadURL, u, scheme)
			}
			u = rest
		}
		u = strings.TrimSuffix(u, "/")
		if _, _, err := net.SplitHostPort(u); err != nil {
			if strings.Contains(strings.Trim(u, "[]"), "/") || strings.Count(u, ":") == 1 {
				return nil, fmt.Errorf("%w: %q", ErrBadURL, u)
			}
			u = net.JoinHostPort(strings.Trim(u, "[]"), DefaultPort)
		}
		servers = append(servers, prefix+u)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: empty URL", ErrBadURL)
	}
	return servers, nil
}

// Connect connects with these options; see the package-level Connect.
func (o Options) Connect(url string) (*Conn, error) {
	o.normalise()
	servers, err := parseServers(url)
	if err != nil {
		return nil, err
	}
	if _, err := o.udpConfig(); err != nil {
		return nil, err
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	c := &Conn{
		tlsCfg:  tlsCfg,
		opts:    o,
		given:   servers,
		servers: servers,
		log:     o.Logger,
		subs:    make(map[uint64]*Subscription),
		acks:    make(map[uint64]chan error),
		flushCh: make(chan struct{}, 1),
		done:    make(chan struct{}),
		events:  make(chan func(), 256),
		status:  Connecting,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.wcond = sync.NewCond(&c.mu)
	for _, addr := range c.servers {
		nc, info, rest, derr := c.dial(addr)
		if derr != nil {
			err = derr
			c.log.Debug("connect attempt failed", "server", addr, "err", derr)
			continue
		}
		c.mu.Lock()
		c.install(nc, addr, info, rest)
		c.mu.Unlock()
		go c.flusher()
		go c.dispatchEvents()
		if c.opts.PingInterval > 0 {
			go c.pinger()
		}
		if h := c.opts.ConnectHandler; h != nil {
			c.event(func() { h(c) })
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNoServers, err)
}

// dial connects to addr and runs the handshake. It returns the bytes read past the
// INFO frame.
func (c *Conn) dial(addr string) (net.Conn, ServerInfo, []byte, error) {
	var nc, tcp net.Conn // tcp: the socket under nc, when it is one
	var err error
	if host, ok := strings.CutPrefix(addr, udpPrefix); ok {
		nc, err = c.dialUDP(host)
	} else if host, ok := strings.CutPrefix(addr, tlsPrefix); ok {
		if nc, err = c.dialTLS(host); err == nil {
			tcp = nc.(*tls.Conn).NetConn()
		}
	} else {
		nc, err = net.DialTimeout("tcp", addr, c.opts.Timeout)
		tcp = nc
	}
	if err != nil {
		return nil, ServerInfo{}, nil, fmt.Errorf("tern: dial %s: %w", addr, err)
	}
	if tc, ok := tcp.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if n := c.opts.ReadBufferSize; n > 0 {
			_ = tc.SetReadBuffer(n)
		}
	}
	fail := func(err error) (net.Conn, ServerInfo, []byte, error) {
		nc.Close()
		return nil, ServerInfo{}, nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(c.opts.Timeout))
	flags := wire.ConnectNoResponders
	if c.opts.NoEcho {
		flags |= wire.ConnectNoEcho
	}
	if !c.opts.NoClusterDiscovery {
		flags |= wire.ConnectInfoUpdates
	}
	hello := wire.AppendConnect(nil, &wire.Connect{Version: wire.Version, Flags: flags, Name: c.opts.Name,
		Lang: "go", ClientVersion: Version, Credentials: c.opts.Credentials})
	if _, err := nc.Write(hello); err != nil {
		return fail(fmt.Errorf("tern: handshake with %s: %w", addr, err))
	}
	buf := make([]byte, 0, 1024)
	for {
		var f wire.Frame
		k, derr := f.Decode(buf, 0)
		if derr == nil {
			switch f.Type {
			case wire.TypeInfo:
				in, perr := wire.ParseInfo(f.Payload)
				if perr != nil {
					return fail(fmt.Errorf("tern: handshake with %s: %w", addr, perr))
				}
				_ = nc.SetDeadline(time.Time{})
				info := ServerInfo{ServerID: in.ServerID, ServerName: in.ServerName, Version: in.ServerVersion,
					ClientID: in.ClientID, MaxPayload: int(in.MaxPayload),
					HeadersSupported: in.Flags&wire.InfoHeaders != 0, AuthRequired: in.Flags&wire.InfoAuthRequired != 0,
					ConnectURLs: in.ConnectURLs}
				return nc, info, buf[k:], nil
			case wire.TypeErr:
				return fail(&wire.Error{Code: f.Code, Text: string(f.Payload)})
			default:
				return fail(fmt.Errorf("tern: handshake with %s: unexpected %s", addr, f.Type))
			}
		}
		if !errors.Is(derr, wire.ErrIncomplete) {
			return fail(fmt.Errorf("tern: handshake with %s: %w", addr, derr))
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, rerr := nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr != nil {
			return fail(fmt.Errorf("tern: handshake with %s: %w", addr, rerr))
		}
	}
}

// install makes nc the live connection: it queues SUB frames (and UNSUB budgets) for
// every subscription ahead of whatever was published while disconnected, and starts
// the reader. It reports whether the server's connect_urls changed the discovered
// servers. Called with mu held.
func (c *Conn) install(nc net.Conn, addr string, info ServerInfo, rest []byte) (discovered bool) {
	c.nc, c.url, c.info = nc, addr, info
	discovered = c.learnLocked(info.ConnectURLs)
	c.epoch++
	c.status = Connected
	c.pingOut = 0
	c.fatalErr = nil
	var pre []byte
	c.subsMu.Lock()
	for _, s := range c.subs {
		pre = wire.AppendSub(pre, 0, s.sid, s.subject, s.queue, s.filter)
		if budget := s.max.Load(); budget > 0 {
			pre = wire.AppendUnsub(pre, 0, s.sid, uint64(max(budget-s.delivered.Load(), 1)))
		}
	}
	c.subsMu.Unlock()
	if len(pre) > 0 {
		c.bw = append(pre, c.bw...)
	}
	maxBody := max(wire.DefaultMaxBody, info.MaxPayload+64<<10+64)
	go c.readLoop(nc, c.epoch, maxBody, rest)
	c.kick()
	c.wcond.Broadcast()
	return discovered
}

// learnLocked makes the servers in urls, a server's connect_urls, the discovered
// part of the server list, and reports whether that changed. Servers given to
// Connect keep their place ahead of them; discovered servers the cluster no longer
// announces are forgotten, but for the one in use. New ones are put in random
// order, so that the clients of a node that fails do not all move to the same
// other node. Called with mu held.
func (c *Conn) learnLocked(urls []string) bool {
	if c.opts.NoClusterDiscovery {
		return false
	}
	// A client given a tls:// server moves only to tls:// servers, never to
	// plaintext; one given none stays off TLS, which it was not configured for.
	secure := slices.ContainsFunc(c.given, func(a string) bool { return strings.HasPrefix(a, tlsPrefix) })
	var announced []string
	for _, u := range urls {
		addrs, err := parseServers(u)
		if err != nil || len(addrs) != 1 {
			c.log.Debug("announced server ignored", "url", u, "err", err)
			continue // a scheme this client does not speak
		}
		if strings.HasPrefix(addrs[0], tlsPrefix) != secure {
			continue
		}
		announced = append(announced, addrs[0])
	}
	var next []string
	keep := func(a string) bool {
		return !slices.Contains(c.given, a) && !slices.Contains(next, a)
	}
	for _, a := range c.discovered {
		if (slices.Contains(announced, a) || a == c.url) && keep(a) {
			next = append(next, a)
		}
	}
	known := len(next)
	for _, a := range announced {
		if keep(a) {
			next = append(next, a)
		}
	}
	fresh := next[known:]
	rand.Shuffle(len(fresh), func(i, j int) { fresh[i], fresh[j] = fresh[j], fresh[i] })
	if slices.Equal(next, c.discovered) {
		return false
	}
	c.discovered = next
	c.servers = append(slices.Clip(c.given), next...)
	return true
}

func (c *Conn) kick() {
	select {
	case c.flushCh <- struct{}{}:
	default:
	}
}

// ---------------------------------------------------------------------------------
// Writing

// flusher writes what publishers buffered, once per wake-up.
func (c *Conn) flusher() {
	for {
		select {
		case <-c.flushCh:
		case <-c.done:
			return
		}
		if d := c.opts.FlushDelay; d > 0 {
			time.Sleep(d)
		}
		c.writeMu.Lock()
		c.mu.Lock()
		c.writeLocked()
		c.mu.Unlock()
	}
}

// writeLocked hands everything buffered (plus the PINGs asked for) to the socket with
// one write, letting publishers fill the other buffer meanwhile. It is called with
// writeMu and mu held, releases mu during the write and returns with mu held and
// writeMu released.
func (c *Conn) writeLocked() {
	if c.status != Connected && c.status != Draining || len(c.bw) == 0 && c.pings == 0 {
		c.writeMu.Unlock()
		return
	}
	data := c.bw
	for ; c.pings > 0; c.pings-- {
		data = wire.AppendPing(data)
	}
	c.bw, c.spare = c.spare[:0], nil
	nc, epoch := c.nc, c.epoch
	c.wcond.Broadcast()
	c.mu.Unlock()

	_ = nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout + 5*time.Second))
	_, err := nc.Write(data)
	if cap(data) > 4*c.opts.WriteBufferSize {
		data = nil // let a burst's buffer go
	}
	c.spare = data
	c.writeMu.Unlock()
	if err != nil {
		c.lost(epoch, fmt.Errorf("write: %w", err))
	}
	c.mu.Lock()
}

// room makes sure a frame of about size bytes may be appended. Called with mu held;
// it may release it while waiting.
func (c *Conn) room(size int) error {
	for {
		switch c.status {
		case Closed:
			return ErrConnectionClosed
		case Reconnecting, Connecting:
			if len(c.bw)+size > c.opts.ReconnectBufSize {
				return ErrReconnectBufExceeded
			}
			return nil
		}
		if len(c.bw) < c.opts.WriteBufferSize {
			return nil
		}
		// Full: write it ourselves unless a write is already under way.
		if c.writeMu.TryLock() {
			c.writeLocked()
			continue
		}
		c.kick()
		c.wcond.Wait()
	}
}

// Publish sends data to subject. It returns once the message is buffered; the
// flusher sends it shortly after (use Flush to wait for the server). Publish does not
// allocate, and data may be reused as soon as it returns.
func (c *Conn) Publish(subject string, data []byte) error {
	return c.publish(subject, "", nil, data)
}

// PublishRequest sends data to subject with reply as the subject to answer to.
func (c *Conn) PublishRequest(subject, reply string, data []byte) error {
	return c.publish(subject, reply, nil, data)
}

// PublishMsg sends m with its reply subject and headers.
func (c *Conn) PublishMsg(m *Msg) error {
	if m == nil {
		return ErrInvalidMsg
	}
	return c.publish(m.Subject, m.Reply, m.Header, m.Data)
}

func (c *Conn) publish(subject, reply string, h Header, data []byte) error {
	if c == nil {
		return ErrInvalidConnection
	}
	if subject == "" {
		return ErrBadSubject
	}
	c.mu.Lock()
	if limit := c.info.MaxPayload; limit > 0 && len(data) > limit {
		c.mu.Unlock()
		return fmt.Errorf("%w: %d bytes > %d", ErrMaxPayload, len(data), limit)
	}
	if c.status != Connected || len(c.bw) >= c.opts.WriteBufferSize {
		if err := c.room(len(subject) + len(reply) + len(data) + 32 + 64*len(h)); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	var hdr []byte
	if len(h) > 0 {
		c.hdrBuf = h.encode(c.hdrBuf[:0])
		hdr = c.hdrBuf
	}
	c.bw = wire.AppendPub(c.bw, 0, subject, reply, hdr, data)
	c.mu.Unlock()
	c.outMsgs.Add(1)
	c.outBytes.Add(uint64(len(data)))
	c.kick()
	return nil
}

// Flush waits until the server has processed everything published before it: it
// sends a PING after the buffered frames and waits for the PONG, for at most 10s.
func (c *Conn) Flush() error { return c.FlushTimeout(10 * time.Second) }

// FlushTimeout is Flush with a time limit; it returns ErrTimeout when it passes.
func (c *Conn) FlushTimeout(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.FlushContext(ctx)
}

// FlushContext is Flush bounded by ctx. While the client is reconnecting it returns
// ErrConnectionLost at once.
func (c *Conn) FlushContext(ctx context.Context) error {
	if c == nil {
		return ErrInvalidConnection
	}
	ch := make(chan error, 1)
	c.mu.Lock()
	switch c.status {
	case Closed:
		c.mu.Unlock()
		return ErrConnectionClosed
	case Reconnecting, Connecting:
		c.mu.Unlock()
		return ErrConnectionLost
	}
	c.pings++
	c.pongs = append(c.pongs, ch)
	c.mu.Unlock()
	c.kick()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// ctxErr maps a context's deadline to ErrTimeout (still matching
// context.DeadlineExceeded) and passes cancellation through.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
	return ctx.Err()
}

// ackMode says how control treats the server's answer to a frame.
type ackMode int

const (
	ackNone  ackMode = iota // no ack id: an error goes to the ErrorHandler
	ackQuiet                // ack id, answer ignored (an UNSUB racing a server-side removal)
	ackWait                 // ack id, wait for the answer
)

// control queues a SUB or UNSUB frame. pre runs first under mu (it updates the
// subscription table, so that a reconnect sees the table and the frames agree). With
// ackWait control waits up to Timeout for the server's OK or ERR. While reconnecting
// nothing is sent: the reconnect re-creates every subscription from the table.
func (c *Conn) control(pre func() error, build func(dst []byte, id uint64) []byte, mode ackMode) error {
	c.mu.Lock()
	if c.status == Closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	if pre != nil {
		if err := pre(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	if c.status != Connected && c.status != Draining {
		c.mu.Unlock()
		return nil
	}
	var id uint64
	var ch chan error
	if mode != ackNone {
		c.ackID++
		id = c.ackID
		ch = make(chan error, 1)
		c.acks[id] = ch
	}
	c.bw = build(c.bw, id)
	c.mu.Unlock()
	c.kick()
	if mode != ackWait {
		return nil
	}
	t := time.NewTimer(c.opts.Timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		c.mu.Lock()
		delete(c.acks, id)
		c.mu.Unlock()
		return fmt.Errorf("%w waiting for the server's acknowledgement", ErrTimeout)
	case <-c.done:
		return ErrConnectionClosed
	}
}

// ---------------------------------------------------------------------------------
// Reading

// readLoop reads frames of physical connection epoch and dispatches them.
func (c *Conn) readLoop(nc net.Conn, epoch uint64, maxBody int, initial []byte) {
	buf := make([]byte, max(readBufSize, len(initial)))
	n := copy(buf, initial)
	var f wire.Frame
	for {
		var k int
		var err error
		if n < len(buf) {
			k, err = nc.Read(buf[n:])
			n += k
		}
		off := 0
		for off < n {
			used, derr := f.Decode(buf[off:n], maxBody)
			if derr != nil {
				if errors.Is(derr, wire.ErrIncomplete) {
					break
				}
				c.lost(epoch, fmt.Errorf("tern: reading from the server: %w", derr))
				return
			}
			off += used
			c.process(&f, epoch)
		}
		// Keep the unread tail at the front; grow for a frame larger than the buffer,
		// shrink back after one.
		if off > 0 {
			n = copy(buf, buf[off:n])
		}
		if n == len(buf) {
			need, lerr := wire.FrameLen(buf[:n])
			if lerr != nil || need <= len(buf) {
				need = 2 * len(buf)
			}
			buf = append(buf, make([]byte, need-len(buf))...)
		} else if len(buf) > 4*readBufSize && n < readBufSize/2 {
			buf = append(make([]byte, 0, readBufSize), buf[:n]...)[:readBufSize]
		}
		if err != nil {
			c.lost(epoch, err)
			return
		}
	}
}

func (c *Conn) process(f *wire.Frame, epoch uint64) {
	switch f.Type {
	case wire.TypeMsg:
		c.inMsgs.Add(1)
		c.inBytes.Add(uint64(len(f.Payload)))
		c.subsMu.Lock()
		s := c.subs[f.SID]
		c.subsMu.Unlock()
		if s != nil {
			s.deliver(f)
		}
	case wire.TypePing:
		c.mu.Lock()
		if c.epoch == epoch {
			c.bw = wire.AppendPong(c.bw)
		}
		c.mu.Unlock()
		c.kick()
	case wire.TypePong:
		c.mu.Lock()
		if c.epoch != epoch {
			c.mu.Unlock()
			return
		}
		c.pingOut = 0
		var ch chan error
		if len(c.pongs) > 0 {
			ch = c.pongs[0]
			c.pongs[0] = nil
			c.pongs = c.pongs[1:]
		}
		c.mu.Unlock()
		if ch != nil {
			ch <- nil
		}
	case wire.TypeInfo:
		// The server's connect_urls changed (the client asked for such updates).
		in, err := wire.ParseInfo(f.Payload)
		if err != nil {
			c.lost(epoch, fmt.Errorf("tern: reading from the server: %w", err))
			return
		}
		c.mu.Lock()
		if c.epoch != epoch {
			c.mu.Unlock()
			return
		}
		c.info.ConnectURLs = in.ConnectURLs
		changed := c.learnLocked(in.ConnectURLs)
		c.mu.Unlock()
		if changed {
			c.discoveredServers()
		}
	case wire.TypeOK:
		c.answer(f.ID, nil)
	case wire.TypeErr:
		err := &wire.Error{Code: f.Code, ID: f.ID, Text: string(f.Payload)}
		if f.ID != 0 && c.answer(f.ID, err) {
			return
		}
		c.mu.Lock()
		c.lastErr = err
		if f.Code.Fatal() && c.epoch == epoch {
			c.fatalErr = err
		}
		c.mu.Unlock()
		c.asyncError(nil, err)
	}
}

// answer delivers an OK or ERR to the control call waiting for ack id.
func (c *Conn) answer(id uint64, err error) bool {
	c.mu.Lock()
	ch, ok := c.acks[id]
	delete(c.acks, id)
	c.mu.Unlock()
	if ok {
		ch <- err
	}
	return ok
}

// keepPublishes compacts buf to its PUB frames: frames that never reached the socket
// of a broken connection. Control frames are dropped (subscriptions are re-created
// from the table).
func keepPublishes(buf []byte) []byte {
	out := buf[:0]
	for len(buf) > 0 {
		n, err := wire.FrameLen(buf)
		if err != nil || n > len(buf) {
			break
		}
		if wire.Type(buf[0]) == wire.TypePub {
			out = append(out, buf[:n]...)
		}
		buf = buf[n:]
	}
	return out
}

// lost handles the end of physical connection epoch: it fails what waited on it and
// reconnects or closes.
func (c *Conn) lost(epoch uint64, cause error) {
	c.mu.Lock()
	if c.epoch != epoch || c.status == Closed || c.status == Reconnecting {
		c.mu.Unlock()
		return
	}
	if c.fatalErr != nil {
		cause = c.fatalErr
	}
	c.epoch++ // whatever else still reports on the old link is ignored
	_ = c.nc.Close()
	for _, ch := range c.pongs {
		ch <- ErrConnectionLost
	}
	c.pongs, c.pings = nil, 0
	for id, ch := range c.acks {
		ch <- ErrConnectionLost
		delete(c.acks, id)
	}
	// Publishes that never reached the socket are sent after reconnecting; what was
	// handed to the broken socket may be lost (at-most-once).
	c.bw = keepPublishes(c.bw)
	hooks := c.onLost
	defer func() {
		for _, f := range hooks {
			f()
		}
	}()
	if !c.opts.AllowReconnect || c.status == Draining {
		c.bw = c.bw[:0]
		c.log.Warn("connection lost", "server", c.url, "err", cause)
		c.closeLocked(cause)
		return
	}
	c.status = Reconnecting
	c.wcond.Broadcast()
	url := c.url
	c.mu.Unlock()
	c.log.Warn("connection lost, reconnecting", "server", url, "err", cause)
	if h := c.opts.DisconnectHandler; h != nil {
		c.event(func() { h(c, cause) })
	}
	go c.reconnect(url)
}

// whenLost registers f to be called each time the connection is lost.
func (c *Conn) whenLost(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onLost = append(c.onLost, f)
}

// reconnect dials the servers in turn, starting after the one that failed, with
// backoff and jitter between rounds, until one answers, MaxReconnects rounds fail, or
// the connection is closed.
func (c *Conn) reconnect(failed string) {
	wait := c.opts.ReconnectWait
	c.mu.Lock()
	servers := c.servers // replaced, never modified, by learnLocked
	c.mu.Unlock()
	start := -1
	for i, s := range servers {
		if s == failed {
			start = i // the failed server goes last in each round
		}
	}
	// Other servers are tried at once: a dead node's clients move to a live one in
	// the time of a dial. The wait between rounds is for when none answers.
	if len(servers) > 1 {
		if c.tryServers(servers, start, failed, 0) {
			return
		}
	}
	for round := 1; c.opts.MaxReconnects < 0 || round <= c.opts.MaxReconnects; round++ {
		t := time.NewTimer(wait/2 + time.Duration(rand.Int64N(int64(wait/2)+1)))
		select {
		case <-c.done:
			t.Stop()
			return
		case <-t.C:
		}
		if c.tryServers(servers, start, "", round) {
			return
		}
		wait = min(2*wait, c.opts.MaxReconnectWait)
	}
	c.log.Warn("giving up reconnecting", "rounds", c.opts.MaxReconnects)
	c.Close()
}

// tryServers dials the servers in turn after start, skipping skip, and installs the
// first that answers. It reports whether the reconnect is over: connected, or the
// connection closed meanwhile.
func (c *Conn) tryServers(servers []string, start int, skip string, round int) bool {
	for i := range servers {
		addr := servers[(start+1+i)%len(servers)]
		if addr == skip {
			continue
		}
		nc, info, rest, err := c.dial(addr)
		if err != nil {
			c.log.Debug("reconnect attempt failed", "server", addr, "round", round, "err", err)
			continue
		}
		c.mu.Lock()
		if c.status != Reconnecting {
			c.mu.Unlock()
			nc.Close()
			return true
		}
		discovered := c.install(nc, addr, info, rest)
		c.mu.Unlock()
		c.reconnects.Add(1)
		c.log.Info("reconnected", "server", addr)
		if h := c.opts.ReconnectHandler; h != nil {
			c.event(func() { h(c) })
		}
		if discovered {
			c.discoveredServers()
		}
		return true
	}
	return false
}

// pinger sends a PING every PingInterval and declares the link dead when too many go
// unanswered.
func (c *Conn) pinger() {
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		if c.status != Connected {
			c.mu.Unlock()
			continue
		}
		c.pingOut++
		if c.pingOut > c.opts.MaxPingsOutstanding {
			epoch := c.epoch
			c.mu.Unlock()
			c.lost(epoch, errors.New("tern: stale connection: the server did not answer pings"))
			continue
		}
		c.pings++
		c.pongs = append(c.pongs, make(chan error, 1))
		c.mu.Unlock()
		c.kick()
	}
}

// ---------------------------------------------------------------------------------
// Events

// event queues a handler call for the event goroutine.
func (c *Conn) event(f func()) {
	select {
	case c.events <- f:
	case <-c.done:
	}
}

// dispatchEvents runs handlers one at a time; after Close it runs what is queued and
// then the ClosedHandler.
func (c *Conn) dispatchEvents() {
	for {
		select {
		case f := <-c.events:
			f()
		case <-c.done:
			for {
				select {
				case f := <-c.events:
					f()
				default:
					if h := c.opts.ClosedHandler; h != nil {
						h(c)
					}
					return
				}
			}
		}
	}
}

// discoveredServers reports a change of the discovered servers to its handler.
func (c *Conn) discoveredServers() {
	c.log.Debug("cluster servers discovered", "servers", c.DiscoveredServers())
	if h := c.opts.DiscoveredServersHandler; h != nil {
		c.event(func() { h(c) })
	}
}

// asyncError reports err to the ErrorHandler without ever blocking the caller.
func (c *Conn) asyncError(s *Subscription, err error) {
	if h := c.opts.ErrorHandler; h != nil {
		select {
		case c.events <- func() { h(c, s, err) }:
		default:
			c.log.Warn("error handler queue full, error dropped", "err", err)
		}
	}
}

// ---------------------------------------------------------------------------------
// State

// Close closes the connection. Frames still buffered are given one write, bounded by
// Timeout, before the socket closes, but nothing waits for the server: use Flush or
// Drain to be sure they arrived. Asynchronous subscriptions stop after the message
// their handler is running; pending Flush, NextMsg and Request calls return
// ErrConnectionClosed. Close is idempotent.
func (c *Conn) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.closeLocked(nil)
}

// closeLocked closes the connection; it is called with mu held and releases it. A
// non-nil lostCause reports the link's loss to the DisconnectErrHandler first.
func (c *Conn) closeLocked(lostCause error) {
	if c.status == Closed {
		c.mu.Unlock()
		return
	}
	var last []byte
	if c.status == Connected || c.status == Draining {
		last = c.bw
	}
	c.status = Closed
	c.bw = nil
	nc := c.nc
	for _, ch := range c.pongs {
		ch <- ErrConnectionClosed
	}
	c.pongs = nil
	c.wcond.Broadcast()
	c.mu.Unlock()

	if nc != nil {
		if len(last) > 0 {
			// Also bounds a write of the flusher that is stuck on a full socket.
			_ = nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
			c.writeMu.Lock()
			_, _ = nc.Write(last)
			c.writeMu.Unlock()
		}
		_ = nc.Close()
	}
	c.subsMu.Lock()
	subs := c.subs
	c.subs = map[uint64]*Subscription{}
	c.subsMu.Unlock()
	for _, s := range subs {
		s.close(true)
	}
	if h := c.opts.DisconnectHandler; h != nil && lostCause != nil {
		c.event(func() { h(c, lostCause) })
	}
	close(c.done)
}

// Status reports the connection's state.
func (c *Conn) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// IsConnected reports whether the link is up and not draining.
func (c *Conn) IsConnected() bool { return c.Status() == Connected }

// IsReconnecting reports whether the client is trying to reconnect.
func (c *Conn) IsReconnecting() bool { return c.Status() == Reconnecting }

// IsDraining reports whether Drain is under way.
func (c *Conn) IsDraining() bool { return c.Status() == Draining }

// IsClosed reports whether the connection is closed for good.
func (c *Conn) IsClosed() bool { return c.Status() == Closed }

// ConnectedURL is the URL of the server in use, or "" when disconnected.
func (c *Conn) ConnectedURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status != Connected && c.status != Draining {
		return ""
	}
	return urlOf(c.url)
}

// Servers returns the URLs of the servers the connection may use, in the order a
// reconnect tries them: those given to Connect, then those discovered.
func (c *Conn) Servers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return urlsOf(c.servers)
}

// DiscoveredServers returns the URLs of the servers learned from the cluster (the
// servers' connect_urls) that were not given to Connect.
func (c *Conn) DiscoveredServers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return urlsOf(c.discovered)
}

// urlOf turns a server address of the list into its URL.
func urlOf(addr string) string {
	if strings.HasPrefix(addr, udpPrefix) || strings.HasPrefix(addr, tlsPrefix) {
		return addr
	}
	return "tern://" + addr
}

func urlsOf(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = urlOf(a)
	}
	return out
}

// ServerInfo is what the current (or last) server said in its INFO.
func (c *Conn) ServerInfo() ServerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// MaxPayload is the server's payload limit in bytes.
func (c *Conn) MaxPayload() int { return c.ServerInfo().MaxPayload }

// LastError is the last ERR the server sent that answered no synchronous call, or nil.
func (c *Conn) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Stats returns the connection's counters.
func (c *Conn) Stats() Statistics {
	return Statistics{InMsgs: c.inMsgs.Load(), OutMsgs: c.outMsgs.Load(), InBytes: c.inBytes.Load(),
		OutBytes: c.outBytes.Load(), Reconnects: c.reconnects.Load()}
}
