package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/tern-mq/tern/bench/internal/stats"
)

func TestAPIMatrix(t *testing.T) {
	rows := apiMatrix(0.1, []int{1000, 10000}, 100)
	seen := map[string]bool{}
	kinds := map[string]int{}
	for _, r := range rows {
		if seen[r.Key] {
			t.Errorf("row key %s twice", r.Key)
		}
		seen[r.Key] = true
		kinds[r.Kind]++
		if r.Msgs < 1 {
			t.Errorf("%s: %d records", r.Key, r.Msgs)
		}
		if r.Kind == kindE2E && (r.Throughput <= 0 || r.Warmup <= 0 || r.Warmup > r.Throughput) {
			t.Errorf("%s: rate %d, warm-up %d", r.Key, r.Throughput, r.Warmup)
		}
	}
	if kinds[kindProduce] != 4 || kinds[kindReplay] != 1 || kinds[kindE2E] != 2 || kinds[kindFranzProduce] != 1 || kinds[kindFranzConsume] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
	for _, k := range []string{"produce100-acks1", "produce100-acksall", "produce1k-acks1", "produce1k-acksall", "consume1k", "franz100-acksall", "franzconsume1k", "e2e100-1000", "e2e100-10000"} {
		if !seen[k] {
			t.Errorf("no row %s", k)
		}
	}
	if r := apiMatrix(0.1, []int{10000}, 100)[7]; r.Kind != kindE2E || r.Msgs != 10000 {
		t.Errorf("e2e at 10k/s, scale 0.1: %d records, want 10,000 (10 s times the scale)", r.Msgs)
	}
}

func TestHWM(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	sum, each := readHWM([]int{pid})
	if sum <= 0 || len(each) != 1 || each[0] != sum {
		t.Fatalf("VmHWM %d %v", sum, each)
	}
	resetHWM([]int{pid}) // may be refused; readHWM must still work
	if g := exited([]int{pid, 1 << 30}); len(g) != 1 || g[0] != 1<<30 {
		t.Errorf("exited: %v", g)
	}
	if s, _ := readHWM([]int{pid, 1 << 30}); s <= 0 {
		t.Fatalf("VmHWM with a missing pid: %d", s)
	}
}

func TestAPIReport(t *testing.T) {
	out := func(key, kind string, rate, p99 float64) *apiOutcome {
		o := &apiOutcome{kafkaRow: kafkaRow{Key: key, Kind: kind, Workload: key, Size: 100, Msgs: 1000},
			rowRuns: rowRuns{Results: []kafkaResult{{MsgsPerSec: rate}}}}
		o.MsgsPerSec = stats.Spread{Median: rate, Min: rate, Max: rate}
		o.P99US = stats.Spread{Median: p99, Min: p99, Max: p99}
		o.HWMKiB = stats.Spread{Median: 2048, Min: 2048, Max: 2048}
		return o
	}
	rep := func(sys string, nodes int, rows ...*apiOutcome) *apiReport {
		return &apiReport{System: apiSystem{Key: sys, Name: map[string]string{"kafka": "Kafka", "tern": "Tern"}[sys], Nodes: nodes,
			Partitions: 1, ReplicationFactor: 1, HWMReset: true}, Runs: 1, Rows: rows, LoadAvg: []float64{0.5}}
	}
	reps := []*apiReport{
		rep("kafka", 1, out("p", kindProduce, 100_000, 10_000), out("c", kindReplay, 50_000, 0), out("e", kindE2E, 1000, 2000)),
		rep("tern", 1, out("p", kindProduce, 200_000, 4000), out("c", kindReplay, 60_000, 0), out("e", kindE2E, 1000, 1500)),
	}
	var b bytes.Buffer
	writeAPIReport(&b, reps)
	s := b.String()
	for _, want := range []string{
		"### One node",
		"| p | 100 B | 1.00k | 100k | 200k | 2.00× ✓ | 10.00ms | 4.00ms | 0.40× ✓ | 2 MiB | 2 MiB |",
		"| c | 100 B | 1.00k | 50.0k | 60.0k | 1.20× ✗ | — | — | — |",
		"| e | 100 B | 1.00k | 1.00k | 1.00k | (paced) | 2.00ms | 1.50ms | 0.75× ✗ |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
