package udp

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// gsoControl is the control message asking the kernel to cut one send into
// datagrams of size bytes (UDP generic segmentation offload, Linux 4.18+): a run
// of equal datagrams crosses the network stack once instead of once each.
func gsoControl(size int) []byte {
	b := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b
}

// gsoMaxSegments is the kernel's limit per send (UDP_MAX_SEGMENTS).
const gsoMaxSegments = 64

// enableGRO asks the kernel to hand pc runs of datagrams of one flow as one
// message (UDP generic receive offload, Linux 5.0+), with their size in a control
// message; it reports whether the kernel agreed.
func enableGRO(pc *net.UDPConn) bool {
	rc, err := pc.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}

// groControlSpace is room for the UDP_GRO control message.
var groControlSpace = unix.CmsgSpace(4)

// groSegment returns the datagram size the kernel reports in oob for a coalesced
// message, 0 if it reports none (the message is one datagram).
func groSegment(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}
