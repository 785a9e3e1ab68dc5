package store

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/klauspost/compress/s2"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recordOffsets lists the offset of every record in a clean segment file.
func recordOffsets(t testing.TB, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := 0; off < len(b); {
		n, err := peekRecord(b[off:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, off, err)
		}
		offs = append(offs, int64(off))
		off += n
	}
	return offs
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x55
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTornTailEveryOffset cuts the last segment at every byte of its last
// record: recovery keeps every earlier record, reports the cut bytes, and the
// next append reuses the lost sequence.
func TestTornTailEveryOffset(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 1024
	l, _ := mustOpen(t, cfg)
	ms := appendMsgs(t, l, 20, func(i int) string { return fmt.Sprintf("s.%d", i%3) }, 60)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, cfg.Dir, ".log")
	lastSeg := segs[len(segs)-1]
	offs := recordOffsets(t, lastSeg)
	start := offs[len(offs)-1]
	full := fileSize(t, lastSeg)
	for cut := start; cut < full; cut++ {
		dir := filepath.Join(t.TempDir(), "cut")
		copyDir(t, cfg.Dir, dir)
		if err := os.Truncate(filepath.Join(dir, filepath.Base(lastSeg)), cut); err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Dir = dir
		l, rep, err := Open(c)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if rep.TruncatedBytes != cut-start || len(rep.Corrupt) != 0 || rep.Msgs != 19 {
			t.Fatalf("cut %d: report %+v", cut, rep)
		}
		if st := l.State(); st.LastSeq != 19 || st.Msgs != 19 {
			t.Fatalf("cut %d: state %+v", cut, st)
		}
		for _, m := range ms[:19] {
			checkRead(t, l, m)
		}
		seq, err := l.Append([]byte("new"), nil, []byte("x"), 0)
		if err != nil || seq != 20 {
			t.Fatalf("cut %d: Append = %d, %v", cut, seq, err)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		l.Close()
		l, rep, err = Open(c)
		if err != nil || rep.TruncatedBytes != 0 || rep.Msgs != 20 {
			t.Fatalf("cut %d: reopen %+v, %v", cut, rep, err)
		}
		l.Close()
	}
}

// TestTornTailGarbage: a tail of zeros or random bytes (a file extended by a
// crash before its data reached the disk) is cut too.
func TestTornTailGarbage(t *testing.T) {
	for _, tail := range [][]byte{make([]byte, 4096), []byte("\xFETN\x01garbage"), bytes.Repeat([]byte{0xFF}, 100)} {
		cfg := testConfig(t)
		l, _ := mustOpen(t, cfg)
		ms := appendMsgs(t, l, 5, subj("a"), 10)
		l.Close()
		path := segFiles(t, cfg.Dir, ".log")[0]
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.Write(tail)
		f.Close()
		l, rep := mustOpen(t, cfg)
		if rep.TruncatedBytes != int64(len(tail)) || len(rep.Corrupt) != 0 {
			t.Fatalf("report %+v", rep)
		}
		for _, m := range ms {
			checkRead(t, l, m)
		}
	}
}

func checkCorruption(t *testing.T, err error, name, file string, seq uint64) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	var c *Corruption
	if !errors.As(err, &c) {
		t.Fatalf("err %v is not a *Corruption", err)
	}
	if c.FirstSeq > seq || c.LastSeq < seq || c.Segment != file || c.Log != name {
		t.Fatalf("corruption %+v does not name seq %d in %s", c, seq, file)
	}
	msg := err.Error()
	if !strings.Contains(msg, name) || !strings.Contains(msg, file) || !strings.Contains(msg, fmt.Sprint(seq)) {
		t.Fatalf("message %q lacks log, file or seq", msg)
	}
}

