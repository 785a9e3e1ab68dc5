package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/wire"
)

func TestHandshakeReturnsInfo(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *Config) { c.ServerName = "edge-1"; c.MaxPayload = 4096 })
	_, info := connectRaw(t, s, 0)
	if info.Version != wire.Version || info.ServerName != "edge-1" || info.MaxPayload != 4096 || info.ClientID == 0 {
		t.Fatalf("info %+v", info)
	}
	if info.Flags&wire.InfoHeaders == 0 {
		t.Fatalf("server does not announce header support")
	}
}

func TestFirstFrameMustBeConnect(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	r := dialRaw(t, s)
	r.send(wire.AppendPub(nil, 0, "a", "", nil, []byte("x")))
	r.expectErr(wire.CodeConnectFirst)
	r.expectClosed()
}

func TestUnsupportedVersionIsRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	r := dialRaw(t, s)
	r.send(wire.AppendConnect(nil, &wire.Connect{Version: 99}))
	r.expectErr(wire.CodeVersion)
	r.expectClosed()
}

func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *Config) { c.ConnectTimeout = 100 * time.Millisecond })
	r := dialRaw(t, s)
	r.expectErr(wire.CodeConnectFirst)
	r.expectClosed()
}

func TestPubSubWithAcksHeadersAndReply(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	sub, _ := connectRaw(t, s, 0)
	pub, _ := connectRaw(t, s, 0)
	sub.send(wire.AppendSub(nil, 1, 7, "orders.*", "", ""))
	if f := sub.next(); f.Type != wire.TypeOK || f.ID != 1 {
		t.Fatalf("SUB answered %s id %d", f.Type, f.ID)
	}
	h := wire.AppendHeader(nil, "sender", "s1")
	pub.send(wire.AppendPub(nil, 42, "orders.new", "reply.here", h, []byte("payload")))
	if f := pub.next(); f.Type != wire.TypeOK || f.ID != 42 {
		t.Fatalf("PUB answered %s id %d", f.Type, f.ID)
	}
	f := sub.next()
	if f.Type != wire.TypeMsg || f.SID != 7 || string(f.Subject) != "orders.new" || string(f.Reply) != "reply.here" ||
		string(f.Payload) != "payload" || f.Header.Get("sender") != "s1" {
		t.Fatalf("MSG %+v", f)
	}
}

func TestPipelinedFramesInOneWrite(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c, _ := connectRaw(t, s, 0)
	var b []byte
	b = wire.AppendSub(b, 0, 1, "p", "", "")
	for i := 0; i < 1000; i++ {
		b = wire.AppendPub(b, 0, "p", "", nil, []byte(fmt.Sprint(i)))
	}
	c.send(b)
	got := c.sync()
	if len(got) != 1000 {
		t.Fatalf("got %d messages, want 1000", len(got))
	}
	for i, f := range got {
		if string(f.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: order lost", i, f.Payload)
		}
	}
}

func TestNonFatalErrorsKeepTheConnection(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *Config) { c.MaxSubscriptions = 2; c.MaxPayload = 64 })
	c, _ := connectRaw(t, s, 0)
	c.send(wire.AppendPub(nil, 1, "a..b", "", nil, nil))
	if f := c.expectErr(wire.CodeBadSubject); f.ID != 1 {
		t.Fatalf("ERR answers id %d, want 1", f.ID)
	}
	c.send(wire.AppendPub(nil, 2, "a.*", "", nil, nil))
	c.expectErr(wire.CodeBadSubject)
	c.send(wire.AppendSub(nil, 3, 1, "a", "bad queue", ""))
	c.expectErr(wire.CodeBadQueue)
	c.send(wire.AppendSub(nil, 4, 1, "a", "", "size >"))
	c.expectErr(wire.CodeBadFilter)
	c.send(wire.AppendUnsub(nil, 5, 99, 0))
	c.expectErr(wire.CodeUnknownSID)
	c.send(wire.AppendSub(nil, 6, 1, "a", "", ""))
	c.send(wire.AppendSub(nil, 7, 1, "b", "", ""))
	c.expectErr(wire.CodeDuplicateSID)
	c.send(wire.AppendSub(nil, 8, 2, "b", "", ""))
	c.send(wire.AppendSub(nil, 9, 3, "c", "", ""))
	c.expectErr(wire.CodeMaxSubscriptions)
	c.send(wire.AppendPub(nil, 10, "a", "", nil, make([]byte, 65)))
	c.expectErr(wire.CodeTooLarge)
	c.send(wire.AppendPub(nil, 11, "a", "", wire.Header{0x05, 'x'}, nil))
	c.expectErr(wire.CodeBadHeader)
	// Still connected and working.
	c.send(wire.AppendPub(nil, 0, "a", "", nil, []byte("alive")))
	got := c.sync()
	if len(got) != 1 || string(got[0].Payload) != "alive" {
		t.Fatalf("after errors got %+v", got)
	}
}

