package tern_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
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

// TestAsyncPublishesFailWhenTheConnectionIsLost: async publishes without a message
// id whose acknowledgements were on a connection that broke fail at once with
// ErrConnectionLost, rather than after the API timeout: the client cannot know
// whether they were stored, and does not send them again (its retries are for
// messages with an id, TestAsyncPublishesWithIDsRetriedAcrossALostConnection).
func TestAsyncPublishesFailWhenTheConnectionIsLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, p, js := proxiedStream(ctx, t, "lost", tern.APITimeout(30*time.Second))
	p.cut.Store(true) // acknowledgements from here on never arrive
	var futures []*tern.PubAckFuture
	for i := range 100 {
		f, err := js.PublishAsync("lost.x", []byte{byte(i)})
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

// TestAsyncPublishesWithIDsRetriedAcrossALostConnection: async publishes with
// message ids whose acknowledgements were lost with their connection are sent
// again once the client has reconnected, and every one resolves with its ack:
// the caller sees no error, and the stream holds each message once.
func TestAsyncPublishesWithIDsRetriedAcrossALostConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, p, js := proxiedStream(ctx, t, "retried", tern.PublishRetryFor(10*time.Second))
	p.cut.Store(true) // the server stores what comes; its acks do not reach the client
	const n = 100
	var futures []*tern.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync("retried.x", []byte{byte(i)}, tern.MsgID(fmt.Sprintf("m-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	waitFor(t, "the publishes to reach the stream before the cut", func() bool {
		info, err := admin.StreamInfo(ctx, "RETRIED")
		return err == nil && info.State.Msgs == n+1
	})
	p.close()          // the connection breaks with every ack outstanding
	p.cut.Store(false) // and the next one works
	dups := 0
	for i, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v, want its ack after a retry", i, err)
		}
		if ack.Duplicate {
			dups++
		}
	}
	info, err := admin.StreamInfo(ctx, "RETRIED")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n+1 {
		t.Fatalf("stream holds %d messages, want %d (each once)", info.State.Msgs, n+1)
	}
	if dups != n {
		t.Fatalf("%d of %d retried acks say duplicate: every message was stored before the cut", dups, n)
	}
}

// TestPublishRetriedUntilAStreamCapturesIt: a publish nobody answers (no stream's
// leader yet: the window of a leader election) is sent again until one does,
// sync and async; with retries off, or once PublishRetryFor has passed, the caller
// gets ErrNoResponders.
func TestPublishRetriedUntilAStreamCapturesIt(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := nc.Streams(tern.PublishRetryFor(0)).Publish(ctx, "late.x", nil); !errors.Is(err, tern.ErrNoResponders) {
		t.Fatalf("publish without retries: %v, want ErrNoResponders", err)
	}
	start := time.Now()
	if _, err := nc.Streams(tern.PublishRetryFor(300*time.Millisecond)).Publish(ctx, "late.x", nil); !errors.Is(err, tern.ErrNoResponders) {
		t.Fatalf("publish with retries and no stream: %v, want ErrNoResponders", err)
	} else if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("the retries of a publish with no stream lasted %v, want about 300 ms", d)
	}

	js := nc.Streams(tern.PublishRetryFor(10 * time.Second))
	syncDone := make(chan error, 1)
	go func() {
		ack, err := js.Publish(ctx, "late.sync", []byte("s"))
		if err == nil && ack.Stream != "LATE" {
			err = fmt.Errorf("ack from stream %q", ack.Stream)
		}
		syncDone <- err
	}()
	f, err := js.PublishAsync("late.async", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case <-f.Done():
		_, err := f.Result()
		t.Fatalf("the async publish resolved before any stream captured it: %v", err)
	default:
	}
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "LATE", Subjects: []string{"late.sync", "late.async"}}); err != nil {
		t.Fatal(err)
	}
	if err := <-syncDone; err != nil {
		t.Fatalf("sync publish retried until the stream existed: %v", err)
	}
	if ack, err := f.Wait(ctx); err != nil || ack.Stream != "LATE" {
		t.Fatalf("async publish retried until the stream existed: %v, %v", ack, err)
	}
	info, err := nc.Streams().StreamInfo(ctx, "LATE")
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream info: %+v, %v; want 2 messages", info, err)
	}
}

// proxiedStream makes the stream NAME (upper case) of the subjects name.> on a new
// server, and a client that reaches the server through a cutProxy; its stream API
// (opts) has published one message asynchronously, so that its ack subscription
// exists. It returns a direct client's stream API too.
func proxiedStream(ctx context.Context, t *testing.T, name string, opts ...tern.StreamsOpt) (admin *tern.Streams, p *cutProxy, js *tern.Streams) {
	t.Helper()
	s := startServer(t, 0)
	admin = connect(t, s).Streams()
	if _, err := admin.AddStream(ctx, tern.StreamConfig{Name: strings.ToUpper(name), Subjects: []string{name + ".>"}}); err != nil {
		t.Fatal(err)
	}
	p = newCutProxy(t, s.Addr().String())
	nc, err := tern.Connect("tern://"+p.ln.Addr().String(), tern.MaxReconnects(-1), tern.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js = nc.Streams(opts...)
	first, err := js.PublishAsync(name+".x", []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return admin, p, js
}
