package kafka

import (
	"fmt"
	"math"
	"testing"
)

// An idempotent producer's record ids are numbered ("<prefix><seq>"), which the
// stream's duplicate window keeps as runs. recordIDs advances the text of the
// last id instead of formatting each: every id must be what formatting gives,
// across carries into a new digit, the int32 wrap, records skipped (a record
// refused by its subject takes no id) and an id asked out of order.
func TestIdempotentRecordIDs(t *testing.T) {
	want := func(seq int64) string { return fmt.Sprintf("kafka:4711:3:2#%d", seq) }
	var ids recordIDs
	for _, first := range []int32{0, 7, 95, 998, 99_999, math.MaxInt32 - 3} {
		ids.begin(4711, 3, 2, first)
		for i := 0; i < 1200; i++ {
			if i%97 == 5 {
				continue // a skipped record
			}
			seq := (int64(first) + int64(i)) % (math.MaxInt32 + 1)
			if got := string(ids.of(i)); got != want(seq) {
				t.Fatalf("first %d, record %d: id %q, want %q", first, i, got, want(seq))
			}
		}
		// The expected last id, once per batch, between two records.
		if got := string(ids.ofSeq(math.MaxInt32)); got != want(math.MaxInt32) {
			t.Fatalf("expected last id %q", got)
		}
		if got := string(ids.of(1200)); got != want((int64(first)+1200)%(math.MaxInt32+1)) {
			t.Fatalf("first %d: id after an expected last id %q", first, got)
		}
		if got := string(ids.of(3)); got != want(int64(first)+3) {
			t.Fatalf("first %d: record 3 asked again: %q", first, got)
		}
	}
	ids.begin(1, 0, 0, 0)
	if got := string(ids.of(0)); got != "kafka:1:0:0#0" {
		t.Fatalf("new batch's first id %q", got)
	}
}

func BenchmarkRecordIDs(b *testing.B) {
	var ids recordIDs
	ids.begin(4711, 3, 2, 1_000_000)
	i := 0
	for b.Loop() {
		if len(ids.of(i)) == 0 {
			b.Fatal("empty id")
		}
		if i++; i == 10_000 {
			i = 0
			ids.begin(4711, 3, 2, 1_000_000)
		}
	}
}

// min.insync.replicas holds up to a majority of the replicas, which is what
// acks=all waits for.
func TestCheckMinInsync(t *testing.T) {
	for _, c := range []struct {
		min, replicas int
		ok            bool
	}{{0, 1, true}, {1, 1, true}, {2, 1, false}, {1, 3, true}, {2, 3, true}, {3, 3, false}, {3, 5, true}, {4, 5, false}} {
		if err := checkMinInsync(c.min, c.replicas); (err == nil) != c.ok {
			t.Errorf("min.insync.replicas=%d of %d replicas: %v", c.min, c.replicas, err)
		}
	}
}
