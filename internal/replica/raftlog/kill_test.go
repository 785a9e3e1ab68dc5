package raftlog

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tern-mq/tern/internal/store"
)

// state is everything raft can read back from a Storage.
type state struct {
	dummy, dummyTerm, last uint64
	ents                   []*pb.Entry // dummy+1 … last
	hs                     *pb.HardState
	snap                   *pb.Snapshot
}

func capture(t *testing.T, s raft.Storage) state {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	x := state{dummy: first - 1, last: last, hs: hs}
	if x.dummyTerm, err = s.Term(first - 1); err != nil {
		t.Fatal(err)
	}
	if last >= first {
		if x.ents, err = s.Entries(first, last+1, noLimit); err != nil {
			t.Fatal(err)
		}
	}
	if x.snap, err = s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if x.hs != nil {
		x.hs = proto.Clone(x.hs).(*pb.HardState)
	}
	return x
}

func (x state) term(i uint64) uint64 {
	if i == x.dummy {
		return x.dummyTerm
	}
	return x.ents[i-x.dummy-1].GetTerm()
}

// matches says why the recovered state r is not x, or "". low is the lowest
// last index allowed (an append that replaces a suffix may be cut short
// anywhere from the old last index down to the entry before the first one it
// replaces, or on its way to the new one); compact allows any dummy from
// before's to x's.
func (r state) matches(x, before state, low uint64, compact bool) string {
	hs := x.hs
	if hs != nil && hs.GetCommit() < r.dummy {
		// Open raises a commit below the first index (an install whose hard
		// state did not follow).
		hs = proto.Clone(hs).(*pb.HardState)
		hs.Commit = new(r.dummy)
	}
	switch {
	case !proto.Equal(r.hs, hs):
		return fmt.Sprintf("hard state %v, want %v", r.hs, hs)
	case !proto.Equal(r.snap, x.snap):
		return fmt.Sprintf("snapshot %v, want %v", r.snap.GetMetadata(), x.snap.GetMetadata())
	}
	switch {
	case compact && r.dummy >= before.dummy && r.dummy <= x.dummy:
		// the marker first, then the purge: any point in between, with the
		// entries as they were
		if r.dummyTerm != before.term(r.dummy) {
			return fmt.Sprintf("dummy %d has term %d", r.dummy, r.dummyTerm)
		}
		x = before
	case r.dummy != x.dummy || r.dummyTerm != x.dummyTerm:
		return fmt.Sprintf("dummy %d (term %d), want %d (term %d)", r.dummy, r.dummyTerm, x.dummy, x.dummyTerm)
	}
	if r.last < low || r.last > x.last {
		return fmt.Sprintf("last index %d, want %d…%d", r.last, low, x.last)
	}
	for _, e := range r.ents {
		i := e.GetIndex()
		if i <= x.dummy {
			return fmt.Sprintf("entry %d at or below the dummy %d", i, x.dummy)
		}
		if !proto.Equal(e, x.ents[i-x.dummy-1]) {
			return fmt.Sprintf("entry %d is %v, want %v", i, e, x.ents[i-x.dummy-1])
		}
	}
	return ""
}

