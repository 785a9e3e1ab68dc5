package udp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/transport/arq"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Session datagrams wrap the ARQ datagrams. Before a session exists a server answers
// only with datagrams no larger than the one it got, so it cannot be used to amplify
// traffic toward a spoofed address, and it keeps no state for a source until that
// source has echoed a cookie, proving it receives at the address it claims:
//
//	init    0x01 | nonce u64 | zero padding to minInit bytes          client → server
//	cookie  0x02 | nonce u64 | ts u64 | mac [16]                      server → client
//	init2   0x03 | nonce u64 | ts u64 | mac [16] | padding to minInit client → server
//	accept  0x04 | nonce u64 | session u64                            server → client
//	data    0x05 | session u64 | ARQ datagram                         both ways
//	ping    0x06 | session u64                                        both ways, when idle
//	close   0x07 | session u64                                        both ways
//	refuse  0x08 | nonce u64 | reason u8                              server → client
//	reset   0x09 | session u64                                        server → client
//
// With encryption (noise.go) init2 and accept also carry the Noise handshake, and
// everything after the session header of data, ping and close is sealed (seal.go).
//
// A server answers a data or ping datagram for a session it does not have (it
// restarted, or the session timed out) with a reset, no larger than what it got,
// so that the client learns at once that it must start a new session instead of
// retransmitting into the void until its idle timeout. A client takes a reset only
// from the address it dialled and only for its own session id, which an off-path
// sender does not know.
// mac is HMAC-SHA256(server secret, source address | nonce | ts), cut to 16 bytes;
// a cookie is good for cookieTTL. A session is found by its id, not by the source
// address, so it survives the client's address or port changing (NAT rebinding).
const (
	kindInit   = 0x01
	kindCookie = 0x02
	kindInit2  = 0x03
	kindAccept = 0x04
	kindData   = 0x05
	kindPing   = 0x06
	kindClose  = 0x07
	kindRefuse = 0x08
	kindReset  = 0x09

	minInit    = 256
	sessionHdr = 9
	cookieTTL  = 30 * time.Second
	readMax    = 64 << 10
	defaultMTU = 1200
)

// socketBuffer is the send and receive buffer a session socket asks for: a burst
// that outruns the reader for a moment waits in the kernel instead of being lost.
// The kernel caps it at net.core.rmem_max / wmem_max.
const socketBuffer = 4 << 20

func setBuffers(pc *net.UDPConn) {
	_ = pc.SetReadBuffer(socketBuffer)
	_ = pc.SetWriteBuffer(socketBuffer)
}

// batchConn reads and writes many datagrams per system call (recvmmsg, sendmmsg
// on Linux; one per call where the platform has no such call).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

func newBatchConn(pc *net.UDPConn) batchConn {
	if a, ok := pc.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		return ipv4.NewPacketConn(pc)
	}
	return ipv6.NewPacketConn(pc)
}

// readBatch is the receive side's reusable batch: batch messages of up to size
// bytes each. With receive offload (gro) one message may hold a run of datagrams
// from one sender, all of one size but the last.
type readBatch struct {
	ms   []ipv4.Message
	size int
	gro  bool
}

// newReadBatch makes the read batch for pc, asking the kernel to coalesce
// datagrams of one flow where it can (UDP GRO): a bulk stream sent with
// segmentation offload then crosses the receive path as one message per send.
func newReadBatch(pc *net.UDPConn, n, mtu int) *readBatch {
	// Room for a peer whose MTU is up to twice ours; a datagram that fills the
	// buffer may have been cut and is dropped.
	size := max(4096, 2*mtu)
	gro := enableGRO(pc)
	if gro {
		size = readMax
	}
	rb := &readBatch{ms: make([]ipv4.Message, n), size: size, gro: gro}
	for i := range rb.ms {
		rb.ms[i].Buffers = [][]byte{make([]byte, size)}
		if gro {
			rb.ms[i].OOB = make([]byte, groControlSpace)
		}
	}
	return rb
}

