package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/internal/loadgen"
)

// The Kafka API comparison (bench/kafkaapi.sh): the same Kafka clients — Kafka's
// ProducerPerformance and ConsumerPerformance, and a franz-go end-to-end latency
// harness (e2e.go) — against one running system at a time, Apache Kafka or Tern's
// Kafka API. "replicatedvs kafkaapi" runs the rows against one system and writes its
// JSON; "replicatedvs kafkaapi-report" puts the JSON files of both systems, on one
// node and on three, into one table with Tern's ratios over Kafka.

// kindE2E is the paced end-to-end latency row: a franz-go producer at a fixed rate
// and a consumer in the same process (e2e.go).
const kindE2E = "e2e"

// apiMatrix is the Kafka API matrix. The counts are sized so that, at scale 1, an
// unthrottled producer row takes several seconds on this 2-CPU machine, and a paced
// row 10 s.
func apiMatrix(scale float64, e2eRates []int, e2eSize int) []kafkaRow {
	n := func(v int) int { return max(1, int(float64(v)*scale)) }
	var rows []kafkaRow
	for _, s := range []struct {
		size int
		msgs int
	}{{100, 1_000_000}, {kib, 250_000}} {
		for _, acks := range []string{"1", "all"} {
			rows = append(rows, kafkaRow{Key: fmt.Sprintf("produce%s-acks%s", sizeKey(s.size), acks),
				Workload: "ProducerPerformance, acks=" + acks + ", unthrottled", Kind: kindProduce, Size: s.size,
				Msgs: n(s.msgs), Throughput: -1, Props: []string{"acks=" + acks}})
		}
	}
	for i := range rows {
		rows[i].Warmup = warmupOf(rows[i].Msgs)
	}
	rows = append(rows, kafkaRow{Key: "consume1k", Workload: "ConsumerPerformance, one group member, pre-filled topic from the start",
		Kind: kindReplay, Size: kib, Msgs: n(400_000)})
	rows = append(rows,
		kafkaRow{Key: "franz100-acksall", Workload: "franz-go producer, acks=all (idempotent), linger 5 ms, unthrottled",
			Kind: kindFranzProduce, Size: 100, Msgs: n(1_000_000)},
		kafkaRow{Key: "franz100l-acksall", Workload: "franz-go producer as franz100-acksall, each value different random letters",
			Kind: kindFranzProduce, Size: 100, Msgs: n(1_000_000), Values: valuesLetters},
		kafkaRow{Key: "franzconsume1k", Workload: "franz-go consumer, no group, pre-filled topic from the start",
			Kind: kindFranzConsume, Size: kib, Msgs: n(400_000)})
	for _, r := range e2eRates {
		m := n(r * 10)
		rows = append(rows, kafkaRow{Key: fmt.Sprintf("e2e%s-%d", sizeKey(e2eSize), r),
			Workload: fmt.Sprintf("franz-go, acks=all, linger 0, paced at %s records/s, publish → receive", loadgen.Commas(float64(r))),
			Kind:     kindE2E, Size: e2eSize, Msgs: m, Throughput: r, Warmup: min(r, max(100, m/10))})
	}
	return rows
}

func sizeKey(n int) string {
	if n >= kib && n%kib == 0 {
		return fmt.Sprintf("%dk", n/kib)
	}
	return strconv.Itoa(n)
}

// apiOutcome is one row's runs against one system.
type apiOutcome struct {
	kafkaRow
	rowRuns
	// Latency in µs: send → ack (ProducerPerformance, whole ms) for producer rows,
	// publish → receive for the e2e rows; none for the consumer row.
	P50US  stats.Spread `json:"p50_us"`
	P99US  stats.Spread `json:"p99_us"`
	P999US stats.Spread `json:"p999_us"`
	// The servers' peak RSS during the run (VmHWM, summed over the system's
	// processes), KiB.
	HWMKiB stats.Spread `json:"hwm_kib"`
	// CPU time per record over the same window, µs: the servers' (summed over the
	// system's processes) and the client's (kafkaResult).
	ServerCPUUS stats.Spread `json:"server_cpu_us_per_record"`
	ClientCPUUS stats.Spread `json:"client_cpu_us_per_record"`
}

