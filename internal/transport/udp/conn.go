package udp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/transport/arq"
)

// Errors callers branch on.
var (
	// ErrClosed is returned by operations on a closed session or listener.
	ErrClosed = errors.New("udp: session closed")
	// ErrReset ends a session the server no longer has (it restarted, or the
	// session timed out there): the client starts a new one.
	ErrReset = errors.New("udp: session reset by the server")
	// ErrIdleTimeout ends a session that heard nothing from its peer for the
	// idle timeout.
	ErrIdleTimeout = errors.New("udp: session idle timeout")
)

// Conn is a reliable session over UDP presented as a net.Conn: a byte stream, in
// order, exactly once. Any protocol written for a stream (Tern's native frames) runs
// over it unchanged.
type Conn struct {
	pc     net.PacketConn
	bc     batchConn
	id     uint64
	hdr    [sessionHdr]byte // of data datagrams
	local  net.Addr
	onDone func()
	sec    *sessionCipher // nil: a plaintext session

	keepAlive, idleTimeout time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	ep       *arq.Endpoint
	peer     net.Addr
	rbuf     []byte // delivered, not yet read: rbuf[roff:]
	roff     int
	received bool // a datagram came in since the last drain
	closed   bool
	err      error
	timer    *time.Timer
	lastRecv time.Time
	lastSend time.Time
	rdl, wdl time.Time
	wb       writeBatch
	ctlHdr   [sessionHdr]byte                // of the ping or close being sent
	ctl      [sessionHdr + sealOverhead]byte // the ping or close being sent
}

func newConn(pc *net.UDPConn, bc batchConn, id uint64, peer net.Addr, cfg Config, sec *sessionCipher, onDone func()) *Conn {
	if cfg.MTU <= 0 {
		cfg.MTU = defaultMTU
	}
	cfg.MTU -= sessionHdr
	if sec != nil {
		cfg.MTU -= sealOverhead
	}
	cfg.defaults()
	c := &Conn{pc: pc, bc: bc, id: id, local: pc.LocalAddr(), peer: peer, ep: arq.New(cfg.arq()), onDone: onDone, sec: sec,
		keepAlive: cfg.KeepAlive, idleTimeout: cfg.IdleTimeout, lastRecv: time.Now(), lastSend: time.Now()}
	c.hdr[0] = kindData
	binary.BigEndian.PutUint64(c.hdr[1:], id)
	c.cond = sync.NewCond(&c.mu)
	c.timer = time.AfterFunc(c.keepAlive, c.tick)
	return c
}

// datagram takes a data, ping or close datagram b of this session from addr, and
// reports whether it was data. What data causes is sent by the next inputDone, once
// per batch of datagrams read: one acknowledgement and one write call for many
// datagrams. A datagram that does not authenticate, is replayed or is malformed is
// dropped and changes nothing, the peer's address included.
func (c *Conn) datagram(b []byte, from net.Addr, now time.Time) (data bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	body := b[sessionHdr:]
	if c.sec != nil {
		var ok bool
		if body, ok = c.sec.open(b[:sessionHdr], body); !ok {
			c.mu.Unlock()
			return false
		}
	}
	switch b[0] {
	case kindData:
		if err := c.ep.Receive(now, body); err != nil {
			c.mu.Unlock()
			return false
		}
		c.received = true
	case kindClose:
		c.mu.Unlock()
		c.closeWith(nil, false)
		return false
	}
	c.peer, c.lastRecv = from, now // the latest address wins (NAT rebinding)
	c.mu.Unlock()
	return b[0] == kindData
}

// inputDone sends and delivers what the datagrams since the last call produced.
func (c *Conn) inputDone(now time.Time) {
	c.mu.Lock()
	if c.received && !c.closed {
		c.received = false
		c.drainLocked(now)
	}
	c.mu.Unlock()
}

// drainLocked sends what the endpoint produced, queues what it delivered and sets
// the timer.
func (c *Conn) drainLocked(now time.Time) {
	out, del := c.ep.Output()
	if len(out) > 0 {
		c.sendLocked(out, now)
		c.lastSend = now
	}
	for _, m := range del {
		c.rbuf = append(c.rbuf, m...)
	}
	if len(del) > 0 && c.ep.SetUnread(now, len(c.rbuf)-c.roff) {
		// The window reopened (rare here: it mostly shrinks); the update is out.
		if out, _ := c.ep.Output(); len(out) > 0 {
			c.sendLocked(out, now)
		}
	}
	if len(del) > 0 || len(out) > 0 {
		c.cond.Broadcast()
	}
	next := now.Add(c.keepAlive)
	if d := c.ep.Deadline(); !d.IsZero() && d.Before(next) {
		next = d
	}
	c.timer.Reset(max(time.Until(next), 0))
}