// message returns the i-th message read and the size of the datagrams in it
// (the last may be shorter); nil if it may have been truncated.
func (rb *readBatch) message(i int) (b []byte, seg int) {
	m := &rb.ms[i]
	if m.N >= rb.size || m.N == 0 {
		return nil, 0
	}
	b, seg = m.Buffers[0][:m.N], m.N
	if rb.gro {
		if g := groSegment(m.OOB[:m.NN]); g > 0 && g < m.N {
			seg = g
		}
	}
	return b, seg
}

// writeBatch sends datagrams, each behind the same session header, to addr: many
// per system call, and a run of equal-sized ones (full datagrams, which the ARQ
// pads to exactly the MTU) as one segmentation-offload send where the kernel
// has it.
type writeBatch struct {
	ms     []ipv4.Message
	starts []int // the first datagram of each message
	bufs   [][]byte
	noGSO  bool           // the kernel refused segmentation offload on this socket
	gso    map[int][]byte // control messages by segment size
}

// gsoMaxBytes bounds one offloaded send: a UDP payload is at most 65507 bytes.
const gsoMaxBytes = 65000

// send writes datagrams; offload says whether runs of equal datagrams may leave as
// one segmentation-offload send. Callers turn it off while the path loses
// packets: a path that drops a whole offloaded run at once (a queue that drops
// per skb, as iptables and some virtual links do) turns one loss into dozens.
func (wb *writeBatch) send(bc batchConn, hdr []byte, datagrams [][]byte, addr net.Addr, offload bool) {
	n := len(datagrams)
	if cap(wb.ms) < n {
		wb.ms = make([]ipv4.Message, n)
		wb.starts = make([]int, n)
		wb.bufs = make([][]byte, 2*n)
	}
	ms := wb.ms[:0]
	starts := wb.starts[:0]
	for i := 0; i < n; {
		size := len(hdr) + len(datagrams[i])
		j := i + 1
		// A run of datagrams of one size, the last possibly shorter, goes as one.
		for offload && !wb.noGSO && j < n && j-i < gsoMaxSegments && (j-i+1)*size <= gsoMaxBytes && len(hdr)+len(datagrams[j]) <= size {
			j++
			if len(hdr)+len(datagrams[j-1]) < size {
				break
			}
		}
		b := wb.bufs[2*i : 2*j : 2*j]
		for k := i; k < j; k++ {
			b[2*(k-i)], b[2*(k-i)+1] = hdr, datagrams[k]
		}
		m := ipv4.Message{Buffers: b, Addr: addr}
		if j-i > 1 {
			m.OOB = wb.control(size)
		}
		ms = append(ms, m)
		starts = append(starts, i)
		i = j
	}
	for sent := 0; sent < len(ms); {
		k, err := bc.WriteBatch(ms[sent:], 0)
		if err != nil {
			if ms[sent].OOB != nil && !wb.noGSO {
				// No offload here after all: send the rest one by one.
				wb.noGSO = true
				wb.send(bc, hdr, datagrams[starts[sent]:], addr, false)
				break
			}
			// A full socket buffer or an unreachable peer: what was not sent
			// counts as lost, and the ARQ resends it.
			break
		}
		sent += k
	}
	clear(wb.bufs[:2*n])
	for i := range ms {
		wb.ms[i] = ipv4.Message{}
	}
}

func (wb *writeBatch) control(size int) []byte {
	c, ok := wb.gso[size]
	if !ok {
		if c = gsoControl(size); c == nil {
			wb.noGSO = true
		}
		if wb.gso == nil {
			wb.gso = make(map[int][]byte)
		}
		wb.gso[size] = c
	}
	return c
}

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

// ---------------------------------------------------------------------------------
// Server side