func (o *apiOutcome) summarize() {
	o.summarizeRates()
	var p50, p99, p999, hwm, scpu, ccpu []float64
	for _, r := range o.Results {
		switch o.Kind {
		case kindProduce:
			p50, p99, p999 = append(p50, r.P50Ms*1000), append(p99, r.P99Ms*1000), append(p999, r.P999Ms*1000)
		case kindE2E:
			p50, p99, p999 = append(p50, r.E2EP50US), append(p99, r.E2EP99US), append(p999, r.E2EP999US)
		}
		if r.HWMKiB > 0 {
			hwm = append(hwm, float64(r.HWMKiB))
		}
		if r.ServerCPUUSPerRecord > 0 {
			scpu = append(scpu, r.ServerCPUUSPerRecord)
		}
		if r.ClientCPUUSPerRecord > 0 {
			ccpu = append(ccpu, r.ClientCPUUSPerRecord)
		}
	}
	o.P50US, o.P99US, o.P999US, o.HWMKiB = stats.SpreadOf(p50), stats.SpreadOf(p99), stats.SpreadOf(p999), stats.SpreadOf(hwm)
	o.ServerCPUUS, o.ClientCPUUS = stats.SpreadOf(scpu), stats.SpreadOf(ccpu)
}

// apiSystem describes the system measured.
type apiSystem struct {
	Key               string   `json:"key"` // kafka, tern
	Name              string   `json:"name"`
	Version           string   `json:"version"`
	Nodes             int      `json:"nodes"`
	Bootstrap         string   `json:"bootstrap"`
	Partitions        int      `json:"partitions"`
	ReplicationFactor int      `json:"replication_factor"`
	Setup             string   `json:"setup,omitempty"`
	Pids              []int    `json:"pids"`
	Config            []string `json:"config,omitempty"`
	// HWMReset says whether each run's peak RSS is the run's own (the kernel's
	// clear_refs reset worked) or since the process started.
	HWMReset bool `json:"hwm_reset"`
}

type apiReport struct {
	Date    string       `json:"date"`
	Command string       `json:"command"`
	Machine host.Machine `json:"machine"`
	System  apiSystem    `json:"system"`
	Runs    int          `json:"runs"`
	// Rounds is how many fresh starts of the system the runs were spread over
	// (an interleaved run: the systems take turns, a run of each row per round);
	// 0 or 1: one start.
	Rounds     int           `json:"rounds,omitempty"`
	Scale      float64       `json:"scale"`
	JVM        []string      `json:"jvm,omitempty"`
	Producer   string        `json:"producer_defaults"`
	Rows       []*apiOutcome `json:"rows"`
	BusyStarts int           `json:"busy_starts"`
	// LoadAvg is /proc/loadavg's 1-minute figure before each run, in run order.
	LoadAvg []float64 `json:"load_avg"`
	Seconds float64   `json:"seconds"`
}

// resetHWM asks the kernel to reset each process's peak RSS (VmHWM) to its current
// RSS (proc(5), clear_refs "5"); it reports whether that worked for every one.
func resetHWM(pids []int) bool {
	ok := true
	for _, p := range pids {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p), []byte("5"), 0); err != nil {
			ok = false
		}
	}
	return ok
}

// readHWM is the sum of the processes' VmHWM in KiB, and each one's (0 for a
// process gone).
func readHWM(pids []int) (int64, []int64) {
	var sum int64
	var each []int64
	for _, p := range pids {
		_, hwm, _ := host.ProcMemory(p)
		each = append(each, hwm)
		sum += hwm
	}
	return sum, each
}

// cpuWindow is the CPU time of the servers and of this process from its start
// (startCPU, beside resetHWM) to the end of a run's measured phase.
type cpuWindow struct {
	pids     []int
	server   []time.Duration
	self     time.Duration
	serverOK bool // every server's CPU time could be read
	selfOK   bool
}

func startCPU(pids []int) *cpuWindow {
	w := &cpuWindow{pids: pids, serverOK: true}
	for _, p := range pids {
		t, err := host.ProcCPU(p)
		w.server = append(w.server, t)
		w.serverOK = w.serverOK && err == nil
	}
	self, err := host.SelfCPU()
	w.self, w.selfOK = self, err == nil
	return w
}

