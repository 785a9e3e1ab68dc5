package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/tern-mq/tern/bench/internal/records"

	"github.com/tern-mq/tern/bench/internal/stats"
)

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mqttclustervs report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tin := fs.String("throughput", "", "the throughput runs, one JSON object a line")
	rin := fs.String("resume", "", "the resume runs, one JSON object a line")
	jsonOut := fs.String("json", "", "also write the summary as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tin == "" && *rin == "" {
		return errors.New("report: want --throughput, --resume or both")
	}
	summary := map[string]any{}
	if *tin != "" {
		runs, err := records.ReadLines[throughputResult](*tin)
		if err != nil {
			return err
		}
		md, s := throughputReport(runs)
		fmt.Fprint(stdout, md)
		summary["throughput"] = s
	}
	if *rin != "" {
		runs, err := records.ReadLines[resumeResult](*rin)
		if err != nil {
			return err
		}
		if *tin != "" {
			fmt.Fprintln(stdout)
		}
		all := map[string][]resumeSummary{}
		for i, pl := range placementsOf(runs) {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			var sel []resumeResult
			for _, r := range runs {
				if placementOf(r) == pl {
					sel = append(sel, r)
				}
			}
			md, s := resumeReport(sel)
			fmt.Fprintf(stdout, "Placement %s: %s\n\n", pl, placementText[pl])
			fmt.Fprint(stdout, md)
			all[pl] = s
		}
		summary["resume"] = all
	}
	if *jsonOut != "" {
		return records.WriteJSON(*jsonOut, summary)
	}
	return nil
}

var systemNames = map[string]string{"tern": "Tern", "js": "NATS"}

// systemsOf lists the systems present, Tern first.
func systemsOf[T any](runs []T, key func(T) string) []string {
	seen := map[string]bool{}
	for _, r := range runs {
		seen[key(r)] = true
	}
	var out []string
	for _, s := range []string{"tern", "js"} {
		if seen[s] {
			out = append(out, s)
		}
	}
	return out
}

