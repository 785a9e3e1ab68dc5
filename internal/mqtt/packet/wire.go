package packet

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// The data types of section 1.5: bytes, big-endian integers, Variable Byte Integers,
// length-prefixed binary data and UTF-8 strings.

// decoder reads the body of one packet. Every read checks the bounds, so a length
// that points past the end is a Malformed Packet and never a panic.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) byte1(what string) (byte, error) {
	if d.left() < 1 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := d.b[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16(what string) (uint16, error) {
	if d.left() < 2 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	if d.left() < 4 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

// varint reads a Variable Byte Integer of at most four bytes. A longer one is
// malformed; a needlessly long one (0x80 0x00 for 0) is accepted, as the rule on
// minimal encoding binds the sender.
func (d *decoder) varint(what string) (uint32, error) {
	var v uint32
	for i := 0; i < 4; i++ {
		if d.left() < 1 {
			return 0, malformed("%s: packet ends early", what)
		}
		c := d.b[d.off]
		d.off++
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, malformed("%s: variable byte integer longer than 4 bytes", what)
}

// binary reads Binary Data: a two-byte length and that many bytes. The result
// aliases the packet and its capacity is clipped, so appending to it cannot
// overwrite what follows.
func (d *decoder) binary(what string) ([]byte, error) {
	n, err := d.u16(what)
	if err != nil {
		return nil, err
	}
	if d.left() < int(n) {
		return nil, malformed("%s: length %d past the end of the packet", what, n)
	}
	end := d.off + int(n)
	v := d.b[d.off:end:end]
	d.off = end
	return v, nil
}

// str reads a UTF-8 Encoded String and copies it.
func (d *decoder) str(what string) (string, error) {
	b, err := d.binary(what)
	if err != nil {
		return "", err
	}
	if err := checkUTF8(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// checkUTF8 enforces section 1.5.4: well-formed UTF-8 (which excludes surrogates and
// code points above U+10FFFF) and no U+0000. ASCII, the common case, takes one pass.
func checkUTF8(b []byte, what string) error {
	for i, c := range b {
		if c == 0 {
			return malformed("%s: contains U+0000", what)
		}
		if c >= utf8.RuneSelf {
			rest := b[i:]
			if !utf8.Valid(rest) {
				return malformed("%s: not valid UTF-8", what)
			}
			if bytes.IndexByte(rest, 0) >= 0 {
				return malformed("%s: contains U+0000", what)
			}
			return nil
		}
	}
	return nil
}

// checkTopicName checks a topic name received in PUBLISH or a will: a UTF-8 string
// (else malformed) without wildcards (else TopicNameInvalid). Emptiness is the
// caller's concern, since MQTT 5 allows it with a topic alias.
func checkTopicName(b []byte, what string) error {
	if err := checkUTF8(b, what); err != nil {
		return err
	}
	if bytes.IndexByte(b, '+') >= 0 || bytes.IndexByte(b, '#') >= 0 {
		return &Error{Reason: TopicNameInvalid, Msg: what + ": wildcard in " + quote(b)}
	}
	return nil
}

// quote shows a possibly long, possibly binary value in an error message.
func quote(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// Encoding primitives. They append, so a caller with a large enough buffer pays no
// allocation.

func varintLen(v uint32) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	}
	return 4
}

func appendVarint(dst []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendStr appends a UTF-8 string or binary data with its two-byte length; the
// caller has checked the length fits.
func appendStr[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

func strLen[S ~string | ~[]byte](s S) int { return 2 + len(s) }
