package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sparseLog writes n records of 200 bytes in small segments, compressed or
// not, and deletes every record whose index keep does not want; it returns the
// log and the records left.
func sparseLog(t *testing.T, compress bool, n int, keep func(i int) bool) (*Log, map[uint64][]byte) {
	t.Helper()
	cfg := testConfig(t)
	cfg.SegmentBytes = 8 << 10
	cfg.IndexEvery = 512
	if compress {
		cfg.Compression = CompressS2
	}
	l, _ := mustOpen(t, cfg)
	live := map[uint64][]byte{}
	var dead []uint64
	for i := range n {
		p := compressible(uint64(i), 200)
		if !compress {
			p = payloadFor(uint64(i), 200)
		}
		seq, err := l.Append([]byte(fmt.Sprintf("s.%d", i%5)), []byte("k:x"), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if keep(i) {
			live[seq] = p
		} else {
			dead = append(dead, seq)
		}
		if i%10 == 9 {
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteMany(dead); err != nil {
		t.Fatal(err)
	}
	return l, live
}

// checkLive reads every record of the log with Read and a Reader, and compares
// them with live; the dead between give ErrNotFound.
func checkLive(t *testing.T, l *Log, live map[uint64][]byte) {
	t.Helper()
	st := l.State()
	var buf []byte
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		rec, b, err := l.Read(seq, buf)
		buf = b
		want, ok := live[seq]
		switch {
		case ok && (err != nil || string(rec.Payload) != string(want)):
			t.Fatalf("Read(%d): %d payload bytes, %v", seq, len(rec.Payload), err)
		case !ok && !errors.Is(err, ErrNotFound):
			t.Fatalf("Read(%d) of a deleted record: %v", seq, err)
		}
	}
	recs := readAll(t, l, 1)
	if len(recs) != len(live) || st.Msgs != uint64(len(live)) {
		t.Fatalf("a reader found %d records, the state says %d, want %d", len(recs), st.Msgs, len(live))
	}
	for _, r := range recs {
		if string(r.Payload) != string(live[r.Seq]) {
			t.Fatalf("reader: record %d differs", r.Seq)
		}
	}
}

// reopenCleaned reopens a cleaned log, checks that it finds live, no damage,
// and nothing more to clean, and returns it.
func reopenCleaned(t *testing.T, l *Log, live map[uint64][]byte) *Log {
	t.Helper()
	l, rep := reopen(t, l)
	if len(rep.Corrupt) > 0 || rep.Msgs != uint64(len(live)) {
		t.Fatalf("reopen: %+v", rep)
	}
	checkLive(t, l, live)
	if cs, err := l.Clean(0.5, 0); err != nil || cs.Segments != 0 {
		t.Fatalf("cleaning again: %+v %v", cs, err)
	}
	return l
}

// segmentBytes is the size of the log's segment files.
func segmentBytes(t testing.TB, l *Log) int64 {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(l.cfg.Dir, "*.log"))
	var n int64
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// TestCleanKeepsLiveRecords: cleaning segments where most records were
// deleted shrinks their files to about their live records, keeps every live
// record readable by Read and Readers with the same sequences and State,
// survives a reopen (recovery reads the holes), does nothing the second time,
// and cleans a cleaned segment again once more of it is deleted.
func TestCleanKeepsLiveRecords(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			l, live := sparseLog(t, compress, 2000, func(i int) bool { return i%10 == 0 || i >= 1900 })
			before, st := segmentBytes(t, l), l.State()
			cs, err := l.Clean(0.5, 0)
			if err != nil {
				t.Fatal(err)
			}
			after := segmentBytes(t, l)
			t.Logf("cleaned %d segments: %d → %d bytes; log %d → %d bytes", cs.Segments, cs.Before, cs.After, before, after)
			// Nine records in ten go, plain or packed into blocks again.
			if cs.Segments == 0 || after >= before/3 || cs.Before-cs.After != before-after {
				t.Fatalf("clean: %+v, files %d → %d bytes", cs, before, after)
			}
			if got := l.State(); got.Msgs != st.Msgs || got.Bytes != st.Bytes || got.FirstSeq != st.FirstSeq || got.LastSeq != st.LastSeq {
				t.Fatalf("state %+v after cleaning, %+v before", got, st)
			}
			checkLive(t, l, live)
			// Times still find records.
			if seq := l.SeqForTime(0); seq > st.FirstSeq {
				t.Fatalf("SeqForTime(0) = %d, first %d", seq, st.FirstSeq)
			}

			l = reopenCleaned(t, l, live)

			// Half the survivors of the cleaned segments go: clean again.
			var more []uint64
			for seq := range live {
				if seq%20 == 1 && seq < 1900 {
					more = append(more, seq)
					delete(live, seq)
				}
			}
			slices.Sort(more)
			if _, err := l.DeleteMany(more); err != nil {
				t.Fatal(err)
			}
			if cs, err := l.Clean(0.04, 0); err != nil || cs.Segments == 0 || cs.After > cs.Before {
				t.Fatalf("cleaning a cleaned log: %+v %v", cs, err)
			}
			checkLive(t, l, live)
			l, rep := reopen(t, l)
			if len(rep.Corrupt) > 0 {
				t.Fatalf("reopen: %+v", rep.Corrupt)
			}
			checkLive(t, l, live)
		})
	}
}

