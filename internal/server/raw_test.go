package server

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// startServer runs a server on loopback with free ports, stopped at test end.
func startServer(t testing.TB, mutate func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort, cfg.KafkaPort = 0, 0, -1, 0
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.StoreDir = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// raw speaks the wire protocol frame by frame, to test the server's handling of
// exactly the bytes a client sends.
type raw struct {
	t   testing.TB
	nc  net.Conn
	buf []byte
	off int // start of unread bytes
	n   int // end of unread bytes
}

func dialRaw(t testing.TB, s *Server) *raw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &raw{t: t, nc: nc, buf: make([]byte, 4<<20)}
}

// connect performs the handshake and returns the INFO.
func connectRaw(t testing.TB, s *Server, flags uint64) (*raw, wire.Info) {
	t.Helper()
	r := dialRaw(t, s)
	r.send(wire.AppendConnect(nil, &wire.Connect{Version: wire.Version, Flags: flags, Name: t.Name(), Lang: "raw"}))
	f := r.next()
	if f.Type != wire.TypeInfo {
		t.Fatalf("handshake answer %s, want INFO", f.Type)
	}
	info, err := wire.ParseInfo(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return r, info
}

func (r *raw) send(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// read returns the next frame (copied out of the buffer) or the read error.
func (r *raw) read(timeout time.Duration) (wire.Frame, error) {
	deadline := time.Now().Add(timeout)
	for {
		var f wire.Frame
		k, err := f.Decode(r.buf[r.off:r.n], 0)
		if err == nil {
			out := f
			out.Subject = clone(f.Subject)
			out.Reply = clone(f.Reply)
			out.Header = wire.Header(clone(f.Header))
			out.Payload = clone(f.Payload)
			r.off += k
			return out, nil
		}
		if !errors.Is(err, wire.ErrIncomplete) {
			return wire.Frame{}, err
		}
		r.n = copy(r.buf, r.buf[r.off:r.n])
		r.off = 0
		_ = r.nc.SetReadDeadline(deadline)
		n, err := r.nc.Read(r.buf[r.n:])
		r.n += n
		if err != nil && n == 0 {
			return wire.Frame{}, err
		}
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (r *raw) next() wire.Frame {
	r.t.Helper()
	f, err := r.read(5 * time.Second)
	if err != nil {
		r.t.Fatalf("read frame: %v", err)
	}
	return f
}

// expectErr reads frames until an ERR and checks its code.
func (r *raw) expectErr(code wire.Code) wire.Frame {
	r.t.Helper()
	for {
		f := r.next()
		if f.Type == wire.TypeErr {
			if f.Code != code {
				r.t.Fatalf("ERR code %d (%s: %s), want %d (%s)", f.Code, f.Code, f.Payload, code, code)
			}
			return f
		}
	}
}

// expectClosed waits for the server to close the connection.
func (r *raw) expectClosed() {
	r.t.Helper()
	for {
		_, err := r.read(5 * time.Second)
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return
		}
		r.t.Fatalf("connection not closed: %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// sync sends a PING and reads until the PONG, returning the frames before it.
func (r *raw) sync() []wire.Frame {
	r.t.Helper()
	r.send(wire.AppendPing(nil))
	var got []wire.Frame
	for {
		f := r.next()
		if f.Type == wire.TypePong {
			return got
		}
		got = append(got, f)
	}
}
