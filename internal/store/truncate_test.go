package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// genPayload is the payload of seq written in generation gen, so that a record
// written again after a truncation can be told from the one it replaced.
func genPayload(seq, gen uint64) []byte {
	return payloadFor(seq*1000+gen, int(seq*7+gen)%200)
}

func appendGen(t testing.TB, l *Log, n int, gen uint64) {
	t.Helper()
	for i := 0; i < n; i++ {
		seq := l.last + uint64(l.npend) + 1
		if _, err := l.Append([]byte("s"), nil, genPayload(seq, gen), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
}

// checkGens reads first..last and checks each payload against gens.
func checkGens(t testing.TB, l *Log, gens map[uint64]uint64) {
	t.Helper()
	st := l.State()
	var buf []byte
	for q := st.FirstSeq; q <= st.LastSeq; q++ {
		rec, b, err := l.Read(q, buf)
		buf = b
		g, ok := gens[q]
		if !ok {
			if !isNotFound(err) {
				t.Fatalf("Read(%d) = %v, want not found", q, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(rec.Payload, genPayload(q, g)) {
			t.Fatalf("Read(%d): %v (payload of generation %d wanted)", q, err, g)
		}
	}
	var seqs []uint64
	for q := range gens {
		if q <= st.LastSeq {
			seqs = append(seqs, q)
		}
	}
	slices.Sort(seqs)
	if got := seqsOf(readAll(t, l, 0)); !slices.Equal(got, seqs) {
		t.Fatalf("reader seqs %v, want %v", got, seqs)
	}
}

// TestTruncateAfterAcrossSegments cuts into an earlier segment: the later
// segments' files go, the cut segment becomes the active one (no .idx), its
// tombstones above the cut go, and new records take the sequences again, also
// across a restart.
func TestTruncateAfterAcrossSegments(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.SegmentBytes = 600
			cfg.IndexEvery = 100
			cfg.Sync = policy
			l, _ := mustOpen(t, cfg)
			appendGen(t, l, 80, 1)
			gens := map[uint64]uint64{}
			for q := uint64(1); q <= 80; q++ {
				gens[q] = 1
			}
			if len(l.segs) < 6 {
				t.Fatalf("only %d segments", len(l.segs))
			}
			s := l.segs[2]
			seq := s.base + 2
			// Tombstones below and above the cut, in its segment and later ones.
			for _, q := range []uint64{seq - 1, seq + 1, seq + 3, l.segs[4].base + 1} {
				if err := l.Delete(q); err != nil {
					t.Fatal(err)
				}
				delete(gens, q)
			}
			if _, err := l.Purge(3, ""); err != nil {
				t.Fatal(err)
			}
			delete(gens, 1)
			delete(gens, 2)
			later := slices.Clone(l.segs[3:])
			if err := l.TruncateAfter(seq); err != nil {
				t.Fatal(err)
			}
			for q := range gens {
				if q > seq {
					delete(gens, q)
				}
			}
			if st := l.State(); st.LastSeq != seq || st.Segments != 3 || st.Msgs != uint64(len(gens)) {
				t.Fatalf("state %+v, %d live wanted", st, len(gens))
			}
			for _, x := range later {
				for _, p := range []string{x.logPath, x.idxPath(), x.delPath()} {
					if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
						t.Fatalf("%s still there: %v", p, err)
					}
				}
			}
			if _, err := os.Stat(s.idxPath()); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the new active segment keeps its index: %v", err)
			}
			if fileSize(t, s.logPath) != s.size {
				t.Fatalf("segment size %d, file %d", s.size, fileSize(t, s.logPath))
			}
			if offs := recordOffsets(t, s.logPath); uint64(len(offs)) != seq-s.base+1 {
				t.Fatalf("cut segment holds %d records, want %d", len(offs), seq-s.base+1)
			}
			buf, _ := os.ReadFile(s.delPath())
			ranges, _ := decodeDelEntries(nil, buf)
			for _, r := range ranges {
				if r.b > seq {
					t.Fatalf("tombstone %v above the cut survives", r)
				}
			}
			checkGens(t, l, gens)
			// The sequences are handed out again, with new records, and stay
			// alive across restarts.
			appendGen(t, l, 30, 2)
			for q := seq + 1; q <= seq+30; q++ {
				gens[q] = 2
			}
			checkGens(t, l, gens)
			l, rep := reopen(t, l)
			if len(rep.Corrupt) != 0 || rep.TruncatedBytes != 0 {
				t.Fatalf("report %+v", rep)
			}
			checkGens(t, l, gens)
			if got := subjects(l); got["s"].msgs != uint64(len(gens)) || got["s"].last != seq+30 {
				t.Fatalf("subjects %v", got)
			}
		})
	}
}

