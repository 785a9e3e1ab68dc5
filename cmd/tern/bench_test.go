package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// benchFlags parses tern bench's options as the command does before a run.
func benchFlags(args []string) (server, jsonPath string, cfg loadgen.Config, err error) {
	var o benchOpts
	cmd := newBenchCmd(&o)
	if err = cmd.ParseFlags(args); err != nil {
		return
	}
	if err = cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return
	}
	err = o.finish(cmd)
	return o.cf.server, o.jsonPath, o.cfg, err
}

func TestBenchFlags(t *testing.T) {
	srv, js, cfg, err := benchFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv != "tern://127.0.0.1:7400" || js != "" || cfg.Mode != "pubsub" || cfg.Pubs != 1 || cfg.Subs != 1 || cfg.Size != 128 || cfg.Msgs != 100000 || cfg.Duration != 0 {
		t.Fatalf("defaults: %q %q %+v", srv, js, cfg)
	}
	_, _, cfg, err = benchFlags([]string{"--mode", "queue", "--duration", "2s", "--subs", "4", "--queue", "q", "--rate", "50", "--subject", "s.x"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != "queue" || cfg.Msgs != 0 || cfg.Duration != 2*time.Second || cfg.Subs != 4 || cfg.Queue != "q" || cfg.Rate != 50 || cfg.Subject != "s.x" {
		t.Fatalf("a timed run without --msgs should have no count: %+v", cfg)
	}
	_, _, cfg, _ = benchFlags([]string{"--duration", "2s", "--msgs", "10"})
	if cfg.Msgs != 10 || cfg.Duration != 2*time.Second {
		t.Fatalf("both bounds: %+v", cfg)
	}
	t.Setenv("TERN_URL", "tern://127.0.0.2:7400")
	if srv, _, _, _ := benchFlags(nil); srv != "tern://127.0.0.2:7400" {
		t.Fatalf("TERN_URL not used: %q", srv)
	}
	if srv, _, _, _ := benchFlags([]string{"--server", "tern://127.0.0.3:7400"}); srv != "tern://127.0.0.3:7400" {
		t.Fatalf("--server does not beat TERN_URL: %q", srv)
	}
	if _, _, _, err := benchFlags([]string{"extra"}); err == nil {
		t.Fatal("an extra argument was accepted")
	}
	if _, _, _, err := benchFlags([]string{"--mode", "fastest"}); err == nil || !strings.Contains(err.Error(), `"fastest" is not one of pub, pubsub, queue, reqrep, streampub, streamconsume`) {
		t.Fatalf("bad mode: %v", err)
	}
}

func TestBenchHelp(t *testing.T) {
	var out bytes.Buffer
	if err := runTern(t.Context(), &out, io.Discard, "bench", "--help"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--server", "--context", "--mode", "--subject", "--pubs", "--subs", "--size", "--msgs", "--duration", "--rate", "--json", "--queue", "--timeout", "pubsub", "reqrep", "(default 100000)"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s:\n%s", f, out.String())
		}
	}
}

func TestBenchNoServer(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runBench(context.Background(), []string{"--server", "tern://127.0.0.1:1", "--msgs", "10"}, &stdout, &stderr)
	if err == nil {
		t.Fatal("no error without a server")
	}
	if stdout.Len() != 0 {
		t.Fatalf("printed a result without a run:\n%s", stdout.String())
	}
}

func startTestServer(t *testing.T) string {
	t.Helper()
	s := servertest.Start(t, nil)
	return "tern://" + s.Addr().String()
}

func TestBenchAgainstServer(t *testing.T) {
	url := startTestServer(t)
	dir := t.TempDir()
	for _, mode := range loadgen.Modes {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(dir, mode+".json")
			var stdout, stderr bytes.Buffer
			args := []string{"--server", url, "--mode", mode, "--subs", "2", "--msgs", "2000", "--size", "64", "--json", path}
			if err := runBench(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("bench: %v\n%s%s", err, stderr.String(), stdout.String())
			}
			if !strings.Contains(stdout.String(), "/s") {
				t.Fatalf("no summary:\n%s", stdout.String())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var res loadgen.Result
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			want := uint64(2000)
			if mode == loadgen.ModePubSub {
				want = 4000
			}
			if res.Sent != 2000 || res.Received != want || res.Errors != 0 {
				t.Fatalf("sent %d received %d errors %d, want 2000 %d 0:\n%s", res.Sent, res.Received, res.Errors, want, b)
			}
		})
	}
}

// TestBenchOverUDP: a run over udp:// reports the transport's counters, in the
// summary and in the JSON.
func TestBenchOverUDP(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UDPPort = 0 })
	url := "udp://" + s.UDPAddr().String()
	path := filepath.Join(t.TempDir(), "udp.json")
	var stdout, stderr bytes.Buffer
	args := []string{"--server", url, "--mode", "pubsub", "--msgs", "20000", "--size", "16", "--json", path}
	if err := runBench(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s%s", err, stderr.String(), stdout.String())
	}
	if !strings.Contains(stdout.String(), "udp (client side):") {
		t.Fatalf("no transport counters:\n%s", stdout.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res loadgen.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	tr := res.Transport
	if res.Received != 20000 || tr == nil || tr.DataPackets == 0 || tr.DataPackets > 20000 || tr.MaxRTT <= 0 {
		t.Fatalf("received %d, transport %+v", res.Received, tr)
	}
	// TCP reports none.
	stdout.Reset()
	tcpArgs := []string{"--server", "tern://" + s.Addr().String(), "--msgs", "100"}
	if err := runBench(context.Background(), tcpArgs, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "udp") {
		t.Fatalf("transport counters over TCP:\n%s", stdout.String())
	}
}
