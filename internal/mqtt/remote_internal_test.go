package mqtt

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoteOfAPeerlessSocket: the remote address of a connection whose socket has
// no peer any more is empty, not a crash. A dormant connection closed by the server
// (keepalive) after its peer went gets such a socket back to finish with, and the
// close is logged with the address; a cluster node died of it under the nemesis.
func TestRemoteOfAPeerlessSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// The socket as the poller gives it back: a new net.Conn on its descriptor,
	// made after the connection was shut down, so that it has no peer.
	if err := server.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.(*net.TCPConn).SetLinger(0)
	_ = client.Close()
	f, err := server.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = shutdownBoth(f)
	nc, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.RemoteAddr() != nil {
		t.Fatalf("the shut down socket still names its peer %v: the test needs one that does not", nc.RemoteAddr())
	}
	c := &conn{nc: nc}
	if got := c.remote(); got != "" {
		t.Fatalf("remote %q, want empty", got)
	}
}

func shutdownBoth(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_RDWR) }); err != nil {
		return err
	}
	return serr
}
