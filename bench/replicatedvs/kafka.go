package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/tablefmt"
	"github.com/tern-mq/tern/internal/loadgen"
)

const kib = 1024

// Kinds of Kafka row.
const (
	kindProduce = "produce" // ProducerPerformance: msgs/s of acknowledged records, send→ack latency
	kindReplay  = "replay"  // ConsumerPerformance on a pre-filled topic
)

// Groups pair rows of different systems that measure the same thing, for the
// side-by-side table (bench/streamvs's keys are mapped to them in report.go).
const (
	groupPublish16 = "publish16"
	groupPublish1k = "publish1k"
	groupLatency16 = "latency16"
	groupReplay1k  = "replay1k"
)

// kafkaRow is one line of the Kafka matrix.
type kafkaRow struct {
	Key        string   `json:"key"`
	Workload   string   `json:"workload"`
	Group      string   `json:"group,omitempty"`
	Kind       string   `json:"kind"`
	Size       int      `json:"size"`
	Msgs       int      `json:"msgs"`
	Throughput int      `json:"throughput"` // ProducerPerformance --throughput: -1 unthrottled
	Props      []string `json:"props"`      // producer properties given besides the defaults
	// Warmup records are sent before the Msgs measured ones, in the same producer
	// (ProducerPerformance --warmup-records: its steady-state summary is the
	// result), so the tool's fresh JVM has connected, fetched metadata and compiled
	// its hot code before the measurement starts.
	Warmup int `json:"warmup,omitempty"`
	// Values of the franz-go producer rows: "" all zero bytes (one value for every
	// record, which the client's default snappy compression shrinks to almost
	// nothing), valuesLetters distinct random A–Z values (ProducerPerformance's
	// alphabet), which snappy barely shrinks.
	Values string `json:"values,omitempty"`
}

// valuesLetters makes each franz-go record's value different random letters.
const valuesLetters = "letters"

// warmupOf is the warm-up of a producer row of n records: a tenth of them, at least
// 1,000 (one second of the paced row).
func warmupOf(n int) int { return max(1000, n/10) }

// producerDefaults names the Kafka 4.4.0 producer defaults that shape these rows
// (ProducerConfig: linger.ms 5 since 4.0, acks all and idempotence on since 3.0).
const producerDefaults = "linger.ms=5, batch.size=16384, max.in.flight.requests.per.connection=5, enable.idempotence=true, compression.type=none"

// kafkaMatrix is the Kafka side. The counts are bench/streamvs's for the rows they
// pair with (pubasync16 300,000, pubasync1k 200,000, replay --replay-bytes of 1 KiB
// records), so --scale gives both systems the same work.
func kafkaMatrix(scale float64, replayBytes int64, altProps []string, pacedRate int) []kafkaRow {
	n := func(v int) int { return max(1, int(float64(v)*scale)) }
	acks := []string{"acks=all"}
	rows := []kafkaRow{
		{Key: "produce16", Workload: "producer, acks=all, defaults", Group: groupPublish16, Kind: kindProduce, Size: 16, Msgs: n(300_000), Throughput: -1, Props: acks},
		{Key: "produce1k", Workload: "producer, acks=all, defaults", Group: groupPublish1k, Kind: kindProduce, Size: kib, Msgs: n(200_000), Throughput: -1, Props: acks},
	}
	if len(altProps) > 0 {
		rows = append(rows, kafkaRow{Key: "produce16alt", Workload: "producer, acks=all, " + strings.Join(altProps, ", "), Kind: kindProduce,
			Size: 16, Msgs: n(300_000), Throughput: -1, Props: append(slices.Clone(acks), altProps...)})
	}
	if pacedRate > 0 {
		rows = append(rows, kafkaRow{Key: "paced16", Workload: fmt.Sprintf("producer, acks=all, defaults, paced at %s msgs/s", loadgen.Commas(float64(pacedRate))),
			Group: groupLatency16, Kind: kindProduce, Size: 16, Msgs: n(max(pacedRate*10, 1000)), Throughput: pacedRate, Props: acks})
	}
	for i := range rows {
		rows[i].Warmup = warmupOf(rows[i].Msgs)
	}
	rows = append(rows, kafkaRow{Key: "replay", Workload: "consumer, one group member, from the first record", Group: groupReplay1k, Kind: kindReplay,
		Size: kib, Msgs: int(max(1, replayBytes/kib))})
	return rows
}