// Listener accepts sessions on one UDP socket; it implements net.Listener.
type Listener struct {
	pc     *net.UDPConn
	bc     batchConn
	cfg    Config
	keys   *serverKeys // nil: plaintext sessions only
	secret []byte

	mu       sync.Mutex
	sessions map[uint64]*Conn
	byNonce  map[uint64]*handshake // recent handshakes: a repeated init2 gets the same answer
	accept   chan *Conn
	done     chan struct{}
	closed   bool
	ended    Stats // counters of sessions that have ended

	resets    tokenBucket // owned by the read loop
	coalesced atomic.Uint64
	// Encrypted handshakes wait here for keyWorker: their public-key work (two
	// X25519 operations) is kept off the read loop, so that a burst of them does
	// not hold up the datagrams of running sessions.
	keyWork chan keyJob
}

// handshake is what a listener remembers of a session's handshake, to answer a
// retransmitted init2 with the same accept without doing the work again.
type handshake struct {
	noise  []byte // the client's Noise message; empty for a plaintext session
	accept []byte // nil while the handshake waits for keyWorker
}

// keyJob is an encrypted init2 whose address proof checked out.
type keyJob struct {
	m    init2Msg // its noise is the listener's own copy
	from net.Addr
}

// keyBacklog bounds the encrypted handshakes waiting for keyWorker; more are
// dropped, and their clients send init2 again.
const keyBacklog = 64

// Listen opens a UDP listener.
func Listen(addr string, cfg Config) (*Listener, error) {
	keys, err := newServerKeys(cfg)
	if err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	setBuffers(pc)
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	l := &Listener{pc: pc, bc: newBatchConn(pc), cfg: cfg, keys: keys, secret: secret, sessions: make(map[uint64]*Conn),
		byNonce: make(map[uint64]*handshake), accept: make(chan *Conn, 128), done: make(chan struct{})}
	if keys != nil {
		l.keyWork = make(chan keyJob, keyBacklog)
		go l.keyWorker()
	}
	go l.readLoop()
	return l, nil
}

func (l *Listener) mac(addr net.Addr, nonce, ts uint64) []byte {
	h := hmac.New(sha256.New, l.secret)
	h.Write([]byte(addr.String()))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], nonce)
	binary.BigEndian.PutUint64(b[8:], ts)
	h.Write(b[:])
	return h.Sum(nil)[:16]
}

