package native

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/filter"
	"github.com/tern-mq/tern/internal/subject"
	"github.com/tern-mq/tern/internal/wire"
)

const (
	readBufSize   = 32 << 10
	maxIdleBuffer = 8 << 20 // buffers grown above this are released once drained
	writeChunk    = 256 << 10
)

// Conn is one client connection speaking the native protocol.
type Conn struct {
	srv    *Server
	id     uint64
	nc     net.Conn
	remote string
	start  time.Time
	log    *slog.Logger

	// Set by the reader during the handshake (name under subsMu, for monitoring).
	name   string
	noEcho bool
	noResp bool

	// Owned by the reader goroutine.
	batch broker.Batch
	pub   broker.Message

	subsMu sync.Mutex
	subs   map[uint64]*broker.Subscription

	// Outbound state, guarded by mu.
	mu       sync.Mutex
	out      []byte // queued, not yet taken by the writer
	writing  int    // bytes the writer is sending now
	closed   bool
	closeErr error
	stallCh  chan struct{} // closed at the writer's next progress; nil when not stalling
	stuck    bool          // no progress for broker.StuckAfter; no stalls until drained
	lastProg time.Time     // when the writer last completed a chunk
	wake     chan struct{} // 1-slot: writer has work
	done     chan struct{} // closed when the connection is closed

	pingsOut atomic.Int32

	inMsgs, inBytes   atomic.Uint64
	outMsgs, outBytes atomic.Uint64
	dropped           atomic.Uint64
	slowReported      atomic.Bool
}

func newConn(s *Server, id uint64, nc net.Conn) *Conn {
	c := &Conn{
		srv:    s,
		id:     id,
		nc:     nc,
		remote: nc.RemoteAddr().String(),
		start:  time.Now(),
		subs:   make(map[uint64]*broker.Subscription),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	c.log = s.log.With("cid", id, "remote", c.remote)
	c.pub.Origin = c
	return c
}

// run serves the connection until it closes. It returns after both goroutines end.
func (c *Conn) run() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoop()
	c.close(err)
	<-writerDone
	c.cleanup()
}

// ---------------------------------------------------------------------------------
// Reading

