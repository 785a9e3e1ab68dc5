package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/tern-mq/tern/bench/internal/stats"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/tern-mq/tern/internal/loadgen"
)

// rabbitSummary is the part of bench/rabbit/run.sh's results.json the report uses.
type rabbitSummary struct {
	Date   string `json:"date"`
	Server struct {
		Version    string `json:"version"`
		Erlang     string `json:"erlang"`
		RSSKBStart int64  `json:"rss_kb_start"`
		RSSKBEnd   int64  `json:"rss_kb_end"`
		HWMKB      int64  `json:"hwm_kb"`
	} `json:"server"`
	Workload struct {
		Producers     int `json:"producers"`
		Consumers     int `json:"consumers"`
		ConfirmWindow int `json:"confirm_window"`
		Prefetch      int `json:"prefetch"`
		MultiAckEvery int `json:"multi_ack_every"`
		SecondsPerRun int `json:"seconds_per_run"`
		Runs          int `json:"runs"`
	} `json:"workload"`
	Rows []struct {
		QueueType            string       `json:"queue_type"`
		Size                 int          `json:"size"`
		OKRuns               int          `json:"ok_runs"`
		FailedRuns           int          `json:"failed_runs"`
		PublishedPerSec      stats.Spread `json:"published_per_sec"`
		ConsumedPerSec       stats.Spread `json:"consumed_per_sec"`
		ConsumerLatencyP50US stats.Spread `json:"consumer_latency_p50_us"`
		ConsumerLatencyP99US stats.Spread `json:"consumer_latency_p99_us"`
		ConfirmLatencyP50US  stats.Spread `json:"confirm_latency_p50_us"`
		ConfirmLatencyP99US  stats.Spread `json:"confirm_latency_p99_us"`
	} `json:"rows"`
}

// runReport prints the tables of a finished streamvs run (its --json file) and, if
// rabbitPath is set, RabbitMQ's (bench/rabbit/run.sh's results.json) with a side-by-side
// table of the durable work queues.
func runReport(w io.Writer, streamsPath, rabbitPath string) error {
	b, err := os.ReadFile(streamsPath)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", streamsPath, err)
	}
	var systems []*system
	for _, k := range knownDrivers {
		if s := rep.Servers[k]; s != nil {
			s.Key = k
			systems = append(systems, s)
		}
	}
	writeMarkdown(w, &rep, systems)
	if rabbitPath == "" {
		return nil
	}
	b, err = os.ReadFile(rabbitPath)
	if err != nil {
		return err
	}
	var rs rabbitSummary
	if err := json.Unmarshal(b, &rs); err != nil {
		return fmt.Errorf("%s: %w", rabbitPath, err)
	}
	writeRabbit(w, &rs)
	writeWorkQueues(w, &rep, systems, &rs)
	return nil
}

func spreadCell(s stats.Spread, f func(float64) string, runs int) string {
	if s.Median == 0 {
		return "—"
	}
	c := f(s.Median)
	if runs > 1 {
		c += " (" + f(s.Min) + "–" + f(s.Max) + ")"
	}
	return c
}

func usCell(v float64) string { return loadgen.FormatDuration(usDur(v)) }

func rabbitAcks(rs *rabbitSummary) string {
	if rs.Workload.MultiAckEvery > 1 {
		return fmt.Sprintf("multi-ack every %d", rs.Workload.MultiAckEvery)
	}
	return "each message"
}

func writeRabbit(w io.Writer, rs *rabbitSummary) {
	wl := rs.Workload
	fmt.Fprintf(w, "\n## RabbitMQ durable work queue, %s\n\n", rs.Date)
	fmt.Fprintf(w, "- RabbitMQ %s (Erlang %s), a private node on 127.0.0.1 (bench/rabbit/run.sh); server RSS %s at start, %s at end, peak %s\n",
		rs.Server.Version, rs.Server.Erlang, kbLabel(rs.Server.RSSKBStart), kbLabel(rs.Server.RSSKBEnd), kbLabel(rs.Server.HWMKB))
	fmt.Fprintf(w, "- RabbitMQ PerfTest (Java client): %d producer, %d consumers, persistent messages, publisher confirms (at most %d unconfirmed), prefetch %d, %s; %d s per run, %d runs, median (min–max)\n\n",
		wl.Producers, wl.Consumers, wl.ConfirmWindow, wl.Prefetch, rabbitAcks(rs), wl.SecondsPerRun, wl.Runs)
	fmt.Fprintln(w, "| queue | size | published msgs/s | consumed msgs/s | publish → consumer p50 | p99 | confirm p50 | p99 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs.Rows {
		note := ""
		if r.FailedRuns > 0 {
			note = fmt.Sprintf(" [%d of %d runs failed]", r.FailedRuns, r.FailedRuns+r.OKRuns)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s%s | %s | %s | %s | %s |\n", r.QueueType, tablefmt.Size(r.Size),
			spreadCell(r.PublishedPerSec, tablefmt.Rate, r.OKRuns), spreadCell(r.ConsumedPerSec, tablefmt.Rate, r.OKRuns), note,
			spreadCell(r.ConsumerLatencyP50US, usCell, 1), spreadCell(r.ConsumerLatencyP99US, usCell, 1),
			spreadCell(r.ConfirmLatencyP50US, usCell, 1), spreadCell(r.ConfirmLatencyP99US, usCell, 1))
	}
}

// writeWorkQueues puts the durable work queues of every broker in one table.
func writeWorkQueues(w io.Writer, rep *report, systems []*system, rs *rabbitSummary) {
	fmt.Fprintln(w, "\n## Durable work queue, side by side")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "One publisher keeping a window of unacknowledged (unconfirmed) publishes, consumers acknowledging every message or every few, messages stored on disk by the broker before it acknowledges the publish. Medians. Read it as orders of magnitude: the clients differ (Go here, RabbitMQ's Java PerfTest), RabbitMQ's runs are timed while the others are counted, and so do the fsync policies: RabbitMQ fsyncs before it confirms (quorum queues their log, classic queues their message store, in batches), while nats-server acknowledges once the message is in its file store, which writes to the operating system without fsync and by default fsyncs every two minutes (Tern: its `sync` setting).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| broker | queue | size | consumed msgs/s | publish → consumer p50 | p99 | consumers, acks | client |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		if r.Kind != "workqueue" {
			continue
		}
		for _, s := range systems {
			o := r.Systems[s.Key]
			if o == nil {
				continue
			}
			client := "nats.go"
			if s.Key == "tern" {
				client = "Tern client/go"
			}
			fmt.Fprintf(w, "| %s %s | stream, work-queue retention (window %d) | %s | %s | %s | %s | %d pull, batch %d, each message | %s |\n",
				s.Name, s.Version, r.Window, tablefmt.Size(r.Size), rateCell(o, rep.Runs), latCell(o, o.P50, false), latCell(o, o.P99, false),
				r.Consumers, r.Batch, client)
		}
	}
	for _, r := range rs.Rows {
		fmt.Fprintf(w, "| RabbitMQ %s | %s queue (confirm window %d) | %s | %s | %s | %s | %d push, prefetch %d, %s | PerfTest (Java) |\n",
			rs.Server.Version, r.QueueType, rs.Workload.ConfirmWindow, tablefmt.Size(r.Size), spreadCell(r.ConsumedPerSec, tablefmt.Rate, r.OKRuns),
			spreadCell(r.ConsumerLatencyP50US, usCell, 1), spreadCell(r.ConsumerLatencyP99US, usCell, 1),
			rs.Workload.Consumers, rs.Workload.Prefetch, rabbitAcks(rs))
	}
}
