package native

import (
	"errors"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/wire"
)

// urlSource is a connect_urls list the test changes.
type urlSource struct {
	mu   sync.Mutex
	urls []string
}

func (u *urlSource) get() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.urls...)
}

func (u *urlSource) set(urls ...string) {
	u.mu.Lock()
	u.urls = urls
	u.mu.Unlock()
}

func startTestServer(t *testing.T, urls func() []string) (*Server, string) {
	t.Helper()
	cfg := Config{MaxPayload: 1 << 20, MaxPending: 8 << 20, SlowConsumerPolicy: "disconnect", PingInterval: time.Minute,
		MaxPingsOut: 2, WriteTimeout: 5 * time.Second, ConnectTimeout: 5 * time.Second, ConnectURLs: urls}
	s, err := NewServer(cfg, broker.New(), wire.Info{ServerID: "id", ServerName: "n1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() {
		if err := s.Shutdown(5 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return s, l.Addr().String()
}

// client is a raw protocol client reading frame by frame.
type client struct {
	t   *testing.T
	nc  net.Conn
	buf []byte
}

func dial(t *testing.T, addr string, flags uint64) (*client, wire.Info) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &client{t: t, nc: nc}
	c.send(wire.AppendConnect(nil, &wire.Connect{Version: wire.Version, Flags: flags}))
	return c, c.info()
}

func (c *client) send(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) next() wire.Frame {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var f wire.Frame
		n, err := f.Decode(c.buf, 0)
		if err == nil {
			f.Payload = append([]byte(nil), f.Payload...)
			c.buf = c.buf[n:]
			return f
		}
		if !errors.Is(err, wire.ErrIncomplete) {
			c.t.Fatal(err)
		}
		b := make([]byte, 4096)
		k, rerr := c.nc.Read(b)
		if rerr != nil {
			c.t.Fatal(rerr)
		}
		c.buf = append(c.buf, b[:k]...)
	}
}

func (c *client) info() wire.Info {
	c.t.Helper()
	f := c.next()
	if f.Type != wire.TypeInfo {
		c.t.Fatalf("got %s, want INFO", f.Type)
	}
	in, err := wire.ParseInfo(f.Payload)
	if err != nil {
		c.t.Fatal(err)
	}
	return in
}

// infosBeforePong sends a PING and returns the connect_urls of every INFO that
// arrives before the PONG: what the server queued for this connection until then.
func (c *client) infosBeforePong() [][]string {
	c.t.Helper()
	c.send(wire.AppendPing(nil))
	var out [][]string
	for {
		f := c.next()
		switch f.Type {
		case wire.TypePong:
			return out
		case wire.TypeInfo:
			in, err := wire.ParseInfo(f.Payload)
			if err != nil {
				c.t.Fatal(err)
			}
			out = append(out, in.ConnectURLs)
		case wire.TypePing:
		default:
			c.t.Fatalf("unexpected %s", f.Type)
		}
	}
}

func TestConnectURLsInInfo(t *testing.T) {
	src := &urlSource{}
	src.set("tern://a:7400", "tern://b:7400")
	s, addr := startTestServer(t, src.get)

	updates, in := dial(t, addr, wire.ConnectInfoUpdates)
	if !reflect.DeepEqual(in.ConnectURLs, []string{"tern://a:7400", "tern://b:7400"}) || in.ServerName != "n1" {
		t.Fatalf("handshake INFO %+v", in)
	}
	plain, _ := dial(t, addr, 0)

	// No change, no INFO.
	s.ConnectURLsChanged()
	if got := updates.infosBeforePong(); len(got) != 0 {
		t.Fatalf("INFO without a change: %v", got)
	}
	// One change, however often it is announced, is one INFO, to the clients that
	// asked for updates only.
	src.set("tern://a:7400", "tern://b:7400", "tern://c:7400")
	s.ConnectURLsChanged()
	s.ConnectURLsChanged()
	if got := updates.infosBeforePong(); !reflect.DeepEqual(got, [][]string{{"tern://a:7400", "tern://b:7400", "tern://c:7400"}}) {
		t.Fatalf("INFO updates %v", got)
	}
	if got := plain.infosBeforePong(); len(got) != 0 {
		t.Fatalf("a client that did not ask got INFO: %v", got)
	}
	// A later client gets the current list in its handshake.
	if _, in := dial(t, addr, wire.ConnectInfoUpdates); len(in.ConnectURLs) != 3 {
		t.Fatalf("handshake after the change: %v", in.ConnectURLs)
	}
	// Two changes are two INFO frames, in order.
	src.set("tern://b:7400")
	s.ConnectURLsChanged()
	src.set()
	s.ConnectURLsChanged()
	if got := updates.infosBeforePong(); !reflect.DeepEqual(got, [][]string{{"tern://b:7400"}, nil}) {
		t.Fatalf("INFO updates %v", got)
	}
}

func TestNoConnectURLsWithoutSource(t *testing.T) {
	s, addr := startTestServer(t, nil)
	c, in := dial(t, addr, wire.ConnectInfoUpdates)
	if in.ConnectURLs != nil {
		t.Fatalf("connect_urls %v", in.ConnectURLs)
	}
	s.ConnectURLsChanged()
	if got := c.infosBeforePong(); len(got) != 0 {
		t.Fatalf("INFO updates %v", got)
	}
}