// TestFlippedByteSealedSegment damages one record of a sealed segment in each
// of its fields: Open reports it (log, file, seq), Read of that seq fails with
// ErrCorrupt, every other record stays readable, and readers step over it.
func TestFlippedByteSealedSegment(t *testing.T) {
	fields := []struct {
		name string
		at   func(n int64) int64 // offset within the record of length n
	}{
		{"magic", func(int64) int64 { return 1 }},
		{"crc", func(int64) int64 { return offCRC }},
		{"length", func(int64) int64 { return offLen }},
		{"length high byte", func(int64) int64 { return offLen + 3 }},
		{"seq", func(int64) int64 { return offSeq }},
		{"time", func(int64) int64 { return offTime + 2 }},
		{"subject length", func(int64) int64 { return offSubj }},
		{"subject", func(int64) int64 { return recHdrSize }},
		{"payload", func(n int64) int64 { return n - 1 }},
	}
	for _, pos := range []string{"middle", "first", "last"} {
		for _, fl := range fields {
			t.Run(pos+"/"+fl.name, func(t *testing.T) {
				cfg := testConfig(t)
				cfg.SegmentBytes = 1024
				cfg.IndexEvery = 256
				l, _ := mustOpen(t, cfg)
				ms := appendMsgs(t, l, 40, func(i int) string { return fmt.Sprintf("s.%d", i%4) }, 50)
				want := subjects(l)
				l.Close()
				seg := segFiles(t, cfg.Dir, ".log")[1] // sealed
				offs := recordOffsets(t, seg)
				k := map[string]int{"middle": len(offs) / 2, "first": 0, "last": len(offs) - 1}[pos]
				end := fileSize(t, seg)
				if k+1 < len(offs) {
					end = offs[k+1]
				}
				flipByte(t, seg, offs[k]+fl.at(end-offs[k]))
				base, _, _ := parseSegName(filepath.Base(seg))
				bad := base + uint64(k)

				l, rep := mustOpen(t, cfg)
				if len(rep.Corrupt) != 1 || rep.TruncatedBytes != 0 {
					t.Fatalf("report %+v", rep)
				}
				c := rep.Corrupt[0]
				if c.FirstSeq != bad || c.LastSeq != bad || c.Segment != seg || c.Offset != offs[k] {
					t.Fatalf("corruption %+v, want seq %d at %s:%d", c, bad, seg, offs[k])
				}
				checkCorruption(t, &c, cfg.Name, seg, bad)
				_, _, err := l.Read(bad, nil)
				checkCorruption(t, err, cfg.Name, seg, bad)
				for _, m := range ms {
					if m.seq != bad {
						checkRead(t, l, m)
					}
				}
				// A reader reports the damage once and goes on.
				r := l.NewReader(0)
				var got []uint64
				var errs int
				for {
					rec, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						checkCorruption(t, err, cfg.Name, seg, bad)
						errs++
						continue
					}
					got = append(got, rec.Seq)
				}
				r.Close()
				if errs != 1 || len(got) != 39 {
					t.Fatalf("reader: %d errors, %d records", errs, len(got))
				}
				// Per-subject counts only lose the damaged message.
				w := want[ms[bad-1].subject]
				w.msgs--
				want[ms[bad-1].subject] = w
				if got := subjects(l); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("subjects %v, want %v", got, want)
				}
				if st := l.State(); st.Msgs != 40 {
					t.Fatalf("state %+v: the damaged message still counts until removed", st)
				}
				// Deleting it works, and it stays reported until then.
				if err := l.Delete(bad); err != nil {
					t.Fatal(err)
				}
				l, rep = reopen(t, l)
				if len(rep.Corrupt) != 1 {
					t.Fatalf("reopen report %+v", rep)
				}
				if _, _, err := l.Read(bad, nil); !isNotFound(err) {
					t.Fatalf("Read of deleted damaged seq: %v", err)
				}
				if st := l.State(); st.Msgs != 39 {
					t.Fatalf("state %+v", st)
				}
			})
		}
	}
}

