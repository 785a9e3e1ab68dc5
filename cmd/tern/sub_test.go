package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSubJSONFilterAndStdinPayload(t *testing.T) {
	s := startCLIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	var wg sync.WaitGroup
	var subErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = subscribeAndPrint(ctx, []string{"--server", s.URL(), "--json", "--count", "1",
			"--filter", `hdr.sender == "s2"`, "orders.*"}, &out)
	}()
	waitSubs(t, s, 1)
	if err := runPub(ctx, []string{"--server", s.URL(), "--header", "sender=s1", "orders.new", "skipped"}); err != nil {
		t.Fatal(err)
	}
	// Payload from stdin.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = stdin }()
	_, _ = w.WriteString("from stdin")
	w.Close()
	if err := runPub(ctx, []string{"--server", s.URL(), "--header", "sender=s2", "--reply", "back.here", "orders.new"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if subErr != nil {
		t.Fatal(subErr)
	}
	var got jsonMsg
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if got.Subject != "orders.new" || got.Reply != "back.here" || got.Data != "from stdin" || got.Size != 10 ||
		got.Headers.Get("sender") != "s2" || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("got %q", out.String())
	}
}

func TestSubRawStopsOnCancel(t *testing.T) {
	s := startCLIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- subscribeAndPrint(ctx, []string{"--server", s.URL(), "--raw", "--queue", "q", "raw.>"}, &out)
	}()
	waitSubs(t, s, 1)
	if err := runPub(context.Background(), []string{"--server", s.URL(), "--count", "3", "raw.x", "n{{i}}"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); strings.Count(out.String(), "\n") < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("output %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sub did not stop on cancel")
	}
	if out.String() != "n0\nn1\nn2\n" {
		t.Fatalf("raw output %q", out.String())
	}
}

func TestSubBadFilterFails(t *testing.T) {
	s := startCLIServer(t)
	err := subscribeAndPrint(context.Background(), []string{"--server", s.URL(), "--filter", "size >", "x"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "filter") {
		t.Fatalf("bad filter: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
