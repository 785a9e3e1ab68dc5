package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/stats"
)

// A run of the recovery or interest measurement appends one JSON object (a
// recoveryResult or interestResult) as a line to a file; report reads those files
// and summarizes each figure per system as the median and min–max over the runs
// that completed.

// metric is one figure of a measurement: its JSON key in the run records.
type metric struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	Unit  string `json:"unit"` // "ms", "B" or "" (a count)
}

var recoveryMetrics = []metric{
	{"resumed_ms", "subscriber receives again: first message published after the kill", "ms"},
	{"disconnected_ms", "subscriber's client notices the lost connection", "ms"},
	{"reconnected_ms", "subscriber's client is connected to another node", "ms"},
	{"lost", "messages lost (published, never received)", ""},
	{"routes_gone_ms", "surviving nodes show no route to the killed node", "ms"},
	{"member_gone_ms", "surviving nodes no longer list it as a member", "ms"},
}

var interestMetrics = []metric{
	{"subscribed_ms", "subscriptions made on node 1 (to the client's flush)", "ms"},
	{"all_seen_ms", "every other node holds them all, from the first subscribe", "ms"},
	{"lag_ms", "of which after the client's flush", "ms"},
	{"peer_bytes_per_entry", "RSS growth per remote interest entry, other nodes (median)", "B"},
	{"local_bytes_per_sub", "RSS growth per subscription, node 1", "B"},
}

// systemSummary is one system's runs of a measurement.
type systemSummary struct {
	Name    string                  `json:"name"`
	Version string                  `json:"version"`
	Runs    int                     `json:"runs"`
	Failed  []string                `json:"failed,omitempty"`
	Metrics map[string]stats.Spread `json:"metrics"`
	// Details are the settings of the runs, as the first completed run recorded
	// them (nodes, rate, subscriptions, ...).
	Details map[string]any   `json:"details,omitempty"`
	Records []map[string]any `json:"records"`
}

// section is the summary of one measurement across systems.
type section struct {
	Metrics []metric                  `json:"metrics"`
	Systems map[string]*systemSummary `json:"systems"`
}

// detailKeys are the record fields that describe a run's settings rather than
// measure it.
var detailKeys = []string{"nodes", "rate", "reconnect_wait_ms", "victim", "reconnected_to", "subs"}

// readRecords reads a file of JSON objects, one a line (blank lines skipped), each
// naming its system.
func readRecords(path string) ([]map[string]any, error) {
	recs, err := records.ReadLines[map[string]any](path)
	if err != nil {
		return nil, err
	}
	for i, m := range recs {
		if _, ok := m["system"].(string); !ok {
			return nil, fmt.Errorf("%s: record %d: no system", path, i+1)
		}
	}
	return recs, nil
}

// summarize groups records by system and takes each metric's spread over the runs
// without an error. A metric a system's runs do not report (NATS has no membership)
// is left out for it.
func summarize(records []map[string]any, metrics []metric) *section {
	sec := &section{Metrics: metrics, Systems: map[string]*systemSummary{}}
	values := map[string]map[string][]float64{}
	for _, r := range records {
		key := r["system"].(string)
		s := sec.Systems[key]
		if s == nil {
			name := key
			if k, ok := kinds[key]; ok {
				name = k.Name
			}
			s = &systemSummary{Name: name, Metrics: map[string]stats.Spread{}}
			sec.Systems[key] = s
			values[key] = map[string][]float64{}
		}
		s.Runs++
		s.Records = append(s.Records, r)
		if v, ok := r["version"].(string); ok && v != "" && s.Version == "" {
			s.Version = v
		}
		if e, ok := r["error"].(string); ok && e != "" {
			s.Failed = append(s.Failed, e)
			continue
		}
		if s.Details == nil {
			s.Details = map[string]any{}
			for _, k := range detailKeys {
				if v, ok := r[k]; ok {
					s.Details[k] = v
				}
			}
		}
		for _, m := range metrics {
			if v, ok := r[m.Key].(float64); ok {
				values[key][m.Key] = append(values[key][m.Key], v)
			}
		}
	}
	for key, s := range sec.Systems {
		for _, m := range metrics {
			v := values[key][m.Key]
			if len(v) == 0 {
				continue
			}
			s.Metrics[m.Key] = stats.SpreadOf(v)
		}
	}
	return sec
}