func TestUnsubWithMax(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c, _ := connectRaw(t, s, 0)
	c.send(wire.AppendSub(nil, 0, 1, "m", "", ""))
	c.send(wire.AppendUnsub(nil, 0, 1, 3))
	var b []byte
	for i := 0; i < 10; i++ {
		b = wire.AppendPub(b, 0, "m", "", nil, []byte("x"))
	}
	c.send(b)
	if got := c.sync(); len(got) != 3 {
		t.Fatalf("got %d messages after UNSUB max 3", len(got))
	}
	if conns := s.Connections(); conns[0].Subscriptions != 0 {
		t.Fatalf("connection still lists %d subscriptions", conns[0].Subscriptions)
	}
	// The sid is free again.
	c.send(wire.AppendSub(nil, 1, 1, "m", "", ""))
	if f := c.next(); f.Type != wire.TypeOK {
		t.Fatalf("re-using the sid: %s %s", f.Type, f.Payload)
	}
}

func TestNoResponders(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c, _ := connectRaw(t, s, wire.ConnectNoResponders)
	c.send(wire.AppendSub(nil, 0, 1, "_INBOX.abc.*", "", ""))
	c.send(wire.AppendPub(nil, 0, "nobody.home", "_INBOX.abc.1", nil, []byte("req")))
	got := c.sync()
	if len(got) != 1 || got[0].Header.Get(wire.HeaderStatus) != wire.StatusNoResponders || string(got[0].Subject) != "_INBOX.abc.1" {
		t.Fatalf("no-responders answer %+v", got)
	}
}

func TestNoEcho(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c, _ := connectRaw(t, s, wire.ConnectNoEcho)
	c.send(wire.AppendSub(nil, 0, 1, "e", "", ""))
	c.send(wire.AppendPub(nil, 0, "e", "", nil, []byte("x")))
	if got := c.sync(); len(got) != 0 {
		t.Fatalf("no-echo connection got its own message")
	}
}

func TestServerPingsAndClosesStaleClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *Config) { c.PingInterval = 50 * time.Millisecond; c.MaxPingsOut = 2 })
	c, info := connectRaw(t, s, 0)
	if info.PingIntervalMS != 50 {
		t.Fatalf("ping interval %d ms", info.PingIntervalMS)
	}
	if f := c.next(); f.Type != wire.TypePing {
		t.Fatalf("got %s, want PING", f.Type)
	}
	c.expectErr(wire.CodeStale)
	c.expectClosed()
}

func TestClientAnsweringPingsStaysConnected(t *testing.T) {
	s := startServer(t, func(c *Config) { c.PingInterval = 20 * time.Millisecond; c.MaxPingsOut = 1 })
	c, _ := connectRaw(t, s, 0)
	for i := 0; i < 10; i++ {
		f := c.next()
		if f.Type != wire.TypePing {
			t.Fatalf("got %s, want PING", f.Type)
		}
		c.send(wire.AppendPong(nil))
	}
}

func TestMaxConnections(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *Config) { c.MaxConnections = 2 })
	connectRaw(t, s, 0)
	connectRaw(t, s, 0)
	r := dialRaw(t, s)
	r.expectErr(wire.CodeMaxConnections)
	r.expectClosed()
}

