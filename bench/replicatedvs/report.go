package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/internal/loadgen"
)

// svReport is the part of bench/streamvs's --json file the report reads.
type svReport struct {
	Date    string       `json:"date"`
	Command string       `json:"command"`
	Machine host.Machine `json:"machine"`
	Servers map[string]*struct {
		Name    string `json:"name"`
		URL     string `json:"url"`
		Version string `json:"version"`
	} `json:"servers"`
	Runs        int     `json:"runs"`
	Scale       float64 `json:"scale"`
	ReplayBytes int64   `json:"replay_bytes"`
	Replicas    int     `json:"replicas"`
	BusyStarts  int     `json:"busy_starts"`
	Rows        []struct {
		Key       string `json:"key"`
		Workload  string `json:"workload"`
		Kind      string `json:"kind"`
		Size      int    `json:"size"`
		Msgs      int    `json:"msgs"`
		Window    int    `json:"window"`
		Batch     int    `json:"batch"`
		Consumers int    `json:"consumers"`
		Systems   map[string]*struct {
			Results    []streambench.Result `json:"results"`
			Failures   []string             `json:"failures"`
			MsgsPerSec stats.Spread         `json:"msgs_per_sec"`
			MBPerSec   stats.Spread         `json:"mb_per_sec"`
			P50        stats.Spread         `json:"p50_us"`
			P99        stats.Spread         `json:"p99_us"`
		} `json:"systems"`
	} `json:"rows"`
}

// streamvsKeys are the --drivers keys of bench/streamvs, in table order.
var streamvsKeys = []string{"js", "tern"}

// svGroups pairs streamvs's rows with Kafka's (see the group constants).
var svGroups = map[string]string{
	"pubasync16": groupPublish16,
	"pubasync1k": groupPublish1k,
	"pubsync":    groupLatency16,
	"replay1g":   groupReplay1k,
}

// groups are the side-by-side table's lines, in order.
var groups = []struct{ Key, What string }{
	{groupPublish16, "publish with acknowledgements, unthrottled"},
	{groupPublish1k, "publish with acknowledgements, unthrottled"},
	{groupLatency16, "publish latency at light load"},
	{groupReplay1k, "replay from the first message"},
}

type system struct {
	Key     string `json:"key"` // js, tern (streamvs's drivers), kafka
	Name    string `json:"name"`
	Version string `json:"version"`
	Setup   string `json:"setup"`
	Runs    int    `json:"runs"`
}

type row struct {
	System     string       `json:"system"`
	Key        string       `json:"key"`
	Group      string       `json:"group,omitempty"`
	Workload   string       `json:"workload"`
	Size       int          `json:"size"`
	Msgs       int          `json:"msgs"`
	Runs       int          `json:"runs"`
	OKRuns     int          `json:"ok_runs"`
	Failures   []string     `json:"failures,omitempty"`
	MsgsPerSec stats.Spread `json:"msgs_per_sec"`
	MBPerSec   stats.Spread `json:"mb_per_sec"`
	P50US      stats.Spread `json:"p50_us"`
	P99US      stats.Spread `json:"p99_us"`
	Latency    string       `json:"latency,omitempty"` // what P50US and P99US measure
}

type combined struct {
	Date       string       `json:"date"`
	Machine    host.Machine `json:"machine"`
	Systems    []system     `json:"systems"`
	NotRun     []string     `json:"not_run,omitempty"`
	Rows       []row        `json:"rows"`
	BusyStarts int          `json:"busy_starts"`
	Sources    []string     `json:"sources"`
}

func msToUS(s stats.Spread) stats.Spread {
	return stats.Spread{Median: s.Median * 1000, Min: s.Min * 1000, Max: s.Max * 1000}
}

