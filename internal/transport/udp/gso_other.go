//go:build !linux

package udp

import "net"

// gsoControl returns nil where there is no UDP segmentation offload: every
// datagram is its own send.
func gsoControl(size int) []byte { return nil }

const gsoMaxSegments = 1

// enableGRO reports false where there is no UDP receive offload.
func enableGRO(*net.UDPConn) bool { return false }

const groControlSpace = 0

func groSegment([]byte) int { return 0 }
