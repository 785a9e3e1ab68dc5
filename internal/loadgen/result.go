package loadgen

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Result is what one run measured.
//
// MsgsPerSec is on the receiving side for the workloads that have one: every
// delivery to every subscriber counts in pubsub (so 1 publisher to 4 subscribers at
// 1M msgs/s published shows 4M msgs/s), every delivery to the group in queue, every
// reply in reqrep; in pub mode it is the publish rate. MBPerSec is MsgsPerSec times
// the payload size, in units of 10^6 bytes (headers and framing not counted).
type Result struct {
	Mode    string
	Subject string
	Pubs    int // publishers (requesters in reqrep)
	Subs    int // subscribers (queue members in queue, responders in reqrep)
	Size    int // payload bytes
	Msgs    int // messages per publisher asked for (0 = bounded by duration)

	Sent     uint64 // messages published (requests sent)
	Received uint64 // deliveries (replies) that arrived; equals Sent in pub mode
	Expected uint64 // deliveries a lossless broker makes for Sent
	Elapsed  time.Duration

	MsgsPerSec float64
	MBPerSec   float64
	Latency    Percentiles
	Errors     int // failed publishes, flushes and requests

	SubCounts []uint64 // deliveries per subscriber (pubsub, queue)

	// Transport is what the clients' side of a reliable-UDP transport sent over
	// the run, summed over connections; nil over TCP.
	Transport *TransportStats
}

// TransportStats are a reliable-UDP transport's counters (docs/udp.md).
type TransportStats struct {
	DataPackets  uint64        `json:"data_packets"`
	CoordPackets uint64        `json:"coordination_packets"`
	Retransmits  uint64        `json:"retransmissions"`
	NAKs         uint64        `json:"naks"`
	Duplicates   uint64        `json:"duplicates"`
	MaxRTT       time.Duration `json:"max_srtt_ns"` // largest smoothed RTT of a connection
}

