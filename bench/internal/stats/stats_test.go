package stats

import "testing"

func TestSpreadOf(t *testing.T) {
	if s := SpreadOf([]float64{3, 1, 2}); s != (Spread{Median: 2, Min: 1, Max: 3}) {
		t.Fatalf("odd: %+v", s)
	}
	in := []float64{4, 1, 2, 3}
	if s := SpreadOf(in); s != (Spread{Median: 2.5, Min: 1, Max: 4}) {
		t.Fatalf("even: %+v", s)
	}
	if in[0] != 4 {
		t.Fatal("SpreadOf sorted its argument")
	}
	if s := SpreadOf(nil); s != (Spread{}) {
		t.Fatalf("empty: %+v", s)
	}
	if s := SpreadOf([]float64{7}); s != (Spread{Median: 7, Min: 7, Max: 7}) {
		t.Fatalf("one: %+v", s)
	}
}