// kafkaResult is one run of one row.
type kafkaResult struct {
	Topic      string  `json:"topic"`
	Leader     int     `json:"leader"` // the partition's leader broker (partition 0)
	Records    int64   `json:"records"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"` // payload bytes, 10^6 bytes
	Seconds    float64 `json:"seconds"`    // the timed phase
	// Producer rows: latency of each record from send() to its acknowledgement, in
	// ms as the tool prints it (whole ms for the percentiles).
	AvgMs  float64 `json:"avg_ms,omitempty"`
	MaxMs  float64 `json:"max_ms,omitempty"`
	P50Ms  float64 `json:"p50_ms,omitempty"`
	P95Ms  float64 `json:"p95_ms,omitempty"`
	P99Ms  float64 `json:"p99_ms,omitempty"`
	P999Ms float64 `json:"p999_ms,omitempty"`
	// Replay: the consumer's rates over fetch time (the table's) and over the whole
	// run with joining the group (RebalanceMs).
	TotalMsgsPerSec float64 `json:"total_msgs_per_sec,omitempty"`
	RebalanceMs     float64 `json:"rebalance_ms,omitempty"`
	PrefillSeconds  float64 `json:"prefill_seconds,omitempty"`
	// SettleSeconds is how long the servers took, after the pre-fill, to go
	// quiet (every replica caught up) before a consumer row's measured phase.
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// The e2e rows (kafkaapi): publish → receive of each measured record, in µs,
	// and records received more than once.
	E2EP50US   float64 `json:"e2e_p50_us,omitempty"`
	E2EP99US   float64 `json:"e2e_p99_us,omitempty"`
	E2EP999US  float64 `json:"e2e_p999_us,omitempty"`
	E2EMaxUS   float64 `json:"e2e_max_us,omitempty"`
	Duplicates int64   `json:"duplicates,omitempty"`
	// kafkaapi: the servers' peak RSS (VmHWM) over the run, summed and each, KiB;
	// the machine's 1-minute load average before the run.
	HWMKiB     int64   `json:"hwm_kib,omitempty"`
	HWMEachKiB []int64 `json:"hwm_each_kib,omitempty"`
	LoadAvg1   float64 `json:"load_avg1,omitempty"`
	// kafkaapi: CPU time (user and system) over the same window as the peak RSS.
	// Server: the system's processes (utime+stime of /proc/<pid>/stat, in 10 ms
	// ticks), summed and each. Client: the tool's JVM from its start to its exit
	// (ProducerPerformance, ConsumerPerformance: the JVM's start-up included), or
	// this process (the franz-go rows). Per record: divided by CPURecords, the
	// records the window handled (the measured ones and a producer row's warm-up
	// records, which are sent in the same window).
	ServerCPUSeconds     float64   `json:"server_cpu_seconds,omitempty"`
	ServerCPUEachSeconds []float64 `json:"server_cpu_each_seconds,omitempty"`
	ClientCPUSeconds     float64   `json:"client_cpu_seconds,omitempty"`
	CPURecords           int64     `json:"cpu_records,omitempty"`
	ServerCPUUSPerRecord float64   `json:"server_cpu_us_per_record,omitempty"`
	ClientCPUUSPerRecord float64   `json:"client_cpu_us_per_record,omitempty"`
	// Summary is the tool's result line(s), verbatim.
	Summary string `json:"summary"`
}

// rowRuns is what a row of either Kafka-tool matrix (kafka, kafkaapi) records over
// its runs: each completed run's result, why the others failed, and the spread of
// the rates. Embedded, its fields stand in the row's JSON object as its own.
type rowRuns struct {
	Results    []kafkaResult `json:"results"`
	Failures   []string      `json:"failures,omitempty"`
	MsgsPerSec stats.Spread  `json:"msgs_per_sec"`
	MBPerSec   stats.Spread  `json:"mb_per_sec"`
}

