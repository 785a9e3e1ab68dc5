// Command streamvs runs the durable-stream workloads (bench/internal/streambench)
// against NATS JetStream and Tern, and prints Markdown
// tables comparing them. The servers must already be running (bench/streams.sh starts
// them and calls this program); each broker is driven through its own streambench
// driver, so the workload code is identical.
//
// Every row runs --runs times per broker, alternating which broker goes first, and the
// tables show the median with the spread (min–max) across runs. Runs that lost
// messages, saw duplicates or failed are listed and left out of the medians.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/internal/loadgen"
)

const kib = 1024

// row is one line of the matrix.
type row struct {
	Key      string // for --only
	Workload string // as shown in the tables
	Cfg      streambench.Config
}

// params are the matrix's knobs, the same for every broker.
type params struct {
	Scale       float64
	ReplayBytes int64
	Window      int
	Batch       int
	AckAll      bool
	Consumers   int
	Sync        streambench.Sync
	Timeout     time.Duration
	Replicas    int
	Random      bool // random payloads (streambench.Config.RandomPayloads)
}

// matrix is the benchmark. Counts are sized so one run takes a few seconds on a
// small machine; scale multiplies them (not the replay, which --replay-bytes sizes).
func matrix(p params) []row {
	n := func(v int) int { return max(1, int(float64(v)*p.Scale)) }
	base := streambench.Config{Window: p.Window, Batch: p.Batch, Consumers: p.Consumers, Sync: p.Sync, Timeout: p.Timeout,
		Replicas: p.Replicas, RandomPayloads: p.Random}
	with := func(w string, size, msgs int) streambench.Config {
		c := base
		c.Workload, c.Size, c.Msgs = w, size, msgs
		return c
	}
	ack := "ack each"
	if p.AckAll {
		ack = "ack-all per batch"
	}
	fetch16 := with(streambench.WorkFetch, 16, n(400_000))
	fetch1k := with(streambench.WorkFetch, kib, n(200_000))
	fetch16.AckAll, fetch1k.AckAll = p.AckAll, p.AckAll
	batch := p.Batch
	if batch == 0 {
		batch = streambench.DefaultBatch
	}
	consumers := p.Consumers
	if consumers == 0 {
		consumers = streambench.DefaultConsumers
	}
	window := p.Window
	if window == 0 {
		window = streambench.DefaultWindow
	}
	return []row{
		{"pubasync16", fmt.Sprintf("async publish, window %d", window), with(streambench.WorkPubAsync, 16, n(300_000))},
		{"pubasync1k", fmt.Sprintf("async publish, window %d", window), with(streambench.WorkPubAsync, kib, n(200_000))},
		{"pubsync", "sync publish (one at a time)", with(streambench.WorkPubSync, 16, n(20_000))},
		{"fetch16", fmt.Sprintf("pull fetch, batch %d, %s", batch, ack), fetch16},
		{"fetch1k", fmt.Sprintf("pull fetch, batch %d, %s", batch, ack), fetch1k},
		{"workqueue", fmt.Sprintf("work queue, 1 pub → %d consumers", consumers), with(streambench.WorkWorkQueue, 16, n(200_000))},
		{"workqueue1k", fmt.Sprintf("work queue, 1 pub → %d consumers", consumers), with(streambench.WorkWorkQueue, kib, n(150_000))},
		// Last: its gigabyte of writes would otherwise be written back during the rows after it.
		{"replay1g", "ordered replay from the first message", with(streambench.WorkReplay, kib, int(max(1, p.ReplayBytes/kib)))},
	}
}