// spreadCell is "median (min–max)" with f formatting each value.
func spreadCell(s stats.Spread, n int, f func(float64) string) string {
	if n == 0 {
		return "–"
	}
	if n == 1 || s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func rateText(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func usText(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f s", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0f ms", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1f ms", v/1e3)
	}
	return fmt.Sprintf("%.0f µs", v)
}

func msText(v float64) string {
	return commas(int64(math.Round(v))) + " ms"
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// otherCoresNoted: runs during which other processes used more of the CPUs are
// listed under the throughput table.
const otherCoresNoted = 0.1

// throughputSummary is one row of one system over its completed runs.
type throughputSummary struct {
	System string       `json:"system"`
	Row    row          `json:"row"`
	Runs   int          `json:"runs"`
	Failed int          `json:"failed"`
	Rate   stats.Spread `json:"rate"`
	P50us  stats.Spread `json:"p50_us"`
	P99us  stats.Spread `json:"p99_us"`
	MaxUs  stats.Spread `json:"max_us"`
}

func throughputReport(runs []throughputResult) (string, []throughputSummary) {
	var b strings.Builder
	systems := systemsOf(runs, func(r throughputResult) string { return r.System })
	var keys []string
	byRow := map[string]row{}
	for _, r := range runs {
		if _, ok := byRow[r.Row.Key]; !ok {
			keys = append(keys, r.Row.Key)
			byRow[r.Row.Key] = r.Row
		}
	}
	var out []throughputSummary
	cell := map[[2]string]throughputSummary{}
	var failed []string
	for _, k := range keys {
		for _, s := range systems {
			sm := throughputSummary{System: s, Row: byRow[k]}
			var rate, p50, p99, mx []float64
			for _, r := range runs {
				if r.System != s || r.Row.Key != k {
					continue
				}
				if r.Error != "" {
					sm.Failed++
					failed = append(failed, fmt.Sprintf("%s %s run %d: %s", systemNames[s], k, r.Run, r.Error))
					continue
				}
				sm.Runs++
				rate, p50, p99, mx = append(rate, r.Rate), append(p50, r.P50us), append(p99, r.P99us), append(mx, r.MaxUs)
			}
			sm.Rate, sm.P50us, sm.P99us, sm.MaxUs = stats.SpreadOf(rate), stats.SpreadOf(p50), stats.SpreadOf(p99), stats.SpreadOf(mx)
			cell[[2]string{k, s}] = sm
			out = append(out, sm)
		}
	}
	b.WriteString("QoS 1 (QoS 2 both ways on the q2 rows), publishers on node 1, one subscriber on node 2 (every publisher's topic); msgs/s received, median (min–max) over the completed runs; latency publish → receipt, medians of the runs' p50 and p99.\n\n")
	head := []string{"row", "workload", "messages"}
	for _, s := range systems {
		head = append(head, systemNames[s]+" msgs/s", systemNames[s]+" p50", systemNames[s]+" p99")
	}
	if len(systems) == 2 {
		head = append(head, "Tern/NATS")
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
	for _, k := range keys {
		r := byRow[k]
		line := []string{k, r.describe(), commas(int64(r.Msgs))}
		for _, s := range systems {
			sm := cell[[2]string{k, s}]
			rc := spreadCell(sm.Rate, sm.Runs, rateText)
			if sm.Failed > 0 {
				rc += fmt.Sprintf(" [%d failed]", sm.Failed)
			}
			line = append(line, rc, spreadOrDash(sm.P50us.Median, sm.Runs, usText), spreadOrDash(sm.P99us.Median, sm.Runs, usText))
		}
		if len(systems) == 2 {
			t, n := cell[[2]string{k, "tern"}], cell[[2]string{k, "js"}]
			if t.Runs > 0 && n.Runs > 0 && n.Rate.Median > 0 {
				line = append(line, fmt.Sprintf("%.2f×", t.Rate.Median/n.Rate.Median))
			} else {
				line = append(line, "–")
			}
		}
		b.WriteString("| " + strings.Join(line, " | ") + " |\n")
	}
	var busy []string
	for _, r := range runs {
		if r.Error == "" && r.OtherCores > otherCoresNoted {
			busy = append(busy, fmt.Sprintf("%s %s run %d: %.2f", systemNames[r.System], r.Row.Key, r.Run, r.OtherCores))
		}
	}
	if len(busy) > 0 {
		fmt.Fprintf(&b, "\nRuns during which other processes used more than %.2f of a core (counted in the medians): %s.\n", otherCoresNoted, strings.Join(busy, "; "))
	}
	if len(failed) > 0 {
		b.WriteString("\nFailed runs (left out of the medians):\n\n")
		for _, f := range failed {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String(), out
}

func spreadOrDash(v float64, n int, f func(float64) string) string {
	if n == 0 {
		return "–"
	}
	return f(v)
}

var placementText = map[string]string{
	"node2":  "the publisher on node 1, the subscriber on node 2 (killed), resuming on node 3, numbered as started; which node leads what is whatever the cluster's elections gave.",
	"leader": "the nodes renumbered so that the subscriber's node, killed, is the one leading Tern's MQTT group or NATS's `$MQTT_msgs` stream (the publisher on the next node, the subscriber resuming on the third).",
}

func placementOf(r resumeResult) string {
	if r.Placement == "" {
		return "node2"
	}
	return r.Placement
}

func placementsOf(runs []resumeResult) []string {
	var out []string
	for _, pl := range []string{"node2", "leader"} {
		for _, r := range runs {
			if placementOf(r) == pl {
				out = append(out, pl)
				break
			}
		}
	}
	return out
}

// resumeSummary is one system's resume runs.
type resumeSummary struct {
	System            string       `json:"system"`
	Runs              int          `json:"runs"`
	Failed            int          `json:"failed"`
	DisconnectMs      stats.Spread `json:"disconnect_ms"`
	ReconnectMs       stats.Spread `json:"reconnect_ms"`
	ReconnectAttempts stats.Spread `json:"reconnect_attempts"`
	SessionPresent    int          `json:"session_present"`
	FirstMsgMs        stats.Spread `json:"first_msg_ms"`
	Backlog           stats.Spread `json:"backlog"`
	BacklogMs         stats.Spread `json:"backlog_ms"`
	BacklogMissing    int          `json:"backlog_missing"` // runs whose backlog was never all received
	FirstAckMs        stats.Spread `json:"first_ack_ms"`
	NewLeaderMs       stats.Spread `json:"new_leader_ms"`
	NewLeaderRuns     int          `json:"new_leader_runs"`
	PubDisconnects    int          `json:"publisher_disconnects"`
	PubDisconnectRuns int          `json:"publisher_disconnect_runs"`
	PubDisconnectMs   stats.Spread `json:"publisher_disconnect_ms"`
	PubReconnectMs    stats.Spread `json:"publisher_reconnect_ms"`
	Resent            int          `json:"resent"`
	LongestAckGapMs   stats.Spread `json:"longest_ack_gap_ms"`
	ScheduleLagMaxMs  stats.Spread `json:"schedule_lag_max_ms"`
	MaxLatencyMs      stats.Spread `json:"max_latency_ms"`
	Delayed           stats.Spread `json:"delayed"`
	Acked             int          `json:"acked"`
	Lost              int          `json:"lost"`
	Duplicates        int          `json:"duplicates"`
	DuplicatesPerRun  stats.Spread `json:"duplicates_per_run"`
	Redelivered       int          `json:"redelivered"`
	UnackedReceived   int          `json:"unacked_received"`
	// KilledLed counts, per group or stream, the runs in which the killed node led it.
	KilledLed map[string]int `json:"killed_led,omitempty"`
}

func resumeReport(runs []resumeResult) (string, []resumeSummary) {
	systems := systemsOf(runs, func(r resumeResult) string { return r.System })
	var out []resumeSummary
	var failed, errs []string
	for _, s := range systems {
		sm := resumeSummary{System: s, KilledLed: map[string]int{}}
		var disc, rec, att, first, backlog, backlogMs, firstAck, gap, lag, maxLat, delayed, dups, pdisc, prec, newLeader []float64
		for _, r := range runs {
			if r.System != s {
				continue
			}
			if r.Error != "" {
				sm.Failed++
				failed = append(failed, fmt.Sprintf("%s run %d: %s", systemNames[s], r.Run, r.Error))
				continue
			}
			sm.Runs++
			disc, rec, att = append(disc, r.DisconnectMs), append(rec, r.ReconnectMs), append(att, float64(r.ReconnectAttempts))
			if r.SessionPresent {
				sm.SessionPresent++
			}
			first, backlog = append(first, r.FirstMsgMs), append(backlog, float64(r.Backlog))
			if r.BacklogMs >= 0 {
				backlogMs = append(backlogMs, r.BacklogMs)
			} else {
				sm.BacklogMissing++
			}
			firstAck, gap, lag = append(firstAck, r.FirstAckMs), append(gap, r.LongestAckGapMs), append(lag, r.ScheduleLagMaxMs)
			maxLat, delayed, dups = append(maxLat, r.MaxLatencyMs), append(delayed, float64(r.Delayed)), append(dups, float64(r.Duplicates))
			if r.NewLeader != "" {
				sm.NewLeaderRuns++
				newLeader = append(newLeader, r.NewLeaderMs)
			}
			sm.PubDisconnects += r.PublisherDisconnects
			sm.Resent += r.Resent
			if r.PublisherDisconnects > 0 {
				sm.PubDisconnectRuns++
				pdisc, prec = append(pdisc, r.PublisherDisconnectMs), append(prec, r.PublisherReconnectMs)
			}
			for k, v := range r.PublisherErrors {
				errs = append(errs, fmt.Sprintf("%s run %d, publisher: %d× %s", systemNames[s], r.Run, v, k))
			}
			sm.Acked += r.Acked
			sm.Lost += r.Lost
			sm.Duplicates += r.Duplicates
			sm.Redelivered += r.Redelivered
			sm.UnackedReceived += r.UnackedReceived
			for k, v := range r.LeadersBefore {
				if r.Killed != "" && v == r.Killed {
					sm.KilledLed[leaderKind(k)]++
				}
			}
			for k, v := range r.ReconnectErrors {
				errs = append(errs, fmt.Sprintf("%s run %d: %d× %s", systemNames[s], r.Run, v, k))
			}
		}
		sm.DisconnectMs, sm.ReconnectMs, sm.ReconnectAttempts = stats.SpreadOf(disc), stats.SpreadOf(rec), stats.SpreadOf(att)
		sm.FirstMsgMs, sm.Backlog, sm.BacklogMs = stats.SpreadOf(first), stats.SpreadOf(backlog), stats.SpreadOf(backlogMs)
		sm.FirstAckMs, sm.LongestAckGapMs, sm.ScheduleLagMaxMs = stats.SpreadOf(firstAck), stats.SpreadOf(gap), stats.SpreadOf(lag)
		sm.MaxLatencyMs, sm.Delayed, sm.DuplicatesPerRun = stats.SpreadOf(maxLat), stats.SpreadOf(delayed), stats.SpreadOf(dups)
		sm.PubDisconnectMs, sm.PubReconnectMs = stats.SpreadOf(pdisc), stats.SpreadOf(prec)
		sm.NewLeaderMs = stats.SpreadOf(newLeader)
		out = append(out, sm)
	}
	var b strings.Builder
	b.WriteString("Resume after node loss: a persistent QoS 1 subscriber on node 2, a publisher on node 1 at a fixed rate, kill -9 of node 2, the subscriber reconnects at once to node 3 (same client id, clean session off). Times from the kill, median (min–max) over the completed runs; counts are totals over them.\n\n")
	head := []string{"figure"}
	for _, sm := range out {
		head = append(head, systemNames[sm.System])
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
	line := func(name string, f func(sm resumeSummary) string) {
		cells := []string{name}
		for _, sm := range out {
			cells = append(cells, f(sm))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	num := func(v float64) string { return commas(int64(v + 0.5)) }
	line("completed runs", func(sm resumeSummary) string { return fmt.Sprintf("%d of %d", sm.Runs, sm.Runs+sm.Failed) })
	line("subscriber's connection to node 2 ends", func(sm resumeSummary) string { return spreadCell(sm.DisconnectMs, sm.Runs, msText) })
	line("subscriber connected to node 3 (CONNACK)", func(sm resumeSummary) string { return spreadCell(sm.ReconnectMs, sm.Runs, msText) })
	line("connection attempts it took", func(sm resumeSummary) string { return spreadCell(sm.ReconnectAttempts, sm.Runs, num) })
	line("CONNACK said session present", func(sm resumeSummary) string { return fmt.Sprintf("%d of %d runs", sm.SessionPresent, sm.Runs) })
	line("**first message received on node 3**", func(sm resumeSummary) string {
		return "**" + spreadCell(sm.FirstMsgMs, sm.Runs, msText) + "**"
	})
	line("**backlog all received**", func(sm resumeSummary) string {
		c := "**" + spreadCell(sm.BacklogMs, sm.Runs-sm.BacklogMissing, msText) + "**"
		if sm.BacklogMissing > 0 {
			c += fmt.Sprintf(" (never, in %d runs)", sm.BacklogMissing)
		}
		return c
	})
	line("backlog (messages)", func(sm resumeSummary) string { return spreadCell(sm.Backlog, sm.Runs, num) })
	line("another node leads the killed node's MQTT group (Tern) / `$MQTT_msgs` (NATS)", func(sm resumeSummary) string {
		if sm.NewLeaderRuns == 0 {
			return "–"
		}
		return fmt.Sprintf("%s (%d runs)", spreadCell(sm.NewLeaderMs, sm.NewLeaderRuns, msText), sm.NewLeaderRuns)
	})
	line("publisher: first PUBACK of a message sent after the kill", func(sm resumeSummary) string { return spreadCell(sm.FirstAckMs, sm.Runs, msText) })
	line("publisher: its connection closed by the server", func(sm resumeSummary) string {
		if sm.PubDisconnectRuns == 0 {
			return "never"
		}
		return fmt.Sprintf("in %d of %d runs, %s after the kill; connected again %s after it; %d messages sent again",
			sm.PubDisconnectRuns, sm.Runs, spreadCell(sm.PubDisconnectMs, sm.PubDisconnectRuns, msText),
			spreadCell(sm.PubReconnectMs, sm.PubDisconnectRuns, msText), sm.Resent)
	})
	line("publisher: longest time without a PUBACK", func(sm resumeSummary) string { return spreadCell(sm.LongestAckGapMs, sm.Runs, msText) })
	line("publisher: furthest behind its rate", func(sm resumeSummary) string { return spreadCell(sm.ScheduleLagMaxMs, sm.Runs, msText) })
	line("slowest message, publish → receipt", func(sm resumeSummary) string { return spreadCell(sm.MaxLatencyMs, sm.Runs, msText) })
	line("messages received > 1 s after publishing, per run", func(sm resumeSummary) string { return spreadCell(sm.Delayed, sm.Runs, num) })
	line("**acknowledged, never received**", func(sm resumeSummary) string {
		return fmt.Sprintf("**%d** of %s", sm.Lost, commas(int64(sm.Acked)))
	})
	line("duplicates (received again), per run", func(sm resumeSummary) string {
		return fmt.Sprintf("%s; %d in all", spreadCell(sm.DuplicatesPerRun, sm.Runs, num), sm.Duplicates)
	})
	line("received without a PUBACK to the publisher", func(sm resumeSummary) string { return fmt.Sprint(sm.UnackedReceived) })
	line("runs in which the killed node led…", func(sm resumeSummary) string {
		if len(sm.KilledLed) == 0 {
			return "nothing"
		}
		var ks []string
		for k := range sm.KilledLed {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		var parts []string
		for _, k := range ks {
			parts = append(parts, fmt.Sprintf("%s: %d", k, sm.KilledLed[k]))
		}
		return strings.Join(parts, ", ")
	})
	if len(errs) > 0 {
		b.WriteString("\nErrors the clients met (the subscriber's attempts to connect to node 3, the publisher's connection; each retried 20 ms later):\n\n")
		for _, e := range errs {
			b.WriteString("- " + e + "\n")
		}
	}
	if len(failed) > 0 {
		b.WriteString("\nRuns that did not complete (left out):\n\n")
		for _, f := range failed {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String(), out
}

// leaderKind groups leader keys for the report: NATS's consumers of $MQTT_msgs are
// one kind (the subscriber's is the only one during a run).
func leaderKind(k string) string {
	if strings.HasPrefix(k, "$MQTT_msgs>") {
		return "the subscriber's consumer"
	}
	switch k {
	case "meta":
		return "meta group"
	case "mqtt":
		return "MQTT group"
	}
	return k
}
