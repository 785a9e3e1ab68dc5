package tablefmt

import (
	"testing"

	"github.com/tern-mq/tern/bench/internal/stats"
)

func TestFormats(t *testing.T) {
	for v, want := range map[float64]string{5_123_000: "5.12M", 812_345: "812k", 20_000: "20.0k", 999: "999", 4.5: "4.50"} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{812.4: "812", 51.23: "51.2", 5.123: "5.12"} {
		if got := MBps(v); got != want {
			t.Errorf("MBps(%v) = %q, want %q", v, got, want)
		}
	}
	for n, want := range map[int]string{1024: "1 KiB", 16: "16 B", 1500: "1500 B"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1 GiB", 3 << 29: "1536 MiB", 4 << 20: "4 MiB", 512 << 10: "512 KiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	if Plural(1, "run") != "1 run" || Plural(3, "run") != "3 runs" {
		t.Errorf("Plural: %q, %q", Plural(1, "run"), Plural(3, "run"))
	}
}

func TestRateCell(t *testing.T) {
	sp := stats.Spread{Median: 20_000, Min: 19_000, Max: 812_345}
	for _, c := range []struct {
		completed, failed int
		want              string
	}{{0, 3, "FAILED"}, {1, 0, "20.0k"}, {2, 1, "20.0k (19.0k–812k) [1 of 3 runs failed]"}} {
		if got := RateCell(sp, c.completed, c.failed, 3); got != c.want {
			t.Errorf("RateCell(%d, %d) = %q, want %q", c.completed, c.failed, got, c.want)
		}
	}
}
