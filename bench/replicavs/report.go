package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/stats"
)

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "failover" && args[0] != "idle") {
		return errors.New("report: want failover or idle first")
	}
	what := args[0]
	fs := flag.NewFlagSet("replicavs report "+what, flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the runs, one JSON object a line (required)")
	jsonOut := fs.String("json", "", "also write the summary as JSON to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *in == "" {
		return errors.New("report: --in is required")
	}
	var summary any
	if what == "failover" {
		runs, err := records.ReadLines[failoverResult](*in)
		if err != nil {
			return err
		}
		var md string
		md, summary = failoverReport(runs)
		fmt.Fprint(stdout, md)
	} else {
		runs, err := records.ReadLines[idleResult](*in)
		if err != nil {
			return err
		}
		var md string
		md, summary = idleReport(runs)
		fmt.Fprint(stdout, md)
	}
	if *jsonOut != "" {
		return records.WriteJSON(*jsonOut, summary)
	}
	return nil
}

// systemOrder puts Tern first, then the others by name.
func systemOrder(names []string) []string {
	slices.SortFunc(names, func(a, b string) int {
		if a == b {
			return 0
		}
		if a == "Tern" {
			return -1
		}
		if b == "Tern" {
			return 1
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(names)
}

func spreadCell(s stats.Spread, prec int) string {
	if s.Min == s.Max {
		return fmt.Sprintf("%.*f", prec, s.Median)
	}
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.Median, prec, s.Min, prec, s.Max)
}

// ---------------------------------------------------------------------------------
// failover

type failoverSummary struct {
	System   string `json:"system"`
	Version  string `json:"version"`
	ClientOn string `json:"client_on"`
	Runs     int    `json:"runs"`
	Failed   int    `json:"failed_runs"`
	// Medians (min–max) over the completed runs.
	FirstAckMs     stats.Spread `json:"first_ack_ms"`
	LongestGapMs   stats.Spread `json:"longest_gap_ms"`
	InFlightDoneMs stats.Spread `json:"in_flight_done_ms"`
	MaxLatencyMs   stats.Spread `json:"max_latency_ms"`
	Delayed        stats.Spread `json:"delayed"`
	Retried        stats.Spread `json:"retried"`
	ErrorsRetried  stats.Spread `json:"errors_retried"`
	FailedMsgs     stats.Spread `json:"failed_msgs"`
	Lost           stats.Spread `json:"lost"`
	Duplicated     stats.Spread `json:"duplicated"`
	// Totals over the completed runs.
	TotalMessages   int            `json:"total_messages"`
	TotalAcked      int            `json:"total_acked"`
	TotalDupAcks    int            `json:"total_duplicate_acks"`
	TotalFailedMsgs int            `json:"total_failed_msgs"`
	TotalLost       int            `json:"total_lost"`
	TotalDuplicated int            `json:"total_duplicated"`
	TotalUnacked    int            `json:"total_stored_unacked"`
	ErrorKinds      map[string]int `json:"error_kinds,omitempty"`
	FailedKinds     map[string]int `json:"failed_kinds,omitempty"`
	ErrorWindowMs   stats.Spread   `json:"error_window_ms"` // last error after the kill
	// TimeoutsSent counts the attempts that got no answer by when they were sent,
	// in 100 ms buckets from the kill (the key is the bucket's start in ms).
	TimeoutsSent  map[int]int  `json:"timeouts_sent,omitempty"`
	ReconnectedMs stats.Spread `json:"client_reconnected_ms"`
	Errors        []string     `json:"errors,omitempty"` // why runs failed
	Busy          int          `json:"busy_runs"`
}

func failoverReport(runs []failoverResult) (string, []failoverSummary) {
	type key struct{ clientOn, system string }
	groups := map[key][]failoverResult{}
	var systemsSeen, placements []string
	for _, r := range runs {
		k := key{r.ClientOn, r.System}
		groups[k] = append(groups[k], r)
		systemsSeen = append(systemsSeen, r.System)
		placements = append(placements, r.ClientOn)
	}
	sysNames := systemOrder(systemsSeen)
	slices.Sort(placements) // follower before leader
	placements = slices.Compact(placements)

	var out []failoverSummary
	var b strings.Builder
	for _, place := range placements {
		var sums []failoverSummary
		for _, sys := range sysNames {
			rs := groups[key{place, sys}]
			if len(rs) == 0 {
				continue
			}
			sums = append(sums, summarizeFailover(rs))
		}
		out = append(out, sums...)
		first := sums[0]
		fmt.Fprintf(&b, "Publisher on a %s node (%s). %d msgs/s for %.0f s, kill -9 of the stream's leader at %.0f s; median (min–max) over the runs.\n\n",
			place, placementWhat(place), firstRun(groups[key{place, first.System}]).Rate, firstRun(groups[key{place, first.System}]).DurationS,
			firstRun(groups[key{place, first.System}]).KillAtS)
		b.WriteString("| figure |")
		for _, s := range sums {
			fmt.Fprintf(&b, " %s %s |", s.System, s.Version)
		}
		b.WriteString("\n|---|")
		for range sums {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		row := func(name string, cell func(s failoverSummary) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, s := range sums {
				fmt.Fprintf(&b, " %s |", cell(s))
			}
			b.WriteString("\n")
		}
		row("runs (completed of all)", func(s failoverSummary) string { return fmt.Sprintf("%d of %d", s.Runs-s.Failed, s.Runs) })
		row("kill → first ack of a publish sent after it, ms", func(s failoverSummary) string { return spreadCell(s.FirstAckMs, 0) })
		row("longest time without an ack, ms", func(s failoverSummary) string { return spreadCell(s.LongestGapMs, 0) })
		row("kill → every message in flight at the kill acked, ms", func(s failoverSummary) string { return spreadCell(s.InFlightDoneMs, 0) })
		row("slowest message, first attempt → ack, ms", func(s failoverSummary) string { return spreadCell(s.MaxLatencyMs, 0) })
		row("messages acked more than 1 s after their first attempt, per run", func(s failoverSummary) string { return spreadCell(s.Delayed, 0) })
		if place == "leader" {
			row("kill → client connected to another node, ms", func(s failoverSummary) string { return spreadCell(s.ReconnectedMs, 0) })
		}
		row("errors the client returned (each retried), per run", func(s failoverSummary) string { return spreadCell(s.ErrorsRetried, 0) })
		row("kill → last such error, ms", func(s failoverSummary) string { return spreadCell(s.ErrorWindowMs, 0) })
		row("messages that needed a retry, per run", func(s failoverSummary) string { return spreadCell(s.Retried, 0) })
		row("**errors left after retries** (all runs)", func(s failoverSummary) string { return fmt.Sprint(s.TotalFailedMsgs) })
		row("**acked messages lost** (all runs)", func(s failoverSummary) string { return fmt.Sprint(s.TotalLost) })
		row("**messages stored twice** (all runs)", func(s failoverSummary) string { return fmt.Sprint(s.TotalDuplicated) })
		row("acks saying \"duplicate\" (a retry of a stored message), all runs", func(s failoverSummary) string { return fmt.Sprint(s.TotalDupAcks) })
		row("messages acked / published (all runs)", func(s failoverSummary) string { return fmt.Sprintf("%d / %d", s.TotalAcked, s.TotalMessages) })
		b.WriteString("\n")
		for _, s := range sums {
			if len(s.ErrorKinds) > 0 {
				fmt.Fprintf(&b, "- %s: errors the client returned, all runs: %s\n", s.System, kindsText(s.ErrorKinds))
			}
			if len(s.TimeoutsSent) > 0 {
				var parts []string
				for _, k := range slices.Sorted(maps.Keys(s.TimeoutsSent)) {
					parts = append(parts, fmt.Sprintf("%d–%d ms: %d", k, k+100, s.TimeoutsSent[k]))
				}
				fmt.Fprintf(&b, "- %s: attempts that got no answer (ack timeout), by when they were sent after the kill, all runs: %s\n", s.System, strings.Join(parts, "; "))
			}
			if len(s.FailedKinds) > 0 {
				fmt.Fprintf(&b, "- %s: errors left after retries, all runs: %s\n", s.System, kindsText(s.FailedKinds))
			}
			for _, e := range s.Errors {
				fmt.Fprintf(&b, "- %s: a run did not complete: %s\n", s.System, e)
			}
			if s.Busy > 0 {
				fmt.Fprintf(&b, "- %s: %d run(s) started on a busy machine\n", s.System, s.Busy)
			}
		}
		b.WriteString("\n")
	}
	return b.String(), out
}

func placementWhat(place string) string {
	if place == "leader" {
		return "the node killed: its client also moves to another node"
	}
	return "a node that survives: its connection stays up"
}

func firstRun(rs []failoverResult) failoverResult {
	if len(rs) == 0 {
		return failoverResult{}
	}
	return rs[0]
}

func kindsText(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	slices.SortStableFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func summarizeFailover(rs []failoverResult) failoverSummary {
	s := failoverSummary{System: rs[0].System, ClientOn: rs[0].ClientOn, Runs: len(rs)}
	var first, gap, inflight, maxLat, delayed, retried, errs, failed, lost, dups, errWin, recon []float64
	for _, r := range rs {
		if r.Busy {
			s.Busy++
		}
		if r.Version != "" {
			s.Version = r.Version
		}
		if r.Error != "" {
			s.Failed++
			s.Errors = append(s.Errors, fmt.Sprintf("run %d: %s", r.Run, r.Error))
			continue
		}
		first = append(first, r.FirstAckMs)
		gap = append(gap, r.LongestGapMs)
		inflight = append(inflight, r.InFlightDoneMs)
		maxLat = append(maxLat, r.MaxLatencyMs)
		delayed = append(delayed, float64(r.Delayed))
		retried = append(retried, float64(r.Retried))
		errs = append(errs, float64(sumCounts(r.Errors)))
		failed = append(failed, float64(r.Failed))
		lost = append(lost, float64(r.Lost))
		dups = append(dups, float64(r.Duplicated))
		errWin = append(errWin, r.LastErrorMs)
		if r.ClientReconnectedMs != 0 {
			recon = append(recon, r.ClientReconnectedMs)
		}
		s.TotalMessages += r.Messages
		s.TotalAcked += r.Acked
		s.TotalDupAcks += r.AckedDuplicate
		s.TotalFailedMsgs += r.Failed
		s.TotalLost += r.Lost
		s.TotalDuplicated += r.Duplicated
		s.TotalUnacked += r.StoredUnacked
		for k, v := range r.Errors {
			if s.ErrorKinds == nil {
				s.ErrorKinds = map[string]int{}
			}
			s.ErrorKinds[k] += v
		}
		for _, t := range r.TimeoutsSentMs {
			if s.TimeoutsSent == nil {
				s.TimeoutsSent = map[int]int{}
			}
			s.TimeoutsSent[int(math.Floor(t/100))*100]++
		}
		for k, v := range r.FailedKinds {
			if s.FailedKinds == nil {
				s.FailedKinds = map[string]int{}
			}
			s.FailedKinds[k] += v
		}
	}
	s.FirstAckMs, s.LongestGapMs, s.InFlightDoneMs = stats.SpreadOf(first), stats.SpreadOf(gap), stats.SpreadOf(inflight)
	s.MaxLatencyMs, s.Delayed = stats.SpreadOf(maxLat), stats.SpreadOf(delayed)
	s.Retried, s.ErrorsRetried, s.FailedMsgs = stats.SpreadOf(retried), stats.SpreadOf(errs), stats.SpreadOf(failed)
	s.Lost, s.Duplicated, s.ErrorWindowMs, s.ReconnectedMs = stats.SpreadOf(lost), stats.SpreadOf(dups), stats.SpreadOf(errWin), stats.SpreadOf(recon)
	return s
}

// ---------------------------------------------------------------------------------
// idle

type idleSummary struct {
	System   string  `json:"system"`
	Version  string  `json:"version"`
	Runs     int     `json:"runs"`
	Failed   int     `json:"failed_runs"`
	Streams  int     `json:"streams"`
	Replicas int     `json:"replicas"`
	WindowS  float64 `json:"window_s"`
	// Per node (node order), median (min–max) over completed runs.
	NodeCPUPct   []stats.Spread `json:"node_cpu_pct"`
	NodeRSSMiB   []stats.Spread `json:"node_rss_mib"`
	NodeSliceMax []stats.Spread `json:"node_slice_max_pct"`
	TotalCPUPct  stats.Spread   `json:"total_cpu_pct"`
	TotalRSSMiB  stats.Spread   `json:"total_rss_mib"`
	BaseRuns     int            `json:"baseline_runs"`
	BaseCPUPct   stats.Spread   `json:"baseline_total_cpu_pct"`
	BaseRSSMiB   stats.Spread   `json:"baseline_total_rss_mib"`
	OtherCPUPct  stats.Spread   `json:"other_cpu_pct"`
	CreateS      stats.Spread   `json:"create_s"`
	LedS         stats.Spread   `json:"led_s"`
	CreateErrors map[string]int `json:"create_errors,omitempty"`
	Errors       []string       `json:"errors,omitempty"`
}

func idleReport(runs []idleResult) (string, []idleSummary) {
	bySys := map[string][]idleResult{}
	var names []string
	for _, r := range runs {
		bySys[r.System] = append(bySys[r.System], r)
		names = append(names, r.System)
	}
	var sums []idleSummary
	for _, n := range systemOrder(names) {
		sums = append(sums, summarizeIdle(bySys[n]))
	}
	var b strings.Builder
	if len(sums) == 0 {
		return "no runs\n", nil
	}
	fmt.Fprintf(&b, "%d streams of %d replicas on 3 nodes, every one led; CPU is user+system time over %.0f s of idleness in %% of one core, RSS at its end; median (min–max) over the runs.\n\n",
		sums[0].Streams, sums[0].Replicas, sums[0].WindowS)
	b.WriteString("| |")
	for _, s := range sums {
		fmt.Fprintf(&b, " %s %s CPU %% | %s RSS MiB |", s.System, s.Version, s.System)
	}
	b.WriteString("\n|---|")
	for range sums {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	maxNodes := 0
	for _, s := range sums {
		maxNodes = max(maxNodes, len(s.NodeCPUPct))
	}
	for i := range maxNodes {
		fmt.Fprintf(&b, "| node %d |", i+1)
		for _, s := range sums {
			if i < len(s.NodeCPUPct) {
				fmt.Fprintf(&b, " %s | %s |", spreadCell(s.NodeCPUPct[i], 2), spreadCell(s.NodeRSSMiB[i], 0))
			} else {
				b.WriteString(" | |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("| **total** |")
	for _, s := range sums {
		fmt.Fprintf(&b, " **%s** | **%s** |", spreadCell(s.TotalCPUPct, 2), spreadCell(s.TotalRSSMiB, 0))
	}
	b.WriteString("\n| total with no stream (baseline) |")
	for _, s := range sums {
		if s.BaseRuns == 0 {
			b.WriteString(" – | – |")
			continue
		}
		fmt.Fprintf(&b, " %s | %s |", spreadCell(s.BaseCPUPct, 2), spreadCell(s.BaseRSSMiB, 0))
	}
	b.WriteString("\n\n| |")
	for _, s := range sums {
		fmt.Fprintf(&b, " %s |", s.System)
	}
	b.WriteString("\n|---|")
	for range sums {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	row := func(name string, cell func(s idleSummary) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range sums {
			fmt.Fprintf(&b, " %s |", cell(s))
		}
		b.WriteString("\n")
	}
	row("runs (completed of all)", func(s idleSummary) string { return fmt.Sprintf("%d of %d", s.Runs-s.Failed, s.Runs) })
	row("making the streams, s", func(s idleSummary) string { return spreadCell(s.CreateS, 1) })
	row("until every stream is led, all replicas current, s", func(s idleSummary) string { return spreadCell(s.LedS, 1) })
	row("busiest slice (10 s unless --slice) of any node, % of a core", func(s idleSummary) string {
		var m []float64
		for _, x := range s.NodeSliceMax {
			m = append(m, x.Max)
		}
		if len(m) == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f", slices.Max(m))
	})
	row("other processes meanwhile, % of a core", func(s idleSummary) string { return spreadCell(s.OtherCPUPct, 2) })
	b.WriteString("\n")
	for _, s := range sums {
		if len(s.CreateErrors) > 0 {
			fmt.Fprintf(&b, "- %s: create requests that failed and were retried: %s\n", s.System, kindsText(s.CreateErrors))
		}
		for _, e := range s.Errors {
			fmt.Fprintf(&b, "- %s: a run did not complete: %s\n", s.System, e)
		}
	}
	return b.String(), sums
}

func summarizeIdle(rs []idleResult) idleSummary {
	s := idleSummary{System: rs[0].System, Runs: len(rs), Streams: rs[0].Streams, Replicas: rs[0].Replicas}
	var cpu, rss, slc [][]float64
	var tc, tr, bc, br, oc, cs, ls []float64
	for _, r := range rs {
		if r.Version != "" {
			s.Version = r.Version
		}
		if r.Error != "" || r.Idle == nil {
			s.Failed++
			s.Errors = append(s.Errors, fmt.Sprintf("run %d: %s", r.Run, r.Error))
			continue
		}
		s.WindowS = r.Idle.WindowS
		for i, n := range r.Idle.Nodes {
			if i >= len(cpu) {
				cpu, rss, slc = append(cpu, nil), append(rss, nil), append(slc, nil)
			}
			cpu[i] = append(cpu[i], n.CPUPct)
			rss[i] = append(rss[i], n.RSSMiB)
			slc[i] = append(slc[i], n.SliceMaxPct)
		}
		tc, tr, oc = append(tc, r.Idle.TotalCPUPct), append(tr, r.Idle.TotalRSSMiB), append(oc, r.Idle.OtherCPUPct)
		if r.Baseline != nil {
			bc, br = append(bc, r.Baseline.TotalCPUPct), append(br, r.Baseline.TotalRSSMiB)
		}
		cs, ls = append(cs, r.CreateS), append(ls, r.LedS)
		for k, v := range r.CreateErrors {
			if s.CreateErrors == nil {
				s.CreateErrors = map[string]int{}
			}
			s.CreateErrors[k] += v
		}
	}
	for i := range cpu {
		s.NodeCPUPct = append(s.NodeCPUPct, stats.SpreadOf(cpu[i]))
		s.NodeRSSMiB = append(s.NodeRSSMiB, stats.SpreadOf(rss[i]))
		s.NodeSliceMax = append(s.NodeSliceMax, stats.SpreadOf(slc[i]))
	}
	s.TotalCPUPct, s.TotalRSSMiB, s.OtherCPUPct = stats.SpreadOf(tc), stats.SpreadOf(tr), stats.SpreadOf(oc)
	s.BaseRuns, s.BaseCPUPct, s.BaseRSSMiB = len(bc), stats.SpreadOf(bc), stats.SpreadOf(br)
	s.CreateS, s.LedS = stats.SpreadOf(cs), stats.SpreadOf(ls)
	return s
}
