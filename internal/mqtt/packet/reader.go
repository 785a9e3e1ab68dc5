package packet

import (
	"fmt"
	"io"
	"sync"
)

// A Reader starts with a small buffer, so that idle connections stay small, and
// doubles it (up to readChunk) whenever a read fills it: a busy connection soon reads
// many packets per call. A packet larger than the buffer grows it as its bytes
// arrive; once consumed, a buffer over readChunk shrinks back to that.
const (
	initialBuf = 512
	readChunk  = 64 << 10
	// maxEmptyReads bounds the reads returning neither data nor an error that a
	// Reader tolerates in a row, like bufio.
	maxEmptyReads = 100
)

// Reader reads packets from a byte stream, reusing its buffer.
//
// What ReadPacket returns is valid only until the next call: byte slices in it
// (payloads, correlation and authentication data, passwords) alias the buffer, and
// every PUBLISH is returned in the same *Publish. Strings are copies. A caller that
// keeps a packet past the next ReadPacket copies what it keeps.
type Reader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	version    byte
	maxSize    int
	pub        *Publish // reused for every PUBLISH; allocated on the first
}

// NewReader reads packets from r. A packet larger than maxSize bytes (fixed header
// included) is refused with reason PacketTooLarge before its body is read; maxSize
// <= 0 means no limit but the protocol's own.
func NewReader(r io.Reader, maxSize int) *Reader {
	return &Reader{r: r, maxSize: maxSize} // the buffer comes with the first read
}

// SetVersion sets the protocol level once CONNECT has been read. At 0, the initial
// value, only CONNECT is accepted, and any number of them: the caller moves on to
// the CONNECT's level.
func (r *Reader) SetVersion(v byte) { r.version = v }

// SetMaxSize changes the packet size limit from the next packet on.
func (r *Reader) SetMaxSize(n int) { r.maxSize = n }

// Release lets the buffer go while nothing is buffered, so that an idle connection
// holds none; the next read allocates a small one. Packets returned before are no
// longer valid.
func (r *Reader) Release() {
	if r.start == r.end {
		if cap(r.buf) == initialBuf {
			smallBufs.Put((*[initialBuf]byte)(r.buf[:initialBuf]))
		}
		r.buf, r.start, r.end = nil, 0, 0
	}
}

// smallBufs recycles the initial buffers of released readers: a server whose
// clients connect and go quiet would otherwise make one for every connection.
var smallBufs = sync.Pool{New: func() any { return new([initialBuf]byte) }}

// Buffered reports how many bytes are read but not yet decoded.
func (r *Reader) Buffered() int { return r.end - r.start }

// Ready reports whether a whole packet is buffered, so that the next ReadPacket
// returns without reading from the stream. A caller that batches work per read
// flushes when it is false: the next call may block.
func (r *Reader) Ready() bool {
	_, _, remaining, hdr, ok, err := decodeHeader(r.buf[r.start:r.end])
	return err != nil || ok && r.end-r.start >= hdr+remaining
}

// ReadPacket returns the next packet: io.EOF at a clean end between packets,
// io.ErrUnexpectedEOF inside one, *Error for a packet that breaks the protocol (the
// connection cannot continue: the stream has lost its framing or the peer its
// standing), or the underlying reader's error. After a read error such as a
// timeout, calling again resumes where the stream stopped.
func (r *Reader) ReadPacket() (Packet, error) {
	if err := checkVersion(r.version); err != nil {
		return nil, err
	}
	if len(r.buf) > readChunk && r.end-r.start <= readChunk/2 {
		// The packets aliasing the big buffer are no longer valid: let it go.
		r.resize(readChunk)
	}
	for {
		t, flags, remaining, hdr, ok, err := decodeHeader(r.buf[r.start:r.end])
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := r.more(maxHeader); err != nil {
				return nil, err
			}
			continue
		}
		if err := checkHeader(t, flags, r.version); err != nil {
			return nil, err
		}
		total := hdr + remaining
		if r.maxSize > 0 && total > r.maxSize {
			return nil, &Error{Reason: PacketTooLarge, Msg: fmt.Sprintf("%s of %d bytes over the %d byte limit", t, total, r.maxSize)}
		}
		if r.end-r.start < total {
			if err := r.more(total); err != nil {
				return nil, err
			}
			continue
		}
		body := r.buf[r.start+hdr : r.start+total]
		r.start += total
		if r.start == r.end {
			r.start, r.end = 0, 0
		}
		if r.pub == nil && t == TypePublish {
			r.pub = new(Publish)
		}
		return decodeBody(t, flags, body, r.version, r.pub)
	}
}

// more reads at least one more byte toward having need bytes buffered from start.
func (r *Reader) more(need int) error {
	had := r.end - r.start
	err := r.fill(need)
	if err == io.EOF && had > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) fill(need int) error {
	if len(r.buf) == 0 {
		r.buf = smallBufs.Get().(*[initialBuf]byte)[:] // first read, or after Release
	}
	if r.start > 0 && len(r.buf)-r.start < need {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) {
		// Full and still short of need: grow toward need, at most doubling, so memory
		// follows the bytes that arrived rather than what a header claims.
		r.resize(min(need, 2*len(r.buf)))
	}
	for range maxEmptyReads {
		n, err := r.r.Read(r.buf[r.end:])
		r.end += n
		if n > 0 {
			if r.end == len(r.buf) && len(r.buf) < readChunk {
				// A read that fills the buffer suggests more is waiting.
				r.resize(2 * len(r.buf))
			}
			// An error that came with data shows up again on the next read.
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// resize moves the unread bytes to the start of a new buffer of n bytes.
func (r *Reader) resize(n int) {
	nb := make([]byte, n)
	r.end = copy(nb, r.buf[r.start:r.end])
	r.start, r.buf = 0, nb
}
