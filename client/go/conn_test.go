package tern_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// freePort returns a loopback port nothing listens on, for tests that restart a
// server on the same port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func stop(t testing.TB, s *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to 5s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFlushMeansTheServerHasIt(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	before := s.Status().InMsgs
	for i := 0; i < 1000; i++ {
		if err := nc.Publish("flush.test", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := s.Status().InMsgs - before; got != 1000 {
		t.Fatalf("server has %d messages after Flush, want 1000", got)
	}
	if st := nc.Stats(); st.OutMsgs != 1000 || st.OutBytes != 1000 {
		t.Fatalf("stats %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := nc.FlushContext(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("FlushContext with a cancelled context: %v", err)
	}
}

func TestCloseSendsWhatIsBuffered(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	sub := connect(t, s)
	ss, err := sub.SubscribeSync("last.words")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_ = nc.Publish("last.words", []byte(strconv.Itoa(i)))
	}
	nc.Close()
	nc.Close()
	for i := 0; i < 100; i++ {
		m, err := ss.NextMsg(5 * time.Second)
		if err != nil || string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("message %d: %v %v", i, m, err)
		}
	}
	if err := nc.Publish("x", nil); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	if _, err := nc.Subscribe("x", func(*tern.Msg) {}); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("subscribe after Close: %v", err)
	}
	if err := nc.Flush(); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("flush after Close: %v", err)
	}
	if err := nc.Drain(); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("drain after Close: %v", err)
	}
	if nc.Status() != tern.Closed || nc.ConnectedURL() != "" {
		t.Fatalf("status %s, url %q", nc.Status(), nc.ConnectedURL())
	}
}

func TestLargePayloadAndHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	sub, err := nc.SubscribeSync("big.>")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), nc.MaxPayload()/16)
	m := &tern.Msg{Subject: "big.one", Header: tern.Header{}, Data: big}
	m.Header.Set("k", "v1")
	m.Header.Add("k", "v2")
	m.Header.Set("empty", "")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	_ = nc.Publish("big.small", []byte("after"))
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "big.one" || !bytes.Equal(got.Data, big) || len(got.Header.Values("k")) != 2 ||
		got.Header.Get("k") != "v1" || got.Header.Values("empty")[0] != "" {
		t.Fatalf("got %s, %d bytes, header %v", got.Subject, len(got.Data), got.Header)
	}
	if got, err := sub.NextMsg(5 * time.Second); err != nil || string(got.Data) != "after" || got.Header != nil {
		t.Fatalf("after the big one: %v %v", got, err)
	}
	if msgs, _ := sub.Pending(); msgs != 0 {
		t.Fatalf("pending %d", msgs)
	}
}

func TestConnectionEventsInOrder(t *testing.T) {
	port := freePort(t)
	s1 := startServer(t, port)
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	var cause error
	closed := make(chan struct{})
	nc, err := tern.Connect(s1.URL(), tern.ReconnectWait(10*time.Millisecond),
		tern.ConnectHandler(func(*tern.Conn) { record("connect") }),
		tern.DisconnectErrHandler(func(_ *tern.Conn, err error) { cause = err; record("disconnect") }),
		tern.ReconnectHandler(func(c *tern.Conn) { record("reconnect " + c.ConnectedURL()) }),
		tern.ClosedHandler(func(*tern.Conn) { record("closed"); close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, s1)
	waitFor(t, "reconnecting", nc.IsReconnecting)
	startServer(t, port)
	waitFor(t, "reconnected", nc.IsConnected)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("no closed event")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"connect", "disconnect", "reconnect " + s1.URL(), "closed"}
	if len(events) != len(want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events %q, want %q", events, want)
		}
	}
	var se *tern.ServerError
	if !errors.As(cause, &se) || !se.Code.Fatal() {
		t.Fatalf("disconnect cause %v, want the server's shutdown notice", cause)
	}
}