// TestCleanAside: rewrites beside the writer clean what Clean would, one
// segment a call, while the writer appends and deletes between the calls and
// readers read; a rewrite that the writer's own changes void (a cut into its
// segment) is dropped, and one still running at Close is stopped and its file
// removed.
func TestCleanAside(t *testing.T) {
	l, live := sparseLog(t, true, 3000, func(i int) bool { return i%10 == 0 || i >= 2900 })
	before := segmentBytes(t, l)
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		errs = make(chan error, 1)
	)
	wg.Add(1)
	go func() { // a reader through it all: the records it finds are intact
		defer wg.Done()
		for !stop.Load() {
			r := l.NewReader(1)
			for {
				rec, err := r.Next()
				if err != nil {
					break
				}
				if p, ok := live[rec.Seq]; ok && string(p) != string(rec.Payload) {
					r.Close()
					errs <- fmt.Errorf("reader: record %d differs", rec.Seq)
					return
				}
			}
			r.Close()
		}
	}()
	var got CleanStats
	for calls := 0; calls < 100000; calls++ {
		cs, err := l.CleanAside(0.5, nil)
		if err != nil {
			t.Fatal(err)
		}
		got.add(cs)
		if !l.Cleaning() {
			break // nothing left to rewrite
		}
		// The writer goes on meanwhile: appends to the head, which no
		// rewrite touches, and commits.
		if _, err := l.Append([]byte("s.head"), nil, []byte("more"), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if rest, err := l.Clean(0.5, 0); err != nil || got.Segments < 15 || rest.Segments != 0 {
		t.Fatalf("beside the writer: %+v; Clean then found %+v to do (%v)", got, rest, err)
	}
	if after := segmentBytes(t, l); before-after < got.Before-got.After-int64(l.State().Msgs)*100 {
		t.Fatalf("files %d → %d bytes, cleaning saved %d", before, after, got.Before-got.After)
	}
	if tmps, _ := filepath.Glob(filepath.Join(l.cfg.Dir, "*.tmp")); len(tmps) > 0 {
		t.Fatalf("left behind: %v", tmps)
	}
	rs := readAll(t, l, 1)
	n := 0
	for _, r := range rs {
		if p, ok := live[r.Seq]; ok {
			if string(r.Payload) != string(p) {
				t.Fatalf("record %d differs", r.Seq)
			}
			n++
		}
	}
	if n != len(live) {
		t.Fatalf("%d of %d records after cleaning", n, len(live))
	}

	// A cut into the segment being rewritten voids the rewrite.
	l2, live2 := sparseLog(t, false, 600, func(i int) bool { return i%10 == 0 })
	if _, err := l2.CleanAside(0.5, nil); err != nil || !l2.Cleaning() {
		t.Fatalf("no rewrite started: %v", err)
	}
	s0 := l2.job.c.srcs[0].s
	<-l2.job.done
	cut := s0.base + 5 // inside the first segment, where the rewrite is
	if err := l2.TruncateAfter(cut); err != nil {
		t.Fatal(err)
	}
	if cs, err := l2.FinishCleaning(); err != nil || cs.Segments != 0 || l2.Cleaning() {
		t.Fatalf("a rewrite voided by a cut: %+v %v", cs, err)
	}
	for seq := range live2 {
		if seq > cut {
			delete(live2, seq)
		}
	}
	checkLive(t, l2, live2)
	if tmps, _ := filepath.Glob(filepath.Join(l2.cfg.Dir, "*.tmp")); len(tmps) > 0 {
		t.Fatalf("left behind: %v", tmps)
	}

	// Close stops a rewrite under way and removes its file.
	l3, live3 := sparseLog(t, true, 3000, func(i int) bool { return i%10 == 0 })
	if _, err := l3.CleanAside(0.5, nil); err != nil || !l3.Cleaning() {
		t.Fatalf("no rewrite started: %v", err)
	}
	l3, rep := reopen(t, l3)
	if len(rep.Corrupt) > 0 || l3.Cleaning() {
		t.Fatalf("reopen: %+v", rep)
	}
	if tmps, _ := filepath.Glob(filepath.Join(l3.cfg.Dir, "*.tmp")); len(tmps) > 0 {
		t.Fatalf("left behind by Close: %v", tmps)
	}
	checkLive(t, l3, live3)
}

// TestCleanBesideReaders: readers that Read and iterate while segments are
// rewritten under them always find every live record intact.
func TestCleanBesideReaders(t *testing.T) {
	l, live := sparseLog(t, true, 3000, func(i int) bool { return i%7 == 0 || i >= 2900 })
	var seqs []uint64
	for seq := range live {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		errs = make(chan error, 4)
	)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := 0; !stop.Load(); i++ {
				if g == 0 {
					seq := seqs[(i*31)%len(seqs)]
					rec, b, err := l.Read(seq, buf)
					buf = b
					if err != nil || string(rec.Payload) != string(live[seq]) {
						errs <- fmt.Errorf("Read(%d): %v", seq, err)
						return
					}
					continue
				}
				r := l.NewReader(1)
				n := 0
				for {
					rec, err := r.Next()
					if err != nil {
						r.Close()
						if n != len(live) {
							errs <- fmt.Errorf("reader found %d of %d records, then %v", n, len(live), err)
							return
						}
						break
					}
					if string(rec.Payload) != string(live[rec.Seq]) {
						r.Close()
						errs <- fmt.Errorf("reader: record %d differs", rec.Seq)
						return
					}
					n++
				}
			}
		}()
	}
	total := 0
	for round := 0; round < 20; round++ {
		// Each round deletes nothing new, so make the segments look dirty
		// again: what Clean counts as holes already is forgotten.
		for _, s := range l.segs {
			s.holed = 0
		}
		cs, err := l.Clean(0.1, 0)
		if err != nil {
			t.Fatal(err)
		}
		total += cs.Segments
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if total < 20 {
		t.Fatalf("%d segments cleaned in all", total)
	}
}

