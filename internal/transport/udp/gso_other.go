//go:build !linux

package udp

// gsoControl returns nil where there is no UDP segmentation offload: every
// datagram is its own send.
func gsoControl(size int) []byte { return nil }

const gsoMaxSegments = 1
