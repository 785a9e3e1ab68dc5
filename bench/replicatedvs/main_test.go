package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-mq/tern/bench/internal/records"

	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/streambench"
)

// Output of Kafka 4.4.0's ProducerPerformance with --warmup-records 10000.
const producerOut = `22080 records sent, 4411.6 records/sec (4.31 MB/sec), 8155.6 ms avg latency, 9471.0 ms max latency.
60000 records sent, 3232.236169 records/sec (3.16 MB/sec), 6577.93 ms avg latency, 9471.00 ms max latency, 7390 ms 50th, 9165 ms 95th, 9410 ms 99th, 9462 ms 99.9th.
50000 steady state records sent, 3040.622720 records/sec (2.97 MB/sec), 7344.40 ms avg latency, 9471.00 ms max latency, 7594 ms 50th, 9211 ms 95th, 9425 ms 99th, 9462 ms 99.9th.
`

func TestParseProducer(t *testing.T) {
	r, err := parseProducer(producerOut, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 50000 || r.MsgsPerSec != 3040.622720 || r.P50Ms != 7594 || r.P95Ms != 9211 || r.P99Ms != 9425 || r.P999Ms != 9462 ||
		r.AvgMs != 7344.40 || r.MaxMs != 9471 || !strings.HasPrefix(r.Summary, "50000 steady state") {
		t.Fatalf("steady state: %+v", r)
	}
	if want := 3040.622720 * 1024 / 1e6; r.MBPerSec != want {
		t.Errorf("MB/s %v, want %v", r.MBPerSec, want)
	}
	// Without a warm-up: the run's summary; the progress lines are not summaries.
	lines := strings.Split(producerOut, "\n")
	r, err = parseProducer(lines[0]+"\n"+lines[1]+"\n", 16)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 60000 || r.P99Ms != 9410 || r.Seconds < 18.5 || r.Seconds > 18.6 {
		t.Fatalf("summary: %+v", r)
	}
	if _, err := parseProducer(lines[0]+"\norg.apache.kafka.common.errors.TimeoutException: boom\n", 16); err == nil ||
		!strings.Contains(err.Error(), "TimeoutException") {
		t.Errorf("no summary: %v", err)
	}
}

func TestParseConsumer(t *testing.T) {
	out := `start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-25 04:11:18:260, 2026-11-25 04:11:21:706, 29.2969, 8.5017, 30000, 8705.7458, 2679, 767, 38.1967, 39113.4289
`
	r, err := parseConsumer(out, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 30000 || r.MsgsPerSec != 39113.4289 || r.TotalMsgsPerSec != 8705.7458 || r.RebalanceMs != 2679 || r.Seconds != 0.767 {
		t.Fatalf("%+v", r)
	}
	if _, err := parseConsumer("WARNING: Exiting before consuming the expected number of records\n", 1024); err == nil {
		t.Error("no result lines: no error")
	}
}

func TestParseDescribeAndBrokers(t *testing.T) {
	desc := "Topic: t1\tTopicId: LomC9_T9R4SPcdpWU3iOkA\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2\n" +
		"\tTopic: t1\tPartition: 0\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3,1\tElr: \tLastKnownElr: \n" +
		"\tTopic: t1\tPartition: 1\tLeader: none\tReplicas: 3,1,2\tIsr: 3\tElr: \tLastKnownElr: \n"
	ps := parseDescribe(desc)
	if len(ps) != 2 || ps[0] != (partition{Leader: 2, ISR: 3}) || ps[1] != (partition{Leader: -1, ISR: 1}) {
		t.Fatalf("%+v", ps)
	}
	vers := "127.0.0.1:19110 (id: 1 rack: null isFenced: false) -> (\n\tProduce(0): 3 to 13 [usable: 13],\n)\n" +
		"127.0.0.1:19130 (id: 3 rack: null isFenced: true) -> (\n)\n" +
		"127.0.0.1:19120 (id: 2 rack: null) -> (\n)\n"
	if ids := brokerIDs(vers); len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Fatalf("broker ids %v", ids)
	}
}

func TestKafkaMatrix(t *testing.T) {
	rows := kafkaMatrix(1, 1<<30, []string{"linger.ms=0"}, 1000)
	want := map[string]int{"produce16": 300_000, "produce1k": 200_000, "produce16alt": 300_000, "paced16": 10_000, "replay": 1 << 20}
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Msgs != want[r.Key] {
			t.Errorf("%s: %d records, want %d", r.Key, r.Msgs, want[r.Key])
		}
		if r.Kind == kindProduce && (r.Warmup < 1000 || r.Props[0] != "acks=all") {
			t.Errorf("%s: warm-up %d, props %v", r.Key, r.Warmup, r.Props)
		}
	}
	if rows := kafkaMatrix(0.1, 1<<20, nil, 0); len(rows) != 3 || rows[2].Msgs != 1024 {
		t.Errorf("without the optional rows: %+v", rows)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"kafka", "--list", "--scale", "0.1", "--only", "replay,produce1k"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "\n"); got != 2 || !strings.Contains(out.String(), "20,000 records") {
		t.Errorf("--list:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"kafka", "--only", "nothing"}, &out, &out); err == nil {
		t.Error("--only nothing: no error")
	}
}

func sp(v float64) stats.Spread { return stats.Spread{Median: v, Min: v, Max: v} }

// TestReport combines a streamvs file with JetStream (and, the second time, Tern)
// and a Kafka file, as replicated.sh does.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	type outcome struct {
		Results    []streambench.Result `json:"results"`
		Failures   []string             `json:"failures,omitempty"`
		MsgsPerSec stats.Spread         `json:"msgs_per_sec"`
		MBPerSec   stats.Spread         `json:"mb_per_sec"`
		P50        stats.Spread         `json:"p50_us"`
		P99        stats.Spread         `json:"p99_us"`
	}
	ok := []streambench.Result{{Workload: "pubasync"}}
	sv := map[string]any{
		"date": "2026-11-25T00:00:00Z", "runs": 1, "scale": 0.1, "replay_bytes": 1 << 20, "replicas": 3,
		"machine": map[string]any{"cpus": 2, "cpu_model": "test CPU"},
		"servers": map[string]any{"js": map[string]any{"name": "JetStream R3", "url": "nats://127.0.0.1:24510", "version": "2.15.2"}},
		"rows": []any{
			map[string]any{"key": "pubasync16", "workload": "async publish, window 4096", "kind": "pubasync", "size": 16, "msgs": 30000, "window": 4096,
				"systems": map[string]any{"js": outcome{Results: ok, MsgsPerSec: sp(80000), MBPerSec: sp(1.28)}}},
			map[string]any{"key": "pubsync", "workload": "sync publish (one at a time)", "kind": "pubsync", "size": 16, "msgs": 2000,
				"systems": map[string]any{"js": outcome{Results: ok, MsgsPerSec: sp(3000), MBPerSec: sp(0.05), P50: sp(300), P99: sp(800)}}},
			map[string]any{"key": "replay1g", "workload": "ordered replay from the first message", "kind": "replay", "size": 1024, "msgs": 1024,
				"systems": map[string]any{"js": outcome{Failures: []string{"incomplete run: 5 of 1024 messages missing"}}}},
		},
	}
	kr := kafkaReport{Date: "2026-11-25T00:00:00Z", Runs: 1, Scale: 0.1, ReplayBytes: 1 << 20,
		Server: kafkaServer{Name: "Kafka", Version: "4.4.0", Brokers: 3, Partitions: 1, ReplicationFactor: 3, MinInsync: 2, ProducerDefaults: producerDefaults},
		Rows: []*kafkaOutcome{
			{kafkaRow: kafkaRow{Key: "produce16", Workload: "producer, acks=all, defaults", Group: groupPublish16, Kind: kindProduce, Size: 16, Msgs: 30000},
				rowRuns: rowRuns{Results: []kafkaResult{{}}, MsgsPerSec: sp(50000), MBPerSec: sp(0.8)}, P50Ms: sp(60), P99Ms: sp(110)},
			{kafkaRow: kafkaRow{Key: "replay", Workload: "consumer", Group: groupReplay1k, Kind: kindReplay, Size: 1024, Msgs: 1024},
				rowRuns: rowRuns{Results: []kafkaResult{{}, {}}, MsgsPerSec: stats.Spread{Median: 40000, Min: 30000, Max: 50000}, MBPerSec: sp(41)}},
		}}
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	svPath, krPath := write("streams.json", sv), write("kafka.json", kr)
	var out bytes.Buffer
	jsonPath := filepath.Join(dir, "results.json")
	if err := run(context.Background(), []string{"report", "--streams", svPath, "--kafka", krPath, "--not-run", "Tern R3: not measured yet",
		"--json", jsonPath}, &out, &out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"## Replicated streams: JetStream R3 vs Kafka RF3",
		"- Tern R3: not measured yet",
		"| what | size | JetStream R3 msgs/s | p50 | p99 | Kafka RF3 msgs/s | p50 | p99 |",
		"| publish with acknowledgements, unthrottled | 16 B | 80.0k | — | — | 50.0k | 60.00ms | 110.00ms |",
		"| publish latency at light load | 16 B | 3.00k | 300.0µs | 800.0µs | — | — | — |",
		"| replay from the first message | 1 KiB | FAILED | — | — | 40.0k (30.0k–50.0k) | — | — |",
		"| JetStream R3 | pubasync16 | async publish, at most 4096 unacknowledged | 16 B | 30,000 | 80.0k | 1.28 | — | — | — |",
		"| Kafka RF3 | produce16 | producer, acks=all, defaults | 16 B | 30,000 | 50.0k | 0.80 | 60.00ms | 110.00ms | send → ack of each record (whole ms) |",
		"- JetStream R3 replay1g: incomplete run",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "publish with acknowledgements, unthrottled | 1 KiB") {
		t.Errorf("a line no system has:\n%s", md)
	}
	var c combined
	if err := records.ReadJSON(jsonPath, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Systems) != 2 || len(c.Rows) != 5 || c.Rows[1].P99US.Median != 800 || c.Rows[3].P99US.Median != 110_000 {
		t.Errorf("JSON: %+v", c)
	}

	// With Tern R3 in the streamvs file: its columns and ratios.
	servers := sv["servers"].(map[string]any)
	servers["tern"] = map[string]any{"name": "Tern R3", "url": "tern://127.0.0.1:27510", "version": "0.1"}
	row0 := sv["rows"].([]any)[0].(map[string]any)
	row0["systems"].(map[string]any)["tern"] = outcome{Results: ok, MsgsPerSec: sp(100000), MBPerSec: sp(1.6)}
	svPath = write("streams.json", sv)
	out.Reset()
	if err := run(context.Background(), []string{"report", "--streams", svPath, "--kafka", krPath}, &out, &out); err != nil {
		t.Fatal(err)
	}
	md = out.String()
	for _, want := range []string{
		"Tern R3 msgs/s | p50 | p99 | Kafka RF3 msgs/s | p50 | p99 | Tern/JetStream msgs/s | Tern/Kafka msgs/s |",
		"| 80.0k | — | — | 100k | — | — | 50.0k | 60.00ms | 110.00ms | 1.25× | 2.00× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report with Tern lacks %q:\n%s", want, md)
		}
	}
}
