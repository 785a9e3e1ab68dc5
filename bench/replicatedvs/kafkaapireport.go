package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/tern-mq/tern/bench/internal/stats"
)

// The Kafka API report: one table per node count, Tern beside Kafka, from the JSON
// files of "replicatedvs kafkaapi" (one per system and node count).

// Goals of the Kafka API issue: Tern/Kafka throughput at least 1.5, p99 at most 0.5.
const (
	apiGoalThroughput = 1.5
	apiGoalP99        = 0.5
)

// apiCell is "median (min–max)", "FAILED" with no valid run, "—" without the row.
func apiCell(o *apiOutcome, s stats.Spread, f func(float64) string) string {
	if o == nil {
		return "—"
	}
	if len(o.Results) == 0 {
		if len(o.Failures) > 0 {
			return "FAILED"
		}
		return "—"
	}
	if s.Median == 0 && s.Max == 0 {
		return "—"
	}
	c := f(s.Median)
	if len(o.Results) > 1 {
		c += " (" + f(s.Min) + "–" + f(s.Max) + ")"
	}
	if n := len(o.Failures); n > 0 {
		c += fmt.Sprintf(" [%d of %d runs failed]", n, n+len(o.Results))
	}
	return c
}

func apiRatio(tern, kafka *apiOutcome, s func(*apiOutcome) stats.Spread, goal float64, higher bool) string {
	if tern == nil || kafka == nil || len(tern.Results) == 0 || len(kafka.Results) == 0 {
		return "—"
	}
	k, t := s(kafka).Median, s(tern).Median
	if k <= 0 {
		return "—"
	}
	r := t / k
	met := r <= goal
	if higher {
		met = r >= goal
	}
	mark := "✗"
	if met {
		mark = "✓"
	}
	return fmt.Sprintf("%.2f× %s", r, mark)
}

func findAPIRow(r *apiReport, key string) *apiOutcome {
	if r == nil {
		return nil
	}
	for _, o := range r.Rows {
		if o.Key == key {
			return o
		}
	}
	return nil
}

