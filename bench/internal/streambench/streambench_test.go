package streambench_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/jsbus"
	"github.com/tern-mq/tern/bench/internal/jsbus/jstest"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/bench/internal/streambench/streambenchtest"
)

// TestWorkloadsMem runs the whole small matrix against the exact in-memory broker.
func TestWorkloadsMem(t *testing.T) {
	b := newMemBroker()
	streambenchtest.CheckWorkloads(t, b, 2000, 1<<20)
	if n := b.streamCount(); n != 0 {
		t.Fatalf("%d streams left behind", n)
	}
}

// TestRingBuffers: a driver may keep the payload until the publish is acknowledged;
// the engine must not overwrite it before then.
func TestRingBuffers(t *testing.T) {
	b := newMemBroker()
	b.lazyCopy = true
	for _, w := range []int{1, 7, 64} {
		cfg := streambench.Config{Workload: streambench.WorkReplay, Size: 16, Msgs: 500, Window: w}
		res, err := streambench.Run(context.Background(), b, cfg)
		if err != nil {
			t.Fatalf("window %d: %v\n%s", w, err, res)
		}
		streambenchtest.CheckExact(t, cfg, res)
	}
}

func TestOddBatches(t *testing.T) {
	b := newMemBroker()
	for _, cfg := range []streambench.Config{
		{Workload: streambench.WorkFetch, Size: 8, Msgs: 1001, Batch: 7},
		{Workload: streambench.WorkFetch, Size: 8, Msgs: 1001, Batch: 7, AckAll: true},
		{Workload: streambench.WorkFetch, Size: 8, Msgs: 3, Batch: 256},
		{Workload: streambench.WorkWorkQueue, Size: 8, Msgs: 1, Consumers: 3, MaxWait: 50 * time.Millisecond},
		{Workload: streambench.WorkWorkQueue, Size: 64, Msgs: 999, Consumers: 8, Batch: 3, Window: 5, MaxWait: 50 * time.Millisecond},
		{Workload: streambench.WorkPubAsync, Size: 8, Msgs: 10, Window: 1},
	} {
		res, err := streambench.Run(context.Background(), b, cfg)
		if err != nil {
			t.Fatalf("%+v: %v\n%s", cfg, err, res)
		}
		if cfg.Workload == streambench.WorkWorkQueue && cfg.Size < 16 {
			cfg.Size = 0 // no latency expected
		}
		streambenchtest.CheckExact(t, cfg, res)
	}
}

func TestDuplicatesAreViolations(t *testing.T) {
	for _, cfg := range []streambench.Config{
		{Workload: streambench.WorkFetch, Size: 16, Msgs: 500, Batch: 10},
		{Workload: streambench.WorkWorkQueue, Size: 16, Msgs: 500, Batch: 10, MaxWait: 50 * time.Millisecond},
	} {
		b := newMemBroker()
		b.dupEvery = 7
		res, err := streambench.Run(context.Background(), b, cfg)
		if !errors.Is(err, streambench.ErrViolation) {
			t.Fatalf("%s: err %v, want ErrViolation\n%s", cfg.Workload, err, res)
		}
		if res.Duplicates == 0 || res.Unique != 500 || res.Received != res.Unique+res.Duplicates {
			t.Fatalf("%s: %d received, %d distinct, %d duplicates", cfg.Workload, res.Received, res.Unique, res.Duplicates)
		}
		if !strings.Contains(res.String(), "duplicate") {
			t.Fatalf("summary does not mention the duplicates:\n%s", res)
		}
	}
}

func TestReplayOrderChecked(t *testing.T) {
	b := newMemBroker()
	b.swapReplay = true
	res, err := streambench.Run(context.Background(), b, streambench.Config{Workload: streambench.WorkReplay, Size: 16, Msgs: 100})
	if !errors.Is(err, streambench.ErrViolation) || res.OutOfOrder == 0 || res.Unique != 100 {
		t.Fatalf("err %v, %d out of order, %d distinct", err, res.OutOfOrder, res.Unique)
	}
}

func TestLeftoverIsViolation(t *testing.T) {
	b := newMemBroker()
	b.ignoreAcks = true
	cfg := streambench.Config{Workload: streambench.WorkWorkQueue, Size: 16, Msgs: 100, Stall: 200 * time.Millisecond, MaxWait: 50 * time.Millisecond}
	res, err := streambench.Run(context.Background(), b, cfg)
	if !errors.Is(err, streambench.ErrViolation) || res.Leftover != 100 {
		t.Fatalf("err %v, leftover %d", err, res.Leftover)
	}
}