func (l *Listener) readLoop() {
	rb := newReadBatch(l.pc, listenerBatch, l.cfg.MTU)
	var touched []*Conn
	for {
		n, err := l.bc.ReadBatch(rb.ms, 0)
		if err != nil {
			l.mu.Lock()
			closed := l.closed
			l.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		now := time.Now()
		for i := range n {
			msg, seg := rb.message(i)
			if seg < len(msg) {
				l.coalesced.Add(1)
			}
			for len(msg) > 0 {
				b := msg[:min(seg, len(msg))]
				msg = msg[len(b):]
				touched = l.handle(b, rb.ms[i].Addr, now, touched)
			}
		}
		for i, c := range touched {
			c.inputDone(now)
			touched[i] = nil
		}
		touched = touched[:0]
	}
}

// tokenBucket bounds how many resets a listener sends a second: a flood of datagrams
// with made-up session ids from forged sources gets a trickle back, not one reset
// each (a reset is never larger than what it answers, but neither should it be a
// reflector).
type tokenBucket struct {
	tokens float64
	at     time.Time
}

const (
	resetRate  = 1000 // per second
	resetBurst = 100
)

func (b *tokenBucket) allow(now time.Time) bool {
	if b.at.IsZero() {
		b.tokens = resetBurst
	} else {
		b.tokens = min(resetBurst, b.tokens+now.Sub(b.at).Seconds()*resetRate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// listenerBatch is how many datagrams the listener takes per read call.
const listenerBatch = 32

// handle dispatches one datagram and returns touched with the session it went to,
// if it is a data datagram for a session not yet in it. Anything malformed or
// unknown is dropped without an answer.
func (l *Listener) handle(b []byte, from net.Addr, now time.Time, touched []*Conn) []*Conn {
	if len(b) < sessionHdr {
		return touched
	}
	id := binary.BigEndian.Uint64(b[1:9])
	switch b[0] {
	case kindInit:
		if len(b) < minInit {
			return touched
		}
		ts := uint64(time.Now().Unix())
		out := make([]byte, 0, 33)
		out = append(out, kindCookie)
		out = binary.BigEndian.AppendUint64(out, id) // the nonce
		out = binary.BigEndian.AppendUint64(out, ts)
		out = append(out, l.mac(from, id, ts)...)
		_, _ = l.pc.WriteTo(out, from)
	case kindInit2:
		l.init2(b, from)
	case kindData, kindPing, kindClose:
		l.mu.Lock()
		c := l.sessions[id]
		l.mu.Unlock()
		if c == nil {
			// A listener with a key proves the reset is its own with the
			// session's token, and never answers with more bytes than it got.
			var reset [sessionHdr + resetTokenLen]byte
			n := sessionHdr
			if l.keys != nil {
				tok := resetToken(l.keys.private, id)
				n += copy(reset[sessionHdr:], tok[:])
			}
			if b[0] != kindClose && len(b) >= n && l.resets.allow(now) {
				reset[0] = kindReset
				binary.BigEndian.PutUint64(reset[1:], id)
				_, _ = l.pc.WriteTo(reset[:n], from)
			}
			return touched
		}
		if c.datagram(b, from, now) && !slices.Contains(touched, c) {
			touched = append(touched, c)
		}
	}
	return touched
}

// init2 answers a client that echoes its cookie: with a new session, with the
// answer it already got if it sent the same init2 again, or with a refusal.
// Everything here happens only for a source that proved its address.
func (l *Listener) init2(b []byte, from net.Addr) {
	m, ok := parseInit2(b)
	if !ok {
		return
	}
	if age := time.Since(time.Unix(int64(m.ts), 0)); age < -time.Second || age > cookieTTL ||
		!hmac.Equal(m.mac, l.mac(from, m.nonce, m.ts)) {
		return
	}
	l.mu.Lock()
	hs, seen := l.byNonce[m.nonce]
	closed := l.closed
	l.mu.Unlock()
	switch {
	case seen:
		// A retransmission gets the same answer (none while its key work waits);
		// another Noise message under the same nonce is someone else's and gets
		// none.
		if hs.accept != nil && bytes.Equal(hs.noise, m.noise) {
			_, _ = l.pc.WriteTo(hs.accept, from)
		}
		return
	case closed:
		return
	}
	if reason := l.keys.refusal(m.mode); reason != 0 {
		l.refuse(m.nonce, reason, from)
		return
	}
	if m.mode == modePlain {
		l.open(m, from, nil, newSessionID(), nil)
		return
	}
	m.noise = bytes.Clone(m.noise) // b is the read loop's buffer
	l.mu.Lock()
	if _, seen := l.byNonce[m.nonce]; seen || l.closed {
		l.mu.Unlock()
		return
	}
	select {
	case l.keyWork <- keyJob{m: m, from: from}:
		l.byNonce[m.nonce] = &handshake{noise: m.noise}
	default: // backlog full: the client sends init2 again
	}
	l.mu.Unlock()
}

// keyWorker does the Noise responder's work for encrypted handshakes, one at a
// time, until the listener closes.
func (l *Listener) keyWorker() {
	for {
		select {
		case <-l.done:
			return
		case j := <-l.keyWork:
			sid := newSessionID()
			msg2, sc, err := respond(l.keys, j.m.mode, j.m.nonce, sid, j.m.noise)
			if err != nil {
				l.mu.Lock()
				delete(l.byNonce, j.m.nonce)
				l.mu.Unlock()
				l.refuse(j.m.nonce, refuseAuth, j.from)
				continue
			}
			l.open(j.m, j.from, sc, sid, msg2)
		}
	}
}

func newSessionID() uint64 {
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	return binary.BigEndian.Uint64(rb[:]) | 1
}

// open starts the session a checked init2 asked for and answers it with accept
// (carrying msg2, the Noise answer, when encrypted).
func (l *Listener) open(m init2Msg, from net.Addr, sec *sessionCipher, sid uint64, msg2 []byte) {
	accept := make([]byte, 0, acceptSealed)
	accept = append(accept, kindAccept)
	accept = binary.BigEndian.AppendUint64(accept, m.nonce)
	accept = binary.BigEndian.AppendUint64(accept, sid)
	accept = append(accept, msg2...)
	nonce := m.nonce
	c := newConn(l.pc, l.bc, sid, from, l.cfg, sec, func() { l.remove(sid, nonce) })
	l.mu.Lock()
	queued := false
	if !l.closed {
		select {
		case l.accept <- c:
			queued = true
			l.sessions[sid] = c
			l.byNonce[nonce] = &handshake{noise: bytes.Clone(m.noise), accept: accept}
		default: // backlog full: the client retries
		}
	}
	if !queued {
		delete(l.byNonce, nonce)
		c.onDone = nil // l.mu is held
		c.closeWith(errors.New("udp: accept backlog full"), false)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	_, _ = l.pc.WriteTo(accept, from)
}

func (l *Listener) refuse(nonce uint64, reason byte, to net.Addr) {
	b := make([]byte, 0, refuseLen)
	b = append(b, kindRefuse)
	b = binary.BigEndian.AppendUint64(b, nonce)
	_, _ = l.pc.WriteTo(append(b, reason), to)
}

func (l *Listener) remove(sid, nonce uint64) {
	l.mu.Lock()
	c := l.sessions[sid]
	delete(l.sessions, sid)
	delete(l.byNonce, nonce)
	l.mu.Unlock()
	if c != nil {
		st := c.Stats()
		l.mu.Lock()
		l.ended.add(&st)
		l.mu.Unlock()
	}
}

// ListenerStats are a listener's totals over its sessions, live and ended.
type ListenerStats struct {
	Sessions int // live now
	// Coalesced counts reads that brought several datagrams of one sender at
	// once (UDP receive offload).
	Coalesced uint64
	Stats     // counters summed over all sessions; the gauges are unset
	// Gauges over the live sessions.
	MeanRTT, MaxRTT   time.Duration
	MeanCwnd, MinCwnd float64
}

// Stats sums the counters of every session the listener has had.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	conns := make([]*Conn, 0, len(l.sessions))
	for _, c := range l.sessions {
		conns = append(conns, c)
	}
	out := ListenerStats{Sessions: len(conns), Stats: l.ended, Coalesced: l.coalesced.Load()}
	l.mu.Unlock()
	for i, c := range conns {
		st := c.Stats()
		out.add(&st)
		out.MeanRTT += st.RTT / time.Duration(len(conns))
		out.MaxRTT = max(out.MaxRTT, st.RTT)
		out.MeanCwnd += st.Cwnd / float64(len(conns))
		if i == 0 || st.Cwnd < out.MinCwnd {
			out.MinCwnd = st.Cwnd
		}
	}
	return out
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; open sessions are closed too.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	conns := make([]*Conn, 0, len(l.sessions))
	for _, c := range l.sessions {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.closeWith(ErrClosed, true)
	}
	return l.pc.Close()
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.pc.LocalAddr() }

// ---------------------------------------------------------------------------------
// Client side

// Dial opens a session to a Listener at addr. With cfg.ServerKey set the session is
// encrypted and the listener must prove it holds that key; the errors a caller can
// branch on are ErrAuthentication, ErrEncryptionRequired and ErrNotEncrypted.
func Dial(addr string, cfg Config, timeout time.Duration) (*Conn, error) {
	if cfg.ServerKey.IsZero() && !cfg.PSK.IsZero() {
		return nil, errors.New("udp: a pre-shared key needs the server's key too")
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := binary.BigEndian.Uint64(nb[:])
	var ch *clientHandshake
	if !cfg.ServerKey.IsZero() {
		if ch, err = newClientHandshake(cfg, nonce); err != nil {
			return nil, err
		}
	}
	pc, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	setBuffers(pc)
	deadline := time.Now().Add(timeout)
	send := func(kind byte, extra []byte) {
		b := make([]byte, minInit)
		b[0] = kind
		binary.BigEndian.PutUint64(b[1:], nonce)
		copy(b[9:], extra)
		_, _ = pc.WriteTo(b, ua)
	}
	buf := make([]byte, readMax)
	var cookie []byte
	for cookie == nil {
		if time.Now().After(deadline) {
			pc.Close()
			return nil, errors.New("udp: no answer to the handshake")
		}
		send(kindInit, nil)
		_ = pc.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, _, err := pc.ReadFrom(buf)
		if err == nil && n == 33 && buf[0] == kindCookie && binary.BigEndian.Uint64(buf[1:]) == nonce {
			cookie = append([]byte(nil), buf[9:33]...)
		}
	}
	mode, msg1 := byte(modePlain), []byte(nil)
	if ch != nil {
		mode, msg1 = ch.mode, ch.msg1
	}
	init2 := append(append(cookie, mode), msg1...)
	var sid uint64
	var sec *sessionCipher
	forged := false // an accept came that did not prove the server's key
	for sid == 0 {
		if time.Now().After(deadline) {
			pc.Close()
			if forged {
				return nil, fmt.Errorf("udp: handshake with %s: %w", addr, ErrAuthentication)
			}
			return nil, errors.New("udp: handshake not accepted")
		}
		send(kindInit2, init2)
		_ = pc.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			continue
		}
		if rn, reason, ok := parseRefuse(buf[:n]); ok && rn == nonce {
			pc.Close()
			return nil, fmt.Errorf("udp: handshake with %s: %w", addr, refusalError(reason))
		}
		an, id, msg2, ok := parseAccept(buf[:n])
		switch {
		case !ok || an != nonce:
		case ch == nil && len(msg2) == 0:
			sid = id
		case ch == nil:
			// A plaintext client never asked for Noise: not an answer to it.
		case len(msg2) == 0:
			pc.Close()
			return nil, fmt.Errorf("udp: handshake with %s: %w", addr, ErrNotEncrypted)
		default:
			if sec, err = ch.finish(id, msg2); err != nil {
				forged = true // perhaps forged: the genuine accept may still come
				continue
			}
			sid = id
		}
	}
	_ = pc.SetReadDeadline(time.Time{})
	c := newConn(pc, newBatchConn(pc), sid, ua, cfg, sec, func() { pc.Close() })
	go c.clientReadLoop(newReadBatch(pc, clientBatch, cfg.MTU), ua)
	return c, nil
}

// clientBatch is how many datagrams a client session takes per read call.
const clientBatch = 16

func (c *Conn) clientReadLoop(rb *readBatch, server *net.UDPAddr) {
	for {
		n, err := c.bc.ReadBatch(rb.ms, 0)
		if err != nil {
			c.closeWith(err, false)
			return
		}
		now := time.Now()
		for i := range n {
			msg, seg := rb.message(i)
			for len(msg) > 0 {
				b := msg[:min(seg, len(msg))]
				msg = msg[len(b):]
				if len(b) < sessionHdr || binary.BigEndian.Uint64(b[1:9]) != c.id {
					continue
				}
				switch b[0] {
				case kindData, kindPing, kindClose:
					c.datagram(b, rb.ms[i].Addr, now)
				case kindReset:
					if c.sec != nil && (len(b) < sessionHdr+resetTokenLen ||
						!hmac.Equal(b[sessionHdr:sessionHdr+resetTokenLen], c.sec.resetToken[:])) {
						continue // not the server's: an encrypted session's resets carry its token
					}
					if ua, ok := rb.ms[i].Addr.(*net.UDPAddr); ok && ua.IP.Equal(server.IP) && ua.Port == server.Port {
						c.closeWith(ErrReset, false)
						return
					}
				}
			}
		}
		c.inputDone(now)
	}
}
