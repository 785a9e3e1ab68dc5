package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCountFromMatchesReader: CountFrom agrees with reading the log from every
// sequence, across segments and after interior deletes, subject purges, front
// removals and a reopen, with the delete sets in both their forms.
func TestCountFromMatchesReader(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 12000
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 600, func(i int) string { return fmt.Sprintf("s.%d", i%5) }, 20)
	check := func(stage string) {
		t.Helper()
		st := l.State()
		for from := uint64(0); from <= st.LastSeq+2; from++ {
			want := uint64(len(readAll(t, l, from)))
			if got := l.CountFrom(from); got != want {
				t.Fatalf("%s: CountFrom(%d) = %d, reading finds %d (state %+v)", stage, from, got, want, st)
			}
		}
	}
	check("appended")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 150 { // sparse: map form
		_ = l.Delete(1 + rng.Uint64N(600))
	}
	check("sparse deletes")
	var seqs []uint64
	for q := uint64(200); q < 400; q += 2 { // dense in some segments: bitmap form
		seqs = append(seqs, q)
	}
	if _, err := l.DeleteMany(seqs); err != nil {
		t.Fatal(err)
	}
	check("dense deletes")
	var maps, bitmaps int
	for _, sg := range l.segs {
		if sg.dels.m != nil {
			maps++
		}
		if sg.dels.bits != nil {
			bitmaps++
		}
	}
	if maps == 0 || bitmaps == 0 {
		t.Fatalf("delete sets: %d maps, %d bitmaps; the test wants both forms", maps, bitmaps)
	}
	if _, err := l.Purge(500, "s.3"); err != nil {
		t.Fatal(err)
	}
	check("subject purge")
	if _, err := l.Purge(120, ""); err != nil {
		t.Fatal(err)
	}
	check("front purge")
	l, _ = reopen(t, l)
	check("reopened")
}

// TestRemovalWatch: a watch learns the highest sequence removed since it last
// asked, whatever removed it, and nothing after Stop.
func TestRemovalWatch(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 2000
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 300, func(i int) string { return fmt.Sprintf("s.%d", i%3) }, 20)
	w := l.WatchRemovals(nil)
	only2 := l.WatchRemovals(func(s []byte) bool { return string(s) == "s.2" })
	defer only2.Stop()
	if got := w.Take(); got != 0 {
		t.Fatalf("before any removal: %d", got)
	}
	_ = l.Delete(250)
	_ = l.Delete(40)
	if got := w.Take(); got != 250 {
		t.Fatalf("after deleting 250 and 40: %d, want 250", got)
	}
	if got := only2.Take(); got != 0 { // 250 is s.0 (i = 249), 40 is s.0 (i = 39)
		t.Fatalf("a watch of s.2 learned of s.0 removals: %d", got)
	}
	_ = l.Delete(30) // s.2 (i = 29)
	if got := only2.Take(); got != 30 {
		t.Fatalf("a watch of s.2 after deleting an s.2 message: %d, want 30", got)
	}
	w.Take()
	if got := w.Take(); got != 0 {
		t.Fatalf("Take does not start over: %d", got)
	}
	if _, err := l.Purge(0, "s.1"); err != nil {
		t.Fatal(err)
	}
	if got := w.Take(); got != 299 { // the last s.1 message (i = 298)
		t.Fatalf("after purging s.1: %d, want 299", got)
	}
	if _, err := l.Purge(150, ""); err != nil { // whole segments and single messages
		t.Fatal(err)
	}
	if got := w.Take(); got < 140 || got >= 150 {
		t.Fatalf("after purging below 150: %d, want the last live message below 150", got)
	}
	w.Stop()
	_ = l.Delete(260)
	if got := w.Take(); got != 0 {
		t.Fatalf("after Stop: %d", got)
	}
}
