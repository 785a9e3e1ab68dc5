package udp

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Key is a 32-byte X25519 private or public key, or a pre-shared secret. Keys are
// written as standard base64 (44 characters, as WireGuard writes them) and read as
// base64 or hex, so they can be pasted into configuration files and URLs alike. The
// zero Key means "not set": no X25519 private key or useful secret is all zeros.
type Key [32]byte

// ErrBadKey is returned for text that is not a 32-byte key.
var ErrBadKey = errors.New("udp: not a 32-byte key in base64 or hex")

// GenerateKey draws a new private key (or pre-shared secret) from the system's
// random source.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, fmt.Errorf("udp: generate key: %w", err)
	}
	return k, nil
}

// Public is the X25519 public key of the private key k, the one clients configure.
func (k Key) Public() Key {
	priv, err := ecdh.X25519().NewPrivateKey(k[:])
	if err != nil {
		panic(err) // only for a length other than 32, which the type rules out
	}
	var p Key
	copy(p[:], priv.PublicKey().Bytes())
	return p
}

// IsZero reports whether k is unset.
func (k Key) IsZero() bool { return k == Key{} }

// String is the key in standard base64.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// ParseKey reads a key written as base64 (standard or URL alphabet, padded or not)
// or as 64 hex digits; surrounding white space is ignored.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	var k Key
	if len(s) == 2*len(k) {
		if _, err := hex.Decode(k[:], []byte(s)); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == len(k) {
			copy(k[:], b)
			return k, nil
		}
	}
	return Key{}, ErrBadKey
}

// ReadKeyFile reads a key file written by `tern udp-keygen`: one key, base64 or hex.
func ReadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("udp: read key file: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return Key{}, fmt.Errorf("udp: key file %s: %w", path, err)
	}
	return k, nil
}