func TestPublishFailuresCounted(t *testing.T) {
	b := newMemBroker()
	b.failEvery = 10
	res, err := streambench.Run(context.Background(), b, streambench.Config{Workload: streambench.WorkPubAsync, Size: 16, Msgs: 1000})
	if !errors.Is(err, streambench.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if res.Published != 1000 || res.Acked != 900 || res.PubFailed != 100 || res.Errors != 100 || res.Missing() != 100 {
		t.Fatalf("published %d, acked %d, failed %d, errors %d, missing %d", res.Published, res.Acked, res.PubFailed, res.Errors, res.Missing())
	}
	// A pre-fill that loses messages fails the run before the timed phase.
	b = newMemBroker()
	b.failEvery = 10
	_, err = streambench.Run(context.Background(), b, streambench.Config{Workload: streambench.WorkFetch, Size: 16, Msgs: 100})
	if !errors.Is(err, streambench.ErrIncomplete) || !strings.Contains(err.Error(), "pre-fill") {
		t.Fatalf("err %v, want an incomplete pre-fill", err)
	}
	if b.streamCount() != 0 {
		t.Fatal("stream left behind after a failed run")
	}
}

func TestStall(t *testing.T) {
	b := newMemBroker()
	b.hangEvery = 300 // the 300th ack never comes
	start := time.Now()
	res, err := streambench.Run(context.Background(), b,
		streambench.Config{Workload: streambench.WorkPubAsync, Size: 16, Msgs: 1000, Window: 50, Stall: 200 * time.Millisecond})
	if !errors.Is(err, streambench.ErrIncomplete) || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("err %v, want an incomplete, stalled run", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("stall detection took %v", took)
	}
	if res.Acked != 299 {
		t.Fatalf("acked %d, want 299 (acks are collected in order)", res.Acked)
	}
	if b.streamCount() != 0 {
		t.Fatal("stream left behind after a stalled run")
	}
}

// TestBlockedDriver: a driver whose PublishAsync never returns cannot hang a run.
func TestBlockedDriver(t *testing.T) {
	defer streambench.SetStuckGrace(100 * time.Millisecond)()
	b := newMemBroker()
	b.blockAsync = make(chan struct{})
	defer close(b.blockAsync)
	start := time.Now()
	_, err := streambench.Run(context.Background(), b,
		streambench.Config{Workload: streambench.WorkPubAsync, Size: 16, Msgs: 10, Stall: 200 * time.Millisecond})
	if !errors.Is(err, streambench.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	b := newMemBroker()
	b.hangEvery = 1
	start := time.Now()
	_, err := streambench.Run(context.Background(), b,
		streambench.Config{Workload: streambench.WorkPubAsync, Size: 16, Msgs: 10, Timeout: 150 * time.Millisecond})
	if !errors.Is(err, streambench.ErrIncomplete) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err %v, want an incomplete, timed-out run", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err = streambench.Run(ctx, b, streambench.Config{Workload: streambench.WorkWorkQueue, Size: 16, Msgs: 10})
	if !errors.Is(err, streambench.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("timeout and cancel took %v", took)
	}
	if b.streamCount() != 0 {
		t.Fatal("streams left behind")
	}
}

func TestConfigErrors(t *testing.T) {
	b := newMemBroker()
	for _, cfg := range []streambench.Config{
		{Size: 16, Msgs: 10},
		{Workload: "fanout", Size: 16, Msgs: 10},
		{Workload: streambench.WorkFetch, Size: 7, Msgs: 10},
		{Workload: streambench.WorkFetch, Size: 16},
		{Workload: streambench.WorkFetch, Size: 16, Msgs: 10, Batch: -1},
		{Workload: streambench.WorkPubAsync, Size: 16, Msgs: 10, Window: streambench.MaxWindow + 1},
	} {
		if _, err := streambench.Run(context.Background(), b, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	// A driver refusing the fsync policy fails the run cleanly.
	_, err := streambench.Run(context.Background(), b, streambench.Config{Workload: streambench.WorkPubSync, Size: 16, Msgs: 1, Sync: streambench.SyncAlways})
	if !errors.Is(err, streambench.ErrUnsupported) {
		t.Errorf("err %v, want ErrUnsupported", err)
	}
}

func TestResultJSONAndString(t *testing.T) {
	res, err := streambench.Run(context.Background(), newMemBroker(),
		streambench.Config{Workload: streambench.WorkWorkQueue, Size: 32, Msgs: 300, MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"workload", "size", "msgs", "published", "acked", "received", "unique", "missing", "duplicates",
		"leftover", "per_consumer", "errors", "elapsed_ms", "msgs_per_sec", "mb_per_sec", "latency"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	var back streambench.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Unique != res.Unique || back.Workload != res.Workload || back.Latency.Samples != res.Latency.Samples ||
		(back.Elapsed-res.Elapsed).Abs() > time.Microsecond || len(back.PerConsumer) != len(res.PerConsumer) {
		t.Fatalf("round trip changed the result:\n%+v\n%+v", res, back)
	}
	s := res.String()
	for _, want := range []string{"workqueue", "4 pull consumers", "msgs/s", "MB/s", "p99", "per consumer"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// TestJetStream runs the engine's edge cases against a real nats-server -js: odd
// batch sizes, cumulative acks, a window of 1, more consumers than batches.
func TestJetStream(t *testing.T) {
	s := jstest.Start(t)
	d := jsbus.New(s.URL)
	for name, cfg := range map[string]streambench.Config{
		"fetch-odd-batch":   {Workload: streambench.WorkFetch, Size: 8, Msgs: 1001, Batch: 7},
		"fetch-ackall-odd":  {Workload: streambench.WorkFetch, Size: 8, Msgs: 1001, Batch: 7, AckAll: true},
		"pubasync-window-1": {Workload: streambench.WorkPubAsync, Size: 8, Msgs: 200, Window: 1},
		"workqueue-8":       {Workload: streambench.WorkWorkQueue, Size: 64, Msgs: 3000, Consumers: 8, Batch: 3, Window: 100, MaxWait: 100 * time.Millisecond},
		"replay-tiny":       {Workload: streambench.WorkReplay, Size: 8, Msgs: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg.Timeout = 30 * time.Second
			res, err := streambench.Run(context.Background(), d, cfg)
			if err != nil {
				t.Fatalf("%v\n%s", err, res)
			}
			streambenchtest.CheckExact(t, cfg, res)
		})
	}
}
