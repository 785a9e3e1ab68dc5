package tern_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// startUDPServer runs a server on 127.0.0.1:port (TCP and UDP) with its streams in
// dir; port 0 picks a free one.
func startUDPServer(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = "127.0.0.1", port, "", -1, -1, 0
	cfg.StoreDir, cfg.KafkaPort = dir, -1
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func stopServer(t *testing.T, s *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestUDPDurableConsumerAcrossBrokerRestart: clients on udp:// with a durable stream
// consumer get, after the broker restarts, everything they had not acknowledged and
// everything published while they were reconnecting — once each, in order — and a
// publisher that retries its acknowledged publishes with message ids duplicates
// nothing.
func TestUDPDurableConsumerAcrossBrokerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startUDPServer(t, 0, dir)
	port := s.Addr().(*net.TCPAddr).Port
	url := "udp://127.0.0.1:" + strconv.Itoa(port)
	opts := []tern.Option{tern.ReconnectWait(20 * time.Millisecond), tern.MaxReconnects(-1), tern.Timeout(time.Second)}
	pub, err := tern.Connect(url, append(opts, tern.Name("pub"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := tern.Connect(url, append(opts, tern.Name("sub"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pjs, sjs := pub.Streams(tern.APITimeout(time.Second)), sub.Streams(tern.APITimeout(time.Second))
	if _, err := pjs.AddStream(ctx, tern.StreamConfig{Name: "TELEMETRY", Subjects: []string{"dev.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sjs.AddConsumer(ctx, "TELEMETRY", tern.ConsumerConfig{Durable: "dash", AckPolicy: "explicit"}); err != nil {
		t.Fatal(err)
	}
	// publish retries until the broker acknowledges; the message id makes a retry
	// of a publish that was stored but not acknowledged a duplicate the stream drops.
	publish := func(i int) {
		for {
			_, err := pjs.Publish(ctx, "dev.t1", []byte(strconv.Itoa(i)), tern.MsgID(fmt.Sprintf("m-%d", i)))
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const total = 200
	for i := 1; i <= total/2; i++ {
		publish(i)
	}
	pull := sjs.Pull("TELEMETRY", "dash")
	defer pull.Close()
	next := 1
	// fetch takes messages until it has up to want, acknowledging each, and checks
	// they continue the sequence.
	fetch := func(want int) {
		for next <= want {
			msgs, err := pull.Fetch(ctx, 50, tern.FetchMaxWait(500*time.Millisecond))
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				if ctx.Err() != nil {
					t.Fatalf("fetch: %v", err)
				}
				time.Sleep(20 * time.Millisecond) // the link is down or coming back
				continue
			}
			for _, m := range msgs {
				if got, _ := strconv.Atoi(string(m.Data)); got != next {
					t.Fatalf("got message %q, want %d", m.Data, next)
				}
				next++
				if err := m.AckSync(ctx); err != nil {
					t.Fatalf("ack %d: %v", next-1, err)
				}
			}
		}
	}
	fetch(total / 4) // half of what is stored is acknowledged before the restart

	stopServer(t, s)
	s = startUDPServer(t, port, dir)
	defer stopServer(t, s)
	for i := total/2 + 1; i <= total; i++ {
		publish(i)
	}
	fetch(total)
	info, err := sjs.StreamInfo(ctx, "TELEMETRY")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, total)
	}
	if st, ok := sub.TransportStats(); !ok || st.DataPackets == 0 {
		t.Fatalf("transport stats %+v %v", st, ok)
	}
	if pub.Stats().Reconnects == 0 || sub.Stats().Reconnects == 0 {
		t.Fatal("the clients did not reconnect")
	}
}
