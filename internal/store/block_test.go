package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

// compressible is a payload S2 shrinks: text with a counter in it.
func compressible(seq uint64, size int) []byte {
	line := fmt.Sprintf(`{"event":"page_view","user":%d,"path":"/catalog/items"},`, seq%97)
	b := bytes.Repeat([]byte(line), size/len(line)+1)
	return b[:size]
}

// fillCompressed commits n messages in commits of per, with compressible
// payloads, and returns what it wrote.
func fillCompressed(t *testing.T, l *Log, clk *fakeClock, n, per, size int) []msg {
	t.Helper()
	var out []msg
	for len(out) < n {
		for k := 0; k < per && len(out) < n; k++ {
			clk.Add(time.Millisecond)
			seq := uint64(len(out) + 1)
			x := msg{seq: seq, ts: clk.Now().UnixNano(), subject: fmt.Sprintf("orders.%d", seq%3), header: []byte("\x02id\x03abc"), payload: compressible(seq, size)}
			got, err := l.Append([]byte(x.subject), x.header, x.payload, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got != x.seq {
				t.Fatalf("Append seq %d, want %d", got, x.seq)
			}
			out = append(out, x)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// openCompressed opens a compressed log on a fake clock.
func openCompressed(t *testing.T) (*Log, *fakeClock, Config) {
	t.Helper()
	clk := newClock()
	cfg := testConfig(t)
	cfg.Now = clk.Now
	cfg.Compression = CompressS2
	l, _ := mustOpen(t, cfg)
	return l, clk, cfg
}

func checkAll(t *testing.T, l *Log, want []msg) {
	t.Helper()
	checkReads(t, l, want)
	for _, x := range want[:min(len(want), 50)] {
		if got := l.SeqForTime(x.ts); got != x.seq {
			t.Fatalf("SeqForTime(%d) = %d, want %d", x.ts, got, x.seq)
		}
	}
}

// checkReads reads want back through a reader and through Read.
func checkReads(t *testing.T, l *Log, want []msg) {
	t.Helper()
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("reader: %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		x := want[i]
		if r.Seq != x.seq || r.Time != x.ts || string(r.Subject) != x.subject || !bytes.Equal(r.Header, x.header) || !bytes.Equal(r.Payload, x.payload) {
			t.Fatalf("reader: record %d differs: seq %d", i, r.Seq)
		}
	}
	var buf []byte
	for _, x := range want {
		r, b, err := l.Read(x.seq, buf)
		buf = b
		if err != nil {
			t.Fatalf("Read(%d): %v", x.seq, err)
		}
		if r.Seq != x.seq || r.Time != x.ts || string(r.Subject) != x.subject || !bytes.Equal(r.Header, x.header) || !bytes.Equal(r.Payload, x.payload) {
			t.Fatalf("Read(%d) differs", x.seq)
		}
	}
}

func diskBytes(t *testing.T, l *Log) int64 {
	t.Helper()
	var n int64
	for _, s := range l.segs {
		st, err := os.Stat(s.logPath)
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

func TestCompressedRoundTrip(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t)
	cfg.Now = clk.Now
	cfg.Compression = CompressS2
	cfg.SegmentBytes = 64 << 10 // several segments
	l, _ := mustOpen(t, cfg)
	want := fillCompressed(t, l, clk, 3000, 100, 300)
	st := l.State()
	if st.Msgs != 3000 || st.LastSeq != 3000 {
		t.Fatalf("state %+v", st)
	}
	// Sizes and limits count records as appended; the files hold far less.
	var logical uint64
	for _, x := range want {
		logical += uint64(recordSize(len(x.subject), len(x.header), len(x.payload)))
	}
	if st.Bytes != logical {
		t.Fatalf("State.Bytes = %d, want %d (uncompressed)", st.Bytes, logical)
	}
	if disk := diskBytes(t, l); disk*4 > int64(logical) {
		t.Fatalf("%d bytes on disk for %d bytes of records: not compressed", disk, logical)
	}
	if blocks := countBlocks(t, l); blocks < 30 {
		t.Fatalf("%d blocks", blocks)
	}
	checkAll(t, l, want)
	// A reader starting in the middle of a block, and one following the writer.
	if got := readAll(t, l, 1234); len(got) != 3000-1233 || got[0].Seq != 1234 {
		t.Fatalf("reader from 1234: %d records from %d", len(got), got[0].Seq)
	}
	l, rep := reopen(t, l)
	if len(rep.Corrupt) > 0 || rep.TruncatedBytes > 0 || rep.Msgs != 3000 {
		t.Fatalf("reopen: %+v", rep)
	}
	checkAll(t, l, want)
	// Deleting inside a block, purging by subject and from the front.
	if err := l.Delete(1500); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Purge(1001, ""); err != nil || n != 1000 {
		t.Fatalf("Purge: %d, %v", n, err)
	}
	var rest []msg
	var ones uint64
	for _, x := range want[1000:] {
		switch {
		case x.seq == 1500:
		case x.subject == "orders.1":
			ones++
		default:
			rest = append(rest, x)
		}
	}
	if n, err := l.Purge(0, "orders.1"); err != nil || n != ones {
		t.Fatalf("Purge by subject: %d, %v; want %d", n, err, ones)
	}
	checkAll(t, l, rest)
	l, _ = reopen(t, l)
	checkAll(t, l, rest)
}

func TestIncompressibleStaysPlain(t *testing.T) {
	l, _, _ := openCompressed(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []msg
	for i := 0; i < 200; i++ {
		p := make([]byte, 500)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		if _, err := l.Append([]byte("x"), nil, p, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, msg{subject: "x", payload: p})
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := countBlocks(t, l); n != 0 {
		t.Fatalf("%d blocks of incompressible records", n)
	}
	var logical int64
	for _, x := range want {
		logical += int64(recordSize(len(x.subject), len(x.header), len(x.payload)))
	}
	if disk := diskBytes(t, l); disk != logical {
		t.Fatalf("%d bytes on disk, want %d", disk, logical)
	}
}

func TestCompressionSwitchedOnAndOff(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t)
	cfg.Now = clk.Now
	l, _ := mustOpen(t, cfg)
	var want []msg
	add := func(n int) {
		for k := 0; k < n; k++ {
			clk.Add(time.Millisecond)
			x := msg{seq: uint64(len(want) + 1), ts: clk.Now().UnixNano(), subject: "s", payload: compressible(uint64(len(want)), 200)}
			if _, err := l.Append([]byte(x.subject), nil, x.payload, 0); err != nil {
				t.Fatal(err)
			}
			want = append(want, x)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	add(50)
	if countBlocks(t, l) != 0 {
		t.Fatal("blocks without compression")
	}
	if err := l.SetCompression(CompressS2); err != nil {
		t.Fatal(err)
	}
	add(50)
	if countBlocks(t, l) == 0 {
		t.Fatal("no block after SetCompression(CompressS2)")
	}
	if err := l.SetCompression(CompressNone); err != nil {
		t.Fatal(err)
	}
	blocks := countBlocks(t, l)
	add(50)
	if countBlocks(t, l) != blocks {
		t.Fatal("a block after SetCompression(CompressNone)")
	}
	if err := l.SetCompression(Compression(9)); err == nil {
		t.Fatal("SetCompression(9) accepted")
	}
	checkAll(t, l, want)
	// A log opened without compression reads the blocks all the same.
	l, _ = reopen(t, l)
	checkAll(t, l, want)
}

// blockSpans lists the offsets and lengths of the blocks in a segment file.
func blockSpans(t *testing.T, path string) (offs, lens []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off+recHdrSize <= len(b); {
		n, err := peekRecord(b[off:])
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if recFlags(b[off:])&flagBlock != 0 {
			offs, lens = append(offs, off), append(lens, n)
		}
		off += n
	}
	return offs, lens
}

func TestDamagedBlock(t *testing.T) {
	l, clk, cfg := openCompressed(t)
	want := fillCompressed(t, l, clk, 400, 100, 300) // 4 commits, each of several blocks
	path := l.segs[0].logPath
	offs, lens := blockSpans(t, path)
	if len(offs) < 4 {
		t.Fatalf("%d blocks", len(offs))
	}
	// The second block's sequences.
	raw, _ := os.ReadFile(path)
	first := recSeq(raw[offs[1]:])
	count := uint64(unitCount(raw[offs[1]:]))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw[offs[1]+lens[1]/2] ^= 0x40 // inside its compressed bytes
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	l, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != first || rep.Corrupt[0].LastSeq != first+count-1 {
		t.Fatalf("Corrupt = %+v, want messages %d-%d", rep.Corrupt, first, first+count-1)
	}
	if rep.TruncatedBytes != 0 {
		t.Fatalf("truncated %d bytes", rep.TruncatedBytes)
	}
	for _, q := range []uint64{first, first + count - 1} {
		_, _, err := l.Read(q, nil)
		var corr *Corruption
		if !errors.As(err, &corr) {
			t.Fatalf("Read(%d) of a damaged block: %v", q, err)
		}
	}
	var rest []msg
	for _, x := range want {
		if x.seq < first || x.seq >= first+count {
			rest = append(rest, x)
		}
	}
	// The reader reports the damage once and goes on after it.
	r := l.NewReader(0)
	var got []uint64
	var damaged []*Corruption
	for {
		rec, err := r.Next()
		if err != nil {
			var corr *Corruption
			if errors.As(err, &corr) {
				damaged = append(damaged, corr)
				continue
			}
			break
		}
		got = append(got, rec.Seq)
	}
	r.Close()
	if len(damaged) != 1 || damaged[0].FirstSeq != first || damaged[0].LastSeq != first+count-1 || len(got) != len(rest) {
		t.Fatalf("reader: %d records, damage %+v", len(got), damaged)
	}
	for _, x := range rest {
		if r, _, err := l.Read(x.seq, nil); err != nil || !bytes.Equal(r.Payload, x.payload) {
			t.Fatalf("Read(%d): %v", x.seq, err)
		}
	}
}

func TestTornBlockAtTheTail(t *testing.T) {
	l, clk, cfg := openCompressed(t)
	want := fillCompressed(t, l, clk, 300, 100, 300)
	path := l.segs[0].logPath
	offs, lens := blockSpans(t, path)
	last := len(offs) - 1
	raw, _ := os.ReadFile(path)
	lost := recSeq(raw[offs[last]:])
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A write cut short in the middle of the last block.
	if err := os.Truncate(path, int64(offs[last]+lens[last]/2)); err != nil {
		t.Fatal(err)
	}
	l, rep := mustOpen(t, cfg)
	if len(rep.Corrupt) != 0 || rep.TruncatedBytes != int64(lens[last]/2) {
		t.Fatalf("report %+v", rep)
	}
	if st := l.State(); st.LastSeq != lost-1 {
		t.Fatalf("LastSeq %d, want %d", st.LastSeq, lost-1)
	}
	checkAll(t, l, want[:lost-1])
	// The lost sequences are handed out again.
	if seq, err := l.Append([]byte("s"), nil, []byte("p"), 0); err != nil || seq != lost {
		t.Fatalf("Append: %d, %v", seq, err)
	}
}

func TestTruncateCompressedLog(t *testing.T) {
	l, clk, _ := openCompressed(t)
	want := fillCompressed(t, l, clk, 300, 100, 300)
	offs, _ := blockSpans(t, l.segs[0].logPath)
	raw, _ := os.ReadFile(l.segs[0].logPath)
	second := recSeq(raw[offs[1]:])
	if err := l.TruncateAfter(second); !errors.Is(err, ErrCutInBlock) {
		t.Fatalf("cut inside a block: %v", err)
	}
	checkAll(t, l, want) // nothing changed
	// Between blocks: after the first block's last record.
	if err := l.TruncateAfter(second - 1); err != nil {
		t.Fatal(err)
	}
	checkAll(t, l, want[:second-1])
	if seq, err := l.Append([]byte("s"), nil, []byte("p"), 0); err != nil || seq != second {
		t.Fatalf("Append after the cut: %d, %v", seq, err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	l, rep := reopen(t, l)
	if len(rep.Corrupt) != 0 || l.State().LastSeq != second {
		t.Fatalf("reopen: %+v, state %+v", rep, l.State())
	}
}

// FuzzExpandBlock: expanding arbitrary bytes as a block never panics, and what
// it accepts holds exactly the records it says, each one intact.
func FuzzExpandBlock(f *testing.F) {
	var run []byte
	for i := uint64(1); i <= 20; i++ {
		run = appendRecord(run, i, int64(i), []byte("a.b"), nil, compressible(i, 100))
	}
	block, _ := packBlocks(nil, run, splitRuns(run), nil, false)
	f.Add(block)
	one, _ := packBlocks(nil, run[:recLen(run)], splitRuns(run[:recLen(run)]), nil, false)
	f.Add(one)
	var bareRun []byte
	for i := uint64(1); i <= 20; i++ {
		bareRun = appendBareRecord(bareRun, i, int64(i), []byte("a.b"), nil, compressible(i, 100))
	}
	bare, _ := packBlocks(nil, bareRun, splitRuns(bareRun), nil, true)
	f.Add(bare)
	f.Add(block[:len(block)-1])
	f.Add(block[:blockHdrSize])
	var inner []byte
	for i := uint64(1); i <= 20; i++ {
		inner = AppendBlockMessage(inner, []byte("a.b"), []byte("\x02id\x01x"), compressible(i, 100))
	}
	f.Add(appendMessageBlock(nil, 1, 7, 20, len(inner), s2.Encode(nil, inner)))
	f.Add(appendMessageBlock(nil, 1, 7, 21, len(inner), s2.Encode(nil, inner)))
	f.Add(appendMessageBlock(nil, 1, 7, 20, len(inner), s2.Encode(nil, inner[:len(inner)-1])))
	// A block that Clean packed: holes among the records.
	holed := appendHole(nil, 1, 5, 5)
	holed = appendBareRecord(holed, 6, 6, []byte("a.b"), nil, compressible(6, 100))
	holed = appendHole(holed, 7, 300, 9)
	holed = appendBareRecord(holed, 307, 10, []byte("a.b"), nil, compressible(7, 100))
	holedBlock, _ := appendRun(nil, holed, true)
	f.Add(holedBlock)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < recHdrSize {
			return
		}
		n, err := peekRecord(b)
		if err != nil || n != len(b) || recFlags(b)&flagBlock == 0 {
			return
		}
		var e expander
		if err := e.load(nil, 0, b, 1<<20); err != nil {
			return
		}
		var total int
		var again []byte // a message block's messages encoded again
		var forward []Record
		holes := recFlags(b)&flagHoles != 0
		for q := e.first; q < e.first+e.count; q++ {
			rec, n := e.at(q)
			if n == 0 && holes && rec.Seq == q {
				forward = append(forward, rec)
				continue // in a hole
			}
			if rec.Seq != q || n != recordSize(len(rec.Subject), len(rec.Header), len(rec.Payload)) {
				t.Fatalf("record %d has seq %d, length %d", q, rec.Seq, n)
			}
			total += n
			again = AppendBlockMessage(again, rec.Subject, rec.Header, rec.Payload)
			forward = append(forward, rec)
		}
		// Read backwards, each walk starts again from the front.
		for q := e.first + e.count; q > e.first; q-- {
			rec, _ := e.at(q - 1)
			if f := forward[q-1-e.first]; rec.Seq != f.Seq || !bytes.Equal(rec.Payload, f.Payload) || !bytes.Equal(rec.Subject, f.Subject) {
				t.Fatalf("record %d read backwards differs", q-1)
			}
		}
		if e.messages && !bytes.Equal(again, e.msgs) {
			t.Fatalf("messages %q encode again to %q", e.msgs, again)
		}
		if !e.messages && !holes && total != len(e.buf) {
			t.Fatalf("records cover %d of %d bytes", total, len(e.buf))
		}
	})
}

// TestPackBlocksKeepsOrder: runs that shrink become blocks, the others stay as
// they were, and the output expands back to exactly the input.
func TestPackBlocksKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var src []byte
	seq := uint64(1)
	for run := 0; run < 6; run++ {
		for size := 0; size < maxBlockRaw-2000; seq++ {
			p := compressible(seq, 1000)
			if run%2 == 1 {
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
			}
			src = appendRecord(src, seq, int64(seq), []byte("s"), nil, p)
			size += recordSize(1, 0, len(p))
		}
	}
	out, packed := packBlocks([]byte("prefix"), src, splitRuns(src), nil, false)
	if !packed || string(out[:6]) != "prefix" {
		t.Fatal("nothing packed, or dst's bytes lost")
	}
	var back []byte
	blocks, plain := 0, 0
	for b := out[6:]; len(b) > 0; {
		n, err := peekRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if recFlags(b)&flagBlock != 0 {
			var e expander
			if err := e.load(nil, 0, b[:n], 1<<20); err != nil {
				t.Fatal(err)
			}
			back = append(back, e.buf...)
			blocks++
		} else {
			back = append(back, b[:n]...)
			plain++
		}
		b = b[n:]
	}
	if !bytes.Equal(back, src) || blocks != 3 || plain == 0 {
		t.Fatalf("expanded %d of %d bytes back, equal %v; %d blocks, %d plain records", len(back), len(src), bytes.Equal(back, src), blocks, plain)
	}
	small := appendRecord(nil, 1, 1, []byte("s"), nil, bytes.Repeat([]byte("a"), minBlockRaw-recHdrSize-2))
	if out, packed := packBlocks([]byte("x"), small, splitRuns(small), nil, false); packed || string(out) != "x" {
		t.Fatal("a run too small for a block was packed")
	}
}

// TestCompressedRandomReads: Read of messages in blocks, from several goroutines
// at once, and after a cut the new messages at the offsets of the old ones, never
// what was there before.
func TestCompressedRandomReads(t *testing.T) {
	l, clk, _ := openCompressed(t)
	want := fillCompressed(t, l, clk, 600, 100, 300)
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var buf []byte
			for i := 0; i < 500; i++ {
				x := want[rng.IntN(len(want))]
				r, b, err := l.Read(x.seq, buf)
				buf = b
				if err != nil || r.Seq != x.seq || !bytes.Equal(r.Payload, x.payload) || string(r.Subject) != x.subject {
					done <- fmt.Errorf("Read(%d): seq %d, %v", x.seq, r.Seq, err)
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Cut after the first block, read a message of the second (cached now), and
	// write other messages in its place.
	offs, _ := blockSpans(t, l.segs[0].logPath)
	raw, _ := os.ReadFile(l.segs[0].logPath)
	second := recSeq(raw[offs[1]:])
	if r, _, err := l.Read(second+1, nil); err != nil || !bytes.Equal(r.Payload, want[second].payload) {
		t.Fatalf("Read(%d): %v", second+1, err)
	}
	if err := l.TruncateAfter(second - 1); err != nil {
		t.Fatal(err)
	}
	for q := second; q < second+100; q++ {
		clk.Add(time.Millisecond)
		if _, err := l.Append([]byte("other"), nil, compressible(q+1000, 300), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if offs2, _ := blockSpans(t, l.segs[0].logPath); len(offs2) < 2 || offs2[1] != offs[1] {
		t.Fatalf("the new block is not where the old one was: %v, %v", offs2, offs)
	}
	r, _, err := l.Read(second+1, nil)
	if err != nil || string(r.Subject) != "other" || !bytes.Equal(r.Payload, compressible(second+1001, 300)) {
		t.Fatalf("Read(%d) after the cut: %q %v", second+1, r.Subject, err)
	}
}

// TestBareInnerRecords: a compressed log's blocks carry no CRC per inner record
// (the block's covers them) while the records of the same commits left plain get
// theirs; a commit whose compression was turned off after its appends writes
// every record with its CRC. Recovery, which checks every CRC, finds nothing
// wrong in any of it.
func TestBareInnerRecords(t *testing.T) {
	l, clk, _ := openCompressed(t)
	rng := rand.New(rand.NewPCG(5, 6))
	var want []msg
	add := func(n int, random bool) {
		for k := 0; k < n; k++ {
			clk.Add(time.Millisecond)
			p := compressible(uint64(len(want)), 300)
			if random {
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
			}
			x := msg{seq: uint64(len(want) + 1), ts: clk.Now().UnixNano(), subject: "s", payload: p}
			if _, err := l.Append([]byte(x.subject), nil, x.payload, 0); err != nil {
				t.Fatal(err)
			}
			want = append(want, x)
		}
	}
	// One commit: compressible, random (stays plain), compressible again.
	add(300, false)
	add(300, true)
	add(300, false)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if countBlocks(t, l) < 2 {
		t.Fatal("the compressible runs were not packed")
	}
	segs := segFiles(t, l.cfg.Dir, ".log")
	data, err := os.ReadFile(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}
	for b := data; len(b) > 0; b = b[recLen(b):] {
		if recFlags(b)&flagBlock != 0 && recFlags(b)&flagBareInner == 0 {
			t.Fatal("a block of bare records without flagBareInner")
		}
	}
	// Appended compressed, committed plain: every record sealed at the commit.
	blocks := countBlocks(t, l)
	add(100, false)
	if err := l.SetCompression(CompressNone); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if countBlocks(t, l) != blocks {
		t.Fatal("a block after SetCompression(CompressNone)")
	}
	checkAll(t, l, want)
	l, rep := reopen(t, l)
	if len(rep.Corrupt) != 0 || rep.Msgs != uint64(len(want)) {
		t.Fatalf("reopen: %+v", rep)
	}
	checkAll(t, l, want)
}

// TestPackRunsAsAppended: the runs the writer keeps as it appends are those a walk
// of each part's records finds (splitRuns): records of every size, one larger
// than a block alone, and a batch cut into parts by small segments. What Commit
// writes from them reads back whole.
func TestPackRunsAsAppended(t *testing.T) {
	cfg := testConfig(t)
	cfg.Compression = CompressS2
	cfg.SegmentBytes = 300 << 10
	l, _ := mustOpen(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	var want [][]byte
	for i := 0; i < 3000; i++ {
		size := 1 + rng.IntN(900)
		switch i {
		case 700:
			size = maxBlockRaw + 5000 // a run of its own
		case 701:
			size = maxBlockRaw - recordSize(1, 0, 0) // exactly a block's bytes
		}
		p := compressible(uint64(i), size)
		want = append(want, p)
		if _, err := l.Append([]byte("s"), nil, p, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.parts) < 3 {
		t.Fatalf("%d parts: the batch should span segments", len(l.parts))
	}
	for i, p := range l.parts {
		start, end := p.start, l.partEnd(i)
		got, walked := l.runs.within(start, end), splitRuns(l.batch[start:end])
		if fmt.Sprint(got) != fmt.Sprint(walked) || len(walked) == 0 {
			t.Fatalf("part %d: runs kept end at %v, a walk finds %v", i, got, walked)
		}
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, p := range want {
		rec, _, err := l.Read(uint64(i+1), nil)
		if err != nil || !bytes.Equal(rec.Payload, p) {
			t.Fatalf("message %d: %d bytes, %v", i+1, len(rec.Payload), err)
		}
	}
}
