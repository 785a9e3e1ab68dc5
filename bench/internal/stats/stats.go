// Package stats summarizes repeated measurements the way the bench reports show them:
// the median with the spread (min–max) across runs.
package stats

import "slices"

// Spread is the median, min and max of one figure across runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// SpreadOf summarizes v (the zero Spread when v is empty); an even count takes the
// mean of the two middle values as the median.
func SpreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}
