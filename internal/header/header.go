// Package header owns the canonical encoding of message headers, shared by every front
// end and the broker core: a block of (key, value) string pairs, each string a uvarint
// length followed by its bytes. The native protocol carries blocks as they are; other
// protocols (MQTT user properties, later) convert to and from them at their edge.
package header

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Block is an encoded header block: a sequence of (key, value) string pairs, each
// string a uvarint length and bytes. A key may repeat; order is kept. Keys are
// case-sensitive and non-empty.
type Block []byte

// Well-known header keys.
const (
	// Status carries a status code on messages the server generates, such as
	// "503" for a request that found no responder.
	Status = "Tern-Status"
	// Description explains Status.
	Description = "Tern-Description"
	// StatusNoResponders is the Status value of a no-responders answer.
	StatusNoResponders = "503"
)

// ErrMalformed reports a header block that does not parse.
var ErrMalformed = errors.New("malformed header block")

// Append appends one key/value pair to an encoded header block.
func Append[S ~string | ~[]byte](dst []byte, key, value S) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// Validate checks that h is a well-formed sequence of pairs with non-empty keys.
func (h Block) Validate() error {
	b := []byte(h)
	for len(b) > 0 {
		k, rest, err := nextStr(b)
		if err != nil {
			return err
		}
		if len(k) == 0 {
			return fmt.Errorf("%w: empty key", ErrMalformed)
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
	// Most strings of a header are shorter than 128 bytes: a one-byte length,
	// without the general varint decoding.
	if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
		return b[1 : 1+b[0]], b[1+b[0]:], nil
	}
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length", ErrMalformed)
	}
	b = b[k:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: string runs past the block", ErrMalformed)
	}
	return b[:n], b[n:], nil
}

// Each calls fn for every pair in order until fn returns false. It stops silently at
// the first malformed pair; blocks that reached a subscriber were validated by the
// server.
func (h Block) Each(fn func(key, value []byte) bool) {
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
func (h Block) Lookup(key string) (string, bool) {
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
			return aliasString(v), true
		}
		b = rest
	}
	return "", false
}

// LookupPair is Lookup of two keys in one pass over the block: the first value
// of each and whether it is there.
func (h Block) LookupPair(key1, key2 string) (v1 string, ok1 bool, v2 string, ok2 bool) {
	b := []byte(h)
	for len(b) > 0 && !(ok1 && ok2) {
		k, rest, err := nextStr(b)
		if err != nil {
			break
		}
		v, rest, err := nextStr(rest)
		if err != nil {
			break
		}
		switch {
		case !ok1 && string(k) == key1:
			v1, ok1 = aliasString(v), true
		case !ok2 && string(k) == key2:
			v2, ok2 = aliasString(v), true
		}
		b = rest
	}
	return v1, ok1, v2, ok2
}

func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Get returns a copy of the first value of key, or "".
func (h Block) Get(key string) string {
	v, _ := h.Lookup(key)
	return string([]byte(v))
}