// order is the systems in the order of the table's columns: NATS, Tern, then any
// other by key.
func (sec *section) order() []string {
	var keys []string
	for k := range sec.Systems {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		switch k {
		case "nats":
			return 0
		case "tern":
			return 1
		}
		return 2
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return keys
}

// formatValue prints one figure in its unit.
func formatValue(v float64, unit string) string {
	switch unit {
	case "ms":
		switch {
		case v >= 100:
			return fmt.Sprintf("%.0f ms", v)
		case v >= 10:
			return fmt.Sprintf("%.1f ms", v)
		default:
			return fmt.Sprintf("%.2f ms", v)
		}
	case "B":
		return fmt.Sprintf("%.0f B", v)
	default:
		if v == math.Trunc(v) {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.1f", v)
	}
}

func cell(s *systemSummary, m metric) string {
	if s == nil {
		return "—"
	}
	sp, ok := s.Metrics[m.Key]
	if !ok {
		return "—"
	}
	out := formatValue(sp.Median, m.Unit)
	if s.Runs-len(s.Failed) > 1 {
		out += " (" + formatValue(sp.Min, m.Unit) + "–" + formatValue(sp.Max, m.Unit) + ")"
	}
	return out
}

// ratioCell is Tern's median over NATS's.
func ratioCell(sec *section, m metric) string {
	n, t := sec.Systems["nats"], sec.Systems["tern"]
	if n == nil || t == nil {
		return "—"
	}
	a, ok1 := t.Metrics[m.Key]
	b, ok2 := n.Metrics[m.Key]
	if !ok1 || !ok2 || b.Median == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.Median/b.Median)
}

// writeSection prints a measurement's table, its settings and its failed runs.
func writeSection(w io.Writer, title string, sec *section) {
	fmt.Fprintf(w, "### %s\n\n", title)
	keys := sec.order()
	for _, k := range keys {
		s := sec.Systems[k]
		var d []string
		for _, dk := range detailKeys {
			if v, ok := s.Details[dk]; ok {
				d = append(d, fmt.Sprintf("%s %v", dk, v))
			}
		}
		runs := "runs"
		if s.Runs == 1 {
			runs = "run"
		}
		fmt.Fprintf(w, "- %s %s: %d %s, %d failed; %s\n", s.Name, s.Version, s.Runs, runs, len(s.Failed), strings.Join(d, ", "))
	}
	fmt.Fprintln(w)
	head := "| measurement |"
	sep := "|---|"
	for _, k := range keys {
		head += " " + sec.Systems[k].Name + " |"
		sep += "---|"
	}
	head += " ratio Tern/NATS |"
	sep += "---|"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, m := range sec.Metrics {
		line := "| " + m.Label + " |"
		for _, k := range keys {
			line += " " + cell(sec.Systems[k], m) + " |"
		}
		fmt.Fprintln(w, line+" "+ratioCell(sec, m)+" |")
	}
	var failed []string
	for _, k := range keys {
		for _, f := range sec.Systems[k].Failed {
			failed = append(failed, fmt.Sprintf("- %s: %s", sec.Systems[k].Name, f))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Failed runs (not in the medians):")
		fmt.Fprintln(w)
		for _, f := range failed {
			fmt.Fprintln(w, f)
		}
	}
	fmt.Fprintln(w)
}

// clusterReport is what report writes as JSON.
type clusterReport struct {
	Date     string       `json:"date"`
	Machine  host.Machine `json:"machine"`
	Recovery *section     `json:"recovery,omitempty"`
	Interest *section     `json:"interest,omitempty"`
}

func writeReport(w io.Writer, rep *clusterReport) {
	m := rep.Machine
	fmt.Fprintf(w, "## Tern vs NATS clusters: recovery and interest scale, %s\n\n", rep.Date)
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s memory, %s; median (min–max) over the runs\n\n", m.CPUs, m.CPUModel, m.Memory, m.OS)
	if rep.Recovery != nil {
		writeSection(w, "Recovery after kill -9 of the subscriber's node (ms from the kill)", rep.Recovery)
	}
	if rep.Interest != nil {
		writeSection(w, "Interest scale: distinct subscriptions on node 1 reaching every other node", rep.Interest)
	}
}
