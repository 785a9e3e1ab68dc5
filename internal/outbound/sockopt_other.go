//go:build !linux

package outbound

import "net"

func setNotSentLowat(net.Conn, int) error { return nil }