// writeAPIReport writes the Markdown: for each node count, the throughput, p99,
// memory and CPU table, then p50 and p99.9.
func writeAPIReport(w io.Writer, reps []*apiReport) {
	nodes := []int{}
	for _, r := range reps {
		if !slices.Contains(nodes, r.System.Nodes) {
			nodes = append(nodes, r.System.Nodes)
		}
	}
	slices.Sort(nodes)
	busy := 0
	var loads []float64
	for _, r := range reps {
		busy += r.BusyStarts
		loads = append(loads, r.LoadAvg...)
	}
	if len(reps) > 0 {
		m := reps[0].Machine
		fmt.Fprintf(w, "Machine: %d CPUs (%s), %s, %s, %s. ", m.CPUs, m.CPUModel, m.Memory, m.OS, m.Go)
		fmt.Fprintf(w, "%s per row and system, one system running at a time", tablefmt.Plural(reps[0].Runs, "run"))
		if r := reps[0].Rounds; r > 1 {
			fmt.Fprintf(w, ", in %d rounds: the systems take turns, each started afresh for every round", r)
		}
		fmt.Fprint(w, ".\n\n")
	}
	if len(loads) > 0 {
		l := stats.SpreadOf(loads)
		fmt.Fprintf(w, "Load average (1 min) before the runs: median %.2f, %.2f–%.2f; runs started on a machine still busy after the quiet wait: %d.\n\n", l.Median, l.Min, l.Max, busy)
	}
	for _, n := range nodes {
		var kafka, tern *apiReport
		for _, r := range reps {
			if r.System.Nodes != n {
				continue
			}
			switch r.System.Key {
			case "kafka":
				kafka = r
			case "tern":
				tern = r
			}
		}
		title := "One node"
		if n > 1 {
			title = fmt.Sprintf("%d nodes", n)
		}
		fmt.Fprintf(w, "### %s\n\n", title)
		for _, r := range []*apiReport{kafka, tern} {
			if r == nil {
				continue
			}
			s := r.System
			fmt.Fprintf(w, "- **%s %s**: %s; topics of %s, replication factor %d (CreateTopics), bootstrap %s.",
				s.Name, s.Version, s.Setup, tablefmt.Plural(s.Partitions, "partition"), s.ReplicationFactor, s.Bootstrap)
			if !s.HWMReset {
				fmt.Fprint(w, " Peak RSS is since the process started (resetting it failed).")
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| row | size | records | Kafka msgs/s | Tern msgs/s | Tern/Kafka | Kafka p99 | Tern p99 | Tern/Kafka | Kafka peak RSS | Tern peak RSS |"+
			" Kafka server CPU µs/rec | Tern server CPU µs/rec | Kafka client CPU µs/rec | Tern client CPU µs/rec |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		var keys []*apiOutcome
		for _, r := range []*apiReport{kafka, tern} {
			if r == nil {
				continue
			}
			for _, o := range r.Rows {
				if !slices.ContainsFunc(keys, func(x *apiOutcome) bool { return x.Key == o.Key }) {
					keys = append(keys, o)
				}
			}
		}
		for _, row := range keys {
			ko, to := findAPIRow(kafka, row.Key), findAPIRow(tern, row.Key)
			rateSpread := func(o *apiOutcome) stats.Spread { return o.MsgsPerSec }
			p99 := func(o *apiOutcome) stats.Spread { return o.P99US }
			tput := apiRatio(to, ko, rateSpread, apiGoalThroughput, true)
			if row.Kind == kindE2E {
				tput = "(paced)"
			}
			lat := apiRatio(to, ko, p99, apiGoalP99, false)
			if !hasLatency(row.Kind) {
				lat = "—"
			}
			hwm := func(o *apiOutcome) stats.Spread { return o.HWMKiB }
			scpu := func(o *apiOutcome) stats.Spread { return o.ServerCPUUS }
			ccpu := func(o *apiOutcome) stats.Spread { return o.ClientCPUUS }
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Workload, tablefmt.Size(row.Size), tablefmt.Rate(float64(row.Msgs)),
				apiCell(ko, spreadOf(ko, rateSpread), tablefmt.Rate), apiCell(to, spreadOf(to, rateSpread), tablefmt.Rate), tput,
				apiCell(ko, spreadOf(ko, p99), usLabel), apiCell(to, spreadOf(to, p99), usLabel), lat,
				apiCell(ko, spreadOf(ko, hwm), kibLabel), apiCell(to, spreadOf(to, hwm), kibLabel),
				apiCell(ko, spreadOf(ko, scpu), cpuLabel), apiCell(to, spreadOf(to, scpu), cpuLabel),
				apiCell(ko, spreadOf(ko, ccpu), cpuLabel), apiCell(to, spreadOf(to, ccpu), cpuLabel))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, apiCPUNote)
		fmt.Fprintln(w)
		var latencyRows []*apiOutcome
		for _, row := range keys {
			if hasLatency(row.Kind) {
				latencyRows = append(latencyRows, row)
			}
		}
		if len(latencyRows) > 0 {
			fmt.Fprintln(w, "Latency detail (median over runs; producer rows: send → ack, whole ms as ProducerPerformance prints it; e2e rows: publish → receive):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| row | size | Kafka p50 | Tern p50 | Kafka p99.9 | Tern p99.9 |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|")
		}
		for _, row := range latencyRows {
			ko, to := findAPIRow(kafka, row.Key), findAPIRow(tern, row.Key)
			med := func(o *apiOutcome, s func(*apiOutcome) stats.Spread) string {
				if o == nil || len(o.Results) == 0 {
					return "—"
				}
				return usLabel(s(o).Median)
			}
			p50 := func(o *apiOutcome) stats.Spread { return o.P50US }
			p999 := func(o *apiOutcome) stats.Spread { return o.P999US }
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", row.Workload, tablefmt.Size(row.Size), med(ko, p50), med(to, p50), med(ko, p999), med(to, p999))
		}
		if len(latencyRows) > 0 {
			fmt.Fprintln(w)
		}
		var fails []string
		for _, r := range []*apiReport{kafka, tern} {
			if r == nil {
				continue
			}
			for _, o := range r.Rows {
				for _, f := range o.Failures {
					fails = append(fails, fmt.Sprintf("- %s, %s: %s", r.System.Name, o.Key, f))
				}
			}
		}
		if len(fails) > 0 {
			fmt.Fprintln(w, "Failed runs (left out of the medians):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, strings.Join(fails, "\n"))
			fmt.Fprintln(w)
		}
	}
}

// apiCPUNote says under each main table what its CPU columns count.
const apiCPUNote = "CPU µs/rec: user + system CPU time over the run's measured phase (the window of the peak RSS; a consumer row's after its pre-fill and the servers' settling), " +
	"divided by the records of that phase (a producer or e2e row's warm-up records included: they are sent in it). " +
	"Server: the system's processes, summed over a cluster (/proc/<pid>/stat, 10 ms ticks). " +
	"Client: the harness process for the franz-go rows (producer and consumer, e2e both); the tool's JVM for the ProducerPerformance and ConsumerPerformance rows, " +
	"which includes the JVM's start-up (and so overstates the tool's cost per record, the more the fewer records). " +
	"µs/rec × records/s ÷ 10⁶ is about the cores a side kept busy: when server and client together come near the machine's CPUs, the row is CPU-bound, and the larger side binds it."

// spreadOf is s(o), or the zero Spread for a missing row.
func spreadOf(o *apiOutcome, s func(*apiOutcome) stats.Spread) stats.Spread {
	if o == nil {
		return stats.Spread{}
	}
	return s(o)
}

func cmdKafkaAPIReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs kafkaapi-report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mdPath := fs.String("md", "", "write the Markdown here (default: stdout)")
	mergedDir := fs.String("merged", "", "also write each system's merged report here, as <system>-<nodes>.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("kafkaapi-report: name the JSON files of replicatedvs kafkaapi")
	}
	var reps []*apiReport
	for _, p := range fs.Args() {
		r := &apiReport{}
		if err := records.ReadJSON(p, r); err != nil {
			return err
		}
		reps = append(reps, r)
	}
	reps = mergeAPIReports(reps)
	if *mergedDir != "" {
		for _, r := range reps {
			p := filepath.Join(*mergedDir, fmt.Sprintf("%s-%d.json", r.System.Key, r.System.Nodes))
			if err := records.WriteJSON(p, r); err != nil {
				return err
			}
		}
	}
	out := stdout
	if *mdPath != "" {
		f, err := os.Create(*mdPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	writeAPIReport(out, reps)
	return nil
}

// mergeAPIReports joins the reports of one system on one node count (the rounds
// of an interleaved run, each a fresh start of the system) into one: each row's
// runs are those of every round, in round order. Reports keep their order of
// first appearance; a merged one keeps its first round's description, with the
// processes of every round.
func mergeAPIReports(reps []*apiReport) []*apiReport {
	var out []*apiReport
	for _, r := range reps {
		i := slices.IndexFunc(out, func(o *apiReport) bool {
			return o.System.Key == r.System.Key && o.System.Nodes == r.System.Nodes
		})
		if i < 0 {
			out = append(out, r)
			continue
		}
		m := out[i]
		m.Rounds = max(m.Rounds, 1) + max(r.Rounds, 1)
		m.Runs += r.Runs
		m.BusyStarts += r.BusyStarts
		m.LoadAvg = append(m.LoadAvg, r.LoadAvg...)
		m.Seconds += r.Seconds
		m.System.Pids = append(m.System.Pids, r.System.Pids...)
		m.System.HWMReset = m.System.HWMReset && r.System.HWMReset
		for _, row := range r.Rows {
			if into := findAPIRow(m, row.Key); into != nil {
				into.Results = append(into.Results, row.Results...)
				into.Failures = append(into.Failures, row.Failures...)
			} else {
				m.Rows = append(m.Rows, row)
			}
		}
	}
	for _, r := range out {
		for _, row := range r.Rows {
			row.summarize()
		}
	}
	return out
}

// hasLatency reports whether a row's kind measures latency: the producer tools'
// send → ack and the e2e rows' publish → receive; the consume rows and the
// franz-go producer row measure throughput only.
func hasLatency(kind string) bool {
	return kind == kindProduce || kind == kindE2E
}
