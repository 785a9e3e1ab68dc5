package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	l, rep := mustOpen(t, testConfig(t))
	if rep.Msgs != 0 || len(rep.Corrupt) != 0 {
		t.Fatalf("fresh log report %+v", rep)
	}
	if st := l.State(); st.FirstSeq != 1 || st.LastSeq != 0 || st.Msgs != 0 || st.Segments != 1 {
		t.Fatalf("fresh state %+v", st)
	}
	recs := []struct {
		subject, header, payload []byte
		ts                       int64
	}{
		{[]byte("a"), nil, nil, 5},
		{[]byte("a.b.c"), []byte("NATS/1.0\r\nk: v\r\n\r\n"), []byte("hello"), 6},
		{[]byte("big"), nil, bytes.Repeat([]byte("x"), 300_000), 7},
		{[]byte("a"), []byte{1}, []byte{}, 8},
	}
	for i, r := range recs {
		seq, err := l.Append(r.subject, r.header, r.payload, r.ts)
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("Append = %d, %v", seq, err)
		}
	}
	if _, _, err := l.Read(1, nil); !isNotFound(err) {
		t.Fatalf("uncommitted record readable: %v", err)
	}
	if got := readAll(t, l, 0); len(got) != 0 {
		t.Fatalf("reader sees %d uncommitted records", len(got))
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		var buf []byte
		for i, r := range recs {
			got, b, err := l.Read(uint64(i+1), buf)
			buf = b
			if err != nil || got.Time != r.ts || !bytes.Equal(got.Subject, r.subject) || !bytes.Equal(got.Header, r.header) || !bytes.Equal(got.Payload, r.payload) {
				t.Fatalf("Read(%d) = %+v, %v", i+1, got.Seq, err)
			}
		}
		all := readAll(t, l, 0)
		if len(all) != len(recs) {
			t.Fatalf("reader: %d records", len(all))
		}
		for i, got := range all {
			if !bytes.Equal(got.Payload, recs[i].payload) || !bytes.Equal(got.Header, recs[i].header) {
				t.Fatalf("reader record %d differs", i+1)
			}
		}
		st := l.State()
		var bytes uint64
		for _, r := range recs {
			bytes += uint64(recordSize(len(r.subject), len(r.header), len(r.payload)))
		}
		if st.Msgs != 4 || st.FirstSeq != 1 || st.LastSeq != 4 || st.FirstTime != 5 || st.LastTime != 8 || st.Bytes != bytes {
			t.Fatalf("state %+v", st)
		}
		if s := subjects(l); fmt.Sprint(s) != "map[a:{2 4} a.b.c:{1 2} big:{1 3}]" {
			t.Fatalf("subjects %v", s)
		}
	}
	check(l)
	for _, seq := range []uint64{0, 5, 1 << 40} {
		if _, _, err := l.Read(seq, nil); !isNotFound(err) {
			t.Fatalf("Read(%d) = %v", seq, err)
		}
	}
	l, rep = reopen(t, l)
	if rep.Msgs != 4 || rep.TruncatedBytes != 0 || len(rep.Corrupt) != 0 {
		t.Fatalf("reopen report %+v", rep)
	}
	check(l)
}

func TestRollbackReusesSequences(t *testing.T) {
	l, _ := mustOpen(t, testConfig(t))
	appendMsgs(t, l, 3, subj("a"), 4)
	for i := 0; i < 3; i++ {
		if seq, _ := l.Append([]byte("x"), nil, nil, 0); seq != 4+uint64(i) {
			t.Fatalf("seq %d", seq)
		}
	}
	l.Rollback()
	if err := l.Commit(); err != nil { // nothing pending
		t.Fatal(err)
	}
	if seq, _ := l.Append([]byte("y"), nil, nil, 0); seq != 4 {
		t.Fatalf("after rollback seq %d, want 4", seq)
	}
	l.Commit()
	if st := l.State(); st.LastSeq != 4 || st.Msgs != 4 {
		t.Fatalf("state %+v", st)
	}
	if s := subjects(l); s["x"].msgs != 0 || s["y"].msgs != 1 {
		t.Fatalf("subjects %v", s)
	}
}

