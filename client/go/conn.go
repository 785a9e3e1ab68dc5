package tern

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// Version of this client, sent in CONNECT.
const Version = "0.1.0"

// DefaultURL is where Connect goes when given "".
const DefaultURL = "tern://127.0.0.1:7400"

// Status is a connection's state.
type Status int32

// Connection states.
const (
	Connecting Status = iota
	Connected
	Reconnecting
	Draining
	Closed
)

func (s Status) String() string {
	return [...]string{"connecting", "connected", "reconnecting", "draining", "closed"}[s]
}

// Statistics are a connection's counters.
type Statistics struct {
	InMsgs, OutMsgs, InBytes, OutBytes uint64
	Reconnects                         uint64
}

// ServerInfo is what the server said about itself in the handshake.
type ServerInfo struct {
	ServerID, ServerName, Version string
	ClientID                      uint64
	MaxPayload                    int
	HeadersSupported              bool
	AuthRequired                  bool
}

// Conn is a connection to a Tern server. It is safe for concurrent use.
type Conn struct {
	opts    Options
	servers []string
	log     *slog.Logger

	mu      sync.Mutex
	wcond   *sync.Cond // publishers waiting for buffer room, drains waiting
	status  Status
	nc      net.Conn
	url     string
	info    ServerInfo
	epoch   uint64 // increments per physical connection
	bw      []byte // frames waiting for the flusher (or the reconnect)
	pings   int    // PINGs to append at the next write
	pongs   []chan error
	pingOut int
	subs    map[uint64]*Subscription
	acks    map[uint64]chan error
	ackID   uint64
	lastErr error

	flushCh chan struct{}
	done    chan struct{} // closed by Close
	events  chan func()

	ssid atomic.Uint64

	respMu     sync.Mutex
	respPrefix string
	respMap    map[string]chan *Msg
	respToken  uint64

	inMsgs, outMsgs, inBytes, outBytes, reconnects atomic.Uint64
}

// Connect dials the first reachable server of url (a comma-separated list of
// tern://host:port or host:port) and performs the handshake.
func Connect(url string, options ...Option) (*Conn, error) {
	opts := DefaultOptions()
	for _, o := range options {
		o(&opts)
	}
	return opts.Connect(url)
}