// combine builds the report from streamvs's results (sv, may be nil) and Kafka's
// (kr, may be nil). nodes is the JetStream cluster's size, for the description.
func combine(sv *svReport, kr *kafkaReport, nodes int, notRun []string) *combined {
	c := &combined{Date: time.Now().UTC().Format(time.RFC3339), NotRun: notRun}
	if sv != nil {
		c.Machine, c.BusyStarts = sv.Machine, sv.BusyStarts
		for _, k := range streamvsKeys {
			s := sv.Servers[k]
			if s == nil {
				continue
			}
			replicas := max(1, sv.Replicas)
			c.Systems = append(c.Systems, system{Key: k, Name: s.Name, Version: s.Version, Runs: sv.Runs,
				Setup: fmt.Sprintf("%d-node cluster on 127.0.0.1, every stream with %d replicas (file storage); clients connect to %s; bench/streamvs --replicas %d, scale %g, replay %s",
					nodes, replicas, s.URL, replicas, sv.Scale, tablefmt.Bytes(sv.ReplayBytes))})
			for _, r := range sv.Rows {
				o := r.Systems[k]
				if o == nil {
					continue
				}
				lat := ""
				switch r.Kind {
				case streambench.WorkPubSync:
					lat = "publish → ack, one publish at a time"
				case streambench.WorkWorkQueue:
					lat = "publish → consumer"
				}
				workload := r.Workload
				if r.Kind == streambench.WorkPubAsync {
					workload = fmt.Sprintf("async publish, at most %d unacknowledged", r.Window)
				}
				c.Rows = append(c.Rows, row{System: k, Key: r.Key, Group: svGroups[r.Key], Workload: workload, Size: r.Size, Msgs: r.Msgs,
					Runs: len(o.Results) + len(o.Failures), OKRuns: len(o.Results), Failures: o.Failures,
					MsgsPerSec: o.MsgsPerSec, MBPerSec: o.MBPerSec, P50US: o.P50, P99US: o.P99, Latency: lat})
			}
		}
	}
	if kr != nil {
		if c.Machine.CPUs == 0 {
			c.Machine = kr.Machine
		}
		c.BusyStarts += kr.BusyStarts
		s := kr.Server
		c.Systems = append(c.Systems, system{Key: "kafka", Name: fmt.Sprintf("Kafka RF%d", s.ReplicationFactor), Version: s.Version, Runs: kr.Runs,
			Setup: fmt.Sprintf("%d brokers on 127.0.0.1 (KRaft, each broker also a controller), topics of %s, replication factor %d, min.insync.replicas %d; Kafka's ProducerPerformance (acks=all; producer defaults: %s) and ConsumerPerformance, scale %g, replay %s",
				s.Brokers, tablefmt.Plural(s.Partitions, "partition"), s.ReplicationFactor, s.MinInsync, s.ProducerDefaults, kr.Scale, tablefmt.Bytes(kr.ReplayBytes))})
		for _, o := range kr.Rows {
			r := row{System: "kafka", Key: o.Key, Group: o.Group, Workload: o.Workload, Size: o.Size, Msgs: o.Msgs,
				Runs: len(o.Results) + len(o.Failures), OKRuns: len(o.Results), Failures: o.Failures, MsgsPerSec: o.MsgsPerSec, MBPerSec: o.MBPerSec}
			if o.Kind == kindProduce {
				r.P50US, r.P99US = msToUS(o.P50Ms), msToUS(o.P99Ms)
				r.Latency = "send → ack of each record (whole ms)"
			}
			c.Rows = append(c.Rows, r)
		}
	}
	return c
}

// spreadCell is "median (min–max)", or the median alone after one valid run.
func spreadCell(r *row, s stats.Spread, f func(float64) string) string {
	if r == nil || r.OKRuns == 0 {
		if r != nil && r.Runs > 0 {
			return "FAILED"
		}
		return "—"
	}
	if s.Median == 0 && s.Max == 0 {
		return "—"
	}
	c := f(s.Median)
	if r.OKRuns > 1 {
		c += " (" + f(s.Min) + "–" + f(s.Max) + ")"
	}
	if n := len(r.Failures); n > 0 {
		c += fmt.Sprintf(" [%d of %d runs failed]", n, r.Runs)
	}
	return c
}

func latCell(r *row, s stats.Spread) string {
	if r == nil || r.OKRuns == 0 || (s.Median == 0 && s.Max == 0) {
		return "—"
	}
	return loadgen.FormatDuration(time.Duration(s.Median * float64(time.Microsecond)))
}

func (c *combined) find(system, group string) *row {
	for i := range c.Rows {
		if c.Rows[i].System == system && c.Rows[i].Group == group {
			return &c.Rows[i]
		}
	}
	return nil
}

func (c *combined) system(key string) *system {
	for i := range c.Systems {
		if c.Systems[i].Key == key {
			return &c.Systems[i]
		}
	}
	return nil
}

func groupSize(g string) int {
	if strings.HasSuffix(g, "1k") {
		return kib
	}
	return 16
}

