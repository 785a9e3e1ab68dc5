package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// internalSubs holds, per test server, the subscriptions the server made for itself
// (the stream API), so waitSubs counts only the clients'.
var internalSubs sync.Map

func startCLIServer(t *testing.T) *server.Server {
	s := servertest.Start(t, nil)
	internalSubs.Store(s, s.Broker().Count())
	return s
}

func waitSubs(t *testing.T, s *server.Server, n int) {
	t.Helper()
	base, _ := internalSubs.Load(s)
	n += base.(int)
	for deadline := time.Now().Add(5 * time.Second); s.Broker().Count() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions, want %d", s.Broker().Count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPubReachesSub(t *testing.T) {
	s := startCLIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	var wg sync.WaitGroup
	var subErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = subscribeAndPrint(ctx, []string{"--server", s.URL(), "--count", "2", "sensors.>"}, &out)
	}()
	waitSubs(t, s, 1)
	if err := runPub(ctx, []string{"--server", s.URL(), "--header", "sender=s1", "--count", "2", "sensors.k1.temp", "reading {{i}}"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if subErr != nil {
		t.Fatal(subErr)
	}
	got := out.String()
	for _, want := range []string{"[#1] sensors.k1.temp (9 B)", "sender: s1", "reading 0", "[#2] sensors.k1.temp", "reading 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("sub output lacks %q:\n%s", want, got)
		}
	}
}

func TestReqAndReply(t *testing.T) {
	s := startCLIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	replyDone := make(chan error, 1)
	go func() {
		replyDone <- runReply(ctx, []string{"--server", s.URL(), "--count", "1", "time.now", "it is {{request}}"})
	}()
	waitSubs(t, s, 1)
	var out bytes.Buffer
	if err := request(ctx, []string{"--server", s.URL(), "time.now", "noon"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "it is noon\n" {
		t.Fatalf("reply %q", out.String())
	}
	if err := <-replyDone; err != nil {
		t.Fatal(err)
	}
	err := request(ctx, []string{"--server", s.URL(), "nobody.here"}, &out)
	if err == nil || !strings.Contains(err.Error(), "no responders") {
		t.Fatalf("request without responder: %v", err)
	}
}
