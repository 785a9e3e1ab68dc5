package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-mq/tern/internal/server/servertest"
)

func TestSpreadAndFormatting(t *testing.T) {
	if s := spreadOf([]float64{3, 1, 2}); s != (spread{Median: 2, Min: 1, Max: 3}) {
		t.Fatalf("odd: %+v", s)
	}
	if s := spreadOf([]float64{4, 1, 2, 3}); s != (spread{Median: 2.5, Min: 1, Max: 4}) {
		t.Fatalf("even: %+v", s)
	}
	if s := spreadOf(nil); s != (spread{}) {
		t.Fatalf("empty: %+v", s)
	}
	for v, want := range map[float64]string{5_123_000: "5.12M", 812_345: "812k", 20_000: "20.0k", 999: "999", 4.5: "4.50"} {
		if got := rate(v); got != want {
			t.Errorf("rate(%v) = %q, want %q", v, got, want)
		}
	}
	if got := sizeLabel(1024); got != "1 KiB" {
		t.Errorf("sizeLabel(1024) = %q", got)
	}
	if got := sizeLabel(16); got != "16 B" {
		t.Errorf("sizeLabel(16) = %q", got)
	}
}

func TestMatrixRows(t *testing.T) {
	rows := matrix(1)
	keys := map[string]bool{}
	for _, r := range rows {
		if keys[r.Key] {
			t.Fatalf("duplicate row key %s", r.Key)
		}
		keys[r.Key] = true
		if r.Cfg.Msgs <= 0 || (r.Cfg.Size != 16 && r.Cfg.Size != 1024) {
			t.Fatalf("row %s: %+v", r.Key, r.Cfg)
		}
	}
	for _, k := range []string{"pub-16", "pub-1k", "pubsub1-16", "pubsub4-1k", "queue4-16", "reqrep-1k"} {
		if !keys[k] {
			t.Errorf("matrix lacks %s", k)
		}
	}
	if got := selectRows(rows, "reqrep, pub-16"); len(got) != 3 {
		t.Fatalf("selectRows: %d rows", len(got))
	}
	if got := selectRows(rows, "pub"); len(got) != 2 || got[0].Key != "pub-16" || got[1].Key != "pub-1k" {
		t.Fatalf("selectRows(pub) = %v", got)
	}
}

// TestRunAgainstTern runs a tiny matrix against an in-process Tern server (NATS left
// out) and checks the Markdown and JSON outputs.
func TestRunAgainstTern(t *testing.T) {
	s := servertest.Start(t, nil)
	path := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	args := []string{"--nats", "", "--tern", "tern://" + s.Addr().String(), "--runs", "2", "--scale", "0.002",
		"--pause", "0s", "--quiet-wait", "0", "--only", "pubsub4-16,queue4-1k,reqrep-16", "--json", path}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"| workload | size | NATS msgs/s | Tern msgs/s |", "1 pub → 4 subs", "queue group of 4", "request/reply", "Latency detail"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("a run failed:\n%s\n%s", out, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 || rep.Runs != 2 {
		t.Fatalf("%d rows, %d runs", len(rep.Rows), rep.Runs)
	}
	for _, r := range rep.Rows {
		o := r.Systems["tern"]
		if o == nil || len(o.Results) != 2 || o.MsgsPerSec.Median <= 0 {
			t.Fatalf("row %s: %+v", r.Key, o)
		}
	}
}
