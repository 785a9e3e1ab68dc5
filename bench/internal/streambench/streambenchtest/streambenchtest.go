// Package streambenchtest checks a streambench.Driver end to end: it runs every
// workload at small sizes and asserts exact counts. Each driver's test calls
// CheckWorkloads against a server it started (bench/internal/jsbus does for
// nats-server -js; a Tern driver does the same against a Tern server).
package streambenchtest

import (
	"context"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/streambench"
)

// Cases is the small matrix CheckWorkloads runs: msgs messages per workload (replay
// reads replayBytes of 1 KiB messages).
func Cases(msgs int, replayBytes int) map[string]streambench.Config {
	return map[string]streambench.Config{
		"pubasync16":     {Workload: streambench.WorkPubAsync, Size: 16, Msgs: msgs, Window: 256},
		"pubasync1k":     {Workload: streambench.WorkPubAsync, Size: 1024, Msgs: msgs, Window: 256},
		"pubsync":        {Workload: streambench.WorkPubSync, Size: 16, Msgs: max(msgs/10, 1)},
		"fetch16":        {Workload: streambench.WorkFetch, Size: 16, Msgs: msgs, Batch: 100},
		"fetch1k-ackall": {Workload: streambench.WorkFetch, Size: 1024, Msgs: msgs, Batch: 100, AckAll: true},
		"replay":         {Workload: streambench.WorkReplay, Size: 1024, Msgs: max(replayBytes/1024, 1)},
		"workqueue":      {Workload: streambench.WorkWorkQueue, Size: 16, Msgs: msgs, Batch: 50, MaxWait: 200 * time.Millisecond},
	}
}

// CheckWorkloads runs every case of Cases(msgs, replayBytes) against d, in parallel
// subtests, and fails unless every message was acknowledged or consumed exactly
// once, with no errors, in streams that were deleted afterwards.
func CheckWorkloads(t *testing.T, d streambench.Driver, msgs, replayBytes int) {
	t.Helper()
	for name, cfg := range Cases(msgs, replayBytes) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg.Timeout = 30 * time.Second
			cfg.Stall = 5 * time.Second
			ready, done := 0, 0
			cfg.Observe = func(point string) {
				switch point {
				case streambench.ObserveReady:
					ready++
				case streambench.ObserveDone:
					done++
				}
			}
			res, err := streambench.Run(context.Background(), d, cfg)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, res)
			}
			CheckExact(t, cfg, res)
			if ready != 1 || done != 1 {
				t.Errorf("Observe called %d times at ready and %d at done, want 1 and 1", ready, done)
			}
			// The stream is gone.
			c, err := d.Connect(context.Background(), "check")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.StreamState(context.Background(), res.Stream); err == nil {
				t.Errorf("stream %s still exists after the run", res.Stream)
			}
			t.Logf("\n%s", res)
		})
	}
}

// CheckExact fails unless res shows every message of cfg acknowledged or consumed
// exactly once, without errors, at a positive rate.
func CheckExact(t testing.TB, cfg streambench.Config, res streambench.Result) {
	t.Helper()
	n := uint64(cfg.Msgs)
	switch cfg.Workload {
	case streambench.WorkPubAsync, streambench.WorkPubSync:
		if res.Published != n || res.Acked != n || res.PubFailed != 0 {
			t.Errorf("published %d, acknowledged %d, failed %d; want %d, %d, 0", res.Published, res.Acked, res.PubFailed, n, n)
		}
	default:
		if res.Received != n || res.Unique != n || res.Duplicates != 0 || res.OutOfOrder != 0 || res.Leftover != 0 {
			t.Errorf("received %d (%d distinct, %d duplicates, %d out of order, %d left over), want %d exactly once",
				res.Received, res.Unique, res.Duplicates, res.OutOfOrder, res.Leftover, n)
		}
	}
	if cfg.Workload == streambench.WorkWorkQueue {
		if res.Published != n || res.Acked != n {
			t.Errorf("work queue: published %d, acknowledged %d, want %d", res.Published, res.Acked, n)
		}
		var sum uint64
		for _, c := range res.PerConsumer {
			sum += c
		}
		consumers := cfg.Consumers
		if consumers == 0 {
			consumers = streambench.DefaultConsumers
		}
		if len(res.PerConsumer) != consumers || sum != res.Received {
			t.Errorf("per consumer %v, want %d consumers summing to %d", res.PerConsumer, consumers, res.Received)
		}
	}
	if res.Missing() != 0 || res.Errors != 0 {
		t.Errorf("missing %d, errors %d", res.Missing(), res.Errors)
	}
	if res.Elapsed <= 0 || res.MsgsPerSec <= 0 {
		t.Errorf("elapsed %v, %v msgs/s", res.Elapsed, res.MsgsPerSec)
	}
	wantLatency := cfg.Workload == streambench.WorkPubSync || cfg.Workload == streambench.WorkWorkQueue && cfg.Size >= 16
	if got := res.Latency.Samples > 0; got != wantLatency {
		t.Errorf("latency samples %d, want latency: %v", res.Latency.Samples, wantLatency)
	} else if wantLatency && (res.Latency.Samples != int64(n) || res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.Latency.Max < res.Latency.P99) {
		t.Errorf("latency %+v over %d messages", res.Latency, n)
	}
}