// TestCorruptMiddleOfLastSegment: damage followed by intact records in the
// active segment is reported, not truncated; the later records stay.
func TestCorruptMiddleOfLastSegment(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	ms := appendMsgs(t, l, 10, subj("a"), 30)
	l.Close()
	seg := segFiles(t, cfg.Dir, ".log")[0]
	offs := recordOffsets(t, seg)
	flipByte(t, seg, offs[4]+recHdrSize+3) // seq 5's payload
	l, rep := mustOpen(t, cfg)
	if rep.TruncatedBytes != 0 || len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != 5 || rep.Corrupt[0].LastSeq != 5 {
		t.Fatalf("report %+v", rep)
	}
	_, _, err := l.Read(5, nil)
	checkCorruption(t, err, cfg.Name, seg, 5)
	for _, m := range ms {
		if m.seq != 5 {
			checkRead(t, l, m)
		}
	}
	// Appends go on after the intact tail.
	more := appendMsgs(t, l, 3, subj("b"), 5)
	if more[0].seq != 11 {
		t.Fatalf("next seq %d", more[0].seq)
	}
	l, _ = reopen(t, l)
	for _, m := range append(ms[5:], more...) {
		checkRead(t, l, m)
	}
}

// TestSeveralDamagedRecords: a run of damaged records is one report with the
// whole range.
func TestSeveralDamagedRecords(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 10, subj("a"), 30)
	l.Close()
	seg := segFiles(t, cfg.Dir, ".log")[0]
	offs := recordOffsets(t, seg)
	for _, k := range []int{3, 4, 5} {
		flipByte(t, seg, offs[k]+recHdrSize)
	}
	l, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != 4 || rep.Corrupt[0].LastSeq != 6 {
		t.Fatalf("report %+v", rep)
	}
	got := 0
	r := l.NewReader(0)
	defer r.Close()
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err == nil {
			got++
		}
	}
	if got != 7 {
		t.Fatalf("read %d intact records, want 7", got)
	}
}

// TestTruncatedSealedSegment: a sealed segment that lost its tail is
// reported with the missing sequences (it is not a torn write to repair).
func TestTruncatedSealedSegment(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 1024
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 40, subj("a"), 50)
	l.Close()
	segs := segFiles(t, cfg.Dir, ".log")
	offs := recordOffsets(t, segs[0])
	if err := os.Truncate(segs[0], offs[len(offs)-2]+5); err != nil {
		t.Fatal(err)
	}
	l, rep := mustOpen(t, cfg)
	n := uint64(len(offs))
	if rep.TruncatedBytes != 0 || len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != n-1 || rep.Corrupt[0].LastSeq != n {
		t.Fatalf("report %+v", rep)
	}
	if _, _, err := l.Read(n, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read(%d): %v", n, err)
	}
	checkRead(t, l, msg{seq: n + 1, subject: "a", payload: payloadFor(n+1, 50)})
}

// TestMissingSegmentFile: a sealed segment deleted by hand shows as lost
// sequences, not as silently fewer messages.
func TestMissingSegmentFile(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 512
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 40, subj("a"), 50)
	l.Close()
	segs := segFiles(t, cfg.Dir, ".log")
	os.Remove(segs[1])
	b1, _, _ := parseSegName(filepath.Base(segs[1]))
	b2, _, _ := parseSegName(filepath.Base(segs[2]))
	_, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != b1 || rep.Corrupt[0].LastSeq != b2-1 {
		t.Fatalf("report %+v, want %d-%d", rep, b1, b2-1)
	}
}

// TestCorruptionFoundByReads: damage that appears after Open is found by Read
// and Reader (every read checks the CRC).
func TestCorruptionFoundByReads(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	ms := appendMsgs(t, l, 10, subj("a"), 30)
	seg := segFiles(t, cfg.Dir, ".log")[0]
	offs := recordOffsets(t, seg)
	flipByte(t, seg, offs[6]+recHdrSize+2) // seq 7
	_, _, err := l.Read(7, nil)
	checkCorruption(t, err, cfg.Name, seg, 7)
	checkRead(t, l, ms[7])
	r := l.NewReader(0)
	defer r.Close()
	var got []uint64
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			checkCorruption(t, err, cfg.Name, seg, 7)
			continue
		}
		got = append(got, rec.Seq)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6 8 9 10]" {
		t.Fatalf("reader got %v", got)
	}
}

