// Package acceptloop owns the one loop every TCP listener of the server runs:
// accept a connection, hand it over, and ride out temporary failures (out of file
// descriptors) without spinning or giving up.
package acceptloop

import (
	"errors"
	"log/slog"
	"net"
	"time"
)

// Run accepts connections on l and passes each to serve, until accepting fails
// for good. A temporary failure is logged (when log is set) and retried after a
// pause that doubles from 5 ms to 1 s. When accepting fails for good, closed
// reports whether the listener's owner closed it on purpose: Run then returns nil,
// else the error.
func Run(l net.Listener, log *slog.Logger, closed func() bool, serve func(net.Conn)) error {
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err == nil {
			backoff = 0
			serve(nc)
			continue
		}
		if closed() || errors.Is(err, net.ErrClosed) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if log != nil {
				log.Error("accept", "addr", l.Addr().String(), "err", err, "retry_in", backoff)
			}
			time.Sleep(backoff)
			continue
		}
		return err
	}
}