// TestCleanedHoleWithoutTombstones: a hole stands for deleted records; when
// the tombstones that said so are lost (a .del file removed), Open reports
// those sequences as damage rather than take them for live or drop them
// silently. A clean left half done (its .tmp) is removed by Open.
func TestCleanedHoleWithoutTombstones(t *testing.T) {
	l, live := sparseLog(t, false, 600, func(i int) bool { return i%10 == 0 || i >= 500 })
	if cs, err := l.Clean(0.5, 0); err != nil || cs.Segments == 0 {
		t.Fatalf("clean: %+v %v", cs, err)
	}
	s := l.segs[1]
	delPath, logPath := s.delPath(), s.logPath
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath+".clean.tmp", []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(delPath); err != nil {
		t.Fatal(err)
	}
	l, rep := mustOpen(t, l.cfg)
	if len(rep.Corrupt) == 0 || !errors.Is(rep.Corrupt[0].Err, errHoleLive) {
		t.Fatalf("report: %+v", rep.Corrupt)
	}
	if _, err := os.Stat(logPath + ".clean.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-done clean's file is still there: %v", err)
	}
	// The records of other segments are all there.
	for seq, p := range live {
		if seq >= l.segs[2].base {
			rec, _, err := l.Read(seq, nil)
			if err != nil || string(rec.Payload) != string(p) {
				t.Fatalf("Read(%d): %v", seq, err)
			}
		}
	}
}

