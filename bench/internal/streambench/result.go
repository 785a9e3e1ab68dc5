package streambench

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/tern-mq/tern/internal/loadgen"
)

// Result is what one run measured.
//
// MsgsPerSec counts acknowledged publishes in pubasync and pubsync, and distinct
// messages consumed in fetch, replay and workqueue; MBPerSec is MsgsPerSec times the
// payload size in units of 10^6 bytes (headers and framing not counted).
type Result struct {
	Workload  string
	Stream    string
	Size      int
	Msgs      int
	Replicas  int // copies of the stream (1 unless Config.Replicas asked for more)
	Window    int // async publish window (pubasync, workqueue, pre-fills)
	Batch     int // pull batch (fetch, workqueue)
	Consumers int // pull consumers (workqueue)
	AckAll    bool

	Published uint64 // publishes sent in the timed phase
	Acked     uint64 // of those, acknowledged by the stream
	PubFailed uint64 // of those, refused or failed

	Received    uint64   // deliveries, duplicates included (fetch, replay, workqueue)
	Unique      uint64   // distinct messages delivered
	Duplicates  uint64   // deliveries of a message already delivered
	OutOfOrder  uint64   // replay: deliveries not following the previous one
	Leftover    uint64   // workqueue: messages still stored after the run
	PerConsumer []uint64 // workqueue: deliveries per consumer

	// Errors counts failed publishes, fetches and acknowledgements.
	Errors int

	Elapsed    time.Duration // the timed phase
	Prefill    time.Duration // the untimed pre-fill (fetch, replay)
	MsgsPerSec float64
	MBPerSec   float64
	// Latency is the publish round trip in pubsync and publish-to-consumer in
	// workqueue; Samples is 0 elsewhere.
	Latency Percentiles

	// Leader is the server that led the replicated stream when the timed phase
	// began, and LeaderLocal whether the run's first connection was to it (a
	// publish to another server takes a hop more); empty when the driver cannot
	// tell (LeaderLocator) or the stream has one replica.
	Leader      string
	LeaderLocal bool
}

// Missing is the number of messages expected and never acknowledged (publishing
// workloads) or consumed.
func (r Result) Missing() uint64 {
	got := r.Unique
	if r.Workload == WorkPubAsync || r.Workload == WorkPubSync {
		got = r.Acked
	}
	if uint64(r.Msgs) <= got {
		return 0
	}
	return uint64(r.Msgs) - got
}

func (r *Result) finish() {
	if r.Elapsed <= 0 {
		return
	}
	n := r.Unique
	if r.Workload == WorkPubAsync || r.Workload == WorkPubSync {
		n = r.Acked
	}
	r.MsgsPerSec = float64(n) / r.Elapsed.Seconds()
	r.MBPerSec = r.MsgsPerSec * float64(r.Size) / 1e6
}

// check returns the error a run with these counts deserves, or nil.
func (r Result) check() error {
	if m := r.Missing(); m > 0 {
		return fmt.Errorf("%w: %d of %d messages missing", ErrIncomplete, m, r.Msgs)
	}
	var v []string
	if r.Duplicates > 0 {
		v = append(v, fmt.Sprintf("%d duplicate deliveries", r.Duplicates))
	}
	if r.OutOfOrder > 0 {
		v = append(v, fmt.Sprintf("%d out of order", r.OutOfOrder))
	}
	if r.Leftover > 0 {
		v = append(v, fmt.Sprintf("%d messages left in the work queue", r.Leftover))
	}
	if len(v) > 0 {
		return fmt.Errorf("%w: %s", ErrViolation, strings.Join(v, ", "))
	}
	return nil
}

