package udp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flynn/noise"
)

// Encryption is optional and chosen by the keys in Config: a listener with a
// PrivateKey accepts only encrypted sessions, a dialer with the listener's ServerKey
// only an encrypted session with that listener. The handshake is Noise NK
// (Noise_NK_25519_ChaChaPoly_BLAKE2s): the client knows the server's static key in
// advance and the server proves it holds the private half, as with TLS; the client
// stays anonymous. With a pre-shared key on both sides it is NKpsk0: the PSK is mixed
// in before the first message, so a client without it is refused before the server
// keeps any state for it.
//
// The two Noise messages ride in the existing handshake after the cookie exchange,
// so the server does public-key work only for sources that proved their address,
// and never answers with more bytes than it received:
//
//	init2   0x03 | nonce u64 | ts u64 | mac [16] | mode u8 | Noise e, es [48] | padding to minInit
//	accept  0x04 | nonce u64 | session u64 | Noise e, ee [32] | sealed (session u64, reset token [16]) [40]
//	refuse  0x08 | nonce u64 | reason u8
//
// mode is modePlain (what a client without a key pads with), modeNK or modeNKpsk0.
// The accept's Noise payload is the session id, which authenticates it, and the
// token that the server's resets for the session carry (resetToken). The
// prologue binds the handshake to the nonce and the mode, so neither can be changed
// in flight nor a Noise message moved into another handshake.
const (
	modePlain  = 0
	modeNK     = 1
	modeNKpsk0 = 2

	noiseMsg1Len = 32 + 16                     // ephemeral key, tag of the empty payload
	noiseMsg2Len = 32 + 8 + resetTokenLen + 16 // ephemeral key, sealed session id and reset token
	// resetTokenLen is the length of the token an encrypted session's resets carry.
	resetTokenLen = 16

	init2Fixed   = 1 + 8 + 8 + 16 // kind, nonce, ts, mac
	acceptPlain  = 17
	acceptSealed = acceptPlain + noiseMsg2Len
	refuseLen    = 10
)

// Reasons a server gives in a refuse datagram. It sends one only to a source that
// echoed a valid cookie, so it is never an amplifier; the client gives up at once
// with the matching error.
const (
	refuseNeedsEncryption = 1 // the server has a key, the client offered none
	refuseNoEncryption    = 2 // the client offered encryption, the server has no key
	refuseAuth            = 3 // the Noise message did not authenticate: wrong key or PSK
)

// Handshake errors a caller can branch on.
var (
	// ErrEncryptionRequired: the server accepts only encrypted sessions and the
	// client has no server key configured.
	ErrEncryptionRequired = errors.New("udp: the server accepts only encrypted sessions")
	// ErrNotEncrypted: the client wants an encrypted session and the server has no
	// key (or answered without Noise).
	ErrNotEncrypted = errors.New("udp: the server does not encrypt sessions")
	// ErrAuthentication: the Noise handshake failed: the client's server key or the
	// pre-shared key does not match the server's.
	ErrAuthentication = errors.New("udp: handshake authentication failed (wrong server key or pre-shared key)")
)

var noiseSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

func noiseConfig(mode byte, nonce uint64, psk Key, initiator bool) noise.Config {
	prologue := binary.BigEndian.AppendUint64([]byte("tern-udp-1"), nonce)
	prologue = append(prologue, mode)
	cfg := noise.Config{CipherSuite: noiseSuite, Pattern: noise.HandshakeNK, Initiator: initiator, Prologue: prologue}
	if mode == modeNKpsk0 {
		cfg.PresharedKey, cfg.PresharedKeyPlacement = psk[:], 0
	}
	return cfg
}

// securityMode is the mode a config asks for.
func securityMode(key, psk Key) byte {
	switch {
	case key.IsZero():
		return modePlain
	case psk.IsZero():
		return modeNK
	default:
		return modeNKpsk0
	}
}

// clientHandshake is the initiator's side. It keeps its ephemeral key rather than a
// noise.HandshakeState, and replays the handshake from it for every accept it
// tries: a HandshakeState is not reusable after a failed read, and a forged accept
// must not spoil the genuine one that may follow. Replaying also makes every
// retransmitted init2 carry the same bytes, as the server's idempotence needs.
type clientHandshake struct {
	mode      byte
	nonce     uint64
	serverKey Key
	psk       Key
	ephemeral noise.DHKey
	msg1      []byte
}

func newClientHandshake(cfg Config, nonce uint64) (*clientHandshake, error) {
	h := &clientHandshake{mode: securityMode(cfg.ServerKey, cfg.PSK), nonce: nonce, serverKey: cfg.ServerKey, psk: cfg.PSK}
	e, err := noiseSuite.GenerateKeypair(nil)
	if err != nil {
		return nil, fmt.Errorf("udp: handshake key: %w", err)
	}
	h.ephemeral = e
	_, msg1, err := h.start()
	if err != nil {
		return nil, err
	}
	h.msg1 = msg1
	return h, nil
}

// start begins the handshake anew from the kept ephemeral key.
func (h *clientHandshake) start() (*noise.HandshakeState, []byte, error) {
	cfg := noiseConfig(h.mode, h.nonce, h.psk, true)
	cfg.PeerStatic = h.serverKey[:]
	cfg.Random = bytes.NewReader(h.ephemeral.Private)
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: handshake: %w", err)
	}
	msg1, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: handshake: %w", err)
	}
	return hs, msg1, nil
}

