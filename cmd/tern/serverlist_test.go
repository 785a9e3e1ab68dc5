package main

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// TestServerListSkipsADeadServer: --server takes several comma-separated URLs and a
// command connects to the first that answers.
func TestServerListSkipsADeadServer(t *testing.T) {
	s := startCLIServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tern://" + l.Addr().String()
	l.Close()
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("svc.echo", func(m *tern.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := request(ctx, []string{"--server", dead + "," + s.URL(), "svc.echo", "hi"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hi\n" {
		t.Fatalf("reply %q", out.String())
	}
}