func TestTooLargeAndClosed(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 1000
	l, _ := mustOpen(t, cfg)
	if _, err := l.Append([]byte("s"), nil, make([]byte, 1000), 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	if _, err := l.Append(make([]byte, 70000), nil, nil, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized subject: %v", err)
	}
	// Exactly SegmentBytes fits, alone in its segment.
	if _, err := l.Append([]byte("s"), nil, make([]byte, 1000-recHdrSize-1), 0); err != nil {
		t.Fatal(err)
	}
	appendMsgs(t, l, 2, subj("t"), 10)
	if st := l.State(); st.Segments != 2 {
		t.Fatalf("segments %d", st.Segments)
	}
	r := l.NewReader(0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("s"), nil, nil, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := l.Commit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
	if _, _, err := l.Read(1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := l.Delete(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Delete after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRemove(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 3, subj("a"), 4)
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Fatalf("directory still there: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, _, err := Open(Config{}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, _, err := Open(Config{Dir: file}); err == nil {
		t.Fatal("Open on a file succeeded")
	}
}

// TestSegmentRoll: batches that cross SegmentBytes are split over segments
// (one write each), files are named by their first sequence, and everything
// reads back, before and after a restart.
func TestSegmentRoll(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 1000
	l, _ := mustOpen(t, cfg)
	var ms []msg
	for i := 0; i < 5; i++ {
		ms = append(ms, appendMsgs(t, l, 37, func(j int) string { return fmt.Sprintf("s.%d", j%3) }, 20+i*10)...)
	}
	files := segFiles(t, cfg.Dir, ".log")
	if len(files) != l.State().Segments || len(files) < 10 {
		t.Fatalf("%d files, state %+v", len(files), l.State())
	}
	next := uint64(1)
	for _, f := range files {
		base, _, _ := parseSegName(filepath.Base(f))
		if base != next {
			t.Fatalf("segment %s, want base %d", f, next)
		}
		next += uint64(len(recordOffsets(t, f)))
		if fileSize(t, f) > cfg.SegmentBytes {
			t.Fatalf("%s exceeds SegmentBytes", f)
		}
	}
	for _, m := range ms {
		checkRead(t, l, m)
	}
	l, _ = reopen(t, l)
	for _, m := range ms {
		checkRead(t, l, m)
	}
	got := readAll(t, l, 0)
	if len(got) != len(ms) {
		t.Fatalf("reader %d records, want %d", len(got), len(ms))
	}
	for i, r := range got {
		if r.Seq != ms[i].seq || !bytes.Equal(r.Payload, ms[i].payload) {
			t.Fatalf("reader record %d", i)
		}
	}
	// Start in the middle of a segment and exactly at a boundary.
	b2 := l.segs[2].base
	for _, from := range []uint64{b2, b2 - 1, b2 + 1, 0, 1, uint64(len(ms)), uint64(len(ms)) + 1} {
		got := readAll(t, l, from)
		want := max(int64(len(ms))-int64(max(from, 1))+1, 0)
		if int64(len(got)) != want || (want > 0 && got[0].Seq != max(from, 1)) {
			t.Fatalf("reader from %d: %d records", from, len(got))
		}
	}
}

// TestReaderFollowsWriter: a reader at the end gets io.EOF, then the records
// committed later; skips deleted ones; and survives the segment it is in being
// removed.
func TestReaderFollowsWriter(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 500
	l, _ := mustOpen(t, cfg)
	r := l.NewReader(0)
	defer r.Close()
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("empty log: %v", err)
	}
	appendMsgs(t, l, 3, subj("a"), 10)
	for want := uint64(1); want <= 3; want++ {
		if rec, err := r.Next(); err != nil || rec.Seq != want {
			t.Fatalf("Next = %d, %v", rec.Seq, err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("at end: %v", err)
	}
	appendMsgs(t, l, 30, subj("a"), 10)
	l.Delete(5)
	l.Delete(6)
	if rec, _ := r.Next(); rec.Seq != 4 {
		t.Fatalf("got %d", rec.Seq)
	}
	if rec, _ := r.Next(); rec.Seq != 7 {
		t.Fatalf("deleted records not skipped: %d", rec.Seq)
	}
	// Purge past the reader: it continues at the new first message.
	if _, err := l.Purge(20, ""); err != nil {
		t.Fatal(err)
	}
	if rec, err := r.Next(); err != nil || rec.Seq != 20 {
		t.Fatalf("after purge: %d, %v", rec.Seq, err)
	}
}

// TestConcurrentReaders runs readers, Read, State, SeqForTime and
// ForEachSubject while the writer appends, deletes and purges (go test -race).
func TestConcurrentReaders(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 4096
	cfg.IndexEvery = 256
	l, _ := mustOpen(t, cfg)
	const total = 3000
	done := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := l.NewReader(0)
			defer r.Close()
			var last uint64
			for {
				rec, err := r.Next()
				if err == io.EOF {
					select {
					case <-done:
						return
					default:
						continue
					}
				}
				if err != nil {
					errc <- err
					return
				}
				if rec.Seq <= last || !bytes.Equal(rec.Payload, payloadFor(rec.Seq, len(rec.Payload))) {
					errc <- fmt.Errorf("reader got seq %d after %d, or a bad payload", rec.Seq, last)
					return
				}
				last = rec.Seq
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var buf []byte
		for {
			select {
			case <-done:
				return
			default:
			}
			st := l.State()
			if st.LastSeq >= st.FirstSeq {
				seq := st.FirstSeq + (st.LastSeq-st.FirstSeq)/2
				rec, b, err := l.Read(seq, buf)
				buf = b
				if err == nil && !bytes.Equal(rec.Payload, payloadFor(seq, len(rec.Payload))) {
					errc <- fmt.Errorf("Read(%d) bad payload", seq)
					return
				}
				if err != nil && !isNotFound(err) {
					errc <- err
					return
				}
			}
			l.SeqForTime(st.FirstTime + 1)
			l.ForEachSubject(func(string, uint64, uint64) bool { return true })
		}
	}()
	for i := 0; i < total; i += 10 {
		appendMsgs(t, l, 10, func(j int) string { return fmt.Sprintf("s.%d", j%4) }, 30)
		if i%50 == 0 {
			l.Delete(uint64(i + 3))
		}
		if i%700 == 0 {
			if _, err := l.Purge(uint64(i/2), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