// TestCleanSettlesOnBlocksKeptWhole: a cleaned segment, whatever it kept
// whole (blocks mostly alive, or all of it when repacking would not make it
// smaller), counts as clean until more of it dies, rather than being rewritten
// again and again.
func TestCleanSettlesOnBlocksKeptWhole(t *testing.T) {
	l, live := sparseLog(t, true, 2000, func(i int) bool { return i%10 < 4 || i >= 1900 })
	cs, err := l.Clean(0.5, 0)
	if err != nil || cs.Segments == 0 {
		t.Fatalf("first clean: %+v %v", cs, err)
	}
	if cs, err := l.Clean(0.5, 0); err != nil || cs.Segments != 0 {
		t.Fatalf("second clean rewrote again: %+v %v", cs, err)
	}
	checkLive(t, l, live)
}

// bySubject keys every record by its subject, as a compacted stream keys a
// message without a Tern-Key header.
func bySubject(_, _ []byte) Keyed { return Keyed{Space: KeyedBySubject} }

// BenchmarkCompactedAppend is the write path of a compacted log: each record's
// key hashed and its superseded predecessor queued, over 10,000 keys, beside
// the same log without keys; then what compacting and cleaning cost per
// record removed.
func BenchmarkCompactedAppend(b *testing.B) {
	subjects := make([][]byte, 10000)
	for i := range subjects {
		subjects[i] = []byte(fmt.Sprintf("profiles.user-%d", i))
	}
	payload := make([]byte, 100)
	fill := func(b *testing.B, l *Log, n int) {
		for i := 0; i < n; i++ {
			if _, err := l.Append(subjects[i%len(subjects)], nil, payload, 1); err != nil {
				b.Fatal(err)
			}
			if i%64 == 63 {
				if err := l.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := l.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%v", keyed), func(b *testing.B) {
			l := benchLog(b)
			if keyed {
				if err := l.SetKeys(bySubject); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			fill(b, l, b.N)
		})
	}
	b.Run("compact+clean", func(b *testing.B) {
		l := benchLog(b)
		if err := l.SetKeys(bySubject); err != nil {
			b.Fatal(err)
		}
		fill(b, l, max(b.N, 100000))
		head := l.segs[len(l.segs)-1].base
		b.ReportAllocs()
		b.ResetTimer()
		removed, err := l.Compact(head, head)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Clean(0.5, 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(removed, 1)), "ns/removed")
	})
}