// finish records in res the servers' CPU time since startCPU and, for the rows
// whose client runs in this process (the franz-go rows), this process's as the
// client's (the Kafka tools' rows have theirs from the JVM's exit); then both per
// record of the window: the ones measured, and the warm-up records a producer row
// sends in the same window. A server that could not be read leaves the server
// figures out.
func (w *cpuWindow) finish(res *kafkaResult, r kafkaRow) {
	self, selfErr := host.SelfCPU()
	var sum time.Duration
	each := make([]float64, len(w.pids))
	ok := w.serverOK
	for i, p := range w.pids {
		t, err := host.ProcCPU(p)
		ok = ok && err == nil && t >= w.server[i]
		each[i] = (t - w.server[i]).Seconds()
		sum += t - w.server[i]
	}
	records := res.Records
	if r.Kind == kindProduce || r.Kind == kindE2E {
		records += int64(r.Warmup)
	}
	res.CPURecords = records
	if ok && len(w.pids) > 0 {
		res.ServerCPUSeconds, res.ServerCPUEachSeconds = sum.Seconds(), each
	}
	switch r.Kind {
	case kindFranzProduce, kindFranzConsume, kindE2E:
		res.ClientCPUSeconds = 0
		if w.selfOK && selfErr == nil {
			res.ClientCPUSeconds = (self - w.self).Seconds()
		}
	}
	if records > 0 {
		res.ServerCPUUSPerRecord = res.ServerCPUSeconds * 1e6 / float64(records)
		res.ClientCPUUSPerRecord = res.ClientCPUSeconds * 1e6 / float64(records)
	}
}

// settleMax bounds the wait for the servers to go quiet after a pre-fill;
// settleCores is their summed CPU use (in cores, over a quarter second) under
// which they count as quiet.
const (
	settleMax   = 20 * time.Second
	settleCores = 0.15
)

func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// apiOnce is one run of a row on a fresh topic (made through the admin API,
// deleted afterwards), with the servers' peak RSS and the servers' and the
// client's CPU time over the measured phase.
func (k *kafkaRunner) apiOnce(ctx context.Context, r kafkaRow, run int, pids []int) (kafkaResult, error) {
	topic, leader, err := k.freshTopic(ctx, r, run)
	if err != nil {
		return kafkaResult{}, err
	}
	defer k.deleteTopic(ctx, topic)
	var res kafkaResult
	var cpu *cpuWindow
	begin := func() {
		resetHWM(pids)
		cpu = startCPU(pids)
	}
	switch r.Kind {
	case kindProduce:
		begin()
		res, err = k.produce(ctx, topic, r)
	case kindFranzProduce:
		begin()
		res, err = franzProduce(ctx, franzConfig{Brokers: harness.SplitList(k.bootstrap), Topic: topic, Size: r.Size, Msgs: r.Msgs,
			Values: r.Values, Timeout: runTimeout(r)})
	case kindReplay, kindFranzConsume:
		var prefill time.Duration
		if prefill, err = k.prefill(ctx, topic, r); err != nil {
			break
		}
		runtime.GC()
		time.Sleep(500 * time.Millisecond)
		// The pre-fill was acknowledged by a quorum; a replica still catching
		// up would be counted in the consumer's window, on both systems.
		settle := host.WaitProcsQuiet(ctx, pids, settleMax, settleCores).Seconds()
		begin()
		if r.Kind == kindReplay {
			res, err = k.consume(ctx, topic, r)
		} else {
			res, err = franzConsume(ctx, franzConfig{Brokers: harness.SplitList(k.bootstrap), Topic: topic, Size: r.Size, Msgs: r.Msgs, Timeout: runTimeout(r)})
		}
		res.PrefillSeconds, res.SettleSeconds = prefill.Seconds(), settle
	case kindE2E:
		begin()
		res, err = e2eRun(ctx, e2eConfig{Brokers: harness.SplitList(k.bootstrap), Topic: topic, Size: r.Size, Rate: r.Throughput,
			Warmup: r.Warmup, Msgs: r.Msgs, Timeout: runTimeout(r)})
	default:
		err = fmt.Errorf("unknown kind %q", r.Kind)
	}
	if cpu != nil {
		cpu.finish(&res, r)
	}
	res.HWMKiB, res.HWMEachKiB = readHWM(pids)
	res.Topic, res.Leader = topic, leader
	return res, err
}

