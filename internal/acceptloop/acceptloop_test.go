package acceptloop

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// flaky is a listener whose first accepts fail temporarily, then hand out conns,
// then fail for good.
type flaky struct {
	temporary int
	conns     []net.Conn
	calls     atomic.Int32
	final     error
}

type tempErr struct{}

func (tempErr) Error() string   { return "too many open files" }
func (tempErr) Timeout() bool   { return true }
func (tempErr) Temporary() bool { return true }

func (f *flaky) Accept() (net.Conn, error) {
	n := int(f.calls.Add(1))
	switch {
	case n <= f.temporary:
		return nil, tempErr{}
	case n-f.temporary <= len(f.conns):
		return f.conns[n-f.temporary-1], nil
	}
	return nil, f.final
}
func (*flaky) Close() error   { return nil }
func (*flaky) Addr() net.Addr { return &net.TCPAddr{} }

func TestRunRidesOutTemporaryFailures(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	broken := errors.New("listener broken")
	l := &flaky{temporary: 3, conns: []net.Conn{a, b}, final: broken}
	var served int
	start := time.Now()
	err := Run(l, nil, func() bool { return false }, func(net.Conn) { served++ })
	if !errors.Is(err, broken) || served != 2 {
		t.Fatalf("Run: %v, %d served; want the final error after 2", err, served)
	}
	// 5 + 10 + 20 ms of backing off.
	if took := time.Since(start); took < 35*time.Millisecond {
		t.Fatalf("three temporary failures retried in %v, without backing off", took)
	}
}

func TestRunEndsQuietlyWhenClosed(t *testing.T) {
	l := &flaky{final: errors.New("use of closed connection")}
	if err := Run(l, nil, func() bool { return true }, func(net.Conn) {}); err != nil {
		t.Fatalf("closed by its owner: %v, want nil", err)
	}
	l = &flaky{final: net.ErrClosed}
	if err := Run(l, nil, func() bool { return false }, func(net.Conn) {}); err != nil {
		t.Fatalf("net.ErrClosed: %v, want nil", err)
	}
}