// record adds one run: its result, or the error it failed with; it returns the
// progress line's note of a failure.
func (o *rowRuns) record(res kafkaResult, err error) string {
	if err != nil {
		o.Failures = append(o.Failures, err.Error())
		return "  FAILED: " + err.Error()
	}
	o.Results = append(o.Results, res)
	return ""
}

// summarizeRates takes the rates' spread over the completed runs.
func (o *rowRuns) summarizeRates() {
	var rate, mb []float64
	for _, r := range o.Results {
		rate, mb = append(rate, r.MsgsPerSec), append(mb, r.MBPerSec)
	}
	o.MsgsPerSec, o.MBPerSec = stats.SpreadOf(rate), stats.SpreadOf(mb)
}

type kafkaOutcome struct {
	kafkaRow
	rowRuns
	P50Ms   stats.Spread `json:"p50_ms"`
	P99Ms   stats.Spread `json:"p99_ms"`
	Seconds stats.Spread `json:"seconds"`
}

func (o *kafkaOutcome) summarize() {
	o.summarizeRates()
	var p50, p99, secs []float64
	for _, r := range o.Results {
		secs = append(secs, r.Seconds)
		if o.Kind == kindProduce {
			p50, p99 = append(p50, r.P50Ms), append(p99, r.P99Ms)
		}
	}
	o.Seconds = stats.SpreadOf(secs)
	o.P50Ms, o.P99Ms = stats.SpreadOf(p50), stats.SpreadOf(p99)
}

// kafkaServer describes the cluster, for the report.
type kafkaServer struct {
	Name              string   `json:"name"`
	Version           string   `json:"version"`
	Bootstrap         string   `json:"bootstrap"`
	Brokers           int      `json:"brokers"`
	Partitions        int      `json:"partitions"`
	ReplicationFactor int      `json:"replication_factor"`
	MinInsync         int      `json:"min_insync_replicas"`
	ProducerDefaults  string   `json:"producer_defaults"`
	BrokerConfig      []string `json:"broker_config,omitempty"` // node 1's server.properties
	JVM               []string `json:"jvm,omitempty"`           // the tools' JVM options
}

type kafkaReport struct {
	Date        string          `json:"date"`
	Command     string          `json:"command"`
	Machine     host.Machine    `json:"machine"`
	Server      kafkaServer     `json:"server"`
	Runs        int             `json:"runs"`
	Scale       float64         `json:"scale"`
	ReplayBytes int64           `json:"replay_bytes"`
	Rows        []*kafkaOutcome `json:"rows"`
	BusyStarts  int             `json:"busy_starts"`
}

// javaTool runs Kafka's command-line classes in a JVM of their own, each bounded in
// time; everything they print goes to log.
type javaTool struct {
	java string
	cp   string
	opts []string
	log  io.Writer
}

// run starts class with args and waits at most timeout; it returns what the class
// printed on stdout. On timeout or cancellation the JVM gets SIGTERM, then SIGKILL
// 10 s later.
func (j *javaTool) run(ctx context.Context, timeout time.Duration, class string, args ...string) (string, error) {
	out, _, err := j.runCPU(ctx, timeout, class, args...)
	return out, err
}

// runCPU is run, also returning the CPU time the JVM used, user and system, from
// its start to its exit (0 when it did not start).
func (j *javaTool) runCPU(ctx context.Context, timeout time.Duration, class string, args ...string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append(slices.Clone(j.opts), "-cp", j.cp, class), args...)
	cmd := exec.CommandContext(ctx, j.java, argv...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, j.log)
	cmd.Stderr = io.MultiWriter(&errb, j.log)
	fmt.Fprintf(j.log, "\n== %s %s %s\n", time.Now().Format(time.TimeOnly), class, strings.Join(args, " "))
	err := cmd.Run()
	var cpu time.Duration
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		}
		return out.String(), cpu, fmt.Errorf("%s: %w%s", shortClass(class), err, tail(errb.String(), 3))
	}
	return out.String(), cpu, nil
}

func shortClass(c string) string { return c[strings.LastIndex(c, ".")+1:] }

