package packet

import (
	"fmt"
	"io"
)

// A Reader starts with a small buffer, so that idle connections stay small, and
// doubles it (up to readChunk) whenever a read fills it: a busy connection soon
// reads many packets per syscall.
const (
	readChunk  = 64 << 10
	initialBuf = 512
)

// Reader reads packets from a byte stream, reusing its buffer. Byte slices in a packet
// it returns (payloads, correlation data, passwords) alias that buffer and are valid
// only until the next ReadPacket; the *Publish it returns is the same value every time.
type Reader struct {
	r       io.Reader
	buf     []byte
	start   int // first unread byte
	end     int // end of the bytes read
	version byte
	maxSize int
	pub     Publish
}

// NewReader reads packets from r; a packet larger than maxSize bytes (fixed header
// included) is refused with reason PacketTooLarge before its body is read.
func NewReader(r io.Reader, maxSize int) *Reader {
	return &Reader{r: r, buf: make([]byte, initialBuf), maxSize: maxSize}
}

// SetVersion sets the protocol level once CONNECT has been read (0: expect CONNECT).
func (r *Reader) SetVersion(v byte) { r.version = v }

// SetMaxSize changes the packet size limit.
func (r *Reader) SetMaxSize(n int) { r.maxSize = n }

// Buffered reports how many bytes are read but not yet decoded; a caller that batches
// work per read can flush when it reaches 0.
func (r *Reader) Buffered() int { return r.end - r.start }

// fill reads more bytes, making room for need bytes from start.
func (r *Reader) fill(need int) error {
	if r.start > 0 && (r.start == r.end || len(r.buf)-r.start < need) {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if need > len(r.buf)-r.start {
		nb := make([]byte, max(need, 2*len(r.buf)))
		r.end = copy(nb, r.buf[r.start:r.end])
		r.start = 0
		r.buf = nb
	}
	space := r.buf[r.end:min(len(r.buf), max(r.end+readChunk, r.start+need))]
	n, err := r.r.Read(space)
	r.end += n
	if n > 0 {
		if n == len(space) && len(r.buf) < readChunk {
			nb := make([]byte, 2*len(r.buf))
			r.end = copy(nb, r.buf[r.start:r.end])
			r.start = 0
			r.buf = nb
		}
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// ReadPacket returns the next packet: io.EOF at a clean end between packets,
// io.ErrUnexpectedEOF inside one, *Error for a packet that breaks the protocol.
func (r *Reader) ReadPacket() (Packet, error) {
	for {
		t, flags, remaining, hdr, ok, err := decodeHeader(r.buf[r.start:r.end])
		if err != nil {
			return nil, err
		}
		if ok {
			total := hdr + remaining
			if r.maxSize > 0 && total > r.maxSize {
				return nil, &Error{Reason: PacketTooLarge, Msg: fmt.Sprintf("%s of %d bytes over the %d byte limit", t, total, r.maxSize)}
			}
			if r.end-r.start >= total {
				body := r.buf[r.start+hdr : r.start+total]
				r.start += total
				if r.start == r.end {
					r.start, r.end = 0, 0
				}
				return decodeBody(t, flags, body, r.version, &r.pub)
			}
			if err := r.more(total); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.more(5); err != nil {
			return nil, err
		}
	}
}

func (r *Reader) more(need int) error {
	had := r.end - r.start
	err := r.fill(need)
	if err == io.EOF && had > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}
