// Package secret reads the secret the nodes of a cluster share (the server's
// cluster_secret_file) and derives from it the keys that secure the cluster: one
// that encrypts and authenticates gossip (memberlist's AES-GCM keyring) and one
// that routes prove knowledge of the secret with (internal/cluster/route). The keys
// are derived with HKDF-SHA256 (RFC 5869) under distinct labels, so neither reveals
// the other or the secret, and the secret itself is never sent anywhere.
//
// A secret is written as base64 of at least MinLen bytes; `tern cluster keygen`
// prints a fresh one of GenerateLen random bytes.
package secret

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"strings"
)

const (
	// MinLen is the fewest bytes a secret may decode to: 128 bits.
	MinLen = 16
	// MaxLen bounds what is read, so that a wrong path (a log file, a device)
	// gives a clear error rather than a huge allocation.
	MaxLen = 4096
	// GenerateLen is the length of the secrets Generate draws: 256 bits.
	GenerateLen = 32
	// KeyLen is the length of each derived key: AES-256 for gossip, and the
	// HMAC-SHA256 key of routes.
	KeyLen = 32
)

// HKDF labels (the "info" of RFC 5869). They bind each key to its use; a new use
// takes a new label, never one of these.
const (
	gossipLabel = "tern cluster gossip key v1"
	routeLabel  = "tern cluster route auth key v1"
)

// ErrInvalid wraps every error about a secret's text.
var ErrInvalid = errors.New("not a cluster secret")

// Generate draws a new secret of GenerateLen random bytes and returns it as
// standard base64, the form a secret file holds.
func Generate() (string, error) {
	b := make([]byte, GenerateLen)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster secret: random source: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Parse reads a secret written as padded base64, standard or URL alphabet, as
// tern cluster keygen, `openssl rand -base64 32` or base64(1) print it; white
// space around it (a trailing newline) and line breaks inside are ignored. It must
// decode to at least MinLen bytes. Decoding is strict (padding, no stray bits, no
// spaces inside): text that only happens to use base64's letters, a passphrase, is
// refused rather than taken for a key of that many random bytes.
func Parse(text string) ([]byte, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return nil, fmt.Errorf("%w: empty (want base64, as tern cluster keygen prints)", ErrInvalid)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding.Strict(), base64.URLEncoding.Strict()} {
		b, err := enc.DecodeString(s)
		if err != nil {
			continue
		}
		if len(b) < MinLen {
			return nil, fmt.Errorf("%w: %d bytes once decoded, want at least %d (tern cluster keygen makes %d)", ErrInvalid, len(b), MinLen, GenerateLen)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: not padded base64 (want the output of tern cluster keygen)", ErrInvalid)
}

// ReadFile reads the secret in the file at path. Errors name the file and never
// quote its content. A file that other users may read or write is accepted with a
// warning logged to log (which may be nil): a Kubernetes secret volume, for one,
// mounts files readable by all unless told otherwise.
func ReadFile(path string, log *slog.Logger) ([]byte, error) {
	// Looked at before it is opened: opening a named pipe would wait for a writer.
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file: %w", err) // *PathError names the file
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster secret file %s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxLen+1))
	if err != nil {
		return nil, fmt.Errorf("cluster secret file %s: %w", path, err)
	}
	if len(b) > MaxLen {
		return nil, fmt.Errorf("cluster secret file %s: more than a secret (at most %d bytes)", path, MaxLen)
	}
	s, err := Parse(string(b))
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file %s: %w", path, err)
	}
	if log != nil && OthersMayAccess(st.Mode()) {
		log.Warn("cluster secret file is readable or writable by other users; restrict it to the server's user (chmod 600)",
			"file", path, "mode", st.Mode().Perm().String())
	}
	return s, nil
}

// OthersMayAccess reports whether a file of mode m is readable or writable by users
// other than its owner and group. On Windows the mode bits say nothing of access,
// so it reports false there.
func OthersMayAccess(m fs.FileMode) bool {
	return runtime.GOOS != "windows" && m.Perm()&0o006 != 0
}

// GossipKey derives the 32-byte AES key that encrypts and authenticates gossip
// (memberlist's SecretKey) from secret.
func GossipKey(secret []byte) []byte { return derive(secret, gossipLabel) }

// RouteKey derives the 32-byte HMAC-SHA256 key with which the two ends of a route
// prove knowledge of secret to each other.
func RouteKey(secret []byte) []byte { return derive(secret, routeLabel) }

func derive(secret []byte, label string) []byte {
	if len(secret) < MinLen {
		panic("secret: deriving a key from a secret shorter than MinLen")
	}
	// No salt: every node must derive the same keys from the secret alone, and the
	// secret is uniformly random already (RFC 5869, section 3.1).
	k, err := hkdf.Key(sha256.New, secret, nil, label, KeyLen)
	if err != nil {
		panic(fmt.Sprintf("secret: hkdf: %v", err)) // only for a length over 255 × 32
	}
	return k
}