// TestTruncateAfterEdges: nothing to cut, everything cut, exactly at segment
// boundaries, below FirstSeq, and inside a hole left by a removed segment.
func TestTruncateAfterEdges(t *testing.T) {
	newLog := func(t *testing.T) (*Log, Config) {
		cfg := testConfig(t)
		cfg.SegmentBytes = 500
		l, _ := mustOpen(t, cfg)
		appendGen(t, l, 60, 1)
		return l, cfg
	}
	t.Run("at or past the end", func(t *testing.T) {
		l, _ := newLog(t)
		st := l.State()
		for _, seq := range []uint64{60, 61, 1000} {
			if err := l.TruncateAfter(seq); err != nil || l.State() != st {
				t.Fatalf("TruncateAfter(%d): %v, state %+v", seq, err, l.State())
			}
		}
	})
	t.Run("everything", func(t *testing.T) {
		l, _ := newLog(t)
		if err := l.TruncateAfter(0); err != nil {
			t.Fatal(err)
		}
		if st := l.State(); st.Msgs != 0 || st.LastSeq != 0 || st.FirstSeq != 1 || st.Segments != 1 || st.Bytes != 0 {
			t.Fatalf("state %+v", st)
		}
		appendGen(t, l, 3, 2)
		l, _ = reopen(t, l)
		checkGens(t, l, map[uint64]uint64{1: 2, 2: 2, 3: 2})
	})
	t.Run("segment boundaries", func(t *testing.T) {
		for _, d := range []int64{-1, 0} {
			l, _ := newLog(t)
			b := l.segs[3].base
			seq := uint64(int64(b) + d) // the last record of segs[2], or segs[3] emptied
			if err := l.TruncateAfter(seq); err != nil {
				t.Fatal(err)
			}
			appendGen(t, l, 5, 2)
			gens := map[uint64]uint64{}
			for q := uint64(1); q <= seq; q++ {
				gens[q] = 1
			}
			for q := seq + 1; q <= seq+5; q++ {
				gens[q] = 2
			}
			checkGens(t, l, gens)
			l, rep := reopen(t, l)
			if len(rep.Corrupt) != 0 {
				t.Fatalf("report %+v", rep)
			}
			checkGens(t, l, gens)
		}
	})
	t.Run("below the front", func(t *testing.T) {
		l, _ := newLog(t)
		if _, err := l.Purge(30, ""); err != nil {
			t.Fatal(err)
		}
		if err := l.TruncateAfter(28); err == nil {
			t.Fatal("TruncateAfter below FirstSeq-1 accepted")
		}
		if err := l.TruncateAfter(29); err != nil { // everything live goes
			t.Fatal(err)
		}
		if st := l.State(); st.Msgs != 0 || st.FirstSeq != 30 || st.LastSeq != 29 {
			t.Fatalf("state %+v", st)
		}
		appendGen(t, l, 2, 2)
		l, _ = reopen(t, l)
		checkGens(t, l, map[uint64]uint64{30: 2, 31: 2})
	})
	t.Run("in a hole", func(t *testing.T) {
		l, cfg := newLog(t)
		mid := l.segs[2]
		for q := mid.base; q <= mid.last; q++ {
			if err := l.Delete(q); err != nil {
				t.Fatal(err)
			}
		}
		seq := mid.base + 1
		if l.segFor(seq) != nil {
			t.Fatal("no hole")
		}
		if err := l.TruncateAfter(seq); err != nil {
			t.Fatal(err)
		}
		if st := l.State(); st.LastSeq != seq {
			t.Fatalf("state %+v", st)
		}
		appendGen(t, l, 4, 2)
		gens := map[uint64]uint64{}
		for q := uint64(1); q < mid.base; q++ {
			gens[q] = 1
		}
		for q := seq + 1; q <= seq+4; q++ {
			gens[q] = 2
		}
		checkGens(t, l, gens)
		l.Close()
		l, rep := mustOpen(t, cfg)
		if len(rep.Corrupt) != 0 {
			t.Fatalf("report %+v", rep)
		}
		checkGens(t, l, gens)
	})
	t.Run("damaged range", func(t *testing.T) {
		l, cfg := newLog(t)
		l.Close()
		seg := segFiles(t, cfg.Dir, ".log")[1]
		offs := recordOffsets(t, seg)
		flipByte(t, seg, offs[3]+offLen) // one record: its length is damaged
		base, _, _ := parseSegName(filepath.Base(seg))
		l, rep := mustOpen(t, cfg)
		if len(rep.Corrupt) != 1 {
			t.Fatalf("report %+v", rep)
		}
		c := rep.Corrupt[0]
		if c.FirstSeq != base+3 {
			t.Fatalf("corruption %+v", c)
		}
		// Cutting right after the damage, or right before it, works; the
		// damaged record itself cannot be cut in two.
		if c.LastSeq > c.FirstSeq {
			if err := l.TruncateAfter(c.FirstSeq); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut inside damage: %v", err)
			}
		}
		if err := l.TruncateAfter(c.LastSeq); err != nil {
			t.Fatal(err)
		}
		if st := l.State(); st.LastSeq != c.LastSeq {
			t.Fatalf("state %+v", st)
		}
		if err := l.TruncateAfter(c.FirstSeq - 1); err != nil {
			t.Fatal(err)
		}
		appendGen(t, l, 2, 2)
		l, rep = reopen(t, l)
		if len(rep.Corrupt) != 0 {
			t.Fatalf("damage survived the cut: %+v", rep)
		}
		gens := map[uint64]uint64{c.FirstSeq: 2, c.FirstSeq + 1: 2}
		for q := uint64(1); q < c.FirstSeq; q++ {
			gens[q] = 1
		}
		checkGens(t, l, gens)
	})
}