// sendLocked writes the ARQ datagrams out, sealed in an encrypted session.
func (c *Conn) sendLocked(out [][]byte, now time.Time) {
	if c.sec != nil {
		var err error
		if out, err = c.sec.sealBatch(c.hdr[:], out); err != nil {
			c.failLocked(err)
			return
		}
	}
	c.wb.send(c.bc, c.hdr[:], out, c.peer, !c.ep.RecentLoss(now))
}

// failLocked ends the session from under its lock with err.
func (c *Conn) failLocked(err error) {
	go c.closeWith(err, false)
}

// controlLocked sends a ping or close datagram, sealed in an encrypted session so
// that nobody who saw the session id can close the session or keep it alive.
func (c *Conn) controlLocked(kind byte) {
	c.ctlHdr[0] = kind
	binary.BigEndian.PutUint64(c.ctlHdr[1:], c.id)
	b := append(c.ctl[:0], c.ctlHdr[:]...)
	if c.sec != nil {
		var err error
		if b, err = c.sec.seal(b, c.ctlHdr[:], nil); err != nil {
			c.failLocked(err)
			return
		}
	}
	_, _ = c.pc.WriteTo(b, c.peer)
}

// tick runs the endpoint's timers, keepalive and idle timeout.
func (c *Conn) tick() {
	now := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if now.Sub(c.lastRecv) > c.idleTimeout {
		c.mu.Unlock()
		c.closeWith(ErrIdleTimeout, false)
		return
	}
	if now.Sub(c.lastSend) >= c.keepAlive && c.ep.Idle() {
		c.controlLocked(kindPing)
		c.lastSend = now
	}
	c.ep.Tick(now)
	c.drainLocked(now)
	if !c.rdl.IsZero() && !now.Before(c.rdl) || !c.wdl.IsZero() && !now.Before(c.wdl) {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.roff == len(c.rbuf) {
		if c.closed {
			if c.err != nil {
				return 0, c.err
			}
			return 0, io.EOF
		}
		if !c.rdl.IsZero() && !time.Now().Before(c.rdl) {
			return 0, os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
	n := copy(p, c.rbuf[c.roff:])
	c.roff += n
	if c.roff == len(c.rbuf) {
		c.rbuf, c.roff = c.rbuf[:0], 0
		if cap(c.rbuf) > maxIdleReadBuf {
			c.rbuf = nil // a burst's buffer is not kept for good
		}
	}
	if now := time.Now(); c.ep.SetUnread(now, len(c.rbuf)-c.roff) {
		c.drainLocked(now) // the window reopened: tell the peer
	}
	return n, nil
}

// maxIdleReadBuf is the largest read buffer a drained session keeps.
const maxIdleReadBuf = 1 << 20

// maxChunk is the most of a Write that becomes one message.
const maxChunk = 32 << 10

// Write implements net.Conn; it waits while the send queue is full.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	written := 0
	for written < len(p) {
		if c.closed {
			if c.err != nil {
				return written, c.err // why it ended: a reset, an idle timeout
			}
			return written, ErrClosed
		}
		chunk := p[written:min(len(p), written+maxChunk)]
		err := c.ep.Send(time.Now(), chunk)
		if errors.Is(err, ErrQueueFull) {
			if !c.wdl.IsZero() && !time.Now().Before(c.wdl) {
				return written, os.ErrDeadlineExceeded
			}
			c.cond.Wait()
			continue
		}
		if err != nil {
			return written, err
		}
		written += len(chunk)
		c.drainLocked(time.Now())
	}
	return written, nil
}

// Close implements net.Conn: it tells the peer and ends the session.
func (c *Conn) Close() error {
	c.closeWith(nil, true)
	return nil
}

func (c *Conn) closeWith(err error, tell bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	// Give what is queued a moment to leave, as a TCP close would.
	deadline := time.Now().Add(200 * time.Millisecond)
	for tell && !c.ep.Idle() && time.Now().Before(deadline) {
		c.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
	}
	c.closed, c.err = true, err
	if tell {
		c.controlLocked(kindClose)
	}
	c.timer.Stop()
	c.cond.Broadcast()
	c.mu.Unlock()
	if c.onDone != nil {
		c.onDone()
	}
}

func (c *Conn) LocalAddr() net.Addr { return c.local }
func (c *Conn) RemoteAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer
}

func (c *Conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.cond.Broadcast()
	if !t.IsZero() {
		time.AfterFunc(max(time.Until(t), 0), func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
	}
	c.mu.Unlock()
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return nil
}

// Stats reports the session's transport counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Stats: c.ep.Stats()}
	if c.sec != nil {
		st.Forged, st.Replayed = c.sec.forged, c.sec.replayed
	}
	return st
}
