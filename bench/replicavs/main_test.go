package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/records"

	tern "github.com/tern-mq/tern/client/go"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis, as the kernel allows.
	stat := "4242 (tern (x) y) S 1 4242 4242 0 -1 4194560 1203 0 0 0 157 43 0 0 20 0 12 0 5000 1000000 2000 18446744073709551615"
	ticks, threads, err := parseStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if ticks != 200 || threads != 12 {
		t.Fatalf("ticks %d threads %d, want 200 and 12", ticks, threads)
	}
	if _, _, err := parseStat("4242 (tern) S 1 2"); err == nil {
		t.Error("short stat: no error")
	}
}

func TestSampleSelf(t *testing.T) {
	s, err := sampleProc(os.Getpid())
	if err != nil {
		t.Skip("no /proc:", err)
	}
	if s.rssKiB == 0 || s.threads == 0 {
		t.Fatalf("%+v", s)
	}
	u, err := measure(context.Background(), []string{"self"}, []int{os.Getpid()}, 300*time.Millisecond, 100*time.Millisecond, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Nodes) != 1 || u.WindowS < 0.3 || u.Nodes[0].RSSMiB <= 0 || u.Nodes[0].SliceMinPct > u.Nodes[0].SliceMaxPct {
		t.Fatalf("%+v", u)
	}
}

func TestPayload(t *testing.T) {
	b := payload(1234, 64)
	if len(b) != 64 || !bytes.HasPrefix(b, []byte("00001234.")) {
		t.Fatalf("%q", b)
	}
	if i, ok := payloadIndex(b); !ok || i != 1234 {
		t.Fatalf("index %d %v", i, ok)
	}
	if _, ok := payloadIndex([]byte("x")); ok {
		t.Error("short payload parsed")
	}
}