func TestNoReconnectClosesOnServerLoss(t *testing.T) {
	s := startServer(t, 0)
	var disconnects atomic.Int32
	closed := make(chan struct{})
	nc, err := tern.Connect(s.URL(), tern.NoReconnect(),
		tern.DisconnectErrHandler(func(*tern.Conn, error) { disconnects.Add(1) }),
		tern.ClosedHandler(func(*tern.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := nc.SubscribeSync("x")
	stop(t, s)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed")
	}
	if disconnects.Load() != 1 || !nc.IsClosed() {
		t.Fatalf("disconnects %d, status %s", disconnects.Load(), nc.Status())
	}
	if _, err := sub.NextMsg(time.Second); !errors.Is(err, tern.ErrConnectionClosed) {
		t.Fatalf("NextMsg after close: %v", err)
	}
}

func TestReconnectBufferBoundAndAutoUnsubscribeBudget(t *testing.T) {
	port := freePort(t)
	s1 := startServer(t, port)
	nc := connect(t, s1, tern.ReconnectWait(10*time.Millisecond), tern.ReconnectBufSize(4096))
	var got atomic.Int64
	sub, err := nc.Subscribe("budget", func(*tern.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AutoUnsubscribe(5); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		_ = nc.Publish("budget", nil)
	}
	waitFor(t, "two messages", func() bool { return got.Load() == 2 })

	stop(t, s1)
	waitFor(t, "reconnecting", nc.IsReconnecting)
	// While disconnected publishes are buffered up to the bound.
	payload := make([]byte, 100)
	var buffered int
	for ; buffered < 100; buffered++ {
		if err := nc.Publish("budget", payload); err != nil {
			if !errors.Is(err, tern.ErrReconnectBufExceeded) {
				t.Fatal(err)
			}
			break
		}
	}
	if buffered < 30 || buffered >= 45 {
		t.Fatalf("%d publishes of 100 B fit in a 4 KiB reconnect buffer", buffered)
	}
	if err := nc.Flush(); !errors.Is(err, tern.ErrConnectionLost) {
		t.Fatalf("Flush while reconnecting: %v", err)
	}
	startServer(t, port)
	waitFor(t, "reconnected", nc.IsConnected)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The buffered publishes arrive after the subscription is re-created with its
	// remaining budget of 3.
	waitFor(t, "budget used", func() bool { return got.Load() == 5 })
	for i := 0; i < 10; i++ {
		_ = nc.Publish("budget", nil)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if got.Load() != 5 || sub.IsValid() {
		t.Fatalf("got %d (want 5), valid %v", got.Load(), sub.IsValid())
	}
}

func TestRequestWhileDisconnectedCompletesAfterReconnect(t *testing.T) {
	port := freePort(t)
	s1 := startServer(t, port)
	nc := connect(t, s1, tern.ReconnectWait(10*time.Millisecond))
	if _, err := nc.Subscribe("svc", func(m *tern.Msg) { _ = m.Respond(append([]byte("re: "), m.Data...)) }); err != nil {
		t.Fatal(err)
	}
	if r, err := nc.RequestTimeout("svc", []byte("one"), 5*time.Second); err != nil || string(r.Data) != "re: one" {
		t.Fatalf("%v %v", r, err)
	}
	stop(t, s1)
	waitFor(t, "reconnecting", nc.IsReconnecting)
	type result struct {
		m   *tern.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := nc.RequestTimeout("svc", []byte("two"), 10*time.Second)
		done <- result{m, err}
	}()
	time.Sleep(50 * time.Millisecond)
	startServer(t, port)
	r := <-done
	if r.err != nil || string(r.m.Data) != "re: two" {
		t.Fatalf("request across the reconnect: %v %v", r.m, r.err)
	}
}

func TestFailoverToTheNextServer(t *testing.T) {
	s := startServer(t, 0)
	dead := freePort(t)
	nc, err := tern.Connect("tern://127.0.0.1:" + strconv.Itoa(dead) + ", " + s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.ConnectedURL() != s.URL() {
		t.Fatalf("connected to %q, want %q", nc.ConnectedURL(), s.URL())
	}
	if _, err := tern.Connect("tern://127.0.0.1:"+strconv.Itoa(dead), tern.Timeout(time.Second)); !errors.Is(err, tern.ErrNoServers) {
		t.Fatalf("connect to nothing: %v", err)
	}
	if _, err := tern.Connect("http://127.0.0.1:80"); !errors.Is(err, tern.ErrBadURL) {
		t.Fatalf("bad scheme: %v", err)
	}
}

func TestSlowConsumerDropsAndReports(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	errs := make(chan error, 10)
	nc := connect(t, s, tern.PendingLimits(10, 1<<20),
		tern.ErrorHandler(func(_ *tern.Conn, sub *tern.Subscription, err error) {
			if sub != nil {
				errs <- err
			}
		}))
	release := make(chan struct{})
	var handled atomic.Int64
	sub, err := nc.Subscribe("flood", func(*tern.Msg) {
		<-release
		handled.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *tern.Msg, 5)
	csub, err := nc.ChanSubscribe("flood", ch)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_ = nc.Publish("flood", nil)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all messages seen", func() bool {
		return sub.Delivered()+int64(sub.Dropped()) == 100 && csub.Delivered()+int64(csub.Dropped()) == 100
	})
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, tern.ErrSlowConsumer) {
				t.Fatalf("error %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("slow consumer not reported")
		}
	}
	if msgs, _ := sub.Pending(); msgs > 10 || sub.Dropped() < 89 || csub.Dropped() != 95 {
		t.Fatalf("pending %d, dropped %d and %d", msgs, sub.Dropped(), csub.Dropped())
	}
	close(release)
	waitFor(t, "queue handled", func() bool { return handled.Load() == sub.Delivered() })
}

func TestNoEcho(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s, tern.NoEcho())
	other := connect(t, s)
	sub, err := nc.SubscribeSync("echo")
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Publish("echo", []byte("mine"))
	_ = nc.Flush()
	_ = other.Publish("echo", []byte("theirs"))
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "theirs" {
		t.Fatalf("got %v %v", m, err)
	}
}

func TestDrainKeepsMessagesInFlight(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	pub := connect(t, s)
	nc := connect(t, s)
	var handled atomic.Int64
	if _, err := nc.QueueSubscribe("work", "w", func(*tern.Msg) {
		time.Sleep(20 * time.Microsecond)
		handled.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	ss, err := nc.SubscribeSync("work")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := 0; i < n; i++ {
		_ = pub.Publish("work", make([]byte, 100))
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	// Everything is routed; much of it is still in sockets and queues.
	go func() {
		for {
			if _, err := ss.NextMsg(5 * time.Second); err != nil {
				return
			}
		}
	}()
	if err := nc.Drain(); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != n {
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	if !nc.IsClosed() {
		t.Fatal("open after Drain")
	}
}

func TestSubscriptionDrain(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	pub := connect(t, s)
	var handled atomic.Int64
	sub, err := nc.Subscribe("sd", func(*tern.Msg) { handled.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		_ = pub.Publish("sd", nil)
	}
	_ = pub.Flush()
	if err := sub.Drain(); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 500 || sub.IsValid() {
		t.Fatalf("handled %d, valid %v", handled.Load(), sub.IsValid())
	}
	if err := sub.Unsubscribe(); !errors.Is(err, tern.ErrBadSubscription) {
		t.Fatalf("Unsubscribe after Drain: %v", err)
	}
	if !nc.IsConnected() {
		t.Fatal("subscription drain closed the connection")
	}
}

func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	responder := connect(t, s)
	nc := connect(t, s)
	if _, err := responder.QueueSubscribe("echo.*", "svc", func(m *tern.Msg) {
		r := &tern.Msg{Header: tern.Header{"n": {m.Header.Get("n")}}, Data: m.Data}
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				id := strconv.Itoa(g*1000 + i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := nc.RequestMsg(ctx, &tern.Msg{Subject: "echo.x", Header: tern.Header{"n": {id}}, Data: []byte(id)})
				cancel()
				if err != nil || string(r.Data) != id || r.Header.Get("n") != id {
					t.Errorf("request %s: %v %v", id, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestMisuse(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0)
	nc := connect(t, s)
	if err := nc.Publish("", nil); !errors.Is(err, tern.ErrBadSubject) {
		t.Errorf("empty subject: %v", err)
	}
	if _, err := nc.Subscribe("x", nil); !errors.Is(err, tern.ErrBadSubscription) {
		t.Errorf("nil handler: %v", err)
	}
	async, _ := nc.Subscribe("x", func(*tern.Msg) {})
	if _, err := async.NextMsg(time.Millisecond); !errors.Is(err, tern.ErrSyncSubRequired) {
		t.Errorf("NextMsg on an async subscription: %v", err)
	}
	if err := (&tern.Msg{Subject: "x"}).Respond(nil); !errors.Is(err, tern.ErrMsgNotBound) {
		t.Errorf("respond to an unbound message: %v", err)
	}
	var nilConn *tern.Conn
	if err := nilConn.Publish("x", nil); !errors.Is(err, tern.ErrInvalidConnection) {
		t.Errorf("nil conn: %v", err)
	}
	if _, err := nc.SubscribeSync("bad subject"); !errors.Is(err, tern.ErrBadSubject) {
		t.Errorf("bad subject: %v", err)
	}
	sub, _ := nc.SubscribeSync("y")
	if err := sub.AutoUnsubscribe(0); !errors.Is(err, tern.ErrBadSubscription) {
		t.Errorf("AutoUnsubscribe(0): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sub.NextMsgContext(ctx); !errors.Is(err, tern.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NextMsgContext: %v", err)
	}
	if sub.Subject() != "y" || sub.Queue() != "" {
		t.Errorf("subject %q queue %q", sub.Subject(), sub.Queue())
	}
}