// tail is the last n non-empty lines of s, as "; a | b" for an error message.
func tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "at ") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return ": " + strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// ProducerPerformance's summary lines, e.g.
// "60000 records sent, 3232.236169 records/sec (3.16 MB/sec), 6577.93 ms avg latency,
// 9471.00 ms max latency, 7390 ms 50th, 9165 ms 95th, 9410 ms 99th, 9462 ms 99.9th."
// and with --warmup-records a second one for the records after the warm-up:
// "50000 steady state records sent, 3040.622720 records/sec (2.97 MB/sec), ...".
var producerSummary = regexp.MustCompile(`(?m)^(\d+) (steady state )?records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9.]+) ms 50th, ([0-9.]+) ms 95th, ([0-9.]+) ms 99th, ([0-9.]+) ms 99\.9th\.?\s*$`)

// parseProducer reads ProducerPerformance's output: the steady-state summary line
// when there is one (a run with warm-up records), else the summary of the run.
func parseProducer(out string, size int) (kafkaResult, error) {
	m := producerSummary.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return kafkaResult{}, fmt.Errorf("no summary line in ProducerPerformance's output%s", tail(out, 2))
	}
	s := m[len(m)-1]
	for _, c := range m {
		if c[2] != "" {
			s = c
		}
	}
	s = append(s[:2:2], s[3:]...) // drop the "steady state" group
	f := make([]float64, len(s))
	for i := 1; i < len(s); i++ {
		v, err := strconv.ParseFloat(s[i], 64)
		if err != nil {
			return kafkaResult{}, fmt.Errorf("summary %q: %w", s[0], err)
		}
		f[i] = v
	}
	r := kafkaResult{Records: int64(f[1]), MsgsPerSec: f[2], AvgMs: f[4], MaxMs: f[5], P50Ms: f[6], P95Ms: f[7], P99Ms: f[8], P999Ms: f[9],
		Summary: strings.TrimSpace(s[0])}
	r.MBPerSec = r.MsgsPerSec * float64(size) / 1e6
	if r.MsgsPerSec > 0 {
		r.Seconds = float64(r.Records) / r.MsgsPerSec
	}
	return r, nil
}

// parseConsumer reads ConsumerPerformance's output: a header line naming the
// comma-separated columns and one line of values.
func parseConsumer(out string, size int) (kafkaResult, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "start.time") || i+1 >= len(lines) {
			continue
		}
		names := strings.Split(strings.TrimSpace(l), ",")
		vals := strings.Split(strings.TrimSpace(lines[i+1]), ",")
		if len(vals) != len(names) {
			return kafkaResult{}, fmt.Errorf("ConsumerPerformance: %d columns, %d values", len(names), len(vals))
		}
		col := map[string]float64{}
		for j, n := range names {
			if v, err := strconv.ParseFloat(strings.TrimSpace(vals[j]), 64); err == nil {
				col[strings.TrimSpace(n)] = v
			}
		}
		for _, k := range []string{"data.consumed.in.nMsg", "nMsg.sec", "fetch.time.ms", "fetch.nMsg.sec", "rebalance.time.ms"} {
			if _, ok := col[k]; !ok {
				return kafkaResult{}, fmt.Errorf("ConsumerPerformance: no %s in %q", k, l)
			}
		}
		r := kafkaResult{Records: int64(col["data.consumed.in.nMsg"]), MsgsPerSec: col["fetch.nMsg.sec"], TotalMsgsPerSec: col["nMsg.sec"],
			RebalanceMs: col["rebalance.time.ms"], Seconds: col["fetch.time.ms"] / 1000,
			Summary: strings.TrimSpace(l) + "\n" + strings.TrimSpace(lines[i+1])}
		r.MBPerSec = r.MsgsPerSec * float64(size) / 1e6
		return r, nil
	}
	return kafkaResult{}, fmt.Errorf("no result lines in ConsumerPerformance's output%s", tail(out, 2))
}

// partition is one line of TopicCommand --describe.
type partition struct {
	Leader int
	ISR    int
}

var describeLine = regexp.MustCompile(`Partition:\s*(\d+)\s+Leader:\s*(-?\d+|none)\s+Replicas:\s*([\d,]+)\s+Isr:\s*([\d,]*)`)