func TestErrKind(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("publish: %w", tern.ErrNoResponders): "no responders",
		fmt.Errorf("ack: %w", tern.ErrTimeout):          "ack timeout",
		&tern.APIError{Code: 503, Description: "x"}:     "api error 503",
		tern.ErrConnectionLost:                          "disconnected",
		errors.New(strings.Repeat("z", 100)):            strings.Repeat("z", 60) + "...",
	} {
		if got := errKind(err); got != want {
			t.Errorf("errKind(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestSummarizeAndCheck: a kill at t=1000 ms; message 0 acked before it, 1 in flight
// at the kill and acked by a retry, 2 and 3 sent after it, 4 never acked; the read
// back has 0 twice, lacks 2, and has 4 though it was never acked.
func TestSummarizeAndCheck(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * 1e6) }
	msgs := []msgState{
		{firstSent: ms(900), ackAt: ms(901), ackSent: ms(900), attempts: 1},
		{firstSent: ms(999), ackAt: ms(1700), ackSent: ms(1100), attempts: 2, dup: true},
		{firstSent: ms(1001), ackAt: ms(1500), ackSent: ms(1450), attempts: 3},
		{firstSent: ms(1002), ackAt: ms(1400), ackSent: ms(1002), attempts: 1},
		{firstSent: ms(1003), attempts: 9, failed: "no responders"},
	}
	var errs errLog
	errs.add(tern.ErrNoResponders, ms(1001), ms(1001))
	errs.add(tern.ErrNoResponders, ms(1300), ms(1300))
	errs.add(tern.ErrTimeout, ms(6200), ms(1200))
	var res failoverResult
	summarize(&res, msgs, &errs, ms(1000))
	if res.Acked != 4 || res.AckedDuplicate != 1 || res.Retried != 3 || res.Failed != 1 || res.FailedKinds["no responders"] != 1 {
		t.Fatalf("counts %+v", res)
	}
	if res.FirstAckMs != 400 { // message 3: sent after the kill, acked at 1400
		t.Errorf("first ack %v ms", res.FirstAckMs)
	}
	if res.InFlightDoneMs != 700 {
		t.Errorf("in flight done %v ms", res.InFlightDoneMs)
	}
	// Acks up to the last first send (1003 ms): only message 0's, so no gap; the
	// later ones are the tail.
	if res.LongestGapMs != 0 {
		t.Errorf("gap %v ms", res.LongestGapMs)
	}
	if res.MaxLatencyMs != 701 || res.Delayed != 0 {
		t.Errorf("max latency %v, delayed %d", res.MaxLatencyMs, res.Delayed)
	}
	if res.Errors["no responders"] != 2 || res.Errors["ack timeout"] != 1 || res.FirstErrorMs != 1 || res.LastErrorMs != 5200 {
		t.Errorf("errors %v %v %v", res.Errors, res.FirstErrorMs, res.LastErrorMs)
	}
	if len(res.TimeoutsSentMs) != 1 || res.TimeoutsSentMs[0] != 200 {
		t.Errorf("timeouts sent at %v", res.TimeoutsSentMs)
	}
	check(&res, msgs, []int{2, 1, 0, 1, 1})
	if res.Duplicated != 1 || res.Lost != 1 || res.StoredUnacked != 1 {
		t.Fatalf("check %+v", res)
	}
}

func TestReports(t *testing.T) {
	dir := t.TempDir()
	fo := filepath.Join(dir, "failover.jsonl")
	for _, r := range []failoverResult{
		{System: "JetStream", Version: "2.15.2", Run: 1, ClientOn: "follower", Rate: 2000, DurationS: 20, KillAtS: 10, Messages: 10, Acked: 10, FirstAckMs: 4500},
		{System: "Tern", Version: "0.1.0-dev", Run: 1, ClientOn: "follower", Rate: 2000, DurationS: 20, KillAtS: 10, Messages: 10, Acked: 10, FirstAckMs: 500, Errors: map[string]int{"no responders": 7}},
		{System: "Tern", Run: 2, ClientOn: "follower", Error: "boom"},
		{System: "Tern", Version: "0.1.0-dev", Run: 1, ClientOn: "leader", Rate: 2000, DurationS: 20, KillAtS: 10, Messages: 10, Acked: 9, Failed: 1, FirstAckMs: 700, ClientReconnectedMs: 3},
	} {
		if err := records.Append(fo, r); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	js := filepath.Join(dir, "s.json")
	if err := run(context.Background(), []string{"report", "failover", "--in", fo, "--json", js}, &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	md := out.String()
	for _, want := range []string{
		"| figure | Tern 0.1.0-dev | JetStream 2.15.2 |",
		"| runs (completed of all) | 1 of 2 | 1 of 1 |",
		"| kill → first ack of a publish sent after it, ms | 500 | 4500 |",
		"Tern: errors the client returned, all runs: no responders 7",
		"Tern: a run did not complete: run 2: boom",
		"| kill → client connected to another node, ms | 3 |",
		"| **errors left after retries** (all runs) | 1 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("failover report lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "follower node") > strings.Index(md, "leader node") {
		t.Error("leader placement before follower")
	}

	idle := filepath.Join(dir, "idle.jsonl")
	for _, r := range []idleResult{
		{System: "JetStream", Version: "2.15.2", Run: 1, Streams: 1000, Replicas: 3, CreateS: 60, LedS: 70,
			Idle: &usage{WindowS: 60, TotalCPUPct: 30, TotalRSSMiB: 600, Nodes: []nodeUsage{{CPUPct: 10, RSSMiB: 200, SliceMaxPct: 12}, {CPUPct: 10, RSSMiB: 200}, {CPUPct: 10, RSSMiB: 200}}}},
		{System: "Tern", Version: "0.1.0-dev", Run: 1, Streams: 1000, Replicas: 3, CreateS: 20, LedS: 21,
			Baseline: &usage{TotalCPUPct: 3, TotalRSSMiB: 70},
			Idle:     &usage{WindowS: 60, TotalCPUPct: 6, TotalRSSMiB: 300, Nodes: []nodeUsage{{CPUPct: 2, RSSMiB: 100}, {CPUPct: 2, RSSMiB: 100}, {CPUPct: 2, RSSMiB: 100}}}},
	} {
		if err := records.Append(idle, r); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"report", "idle", "--in", idle}, &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	md = out.String()
	for _, want := range []string{
		"| | Tern 0.1.0-dev CPU % | Tern RSS MiB | JetStream 2.15.2 CPU % | JetStream RSS MiB |",
		"| node 1 | 2.00 | 100 | 10.00 | 200 |",
		"| **total** | **6.00** | **300** | **30.00** | **600** |",
		"| total with no stream (baseline) | 3.00 | 70 | – | – |",
		"| making the streams, s | 20.0 | 60.0 |",
		"busiest slice (10 s unless --slice) of any node, % of a core | 0.00 | 12.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("idle report lacks %q:\n%s", want, md)
		}
	}
}