// Connect connects with these options.
func (o Options) Connect(url string) (*Conn, error) {
	if url == "" {
		url = DefaultURL
	}
	c := &Conn{
		opts:    o,
		log:     o.Logger,
		subs:    make(map[uint64]*Subscription),
		acks:    make(map[uint64]chan error),
		flushCh: make(chan struct{}, 1),
		done:    make(chan struct{}),
		events:  make(chan func(), 256),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.wcond = sync.NewCond(&c.mu)
	for _, u := range strings.Split(url, ",") {
		u = strings.TrimSpace(u)
		u = strings.TrimPrefix(u, "tern://")
		if u != "" {
			c.servers = append(c.servers, u)
		}
	}
	if len(c.servers) == 0 {
		return nil, fmt.Errorf("%w: empty URL", ErrNoServers)
	}
	var err error
	for _, addr := range c.servers {
		var nc net.Conn
		var info ServerInfo
		if nc, info, err = c.dial(addr); err == nil {
			c.mu.Lock()
			c.install(nc, addr, info)
			c.mu.Unlock()
			break
		}
	}
	if err != nil {
		return nil, err
	}
	go c.flusher()
	go c.dispatchEvents()
	go c.pinger()
	if h := c.opts.ConnectHandler; h != nil {
		c.event(func() { h(c) })
	}
	return c, nil
}

// dial connects to addr and runs the handshake.
func (c *Conn) dial(addr string) (net.Conn, ServerInfo, error) {
	nc, err := net.DialTimeout("tcp", addr, c.opts.Timeout)
	if err != nil {
		return nil, ServerInfo{}, fmt.Errorf("tern: dial %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if n := c.opts.ReadBufferSize; n > 0 {
			_ = tc.SetReadBuffer(n)
		}
	}
	_ = nc.SetDeadline(time.Now().Add(c.opts.Timeout))
	var flags uint64 = wire.ConnectNoResponders
	if c.opts.NoEcho {
		flags |= wire.ConnectNoEcho
	}
	hello := wire.AppendConnect(nil, &wire.Connect{Version: wire.Version, Flags: flags, Name: c.opts.Name,
		Lang: "go", ClientVersion: Version, Credentials: c.opts.Credentials})
	if _, err := nc.Write(hello); err != nil {
		nc.Close()
		return nil, ServerInfo{}, fmt.Errorf("tern: handshake with %s: %w", addr, err)
	}
	buf := make([]byte, 0, 512)
	tmp := make([]byte, 512)
	for {
		var f wire.Frame
		k, derr := f.Decode(buf, 0)
		if derr == nil {
			_ = k
			switch f.Type {
			case wire.TypeInfo:
				in, perr := wire.ParseInfo(f.Payload)
				if perr != nil {
					nc.Close()
					return nil, ServerInfo{}, perr
				}
				_ = nc.SetDeadline(time.Time{})
				return nc, ServerInfo{ServerID: in.ServerID, ServerName: in.ServerName, Version: in.ServerVersion,
					ClientID: in.ClientID, MaxPayload: int(in.MaxPayload),
					HeadersSupported: in.Flags&wire.InfoHeaders != 0, AuthRequired: in.Flags&wire.InfoAuthRequired != 0}, nil
			case wire.TypeErr:
				nc.Close()
				return nil, ServerInfo{}, &wire.Error{Code: f.Code, Text: string(f.Payload)}
			default:
				nc.Close()
				return nil, ServerInfo{}, fmt.Errorf("tern: handshake with %s: unexpected %s", addr, f.Type)
			}
		}
		if !errors.Is(derr, wire.ErrIncomplete) {
			nc.Close()
			return nil, ServerInfo{}, fmt.Errorf("tern: handshake with %s: %w", addr, derr)
		}
		n, rerr := nc.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if rerr != nil {
			nc.Close()
			return nil, ServerInfo{}, fmt.Errorf("tern: handshake with %s: %w", addr, rerr)
		}
	}
}

// install makes nc the live connection: it queues SUB frames for every subscription
// ahead of whatever was published while disconnected and starts the reader. Called
// with mu held.
func (c *Conn) install(nc net.Conn, addr string, info ServerInfo) {
	c.nc, c.url, c.info = nc, addr, info
	c.epoch++
	c.status = Connected
	c.pingOut = 0
	var pre []byte
	for _, s := range c.subs {
		pre = wire.AppendSub(pre, 0, s.sid, s.subject, s.queue, s.filter)
		if s.max > 0 {
			left := s.max - s.delivered.Load()
			if left <= 0 {
				left = 1
			}
			pre = wire.AppendUnsub(pre, 0, s.sid, uint64(left))
		}
	}
	c.bw = append(pre, c.bw...)
	epoch := c.epoch
	go c.readLoop(nc, epoch)
	c.kick()
	c.wcond.Broadcast()
}

func (c *Conn) kick() {
	select {
	case c.flushCh <- struct{}{}:
	default:
	}
}

// ---------------------------------------------------------------------------------
// Writing

func (c *Conn) flusher() {
	var spare []byte
	for {
		select {
		case <-c.flushCh:
		case <-c.done:
			return
		}
		if d := c.opts.FlushDelay; d > 0 {
			time.Sleep(d)
		}
		c.mu.Lock()
		if c.status != Connected && c.status != Draining || (len(c.bw) == 0 && c.pings == 0) {
			c.mu.Unlock()
			continue
		}
		data := c.bw
		for ; c.pings > 0; c.pings-- {
			data = wire.AppendPing(data)
		}
		c.bw = spare[:0]
		nc, epoch := c.nc, c.epoch
		c.wcond.Broadcast()
		c.mu.Unlock()

		_ = nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout + 5*time.Second))
		_, err := nc.Write(data)
		if cap(data) > 4*c.opts.WriteBufferSize {
			data = nil
		}
		spare = data
		if err != nil {
			c.lost(epoch, fmt.Errorf("write: %w", err))
		}
	}
}

func (c *Conn) checkPublish(subject string, size int) error {
	if subject == "" {
		return ErrBadSubject
	}
	if max := c.info.MaxPayload; max > 0 && size > max {
		return fmt.Errorf("%w: %d bytes > %d", ErrMaxPayload, size, max)
	}
	return nil
}

