package route

import (
	"testing"
	"time"
)

// TestStallClock: a write blocked past the limit under checks on time is a stall;
// one that only looks blocked because this process did not run (a check that
// comes late) is judged from the late check on; bytes not being written never
// stall.
func TestStallClock(t *testing.T) {
	const limit, tick = 500 * time.Millisecond, 50 * time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// Checks every tick; a write blocked from t0 stalls once more than the limit
	// has passed, not before.
	var c stallClock
	for d := time.Duration(0); d <= limit; d += tick {
		if c.check(at(d), t0, true, limit) {
			t.Fatalf("stalled after %v of a %v limit", d, limit)
		}
	}
	if !c.check(at(limit+tick), t0, true, limit) {
		t.Fatal("a write blocked past the limit under regular checks is not a stall")
	}

	// The process stops 100 ms into a write and runs again 2 s later: the write
	// looks blocked for 2.1 s, but it is judged from the late check.
	c = stallClock{}
	c.check(at(0), t0, false, limit)
	c.check(at(tick), t0, false, limit)
	since := at(2 * tick)
	c.check(since, since, true, limit)
	resumed := at(2*tick + 2*time.Second)
	if c.check(resumed, since, true, limit) {
		t.Fatal("a pause of this process counted as the peer's stall")
	}
	for d := tick; d <= limit; d += tick {
		if c.check(resumed.Add(d), since, true, limit) {
			t.Fatalf("stalled %v after the pause, within the limit", d)
		}
	}
	if !c.check(resumed.Add(limit+tick), since, true, limit) {
		t.Fatal("a write still blocked a limit after the pause is not a stall")
	}

	// A write that begins after a pause is judged from its own start.
	c = stallClock{}
	c.check(at(0), t0, false, limit)
	c.check(at(time.Second), t0, false, limit) // late
	start := at(time.Second + tick)
	for d := tick; d <= limit; d += tick {
		if c.check(at(time.Second+d), start, true, limit) {
			t.Fatalf("stalled %v into a write that began after the pause", at(time.Second+d).Sub(start))
		}
	}
	if !c.check(start.Add(limit+tick), start, true, limit) {
		t.Fatal("a write blocked past the limit after a pause is not a stall")
	}

	// Nothing being written is never a stall, however long.
	c = stallClock{}
	for d := time.Duration(0); d <= 10*limit; d += tick {
		if c.check(at(d), time.Time{}, false, limit) {
			t.Fatalf("stalled at %v with no write under way", d)
		}
	}
}
