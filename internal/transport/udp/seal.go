package udp

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// An encrypted session seals everything after the 9-byte session header of its data,
// ping and close datagrams:
//
//	kind u8 | session u64 | counter u64 | ChaCha20-Poly1305(payload) | tag [16]
//
// The header is the additional data, so neither the kind nor the session id can be
// changed or a sealed ping replayed as a close. Each direction has its own key (the
// Noise handshake's split) and its own counter, which is also the AEAD nonce: it is
// carried in the clear because UDP loses and reorders datagrams, so the receiver
// cannot count along, and a replay window refuses a counter seen before.
//
// The nonce is laid out as Noise's ChaChaPoly cipher lays it out (4 zero bytes, the
// counter little-endian), but sealing goes straight to the AEAD with a nonce buffer
// the session keeps: the noise package's Cipher builds a fresh nonce slice on every
// call, an allocation per datagram.
const sealOverhead = 8 + chacha20poly1305.Overhead

// errSealExhausted ends a session whose send counter ran out (2^64 − 1 datagrams).
var errSealExhausted = errors.New("udp: session counter exhausted")

type sessionCipher struct {
	send, recv cipher.AEAD
	next       uint64 // counter of the next datagram sealed
	sendNonce  [chacha20poly1305.NonceSize]byte
	recvNonce  [chacha20poly1305.NonceSize]byte
	window     replayWindow
	sealed     [][]byte // the current batch's sealed datagrams; buffers reused

	forged, replayed uint64
	// resetToken is what a reset for this session must carry: the server derives
	// it from its static key and the session id, so that it can still make it
	// after a restart that lost the session, and no one without the key can.
	resetToken [resetTokenLen]byte
}

func newSessionCipher(sendKey, recvKey [32]byte) (*sessionCipher, error) {
	send, err := chacha20poly1305.New(sendKey[:])
	if err != nil {
		return nil, fmt.Errorf("udp: session cipher: %w", err)
	}
	recv, err := chacha20poly1305.New(recvKey[:])
	if err != nil {
		return nil, fmt.Errorf("udp: session cipher: %w", err)
	}
	return &sessionCipher{send: send, recv: recv}, nil
}

// seal appends counter | sealed payload to dst, hdr being the datagram's session
// header.
func (s *sessionCipher) seal(dst, hdr, payload []byte) ([]byte, error) {
	if s.next == maxCounter {
		return dst, errSealExhausted
	}
	n := s.next
	s.next++
	binary.LittleEndian.PutUint64(s.sendNonce[4:], n)
	dst = binary.BigEndian.AppendUint64(dst, n)
	return s.send.Seal(dst, s.sendNonce[:], payload, hdr), nil
}

// sealBatch seals each datagram behind hdr into buffers the session keeps, and
// returns them for one write call.
func (s *sessionCipher) sealBatch(hdr []byte, datagrams [][]byte) ([][]byte, error) {
	for len(s.sealed) < len(datagrams) {
		s.sealed = append(s.sealed, nil)
	}
	for i, d := range datagrams {
		b, err := s.seal(s.sealed[i][:0], hdr, d)
		if err != nil {
			return nil, err
		}
		s.sealed[i] = b
	}
	return s.sealed[:len(datagrams)], nil
}

// open authenticates and decrypts, in place, the body after the session header hdr
// of a received datagram. A forgery or a replay is counted and refused; only a
// datagram that passes both moves the replay window.
func (s *sessionCipher) open(hdr, body []byte) ([]byte, bool) {
	if len(body) < sealOverhead {
		s.forged++
		return nil, false
	}
	n := binary.BigEndian.Uint64(body)
	if !s.window.fresh(n) {
		s.replayed++
		return nil, false
	}
	binary.LittleEndian.PutUint64(s.recvNonce[4:], n)
	ct := body[8:]
	plain, err := s.recv.Open(ct[:0], s.recvNonce[:], ct, hdr)
	if err != nil {
		s.forged++
		return nil, false
	}
	s.window.mark(n)
	return plain, true
}