// TestKill9 runs the generated sequence of operations in a child process that
// syncs after each one and says so, kills it with SIGKILL at a random moment,
// and reopens its log: everything the child synced is there (the hard state,
// the snapshot, the entries, nothing after a hole, all of it consistent), and
// the operation in flight is either not done, done, or cut where it may be (an
// append that replaces a suffix may leave the log ending anywhere from the
// replaced entries to the new ones; a compaction anywhere between the two first
// indexes).
func TestKill9(t *testing.T) {
	if os.Getenv("TERN_RAFTLOG_CHILD") != "" {
		return
	}
	for _, policy := range []store.SyncPolicy{store.SyncNever, store.SyncInterval, store.SyncAlways} {
		for round := 0; round < 3; round++ {
			seed := uint64(round*3) + uint64(policy)
			t.Run(fmt.Sprintf("%s/%d", policy, round), func(t *testing.T) {
				dir := t.TempDir()
				cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$")
				cmd.Env = append(os.Environ(), "TERN_RAFTLOG_CHILD="+dir, "TERN_RAFTLOG_POLICY="+policy.String(),
					"TERN_RAFTLOG_SEED="+strconv.FormatUint(seed, 10))
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				stopAt := 20 + rand.IntN(300)
				synced, begun := -1, -1
				killed := false
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					f := strings.Fields(sc.Text())
					if len(f) != 2 || (f[0] != "b" && f[0] != "s") {
						t.Fatalf("child says %q", sc.Text())
					}
					k, _ := strconv.Atoi(f[1])
					if f[0] == "b" {
						begun = k
					} else {
						synced = k
					}
					if synced >= stopAt && !killed {
						// Read on to EOF: the child's last words are in the pipe.
						cmd.Process.Signal(syscall.SIGKILL)
						killed = true
					}
				}
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				if !killed {
					t.Fatalf("the child stopped after %d operations", synced+1)
				}

				// Replay the same operations on a MemoryStorage.
				ms := raft.NewMemoryStorage()
				g := newGen(seed)
				var last op
				for k := 0; k <= synced; k++ {
					last = g.next(ms)
					_, err := last.apply(ms)
					g.after(last, err)
				}
				before := capture(t, ms)
				after, kind := before, ""
				lowBefore, lowAfter := before.last, before.last
				if begun > synced {
					o := g.next(ms)
					_, err := o.apply(ms)
					g.after(o, err)
					after, kind = capture(t, ms), o.kind
					switch {
					case err != nil:
						after = before
					case kind == "append":
						at := max(o.ents[0].GetIndex(), before.dummy+1)
						lowBefore, lowAfter = min(before.last, at-1), min(before.last, at-1)
					default:
						lowAfter = after.last
					}
				}

				l, rep, err := Open(Config{Dir: dir, Name: "kill", Sync: store.SyncNever, SegmentBytes: 8192})
				if err != nil {
					t.Fatalf("Open after %d synced operations (in flight: %s): %v", synced+1, kind, err)
				}
				defer l.Close()
				r := capture(t, l)
				why := r.matches(before, before, lowBefore, false)
				if why != "" {
					why2 := r.matches(after, before, lowAfter, kind == "compact")
					if why2 != "" {
						t.Fatalf("after %d synced operations (in flight: %s): not the state before (%s) nor after (%s)", synced+1, kind, why, why2)
					}
				}
				t.Logf("killed after %d synced operations, in flight %q (%s): first index %d, last %d, torn tail %d bytes, install finished %v",
					synced+1, kind, map[bool]string{true: "not done", false: "done"}[why == ""], r.dummy+1, r.last, rep.TruncatedBytes, rep.FinishedInstall)
			})
		}
	}
}

// TestKill9Child is the process TestKill9 kills: the generated operations on a
// Log, each followed by Sync, announced before and confirmed after.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("TERN_RAFTLOG_CHILD")
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	policy, _ := store.ParseSyncPolicy(os.Getenv("TERN_RAFTLOG_POLICY"))
	seed, _ := strconv.ParseUint(os.Getenv("TERN_RAFTLOG_SEED"), 10, 64)
	cfg := Config{Dir: dir, Name: "kill", Sync: policy, SegmentBytes: 8192, CacheBytes: 4096}
	l, _, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	ms := raft.NewMemoryStorage()
	g := newGen(seed)
	for k := 0; ; k++ {
		o := g.next(ms)
		fmt.Fprintf(w, "b %d\n", k)
		w.Flush()
		_, e1 := o.apply(ms)
		g.after(o, e1)
		switch o.kind {
		case "reopen":
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l, _, err = Open(cfg); err != nil {
				t.Fatal(err)
			}
		default:
			if _, e2 := o.apply(l); !sameErr(e1, e2) {
				t.Fatalf("%s: %v, want %v", o, e2, e1)
			}
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "s %d\n", k)
		w.Flush()
	}
}
