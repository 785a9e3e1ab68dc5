package udp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/transport/udp"
)

// TestNativeProtocolOverUDP: the Go client reaches a real server over reliable UDP
// (udp:// URL, the native TCP port's number) and publishes, subscribes, requests and
// replies exactly as over TCP, beside a TCP client on the same subjects.
func TestNativeProtocolOverUDP(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UDPPort, c.HTTPAddr = 0, "127.0.0.1:0" })
	ua := s.UDPAddr()
	if ua == nil {
		t.Fatal("no UDP listener")
	}
	if ua.(*net.UDPAddr).Port != s.Addr().(*net.TCPAddr).Port {
		t.Fatalf("UDP on port %d, TCP on %d: want the same number", ua.(*net.UDPAddr).Port, s.Addr().(*net.TCPAddr).Port)
	}
	uc, err := tern.Connect("udp://" + ua.String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	tc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	relay(t, tc, uc, "over.udp", 5000)
	// Request from TCP, reply from UDP, and the other way round.
	if _, err := uc.Subscribe("svc.udp", func(m *tern.Msg) { _ = m.Respond(append([]byte("udp:"), m.Data...)) }); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Subscribe("svc.tcp", func(m *tern.Msg) { _ = m.Respond(append([]byte("tcp:"), m.Data...)) }); err != nil {
		t.Fatal(err)
	}
	_ = uc.Flush()
	_ = tc.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := tc.Request(ctx, "svc.udp", []byte("hi")); err != nil || string(r.Data) != "udp:hi" {
		t.Fatalf("TCP → UDP responder: %v %v", r, err)
	}
	if r, err := uc.Request(ctx, "svc.tcp", []byte("hi")); err != nil || string(r.Data) != "tcp:hi" {
		t.Fatalf("UDP → TCP responder: %v %v", r, err)
	}
	if got := uc.ConnectedURL(); got != "udp://"+ua.String() {
		t.Fatalf("ConnectedURL %q", got)
	}
	resp, err := http.Get("http://" + s.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tern_udp_sessions 1", "tern_udp_data_packets_total ", "tern_udp_coordination_packets_total ",
		`tern_udp_rtt_seconds{stat="max"} `, `tern_udp_cwnd_packets{stat="min"} `} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// TestNativeProtocolOverEncryptedUDP: a server with udp_key_file serves the native
// protocol over encrypted sessions to a client given its public key, and refuses a
// client without it.
func TestNativeProtocolOverEncryptedUDP(t *testing.T) {
	priv, err := udp.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "udp.key")
	if err := os.WriteFile(keyFile, []byte(priv.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, func(c *server.Config) { c.UDPPort, c.UDPKeyFile, c.HTTPAddr = 0, keyFile, "127.0.0.1:0" })
	url := "udp://" + s.UDPAddr().String()
	if _, err := tern.Connect(url, tern.NoReconnect()); !errors.Is(err, udp.ErrEncryptionRequired) {
		t.Fatalf("plaintext client: %v, want ErrEncryptionRequired", err)
	}
	pub := priv.Public()
	if _, err := tern.Connect(url, tern.UDPServerKey(pub[:31])); !errors.Is(err, tern.ErrBadOption) {
		t.Fatalf("short key: %v, want ErrBadOption", err)
	}
	text, err := tern.ParseUDPKey(pub.String())
	if err != nil {
		t.Fatal(err)
	}
	uc, err := tern.Connect(url, tern.UDPServerKey(text))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	tc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	relay(t, tc, uc, "sealed", 2000)
	if _, err := tc.Subscribe("svc.tcp", func(m *tern.Msg) { _ = m.Respond(append([]byte("tcp:"), m.Data...)) }); err != nil {
		t.Fatal(err)
	}
	_ = tc.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := uc.Request(ctx, "svc.tcp", bytes.Repeat([]byte("x"), 100<<10)); err != nil || len(r.Data) != 4+100<<10 {
		t.Fatalf("request over the encrypted session: %v", err)
	}
	resp, err := http.Get("http://" + s.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tern_udp_sessions 1", "tern_udp_forged_total 0", "tern_udp_replayed_total 0"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// relay publishes n messages on prefix.x from one connection and checks that the
// other, subscribed to prefix.>, gets them all in order.
func relay(t *testing.T, from, to *tern.Conn, prefix string, n int) {
	t.Helper()
	sub, err := to.SubscribeSync(prefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := to.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := from.Publish(prefix+".x", []byte(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(m.Data) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %q (out of order or lost)", i, m.Data)
		}
	}
}