// TestBadClientsDoNotHurtGoodOnes floods garbage, truncated frames, oversized frames
// and unexpected frames from many connections, plus a client that never reads, while a
// publisher and subscriber exchange messages; every good message must arrive and the
// server must stay up.
func TestBadClientsDoNotHurtGoodOnes(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxPayload = 64 << 10
		c.MaxPending = 1 << 20
	})
	good, _ := connectRaw(t, s, 0)
	good.send(wire.AppendSub(nil, 0, 1, "good.>", "", ""))
	good.sync()

	// A subscriber that never reads: its pending bytes pass the limit.
	stuck, _ := connectRaw(t, s, 0)
	stuck.send(wire.AppendSub(nil, 0, 1, "good.>", "", ""))
	stuck.sync()

	var wg sync.WaitGroup
	attacks := []struct {
		name  string
		bytes func() []byte
		code  wire.Code
	}{
		{"garbage", func() []byte { b := make([]byte, 4096); _, _ = rand.Read(b); b[0], b[1] = 0xEE, 0x10; return b }, wire.CodeProtocol},
		{"oversized", func() []byte {
			b := wire.AppendConnect(nil, &wire.Connect{Version: wire.Version})
			return append(b, byte(wire.TypePub), 0xff, 0xff, 0xff, 0x7f)
		}, wire.CodeTooLarge},
		{"unknown type", func() []byte {
			return append(wire.AppendConnect(nil, &wire.Connect{Version: wire.Version}), 0x7e, 0)
		}, wire.CodeProtocol},
		{"server frame", func() []byte {
			return wire.AppendMsg(wire.AppendConnect(nil, &wire.Connect{Version: wire.Version}), 1, []byte("a"), nil, nil, nil)
		}, wire.CodeProtocol},
		{"malformed body", func() []byte {
			return append(wire.AppendConnect(nil, &wire.Connect{Version: wire.Version}), byte(wire.TypeSub), 3, 0xC0, 1, 0)
		}, wire.CodeProtocol},
	}
	for _, a := range attacks {
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := dialRaw(t, s)
				r.send(a.bytes())
				f, err := r.read(5 * time.Second)
				for err == nil && f.Type != wire.TypeErr {
					f, err = r.read(5 * time.Second)
				}
				if err != nil || f.Code != a.code {
					t.Errorf("%s: got %v / code %d, want ERR %d", a.name, err, f.Code, a.code)
				}
			}()
		}
	}
	// Truncated frames: connections that send half a frame and hang up.
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := dialRaw(t, s)
			full := wire.AppendConnect(nil, &wire.Connect{Version: wire.Version})
			full = wire.AppendPub(full, 0, "good.x", "", nil, make([]byte, 1000))
			r.send(full[:len(full)-500])
			_ = r.nc.Close()
		}()
	}

	// Enough traffic to overflow the stuck subscriber's socket buffers and its
	// pending limit several times over.
	const n = 40000
	received := make(chan int, 1)
	var progress atomic.Int64
	go func() {
		got := 0
		defer func() { received <- got }()
		for got < n {
			f, err := good.read(10 * time.Second)
			if err != nil {
				t.Errorf("good subscriber: %v after %d messages", err, got)
				break
			}
			if f.Type == wire.TypeMsg {
				got++
				progress.Store(int64(got))
			}
		}
	}()
	pub, _ := connectRaw(t, s, 0)
	payload := bytes.Repeat([]byte("p"), 512)
	var b []byte
	for i := 0; i < n; i++ {
		b = wire.AppendPub(b, 0, "good.data", "", nil, payload)
		if len(b) > 32<<10 {
			pub.send(b)
			b = b[:0]
			// Pace to the healthy subscriber so only the stuck one falls behind.
			for wait := time.Now().Add(10 * time.Second); int64(i)-progress.Load() > 200 && time.Now().Before(wait); {
				time.Sleep(time.Millisecond)
			}

		}
	}
	pub.send(b)
	pub.sync()
	got := <-received
	wg.Wait()
	if got != n {
		t.Fatalf("good subscriber got %d of %d; connections: %+v", got, n, s.Connections())
	}
	st := s.Status()
	if st.SlowConsumers < 1 || st.DroppedMsgs == 0 {
		t.Fatalf("stuck subscriber not counted as slow: %+v", st)
	}
	// The server still accepts and serves new clients.
	late, _ := connectRaw(t, s, 0)
	late.send(wire.AppendSub(nil, 0, 1, "late", "", ""))
	late.send(wire.AppendPub(nil, 0, "late", "", nil, []byte("ok")))
	if got := late.sync(); len(got) != 1 {
		t.Fatalf("late client got %d messages", len(got))
	}
}

func TestSlowConsumerDisconnectPolicy(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxPayload = 64 << 10
		c.MaxPending = 128 << 10
		c.SlowConsumerPolicy = outbound.PolicyDisconnect.String()
	})
	stuck, _ := connectRaw(t, s, 0)
	stuck.send(wire.AppendSub(nil, 0, 1, "flood", "", ""))
	stuck.sync()
	pub, _ := connectRaw(t, s, 0)
	payload := make([]byte, 16<<10)
	for i := 0; i < 2000 && s.Status().SlowConsumers == 0; i++ {
		pub.send(wire.AppendPub(nil, 0, "flood", "", nil, payload))
	}
	pub.sync()
	if s.Status().SlowConsumers == 0 {
		t.Fatal("no slow consumer detected")
	}
	stuck.expectErr(wire.CodeSlowConsumer)
	stuck.expectClosed()
}

