package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRetentionLimits(t *testing.T) {
	const size = 50
	rec := uint64(recordSize(1, 0, size))
	cases := []struct {
		name      string
		maxMsgs   uint64
		maxBytes  int64
		discard   Discard
		wantFirst uint64
		wantLast  uint64
	}{
		{"count/old", 10, 0, DiscardOld, 91, 100},
		{"count/new", 10, 0, DiscardNew, 1, 10},
		{"bytes/old", 0, int64(12 * rec), DiscardOld, 89, 100},
		{"bytes/new", 0, int64(12*rec) + 5, DiscardNew, 1, 12},
		{"both/old", 30, int64(12 * rec), DiscardOld, 89, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.SegmentBytes = 1024
			cfg.MaxMsgs, cfg.MaxBytes, cfg.Discard = tc.maxMsgs, tc.maxBytes, tc.discard
			l, _ := mustOpen(t, cfg)
			full := 0
			for i := 0; i < 100; i++ {
				_, err := l.Append([]byte("s"), nil, payloadFor(uint64(i+1), size), 0)
				if errors.Is(err, ErrFull) {
					full++
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if i%3 == 2 {
					if err := l.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			l.Commit()
			if (tc.discard == DiscardNew) != (full > 0) {
				t.Fatalf("%d appends refused", full)
			}
			check := func(l *Log) {
				t.Helper()
				st := l.State()
				n := tc.wantLast - tc.wantFirst + 1
				if st.FirstSeq != tc.wantFirst || st.LastSeq != tc.wantLast || st.Msgs != n || st.Bytes != n*rec {
					t.Fatalf("state %+v, want %d..%d", st, tc.wantFirst, tc.wantLast)
				}
				if s := subjects(l); s["s"].msgs != n || s["s"].last != tc.wantLast {
					t.Fatalf("subjects %v", s)
				}
				if _, _, err := l.Read(tc.wantFirst-1, nil); tc.wantFirst > 1 && !isNotFound(err) {
					t.Fatalf("removed message readable: %v", err)
				}
				checkRead(t, l, msg{seq: tc.wantFirst, subject: "s", payload: payloadFor(tc.wantFirst, size)})
				// Whole old segments are gone from disk.
				if files := segFiles(t, cfg.Dir, ".log"); len(files) != st.Segments || st.Segments > 3 {
					t.Fatalf("%d segment files, state %d", len(files), st.Segments)
				}
			}
			check(l)
			l, _ = reopen(t, l)
			check(l)
		})
	}
}

// TestRetentionLimitsLowered: Open applies limits that became smaller.
func TestRetentionLimitsLowered(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 50, subj("a"), 10)
	l.Close()
	cfg.MaxMsgs = 5
	l, rep := mustOpen(t, cfg)
	if st := l.State(); st.Msgs != 5 || st.FirstSeq != 46 || rep.Msgs != 5 {
		t.Fatalf("state %+v report %+v", st, rep)
	}
}

func TestExpireOld(t *testing.T) {
	for _, d := range []Discard{DiscardOld, DiscardNew} {
		t.Run(d.String(), func(t *testing.T) { testExpireOld(t, d) })
	}
}

// testExpireOld: age limits remove old messages under both discard policies.
func testExpireOld(t *testing.T, discard Discard) {
	clk := newClock()
	cfg := testConfig(t)
	cfg.Discard = discard
	cfg.SegmentBytes = 1024
	cfg.MaxAge = time.Minute
	cfg.Now = clk.Now
	l, _ := mustOpen(t, cfg)
	for i := 0; i < 100; i++ {
		appendMsgs(t, l, 1, func(int) string { return fmt.Sprintf("s.%d", i%3) }, 40)
		clk.Add(time.Second)
	}
	// Now = start+100s: messages appended at start+0..39s are older than a minute.
	segsBefore := l.State().Segments
	n, err := l.ExpireOld()
	if err != nil || n != 40 {
		t.Fatalf("ExpireOld = %d, %v", n, err)
	}
	st := l.State()
	if st.FirstSeq != 41 || st.Msgs != 60 || st.Segments >= segsBefore {
		t.Fatalf("state %+v (segments before %d)", st, segsBefore)
	}
	if st.FirstTime != clk.Now().Add(-60*time.Second).UnixNano() {
		t.Fatalf("FirstTime %d", st.FirstTime)
	}
	if n, _ := l.ExpireOld(); n != 0 {
		t.Fatalf("second ExpireOld removed %d", n)
	}
	l, _ = reopen(t, l)
	if st2 := l.State(); st2 != st {
		t.Fatalf("after restart %+v\nwant %+v", st2, st)
	}
	// Everything expires: the log is empty, keeps LastSeq, and shrinks to one
	// empty segment.
	clk.Add(time.Hour)
	if n, _ := l.ExpireOld(); n != 60 {
		t.Fatalf("ExpireOld all = %d", n)
	}
	st = l.State()
	if st.Msgs != 0 || st.FirstSeq != 101 || st.LastSeq != 100 || st.Segments != 1 || len(subjects(l)) != 0 {
		t.Fatalf("state %+v subjects %v", st, subjects(l))
	}
	files := segFiles(t, cfg.Dir, ".log")
	if len(files) != 1 || filepath.Base(files[0]) != segName(101)+".log" || fileSize(t, files[0]) != 0 {
		t.Fatalf("files %v", files)
	}
	l, _ = reopen(t, l)
	if st := l.State(); st.FirstSeq != 101 || st.LastSeq != 100 || st.Msgs != 0 {
		t.Fatalf("after restart %+v", st)
	}
	if seq, _ := l.Append([]byte("x"), nil, nil, 0); seq != 101 {
		t.Fatalf("next seq %d", seq)
	}
}

// TestDeletionsSurviveRestart covers Delete (front and interior), Purge by
// sequence and by subject, and expiry, across a restart.
func TestDeletionsSurviveRestart(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t)
	cfg.SegmentBytes = 700
	cfg.MaxAge = time.Hour
	cfg.Now = clk.Now
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 10, func(i int) string { return []string{"a", "b"}[i%2] }, 30)
	clk.Add(2 * time.Hour)
	ms := appendMsgs(t, l, 60, func(i int) string { return []string{"a", "b", "c"}[i%3] }, 30)
	if n, err := l.ExpireOld(); n != 10 || err != nil {
		t.Fatalf("ExpireOld = %d, %v", n, err)
	}
	for _, q := range []uint64{11, 12, 20, 33, 34, 35, 69} {
		if err := l.Delete(q); err != nil {
			t.Fatalf("Delete(%d): %v", q, err)
		}
	}
	if n, err := l.Purge(16, ""); n != 3 || err != nil { // 13, 14, 15
		t.Fatalf("Purge(16) = %d, %v", n, err)
	}
	if n, err := l.Purge(50, "b"); err != nil || n != 10 {
		t.Fatalf("Purge(50, b) = %d, %v", n, err)
	}
	if n, _ := l.Purge(0, "nope"); n != 0 {
		t.Fatalf("Purge of an unknown subject removed %d", n)
	}
	st := l.State()
	subs := subjects(l)
	live := readAll(t, l, 0)
	if st.FirstSeq != 16 || st.Msgs != uint64(len(live)) || st.Deleted != 70-16+1-st.Msgs {
		t.Fatalf("state %+v, %d live", st, len(live))
	}
	l, rep := reopen(t, l)
	if len(rep.Corrupt) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if st2 := l.State(); st2 != st {
		t.Fatalf("after restart %+v\nwant %+v", st2, st)
	}
	if s2 := subjects(l); fmt.Sprint(s2) != fmt.Sprint(subs) {
		t.Fatalf("subjects %v, want %v", s2, subs)
	}
	if live2 := readAll(t, l, 0); fmt.Sprint(seqsOf(live2)) != fmt.Sprint(seqsOf(live)) {
		t.Fatalf("live %v\nwant %v", seqsOf(live2), seqsOf(live))
	}
	for _, q := range []uint64{5, 11, 20, 35, 69, 18} { // 18 was a "b"
		if _, _, err := l.Read(q, nil); !isNotFound(err) {
			t.Fatalf("Read(%d) = %v", q, err)
		}
		if err := l.Delete(q); !isNotFound(err) {
			t.Fatalf("Delete(%d) again = %v", q, err)
		}
	}
	checkRead(t, l, ms[70-10-1]) // seq 70
}