func cmdKafkaAPI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs kafkaapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf := addToolFlags(fs)
	sysKey := fs.String("system", "kafka", "the system's key: kafka or tern")
	name := fs.String("name", "", "the system's name, for the report (default from --system)")
	version := fs.String("version", "", "the system's version, for the report")
	setup := fs.String("setup", "", "how the system was started, for the report")
	brokers := fs.Int("brokers", 1, "brokers to wait for (and the system's node count)")
	pidList := fs.String("pids", "", "the system's server processes, comma-separated, for their peak RSS and CPU time")
	rf := fs.Int("replication-factor", 1, "replication factor of every topic (CreateTopics)")
	minISR := fs.Int("min-insync", 0, "min.insync.replicas given in CreateTopics (0: none; the broker's default applies)")
	config := fs.String("config", "", "a config file of the system, copied into the JSON")
	scale := fs.Float64("scale", 1, "multiply every row's record count")
	rates := fs.String("e2e-rates", "1000,10000", "records/s of the end-to-end latency rows, comma-separated (empty: none)")
	e2eSize := fs.Int("e2e-size", 100, "record size of the end-to-end latency rows, bytes (at least 16)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	rateList, err := harness.ParseInts(*rates)
	if err != nil {
		return fmt.Errorf("--e2e-rates: %w", err)
	}
	if *tf.runs < 1 || *scale <= 0 || *e2eSize < 16 {
		return errors.New("--runs must be at least 1, --scale positive, --e2e-size at least 16")
	}
	rows, listed, err := tf.selectRows(apiMatrix(*scale, rateList, *e2eSize), stdout, 18)
	if err != nil || listed {
		return err
	}
	pids, err := harness.ParseInts(*pidList)
	if err != nil {
		return fmt.Errorf("--pids: %w", err)
	}
	if *name == "" {
		*name = map[string]string{"kafka": "Kafka", "tern": "Tern"}[*sysKey]
	}
	k, closeLog, err := tf.runner(*brokers, *rf, *minISR, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	adminClient, err := kgo.NewClient(kgo.SeedBrokers(harness.SplitList(*tf.bootstrap)...), kgo.ClientID("bench-admin"))
	if err != nil {
		return err
	}
	defer adminClient.Close()
	k.admin = kadm.NewClient(adminClient)
	rep := &apiReport{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "replicatedvs kafkaapi " + strings.Join(args, " "),
		Machine: host.Info(),
		System: apiSystem{Key: *sysKey, Name: *name, Version: *version, Nodes: *brokers, Bootstrap: *tf.bootstrap, Partitions: *tf.partitions,
			ReplicationFactor: *rf, Setup: *setup, Pids: pids, HWMReset: resetHWM(pids)},
		Runs: *tf.runs, Scale: *scale, JVM: tf.jvm, Producer: producerDefaults,
	}
	if *config != "" {
		if rep.System.Config, err = configLines(*config); err != nil {
			return err
		}
	}
	if err := k.waitBrokers(ctx, 120*time.Second); err != nil {
		return err
	}
	// One untimed round first (a consumer group on a small pre-filled topic, and a
	// short paced e2e run), so the system's first topic, its group state and the JIT
	// warm-up of a JVM broker are not in the first row.
	for _, w := range []kafkaRow{
		{Key: "warmup", Kind: kindReplay, Size: 64, Msgs: 20_000, Throughput: -1},
		{Key: "warmup-e2e", Kind: kindE2E, Size: *e2eSize, Msgs: 2000, Throughput: 2000, Warmup: 200},
	} {
		if _, err := k.apiOnce(ctx, w, 0, nil); err != nil {
			fmt.Fprintf(stderr, "%s: warm-up run %s: %v\n", *name, w.Key, err)
		}
	}

	start := time.Now()
	for i, r := range rows {
		o := &apiOutcome{kafkaRow: r}
		for n := range *tf.runs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if tf.beforeRun(ctx, stderr) {
				rep.BusyStarts++
			}
			load := loadAvg1()
			rep.LoadAvg = append(rep.LoadAvg, load)
			var res kafkaResult
			var err error
			if gone := exited(pids); len(gone) > 0 {
				// A server that died makes every later run fail slowly (timeouts):
				// say so at once.
				err = fmt.Errorf("server process(es) %v exited; see their logs", gone)
			} else {
				res, err = k.apiOnce(ctx, r, n, pids)
			}
			res.LoadAvg1 = load
			status := o.record(res, err)
			extra := ""
			switch {
			case err != nil:
			case r.Kind == kindProduce:
				extra = fmt.Sprintf(", ack p50 %gms p99 %gms", res.P50Ms, res.P99Ms)
			case r.Kind == kindE2E:
				extra = fmt.Sprintf(", e2e p50 %s p99 %s p99.9 %s", usLabel(res.E2EP50US), usLabel(res.E2EP99US), usLabel(res.E2EP999US))
			}
			fmt.Fprintf(stderr, "[%d/%d] %-18s %s run %d/%d: %s msgs/s, %.1f MB/s%s, peak RSS %s, CPU µs/rec server %s client %s, load %.2f%s\n", i+1, len(rows), r.Key, *name, n+1, *tf.runs,
				loadgen.Commas(res.MsgsPerSec), res.MBPerSec, extra, kibLabel(float64(res.HWMKiB)),
				cpuLabel(res.ServerCPUUSPerRecord), cpuLabel(res.ClientCPUUSPerRecord), load, status)
		}
		o.summarize()
		rep.Rows = append(rep.Rows, o)
	}
	rep.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(stderr, "%s rows done in %s\n", *name, time.Since(start).Round(time.Second))
	if *tf.json != "" {
		return records.WriteJSON(*tf.json, rep)
	}
	return nil
}

