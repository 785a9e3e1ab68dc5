package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

func TestReqTimesOutWithoutAnswer(t *testing.T) {
	s := startCLIServer(t)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A subscriber that never answers.
	if _, err := nc.Subscribe("silent", func(*tern.Msg) {}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = request(context.Background(), []string{"--server", s.URL(), "--timeout", "200ms", "silent", "hello?"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no reply") {
		t.Fatalf("got %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}

func TestReplyAnswersWithHeadersAndQueue(t *testing.T) {
	s := startCLIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			done <- runReply(ctx, []string{"--server", s.URL(), "--queue", "svc", "--count", "2", "calc.*", "got {{request}}"})
		}()
	}
	waitSubs(t, s, 2)
	for i := 0; i < 4; i++ {
		var out bytes.Buffer
		if err := request(ctx, []string{"--server", s.URL(), "--header", "a=b", "calc.add", "1+1"}, &out); err != nil {
			t.Fatal(err)
		}
		if out.String() != "got 1+1\n" {
			t.Fatalf("reply %q", out.String())
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("responder did not stop after --count")
		}
	}
}