// TestDeleteWholeSegment: a segment whose messages are all deleted goes from
// disk, from the middle of the log too, and the hole it leaves is not taken
// for lost data after a restart.
func TestDeleteWholeSegment(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 500
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 60, subj("a"), 30)
	mid := l.segs[2]
	path := mid.logPath
	for q := mid.base; q <= mid.last; q++ {
		if err := l.Delete(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("dead segment still on disk: %v", err)
	}
	st := l.State()
	l, rep := reopen(t, l)
	if len(rep.Corrupt) != 0 || l.State() != st {
		t.Fatalf("report %+v state %+v want %+v", rep, l.State(), st)
	}
	if got := readAll(t, l, 0); uint64(len(got)) != st.Msgs {
		t.Fatalf("reader %d, want %d", len(got), st.Msgs)
	}
	// Deleting the rest in order empties the log down to the active segment.
	for q := st.FirstSeq; q <= st.LastSeq; q++ {
		if err := l.Delete(q); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	if st := l.State(); st.Msgs != 0 || st.Segments != 1 || st.FirstSeq != 61 {
		t.Fatalf("state %+v", st)
	}
	l, rep = reopen(t, l)
	if st := l.State(); st.Msgs != 0 || st.FirstSeq != 61 || st.LastSeq != 60 || len(rep.Corrupt) != 0 {
		t.Fatalf("after restart %+v %+v", st, rep)
	}
}

// TestWorkQueueStaysSmall: acknowledging roughly in order keeps no per-message
// tombstones in memory, removes segments as they empty, and compacts the .del
// file.
func TestWorkQueueStaysSmall(t *testing.T) {
	defer func(n int) { compactDelEntries = n }(compactDelEntries)
	compactDelEntries = 100
	cfg := testConfig(t)
	cfg.SegmentBytes = 64 << 10
	l, _ := mustOpen(t, cfg)
	const n = 20000
	var acked uint64
	for i := 0; i < n; i += 100 {
		appendMsgs(t, l, 100, subj("jobs"), 16)
		// Acknowledge all but the newest few, slightly out of order.
		for acked+20 < l.State().LastSeq {
			q := acked + 1
			if q%7 == 0 && l.isLive(q+1) {
				l.Delete(q + 1)
				l.Delete(q)
				acked += 2
				continue
			}
			if err := l.Delete(q); err != nil && !isNotFound(err) {
				t.Fatal(err)
			}
			acked++
		}
	}
	st := l.State()
	interior := 0
	for _, s := range l.segs {
		interior += s.dels.len()
	}
	if st.Msgs > 22 || st.Segments > 2 || interior > 10 {
		t.Fatalf("state %+v, %d interior tombstones", st, interior)
	}
	for _, f := range segFiles(t, cfg.Dir, ".del") {
		if fileSize(t, f) > int64(4*compactDelEntries*delEntrySize) {
			t.Fatalf("%s has %d bytes: not compacted", f, fileSize(t, f))
		}
	}
	l, _ = reopen(t, l)
	if st2 := l.State(); st2 != st {
		t.Fatalf("after restart %+v\nwant %+v", st2, st)
	}
}

func TestSeqForTime(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 400
	cfg.IndexEvery = 100
	l, _ := mustOpen(t, cfg)
	// Times mostly rise, with one appender clock going back.
	times := []int64{10, 20, 20, 30, 25, 40, 50, 60, 55, 70, 80, 90, 100, 110, 120}
	for _, ts := range times {
		if _, err := l.Append([]byte("s"), nil, make([]byte, 20), ts); err != nil {
			t.Fatal(err)
		}
		l.Commit()
	}
	if l.State().Segments < 3 {
		t.Fatal("want several segments")
	}
	brute := func(t0 int64) uint64 {
		for i, ts := range times {
			if ts >= t0 && l.isLive(uint64(i+1)) {
				return uint64(i + 1)
			}
		}
		return l.State().LastSeq + 1
	}
	check := func() {
		t.Helper()
		for t0 := int64(0); t0 <= 130; t0 += 5 {
			if got, want := l.SeqForTime(t0), brute(t0); got != want {
				t.Fatalf("SeqForTime(%d) = %d, want %d", t0, got, want)
			}
		}
	}
	check()
	l.Delete(6)
	l.Delete(7)
	l.Delete(1)
	check()
	l, _ = reopen(t, l)
	check()
}

func TestForEachSubject(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 400
	cfg.IndexEvery = 64
	l, _ := mustOpen(t, cfg)
	// "rare" appears at 1 and 50 only; deleting 50 must find 1 again, far back.
	appendMsgs(t, l, 1, subj("rare"), 10)
	appendMsgs(t, l, 48, func(i int) string { return fmt.Sprintf("k.%d", i%4) }, 10)
	appendMsgs(t, l, 1, subj("rare"), 10)
	if s := subjects(l); s["rare"] != (subjCount{2, 50}) || s["k.3"] != (subjCount{12, 49}) {
		t.Fatalf("subjects %v", s)
	}
	if err := l.Delete(50); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(49); err != nil { // last k.3
		t.Fatal(err)
	}
	want := map[string]subjCount{"rare": {1, 1}, "k.0": {12, 46}, "k.1": {12, 47}, "k.2": {12, 48}, "k.3": {11, 45}}
	if s := subjects(l); fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("subjects %v\nwant %v", s, want)
	}
	l.Purge(0, "k.0")
	delete(want, "k.0")
	l.Delete(1)
	delete(want, "rare")
	if s := subjects(l); fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("subjects %v\nwant %v", s, want)
	}
	l, _ = reopen(t, l)
	if s := subjects(l); fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("after restart %v\nwant %v", s, want)
	}
	calls := 0
	l.ForEachSubject(func(string, uint64, uint64) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("did not stop: %d calls", calls)
	}
}