// String is a short human summary, for example:
//
//	workqueue: 1 publisher (window 4096) -> 4 pull consumers (batch 256), 16 B payloads
//	  200,000 published, 200,000 acknowledged; 200,000 consumed (200,000 distinct) in 1.912s
//	  104,602 msgs/s, 1.67 MB/s
//	  latency p50 20.1ms  p90 35.2ms  p99 41.0ms  p99.9 44.0ms  max 45.1ms
//	  per consumer: 50,176 / 49,920 / 50,048 / 49,856
func (r Result) String() string {
	var b strings.Builder
	c := func(v uint64) string { return loadgen.Commas(float64(v)) }
	switch r.Workload {
	case WorkPubAsync:
		fmt.Fprintf(&b, "%s: 1 publisher, window %d, %d B payloads\n", r.Workload, r.Window, r.Size)
		fmt.Fprintf(&b, "  %s published, %s acknowledged, %s failed in %s\n", c(r.Published), c(r.Acked), c(r.PubFailed), loadgen.FormatDuration(r.Elapsed))
	case WorkPubSync:
		fmt.Fprintf(&b, "%s: 1 publisher, one publish at a time, %d B payloads\n", r.Workload, r.Size)
		fmt.Fprintf(&b, "  %s published, %s acknowledged, %s failed in %s\n", c(r.Published), c(r.Acked), c(r.PubFailed), loadgen.FormatDuration(r.Elapsed))
	case WorkFetch:
		ack := "ack each"
		if r.AckAll {
			ack = "ack-all per batch"
		}
		fmt.Fprintf(&b, "%s: 1 pull consumer, batch %d, %s, %d B payloads, pre-filled in %s\n", r.Workload, r.Batch, ack, r.Size, loadgen.FormatDuration(r.Prefill))
		fmt.Fprintf(&b, "  %s consumed (%s distinct) in %s\n", c(r.Received), c(r.Unique), loadgen.FormatDuration(r.Elapsed))
	case WorkReplay:
		fmt.Fprintf(&b, "%s: 1 ordered reader, %d B payloads, %s pre-filled in %s\n", r.Workload, r.Size,
			sizeOf(int64(r.Msgs)*int64(r.Size)), loadgen.FormatDuration(r.Prefill))
		fmt.Fprintf(&b, "  %s read (%s distinct) in %s\n", c(r.Received), c(r.Unique), loadgen.FormatDuration(r.Elapsed))
	case WorkWorkQueue:
		fmt.Fprintf(&b, "%s: 1 publisher (window %d) -> %d pull consumers (batch %d), %d B payloads\n", r.Workload, r.Window, r.Consumers, r.Batch, r.Size)
		fmt.Fprintf(&b, "  %s published, %s acknowledged; %s consumed (%s distinct) in %s\n", c(r.Published), c(r.Acked),
			c(r.Received), c(r.Unique), loadgen.FormatDuration(r.Elapsed))
	}
	fmt.Fprintf(&b, "  %s msgs/s, %.2f MB/s\n", loadgen.Commas(r.MsgsPerSec), r.MBPerSec)
	if l := r.Latency; l.Samples > 0 {
		what := "latency"
		if r.Workload == WorkPubSync {
			what = "publish round trip"
		}
		fmt.Fprintf(&b, "  %s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", what, loadgen.FormatDuration(l.P50),
			loadgen.FormatDuration(l.P90), loadgen.FormatDuration(l.P99), loadgen.FormatDuration(l.P999), loadgen.FormatDuration(l.Max))
	}
	if len(r.PerConsumer) > 1 {
		parts := make([]string, len(r.PerConsumer))
		for i, n := range r.PerConsumer {
			parts[i] = c(n)
		}
		fmt.Fprintf(&b, "  per consumer: %s\n", strings.Join(parts, " / "))
	}
	if err := r.check(); err != nil || r.Errors > 0 {
		fmt.Fprintf(&b, "  errors %d", r.Errors)
		if err != nil {
			fmt.Fprintf(&b, "; %v", err)
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func sizeOf(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// resultJSON is the JSON form of Result: durations in milliseconds, latencies in
// microseconds (as Percentiles writes them).
type resultJSON struct {
	Workload    string      `json:"workload"`
	Stream      string      `json:"stream"`
	Size        int         `json:"size"`
	Msgs        int         `json:"msgs"`
	Replicas    int         `json:"replicas,omitempty"`
	Window      int         `json:"window,omitempty"`
	Batch       int         `json:"batch,omitempty"`
	Consumers   int         `json:"consumers,omitempty"`
	AckAll      bool        `json:"ack_all,omitempty"`
	Published   uint64      `json:"published"`
	Acked       uint64      `json:"acked"`
	PubFailed   uint64      `json:"pub_failed"`
	Received    uint64      `json:"received"`
	Unique      uint64      `json:"unique"`
	Missing     uint64      `json:"missing"`
	Duplicates  uint64      `json:"duplicates"`
	OutOfOrder  uint64      `json:"out_of_order"`
	Leftover    uint64      `json:"leftover"`
	PerConsumer []uint64    `json:"per_consumer,omitempty"`
	Errors      int         `json:"errors"`
	ElapsedMs   float64     `json:"elapsed_ms"`
	PrefillMs   float64     `json:"prefill_ms,omitempty"`
	MsgsPerSec  float64     `json:"msgs_per_sec"`
	MBPerSec    float64     `json:"mb_per_sec"`
	Latency     Percentiles `json:"latency"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MarshalJSON writes the fields in snake case, durations in milliseconds and
// latencies in microseconds, with the derived missing count.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{
		Workload: r.Workload, Stream: r.Stream, Size: r.Size, Msgs: r.Msgs, Replicas: r.Replicas, Window: r.Window, Batch: r.Batch,
		Consumers: r.Consumers, AckAll: r.AckAll, Published: r.Published, Acked: r.Acked, PubFailed: r.PubFailed,
		Received: r.Received, Unique: r.Unique, Missing: r.Missing(), Duplicates: r.Duplicates, OutOfOrder: r.OutOfOrder,
		Leftover: r.Leftover, PerConsumer: r.PerConsumer, Errors: r.Errors, ElapsedMs: ms(r.Elapsed), PrefillMs: ms(r.Prefill),
		MsgsPerSec: r.MsgsPerSec, MBPerSec: r.MBPerSec, Latency: r.Latency,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result{
		Workload: j.Workload, Stream: j.Stream, Size: j.Size, Msgs: j.Msgs, Replicas: j.Replicas, Window: j.Window, Batch: j.Batch,
		Consumers: j.Consumers, AckAll: j.AckAll, Published: j.Published, Acked: j.Acked, PubFailed: j.PubFailed,
		Received: j.Received, Unique: j.Unique, Duplicates: j.Duplicates, OutOfOrder: j.OutOfOrder, Leftover: j.Leftover,
		PerConsumer: j.PerConsumer, Errors: j.Errors,
		Elapsed:    time.Duration(j.ElapsedMs * float64(time.Millisecond)),
		Prefill:    time.Duration(j.PrefillMs * float64(time.Millisecond)),
		MsgsPerSec: j.MsgsPerSec, MBPerSec: j.MBPerSec, Latency: j.Latency,
	}
	return nil
}

// Histogram bounds: 1µs to 60s, 3 significant digits (as internal/loadgen).
const (
	histMin = int64(time.Microsecond)
	histMax = int64(60 * time.Second)
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, 3) }

// record adds one latency, clamped into the histogram's range.
func record(h *hdrhistogram.Histogram, ns int64) {
	_ = h.RecordValue(min(max(ns, histMin), histMax))
}

func percentilesOf(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Samples: h.TotalCount(),
		P50:     time.Duration(h.ValueAtQuantile(50)),
		P90:     time.Duration(h.ValueAtQuantile(90)),
		P99:     time.Duration(h.ValueAtQuantile(99)),
		P999:    time.Duration(h.ValueAtQuantile(99.9)),
		Max:     time.Duration(h.Max()),
		Mean:    time.Duration(h.Mean()),
	}
}