// appendFrame waits for room and appends a frame. Called with mu held.
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
		c.kick()
		c.wcond.Wait()
	}
}

// Publish sends data to subject.
func (c *Conn) Publish(subject string, data []byte) error {
	return c.publish(subject, "", nil, data)
}

// PublishRequest sends data to subject with a reply subject.
func (c *Conn) PublishRequest(subject, reply string, data []byte) error {
	return c.publish(subject, reply, nil, data)
}

// PublishMsg sends m with its reply subject and headers.
func (c *Conn) PublishMsg(m *Msg) error {
	var hdr []byte
	if len(m.Header) > 0 {
		hdr = m.Header.encode(nil)
	}
	return c.publish(m.Subject, m.Reply, hdr, m.Data)
}

func (c *Conn) publish(subject, reply string, hdr []byte, data []byte) error {
	c.mu.Lock()
	if err := c.checkPublish(subject, len(data)); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.room(len(data) + len(subject) + 16); err != nil {
		c.mu.Unlock()
		return err
	}
	c.bw = wire.AppendPub(c.bw, 0, subject, reply, hdr, data)
	c.mu.Unlock()
	c.outMsgs.Add(1)
	c.outBytes.Add(uint64(len(data)))
	c.kick()
	return nil
}

// Flush waits until the server has processed everything published before it.
func (c *Conn) Flush() error { return c.FlushTimeout(c.opts.Timeout + 8*time.Second) }

// FlushTimeout is Flush with a time limit.
func (c *Conn) FlushTimeout(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.FlushContext(ctx)
}

// FlushContext is Flush bounded by ctx.
func (c *Conn) FlushContext(ctx context.Context) error {
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
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ErrTimeout
		}
		return ctx.Err()
	}
}

// control queues a SUB/UNSUB frame with an ack id and waits for the server's answer.
func (c *Conn) control(build func(dst []byte, id uint64) []byte) error {
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.status == Closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	if c.status != Connected && c.status != Draining {
		// The frame is re-created from the subscription table on reconnect.
		c.mu.Unlock()
		return nil
	}
	c.ackID++
	id := c.ackID
	c.acks[id] = ch
	c.bw = build(c.bw, id)
	c.mu.Unlock()
	c.kick()
	select {
	case err := <-ch:
		return err
	case <-time.After(c.opts.Timeout):
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

func (c *Conn) readLoop(nc net.Conn, epoch uint64) {
	buf := make([]byte, 64<<10)
	off, n := 0, 0
	var f wire.Frame
	for {
		k, err := nc.Read(buf[n:])
		n += k
		for {
			used, derr := f.Decode(buf[off:n], 0)
			if derr != nil {
				if errors.Is(derr, wire.ErrIncomplete) {
					break
				}
				c.lost(epoch, derr)
				return
			}
			off += used
			c.process(&f)
		}
		if off > 0 {
			n = copy(buf, buf[off:n])
			off = 0
		}
		if n == len(buf) {
			need, lerr := wire.FrameLen(buf[:n])
			if lerr != nil || need <= len(buf) {
				need = 2 * len(buf)
			}
			buf = append(buf, make([]byte, need-len(buf))...)
		}
		if err != nil {
			c.lost(epoch, err)
			return
		}
	}
}

func (c *Conn) process(f *wire.Frame) {
	switch f.Type {
	case wire.TypeMsg:
		c.inMsgs.Add(1)
		c.inBytes.Add(uint64(len(f.Payload)))
		c.mu.Lock()
		s := c.subs[f.SID]
		c.mu.Unlock()
		if s != nil {
			s.deliver(f)
		}
	case wire.TypePing:
		c.mu.Lock()
		c.bw = wire.AppendPong(c.bw)
		c.mu.Unlock()
		c.kick()
	case wire.TypePong:
		c.mu.Lock()
		c.pingOut = 0
		var ch chan error
		if len(c.pongs) > 0 {
			ch = c.pongs[0]
			c.pongs = c.pongs[1:]
		}
		c.mu.Unlock()
		if ch != nil {
			ch <- nil
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
		c.mu.Unlock()
		c.asyncError(nil, err)
	}
}

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

// lost handles the end of physical connection epoch: fail what waited on it and
// reconnect or close.
func (c *Conn) lost(epoch uint64, cause error) {
	c.mu.Lock()
	if c.epoch != epoch || c.status == Closed || c.status == Reconnecting {
		c.mu.Unlock()
		return
	}
	nc := c.nc
	_ = nc.Close()
	for _, ch := range c.pongs {
		ch <- ErrConnectionLost
	}
	c.pongs, c.pings = nil, 0
	for id, ch := range c.acks {
		ch <- ErrConnectionLost
		delete(c.acks, id)
	}
	// Frames not yet handed to the socket are dropped with it, like those in flight:
	// SUBs are re-created from the table; publishes are at-most-once.
	c.bw = c.bw[:0]
	if !c.opts.AllowReconnect || c.status == Draining {
		c.mu.Unlock()
		c.log.Debug("connection lost", "err", cause)
		if h := c.opts.DisconnectHandler; h != nil {
			c.event(func() { h(c, cause) })
		}
		c.Close()
		return
	}
	c.status = Reconnecting
	c.wcond.Broadcast()
	c.mu.Unlock()
	c.log.Debug("connection lost, reconnecting", "err", cause)
	if h := c.opts.DisconnectHandler; h != nil {
		c.event(func() { h(c, cause) })
	}
	go c.reconnect()
}

func (c *Conn) reconnect() {
	wait := c.opts.ReconnectWait
	for attempt := 1; c.opts.MaxReconnects < 0 || attempt <= c.opts.MaxReconnects; attempt++ {
		jitter := time.Duration(rand.Int64N(int64(wait)/2 + 1))
		select {
		case <-c.done:
			return
		case <-time.After(wait/2 + jitter):
		}
		for i := range c.servers {
			addr := c.servers[(attempt+i-1)%len(c.servers)]
			nc, info, err := c.dial(addr)
			if err != nil {
				c.log.Debug("reconnect attempt failed", "server", addr, "attempt", attempt, "err", err)
				continue
			}
			c.mu.Lock()
			if c.status == Closed {
				c.mu.Unlock()
				nc.Close()
				return
			}
			c.install(nc, addr, info)
			c.mu.Unlock()
			c.reconnects.Add(1)
			if h := c.opts.ReconnectHandler; h != nil {
				c.event(func() { h(c) })
			}
			return
		}
		wait = min(2*wait, c.opts.MaxReconnectWait)
	}
	c.Close()
}

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
			c.lost(epoch, errors.New("stale connection: server did not answer pings"))
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

func (c *Conn) event(f func()) {
	select {
	case c.events <- f:
	case <-c.done:
	}
}

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
					return
				}
			}
		}
	}
}

