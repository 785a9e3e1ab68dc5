package streambench

import (
	"encoding/json"
	"time"
)

// Percentiles summarizes a latency histogram. Samples is 0 when the run measured no
// latency. Its JSON form gives the latencies in microseconds (p50_us, p90_us, p99_us,
// p999_us, max_us, mean_us), as internal/loadgen's does.
type Percentiles struct {
	Samples                        int64
	P50, P90, P99, P999, Max, Mean time.Duration
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

// MarshalJSON writes the latencies in microseconds.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(percentilesJSON{p.Samples, us(p.P50), us(p.P90), us(p.P99), us(p.P999), us(p.Max), us(p.Mean)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Percentiles) UnmarshalJSON(b []byte) error {
	var j percentilesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Percentiles{j.Samples, fromUs(j.P50), fromUs(j.P90), fromUs(j.P99), fromUs(j.P999), fromUs(j.Max), fromUs(j.Mean)}
	return nil
}