// TestIndexRebuild: sealed segments get .idx files; missing or damaged ones
// are rebuilt on Open to the same bytes, and lookups work either way.
func TestIndexRebuild(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentBytes = 2048
	cfg.IndexEvery = 300
	l, _ := mustOpen(t, cfg)
	ms := appendMsgs(t, l, 200, func(i int) string { return fmt.Sprintf("s.%d", i%5) }, 40)
	logs := segFiles(t, cfg.Dir, ".log")
	idxs := segFiles(t, cfg.Dir, ".idx")
	if len(logs) < 5 || len(idxs) != len(logs)-1 {
		t.Fatalf("%d segments, %d index files", len(logs), len(idxs))
	}
	for i, p := range logs {
		base, _, _ := parseSegName(filepath.Base(p))
		if i > 0 && base != l.segs[i].base {
			t.Fatalf("segment %s, want base %d", p, l.segs[i].base)
		}
		if fileSize(t, p) > cfg.SegmentBytes {
			t.Fatalf("%s is larger than SegmentBytes", p)
		}
	}
	orig := map[string][]byte{}
	for _, p := range idxs {
		orig[p], _ = os.ReadFile(p)
	}
	l.Close()
	os.Remove(idxs[0])
	os.WriteFile(idxs[1], []byte("garbage"), 0o644)
	b, _ := os.ReadFile(idxs[2])
	b[len(b)/2] ^= 1
	os.WriteFile(idxs[2], b, 0o644)
	l, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 0 {
		t.Fatalf("index damage is not data damage: %+v", rep)
	}
	for p, want := range orig {
		if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
			t.Fatalf("%s rebuilt differently", p)
		}
	}
	for _, m := range ms {
		checkRead(t, l, m)
	}
	if got := readAll(t, l, 77); len(got) != 124 || got[0].Seq != 77 {
		t.Fatalf("reader from 77: %d records", len(got))
	}
}

// TestTornTombstoneEntry: a half-written .del entry is ignored; a damaged one
// is reported (a deleted message may be back).
func TestTornTombstoneEntry(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 10, subj("a"), 10)
	for _, q := range []uint64{3, 5} {
		if err := l.Delete(q); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	del := segFiles(t, cfg.Dir, ".del")[0]
	f, _ := os.OpenFile(del, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(appendDelEntry(nil, 7, 7)[:11])
	f.Close()
	l, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 0 || l.State().Msgs != 8 {
		t.Fatalf("torn entry: %+v %+v", rep, l.State())
	}
	l.Close()
	flipByte(t, del, 2)
	l, rep = mustOpen(t, cfg)
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].Segment != del {
		t.Fatalf("damaged entry: %+v", rep)
	}
}