// Percentiles summarizes a latency histogram. Samples is 0 when the run measured no
// latency (pub mode, or payloads under 8 bytes outside reqrep).
type Percentiles struct {
	Samples                        int64
	P50, P90, P99, P999, Max, Mean time.Duration
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

// finish computes the rates from the counts and the elapsed time.
func (r *Result) finish() {
	if r.Elapsed <= 0 {
		return
	}
	n := r.Received
	if r.Mode == ModePub {
		n = r.Sent
	}
	r.MsgsPerSec = float64(n) / r.Elapsed.Seconds()
	r.MBPerSec = r.MsgsPerSec * float64(r.Size) / 1e6
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// String is a short human summary, for example:
//
//	pubsub: 1 publisher -> 4 subscribers, 16 B payloads
//	  2,000,000 sent, 8,000,000 received in 2.412s
//	  3,316,750 msgs/s, 53.07 MB/s
//	  latency p50 412.0µs  p90 1.21ms  p99 3.40ms  p99.9 5.10ms  max 7.20ms  mean 601.0µs
func (r Result) String() string {
	var b strings.Builder
	switch r.Mode {
	case ModePub:
		fmt.Fprintf(&b, "%s: %s, %d B payloads\n", r.Mode, plural(r.Pubs, "publisher", "publishers"), r.Size)
		fmt.Fprintf(&b, "  %s sent in %s\n", Commas(float64(r.Sent)), FormatDuration(r.Elapsed))
	case ModeReqRep:
		fmt.Fprintf(&b, "%s: %s -> %s, %d B payloads\n", r.Mode, plural(r.Pubs, "requester", "requesters"), plural(r.Subs, "responder", "responders"), r.Size)
		fmt.Fprintf(&b, "  %s requests, %s replies in %s\n", Commas(float64(r.Sent)), Commas(float64(r.Received)), FormatDuration(r.Elapsed))
	case ModeQueue:
		fmt.Fprintf(&b, "%s: %s -> queue group of %d, %d B payloads\n", r.Mode, plural(r.Pubs, "publisher", "publishers"), r.Subs, r.Size)
		fmt.Fprintf(&b, "  %s sent, %s received in %s\n", Commas(float64(r.Sent)), Commas(float64(r.Received)), FormatDuration(r.Elapsed))
	default:
		fmt.Fprintf(&b, "%s: %s -> %s, %d B payloads\n", r.Mode, plural(r.Pubs, "publisher", "publishers"), plural(r.Subs, "subscriber", "subscribers"), r.Size)
		fmt.Fprintf(&b, "  %s sent, %s received in %s\n", Commas(float64(r.Sent)), Commas(float64(r.Received)), FormatDuration(r.Elapsed))
	}
	unit := "msgs/s"
	if r.Mode == ModeReqRep {
		unit = "req/s"
	}
	fmt.Fprintf(&b, "  %s %s, %.2f MB/s\n", Commas(r.MsgsPerSec), unit, r.MBPerSec)
	l := r.Latency
	switch {
	case l.Samples > 0:
		what := "latency"
		if r.Mode == ModeReqRep {
			what = "round trip"
		}
		fmt.Fprintf(&b, "  %s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n", what,
			FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.P999), FormatDuration(l.Max), FormatDuration(l.Mean))
	case r.Mode == ModePub:
		b.WriteString("  latency: not measured (no subscribers)\n")
	case r.Size < stampLen:
		b.WriteString("  latency: not measured (payloads under 8 bytes carry no send time)\n")
	}
	if r.Mode == ModeQueue && len(r.SubCounts) > 1 {
		parts := make([]string, len(r.SubCounts))
		for i, n := range r.SubCounts {
			parts[i] = Commas(float64(n))
		}
		fmt.Fprintf(&b, "  per member: %s\n", strings.Join(parts, " / "))
	}
	if t := r.Transport; t != nil {
		fmt.Fprintf(&b, "  udp (client side): %s data packets, %s coordination packets (%.1f per 1000 msgs), %s retransmissions, %s NAKs, %s duplicates, srtt up to %s\n",
			Commas(float64(t.DataPackets)), Commas(float64(t.CoordPackets)), 1000*float64(t.CoordPackets)/max(float64(r.Sent), 1),
			Commas(float64(t.Retransmits)), Commas(float64(t.NAKs)), Commas(float64(t.Duplicates)), FormatDuration(t.MaxRTT))
	}
	if r.Errors > 0 || r.Received != r.Expected {
		fmt.Fprintf(&b, "  errors %d, %s of %s expected deliveries missing\n", r.Errors,
			Commas(float64(r.Expected)-float64(r.Received)), Commas(float64(r.Expected)))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// FormatDuration prints a latency with three significant digits in a unit that suits
// it: 41.2µs, 1.21ms, 2.412s.
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
}

// Commas prints a rate or count rounded to an integer with thousands separators.
func Commas(v float64) string {
	neg := v < 0
	if neg {
		v = -v
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// resultJSON is the JSON form of Result: durations in milliseconds (elapsed) and
// microseconds (latencies), as floats.
type resultJSON struct {
	Mode       string          `json:"mode"`
	Subject    string          `json:"subject"`
	Pubs       int             `json:"pubs"`
	Subs       int             `json:"subs"`
	Size       int             `json:"size"`
	Msgs       int             `json:"msgs"`
	Sent       uint64          `json:"sent"`
	Received   uint64          `json:"received"`
	Expected   uint64          `json:"expected"`
	ElapsedMs  float64         `json:"elapsed_ms"`
	MsgsPerSec float64         `json:"msgs_per_sec"`
	MBPerSec   float64         `json:"mb_per_sec"`
	Latency    percentilesJSON `json:"latency"`
	Errors     int             `json:"errors"`
	SubCounts  []uint64        `json:"sub_counts,omitempty"`
	Transport  *TransportStats `json:"udp,omitempty"`
}

type percentilesJSON struct {
	Samples int64   `json:"samples"`
	P50     float64 `json:"p50_us"`
	P90     float64 `json:"p90_us"`
	P99     float64 `json:"p99_us"`
	P999    float64 `json:"p999_us"`
	Max     float64 `json:"max_us"`
	Mean    float64 `json:"mean_us"`
}

func us(d time.Duration) float64     { return float64(d) / float64(time.Microsecond) }
func fromUs(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

func (p Percentiles) toJSON() percentilesJSON {
	return percentilesJSON{p.Samples, us(p.P50), us(p.P90), us(p.P99), us(p.P999), us(p.Max), us(p.Mean)}
}

func (j percentilesJSON) percentiles() Percentiles {
	return Percentiles{j.Samples, fromUs(j.P50), fromUs(j.P90), fromUs(j.P99), fromUs(j.P999), fromUs(j.Max), fromUs(j.Mean)}
}

// MarshalJSON writes the latencies as microseconds: p50_us, p90_us, p99_us, p999_us,
// max_us, mean_us, with the sample count.
func (p Percentiles) MarshalJSON() ([]byte, error) { return json.Marshal(p.toJSON()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Percentiles) UnmarshalJSON(b []byte) error {
	var j percentilesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = j.percentiles()
	return nil
}

// MarshalJSON writes the documented JSON form (see docs/benchmarking.md).
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{
		Mode: r.Mode, Subject: r.Subject, Pubs: r.Pubs, Subs: r.Subs, Size: r.Size, Msgs: r.Msgs,
		Sent: r.Sent, Received: r.Received, Expected: r.Expected,
		ElapsedMs:  float64(r.Elapsed) / float64(time.Millisecond),
		MsgsPerSec: r.MsgsPerSec, MBPerSec: r.MBPerSec, Latency: r.Latency.toJSON(), Errors: r.Errors, SubCounts: r.SubCounts,
		Transport: r.Transport,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result{
		Mode: j.Mode, Subject: j.Subject, Pubs: j.Pubs, Subs: j.Subs, Size: j.Size, Msgs: j.Msgs,
		Sent: j.Sent, Received: j.Received, Expected: j.Expected,
		Elapsed:    time.Duration(j.ElapsedMs * float64(time.Millisecond)),
		MsgsPerSec: j.MsgsPerSec, MBPerSec: j.MBPerSec, Latency: j.Latency.percentiles(),
		Errors: j.Errors, SubCounts: j.SubCounts, Transport: j.Transport,
	}
	return nil
}