// TestSegmentAgeRolls: with SegmentAge, the first append after the active
// segment's first record is that old starts a new segment, however small the
// active one is, and the age counts from a reopened log's first record too.
func TestSegmentAgeRolls(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t)
	cfg.Now = clk.Now
	cfg.SegmentAge = time.Minute
	l, _ := mustOpen(t, cfg)
	put := func() {
		t.Helper()
		if _, err := l.Append([]byte("a"), nil, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put()
	clk.Add(30 * time.Second)
	put()
	if len(l.segs) != 1 {
		t.Fatalf("%d segments after 30 s, want 1", len(l.segs))
	}
	clk.Add(31 * time.Second)
	put()
	if len(l.segs) != 2 || l.segs[1].base != 3 {
		t.Fatalf("after a minute: %d segments, the last from %d", len(l.segs), l.segs[len(l.segs)-1].base)
	}
	l, _ = reopen(t, l)
	clk.Add(59 * time.Second)
	put()
	if len(l.segs) != 2 {
		t.Fatalf("%d segments before the second one's minute", len(l.segs))
	}
	clk.Add(2 * time.Second)
	l.SetSegmentAge(0)
	put()
	if len(l.segs) != 2 {
		t.Fatalf("rolled by age with SegmentAge 0")
	}
	l.SetSegmentAge(time.Minute)
	put()
	if len(l.segs) != 3 || l.segs[2].base != 6 {
		t.Fatalf("after reopening and a minute: %d segments", len(l.segs))
	}
	if got := readAll(t, l, 1); len(got) != 6 {
		t.Fatalf("%d records read, want 6", len(got))
	}
}

// BenchmarkCleanHoldsWriter: how long the writer is held by a call that
// cleans, with Clean (the whole rewrite) and with CleanAside (the swap alone),
// on 8 MiB segments nine tenths of whose 1 KiB records are deleted (the first
// rewrite merges the three sealed ones), reported as max-writer-µs: the
// longest call.
func BenchmarkCleanHoldsWriter(b *testing.B) {
	for _, aside := range []bool{false, true} {
		b.Run(fmt.Sprintf("aside=%v", aside), func(b *testing.B) {
			cfg := Config{Dir: b.TempDir(), Name: "bench", Sync: SyncNever, SegmentBytes: 8 << 20}
			l, _, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			payload := make([]byte, 1024)
			const segments = 4
			var dead []uint64
			for i := 0; i < segments*8<<10; i++ {
				seq, err := l.Append([]byte("s"), nil, payload, 0)
				if err != nil {
					b.Fatal(err)
				}
				if i%10 != 0 {
					dead = append(dead, seq)
				}
				if i%64 == 63 {
					if err := l.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := l.Commit(); err != nil {
				b.Fatal(err)
			}
			if _, err := l.DeleteMany(dead); err != nil {
				b.Fatal(err)
			}
			var hold time.Duration
			cleaned := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, s := range l.segs {
					s.holed = 0 // dirty again for the next round
				}
				for n := 0; ; n++ {
					start := time.Now()
					var cs CleanStats
					if aside {
						cs, err = l.CleanAside(0.5, nil)
					} else {
						cs, err = l.Clean(0.5, 1)
					}
					hold = max(hold, time.Since(start))
					if err != nil {
						b.Fatal(err)
					}
					cleaned += cs.Segments
					if !aside && cs.Segments == 0 || aside && !l.Cleaning() && n > 0 {
						break
					}
					if aside {
						time.Sleep(time.Millisecond)
					}
				}
			}
			b.StopTimer()
			if cleaned == 0 {
				b.Fatal("nothing cleaned")
			}
			b.ReportMetric(float64(hold.Microseconds()), "max-writer-µs")
		})
	}
}

// TestCleanMergesSegments: cleaning a log whose segments are mostly dead
// merges the small ones it leaves into few, as Kafka's cleaner groups them,
// across a segment removed whole between them: the live records keep their
// sequences and contents, through a reopen too; a merge whose other files a
// crash left behind (the tombstones of their sequences still only in their own
// .del files) is sorted out by Open; and a record deleted after the merge
// stays deleted.
func TestCleanMergesSegments(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			l, live := sparseLog(t, compress, 4000, func(i int) bool { return i%20 == 0 || i >= 3950 })
			segsBefore := len(l.segs)
			gap := l.segs[segsBefore/2]
			var gone []uint64
			for seq := gap.base; seq <= gap.last; seq++ {
				delete(live, seq)
				gone = append(gone, seq)
			}
			if _, err := l.DeleteMany(gone); err != nil {
				t.Fatal(err)
			}
			before := segmentBytes(t, l)

			// What a crash right after a merge's rename leaves: the other
			// segments' files, and the first one's .del as it was.
			dir := t.TempDir()
			for _, s := range l.segs[:len(l.segs)-1] {
				for _, x := range []string{".log", ".idx", ".del"} {
					if b, err := os.ReadFile(filepath.Join(l.cfg.Dir, segName(s.base)+x)); err == nil {
						os.WriteFile(filepath.Join(dir, segName(s.base)+x), b, 0o644)
					}
				}
			}

			cs, err := l.Clean(0.5, 0)
			if err != nil {
				t.Fatal(err)
			}
			after := segmentBytes(t, l)
			t.Logf("%d segments → %d; %d rewritten, %d → %d bytes", segsBefore, len(l.segs), cs.Segments, before, after)
			// One record in twenty lives: the segments they are left in are
			// merged into about as many as their bytes fill, and the active one.
			if int64(len(l.segs)) > after/l.cfg.SegmentBytes+3 || after >= before/5 {
				t.Fatalf("after cleaning: %d segments (were %d), %d bytes (were %d)", len(l.segs), segsBefore, after, before)
			}
			if i := l.segIndex(gap.base); l.segs[i].base >= gap.base || l.segs[i].last <= gap.last {
				t.Fatalf("no segment merged across the gap %d..%d: %d..%d", gap.base, gap.last, l.segs[i].base, l.segs[i].last)
			}
			merged := *l.segs[0]
			checkLive(t, l, live)
			l = reopenCleaned(t, l, live)
			cfg := l.cfg
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			ents, _ := os.ReadDir(dir)
			var leftovers []string
			for _, e := range ents {
				base, ext, _ := parseSegName(e.Name())
				if (base > merged.base && base <= merged.last) || (base == merged.base && ext == ".del") {
					b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
					if err := os.WriteFile(filepath.Join(cfg.Dir, e.Name()), b, 0o644); err != nil {
						t.Fatal(err)
					}
					if base != merged.base {
						leftovers = append(leftovers, e.Name())
					}
				}
			}
			if len(leftovers) < 6 {
				t.Fatalf("the crash left %d files of merged segments: %v", len(leftovers), leftovers)
			}
			l, rep := mustOpen(t, cfg)
			if len(rep.Corrupt) > 0 || rep.Msgs != uint64(len(live)) {
				t.Fatalf("reopen after the crash: %+v", rep)
			}
			checkLive(t, l, live)
			for _, name := range leftovers {
				if _, err := os.Stat(filepath.Join(cfg.Dir, name)); err == nil {
					t.Fatalf("%s, of a merged segment, is still there after Open", name)
				}
			}
			if l.segs[0].last != merged.last {
				t.Fatalf("after the crash the first segment is %d..%d, want %d..%d", l.segs[0].base, l.segs[0].last, merged.base, merged.last)
			}

			// A record of the merged segment deleted now stays deleted.
			var one uint64
			for seq := range live {
				if seq > merged.base && seq < merged.last {
					one = seq
					break
				}
			}
			if _, err := l.DeleteMany([]uint64{one}); err != nil || one == 0 {
				t.Fatalf("delete %d: %v", one, err)
			}
			delete(live, one)
			l, rep = reopen(t, l)
			defer l.Close()
			if len(rep.Corrupt) > 0 || rep.Msgs != uint64(len(live)) {
				t.Fatalf("reopen after a delete: %+v", rep)
			}
			checkLive(t, l, live)
		})
	}
}