// FuzzRecover writes arbitrary bytes as a segment file and opens the log: it
// never panics, and every record it returns is one that was in the input with
// a good CRC.
func FuzzRecover(f *testing.F) {
	var seg []byte
	for i := uint64(1); i <= 5; i++ {
		seg = appendRecord(seg, i, int64(i)*1000, []byte("a.b"), nil, payloadFor(i, int(i*7)))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	bad := bytes.Clone(seg)
	bad[60] ^= 1
	f.Add(bad)
	f.Add(append(bytes.Clone(seg), seg...)) // sequences going backwards
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xFE, 'T', 'N', 1}, 30))
	var run []byte
	for i := uint64(1); i <= 30; i++ {
		run = appendRecord(run, i, int64(i)*1000, []byte("a.b"), nil, compressible(i, 90))
	}
	packed, _ := packBlocks(nil, run, splitRuns(run), nil, false)
	f.Add(packed)
	f.Add(packed[:len(packed)-5])
	badBlock := bytes.Clone(packed)
	badBlock[blockHdrSize+10] ^= 1
	f.Add(badBlock)
	var bareRun []byte
	for i := uint64(1); i <= 30; i++ {
		bareRun = appendBareRecord(bareRun, i, int64(i)*1000, []byte("a.b"), nil, compressible(i, 90))
	}
	bare, _ := packBlocks(nil, bareRun, splitRuns(bareRun), nil, true)
	f.Add(bare)
	var inner []byte
	for i := uint64(1); i <= 30; i++ {
		inner = AppendBlockMessage(inner, []byte("a.b"), nil, compressible(i, 90))
	}
	msgBlocks := appendMessageBlock(nil, 1, 1000, 30, len(inner), s2.Encode(nil, inner))
	msgBlocks = appendRecord(msgBlocks, 31, 2000, []byte("a.b"), nil, payloadFor(31, 20))
	f.Add(msgBlocks)
	// A cleaned segment: holes between records, and a hole with no tombstones
	// (its sequences are then lost messages).
	holes := appendHole(nil, 1, 3, 3000)
	holes = appendRecord(holes, 4, 4000, []byte("a.b"), nil, payloadFor(4, 20))
	holes = appendHole(holes, 5, 1<<20, 5000)
	holes = appendRecord(holes, 5+1<<20, 6000, []byte("a.b"), nil, payloadFor(5, 20))
	f.Add(holes)
	badHole := bytes.Clone(holes)
	badHole[offCount] ^= 1
	f.Add(badHole)
	packedHoles := appendHole(nil, 1, 5, 5)
	packedHoles = appendBareRecord(packedHoles, 6, 6, []byte("a.b"), nil, compressible(6, 100))
	packedHoles = appendHole(packedHoles, 7, 300, 9)
	packedHoles = appendBareRecord(packedHoles, 307, 10, []byte("a.b"), nil, compressible(7, 100))
	holedBlock, _ := appendRun(nil, packedHoles, true)
	f.Add(holedBlock)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)+".log"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		openAndCheck(t, dir, withBlocksExpanded(data))
	})
}

// FuzzRecoverMerged: a first segment of any bytes before two intact ones
// (records 3 and 4 from base 3, and the active one, record 6, from base 6),
// as a crash after a merge leaves a merged file beside the segments it took
// in: Open never fails or panics, and whatever it reads is in the input.
func FuzzRecoverMerged(f *testing.F) {
	rec := func(dst []byte, seq uint64) []byte {
		return appendRecord(dst, seq, int64(seq)*1000, []byte("a.b"), nil, payloadFor(seq, int(seq*7)))
	}
	var merged []byte // 1..5: the merge of 1..2 and 3..4, and a record after
	for q := uint64(1); q <= 5; q++ {
		merged = rec(merged, q)
	}
	f.Add(merged)
	f.Add(rec(rec(nil, 1), 2)) // not merged: up to the next segment
	f.Add(merged[:len(merged)-3])
	f.Add(rec(rec(rec(nil, 1), 2), 5)) // a gap where the next segment starts
	holed := appendHole(rec(nil, 1), 2, 2, 2000)
	holed = rec(holed, 4)
	f.Add(holed)
	f.Add(appendHole(rec(nil, 1), 2, 10, 2000)) // past the active segment's base
	var bareRun []byte
	for q := uint64(1); q <= 5; q++ {
		bareRun = appendBareRecord(bareRun, q, int64(q)*1000, []byte("a.b"), nil, compressible(q, 90))
	}
	packed, _ := appendRun(nil, bareRun, true)
	f.Add(packed)
	var follow, active []byte
	follow = rec(rec(nil, 3), 4)
	active = rec(nil, 6)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		for base, b := range map[uint64][]byte{1: data, 3: follow, 6: active} {
			if err := os.WriteFile(filepath.Join(dir, segName(base)+".log"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		openAndCheck(t, dir, slices.Concat(withBlocksExpanded(data), follow, active))
	})
}

// openAndCheck opens the log in dir, with the records plain holds (whole
// records, back to back or not): what its readers find must be among them,
// and it takes an append.
func openAndCheck(t *testing.T, dir string, plain []byte) {
	t.Helper()
	noSync := &testHooks{fsync: func(*os.File) error { return nil }}
	l, rep, err := Open(Config{Dir: dir, Name: "fuzz", Sync: SyncNever, IndexEvery: 64, hooks: noSync})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	st := l.State()
	if rep.Msgs != st.Msgs {
		t.Fatalf("report %d msgs, state %d", rep.Msgs, st.Msgs)
	}
	check := func(r Record) {
		if !bytes.Contains(plain, appendRecord(nil, r.Seq, r.Time, r.Subject, r.Header, r.Payload)) {
			t.Fatalf("record %d is not in the input", r.Seq)
		}
	}
	r := l.NewReader(0)
	n := 0
	for i := 0; i < 10000; i++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Next: %v", err)
			}
			continue
		}
		check(rec)
		n++
	}
	r.Close()
	for q := st.FirstSeq; q <= st.LastSeq && q < st.FirstSeq+1000; q++ {
		if rec, _, err := l.Read(q, nil); err == nil {
			check(rec)
		}
	}
	l.SeqForTime(0)
	if _, err := l.Append([]byte("x"), nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
}

