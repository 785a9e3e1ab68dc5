package outbound

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setNotSentLowat bounds the bytes a TCP socket holds that it has not sent yet.
func setNotSentLowat(nc net.Conn, n int) error {
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = u.NetConn() // TLS: the socket under it
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil // not a socket of ours to tune (WebSocket framing, UDP session)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
