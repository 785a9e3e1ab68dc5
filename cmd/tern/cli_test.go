package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// TestMain keeps the tests away from the user's contexts and TERN_ variables.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tern-cli-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	for _, v := range []string{"TERN_URL", "TERN_UDP_KEY", "TERN_CONFIG", "TERN_MONITOR_URL"} {
		os.Unsetenv(v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runTern runs a command line in-process as the binary would, standard input from
// os.Stdin, and returns the command's error.
func runTern(ctx context.Context, stdout, stderr io.Writer, args ...string) error {
	_, err := execute(ctx, args, os.Stdin, stdout, stderr)
	return err
}

// Shorthands for one command, its options in args.
func subscribeAndPrint(ctx context.Context, args []string, out io.Writer) error {
	return runTern(ctx, out, io.Discard, append([]string{"sub"}, args...)...)
}
func runPub(ctx context.Context, args []string) error {
	return runTern(ctx, io.Discard, io.Discard, append([]string{"pub"}, args...)...)
}
func publish(ctx context.Context, args []string, out io.Writer) error {
	return runTern(ctx, out, io.Discard, append([]string{"pub"}, args...)...)
}
func request(ctx context.Context, args []string, out io.Writer) error {
	return runTern(ctx, out, io.Discard, append([]string{"req"}, args...)...)
}
func runReply(ctx context.Context, args []string) error {
	return runTern(ctx, io.Discard, io.Discard, append([]string{"reply"}, args...)...)
}
func streamCmd(ctx context.Context, args []string, out io.Writer) error {
	return runTern(ctx, out, io.Discard, append([]string{"stream"}, args...)...)
}
func consumerCmd(ctx context.Context, args []string, out io.Writer) error {
	return runTern(ctx, out, io.Discard, append([]string{"consumer"}, args...)...)
}
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTern(ctx, stdout, stderr, append([]string{"bench"}, args...)...)
}
func runUDPKeygen(args []string, out io.Writer) error {
	return runTern(context.Background(), out, io.Discard, append([]string{"udp-keygen"}, args...)...)
}

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