// TestTruncateAfterReader: a reader that cached the bytes of records later cut
// reads the records written in their place.
func TestTruncateAfterReader(t *testing.T) {
	cfg := testConfig(t)
	l, _ := mustOpen(t, cfg)
	appendGen(t, l, 20, 1)
	r := l.NewReader(0)
	defer r.Close()
	for i := 0; i < 10; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.TruncateAfter(5); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("past the cut: %v", err)
	}
	appendGen(t, l, 10, 2)
	for q := uint64(6); q <= 15; q++ {
		rec, err := r.Next()
		if err != nil || rec.Seq != q || !bytes.Equal(rec.Payload, genPayload(q, 2)) {
			t.Fatalf("after the cut: %d, %v (want %d of generation 2)", rec.Seq, err, q)
		}
	}
}

// TestReset: the log starts again at any sequence, below or beyond LastSeq,
// across restarts, with nothing of the old records left.
func TestReset(t *testing.T) {
	for _, next := range []uint64{1, 5, 60, 61, 62, 1000} {
		t.Run(fmt.Sprint(next), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.SegmentBytes = 500
			l, _ := mustOpen(t, cfg)
			appendGen(t, l, 60, 1)
			if err := l.Delete(30); err != nil {
				t.Fatal(err)
			}
			if err := l.Reset(next); err != nil {
				t.Fatal(err)
			}
			want := State{FirstSeq: next, LastSeq: next - 1, Segments: 1}
			if st := l.State(); st != want {
				t.Fatalf("state %+v, want %+v", st, want)
			}
			if got := subjects(l); len(got) != 0 {
				t.Fatalf("subjects %v", got)
			}
			if logs, dels := segFiles(t, cfg.Dir, ".log"), segFiles(t, cfg.Dir, ".del"); len(logs) != 1 || len(dels) > 1 || len(segFiles(t, cfg.Dir, ".idx")) != 0 {
				t.Fatalf("files %v %v", logs, dels)
			}
			l, rep := reopen(t, l)
			if len(rep.Corrupt) != 0 || l.State() != want {
				t.Fatalf("after restart: %+v, %+v", rep, l.State())
			}
			appendGen(t, l, 3, 2)
			gens := map[uint64]uint64{next: 2, next + 1: 2, next + 2: 2}
			checkGens(t, l, gens)
			l, _ = reopen(t, l)
			checkGens(t, l, gens)
			// Right after the last record: the records go, LastSeq stays; a
			// second time changes nothing.
			for i := 0; i < 2; i++ {
				if err := l.Reset(next + 3); err != nil {
					t.Fatal(err)
				}
				if st := l.State(); st.Msgs != 0 || st.FirstSeq != next+3 || st.LastSeq != next+2 || st.Segments != 1 {
					t.Fatalf("state %+v", st)
				}
			}
		})
	}
}

