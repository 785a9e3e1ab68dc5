package tern_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/wire"
)

func startServer(t testing.TB, port int) *server.Server {
	return servertest.Start(t, func(c *server.Config) { c.Port = port })
}

func connect(t testing.TB, s *server.Server, opts ...tern.Option) *tern.Conn {
	t.Helper()
	nc, err := tern.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestPublishSubscribeWithHeaders(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	ch := make(chan *tern.Msg, 10)
	if _, err := nc.ChanSubscribe("sensors.*.temp", ch); err != nil {
		t.Fatal(err)
	}
	m := &tern.Msg{Subject: "sensors.k1.temp", Reply: "r.1", Header: tern.Header{}, Data: []byte("21.5")}
	m.Header.Add("sender", "s1")
	m.Header.Add("sender", "s2")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("sensors.k1.humidity", []byte("no")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch:
		if got.Subject != "sensors.k1.temp" || got.Reply != "r.1" || string(got.Data) != "21.5" ||
			fmt.Sprint(got.Header.Values("sender")) != "[s1 s2]" {
			t.Fatalf("got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	select {
	case got := <-ch:
		t.Fatalf("non-matching message delivered: %s", got.Subject)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestQueueGroupSpreadsExactly(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	pub := connect(t, s)
	const n = 4000
	var counts [4]atomic.Int64
	var total atomic.Int64
	done := make(chan struct{})
	for i := range counts {
		nc := connect(t, s)
		if _, err := nc.QueueSubscribe("jobs", "workers", func(*tern.Msg) {
			counts[i].Add(1)
			if total.Add(1) == n {
				close(done)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := pub.Publish("jobs", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("got %d of %d", total.Load(), n)
	}
	time.Sleep(50 * time.Millisecond)
	for i := range counts {
		if c := counts[i].Load(); c != n/4 {
			t.Errorf("member %d got %d, want %d", i, c, n/4)
		}
	}
	if total.Load() != n {
		t.Fatalf("total %d, want %d", total.Load(), n)
	}
}

func TestFilterAndBadSubscriptions(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	sub, err := nc.SubscribeSync("ev", tern.Filter(`hdr.sender == "s1" && size <= 4`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ sender, data string }{{"s1", "ok"}, {"s2", "ok"}, {"s1", "toolong"}, {"s1", "fine"}} {
		m := &tern.Msg{Subject: "ev", Header: tern.Header{"sender": {c.sender}}, Data: []byte(c.data)}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"ok", "fine"} {
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil || string(m.Data) != want {
			t.Fatalf("got %v %v, want %s", m, err, want)
		}
	}
	if m, err := sub.NextMsg(50 * time.Millisecond); !errors.Is(err, tern.ErrTimeout) {
		t.Fatalf("filter let through %v", m)
	}
	for _, bad := range []func() error{
		func() error { _, err := nc.SubscribeSync("a..b"); return err },
		func() error { _, err := nc.SubscribeSync("a", tern.Filter("size >")); return err },
		func() error { _, err := nc.SubscribeSync("a", tern.Queue("bad queue")); return err },
	} {
		var se *tern.ServerError
		if err := bad(); !errors.Is(err, tern.ErrBadSubscription) || !errors.As(err, &se) {
			t.Errorf("bad subscription error: %v", err)
		}
	}
}

func TestRequestReplyNoRespondersAndTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	server := connect(t, s)
	client := connect(t, s)
	if _, err := server.Subscribe("greet.*", func(m *tern.Msg) {
		_ = m.Respond([]byte("hello " + string(m.Data)))
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		r, err := client.Request(ctx, "greet.en", []byte(strconv.Itoa(i)))
		if err != nil || string(r.Data) != "hello "+strconv.Itoa(i) {
			t.Fatalf("request %d: %v %v", i, r, err)
		}
	}
	if _, err := client.Request(ctx, "nobody.home", nil); !errors.Is(err, tern.ErrNoResponders) {
		t.Fatalf("no responders: %v", err)
	}
	if _, err := server.Subscribe("slow", func(*tern.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RequestTimeout("slow", nil, 100*time.Millisecond); !errors.Is(err, tern.ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestAutoUnsubscribeAndUnsubscribe(t *testing.T) {
	s := startServer(t, 0)
	nc := connect(t, s)
	var got atomic.Int64
	sub, err := nc.Subscribe("x", func(*tern.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AutoUnsubscribe(3); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		_ = nc.Publish("x", nil)
	}
	_ = nc.Flush()
	time.Sleep(50 * time.Millisecond)
	if got.Load() != 3 || sub.IsValid() {
		t.Fatalf("got %d, valid %v; want 3, false", got.Load(), sub.IsValid())
	}
	sub2, _ := nc.SubscribeSync("y")
	if err := sub2.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = nc.Publish("y", nil)
	_ = nc.Flush()
	if _, err := sub2.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatal("message after Unsubscribe")
	}
}

func TestMaxPayloadCheckedByClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	if err := nc.Publish("big", make([]byte, nc.MaxPayload()+1)); !errors.Is(err, tern.ErrMaxPayload) {
		t.Fatalf("got %v", err)
	}
}

func TestReconnectRestoresSubscriptionsAndBufferedPublishes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s1 := startServer(t, port)
	var disconnects, reconnects atomic.Int32
	nc := connect(t, s1, tern.ReconnectWait(20*time.Millisecond), tern.MaxReconnects(-1),
		tern.DisconnectErrHandler(func(*tern.Conn, error) { disconnects.Add(1) }),
		tern.ReconnectHandler(func(*tern.Conn) { reconnects.Add(1) }))
	sub, err := nc.SubscribeSync("after")
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// Published while disconnected: buffered and sent after the resubscription.
	if err := nc.Publish("after", []byte("buffered")); err != nil {
		t.Fatal(err)
	}
	startServer(t, port)
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(m.Data) != "buffered" {
		t.Fatalf("after reconnect: %v %v", m, err)
	}
	if err := nc.Publish("after", []byte("live")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "live" {
		t.Fatalf("live after reconnect: %v %v", m, err)
	}
	time.Sleep(20 * time.Millisecond)
	if disconnects.Load() != 1 || reconnects.Load() != 1 || nc.Stats().Reconnects != 1 {
		t.Fatalf("events: %d disconnects %d reconnects", disconnects.Load(), reconnects.Load())
	}
}

func TestDrainHandlesQueuedMessagesThenCloses(t *testing.T) {
	s := startServer(t, 0)
	nc := connect(t, s)
	pub := connect(t, s)
	var handled atomic.Int64
	closed := make(chan struct{})
	nc2 := connect(t, s, tern.ClosedHandler(func(*tern.Conn) { close(closed) }))
	_ = nc
	if _, err := nc2.Subscribe("d", func(*tern.Msg) { time.Sleep(time.Millisecond); handled.Add(1) }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_ = pub.Publish("d", nil)
	}
	_ = pub.Flush()
	time.Sleep(20 * time.Millisecond)
	if err := nc2.Drain(); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 100 {
		t.Fatalf("drain handled %d of 100", handled.Load())
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("closed handler not called")
	}
	if !nc2.IsClosed() {
		t.Fatal("not closed after drain")
	}
	nc2.Close() // idempotent
	if err := nc2.Publish("d", nil); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("publish after close: %v", err)
	}
}

func TestServerErrorsReachErrorHandler(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	errs := make(chan error, 4)
	nc := connect(t, s, tern.ErrorHandler(func(_ *tern.Conn, _ *tern.Subscription, err error) { errs <- err }))
	_ = nc.Publish("bad subject", nil)
	select {
	case err := <-errs:
		var se *tern.ServerError
		if !errors.As(err, &se) || se.Code != wire.CodeBadSubject {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no error reported")
	}
}

func TestConcurrentPublishers(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	sub := connect(t, s)
	var got atomic.Int64
	done := make(chan struct{})
	const pubs, per = 4, 5000
	if _, err := sub.Subscribe("c.>", func(*tern.Msg) {
		if got.Add(1) == pubs*per {
			close(done)
		}
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := 0; p < pubs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := nc.Publish("c."+strconv.Itoa(p), []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("got %d of %d", got.Load(), pubs*per)
	}
}

// TestUnsubscribeWhileMessagesArrive unsubscribes sync subscriptions while messages
// for them are being delivered; nothing may panic and NextMsg reports the end.
func TestUnsubscribeWhileMessagesArrive(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	pub := connect(t, s)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = pub.Publish("race", []byte("x"))
			}
		}
	}()
	defer close(stop)
	for i := 0; i < 50; i++ {
		sub, err := nc.SubscribeSync("race")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := sub.NextMsg(time.Second); err != nil {
				if !errors.Is(err, tern.ErrBadSubscription) {
					t.Fatalf("after unsubscribe: %v", err)
				}
				break
			}
		}
	}
}