// finish reads the server's Noise message from an accept naming session sid and
// returns the session's cipher.
func (h *clientHandshake) finish(sid uint64, msg2 []byte) (*sessionCipher, error) {
	hs, _, err := h.start()
	if err != nil {
		return nil, err
	}
	payload, toServer, toClient, err := hs.ReadMessage(nil, msg2)
	if err != nil || toServer == nil || len(payload) != 8+resetTokenLen || binary.BigEndian.Uint64(payload) != sid {
		return nil, ErrAuthentication
	}
	sc, err := newSessionCipher(toServer.UnsafeKey(), toClient.UnsafeKey())
	if err != nil {
		return nil, err
	}
	copy(sc.resetToken[:], payload[8:])
	return sc, nil
}

// resetToken is what the server's resets for session sid carry when it has the
// static key private.
func resetToken(private Key, sid uint64) [resetTokenLen]byte {
	h := hmac.New(sha256.New, private[:])
	h.Write([]byte("tern-udp-reset"))
	h.Write(binary.BigEndian.AppendUint64(nil, sid))
	var tok [resetTokenLen]byte
	copy(tok[:], h.Sum(nil))
	return tok
}

// serverKeys are a listener's keys; nil for a listener without encryption.
type serverKeys struct {
	private, public, psk Key
	mode                 byte // the one mode the listener accepts
}

func newServerKeys(cfg Config) (*serverKeys, error) {
	switch {
	case cfg.PrivateKey.IsZero() && !cfg.PSK.IsZero():
		return nil, errors.New("udp: a pre-shared key needs a private key too")
	case cfg.PrivateKey.IsZero():
		return nil, nil
	}
	return &serverKeys{private: cfg.PrivateKey, public: cfg.PrivateKey.Public(), psk: cfg.PSK,
		mode: securityMode(cfg.PrivateKey, cfg.PSK)}, nil
}

// refusal is the reason a listener with keys k refuses a client asking for mode,
// 0 if it does not.
func (k *serverKeys) refusal(mode byte) byte {
	switch {
	case k == nil && mode == modePlain:
		return 0
	case k == nil:
		return refuseNoEncryption
	case mode == modePlain:
		return refuseNeedsEncryption
	case mode != k.mode:
		return refuseAuth // a PSK on one side only
	}
	return 0
}

// respond is the server's side: it reads the client's Noise message and returns its
// answer, which seals the session id sid, and the session's cipher.
func respond(k *serverKeys, mode byte, nonce, sid uint64, msg1 []byte) ([]byte, *sessionCipher, error) {
	ncfg := noiseConfig(mode, nonce, k.psk, false)
	ncfg.StaticKeypair = noise.DHKey{Private: k.private[:], Public: k.public[:]}
	hs, err := noise.NewHandshakeState(ncfg)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: handshake: %w", err)
	}
	if _, _, _, err := hs.ReadMessage(nil, msg1); err != nil {
		return nil, nil, ErrAuthentication
	}
	tok := resetToken(k.private, sid)
	msg2, toServer, toClient, err := hs.WriteMessage(nil, append(binary.BigEndian.AppendUint64(nil, sid), tok[:]...))
	if err != nil || toServer == nil {
		return nil, nil, fmt.Errorf("udp: handshake: %w", err)
	}
	sc, err := newSessionCipher(toClient.UnsafeKey(), toServer.UnsafeKey())
	if err != nil {
		return nil, nil, err
	}
	sc.resetToken = tok
	return msg2, sc, nil
}

// init2Msg is a parsed init2 datagram; noise aliases the datagram.
type init2Msg struct {
	nonce, ts uint64
	mac       []byte
	mode      byte
	noise     []byte
}

func parseInit2(b []byte) (init2Msg, bool) {
	if len(b) < minInit || b[0] != kindInit2 {
		return init2Msg{}, false
	}
	m := init2Msg{nonce: binary.BigEndian.Uint64(b[1:]), ts: binary.BigEndian.Uint64(b[9:]), mac: b[17:33], mode: b[init2Fixed]}
	switch m.mode {
	case modePlain:
	case modeNK, modeNKpsk0:
		m.noise = b[init2Fixed+1 : init2Fixed+1+noiseMsg1Len]
	default:
		return init2Msg{}, false
	}
	return m, true
}

// parseAccept reads an accept datagram; msg2 is empty for a plain session.
func parseAccept(b []byte) (nonce, sid uint64, msg2 []byte, ok bool) {
	if (len(b) != acceptPlain && len(b) != acceptSealed) || b[0] != kindAccept {
		return 0, 0, nil, false
	}
	return binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:]), b[acceptPlain:], true
}

// parseRefuse reads a refuse datagram.
func parseRefuse(b []byte) (nonce uint64, reason byte, ok bool) {
	if len(b) != refuseLen || b[0] != kindRefuse {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[1:]), b[9], true
}

// refusalError is what a client makes of a refuse datagram's reason.
func refusalError(reason byte) error {
	switch reason {
	case refuseNeedsEncryption:
		return ErrEncryptionRequired
	case refuseNoEncryption:
		return ErrNotEncrypted
	case refuseAuth:
		return ErrAuthentication
	}
	return fmt.Errorf("udp: the server refused the handshake (reason %d)", reason)
}