// TestTruncateAndResetCrashStates builds on disk what a crash in the middle of
// TruncateAfter or Reset leaves, and checks that Open recovers each without
// damage to a prefix of the old log (truncation) or to the old, the empty or
// the new log (reset).
func TestTruncateAndResetCrashStates(t *testing.T) {
	build := func(t *testing.T) (Config, *Log) {
		cfg := testConfig(t)
		cfg.SegmentBytes = 500
		l, _ := mustOpen(t, cfg)
		appendGen(t, l, 60, 1)
		if err := l.Delete(l.segs[2].base + 3); err != nil { // a tombstone above the cut
			t.Fatal(err)
		}
		return cfg, l
	}
	open := func(t *testing.T, cfg Config, dir string) *Log {
		t.Helper()
		c := cfg
		c.Dir = dir
		l, rep := mustOpen(t, c)
		if len(rep.Corrupt) != 0 {
			t.Fatalf("report %+v", rep)
		}
		return l
	}
	t.Run("truncate", func(t *testing.T) {
		cfg, l := build(t)
		s := l.segs[2]
		seq := s.base + 1
		segs := slices.Clone(l.segs)
		cutAt := recordOffsets(t, s.logPath)[2]
		l.Close()
		// Every crash point: n of the later segments removed (from the
		// last), then the cut without and with the tombstone rewrite.
		for n := 0; n <= len(segs)-3+1; n++ {
			dir := filepath.Join(t.TempDir(), "c")
			copyDir(t, cfg.Dir, dir)
			for i := len(segs) - 1; i >= len(segs)-min(n, len(segs)-3); i-- {
				for _, p := range []string{segs[i].logPath, segs[i].idxPath(), segs[i].delPath()} {
					os.Remove(filepath.Join(dir, filepath.Base(p)))
				}
			}
			if n == len(segs)-2 {
				if err := os.Truncate(filepath.Join(dir, filepath.Base(s.logPath)), cutAt); err != nil {
					t.Fatal(err)
				}
			}
			l := open(t, cfg, dir)
			st := l.State()
			if st.LastSeq < seq {
				t.Fatalf("crash point %d: LastSeq %d below the cut %d", n, st.LastSeq, seq)
			}
			gens := map[uint64]uint64{}
			for q := uint64(1); q <= st.LastSeq; q++ {
				if q != s.base+3 {
					gens[q] = 1
				}
			}
			checkGens(t, l, gens)
			// Finishing the truncation and writing again works from here.
			if err := l.TruncateAfter(seq); err != nil {
				t.Fatal(err)
			}
			appendGen(t, l, 10, 2)
			for q := range gens {
				if q > seq {
					delete(gens, q)
				}
			}
			for q := seq + 1; q <= seq+10; q++ {
				gens[q] = 2
			}
			l, _ = reopen(t, l)
			checkGens(t, l, gens)
		}
	})
	t.Run("reset", func(t *testing.T) {
		for _, next := range []uint64{20, 100} {
			cfg, l := build(t)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// States in the order Reset makes them, in copies of the log.
			old := segFiles(t, cfg.Dir, ".log")
			dir := filepath.Join(t.TempDir(), "c")
			copyDir(t, cfg.Dir, dir)
			at := func(p string) string { return filepath.Join(dir, filepath.Base(p)) }
			empty := filepath.Join(dir, segName(61)+".log")
			nextLog := filepath.Join(dir, segName(next)+".log")
			nextDel := filepath.Join(dir, segName(next)+".del")
			steps := []func(){
				func() { os.WriteFile(empty, nil, 0o644) },
				func() { os.WriteFile(strings.TrimSuffix(empty, ".log")+".del", appendDelEntry(nil, 0, 60), 0o644) },
				func() { os.Remove(at(old[0])) },
				func() {
					for _, p := range old[1:] {
						os.Remove(at(p))
						os.Remove(strings.TrimSuffix(at(p), ".log") + ".idx")
						os.Remove(strings.TrimSuffix(at(p), ".log") + ".del")
					}
				},
				func() { os.WriteFile(nextDel, appendDelEntry(nil, 0, next-1), 0o644) },
				func() { os.WriteFile(nextLog, nil, 0o644) },
				func() { os.Remove(empty); os.Remove(strings.TrimSuffix(empty, ".log") + ".del") },
			}
			for i, step := range steps {
				step()
				snap := filepath.Join(t.TempDir(), "s")
				copyDir(t, dir, snap)
				l := open(t, cfg, snap)
				st := l.State()
				switch {
				case i == 0: // nothing done yet that counts
					if st.Msgs != 59 || st.LastSeq != 60 {
						t.Fatalf("step %d: %+v", i, st)
					}
				case i < 5: // all dead, LastSeq kept
					if st.Msgs != 0 || st.LastSeq != 60 {
						t.Fatalf("step %d: %+v", i, st)
					}
				default:
					if st.Msgs != 0 || (st.LastSeq != 60 && st.LastSeq != next-1) || (i == 6 && st.LastSeq != next-1) {
						t.Fatalf("step %d: %+v", i, st)
					}
				}
				// Reset again from here, as the owner does after Open.
				if err := l.Reset(next); err != nil {
					t.Fatal(err)
				}
				appendGen(t, l, 2, 2)
				l, rep := reopen(t, l)
				if len(rep.Corrupt) != 0 {
					t.Fatalf("step %d: %+v", i, rep)
				}
				checkGens(t, l, map[uint64]uint64{next: 2, next + 1: 2})
				l.Close()
			}
		}
	})
}

