package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tern-mq/tern/bench/internal/jsbus/jstest"
	"github.com/tern-mq/tern/internal/server/servertest"
)

func TestListAndErrors(t *testing.T) {
	var out, errw bytes.Buffer
	if err := run(context.Background(), []string{"--list", "--replay-bytes", "4MiB", "--only", "fetch,replay1g"}, &out, &errw); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "fetch16") || !strings.HasPrefix(lines[2], "replay1g") || !strings.Contains(lines[2], "4,096 msgs") {
		t.Fatalf("--list:\n%s", out.String())
	}
	// (--drivers tern alone would reach whatever listens on the default port; the
	// unreachable case is checked below with a port nothing listens on.)
	for _, args := range [][]string{
		{"--drivers", "rabbit"},
		{"--drivers", ""},
		{"--only", "nothing"},
		{"--runs", "0"},
		{"--replay-bytes", "x"},
		{"--window", "0"},
		{"--replicas", "0"},
		{"--replicas", "7"},
		{"extra"},
	} {
		if err := run(context.Background(), args, &out, &errw); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	err := run(context.Background(), []string{"--drivers", "tern", "--tern-url", "tern://127.0.0.1:1"}, &out, &errw)
	if err == nil || !strings.Contains(err.Error(), "Tern at tern://127.0.0.1:1") {
		t.Errorf("an unreachable Tern server: %v", err)
	}
}

// TestMatrixAgainstJetStream runs the whole matrix, tiny, against a nats-server -js
// started for the test and an in-process Tern server, and checks the tables and the
// JSON.
func TestMatrixAgainstJetStream(t *testing.T) {
	s := jstest.Start(t)
	ts := servertest.Start(t, nil)
	jsonPath := filepath.Join(t.TempDir(), "results.json")
	var out, errw bytes.Buffer
	args := []string{"--drivers", "js,tern", "--js-url", s.URL, "--js-pid", strconv.Itoa(s.Pid),
		"--tern-url", ts.URL(), "--tern-pid", strconv.Itoa(os.Getpid()), "--runs", "2", "--scale", "0.005",
		"--replay-bytes", "2MiB", "--json", jsonPath, "--quiet-wait", "0", "--pause", "0", "--ack-all"}
	if err := run(context.Background(), args, &out, &errw); err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	md := out.String()
	for _, want := range []string{"JetStream msgs/s", "Tern msgs/s", "pubasync16", "pubasync1k", "pubsync", "fetch16", "fetch1k", "replay1g", "workqueue", "workqueue1k",
		"ack-all per batch", "publish → consumer", "Server memory", "RSS ready"} {
		if !strings.Contains(md, want) {
			t.Errorf("tables lack %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "FAILED") || strings.Contains(md, "Failed runs") {
		t.Errorf("failed runs:\n%s\n%s", md, errw.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 8 || rep.Servers["js"] == nil || rep.Servers["js"].Version == "" || rep.Servers["tern"] == nil {
		t.Fatalf("JSON: %d rows, servers %+v", len(rep.Rows), rep.Servers)
	}
	for _, r := range rep.Rows {
		for _, sys := range []string{"js", "tern"} {
			o := r.Systems[sys]
			if o == nil || len(o.Results) != 2 || len(o.Failures) != 0 || o.MsgsPerSec.Median <= 0 || len(o.Memory) != 2 || o.Memory[0].RSSDoneKB <= 0 {
				t.Errorf("row %s, %s: %+v", r.Key, sys, o)
				continue
			}
			for _, res := range o.Results {
				if res.Missing() != 0 || res.Duplicates != 0 || res.Errors != 0 {
					t.Errorf("row %s, %s: %s", r.Key, sys, res)
				}
			}
		}
	}
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	rep := report{Date: "2026-01-01T00:00:00Z", Runs: 1, Scale: 1, ReplayBytes: 1 << 30,
		Servers: map[string]*system{"js": {Name: "JetStream", Version: "2.9.10", URL: "nats://x"}},
		Rows: []*rowReport{{Key: "workqueue", Workload: "work queue", Kind: "workqueue", Size: 16, Msgs: 10, Window: 4096, Batch: 256, Consumers: 4,
			Systems: map[string]*outcome{"js": {Failures: []string{"boom"}}}}}}
	b, _ := json.Marshal(rep)
	streams := filepath.Join(dir, "s.json")
	rabbit := filepath.Join(dir, "r.json")
	if err := os.WriteFile(streams, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rabbit, []byte(`{"date":"2026-01-01T00:00:00Z","server":{"version":"3.10.8","erlang":"25","rss_kb_start":1000,"rss_kb_end":2000,"hwm_kb":3000},
		"workload":{"producers":1,"consumers":4,"confirm_window":4096,"prefetch":256,"multi_ack_every":64,"seconds_per_run":10,"runs":3},
		"rows":[{"queue_type":"quorum","size":1024,"ok_runs":3,"failed_runs":0,"published_per_sec":{"median":12000,"min":11000,"max":13000},
		"consumed_per_sec":{"median":11900,"min":11000,"max":13000},"consumer_latency_p50_us":{"median":300000,"min":1,"max":2},
		"consumer_latency_p99_us":{"median":600000,"min":1,"max":2},"confirm_latency_p50_us":{"median":1,"min":1,"max":1},"confirm_latency_p99_us":{"median":1,"min":1,"max":1}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	if err := run(context.Background(), []string{"--report", streams, "--rabbit", rabbit}, &out, &errw); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"JetStream 2.9.10", "FAILED", "boom", "RabbitMQ durable work queue", "| quorum | 1 KiB | 12.0k (11.0k–13.0k) | 11.9k",
		"side by side", "multi-ack every 64", "300.00ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), []string{"--rabbit", rabbit}, &out, &errw); err == nil {
		t.Error("--rabbit without --report accepted")
	}
}
