package outbound

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenedBoundsUnsentBytes: a group with NotSentLowat sets TCP_NOTSENT_LOWAT on
// the sockets it is given; without, the kernel's default stays.
func TestOpenedBoundsUnsentBytes(t *testing.T) {
	for _, lowat := range []int{0, 16 << 10} {
		q, ep, _, _ := pair(t, Config{MaxPending: 1 << 20, NotSentLowat: lowat})
		before := notSentLowat(t, ep)
		q.g.Opened(ep.nc)
		got := notSentLowat(t, ep)
		if lowat > 0 && got != lowat {
			t.Fatalf("TCP_NOTSENT_LOWAT %d, want %d", got, lowat)
		}
		if lowat == 0 && got != before {
			t.Fatalf("TCP_NOTSENT_LOWAT changed to %d without NotSentLowat", got)
		}
	}
}

func notSentLowat(t *testing.T, ep *endpoint) int {
	t.Helper()
	rc, err := ep.nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}