// TestKill9TruncateReset kills a writer that appends, cuts suffixes and resets
// the log at random moments. Each operation is announced before it starts and
// confirmed when it returned; on reopen the log is the confirmed state, or what
// the operation in flight may leave: part of an append, a prefix of the old log
// down to the cut, or the old, empty or new log of a reset.
func TestKill9TruncateReset(t *testing.T) {
	if os.Getenv("TERN_STORE_CHILD") != "" {
		return
	}
	for _, policy := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways} {
		for round := 0; round < 3; round++ {
			t.Run(fmt.Sprintf("%s/%d", policy, round), func(t *testing.T) {
				dir := t.TempDir()
				cmd := exec.Command(os.Args[0], "-test.run=^TestKill9TruncateResetChild$")
				cmd.Env = append(os.Environ(), "TERN_STORE_CHILD="+dir, "TERN_STORE_POLICY="+policy.String(),
					"TERN_STORE_SEED="+strconv.Itoa(round))
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				gens := map[uint64]uint64{} // confirmed content
				var last uint64
				var pending []string // the announced operation, until confirmed
				ops := 0
				stopAt := 50 + rand.IntN(500) // a random moment in a fixed sequence of operations
				sc := bufio.NewScanner(out)
				killed := false
				for sc.Scan() {
					if ops >= stopAt && !killed {
						// What the child wrote until it died is still in the
						// pipe: reading on to EOF gives its exact last words.
						cmd.Process.Signal(syscall.SIGKILL)
						killed = true
					}
					f := strings.Fields(sc.Text())
					switch {
					case len(f) == 4 && (f[0] == "A" || f[0] == "T" || f[0] == "R"):
						pending = f
						continue
					case len(f) != 1 || f[0] != "ok" || pending == nil:
						t.Fatalf("child says %q", sc.Text())
					}
					ops++
					a := mustUint(pending[1])
					switch pending[0] {
					case "A": // A first last gen
						b, g := mustUint(pending[2]), mustUint(pending[3])
						for q := a; q <= b; q++ {
							gens[q] = g
						}
						last = b
					case "T": // T seq
						for q := range gens {
							if q > a {
								delete(gens, q)
							}
						}
						last = a
					case "R": // R next
						clear(gens)
						last = a - 1
					}
					pending = nil
				}
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				if !killed {
					t.Fatalf("the child stopped after %d operations", ops)
				}
				l, rep := mustOpen(t, Config{Dir: dir, Name: "kill", SegmentBytes: 4 << 10, Sync: SyncNever})
				if len(rep.Corrupt) != 0 {
					t.Fatalf("report %+v", rep)
				}
				st := l.State()
				want := maps(gens)
				bad := func() { t.Fatalf("LastSeq %d, confirmed %d, in flight %v", st.LastSeq, last, pending) }
				op := ""
				if pending != nil {
					op = pending[0]
				}
				switch op {
				case "":
					if st.LastSeq != last {
						bad()
					}
				case "A": // any part of the batch
					if st.LastSeq < last || st.LastSeq > mustUint(pending[2]) {
						bad()
					}
					for q := last + 1; q <= st.LastSeq; q++ {
						want[q] = mustUint(pending[3])
					}
				case "T": // a prefix of the old log down to the cut
					if st.LastSeq < mustUint(pending[1]) || st.LastSeq > last {
						bad()
					}
					for q := range want {
						if q > st.LastSeq {
							delete(want, q)
						}
					}
				case "R": // the old log, all of it dead, or the new one
					next := mustUint(pending[1])
					switch {
					case st.Msgs == 0 && (st.LastSeq == last || st.LastSeq == next-1):
						clear(want)
					case st.LastSeq != last:
						bad()
					}
				}
				checkGens(t, l, want)
				t.Logf("%d operations, in flight %v, LastSeq %d, %d live, truncated %d bytes", ops, pending, st.LastSeq, st.Msgs, rep.TruncatedBytes)
			})
		}
	}
}

