package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

// testKeys reads a test record's key from its header: "k:KEY" is keyed by
// KEY, "t:KEY" is a tombstone of KEY, "s" is keyed by its subject, anything
// else is not keyed.
func testKeys(_, header []byte) Keyed {
	h := string(header)
	switch {
	case h == "s":
		return Keyed{Space: KeyedBySubject}
	case len(h) > 2 && h[1] == ':':
		return Keyed{Space: KeyedBy, Key: h[2:], Tombstone: h[0] == 't'}
	}
	return Keyed{}
}

func compactConfig(t testing.TB) Config {
	cfg := testConfig(t)
	cfg.Keys = testKeys
	cfg.SegmentBytes = 1024
	return cfg
}

// liveSeqs lists the sequences a reader finds.
func liveSeqs(t testing.TB, l *Log) []uint64 {
	var seqs []uint64
	for _, r := range readAll(t, l, 1) {
		seqs = append(seqs, r.Seq)
	}
	return seqs
}

func TestCompactKeepsTheLatestOfEachKey(t *testing.T) {
	clk := newClock()
	cfg := compactConfig(t)
	cfg.Now = clk.Now
	l, _ := mustOpen(t, cfg)
	put := func(subject, hdr string) uint64 {
		t.Helper()
		seq, err := l.Append([]byte(subject), []byte(hdr), make([]byte, 100), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		return seq
	}
	a1 := put("x", "k:a")
	b1 := put("x", "k:b")
	plain := put("x", "")
	s1 := put("dev.1", "s")
	a2 := put("x", "k:a")
	// A key that is a subject's bytes is not that subject's key.
	k1 := put("x", "k:dev.1")
	s2 := put("dev.1", "s")
	// Everything so far is in the head (the active segment): nothing goes.
	if n, err := l.Compact(l.CompactBounds(0, time.Hour)); err != nil || n != 0 {
		t.Fatalf("Compact of the head = %d, %v; want 0", n, err)
	}
	for l.State().Segments < 3 { // roll past them
		put("y", "")
	}
	bound, tombBound := l.CompactBounds(0, time.Hour)
	if !l.CompactDue(bound, tombBound) {
		t.Fatal("CompactDue = false with superseded records below the head")
	}
	if n, err := l.Compact(bound, tombBound); err != nil || n != 2 {
		t.Fatalf("Compact = %d, %v; want 2 (a1, s1)", n, err)
	}
	live := liveSeqs(t, l)
	for _, gone := range []uint64{a1, s1} {
		if slices.Contains(live, gone) {
			t.Errorf("superseded record %d still live", gone)
		}
	}
	for _, kept := range []uint64{b1, plain, a2, k1, s2} {
		if !slices.Contains(live, kept) {
			t.Errorf("record %d removed; it is its key's latest or not keyed", kept)
		}
	}
	if l.CompactDue(bound, tombBound) {
		t.Error("CompactDue = true after Compact")
	}
	if got := l.Keys(); got != 4 { // a, b, dev.1 the key, dev.1 the subject
		t.Errorf("Keys = %d, want 4", got)
	}
}

func TestCompactTombstonesAndMinLag(t *testing.T) {
	clk := newClock()
	cfg := compactConfig(t)
	cfg.Now = clk.Now
	l, _ := mustOpen(t, cfg)
	put := func(hdr string) uint64 {
		t.Helper()
		seq, err := l.Append([]byte("x"), []byte(hdr), make([]byte, 100), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		return seq
	}
	a1 := put("k:a")
	a2 := put("k:a")
	del := put("t:a")
	for l.State().Segments < 3 {
		put("")
	}
	// min lag: the records of the last minute stay, so nothing a2 or the
	// tombstone superseded may go yet.
	if n, err := l.Compact(l.CompactBounds(time.Hour, time.Hour)); err != nil || n != 0 {
		t.Fatalf("Compact within the min lag = %d, %v; want 0", n, err)
	}
	clk.Add(time.Hour)
	if n, err := l.Compact(l.CompactBounds(time.Hour, 2*time.Hour)); err != nil || n != 2 {
		t.Fatalf("Compact = %d, %v; want 2 (a1, a2)", n, err)
	}
	if live := liveSeqs(t, l); !slices.Contains(live, del) || slices.Contains(live, a1) || slices.Contains(live, a2) {
		t.Fatalf("live %v: want the tombstone %d without %d and %d", live, del, a1, a2)
	}
	keys := l.Keys()
	// Reopened, the log knows the tombstone still to go.
	l, _ = reopen(t, l)
	if got := l.Keys(); got != keys {
		t.Fatalf("Keys after reopen = %d, want %d", got, keys)
	}
	clk.Add(time.Hour)
	if n, err := l.Compact(l.CompactBounds(time.Hour, 2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("Compact past the tombstone's age = %d, %v; want 1", n, err)
	}
	if slices.Contains(liveSeqs(t, l), del) {
		t.Fatal("tombstone still live")
	}
	if got := l.Keys(); got != keys-1 {
		t.Fatalf("Keys = %d, want %d (the tombstone's key forgotten)", got, keys-1)
	}
	// The key comes back as new.
	a3 := put("k:a")
	if !slices.Contains(liveSeqs(t, l), a3) {
		t.Fatal("a key written after its tombstone went is missing")
	}
}

func TestCompactOnALogWithoutKeys(t *testing.T) {
	l, _ := mustOpen(t, testConfig(t))
	if _, err := l.Compact(10, 10); !errors.Is(err, ErrNotCompacted) {
		t.Fatalf("Compact = %v, want ErrNotCompacted", err)
	}
	if l.CompactDue(10, 10) || l.Keys() != 0 {
		t.Fatal("a log without keys reports compaction work")
	}
}

// TestCompactModel appends random keyed records, plain, packed into blocks by
// the log and given as blocks, with rollbacks, reopens and cuts, compacts at
// random bounds, cleans the segments compaction left sparse, and checks the
// live records (and some of their contents) against a model of the rules after
// every step.
func TestCompactModel(t *testing.T) {
	seeds := uint64(6)
	if n, err := strconv.Atoi(os.Getenv("TERN_STORE_SEEDS")); err == nil && n > 6 {
		seeds = uint64(n) // soak: make soak
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { compactModel(t, seed) })
	}
}

type modelRec struct {
	seq     uint64
	key     string // "" not keyed
	tomb    bool
	dead    bool
	payload []byte
}

func compactModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	clk := newClock()
	cfg := compactConfig(t)
	cfg.Now = clk.Now
	if seed%2 == 0 {
		cfg.Compression = CompressS2
	}
	l, _ := mustOpen(t, cfg)
	var recs []*modelRec
	latest := func(r *modelRec) bool {
		for _, o := range recs {
			if o.key == r.key && o.seq > r.seq {
				return false
			}
		}
		return true
	}
	randHeader := func() (string, string, bool) {
		k := fmt.Sprint(rng.IntN(12))
		switch x := rng.IntN(10); {
		case x == 0:
			return "", "", false
		case x == 1:
			return "t:" + k, "k" + k, true
		case x == 2:
			return "s", "s" + fmt.Sprint(rng.IntN(3)), false // subject "s0".."s2"
		default:
			return "k:" + k, "k" + k, false
		}
	}
	removedAll, cleaned, started := 0, 0, 0
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(22); {
		case op < 12: // a commit of a few records
			var batch []*modelRec
			n := 1 + rng.IntN(6)
			for range n {
				hdr, key, tomb := randHeader()
				subject := "x"
				if hdr == "s" {
					subject = key
				}
				p := payloadFor(uint64(step)<<8|uint64(len(batch)), 40)
				seq, err := l.Append([]byte(subject), []byte(hdr), p, 0)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, &modelRec{seq: seq, key: key, tomb: tomb, payload: p})
			}
			if rng.IntN(8) == 0 {
				l.Rollback()
				continue
			}
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
			for _, r := range batch {
				recs = append(recs, r)
			}
		case op < 14: // a block of messages with one key
			k := fmt.Sprint(rng.IntN(12))
			var inner []byte
			var payloads [][]byte
			n := 1 + rng.IntN(4)
			for i := range n {
				p := payloadFor(uint64(step)<<8|uint64(i), 30)
				payloads = append(payloads, p)
				inner = AppendBlockMessage(inner, []byte("x"), []byte("k:"+k), p)
			}
			first, err := l.AppendBlock(0, inner, s2.Encode(nil, inner))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				r := &modelRec{seq: first + uint64(i), key: "k" + k, payload: payloads[i]}
				recs = append(recs, r)
			}
		case op < 17: // compact at bounds below the head
			head := l.segs[len(l.segs)-1].base
			bound := 1 + rng.Uint64N(head)
			tombBound := 1 + rng.Uint64N(head)
			n, err := l.Compact(bound, tombBound)
			if err != nil {
				t.Fatal(err)
			}
			removed := 0
			tb := min(bound, tombBound)
			for _, r := range recs {
				if r.dead || r.key == "" {
					continue
				}
				superseded := false
				for _, o := range recs {
					if o.key == r.key && o.seq > r.seq && o.seq < bound {
						superseded = true
						break
					}
				}
				if superseded || r.tomb && r.seq < tb && latest(r) {
					r.dead = true
					removed++
				}
			}
			removedAll += removed
			if n != removed {
				t.Fatalf("step %d: Compact(%d, %d) removed %d, the model %d", step, bound, tombBound, n, removed)
			}
		case op < 18:
			var rep Report
			if l, rep = reopen(t, l); len(rep.Corrupt) > 0 {
				t.Fatalf("step %d: reopened: %v", step, rep.Corrupt)
			}
		case op < 19 && cfg.Compression == CompressNone && len(recs) > 0: // cut the tail
			at := recs[rng.IntN(len(recs))].seq
			if at < l.first {
				continue
			}
			if err := l.TruncateAfter(at); errors.Is(err, ErrCutInBlock) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			recs = slices.DeleteFunc(recs, func(r *modelRec) bool { return r.seq > at })
		case op < 21:
			// Beside the writer half the time: its rewrite is installed at a
			// later step, or dropped by a cut, a reopen or a removal first.
			var st CleanStats
			var err error
			if rng.IntN(2) == 0 {
				st, err = l.Clean(rng.Float64()*0.6, rng.IntN(3))
			} else {
				was := l.Cleaning()
				st, err = l.CleanAside(rng.Float64()*0.6, nil)
				if l.Cleaning() && (!was || st.Segments > 0) {
					started++
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			// A rewrite of one segment is installed only when smaller; a
			// merge may grow by a hole for each gap between its segments
			// and what packing their records together again costs.
			if st.After > st.Before+int64(st.Segments)*blockHdrSize+st.Before/16 {
				t.Fatalf("step %d: cleaning grew %d segments from %d to %d bytes", step, st.Segments, st.Before, st.After)
			}
			cleaned += st.Segments
		default:
			clk.Add(time.Second)
		}
		// Contents: a few live records read back whole, a few dead ones not at all.
		var buf []byte
		for range 4 {
			if len(recs) == 0 {
				break
			}
			r := recs[rng.IntN(len(recs))]
			rec, b, err := l.Read(r.seq, buf)
			buf = b
			switch {
			case r.dead && r.seq >= l.first && !errors.Is(err, ErrNotFound):
				t.Fatalf("step %d: read of removed %d: %v", step, r.seq, err)
			case !r.dead && (err != nil || rec.Seq != r.seq || string(rec.Payload) != string(r.payload)):
				t.Fatalf("step %d: read of %d: seq %d, %d payload bytes (want %d), %v", step, r.seq, rec.Seq, len(rec.Payload), len(r.payload), err)
			}
		}
		var want []uint64
		for _, r := range recs {
			if !r.dead {
				want = append(want, r.seq)
			}
		}
		if got := liveSeqs(t, l); !slices.Equal(got, want) {
			t.Fatalf("step %d: live %v, the model %v", step, got, want)
		}
	}
	if removedAll < 20 || cleaned+started < 3 {
		t.Fatalf("compaction removed %d records, cleaned %d segments and started %d rewrites beside the writer in all; the test does not exercise them", removedAll, cleaned, started)
	}
}