func selectRows(rows []row, only string) []row {
	if only == "" {
		return rows
	}
	var out []row
	for _, r := range rows {
		for _, k := range strings.Split(only, ",") {
			if k = strings.TrimSpace(k); k != "" && (r.Key == k || r.Cfg.Workload == k) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// system is one broker under test.
type system struct {
	Key     string `json:"-"`
	Name    string `json:"name"`
	URL     string `json:"url"`
	Version string `json:"version"`
	Pid     int    `json:"pid,omitempty"`
	driver  streambench.Driver
}

// memory is the server's memory around one run, from /proc/PID/status (KiB).
type memory struct {
	RSSReadyKB int64 `json:"rss_ready_kb"` // when the stream was ready (pre-filled), before the clock
	RSSDoneKB  int64 `json:"rss_done_kb"`  // when the timed phase was over
	HWMDoneKB  int64 `json:"hwm_done_kb"`  // the process's peak RSS so far
}

// outcome is one system's runs of one row.
type outcome struct {
	Results    []streambench.Result `json:"results"`
	Memory     []memory             `json:"memory,omitempty"`
	Failures   []string             `json:"failures,omitempty"`
	MsgsPerSec stats.Spread         `json:"msgs_per_sec"`
	MBPerSec   stats.Spread         `json:"mb_per_sec"`
	P50        stats.Spread         `json:"p50_us"`
	P90        stats.Spread         `json:"p90_us"`
	P99        stats.Spread         `json:"p99_us"`
	P999       stats.Spread         `json:"p999_us"`
	MaxLat     stats.Spread         `json:"max_us"`
	RSSDoneKB  stats.Spread         `json:"rss_done_kb"`
	Seconds    stats.Spread         `json:"seconds"` // the timed phase
	Errors     int                  `json:"errors"`  // summed over the valid runs
}

func (o *outcome) summarize() {
	var rate, mb, p50, p90, p99, p999, mx, rss, secs []float64
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	o.Errors = 0
	for _, r := range o.Results {
		rate = append(rate, r.MsgsPerSec)
		mb = append(mb, r.MBPerSec)
		secs = append(secs, r.Elapsed.Seconds())
		o.Errors += r.Errors
		if l := r.Latency; l.Samples > 0 {
			p50, p90, p99, p999, mx = append(p50, us(l.P50)), append(p90, us(l.P90)), append(p99, us(l.P99)), append(p999, us(l.P999)), append(mx, us(l.Max))
		}
	}
	for _, m := range o.Memory {
		if m.RSSDoneKB > 0 {
			rss = append(rss, float64(m.RSSDoneKB))
		}
	}
	o.MsgsPerSec, o.MBPerSec = stats.SpreadOf(rate), stats.SpreadOf(mb)
	o.P50, o.P90, o.P99, o.P999, o.MaxLat = stats.SpreadOf(p50), stats.SpreadOf(p90), stats.SpreadOf(p99), stats.SpreadOf(p999), stats.SpreadOf(mx)
	o.RSSDoneKB, o.Seconds = stats.SpreadOf(rss), stats.SpreadOf(secs)
}

type rowReport struct {
	Key       string              `json:"key"`
	Workload  string              `json:"workload"`
	Kind      string              `json:"kind"` // the streambench workload
	Size      int                 `json:"size"`
	Msgs      int                 `json:"msgs"`
	Window    int                 `json:"window"`
	Batch     int                 `json:"batch"`
	Consumers int                 `json:"consumers"`
	AckAll    bool                `json:"ack_all"`
	Systems   map[string]*outcome `json:"systems"`
	// RatioRate is Tern's median msgs/s over JetStream's (above 1: Tern is faster).
	RatioRate float64 `json:"ratio_msgs_per_sec,omitempty"`
}

type report struct {
	Date        string             `json:"date"`
	Command     string             `json:"command"`
	Machine     host.Machine       `json:"machine"`
	Servers     map[string]*system `json:"servers"`
	Runs        int                `json:"runs"`
	Scale       float64            `json:"scale"`
	ReplayBytes int64              `json:"replay_bytes"`
	Replicas    int                `json:"replicas,omitempty"` // copies of each stream; 0 in files from before it was recorded: 1
	Random      bool               `json:"random_payloads,omitempty"`
	Rows        []*rowReport       `json:"rows"`
	BusyStarts  int                `json:"busy_starts"`
}

func main() { harness.Main("streamvs", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("streamvs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	drivers := fs.String("drivers", "js", "comma-separated brokers to run, in table order: "+strings.Join(knownDrivers, ", ")+" (built in: "+strings.Join(builtIn(), ", ")+")")
	urls, pids, versions := map[string]*string{}, map[string]*int{}, map[string]*string{}
	for _, k := range knownDrivers {
		def := ""
		if d, ok := registry[k]; ok {
			def = d.DefaultURL
		}
		urls[k] = fs.String(k+"-url", def, "URL of the "+k+" server")
		pids[k] = fs.Int(k+"-pid", 0, "pid of the "+k+" server, to report its memory (VmRSS, VmHWM from /proc); 0: not reported")
		versions[k] = fs.String(k+"-version", "", "version of the "+k+" server to report (default: as its client reports it)")
	}
	fs.StringVar(&jsLeader, "js-leader", jsLeader, "where a replicated JetStream stream's leader is: any (where JetStream puts it) or local (moved to the server the clients connect to, as Tern's is)")
	fs.StringVar(&jsReplay, "js-replay", jsReplay, "JetStream replay consumer: push (JetStreamContext's ordered consumer, the faster) or pull (the jetstream package's)")
	runs := fs.Int("runs", 3, "runs of each row per broker; the tables show the median and the min–max")
	jsonPath := fs.String("json", "", "also write every run's result and the summary as JSON to this file")
	only := fs.String("only", "", "comma-separated rows to run, by key (fetch16) or workload (fetch: both sizes); default all, see --list")
	scale := fs.Float64("scale", 1, "multiply every row's message count except replay's (0.1 for a quick look)")
	replayBytes := fs.String("replay-bytes", "1GiB", "bytes the replay row pre-fills and reads, in 1 KiB messages")
	window := fs.Int("window", streambench.DefaultWindow, "unacknowledged async publishes at most (async publish, work queue, pre-fills)")
	batch := fs.Int("batch", streambench.DefaultBatch, "pull batch size (fetch, work queue)")
	ackAll := fs.Bool("ack-all", false, "fetch rows: cumulative ack policy, acknowledging only the last message of each batch (default: every message)")
	consumers := fs.Int("consumers", streambench.DefaultConsumers, "pull consumers in the work queue")
	syncPolicy := fs.String("sync", "", "fsync policy asked of every stream: always, interval, never (default: each server's own; JetStream supports only that)")
	random := fs.Bool("random-payloads", false, "payloads of random bytes after the sequence number, each publisher buffer different (default: zero bytes, which a broker that compresses shrinks to almost nothing)")
	replicas := fs.Int("replicas", 1, "copies of every stream (JetStream's R); more than 1 needs clustered servers (bench/replicated.sh starts them)")
	timeout := fs.Duration("timeout", 0, "hard limit on each run, pre-fill included (0: 60s plus 100µs per message, 2ms in pubsync)")
	flush := fs.Bool("flush", true, "before each run, write the machine's dirty pages back to disk (sync(2)), so one run's writes do not land in the next")
	pause := fs.Duration("pause", 500*time.Millisecond, "idle time before each run, so the previous one's work (a stream deletion) has drained")
	quietWait := fs.Duration("quiet-wait", 30*time.Second, "before each run, wait up to this long for the machine's other CPU use to drop below --quiet-busy (0 = do not wait)")
	quietBusy := fs.Float64("quiet-busy", 0.25, "share of all CPUs busy (0–1) below which the machine counts as quiet")
	list := fs.Bool("list", false, "list the rows and exit")
	reportPath := fs.String("report", "", "run nothing: print the tables of an earlier run's --json file (with --rabbit, RabbitMQ's too)")
	rabbitPath := fs.String("rabbit", "", "with --report: bench/rabbit/run.sh's results.json, for the RabbitMQ and side-by-side work-queue tables")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: streamvs [options]\n\nRuns the durable-stream workloads against running servers (JetStream, Tern;\nsee bench/streamvs/drivers.go) and prints Markdown tables.\nbench/streams.sh starts the servers and calls this program.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *reportPath != "" {
		return runReport(stdout, *reportPath, *rabbitPath)
	}
	if *rabbitPath != "" {
		return errors.New("--rabbit goes with --report")
	}
	if *runs < 1 || *scale <= 0 {
		return errors.New("--runs must be at least 1 and --scale positive")
	}
	rb, err := harness.ParseBytes(*replayBytes)
	if err != nil {
		return fmt.Errorf("--replay-bytes: %w", err)
	}
	if *window < 1 || *window > streambench.MaxWindow || *batch < 1 || *consumers < 1 {
		return fmt.Errorf("--window must be 1..%d, --batch and --consumers at least 1", streambench.MaxWindow)
	}
	if *timeout < 0 {
		return errors.New("--timeout must not be negative")
	}
	if *replicas < 1 || *replicas > 5 {
		return errors.New("--replicas must be 1 to 5")
	}
	p := params{Scale: *scale, ReplayBytes: rb, Window: *window, Batch: *batch, AckAll: *ackAll, Consumers: *consumers,
		Sync: streambench.Sync(*syncPolicy), Timeout: *timeout, Replicas: *replicas, Random: *random}
	rows := selectRows(matrix(p), *only)
	if *list {
		for _, r := range rows {
			fmt.Fprintf(stdout, "%-11s %s, %s, %s msgs\n", r.Key, r.Workload, tablefmt.Size(r.Cfg.Size), loadgen.Commas(float64(r.Cfg.Msgs)))
		}
		return nil
	}
	if len(rows) == 0 {
		return fmt.Errorf("--only %q matches no row (see --list)", *only)
	}

	var systems []*system
	for _, k := range strings.Split(*drivers, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		info, ok := registry[k]
		if !ok {
			if slices.Contains(knownDrivers, k) {
				return fmt.Errorf("driver %q is not built into this streamvs yet (see the TERN DRIVER note in bench/streamvs/drivers.go)", k)
			}
			return fmt.Errorf("unknown driver %q (known: %s)", k, strings.Join(knownDrivers, ", "))
		}
		if slices.ContainsFunc(systems, func(s *system) bool { return s.Key == k }) {
			continue
		}
		d, err := info.New(*urls[k])
		if err != nil {
			return fmt.Errorf("%s driver for %s: %w", info.Name, *urls[k], err)
		}
		s := &system{Key: k, Name: info.Name + replicaSuffix(*replicas), URL: *urls[k], Version: *versions[k], Pid: *pids[k], driver: d}
		c, err := d.Connect(ctx, "streamvs-probe")
		if err != nil {
			return fmt.Errorf("%s at %s: %w", info.Name, s.URL, err)
		}
		if s.Version == "" {
			s.Version = c.ServerVersion()
		}
		_ = c.Close()
		if s.Pid != 0 {
			if _, _, ok := host.ProcMemory(s.Pid); !ok {
				return fmt.Errorf("--%s-pid %d: no such process to read memory from", k, s.Pid)
			}
		}
		systems = append(systems, s)
	}
	if len(systems) == 0 {
		return errors.New("nothing to run: --drivers is empty")
	}

	rep := &report{
		Date:        time.Now().UTC().Format(time.RFC3339),
		Command:     "streamvs " + strings.Join(args, " "),
		Machine:     host.Info(),
		Servers:     map[string]*system{},
		Runs:        *runs,
		Scale:       *scale,
		ReplayBytes: rb,
		Replicas:    *replicas,
		Random:      *random,
	}
	for _, s := range systems {
		rep.Servers[s.Key] = s
	}

	// A short untimed run per broker first, so connection set-up, the first stream
	// files and allocations are not in the first measured row.
	for _, s := range systems {
		_, _ = streambench.Run(ctx, s.driver, streambench.Config{Workload: streambench.WorkPubAsync, Size: 64, Msgs: 20_000, Window: *window, Replicas: *replicas})
	}

	start := time.Now()
	for i, r := range rows {
		rr := &rowReport{Key: r.Key, Workload: r.Workload, Kind: r.Cfg.Workload, Size: r.Cfg.Size, Msgs: r.Cfg.Msgs,
			Window: *window, Batch: *batch, Consumers: *consumers, AckAll: r.Cfg.AckAll, Systems: map[string]*outcome{}}
		for _, s := range systems {
			rr.Systems[s.Key] = &outcome{}
		}
		for n := range *runs {
			for _, s := range harness.RunOrder(systems, n) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				runtime.GC()
				if *flush {
					flushDisk()
				}
				time.Sleep(*pause)
				if host.WaitQuietOrNote(ctx, *quietWait, *quietBusy, stderr) {
					rep.BusyStarts++
				}
				cfg := r.Cfg
				var mem memory
				if s.Pid != 0 {
					cfg.Observe = func(point string) {
						rss, hwm, _ := host.ProcMemory(s.Pid)
						switch point {
						case streambench.ObserveReady:
							mem.RSSReadyKB = rss
						case streambench.ObserveDone:
							mem.RSSDoneKB, mem.HWMDoneKB = rss, hwm
						}
					}
				}
				res, err := streambench.Run(ctx, s.driver, cfg)
				o := rr.Systems[s.Key]
				status := ""
				if err != nil {
					o.Failures = append(o.Failures, err.Error())
					status = "  FAILED: " + err.Error()
				} else {
					o.Results = append(o.Results, res)
					if s.Pid != 0 {
						o.Memory = append(o.Memory, mem)
					}
				}
				extra := ""
				if res.Latency.Samples > 0 {
					extra = ", p99 " + loadgen.FormatDuration(res.Latency.P99)
				}
				if res.Leader != "" {
					where := "remote"
					if res.LeaderLocal {
						where = "local"
					}
					extra += fmt.Sprintf(", leader %s (%s)", res.Leader, where)
				}
				if s.Pid != 0 && mem.RSSDoneKB > 0 {
					extra += fmt.Sprintf(", server RSS %s", kbLabel(mem.RSSDoneKB))
				}
				fmt.Fprintf(stderr, "[%d/%d] %-10s %-9s run %d/%d: %s msgs/s, %.1f MB/s%s%s\n", i+1, len(rows), r.Key, s.Name, n+1, *runs,
					tablefmt.Rate(res.MsgsPerSec), res.MBPerSec, extra, status)
			}
		}
		for _, o := range rr.Systems {
			o.summarize()
		}
		if t, js := rr.Systems["tern"], rr.Systems["js"]; t != nil && js != nil && js.MsgsPerSec.Median > 0 && len(t.Results) > 0 {
			rr.RatioRate = t.MsgsPerSec.Median / js.MsgsPerSec.Median
		}
		rep.Rows = append(rep.Rows, rr)
	}
	fmt.Fprintf(stderr, "matrix done in %s\n", time.Since(start).Round(time.Second))

	writeMarkdown(stdout, rep, systems)
	if *jsonPath != "" {
		return records.WriteJSON(*jsonPath, rep)
	}
	return nil
}

// replicaSuffix is what a broker's name gets in the tables when its streams are
// replicated: " R3".
func replicaSuffix(replicas int) string {
	if replicas > 1 {
		return fmt.Sprintf(" R%d", replicas)
	}
	return ""
}

func builtIn() []string {
	var out []string
	for _, k := range knownDrivers {
		if _, ok := registry[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
