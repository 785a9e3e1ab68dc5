// Package loadgentest checks a loadgen.Bus adapter against a running broker: it runs
// every workload with small counts and requires exact delivery counts, so a broker (or
// adapter) that loses, duplicates or misroutes a message fails.
package loadgentest

import (
	"context"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/loadgen"
)

// Case is one workload run by CheckModes.
type Case struct {
	Name string
	Cfg  loadgen.Config
}

// Cases are the workloads CheckModes runs, with msgs messages per publisher.
func Cases(msgs int) []Case {
	return []Case{
		{"pub", loadgen.Config{Mode: loadgen.ModePub, Pubs: 2, Size: 64, Msgs: msgs}},
		{"pubsub-1x1", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 1, Size: 64, Msgs: msgs}},
		{"pubsub-2x3", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 2, Subs: 3, Size: 128, Msgs: msgs}},
		{"pubsub-small", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 2, Size: 4, Msgs: msgs}},
		{"queue-1x4", loadgen.Config{Mode: loadgen.ModeQueue, Pubs: 1, Subs: 4, Size: 64, Msgs: msgs}},
		{"queue-2x3", loadgen.Config{Mode: loadgen.ModeQueue, Pubs: 2, Subs: 3, Size: 1024, Msgs: msgs}},
		{"reqrep-1x1", loadgen.Config{Mode: loadgen.ModeReqRep, Pubs: 1, Subs: 1, Size: 32, Msgs: msgs / 4}},
		{"reqrep-2x2", loadgen.Config{Mode: loadgen.ModeReqRep, Pubs: 2, Subs: 2, Size: 16, Msgs: msgs / 4}},
	}
}

// CheckModes runs every case of Cases(msgs) through dial and checks the counts.
func CheckModes(t *testing.T, dial loadgen.Dialer, msgs int) {
	t.Helper()
	for _, c := range Cases(msgs) {
		t.Run(c.Name, func(t *testing.T) {
			c.Cfg.Timeout = time.Minute
			res, err := loadgen.Run(context.Background(), dial, c.Cfg)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, res)
			}
			CheckExact(t, c.Cfg, res)
		})
	}
}

// CheckExact fails t unless res is the complete, error-free outcome of cfg (a run
// bounded by message count).
func CheckExact(t *testing.T, cfg loadgen.Config, res loadgen.Result) {
	t.Helper()
	pubs := max(cfg.Pubs, 1)
	subs := max(cfg.Subs, 1)
	sent := uint64(cfg.Msgs * pubs)
	want := sent
	if cfg.Mode == loadgen.ModePubSub {
		want = sent * uint64(subs)
	}
	if res.Sent != sent || res.Received != want || res.Expected != want || res.Errors != 0 {
		t.Fatalf("sent %d received %d expected %d errors %d; want sent %d received %d, no errors\n%s",
			res.Sent, res.Received, res.Expected, res.Errors, sent, want, res)
	}
	if res.Elapsed <= 0 || res.MsgsPerSec <= 0 {
		t.Fatalf("elapsed %v, %v msgs/s: want both positive", res.Elapsed, res.MsgsPerSec)
	}
	switch cfg.Mode {
	case loadgen.ModePubSub:
		for i, n := range res.SubCounts {
			if n != sent {
				t.Fatalf("subscriber %d got %d, want %d", i, n, sent)
			}
		}
	case loadgen.ModeQueue:
		if len(res.SubCounts) != subs {
			t.Fatalf("%d member counts, want %d", len(res.SubCounts), subs)
		}
	}
	latency := cfg.Mode == loadgen.ModeReqRep || cfg.Mode != loadgen.ModePub && cfg.Size >= 8
	if got := res.Latency.Samples; latency && got != int64(res.Received) || !latency && got != 0 {
		t.Fatalf("%d latency samples for %d received (latency expected: %v)", got, res.Received, latency)
	}
	if res.Latency.Samples > 0 && (res.Latency.P50 <= 0 || res.Latency.P50 > res.Latency.P99 || res.Latency.P99 > res.Latency.Max) {
		t.Fatalf("implausible latency %+v", res.Latency)
	}
}