func (c *Conn) readLoop() error {
	cfg := &c.srv.cfg
	maxBody := cfg.MaxPayload + 64<<10
	buf := make([]byte, readBufSize)
	filled := 0
	connected := false
	_ = c.nc.SetReadDeadline(time.Now().Add(cfg.ConnectTimeout))
	var f wire.Frame
	for {
		n, err := c.nc.Read(buf[filled:])
		filled += n
		off := 0
		for off < filled {
			k, derr := f.Decode(buf[off:filled], maxBody)
			if derr != nil {
				if errors.Is(derr, wire.ErrIncomplete) {
					break
				}
				code := wire.CodeProtocol
				if errors.Is(derr, wire.ErrTooLarge) {
					code = wire.CodeTooLarge
				}
				return c.fatal(code, derr.Error())
			}
			off += k
			if !connected {
				if f.Type != wire.TypeConnect {
					return c.fatal(wire.CodeConnectFirst, fmt.Sprintf("first frame is %s, want CONNECT", f.Type))
				}
				if ferr := c.handleConnect(&f); ferr != nil {
					return ferr
				}
				connected = true
				_ = c.nc.SetReadDeadline(time.Time{})
				continue
			}
			if ferr := c.handle(&f); ferr != nil {
				c.batch.Flush()
				return ferr
			}
		}
		c.batch.Flush()
		c.batch.WaitStalled(broker.MaxStall)
		// Keep the unread tail at the front; grow for a frame bigger than the buffer.
		if off > 0 {
			filled = copy(buf, buf[off:filled])
		}
		if filled == len(buf) {
			need, lerr := wire.FrameLen(buf[:filled])
			if lerr != nil || need <= len(buf) {
				need = 2 * len(buf)
			}
			nb := make([]byte, need)
			copy(nb, buf[:filled])
			buf = nb
		} else if len(buf) > maxIdleBuffer && filled < readBufSize {
			buf = append(make([]byte, 0, readBufSize), buf[:filled]...)[:readBufSize]
		}
		if err != nil {
			if !connected && isTimeout(err) {
				return c.fatal(wire.CodeConnectFirst, "no CONNECT within the connect timeout")
			}
			return err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errClosedByProtocol marks a close the server itself decided (an ERR was sent).
var errClosedByProtocol = errors.New("closed after fatal error")

// fatal queues an ERR and tells the read loop to stop; the writer sends the ERR before
// the socket closes.
func (c *Conn) fatal(code wire.Code, text string) error {
	c.log.Debug("closing connection", "code", code, "reason", text)
	c.enqueue(func(b []byte) []byte { return wire.AppendErr(b, code, 0, text) })
	return fmt.Errorf("%w: %s: %s", errClosedByProtocol, code, text)
}

// reply queues a control frame (OK, ERR, PONG, INFO) for this connection.
func (c *Conn) enqueue(appendFrame func([]byte) []byte) {
	c.mu.Lock()
	if !c.closed {
		c.out = appendFrame(c.out)
	}
	c.mu.Unlock()
	c.Flush()
}

func (c *Conn) sendErr(code wire.Code, id uint64, text string) {
	c.enqueue(func(b []byte) []byte { return wire.AppendErr(b, code, id, text) })
}

func (c *Conn) ok(id uint64) {
	if id == 0 {
		return
	}
	c.mu.Lock()
	if !c.closed {
		c.out = wire.AppendOK(c.out, id)
	}
	c.mu.Unlock()
	c.batch.Add(c)
}

func (c *Conn) handleConnect(f *wire.Frame) error {
	cn, err := wire.ParseConnect(f.Payload)
	if err != nil {
		return c.fatal(wire.CodeProtocol, err.Error())
	}
	if cn.Version != wire.Version {
		return c.fatal(wire.CodeVersion, fmt.Sprintf("protocol version %d not supported (server speaks %d)", cn.Version, wire.Version))
	}
	if auth := c.srv.cfg.Authenticate; auth != nil {
		if aerr := auth(cn.Name, cn.Credentials); aerr != nil {
			return c.fatal(wire.CodeAuth, aerr.Error())
		}
	}
	c.subsMu.Lock()
	c.name = cn.Name
	c.subsMu.Unlock()
	c.noEcho = cn.Flags&wire.ConnectNoEcho != 0
	c.noResp = cn.Flags&wire.ConnectNoResponders != 0
	info := c.srv.info
	info.ClientID = c.id
	c.enqueue(func(b []byte) []byte { return wire.AppendInfo(b, &info) })
	c.log.Debug("client connected", "name", c.name, "lang", cn.Lang, "version", cn.ClientVersion)
	return nil
}

func (c *Conn) handle(f *wire.Frame) error {
	switch f.Type {
	case wire.TypePub:
		c.handlePub(f)
	case wire.TypeSub:
		c.handleSub(f)
	case wire.TypeUnsub:
		c.handleUnsub(f)
	case wire.TypePing:
		c.mu.Lock()
		if !c.closed {
			c.out = wire.AppendPong(c.out)
		}
		c.mu.Unlock()
		c.batch.Add(c)
	case wire.TypePong:
		c.pingsOut.Store(0)
	case wire.TypeConnect:
		return c.fatal(wire.CodeConnectFirst, "second CONNECT on a connection")
	default:
		return c.fatal(wire.CodeProtocol, fmt.Sprintf("unexpected %s frame from a client", f.Type))
	}
	return nil
}

func (c *Conn) handlePub(f *wire.Frame) {
	if len(f.Payload) > c.srv.cfg.MaxPayload {
		c.sendErr(wire.CodeTooLarge, f.ID, fmt.Sprintf("payload of %d bytes exceeds the %d byte limit", len(f.Payload), c.srv.cfg.MaxPayload))
		return
	}
	if err := subject.ValidatePublish(f.Subject); err != nil {
		c.sendErr(wire.CodeBadSubject, f.ID, err.Error())
		return
	}
	if len(f.Reply) > 0 {
		if err := subject.ValidatePublish(f.Reply); err != nil {
			c.sendErr(wire.CodeBadSubject, f.ID, "reply: "+err.Error())
			return
		}
	}
	if len(f.Header) > 0 {
		if err := f.Header.Validate(); err != nil {
			c.sendErr(wire.CodeBadHeader, f.ID, err.Error())
			return
		}
	}
	c.inMsgs.Add(1)
	c.inBytes.Add(uint64(len(f.Payload)))
	m := &c.pub
	m.Subject, m.Reply, m.Header, m.Payload = f.Subject, f.Reply, f.Header, f.Payload
	matched := c.srv.broker.Publish(&c.batch, m)
	if matched == 0 && len(f.Reply) > 0 && c.noResp {
		c.srv.noResponders(&c.batch, f.Reply)
	}
	c.ok(f.ID)
}

func (c *Conn) handleSub(f *wire.Frame) {
	cfg := &c.srv.cfg
	sub := &broker.Subscription{
		Sink:    c,
		SID:     f.SID,
		Subject: string(f.Subject),
		Queue:   string(f.Queue),
		NoEcho:  c.noEcho,
	}
	if len(f.Filter) > 0 {
		flt, err := filter.Compile(string(f.Filter))
		if err != nil {
			c.sendErr(wire.CodeBadFilter, f.ID, err.Error())
			return
		}
		sub.Filter = flt
	}
	c.subsMu.Lock()
	if _, dup := c.subs[f.SID]; dup {
		c.subsMu.Unlock()
		c.sendErr(wire.CodeDuplicateSID, f.ID, fmt.Sprintf("subscription id %d is in use", f.SID))
		return
	}
	if cfg.MaxSubscriptions > 0 && len(c.subs) >= cfg.MaxSubscriptions {
		c.subsMu.Unlock()
		c.sendErr(wire.CodeMaxSubscriptions, f.ID, fmt.Sprintf("connection has the maximum of %d subscriptions", cfg.MaxSubscriptions))
		return
	}
	c.subs[f.SID] = sub
	c.subsMu.Unlock()
	if err := c.srv.broker.Subscribe(sub); err != nil {
		c.subsMu.Lock()
		delete(c.subs, f.SID)
		c.subsMu.Unlock()
		code := wire.CodeBadSubject
		if errors.Is(err, broker.ErrBadQueue) {
			code = wire.CodeBadQueue
		}
		c.sendErr(code, f.ID, err.Error())
		return
	}
	c.ok(f.ID)
}

func (c *Conn) handleUnsub(f *wire.Frame) {
	c.subsMu.Lock()
	sub, found := c.subs[f.SID]
	if found && f.Max == 0 {
		delete(c.subs, f.SID)
	}
	c.subsMu.Unlock()
	if !found {
		c.sendErr(wire.CodeUnknownSID, f.ID, fmt.Sprintf("no subscription with id %d", f.SID))
		return
	}
	var err error
	if f.Max == 0 {
		err = c.srv.broker.Unsubscribe(sub)
	} else {
		err = c.srv.broker.AutoUnsubscribe(sub, sub.Delivered()+f.Max)
	}
	if err != nil {
		c.sendErr(wire.CodeInternal, f.ID, err.Error())
		return
	}
	c.ok(f.ID)
}

// ---------------------------------------------------------------------------------
// Delivering and writing

// Deliver implements broker.Sink: it appends a MSG frame to the outbound buffer, or
// applies the slow-consumer policy when the pending bytes would exceed the limit.
func (c *Conn) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	size := wire.MsgLen(sub.SID, m.Subject, m.Reply, m.Header, m.Payload)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if pending := int64(len(c.out) + c.writing + size); pending > c.srv.cfg.MaxPending {
		c.mu.Unlock()
		c.slowConsumer(pending)
		return false
	}
	c.out = wire.AppendMsg(c.out, sub.SID, m.Subject, m.Reply, m.Header, m.Payload)
	if pending := int64(len(c.out) + c.writing); pending > c.srv.stallAt && !c.stuck && c.stallCh == nil {
		c.stallCh = make(chan struct{})
	}
	c.mu.Unlock()
	c.outMsgs.Add(1)
	c.outBytes.Add(uint64(len(m.Payload)))
	return true
}

func (c *Conn) slowConsumer(pending int64) {
	c.dropped.Add(1)
	c.srv.droppedMsgs.Add(1)
	if !c.slowReported.Swap(true) {
		c.srv.slowConsumers.Add(1)
		c.log.Warn("slow consumer", "pending_bytes", pending, "limit", c.srv.cfg.MaxPending, "policy", c.srv.cfg.SlowConsumerPolicy)
	}
	if c.srv.cfg.SlowConsumerPolicy == PolicyDisconnect {
		// The ERR goes out after what is already queued; new deliveries stop now.
		c.mu.Lock()
		if !c.closed {
			c.out = wire.AppendErr(c.out, wire.CodeSlowConsumer, 0, fmt.Sprintf("pending bytes %d over the %d byte limit", pending, c.srv.cfg.MaxPending))
		}
		c.mu.Unlock()
		c.close(fmt.Errorf("slow consumer: %d pending bytes", pending))
	}
}

// Removed implements broker.Remover: a subscription reached its UNSUB max.
func (c *Conn) Removed(sub *broker.Subscription) {
	c.subsMu.Lock()
	if c.subs[sub.SID] == sub {
		delete(c.subs, sub.SID)
	}
	c.subsMu.Unlock()
}

// Stall implements broker.Staller.
func (c *Conn) Stall() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stallCh == nil {
		return nil
	}
	return c.stallCh
}

// Stuck implements broker.Staller: a publisher waited in vain. The connection stops
// holding publishers back only once its writer has made no progress for broker.StuckAfter;
// one that is merely slower than its publishers keeps throttling them.
func (c *Conn) Stuck() {
	c.mu.Lock()
	if c.writing > 0 && time.Since(c.lastProg) > broker.StuckAfter {
		c.stuck = true
	}
	c.mu.Unlock()
}

// progress releases publishers waiting for this connection. Called with mu held.
func (c *Conn) progress() {
	c.lastProg = time.Now()
	if c.stallCh != nil {
		close(c.stallCh)
		c.stallCh = nil
	}
	if int64(len(c.out)+c.writing) <= c.srv.stallAt/2 {
		c.stuck = false
	}
}

// Flush implements broker.Sink: it wakes the writer.
func (c *Conn) Flush() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Conn) writeLoop() {
	var spare []byte
	timeout := c.srv.cfg.WriteTimeout
	for {
		select {
		case <-c.wake:
		case <-c.done:
		}
		c.mu.Lock()
		data := c.out
		closed := c.closed
		c.out = spare[:0]
		c.writing = len(data)
		c.lastProg = time.Now()
		c.mu.Unlock()
		// Write in bounded chunks so that waiting publishers see progress often.
		failed := false
		for rest := data; len(rest) > 0 && !failed; {
			chunk := rest[:min(len(rest), writeChunk)]
			rest = rest[len(chunk):]
			_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := c.nc.Write(chunk); err != nil {
				c.close(fmt.Errorf("write: %w", err))
				failed, closed = true, true
			}
			c.mu.Lock()
			c.writing = len(rest)
			c.progress()
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.writing = 0
		c.progress()
		if cap(data) > maxIdleBuffer && len(c.out) < cap(data)/4 {
			data = nil // let a burst's buffer go
		}
		c.mu.Unlock()
		spare = data
		if closed {
			// Anything queued after the final take (an ERR racing the close) is
			// sent best-effort before the socket closes.
			c.mu.Lock()
			rest := c.out
			c.out = nil
			c.mu.Unlock()
			if len(rest) > 0 {
				_ = c.nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = c.nc.Write(rest)
			}
			_ = c.nc.Close()
			return
		}
	}
}

// close marks the connection closed and wakes the writer, which sends what is queued
// and closes the socket. Safe to call many times from any goroutine.
func (c *Conn) close(reason error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = reason
	c.mu.Unlock()
	close(c.done)
	// Unblock a reader waiting in Read.
	_ = c.nc.SetReadDeadline(time.Now())
}

// cleanup removes the connection's subscriptions after both loops have ended.
func (c *Conn) cleanup() {
	c.subsMu.Lock()
	subs := c.subs
	c.subs = map[uint64]*broker.Subscription{}
	c.subsMu.Unlock()
	for _, sub := range subs {
		_ = c.srv.broker.Unsubscribe(sub)
	}
	c.srv.remove(c)
	reason := c.closeErr
	switch {
	case reason == nil, errors.Is(reason, io.EOF), errors.Is(reason, net.ErrClosed):
		c.log.Debug("client disconnected", "name", c.name)
	case errors.Is(reason, errClosedByProtocol):
		c.log.Info("client closed", "name", c.name, "reason", reason)
	default:
		c.log.Debug("client disconnected", "name", c.name, "reason", reason)
	}
}

// ping is called by the server's keepalive timer.
func (c *Conn) ping() {
	if n := c.pingsOut.Add(1); int(n) > c.srv.cfg.MaxPingsOut {
		c.sendErr(wire.CodeStale, 0, fmt.Sprintf("no answer to %d pings", n-1))
		c.close(errors.New("stale connection"))
		return
	}
	c.enqueue(wire.AppendPing)
}

// Info is a snapshot of the connection for monitoring.
type Info struct {
	ID                                 uint64
	Name, Remote                       string
	Start                              time.Time
	Subscriptions                      int
	InMsgs, InBytes, OutMsgs, OutBytes uint64
	Pending                            int
	Dropped                            uint64
}

// Snapshot returns the connection's counters.
func (c *Conn) Snapshot() Info {
	c.subsMu.Lock()
	nsubs, name := len(c.subs), c.name
	c.subsMu.Unlock()
	c.mu.Lock()
	pending := len(c.out) + c.writing
	c.mu.Unlock()
	return Info{
		ID: c.id, Name: name, Remote: c.remote, Start: c.start, Subscriptions: nsubs,
		InMsgs: c.inMsgs.Load(), InBytes: c.inBytes.Load(), OutMsgs: c.outMsgs.Load(), OutBytes: c.outBytes.Load(),
		Pending: pending, Dropped: c.dropped.Load(),
	}
}
