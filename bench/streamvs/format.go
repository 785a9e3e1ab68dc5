package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/internal/loadgen"
)

func kbLabel(kb int64) string {
	if kb >= 1<<20 {
		return fmt.Sprintf("%.2f GiB", float64(kb)/(1<<20))
	}
	return fmt.Sprintf("%.0f MiB", float64(kb)/(1<<10))
}

func usDur(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

// rateCell is "median (min–max)" for a throughput.
func rateCell(o *outcome, runs int) string {
	if o == nil {
		return "—"
	}
	return tablefmt.RateCell(o.MsgsPerSec, len(o.Results), len(o.Failures), runs)
}

// latCell is the median of a latency percentile, with its min–max when withSpread.
func latCell(o *outcome, sp stats.Spread, withSpread bool) string {
	if o == nil || len(o.Results) == 0 || sp.Median == 0 {
		return "—"
	}
	s := loadgen.FormatDuration(usDur(sp.Median))
	if withSpread && len(o.Results) > 1 {
		s += " (" + loadgen.FormatDuration(usDur(sp.Min)) + "–" + loadgen.FormatDuration(usDur(sp.Max)) + ")"
	}
	return s
}

func writeMarkdown(w io.Writer, rep *report, systems []*system) {
	m := rep.Machine
	var names []string
	for _, s := range systems {
		names = append(names, s.Name)
	}
	fmt.Fprintf(w, "## Durable streams: %s, %s\n\n", strings.Join(names, " vs "), rep.Date)
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s memory, %s, GOMAXPROCS %d\n", m.CPUs, m.CPUModel, m.Memory, m.OS, m.GOMAXPROCS)
	fmt.Fprintf(w, "- load generator: bench/streamvs (%s), %d runs per row per broker, median (min–max); scale %g, replay %s\n",
		m.Go, rep.Runs, rep.Scale, tablefmt.Bytes(rep.ReplayBytes))
	if rep.Replicas > 1 {
		fmt.Fprintf(w, "- every stream has %d replicas (file storage, acknowledged once the replicas' quorum has it)\n", rep.Replicas)
	}
	if rep.Random {
		fmt.Fprintln(w, "- payloads: random bytes after the sequence number, each of a publisher's buffers different (--random-payloads)")
	} else {
		fmt.Fprintln(w, "- payloads: zero bytes after the sequence number, which a broker that compresses (Tern's replicated entries) shrinks to almost nothing")
	}
	if rep.BusyStarts > 0 {
		fmt.Fprintf(w, "- %d runs started while other processes kept the machine busy: treat their rows with care\n", rep.BusyStarts)
	}
	for _, s := range systems {
		fmt.Fprintf(w, "- %s %s at %s\n", s.Name, s.Version, s.URL)
	}
	fmt.Fprintln(w)

	ratio := rep.Servers["js"] != nil && rep.Servers["tern"] != nil
	head := "| row | workload | size | msgs |"
	sep := "|---|---|---|---|"
	for _, s := range systems {
		head += fmt.Sprintf(" %s msgs/s | %s MB/s | %s p99 | %s time |", s.Name, s.Name, s.Name, s.Name)
		sep += "---|---|---|---|"
	}
	if ratio {
		head += " msgs/s Tern/JetStream |"
		sep += "---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, r := range rep.Rows {
		line := fmt.Sprintf("| %s | %s | %s | %s |", r.Key, r.Workload, tablefmt.Size(r.Size), loadgen.Commas(float64(r.Msgs)))
		for _, s := range systems {
			o := r.Systems[s.Key]
			mb, secs := "—", "—"
			if o != nil && len(o.Results) > 0 {
				mb, secs = tablefmt.MBps(o.MBPerSec.Median), fmt.Sprintf("%.2fs", o.Seconds.Median)
			}
			line += fmt.Sprintf(" %s | %s | %s | %s |", rateCell(o, rep.Runs), mb, latCell(o, o.P99, true), secs)
		}
		if ratio {
			v := "—"
			if r.RatioRate > 0 {
				v = fmt.Sprintf("%.2f×", r.RatioRate)
			}
			line += " " + v + " |"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "msgs/s: acknowledged publishes (pubasync, pubsync), distinct messages consumed (fetch, replay, workqueue); MB/s: payload bytes. p99: publish round trip (pubsync), publish to consumer (workqueue). time: the timed phase of one run (pre-fills excluded), median.")

	// Latency detail.
	var latRows []*rowReport
	for _, r := range rep.Rows {
		if r.Kind == streambench.WorkPubSync || r.Kind == streambench.WorkWorkQueue {
			latRows = append(latRows, r)
		}
	}
	if len(latRows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Latency (median across runs):")
		fmt.Fprintln(w)
		head, sep = "| row | what |", "|---|---|"
		for _, s := range systems {
			head += fmt.Sprintf(" %s p50 | p90 | p99 | p99.9 | max |", s.Name)
			sep += "---|---|---|---|---|"
		}
		fmt.Fprintln(w, head)
		fmt.Fprintln(w, sep)
		for _, r := range latRows {
			what := "publish → ack"
			if r.Kind == streambench.WorkWorkQueue {
				what = "publish → consumer"
			}
			line := fmt.Sprintf("| %s | %s |", r.Key, what)
			for _, s := range systems {
				o := r.Systems[s.Key]
				line += fmt.Sprintf(" %s | %s | %s | %s | %s |", latCell(o, o.P50, false), latCell(o, o.P90, false),
					latCell(o, o.P99, false), latCell(o, o.P999, false), latCell(o, o.MaxLat, false))
			}
			fmt.Fprintln(w, line)
		}
	}

	// Server memory, for the brokers whose pid was given.
	var withPid []*system
	for _, s := range systems {
		if s.Pid != 0 {
			withPid = append(withPid, s)
		}
	}
	if len(withPid) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Server memory (median across runs; RSS when the stream was ready and when the timed phase ended, peak RSS of the process so far):")
		fmt.Fprintln(w)
		head, sep = "| row |", "|---|"
		for _, s := range withPid {
			head += fmt.Sprintf(" %s RSS ready | RSS done | peak |", s.Name)
			sep += "---|---|---|"
		}
		fmt.Fprintln(w, head)
		fmt.Fprintln(w, sep)
		for _, r := range rep.Rows {
			line := fmt.Sprintf("| %s |", r.Key)
			for _, s := range withPid {
				o := r.Systems[s.Key]
				var ready, done, hwm []float64
				for _, mm := range o.Memory {
					ready, done, hwm = append(ready, float64(mm.RSSReadyKB)), append(done, float64(mm.RSSDoneKB)), append(hwm, float64(mm.HWMDoneKB))
				}
				if len(ready) == 0 {
					line += " — | — | — |"
					continue
				}
				line += fmt.Sprintf(" %s | %s | %s |", kbLabel(int64(stats.SpreadOf(ready).Median)), kbLabel(int64(stats.SpreadOf(done).Median)), kbLabel(int64(stats.SpreadOf(hwm).Max)))
			}
			fmt.Fprintln(w, line)
		}
	}

	var notes []string
	for _, r := range rep.Rows {
		for _, s := range systems {
			o := r.Systems[s.Key]
			for _, f := range o.Failures {
				notes = append(notes, fmt.Sprintf("- %s %s: %s", s.Name, r.Key, f))
			}
			if o.Errors > 0 {
				notes = append(notes, fmt.Sprintf("- %s %s: %d errors (failed publishes, fetches or acks) in the valid runs", s.Name, r.Key, o.Errors))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Failed runs (not in the medians) and errors:")
		fmt.Fprintln(w)
		slices.Sort(notes)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}