// TestDeadSegmentRemovedAtOpen: a segment whose messages are all tombstoned
// but whose file is still there (a crash before its removal) is removed by
// Open, from the middle of the log, without being taken for lost data then or
// at the next Open, and later deletes still persist.
func TestDeadSegmentRemovedAtOpen(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 500
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 60, subj("a"), 30)
	mid := l.segs[2]
	l.Delete(mid.base - 1) // an interior tombstone in the segment before
	l.Close()
	// Tombstones for all of mid, written to its own .del, as Delete does.
	var buf []byte
	for q := mid.base; q <= mid.last; q++ {
		buf = appendDelEntry(buf, q, q)
	}
	if err := os.WriteFile(mid.delPath(), buf, 0o644); err != nil {
		t.Fatal(err)
	}
	want := 60 - int(mid.count()) - 1
	l, rep := mustOpen(t, cfg)
	if _, err := os.Stat(mid.logPath); !os.IsNotExist(err) || len(rep.Corrupt) != 0 || l.State().Msgs != uint64(want) {
		t.Fatalf("segment file: %v, report %+v, state %+v", err, rep, l.State())
	}
	if err := l.Delete(mid.last + 2); err != nil {
		t.Fatal(err)
	}
	l, rep = reopen(t, l)
	if len(rep.Corrupt) != 0 || l.State().Msgs != uint64(want-1) {
		t.Fatalf("report %+v, state %+v", rep, l.State())
	}
	if _, _, err := l.Read(mid.last+2, nil); !isNotFound(err) {
		t.Fatalf("delete after Open lost: %v", err)
	}
}

