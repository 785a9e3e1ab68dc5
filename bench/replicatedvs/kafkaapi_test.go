package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/host"
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
	if kinds[kindProduce] != 4 || kinds[kindReplay] != 1 || kinds[kindE2E] != 2 || kinds[kindFranzProduce] != 2 || kinds[kindFranzConsume] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
	for _, k := range []string{"produce100-acks1", "produce100-acksall", "produce1k-acks1", "produce1k-acksall", "consume1k", "franz100-acksall", "franz100l-acksall", "franzconsume1k", "e2e100-1000", "e2e100-10000"} {
		if !seen[k] {
			t.Errorf("no row %s", k)
		}
	}
	if r := apiMatrix(0.1, []int{10000}, 100)[8]; r.Kind != kindE2E || r.Msgs != 10000 {
		t.Errorf("e2e at 10k/s, scale 0.1: %d records, want 10,000 (10 s times the scale)", r.Msgs)
	}
}

// TestRecordValues: the zero row shares one zero value; the letters row's values
// are distinct, A–Z only, and the same from run to run.
func TestRecordValues(t *testing.T) {
	if z := recordValues(100, ""); len(z) != 1 || !bytes.Equal(z[0], make([]byte, 100)) {
		t.Fatalf("zero values: %d of them", len(z))
	}
	a, b := recordValues(100, valuesLetters), recordValues(100, valuesLetters)
	distinct := map[string]bool{}
	for i, v := range a {
		if len(v) != 100 || !bytes.Equal(v, b[i]) {
			t.Fatalf("value %d: %d bytes, the same in a second pool: %v", i, len(v), bytes.Equal(v, b[i]))
		}
		for _, c := range v {
			if c < 'A' || c > 'Z' {
				t.Fatalf("value %d has byte %q", i, c)
			}
		}
		distinct[string(v)] = true
	}
	if len(distinct) != letterValues {
		t.Fatalf("%d distinct values of %d", len(distinct), letterValues)
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
		// CPU per record: a thousandth of the rate's figure on the server, twice that
		// on the client, so each cell tells which row it came from.
		o.ServerCPUUS = stats.Spread{Median: rate / 1e4, Min: rate / 1e4, Max: rate / 1e4}
		o.ClientCPUUS = stats.Spread{Median: rate / 5e3, Min: rate / 5e3, Max: rate / 5e3}
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
		"| Kafka peak RSS | Tern peak RSS | Kafka server CPU µs/rec | Tern server CPU µs/rec | Kafka client CPU µs/rec | Tern client CPU µs/rec |\n" +
			"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
		"| p | 100 B | 1.00k | 100k | 200k | 2.00× ✓ | 10.00ms | 4.00ms | 0.40× ✓ | 2 MiB | 2 MiB | 10.0 | 20.0 | 20.0 | 40.0 |",
		"| c | 100 B | 1.00k | 50.0k | 60.0k | 1.20× ✗ | — | — | — | 2 MiB | 2 MiB | 5.00 | 6.00 | 10.0 | 12.0 |",
		"| e | 100 B | 1.00k | 1.00k | 1.00k | (paced) | 2.00ms | 1.50ms | 0.75× ✗ | 2 MiB | 2 MiB | 0.10 | 0.10 | 0.20 | 0.20 |",
		"CPU µs/rec: user + system CPU time",
		"Latency detail",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	// Rows without latencies (a consumer's) get no latency table.
	b.Reset()
	writeAPIReport(&b, []*apiReport{rep("kafka", 1, out("c", kindReplay, 50_000, 0)), rep("tern", 1, out("c", kindReplay, 60_000, 0))})
	if strings.Contains(b.String(), "Latency detail") {
		t.Errorf("a latency table without latency rows:\n%s", b.String())
	}
}

// A report of a row measured before the CPU columns (JSON without them) shows a
// dash in them; a failed row FAILED.
func TestAPIReportWithoutCPU(t *testing.T) {
	o := &apiOutcome{kafkaRow: kafkaRow{Key: "p", Kind: kindProduce, Workload: "p", Size: 100, Msgs: 1000},
		rowRuns: rowRuns{Results: []kafkaResult{{MsgsPerSec: 1000, P99Ms: 2, HWMKiB: 1024}}}}
	o.summarize()
	f := &apiOutcome{kafkaRow: o.kafkaRow, rowRuns: rowRuns{Failures: []string{"boom"}}}
	var b bytes.Buffer
	writeAPIReport(&b, []*apiReport{
		{System: apiSystem{Key: "kafka", Name: "Kafka", Nodes: 1}, Runs: 1, Rows: []*apiOutcome{o}},
		{System: apiSystem{Key: "tern", Name: "Tern", Nodes: 1}, Runs: 1, Rows: []*apiOutcome{f}},
	})
	want := "| p | 100 B | 1.00k | 1.00k | FAILED | — | 2.00ms | FAILED | — | 1 MiB | FAILED | — | FAILED | — | FAILED |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

func TestAPISummarizeCPU(t *testing.T) {
	o := &apiOutcome{kafkaRow: kafkaRow{Key: "f", Kind: kindFranzProduce}, rowRuns: rowRuns{Results: []kafkaResult{
		{ServerCPUUSPerRecord: 3, ClientCPUUSPerRecord: 1.5},
		{ServerCPUUSPerRecord: 5, ClientCPUUSPerRecord: 0}, // client not measured: left out
		{ServerCPUUSPerRecord: 4, ClientCPUUSPerRecord: 2.5},
	}}}
	o.summarize()
	if o.ServerCPUUS != (stats.Spread{Median: 4, Min: 3, Max: 5}) {
		t.Errorf("server %+v", o.ServerCPUUS)
	}
	if o.ClientCPUUS != (stats.Spread{Median: 2, Min: 1.5, Max: 2.5}) {
		t.Errorf("client %+v", o.ClientCPUUS)
	}
}

func TestCPUWindow(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// Busy until this process has used d of CPU more, however long a machine busy
	// with other tests takes to give it that (at most 20 s).
	busy := func(d time.Duration) {
		s0, err := host.SelfCPU()
		if err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
			if s, _ := host.SelfCPU(); s-s0 >= d {
				return
			}
		}
		t.Fatalf("this process did not get %v of CPU in 20 s", d)
	}
	// This process as the server and, for a franz-go row, the client: both grow by
	// the busy time, per record of the window (a producer row's warm-up included).
	pid := os.Getpid()
	for _, c := range []struct {
		row     kafkaRow
		records int64
	}{
		{kafkaRow{Kind: kindE2E, Msgs: 900, Warmup: 100}, 1000},
		{kafkaRow{Kind: kindFranzConsume, Msgs: 1000}, 1000},
	} {
		w := startCPU([]int{pid})
		busy(200 * time.Millisecond)
		res := kafkaResult{Records: int64(c.row.Msgs)}
		w.finish(&res, c.row)
		if res.CPURecords != c.records || res.ServerCPUSeconds < 0.1 || res.ClientCPUSeconds < 0.1 || len(res.ServerCPUEachSeconds) != 1 {
			t.Fatalf("%s: %+v", c.row.Kind, res)
		}
		if res.ServerCPUUSPerRecord < 100 || res.ClientCPUUSPerRecord < 100 {
			t.Fatalf("%s: %.1f µs/rec server, %.1f client, want about 200", c.row.Kind, res.ServerCPUUSPerRecord, res.ClientCPUUSPerRecord)
		}
	}
	// A Kafka tool's row keeps the JVM's CPU time it was given; a server gone leaves
	// the server figures out.
	w := startCPU([]int{pid, 1 << 30})
	res := kafkaResult{Records: 900, ClientCPUSeconds: 0.5}
	w.finish(&res, kafkaRow{Kind: kindProduce, Msgs: 900, Warmup: 100})
	if res.ClientCPUSeconds != 0.5 || res.ClientCPUUSPerRecord != 500 || res.ServerCPUSeconds != 0 || res.ServerCPUUSPerRecord != 0 || res.CPURecords != 1000 {
		t.Fatalf("produce: %+v", res)
	}
}

// TestMergeAPIReports: the rounds of one system on one node count become one
// report whose rows hold every round's runs, summarized again; other systems and
// node counts stay apart.
func TestMergeAPIReports(t *testing.T) {
	round := func(key string, nodes int, rates ...float64) *apiReport {
		o := &apiOutcome{kafkaRow: kafkaRow{Key: "franz100-acksall", Kind: kindFranzProduce}}
		for _, r := range rates {
			o.Results = append(o.Results, kafkaResult{MsgsPerSec: r})
		}
		o.summarize()
		return &apiReport{System: apiSystem{Key: key, Nodes: nodes, Pids: []int{len(rates)}, HWMReset: true},
			Runs: len(rates), LoadAvg: []float64{0.5}, Rows: []*apiOutcome{o}}
	}
	reps := mergeAPIReports([]*apiReport{
		round("kafka", 1, 100), round("tern", 1, 150), round("kafka", 3, 10),
		round("kafka", 1, 300), round("tern", 1, 250, 350),
	})
	if len(reps) != 3 {
		t.Fatalf("%d reports, want kafka-1, tern-1, kafka-3", len(reps))
	}
	k, tn := reps[0], reps[1]
	if k.System.Key != "kafka" || k.System.Nodes != 1 || k.Runs != 2 || k.Rounds != 2 || len(k.LoadAvg) != 2 || len(k.System.Pids) != 2 {
		t.Fatalf("kafka-1 merged: %+v", k)
	}
	if got := k.Rows[0].MsgsPerSec; got.Min != 100 || got.Max != 300 || got.Median != 200 {
		t.Fatalf("kafka-1 rates %+v, want 100–300, median 200", got)
	}
	if got := tn.Rows[0].MsgsPerSec; tn.Runs != 3 || got.Median != 250 || len(tn.Rows[0].Results) != 3 {
		t.Fatalf("tern-1: %d runs, rates %+v", tn.Runs, got)
	}
	if reps[2].Runs != 1 || reps[2].Rounds != 0 {
		t.Fatalf("kafka-3 changed: %+v", reps[2])
	}
}
