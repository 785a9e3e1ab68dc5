package udp

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

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
	bc := newBatchConn(pc)
	c := newConn(pc, bc, sid, ua, cfg, sec, func() { pc.Close() })
	go c.clientReadLoop(bc, newReadBatch(pc, clientBatch, cfg.MTU), ua)
	return c, nil
}

// clientBatch is how many datagrams a client session takes per read call.
const clientBatch = 16

// clientReadLoop reads from bc, the socket the session started on and the one rb
// was made for, rather than c.bc, which only senders may read and only under c.mu.
func (c *Conn) clientReadLoop(bc batchConn, rb *readBatch, server *net.UDPAddr) {
	for {
		n, err := bc.ReadBatch(rb.ms, 0)
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
