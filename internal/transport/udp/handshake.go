package udp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net"
	"time"
)

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

func (l *Listener) mac(addr net.Addr, nonce, ts uint64) []byte {
	h := hmac.New(sha256.New, l.secret)
	h.Write([]byte(addr.String()))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], nonce)
	binary.BigEndian.PutUint64(b[8:], ts)
	h.Write(b[:])
	return h.Sum(nil)[:16]
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
