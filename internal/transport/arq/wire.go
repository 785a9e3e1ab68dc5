package arq

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Datagram layout (integers are unsigned LEB128 varints):
//
//	flags u8 | [seq]            (flagData)
//	         | [cum, window, held, echo, echoDelay, n, n × (gap, len)]
//	           (flagAck: all below cum received; held: how many above cum are
//	           received; echo: the data packet that arrived last and echoDelay the
//	           microseconds since, for RTT samples free of recovery and ack delay;
//	           NAK ranges: missing [start, start+len), start = previous end + gap,
//	           the first relative to cum)
//	         | frames...        (flagData: fflags u8 (first, last, or pad alone) |
//	                             len | bytes)
//
// flagProbe asks the peer to acknowledge at once.
const (
	flagData  = 0x01
	flagAck   = 0x02
	flagProbe = 0x04
	version   = 0x10 // high nibble: format version 1

	frameFirst = 0x01
	frameLast  = 0x02
	// framePad marks padding that brings a full datagram to exactly the MTU, so
	// that a run of them can leave as one segmentation-offload send; its bytes
	// are ignored.
	framePad = 0x04

	maxRanges = 64 // NAK ranges per datagram
	// maxRangeLen bounds an encoded NAK range: gap and length are below the
	// receive window, at most maxWindow, three varint bytes each.
	maxRangeLen = 6
	maxWindow   = 1 << 21
	// piggyRanges NAK ranges always fit beside a full datagram's frames.
	piggyRanges = 8
	// minMTU leaves room for frames beside the largest header.
	minMTU = 256
)

// ErrMalformed reports a datagram that does not parse.
var ErrMalformed = errors.New("udp: malformed datagram")

// nakRange is a run of missing packet sequences.
type nakRange struct{ start, n uint64 }

// header is a decoded datagram.
type header struct {
	flags   byte
	seq     uint64
	cum     uint64
	window  uint64
	held    uint64
	echo    uint64
	echoUs  uint64
	naks    []nakRange
	payload []byte // the frames, aliasing the datagram
}

func appendAck(b []byte, cum, window, held, echo, echoUs uint64, naks []nakRange) []byte {
	b = binary.AppendUvarint(b, cum)
	b = binary.AppendUvarint(b, window)
	b = binary.AppendUvarint(b, held)
	b = binary.AppendUvarint(b, echo)
	b = binary.AppendUvarint(b, echoUs)
	b = binary.AppendUvarint(b, uint64(len(naks)))
	prev := cum
	for _, r := range naks {
		b = binary.AppendUvarint(b, r.start-prev)
		b = binary.AppendUvarint(b, r.n)
		prev = r.start + r.n
	}
	return b
}

func uvarint(b []byte, off *int) (uint64, error) {
	v, n := binary.Uvarint(b[*off:])
	if n <= 0 {
		return 0, ErrMalformed
	}
	*off += n
	return v, nil
}

// decodeHeader parses a datagram; naks reuses the given slice.
func decodeHeader(b []byte, naks []nakRange) (header, error) {
	var h header
	if len(b) < 1 || b[0]&0xf0 != version || b[0]&0x08 != 0 {
		return h, fmt.Errorf("%w: bad flags", ErrMalformed)
	}
	h.flags = b[0]
	off := 1
	var err error
	if h.flags&flagData != 0 {
		if h.seq, err = uvarint(b, &off); err != nil || h.seq == 0 {
			return h, fmt.Errorf("%w: sequence", ErrMalformed)
		}
	}
	if h.flags&flagAck != 0 {
		if h.cum, err = uvarint(b, &off); err != nil {
			return h, err
		}
		if h.window, err = uvarint(b, &off); err != nil {
			return h, err
		}
		if h.held, err = uvarint(b, &off); err != nil {
			return h, err
		}
		if h.echo, err = uvarint(b, &off); err != nil {
			return h, err
		}
		if h.echoUs, err = uvarint(b, &off); err != nil {
			return h, err
		}
		n, err := uvarint(b, &off)
		if err != nil || n > maxRanges {
			return h, fmt.Errorf("%w: NAK count", ErrMalformed)
		}
		prev := h.cum
		naks = naks[:0]
		for range n {
			gap, err1 := uvarint(b, &off)
			ln, err2 := uvarint(b, &off)
			if err1 != nil || err2 != nil || ln == 0 || gap > 1<<40 || ln > 1<<32 {
				return h, fmt.Errorf("%w: NAK range", ErrMalformed)
			}
			start := prev + gap
			if start < prev {
				return h, fmt.Errorf("%w: NAK range overflows", ErrMalformed)
			}
			naks = append(naks, nakRange{start, ln})
			prev = start + ln
		}
		h.naks = naks
	}
	h.payload = b[off:]
	if h.flags&flagData == 0 && len(h.payload) != 0 {
		return h, fmt.Errorf("%w: frames without data flag", ErrMalformed)
	}
	if h.flags&flagData != 0 {
		// Validate the frames now so that what reaches the reassembly is sound.
		for p := h.payload; len(p) > 0; {
			if p[0]&^(frameFirst|frameLast) != 0 && p[0] != framePad {
				return h, fmt.Errorf("%w: frame flags", ErrMalformed)
			}
			n, k := binary.Uvarint(p[1:])
			if k <= 0 || n > uint64(len(p)-1-k) {
				return h, fmt.Errorf("%w: frame length", ErrMalformed)
			}
			p = p[1+k+int(n):]
		}
	}
	return h, nil
}

// uvarintLen is the encoded size of v.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// appendPad appends a pad frame of exactly n bytes (n >= 2).
func appendPad(b []byte, n int) []byte {
	data := n - 2
	if data >= 0x80 {
		data = n - 3
	}
	b = append(b, framePad)
	b = binary.AppendUvarint(b, uint64(data))
	return append(b, make([]byte, data)...)
}
