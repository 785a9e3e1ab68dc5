package udp_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/netns"
	"github.com/tern-mq/tern/internal/server"
)

// TestNativeBlackout: Go clients on udp:// ride out a 10 s blackout between their
// namespace and the server's (shorter than the idle timeout) without reconnecting:
// every core message published before, during and after it reaches the subscriber
// once and in order, and every stream publish waiting for its acknowledgement is
// stored once and acknowledged after the link returns.
func TestNativeBlackout(t *testing.T) {
	t.Parallel() // mostly waiting out the blackout, as TestNetnsBlackout does
	if os.Getenv("TERN_NO_NETNS") == "1" {
		t.Skip("TERN_NO_NETNS=1")
	}
	path, err := netns.NewPair("tern-nat", 196)
	if err != nil {
		t.Fatalf("%v (TERN_NO_NETNS=1 skips this test)", err)
	}
	defer path.Close()
	const port = 17480
	var srv *server.Server
	if err := netns.In(path.B, func() error {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = path.AddrB, port, "", -1, -1, 0
		cfg.KafkaPort = -1
		cfg.StoreDir = t.TempDir()
		cfg.Anonymous = "all" // the clients are in another network namespace
		if srv, err = server.New(cfg, nil); err != nil {
			return err
		}
		return srv.Start()
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	url := fmt.Sprintf("udp://%s:%d", path.AddrB, port)
	var pub, sub *tern.Conn
	if err := netns.In(path.A, func() error {
		var err error
		if pub, err = tern.Connect(url, tern.Name("pub")); err != nil {
			return err
		}
		sub, err = tern.Connect(url, tern.Name("sub"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	defer sub.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := pub.Streams(tern.APITimeout(30 * time.Second))
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "BO", Subjects: []string{"bo.acked"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]string{}
	if _, err := sub.Subscribe("bo.*", func(m *tern.Msg) {
		mu.Lock()
		got[m.Subject] = append(got[m.Subject], string(m.Data))
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}

	const core, acked = 300, 30
	var futures []*tern.PubAckFuture
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if err := pub.Publish("bo.core", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
			if i%(core/acked) == 0 {
				f, err := js.PublishAsync("bo.acked", []byte(fmt.Sprint(i/(core/acked))))
				if err != nil {
					t.Fatal(err)
				}
				futures = append(futures, f)
			}
		}
	}
	publish(0, core/3)
	if err := path.Blackout("udp", true); err != nil {
		t.Fatal(err)
	}
	publish(core/3, 2*core/3)
	time.Sleep(10 * time.Second)
	if err := path.Blackout("udp", false); err != nil {
		t.Fatal(err)
	}
	publish(2*core/3, core)
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("acknowledged publish %d: %v", i, err)
		}
	}
	want := func(subject string, n int) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			msgs := append([]string(nil), got[subject]...)
			mu.Unlock()
			if len(msgs) >= n || time.Now().After(deadline) {
				if len(msgs) != n {
					t.Fatalf("%s: %d messages, want %d", subject, len(msgs), n)
				}
				for i, m := range msgs {
					if m != fmt.Sprint(i) {
						t.Fatalf("%s: message %d is %q", subject, i, m)
					}
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("bo.core", core)
	want("bo.acked", acked)
	info, err := js.StreamInfo(ctx, "BO")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != acked {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, acked)
	}
	if pub.Stats().Reconnects != 0 || sub.Stats().Reconnects != 0 {
		t.Fatal("a client reconnected: the session did not ride out the blackout")
	}
	if st, _ := pub.TransportStats(); st.Retransmits == 0 {
		t.Fatalf("no retransmissions across a blackout: %+v", st)
	}
}