func TestSetLimits(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 500
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 50, subj("a"), 20)
	if err := l.SetLimits(0, 0, 10, DiscardNew); err != nil || l.State().Msgs != 50 {
		t.Fatalf("DiscardNew must not remove: %v %+v", err, l.State())
	}
	if _, err := l.Append([]byte("a"), nil, nil, 0); !errors.Is(err, ErrFull) {
		t.Fatalf("Append = %v, want ErrFull", err)
	}
	if err := l.SetLimits(0, 0, 10, DiscardOld); err != nil {
		t.Fatal(err)
	}
	if st := l.State(); st.Msgs != 10 || st.FirstSeq != 41 {
		t.Fatalf("state %+v", st)
	}
}

// TestDeleteManyOneFsyncPerFile: under SyncAlways a batch of deletes costs one fsync
// per tombstone file (and the directory once for a new file), not one per message;
// absent sequences are skipped; the deletes survive a restart.
func TestDeleteManyOneFsyncPerFile(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sync = SyncAlways
	cfg.SegmentBytes = 1 << 20
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 100, subj("a"), 30)
	before := l.syncs.Load()
	n, err := l.DeleteMany([]uint64{3, 5, 7, 9, 11, 5, 1000})
	if err != nil || n != 5 {
		t.Fatalf("DeleteMany = %d, %v; want 5 deleted", n, err)
	}
	if got := l.syncs.Load() - before; got < 1 || got > 3 {
		t.Fatalf("%d fsyncs for one batch in one segment, want 1 (+2 the first time, for the new file and its directory entry)", got)
	}
	before = l.syncs.Load()
	if n, err := l.DeleteMany([]uint64{13, 15, 17}); err != nil || n != 3 {
		t.Fatalf("second batch = %d, %v", n, err)
	}
	if got := l.syncs.Load() - before; got != 1 {
		t.Fatalf("%d fsyncs for the second batch, want 1", got)
	}
	l, _ = reopen(t, l)
	if st := l.State(); st.Msgs != 92 {
		t.Fatalf("after restart %d messages, want 92", st.Msgs)
	}
	for _, seq := range []uint64{3, 5, 7, 9, 11, 13, 15, 17} {
		if _, _, err := l.Read(seq, nil); !isNotFound(err) {
			t.Fatalf("seq %d readable after delete: %v", seq, err)
		}
	}
}