func usLabel(us float64) string {
	return loadgen.FormatDuration(time.Duration(us * float64(time.Microsecond)))
}

// cpuLabel is CPU µs per record: two decimals below 10, one above.
func cpuLabel(us float64) string {
	if us < 10 {
		return fmt.Sprintf("%.2f", us)
	}
	return fmt.Sprintf("%.1f", us)
}

func kibLabel(k float64) string {
	switch {
	case k >= 1<<20:
		return fmt.Sprintf("%.2f GiB", k/(1<<20))
	case k >= 1<<10:
		return fmt.Sprintf("%.0f MiB", k/(1<<10))
	}
	return fmt.Sprintf("%.0f KiB", k)
}

// createTopicAdmin makes topic through the admin API (CreateTopics with the
// runner's partitions and replication factor, min.insync.replicas only when set)
// and waits, at most adminTimeout, until Metadata shows every partition with a
// leader and a full ISR; it returns partition 0's leader.
func (k *kafkaRunner) createTopicAdmin(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var configs map[string]*string
	if k.minISR > 0 {
		v := strconv.Itoa(k.minISR)
		configs = map[string]*string{"min.insync.replicas": &v}
	}
	resp, err := k.admin.CreateTopics(ctx, int32(k.parts), int16(k.rf), configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("CreateTopics: %w", err)
	}
	for {
		md, err := k.admin.Metadata(ctx, topic)
		if err == nil {
			if t, ok := md.Topics[topic]; ok && t.Err == nil && len(t.Partitions) == k.parts {
				ready := true
				for _, p := range t.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0 && len(p.ISR) >= k.rf
				}
				if ready {
					return int(t.Partitions[0].Leader), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("topic %s: partitions without a leader or a full ISR after %s (%v)", topic, adminTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *kafkaRunner) deleteTopicAdmin(ctx context.Context, topic string) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	resp, err := k.admin.DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		fmt.Fprintf(k.progress, "deleting topic %s: %v\n", topic, err)
	}
}

// exited is the processes of pids that are gone (signal 0 fails).
func exited(pids []int) []int {
	var gone []int
	for _, p := range pids {
		if syscall.Kill(p, 0) != nil {
			gone = append(gone, p)
		}
	}
	return gone
}