// withBlocksExpanded is data followed by the records of every intact block in it.
func withBlocksExpanded(data []byte) []byte {
	out := bytes.Clone(data)
	for i := 0; i+blockHdrSize < len(data); i++ {
		b := data[i:]
		if !bytes.HasPrefix(b, recMagic[:]) {
			continue
		}
		n, err := peekRecord(b)
		if err != nil || n > len(b) || recFlags(b)&flagBlock == 0 {
			continue
		}
		var e expander
		if e.load(nil, 0, b[:n], 1<<30) == nil {
			for q := e.first; q < e.first+e.count; q++ {
				// What Open returns is compared with sealed records.
				rec, _ := e.at(q)
				out = appendRecord(out, rec.Seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
			}
		}
	}
	return out
}

// TestOldBlocksCheckInnerCRCs: a block written before inner records went bare
// (flag 1) is read as before, its inner records' CRCs checked: one that fails
// loses the block, reported as damage, though the block's own CRC holds.
func TestOldBlocksCheckInnerCRCs(t *testing.T) {
	var run []byte
	for i := uint64(1); i <= 30; i++ {
		run = appendRecord(run, i, int64(i)*1000, []byte("a.b"), nil, compressible(i, 90))
	}
	good, _ := packBlocks(nil, run, splitRuns(run), nil, false)
	if recFlags(good) != flagBlock {
		t.Fatalf("flags %d, want a block of sealed records", recFlags(good))
	}
	bad := bytes.Clone(run)
	bad[recLen(bad)+offCRC] ^= 1 // the second record's CRC
	damaged, _ := packBlocks(nil, bad, splitRuns(bad), nil, false)
	// A plain record after the block, so that a bad block is damage, not a torn tail.
	last := appendRecord(nil, 31, 31000, []byte("a.b"), nil, compressible(31, 90))
	for _, tc := range []struct {
		name    string
		data    []byte
		from    uint64 // the first sequence that reads
		corrupt int
	}{{"intact", append(good, last...), 1, 0}, {"inner CRC wrong", append(damaged, last...), 31, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.Dir, segName(1)+".log"), tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			l, rep := mustOpen(t, cfg)
			defer l.Close()
			if len(rep.Corrupt) != tc.corrupt {
				t.Fatalf("report %+v, want %d damaged ranges", rep, tc.corrupt)
			}
			if tc.corrupt > 0 {
				if c := rep.Corrupt[0]; c.FirstSeq != 1 || c.LastSeq != 30 {
					t.Fatalf("damage reported for %d-%d, want the block's 1-30", c.FirstSeq, c.LastSeq)
				}
			}
			for seq := tc.from; seq <= 31; seq++ {
				rec, _, err := l.Read(seq, nil)
				if err != nil || !bytes.Equal(rec.Payload, compressible(seq, 90)) {
					t.Fatalf("Read(%d): %v", seq, err)
				}
			}
		})
	}
}