func parseDescribe(out string) []partition {
	var ps []partition
	for _, m := range describeLine.FindAllStringSubmatch(out, -1) {
		leader, err := strconv.Atoi(m[2])
		if err != nil {
			leader = -1
		}
		ps = append(ps, partition{Leader: leader, ISR: len(harness.SplitList(m[4]))})
	}
	return ps
}

// brokerIDs reads BrokerApiVersionsCommand's output: the ids of the unfenced brokers.
var brokerLine = regexp.MustCompile(`(?m)^\S+ \(id: (\d+) rack: \S+(?: isFenced: (true|false))?\) ->`)

func brokerIDs(out string) []int {
	var ids []int
	for _, m := range brokerLine.FindAllStringSubmatch(out, -1) {
		if m[2] == "true" {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

type kafkaRunner struct {
	tool      *javaTool
	bootstrap string
	brokers   int
	parts     int
	rf        int
	minISR    int
	progress  io.Writer
	// admin, when set, makes and deletes topics through the Kafka admin API
	// (franz-go's kadm: CreateTopics, Metadata, DeleteTopics) instead of a
	// TopicCommand JVM each (kafkaapi: the same requests to Kafka and to Tern).
	admin *kadm.Client
}

const adminTimeout = 90 * time.Second

func (k *kafkaRunner) waitBrokers(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.tool.run(ctx, adminTimeout, "org.apache.kafka.tools.BrokerApiVersionsCommand", "--bootstrap-server", k.bootstrap)
		ids := brokerIDs(out)
		if err == nil && len(ids) >= k.brokers {
			fmt.Fprintf(k.progress, "kafka: brokers %v registered\n", ids)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka: %d of %d brokers registered after %s (%v)", len(ids), k.brokers, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// createTopic creates topic and waits until every partition has a leader and a
// full ISR; it returns partition 0's leader.
func (k *kafkaRunner) createTopic(ctx context.Context, topic string) (int, error) {
	if k.admin != nil {
		return k.createTopicAdmin(ctx, topic)
	}
	args := []string{"--bootstrap-server", k.bootstrap, "--create",
		"--topic", topic, "--partitions", strconv.Itoa(k.parts), "--replication-factor", strconv.Itoa(k.rf)}
	if k.minISR > 0 { // else the brokers' default (kafkaapi: the same call for Kafka and Tern)
		args = append(args, "--config", "min.insync.replicas="+strconv.Itoa(k.minISR))
	}
	_, err := k.tool.run(ctx, adminTimeout, "org.apache.kafka.tools.TopicCommand", args...)
	if err != nil {
		return 0, err
	}
	for range 20 {
		out, err := k.tool.run(ctx, adminTimeout, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", k.bootstrap, "--describe", "--topic", topic)
		if err != nil {
			return 0, err
		}
		ps := parseDescribe(out)
		ready := len(ps) == k.parts
		for _, p := range ps {
			ready = ready && p.Leader >= 0 && p.ISR == k.rf
		}
		if ready {
			return ps[0].Leader, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("topic %s: partitions without a leader or a full ISR", topic)
}

func (k *kafkaRunner) deleteTopic(ctx context.Context, topic string) {
	if ctx.Err() != nil {
		return // the run is being stopped; the brokers go with it
	}
	if k.admin != nil {
		k.deleteTopicAdmin(ctx, topic)
		return
	}
	if _, err := k.tool.run(ctx, adminTimeout, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", k.bootstrap, "--delete", "--topic", topic); err != nil {
		fmt.Fprintf(k.progress, "kafka: deleting topic %s: %v\n", topic, err)
	}
}

// runTimeout bounds one tool run: 60 s plus 100 µs per record, plus the paced time.
func runTimeout(r kafkaRow) time.Duration {
	n := r.Msgs + r.Warmup
	d := 60*time.Second + time.Duration(n)*100*time.Microsecond
	if r.Throughput > 0 {
		d += time.Duration(float64(n) / float64(r.Throughput) * float64(time.Second))
	}
	return d
}

func (k *kafkaRunner) produce(ctx context.Context, topic string, r kafkaRow) (kafkaResult, error) {
	args := []string{"--bootstrap-server", k.bootstrap, "--topic", topic, "--num-records", strconv.Itoa(r.Msgs + r.Warmup),
		"--record-size", strconv.Itoa(r.Size), "--throughput", strconv.Itoa(r.Throughput), "--reporting-interval", "5000"}
	if r.Warmup > 0 {
		args = append(args, "--warmup-records", strconv.Itoa(r.Warmup))
	}
	if len(r.Props) > 0 {
		args = append(append(args, "--command-property"), r.Props...)
	}
	out, cpu, err := k.tool.runCPU(ctx, runTimeout(r), "org.apache.kafka.tools.ProducerPerformance", args...)
	if err != nil {
		return kafkaResult{}, err
	}
	res, err := parseProducer(out, r.Size)
	res.ClientCPUSeconds = cpu.Seconds()
	if err != nil {
		return res, err
	}
	if res.Records != int64(r.Msgs) {
		return res, fmt.Errorf("%d of %d records acknowledged", res.Records, r.Msgs)
	}
	return res, nil
}

func (k *kafkaRunner) consume(ctx context.Context, topic string, r kafkaRow) (kafkaResult, error) {
	out, cpu, err := k.tool.runCPU(ctx, runTimeout(r), "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", k.bootstrap,
		"--topic", topic, "--num-records", strconv.Itoa(r.Msgs), "--group", "bench-"+topic, "--timeout", "10000")
	if err != nil {
		return kafkaResult{}, err
	}
	res, err := parseConsumer(out, r.Size)
	res.ClientCPUSeconds = cpu.Seconds()
	if err != nil {
		return res, err
	}
	if res.Records < int64(r.Msgs) {
		return res, fmt.Errorf("%d of %d records consumed", res.Records, r.Msgs)
	}
	return res, nil
}

// freshTopic makes a topic of its own for one run of r, named after the row, the
// run and a random suffix (a rerun never meets an old topic's records); it returns
// the topic and partition 0's leader.
func (k *kafkaRunner) freshTopic(ctx context.Context, r kafkaRow, run int) (string, int, error) {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	topic := fmt.Sprintf("bench-%s-%d-%s", r.Key, run, hex.EncodeToString(id))
	leader, err := k.createTopic(ctx, topic)
	if err != nil {
		return "", 0, fmt.Errorf("create topic: %w", err)
	}
	return topic, leader, nil
}

// prefill writes a read row's records into topic before the timed read, with
// ProducerPerformance at the producer's defaults (acks=all); it is not timed as
// part of the row.
func (k *kafkaRunner) prefill(ctx context.Context, topic string, r kafkaRow) (time.Duration, error) {
	fill := kafkaRow{Key: r.Key, Kind: kindProduce, Size: r.Size, Msgs: r.Msgs, Throughput: -1, Props: []string{"acks=all"}}
	start := time.Now()
	if _, err := k.produce(ctx, topic, fill); err != nil {
		return 0, fmt.Errorf("pre-fill: %w", err)
	}
	return time.Since(start), nil
}

// once is one run of a row on a fresh topic, deleted afterwards.
func (k *kafkaRunner) once(ctx context.Context, r kafkaRow, run int) (kafkaResult, error) {
	topic, leader, err := k.freshTopic(ctx, r, run)
	if err != nil {
		return kafkaResult{}, err
	}
	defer k.deleteTopic(ctx, topic)
	var res kafkaResult
	switch r.Kind {
	case kindProduce:
		res, err = k.produce(ctx, topic, r)
	case kindReplay:
		var prefill time.Duration
		if prefill, err = k.prefill(ctx, topic, r); err != nil {
			break
		}
		res, err = k.consume(ctx, topic, r)
		res.PrefillSeconds = prefill.Seconds()
	default:
		err = fmt.Errorf("unknown kind %q", r.Kind)
	}
	res.Topic, res.Leader = topic, leader
	return res, err
}

func flushDisk() { syscall.Sync() }

// toolFlags are the options the commands driving Kafka's clients share (kafka,
// kafkaapi): the tools' JVM, the brokers, which rows and how often, where the
// results and the tools' output go, and the wait before each run.
type toolFlags struct {
	java, classpath, bootstrap, only, json, log *string
	jvm                                         []string
	partitions, runs                            *int
	pause, quietWait                            *time.Duration
	quietBusy                                   *float64
	list                                        *bool
}

func addToolFlags(fs *flag.FlagSet) *toolFlags {
	f := &toolFlags{
		java:       fs.String("java", "java", "the java command"),
		classpath:  fs.String("classpath", "", "the Kafka jars, as java's -cp (bench/.tools/kafka-4.4.0/libs/*)"),
		bootstrap:  fs.String("bootstrap", "", "the brokers' listeners, comma-separated host:port"),
		partitions: fs.Int("partitions", 1, "partitions of every topic"),
		runs:       fs.Int("runs", 3, "runs of each row; the tables show the median and the min–max"),
		only:       fs.String("only", "", "comma-separated row keys (default all; see --list)"),
		json:       fs.String("json", "", "write every run's result and the medians as JSON to this file"),
		log:        fs.String("log", "", "append every tool's command line and output to this file (default: discard)"),
		pause:      fs.Duration("pause", 500*time.Millisecond, "idle time before each run"),
		quietWait:  fs.Duration("quiet-wait", 30*time.Second, "before each run, wait up to this long for the machine's other CPU use to drop below --quiet-busy (0 = do not wait)"),
		quietBusy:  fs.Float64("quiet-busy", 0.25, "share of all CPUs busy (0–1) below which the machine counts as quiet"),
		list:       fs.Bool("list", false, "list the rows and exit"),
	}
	fs.Func("jvm-opt", "a JVM option for every Kafka tool (repeatable), e.g. -Xmx512M, -Dlog4j2.configurationFile=...", func(s string) error {
		f.jvm = append(f.jvm, s)
		return nil
	})
	return f
}

// selectRows keeps the rows --only names; with --list it prints them, keys padded
// to keyWidth, and says the command is done.
func (f *toolFlags) selectRows(rows []kafkaRow, stdout io.Writer, keyWidth int) ([]kafkaRow, bool, error) {
	if keys := harness.SplitList(*f.only); len(keys) > 0 {
		rows = slices.DeleteFunc(rows, func(r kafkaRow) bool { return !slices.Contains(keys, r.Key) })
		if len(rows) == 0 {
			return nil, false, fmt.Errorf("--only %q matches no row (see --list)", *f.only)
		}
	}
	if *f.list {
		for _, r := range rows {
			fmt.Fprintf(stdout, "%-*s %s, %s, %s records\n", keyWidth, r.Key, r.Workload, tablefmt.Size(r.Size), loadgen.Commas(float64(r.Msgs)))
		}
		return rows, true, nil
	}
	if *f.classpath == "" || *f.bootstrap == "" {
		return nil, false, errors.New("--classpath and --bootstrap are required")
	}
	return rows, false, nil
}

// runner drives the Kafka tools the flags describe against their brokers, making
// topics of the flags' partitions with replication factor rf (and
// min.insync.replicas minISR when above 0); every tool's output goes to --log, or
// nowhere. close closes that log.
func (f *toolFlags) runner(brokers, rf, minISR int, progress io.Writer) (k *kafkaRunner, close func() error, err error) {
	t := &javaTool{java: *f.java, cp: *f.classpath, opts: f.jvm, log: io.Discard}
	close = func() error { return nil }
	if *f.log != "" {
		lf, err := os.OpenFile(*f.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, err
		}
		t.log, close = lf, lf.Close
	}
	k = &kafkaRunner{tool: t, bootstrap: *f.bootstrap, brokers: brokers, parts: *f.partitions, rf: rf, minISR: minISR, progress: progress}
	return k, close, nil
}

// beforeRun gives every run the same start: garbage collected, dirty pages
// written, --pause of idleness, and a wait for a quiet machine; it reports whether
// the machine was still busy.
func (f *toolFlags) beforeRun(ctx context.Context, stderr io.Writer) bool {
	runtime.GC()
	flushDisk()
	time.Sleep(*f.pause)
	return host.WaitQuietOrNote(ctx, *f.quietWait, *f.quietBusy, stderr)
}

// configLines is the settings of a config file (properties, TOML), without blank
// lines and comments, for a report.
func configLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, nil
}

func cmdKafka(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs kafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf := addToolFlags(fs)
	brokers := fs.Int("brokers", 3, "brokers to wait for")
	rf := fs.Int("replication-factor", 3, "replication factor of every topic")
	minISR := fs.Int("min-insync", 2, "min.insync.replicas of every topic")
	version := fs.String("version", "", "Kafka version, for the report")
	brokerConfig := fs.String("broker-config", "", "node 1's server.properties, copied into the JSON")
	scale := fs.Float64("scale", 1, "multiply every row's record count except replay's")
	replayBytes := fs.String("replay-bytes", "1GiB", "bytes the replay row pre-fills and reads, in 1 KiB records")
	alt := fs.String("alt-props", "linger.ms=0", "producer properties of the extra 16 B row (space-separated k=v; empty: no such row)")
	paced := fs.Int("paced-rate", 1000, "records/s of the paced 16 B latency row (0: no such row)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *tf.runs < 1 || *scale <= 0 || *paced < 0 {
		return errors.New("--runs must be at least 1, --scale positive, --paced-rate not negative")
	}
	rb, err := harness.ParseBytes(*replayBytes)
	if err != nil {
		return fmt.Errorf("--replay-bytes: %w", err)
	}
	rows, listed, err := tf.selectRows(kafkaMatrix(*scale, rb, strings.Fields(*alt), *paced), stdout, 13)
	if err != nil || listed {
		return err
	}
	k, closeLog, err := tf.runner(*brokers, *rf, *minISR, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	rep := &kafkaReport{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "replicatedvs kafka " + strings.Join(args, " "),
		Machine: host.Info(),
		Server: kafkaServer{Name: "Kafka", Version: *version, Bootstrap: *tf.bootstrap, Brokers: *brokers, Partitions: *tf.partitions,
			ReplicationFactor: *rf, MinInsync: *minISR, ProducerDefaults: producerDefaults, JVM: tf.jvm},
		Runs: *tf.runs, Scale: *scale, ReplayBytes: rb,
	}
	if *brokerConfig != "" {
		if rep.Server.BrokerConfig, err = configLines(*brokerConfig); err != nil {
			return err
		}
	}

	if err := k.waitBrokers(ctx, 120*time.Second); err != nil {
		return err
	}
	// One untimed run first, so the brokers' first topic, the consumer-offsets topic
	// (made on the first group join) and their JIT warm-up are not in the first row.
	warm := []kafkaRow{{Key: "warmup", Kind: kindReplay, Size: 64, Msgs: 20_000, Throughput: -1}}
	if _, err := k.once(ctx, warm[0], 0); err != nil {
		fmt.Fprintf(stderr, "kafka: warm-up run: %v\n", err)
	}

	start := time.Now()
	for i, r := range rows {
		o := &kafkaOutcome{kafkaRow: r}
		for n := range *tf.runs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if tf.beforeRun(ctx, stderr) {
				rep.BusyStarts++
			}
			res, err := k.once(ctx, r, n)
			status := o.record(res, err)
			extra := ""
			if r.Kind == kindProduce && err == nil {
				extra = fmt.Sprintf(", p50 %gms, p99 %gms", res.P50Ms, res.P99Ms)
			}
			fmt.Fprintf(stderr, "[%d/%d] %-13s Kafka run %d/%d: %s msgs/s, %.1f MB/s%s, leader %d%s\n", i+1, len(rows), r.Key, n+1, *tf.runs,
				loadgen.Commas(res.MsgsPerSec), res.MBPerSec, extra, res.Leader, status)
		}
		o.summarize()
		rep.Rows = append(rep.Rows, o)
	}
	fmt.Fprintf(stderr, "kafka rows done in %s\n", time.Since(start).Round(time.Second))
	if *tf.json != "" {
		return records.WriteJSON(*tf.json, rep)
	}
	return nil
}
