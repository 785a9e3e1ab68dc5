//go:build unix

package tlsconf

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// socketReadSize is what one read of a TLS connection's socket may bring: dozens
// of small records, or four of the largest (16 KiB of plaintext each).
const socketReadSize = 64 << 10

var socketBufs = sync.Pool{New: func() any { b := make([]byte, socketReadSize); return &b }}

// BatchReads returns nc for crypto/tls to read through: each read of the socket
// fills a 64 KiB buffer from a pool, and crypto/tls is served from it. crypto/tls
// on its own asks the socket for a record header, then for the rest of that one
// record, into a buffer sized for it: a read syscall or two per record, which
// over a stream of 1 KiB messages is most of a TLS connection's cost. The buffer
// is taken only once the socket has data and goes back to the pool as soon as it
// is drained, so an idle connection holds none (the wait for data happens in the
// runtime's poller, not in a read). Read deadlines and Close work as on nc.
//
// A connection that is not a socket of its own (no syscall.Conn: a pipe, a
// WebSocket) is returned as it is.
func BatchReads(nc net.Conn) net.Conn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &socketReader{Conn: nc, raw: raw}
	s.readFD = s.readSocket
	return s
}

// socketReader is a net.Conn whose reads go through a pooled buffer. It is read
// by one goroutine at a time, as crypto/tls does (under its input lock).
type socketReader struct {
	net.Conn
	raw syscall.RawConn

	buf  *[]byte // nil while empty
	r, w int     // unread bytes: (*buf)[r:w]

	readFD func(fd uintptr) bool // readSocket, made once so a read allocates nothing
	n      int                   // the last readSocket's outcome
	err    error
	reads  int // read syscalls made
}

func (s *socketReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.buf == nil {
		s.n, s.err = 0, nil
		if err := s.raw.Read(s.readFD); err != nil {
			s.release()
			return 0, s.opError(err)
		}
		if s.err != nil {
			s.release()
			return 0, s.opError(s.err)
		}
		if s.n == 0 {
			s.release()
			return 0, io.EOF
		}
		s.r, s.w = 0, s.n
	}
	n := copy(p, (*s.buf)[s.r:s.w])
	s.r += n
	if s.r == s.w {
		s.release()
	}
	return n, nil
}

// readSocket is the callback of raw.Read: one non-blocking read into a buffer
// taken for it. It reports false to wait for the socket to be readable, and gives
// the buffer back meanwhile.
func (s *socketReader) readSocket(fd uintptr) bool {
	if s.buf == nil {
		s.buf = socketBufs.Get().(*[]byte)
	}
	for {
		n, err := syscall.Read(int(fd), *s.buf)
		s.reads++
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			s.release()
			return false
		}
		if n < 0 {
			n = 0
		}
		s.n, s.err = n, err
		return true
	}
}

func (s *socketReader) release() {
	if s.buf != nil {
		socketBufs.Put(s.buf)
		s.buf = nil
	}
	s.r, s.w = 0, 0
}

// opError wraps a read's failure as the net package does for its own reads, so
// callers' checks (net.ErrClosed, os.ErrDeadlineExceeded, net.Error's Timeout)
// see the same errors.
func (s *socketReader) opError(err error) error {
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError("read", errno)
	}
	return &net.OpError{Op: "read", Net: s.LocalAddr().Network(), Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// SyscallConn reaches the socket under the buffer (socket options, descriptors).
func (s *socketReader) SyscallConn() (syscall.RawConn, error) { return s.raw, nil }

// NetConn returns the connection under the buffer.
func (s *socketReader) NetConn() net.Conn { return s.Conn }