func TestMonitoringReflectsTraffic(t *testing.T) {
	s := startServer(t, nil)
	internal := s.Broker().Count() // the stream API's own subscriptions
	c, _ := connectRaw(t, s, 0)
	c.send(wire.AppendSub(nil, 0, 1, "m.>", "", ""))
	for i := 0; i < 5; i++ {
		c.send(wire.AppendPub(nil, 0, "m.x", "", nil, []byte("1234")))
	}
	c.sync()
	base := "http://" + s.HTTPAddr().String()
	resp, err := http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st monitor.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Connections != 1 || st.Subscriptions != internal+1 || st.InMsgs != 5 || st.OutMsgs != 5 || st.InBytes != 20 {
		t.Fatalf("status %+v", st)
	}
	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	buf := new(bytes.Buffer)
	_, _ = buf.ReadFrom(mresp.Body)
	if !strings.Contains(buf.String(), "tern_in_messages_total 5") {
		t.Fatalf("metrics lack tern_in_messages_total 5:\n%s", buf.String())
	}
}

// TestFlowControlSlowsPublisherInsteadOfDropping publishes flat out to a subscriber
// that reads slowly: flow control must hold the publisher back so that nothing passes
// max_pending and nothing is dropped.
func TestFlowControlSlowsPublisherInsteadOfDropping(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxPayload = 4 << 10
		// A publisher held back waits at most MaxStall per read batch (64 KiB), so
		// the room between the stall threshold (512 KiB) and max_pending is how long
		// the subscriber may pause (descheduled on a busy machine) before a drop:
		// 3.5 MiB is about 0.5 s, past StuckAfter, where the server stops waiting
		// for it by design. (256 KiB left two read batches: 20 ms.)
		c.MaxPending = 4 << 20
	})
	sub, _ := connectRaw(t, s, 0)
	// A small receive buffer keeps the backlog in the server, where flow control
	// sees it, rather than in megabytes of autotuned kernel buffer: without flow
	// control the 20 MB published would overrun max_pending several times.
	if err := sub.nc.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	sub.send(wire.AppendSub(nil, 0, 1, "fc", "", ""))
	sub.sync()
	const n = 20000
	got := make(chan int, 1)
	go func() {
		count := 0
		for count < n {
			f, err := sub.read(10 * time.Second)
			if err != nil {
				break
			}
			if f.Type == wire.TypeMsg {
				count++
				if count%50 == 0 {
					time.Sleep(time.Millisecond) // a consumer slower than the publisher
				}
			}
		}
		got <- count
	}()
	pub, _ := connectRaw(t, s, 0)
	payload := make([]byte, 1024)
	var b []byte
	for i := 0; i < n; i++ {
		b = wire.AppendPub(b, 0, "fc", "", nil, payload)
		if len(b) > 64<<10 {
			pub.send(b)
			b = b[:0]
		}
	}
	pub.send(b)
	if count := <-got; count != n {
		t.Fatalf("subscriber got %d of %d; status %+v", count, n, s.Status())
	}
	if st := s.Status(); st.DroppedMsgs != 0 || st.SlowConsumers != 0 {
		t.Fatalf("flow control failed: %+v", st)
	}
}

// TestStoreDirTakenOnce: a second server on a store directory another one holds is
// refused before it opens anything there (streams or MQTT state); once the first
// shuts down the directory can be taken again.
func TestStoreDirTakenOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := func() Config {
		c := DefaultConfig()
		c.Host, c.Port, c.MQTTPort, c.StoreDir, c.KafkaPort = "127.0.0.1", 0, 0, dir, 0
		return c
	}
	first, err := New(cfg(), nil)
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	if _, err := New(cfg(), nil); !errors.Is(err, stream.ErrDirInUse) {
		t.Fatalf("a second server on the same store_dir: %v, want ErrDirInUse", err)
	}
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the refused server left %d goroutines running", runtime.NumGoroutine()-goroutines)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := New(cfg(), nil)
	if err != nil {
		t.Fatalf("after the first shut down: %v", err)
	}
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
