package tern_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// cutProxy forwards one client connection to a server until cut: from then on
// nothing the server sends reaches the client, and the client's connection is
// closed, as when the server's node dies.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() {
		_ = ln.Close()
		p.close()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c) }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !p.cut.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *cutProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestAsyncPublishesFailWhenTheConnectionIsLost: async publishes whose
// acknowledgements were on a connection that broke fail at once with
// ErrConnectionLost (their callers retry, with the same message id), rather than
// after the API timeout.
func TestAsyncPublishesFailWhenTheConnectionIsLost(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	admin := connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Streams().AddStream(ctx, tern.StreamConfig{Name: "LOST", Subjects: []string{"lost.>"}}); err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, s.Addr().String())
	nc, err := tern.Connect("tern://"+p.ln.Addr().String(), tern.MaxReconnects(-1), tern.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := nc.Streams(tern.APITimeout(30 * time.Second))
	first, err := js.PublishAsync("lost.x", []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.cut.Store(true) // acknowledgements from here on never arrive
	var futures []*tern.PubAckFuture
	for i := range 100 {
		f, err := js.PublishAsync("lost.x", []byte{byte(i)}, tern.MsgID(string(rune('a'+i%26))+string(rune('a'+i/26))))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	cutAt := time.Now()
	p.close()
	for i, f := range futures {
		select {
		case <-f.Done():
			if _, err := f.Result(); !errors.Is(err, tern.ErrConnectionLost) {
				t.Fatalf("publish %d: %v, want ErrConnectionLost", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("publish %d still pending %v after the connection was lost", i, time.Since(cutAt))
		}
	}
}
