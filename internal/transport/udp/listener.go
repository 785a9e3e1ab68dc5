package udp

import (
	"crypto/rand"
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