func (c *Conn) asyncError(s *Subscription, err error) {
	if h := c.opts.ErrorHandler; h != nil {
		select {
		case c.events <- func() { h(c, s, err) }:
		default: // never block the reader on a slow handler
		}
	}
}

// ---------------------------------------------------------------------------------
// State

// Close closes the connection at once; buffered publishes that were not flushed are
// lost (use Drain or Flush first). Close is idempotent.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.status == Closed {
		c.mu.Unlock()
		return
	}
	c.status = Closed
	if c.nc != nil {
		_ = c.nc.Close()
	}
	for _, ch := range c.pongs {
		ch <- ErrConnectionClosed
	}
	c.pongs = nil
	subs := c.subs
	c.subs = map[uint64]*Subscription{}
	c.wcond.Broadcast()
	c.mu.Unlock()
	for _, s := range subs {
		s.close()
	}
	if h := c.opts.ClosedHandler; h != nil {
		select {
		case c.events <- func() { h(c) }:
		default:
		}
	}
	close(c.done)
}

// Status reports the connection's state.
func (c *Conn) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// IsConnected reports whether the connection is up.
func (c *Conn) IsConnected() bool { return c.Status() == Connected }

// IsClosed reports whether Close has run.
func (c *Conn) IsClosed() bool { return c.Status() == Closed }

// ConnectedURL is the server address in use, or "" when disconnected.
func (c *Conn) ConnectedURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status != Connected {
		return ""
	}
	return "tern://" + c.url
}

// ServerInfo is what the current server said in its INFO.
func (c *Conn) ServerInfo() ServerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// MaxPayload is the server's payload limit.
func (c *Conn) MaxPayload() int { return c.ServerInfo().MaxPayload }

// LastError is the last asynchronous error the server reported.
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
