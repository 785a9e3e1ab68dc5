package interest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func changes(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s/%s=%d", c.Key.Subject, c.Key.Queue, c.Weight))
	}
	return out
}

func TestTableSetIsIdempotent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := NewTable(10*time.Second, t0)
	if got := changes(tb.Set(Key{"a.*", ""}, 1)); !slices.Equal(got, []string{"a.*/=1"}) {
		t.Fatalf("first set: %q", got)
	}
	if got := tb.Set(Key{"a.*", ""}, 1); len(got) != 0 {
		t.Fatalf("the same entry again changed %q", changes(got))
	}
	if got := changes(tb.Set(Key{"jobs", "w"}, 3)); !slices.Equal(got, []string{"jobs/w=3"}) {
		t.Fatalf("group: %q", got)
	}
	if got := changes(tb.Set(Key{"jobs", "w"}, 2)); !slices.Equal(got, []string{"jobs/w=2"}) {
		t.Fatalf("weight change: %q", got)
	}
	if got := changes(tb.Set(Key{"jobs", "w"}, 0)); !slices.Equal(got, []string{"jobs/w=0"}) {
		t.Fatalf("removal: %q", got)
	}
	if got := tb.Set(Key{"never", ""}, 0); len(got) != 0 {
		t.Fatalf("removing an unknown entry changed %q", changes(got))
	}
	if tb.Len() != 1 || tb.Weight(Key{"a.*", ""}) != 1 {
		t.Fatalf("table holds %d, a.*=%d", tb.Len(), tb.Weight(Key{"a.*", ""}))
	}
}

func TestRefreshDropsWhatItDoesNotRepeat(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := NewTable(10*time.Second, t0)
	tb.Set(Key{"a", ""}, 1)
	tb.Set(Key{"b", ""}, 1)
	tb.Set(Key{"c", "q"}, 2)
	tb.BeginRefresh(7)
	tb.Set(Key{"b", ""}, 1)
	tb.Set(Key{"c", "q"}, 5)
	if got := changes(tb.EndRefresh(6, t0)); len(got) != 0 {
		t.Fatalf("the end of another generation changed %q", got)
	}
	got := changes(tb.EndRefresh(7, t0.Add(5*time.Second)))
	if !slices.Equal(got, []string{"a/=0"}) {
		t.Fatalf("refresh end: %q", got)
	}
	if tb.Expired(t0.Add(15*time.Second)) || !tb.Expired(t0.Add(15*time.Second+1)) {
		t.Fatal("the lease does not run from the last refresh")
	}
	// An end repeated (or without its begin) changes nothing.
	if got := tb.EndRefresh(7, t0.Add(time.Hour)); len(got) != 0 || tb.Expired(t0.Add(15*time.Second)) {
		t.Fatalf("a repeated end changed %q or renewed the lease", changes(got))
	}
	if got := changes(tb.Clear()); !slices.Equal(got, []string{"b/=0", "c/q=0"}) || tb.Len() != 0 {
		t.Fatalf("clear: %q", got)
	}
}

type recordingListener struct{ got []string }

func (r *recordingListener) InterestChanged(k Key, w uint32) {
	r.got = append(r.got, fmt.Sprintf("%s/%s=%d", k.Subject, k.Queue, w))
}

func TestLocalCountsAndTellsInOrder(t *testing.T) {
	l := NewLocal()
	l.Interest("a", "", 1)
	l.Interest("a", "", 1)
	early := &recordingListener{}
	l.Listen(early)
	if !slices.Equal(early.got, []string{"a/=2"}) {
		t.Fatalf("a new listener was given %q", early.got)
	}
	l.Interest("jobs", "w", 1)
	l.Interest("a", "", -1)
	l.Interest("a", "", -1)
	l.Interest("a", "", -1) // never counted: ignored
	want := []string{"a/=2", "jobs/w=1", "a/=1", "a/=0"}
	if !slices.Equal(early.got, want) {
		t.Fatalf("listener got %q, want %q", early.got, want)
	}
	if l.Len() != 1 {
		t.Fatalf("%d keys", l.Len())
	}
	l.Forget(early)
	l.Interest("b", "", 1)
	if len(early.got) != len(want) {
		t.Fatal("a forgotten listener was told")
	}
}

// TestLocalConcurrentChanges: the listener's last word for each key is the final
// count, whatever the interleaving.
func TestLocalConcurrentChanges(t *testing.T) {
	l := NewLocal()
	last := map[Key]uint32{}
	var mu sync.Mutex
	l.Listen(listenerFunc(func(k Key, w uint32) { mu.Lock(); last[k] = w; mu.Unlock() }))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				subj := fmt.Sprintf("s%d", i%10)
				l.Interest(subj, "", 1)
				if i%20 < 10 { // every other round of the ten subjects is taken back
					l.Interest(subj, "", -1)
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; i < 10; i++ {
		k := Key{fmt.Sprintf("s%d", i), ""}
		// 8 goroutines × 100 adds per subject, half of them removed again.
		if last[k] != 400 {
			t.Fatalf("%v: last told %d, want 400", k, last[k])
		}
	}
}

type listenerFunc func(Key, uint32)

func (f listenerFunc) InterestChanged(k Key, w uint32) { f(k, w) }