func mustUint(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func maps(m map[uint64]uint64) map[uint64]uint64 {
	c := make(map[uint64]uint64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestKill9TruncateResetChild is the writer TestKill9TruncateReset kills.
func TestKill9TruncateResetChild(t *testing.T) {
	dir := os.Getenv("TERN_STORE_CHILD")
	if dir == "" {
		t.Skip("run by TestKill9TruncateReset")
	}
	policy, _ := ParseSyncPolicy(os.Getenv("TERN_STORE_POLICY"))
	seed, _ := strconv.ParseUint(os.Getenv("TERN_STORE_SEED"), 10, 64)
	l, _, err := Open(Config{Dir: dir, Name: "kill", SegmentBytes: 4 << 10, Sync: policy})
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(w, format+"\n", args...)
		w.Flush()
	}
	x := seed*7919 + 1
	rnd := func(n uint64) uint64 {
		x = x*6364136223846793005 + 1442695040888963407
		return (x >> 33) % n
	}
	for gen := uint64(1); ; gen++ {
		switch r := rnd(10); {
		case r < 7 || l.last < 10:
			n := 1 + rnd(40)
			say("A %d %d %d", l.last+1, l.last+n, gen)
			for i := uint64(0); i < n; i++ {
				seq := l.last + uint64(l.npend) + 1
				if _, err := l.Append([]byte("s"), nil, genPayload(seq, gen), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
		case r < 9 && l.first <= l.last:
			seq := l.last - rnd(min(l.last-l.first+1, 200))
			say("T %d - -", seq)
			if err := l.TruncateAfter(seq); err != nil {
				t.Fatal(err)
			}
		default:
			next := 1 + rnd(l.last+100)
			say("R %d - -", next)
			if err := l.Reset(next); err != nil {
				t.Fatal(err)
			}
		}
		say("ok")
	}
}
