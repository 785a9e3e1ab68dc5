package udp

import (
	"encoding/binary"
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