func writeCombined(w io.Writer, c *combined) {
	var names []string
	for _, s := range c.Systems {
		names = append(names, s.Name)
	}
	m := c.Machine
	fmt.Fprintf(w, "## Replicated streams: %s, %s\n\n", strings.Join(names, " vs "), c.Date)
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s memory, %s; servers and load generators share the CPUs, one system running at a time\n", m.CPUs, m.CPUModel, m.Memory, m.OS)
	for _, s := range c.Systems {
		fmt.Fprintf(w, "- %s (%s): %s; %s per row, median (min–max)\n", s.Name, s.Version, s.Setup, tablefmt.Plural(s.Runs, "run"))
	}
	for _, n := range c.NotRun {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if c.BusyStarts > 0 {
		fmt.Fprintf(w, "- %d runs started while other processes kept the machine busy: treat their rows with care\n", c.BusyStarts)
	}

	// Side by side.
	tern := c.system("tern") != nil
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Side by side")
	fmt.Fprintln(w)
	head, sep := "| what | size |", "|---|---|"
	for _, s := range c.Systems {
		head += fmt.Sprintf(" %s msgs/s | p50 | p99 |", s.Name)
		sep += "---|---|---|"
	}
	var refs []system
	if tern {
		for _, s := range c.Systems {
			if s.Key != "tern" {
				refs = append(refs, s)
				head += fmt.Sprintf(" Tern/%s msgs/s |", strings.Fields(s.Name)[0])
				sep += "---|"
			}
		}
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, g := range groups {
		line := fmt.Sprintf("| %s | %s |", g.What, tablefmt.Size(groupSize(g.Key)))
		found := false
		for _, s := range c.Systems {
			r := c.find(s.Key, g.Key)
			var rs, p50, p99 stats.Spread
			if r != nil {
				found = true
				rs, p50, p99 = r.MsgsPerSec, r.P50US, r.P99US
			}
			line += fmt.Sprintf(" %s | %s | %s |", spreadCell(r, rs, tablefmt.Rate), latCell(r, p50), latCell(r, p99))
		}
		for _, ref := range refs {
			t, o := c.find("tern", g.Key), c.find(ref.Key, g.Key)
			v := "—"
			if t != nil && o != nil && t.OKRuns > 0 && o.OKRuns > 0 && o.MsgsPerSec.Median > 0 {
				v = fmt.Sprintf("%.2f×", t.MsgsPerSec.Median/o.MsgsPerSec.Median)
			}
			line += " " + v + " |"
		}
		if found {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The pairs are as close as the tools allow, not identical: JetStream's publisher keeps a window of unacknowledged async publishes and each message is acknowledged on its own; Kafka's producer batches records (up to batch.size, waiting up to linger.ms) with up to 5 requests in flight, and a batch is acknowledged once min.insync.replicas of the replicas have it (acks=all). Latency at light load is JetStream publishing one message at a time (each waits for its ack) against Kafka's producer paced at a fixed rate; Kafka's tool reports whole milliseconds, and its latency counts the time a record waits in the producer's buffer. Replay is an ordered consumer (JetStream) against a consumer-group member (Kafka, timed over its fetching, without joining the group).")

	// Every row.
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Every row")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | row | workload | size | msgs | msgs/s | MB/s | p50 | p99 | latency measured |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range c.Systems {
		for i := range c.Rows {
			r := &c.Rows[i]
			if r.System != s.Key {
				continue
			}
			lat := r.Latency
			if lat == "" {
				lat = "—"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, r.Key, r.Workload, tablefmt.Size(r.Size),
				loadgen.Commas(float64(r.Msgs)), spreadCell(r, r.MsgsPerSec, tablefmt.Rate), spreadCell(r, r.MBPerSec, tablefmt.MBps),
				latCell(r, r.P50US), latCell(r, r.P99US), lat)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "msgs/s: acknowledged publishes (publish rows), distinct messages consumed (replay, work queue); MB/s: payload bytes, 10^6 bytes. p50, p99: medians across runs. The message counts of paired rows are the same for both systems.")

	var notes []string
	for _, r := range c.Rows {
		name := r.System
		if s := c.system(r.System); s != nil {
			name = s.Name
		}
		for _, f := range r.Failures {
			notes = append(notes, fmt.Sprintf("- %s %s: %s", name, r.Key, f))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Failed runs (not in the medians):")
		fmt.Fprintln(w)
		slices.Sort(notes)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	streams := fs.String("streams", "", "bench/streamvs's --json file (JetStream R3, and Tern R3 once it runs)")
	kafka := fs.String("kafka", "", "replicatedvs kafka's --json file")
	nodes := fs.Int("nodes", 3, "nodes of the streamvs systems' clusters, for the description")
	var notRun []string
	fs.Func("not-run", "a system that was not measured, and why (repeatable; a line of the report)", func(s string) error {
		notRun = append(notRun, s)
		return nil
	})
	mdPath := fs.String("md", "", "write the Markdown here (default: stdout)")
	jsonPath := fs.String("json", "", "also write the combined results as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *streams == "" && *kafka == "" {
		return errors.New("report: nothing to report (--streams, --kafka)")
	}
	var sv *svReport
	var kr *kafkaReport
	var sources []string
	if *streams != "" {
		sv = &svReport{}
		if err := records.ReadJSON(*streams, sv); err != nil {
			return err
		}
		sources = append(sources, *streams)
	}
	if *kafka != "" {
		kr = &kafkaReport{}
		if err := records.ReadJSON(*kafka, kr); err != nil {
			return err
		}
		sources = append(sources, *kafka)
	}
	c := combine(sv, kr, *nodes, notRun)
	c.Sources = sources
	out := stdout
	if *mdPath != "" {
		f, err := os.Create(*mdPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	writeCombined(out, c)
	if *jsonPath != "" {
		return records.WriteJSON(*jsonPath, c)
	}
	return nil
}
