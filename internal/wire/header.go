package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Header is an encoded header block: a sequence of (key, value) string pairs, each
// string a uvarint length and bytes. A key may repeat; order is kept. Keys are
// case-sensitive and non-empty.
type Header []byte

// Well-known header keys.
const (
	// HeaderStatus carries a status code on messages the server generates, such as
	// "503" for a request that found no responder.
	HeaderStatus = "Tern-Status"
	// HeaderDescription explains HeaderStatus.
	HeaderDescription = "Tern-Description"
	// StatusNoResponders is the HeaderStatus value of a no-responders answer.
	StatusNoResponders = "503"
)

// ErrBadHeader reports a header block that does not parse.
var ErrBadHeader = errors.New("wire: malformed header block")

// AppendHeader appends one key/value pair to an encoded header block.
func AppendHeader[S text](dst []byte, key, value S) []byte {
	dst = appendStr(dst, key)
	return appendStr(dst, value)
}

// Validate checks that h is a well-formed sequence of pairs with non-empty keys.
func (h Header) Validate() error {
	b := []byte(h)
	for len(b) > 0 {
		k, rest, err := nextStr(b)
		if err != nil {
			return err
		}
		if len(k) == 0 {
			return fmt.Errorf("%w: empty key", ErrBadHeader)
		}
		_, rest, err = nextStr(rest)
		if err != nil {
			return err
		}
		b = rest
	}
	return nil
}

func nextStr(b []byte) (s, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length", ErrBadHeader)
	}
	b = b[k:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: string runs past the block", ErrBadHeader)
	}
	return b[:n], b[n:], nil
}

// Each calls fn for every pair in order until fn returns false. It stops silently at
// the first malformed pair; blocks that reached a subscriber were validated by the
// server.
func (h Header) Each(fn func(key, value []byte) bool) {
	b := []byte(h)
	for len(b) > 0 {
		k, rest, err := nextStr(b)
		if err != nil {
			return
		}
		v, rest, err := nextStr(rest)
		if err != nil {
			return
		}
		if !fn(k, v) {
			return
		}
		b = rest
	}
}

// Lookup returns the first value of key. The string shares memory with h: it is valid
// only while h's buffer is, and must be copied to be kept.
func (h Header) Lookup(key string) (string, bool) {
	b := []byte(h)
	for len(b) > 0 {
		k, rest, err := nextStr(b)
		if err != nil {
			return "", false
		}
		v, rest, err := nextStr(rest)
		if err != nil {
			return "", false
		}
		if string(k) == key {
			if len(v) == 0 {
				return "", true
			}
			return unsafe.String(&v[0], len(v)), true
		}
		b = rest
	}
	return "", false
}

// Get returns a copy of the first value of key, or "".
func (h Header) Get(key string) string {
	v, _ := h.Lookup(key)
	return string([]byte(v))
}
