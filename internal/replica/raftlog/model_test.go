package raftlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tern-mq/tern/internal/store"
)

// sameErr reports whether two errors are the same raft outcome: both nil, or
// both the same raft sentinel.
func sameErr(a, b error) bool {
	for _, s := range []error{raft.ErrCompacted, raft.ErrUnavailable, raft.ErrSnapOutOfDate} {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return (a == nil) == (b == nil)
}

// agree checks every raft.Storage method of l against ms.
func agree(t *testing.T, step int, l *Log, ms *raft.MemoryStorage, rng *rand.Rand) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: %s", step, fmt.Sprintf(format, args...))
	}
	// InitialState first: MemoryStorage fills in its ConfState there.
	hs1, cs1, err1 := ms.InitialState()
	hs2, cs2, err2 := l.InitialState()
	if err1 != nil || err2 != nil || !proto.Equal(hs1, hs2) || !proto.Equal(cs1, cs2) {
		fail("InitialState = %v %v %v, want %v %v %v", hs2, cs2, err2, hs1, cs1, err1)
	}
	first1, _ := ms.FirstIndex()
	first2, err := l.FirstIndex()
	last1, _ := ms.LastIndex()
	last2, err2 := l.LastIndex()
	if err != nil || err2 != nil || first1 != first2 || last1 != last2 {
		fail("FirstIndex, LastIndex = %d, %d (%v %v), want %d, %d", first2, last2, err, err2, first1, last1)
	}
	for i := first1 - min(first1, 3); i <= last1+2; i++ {
		t1, e1 := ms.Term(i)
		t2, e2 := l.Term(i)
		if t1 != t2 || !sameErr(e1, e2) {
			fail("Term(%d) = %d, %v; want %d, %v", i, t2, e2, t1, e1)
		}
	}
	entries := func(lo, hi, max uint64) {
		t.Helper()
		a, e1 := ms.Entries(lo, hi, max)
		b, e2 := l.Entries(lo, hi, max)
		if !sameErr(e1, e2) || len(a) != len(b) {
			fail("Entries(%d, %d, %d) = %d entries, %v; want %d, %v", lo, hi, max, len(b), e2, len(a), e1)
		}
		for k := range a {
			if !proto.Equal(a[k], b[k]) {
				fail("Entries(%d, %d, %d)[%d] = %v, want %v", lo, hi, max, k, b[k], a[k])
			}
		}
	}
	entries(first1, last1+1, noLimit)
	for n := 0; n < 6; n++ {
		lo := first1 - 1 + uint64(rng.IntN(int(last1-first1+3)))
		hi := lo + uint64(rng.IntN(int(last1+2-lo)))
		max := []uint64{0, 1, 60, 500, 5000, noLimit}[rng.IntN(6)]
		entries(lo, hi, max)
	}
	s1, err1 := ms.Snapshot()
	s2, err2 := l.Snapshot()
	if err1 != nil || err2 != nil || !proto.Equal(s1, s2) {
		fail("Snapshot = %v, %v; want %v, %v", s2, err2, s1, err1)
	}
}

// genEntry makes entry i of term with the field variety raft and its users
// produce: Type unset, normal or a conf change; Data nil, empty, small or
// larger than the cache.
func genEntry(rng *rand.Rand, i, term uint64) *pb.Entry {
	e := &pb.Entry{Index: new(i), Term: new(term)}
	switch rng.IntN(6) {
	case 0:
		e.Type = pb.EntryType_EntryNormal.Enum()
	case 1:
		e.Type = pb.EntryType_EntryConfChangeV2.Enum()
	}
	switch r := rng.IntN(20); {
	case r == 0:
	case r == 1:
		e.Data = []byte{}
	case r == 2:
		e.Data = make([]byte, 3000+rng.IntN(3000))
	default:
		e.Data = make([]byte, rng.IntN(200))
	}
	for k := range e.Data {
		e.Data[k] = byte(rng.Uint32())
	}
	return e
}

func genConfState(rng *rand.Rand) *pb.ConfState {
	if rng.IntN(3) == 0 {
		return nil
	}
	cs := &pb.ConfState{}
	for id := uint64(1); id <= 5; id++ {
		switch rng.IntN(3) {
		case 0:
			cs.Voters = append(cs.Voters, id)
		case 1:
			cs.Learners = append(cs.Learners, id)
		}
	}
	if rng.IntN(2) == 0 {
		cs.AutoLeave = new(false)
	}
	return cs
}

func genData(rng *rand.Rand) []byte {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rng.IntN(2000))
	for k := range b {
		b[k] = byte(rng.Uint32())
	}
	return b
}

// TestAgainstMemoryStorage applies a seeded sequence of the operations a raft
// host makes (appends that overlap and replace the log's suffix, hard states,
// snapshots created and installed, compactions, restarts) to a Log and to
// raft.MemoryStorage, and checks after every step that every raft.Storage
// method agrees. The sequence keeps raft's own rules (commit never goes back,
// committed entries are never replaced, snapshots and compactions stay at or
// below the commit), which is what Open checks. More seeds:
// TERN_RAFTLOG_SEEDS=200 go test -run AgainstMemoryStorage.
func TestAgainstMemoryStorage(t *testing.T) {
	seeds := 4
	if n, err := strconv.Atoi(os.Getenv("TERN_RAFTLOG_SEEDS")); err == nil {
		seeds = n
	}
	policies := []store.SyncPolicy{store.SyncNever, store.SyncInterval, store.SyncAlways}
	for seed := 0; seed < seeds; seed++ {
		policy := policies[seed%len(policies)]
		t.Run(fmt.Sprintf("%d/%s", seed, policy), func(t *testing.T) {
			runModel(t, uint64(seed), policy, 500)
		})
	}
}

func runModel(t *testing.T, seed uint64, policy store.SyncPolicy, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x7e4))
	cfg := testConfig(t)
	cfg.Sync = policy
	cfg.SegmentBytes = 8192
	cfg.CacheBytes = 1500 + rng.IntN(6000)
	l := mustOpen(t, cfg)
	ms := raft.NewMemoryStorage()
	var term, commit uint64 = 1, 0
	snapIndex := func() uint64 { s, _ := ms.Snapshot(); return s.GetMetadata().GetIndex() }
	counts := map[string]int{}
	for step := 0; step < steps; step++ {
		first, _ := ms.FirstIndex()
		last, _ := ms.LastIndex()
		switch op := rng.IntN(100); {
		case op < 40: // append, often overlapping the suffix after the commit
			at := last + 1
			if rng.IntN(3) == 0 {
				lo := max(commit+1, first) - min(max(commit+1, first), uint64(rng.IntN(3))) // sometimes below the first index
				at = lo + uint64(rng.IntN(int(last+2-lo)))
			}
			if rng.IntN(5) == 0 {
				term++
			}
			n := 1 + rng.IntN(12)
			if at+uint64(n) <= commit {
				n = int(commit-at) + 1 // the committed entries stay
			}
			batch := make([]*pb.Entry, n)
			for k := range batch {
				batch[k] = genEntry(rng, at+uint64(k), term)
			}
			if at < first {
				// What is below the first index is ignored by both; what is
				// at or below the commit must be what the log has.
				for k := range batch {
					if i := at + uint64(k); i >= first && i <= commit {
						e, _ := ms.Entries(i, i+1, noLimit)
						batch[k] = e[0]
					}
				}
			}
			e1 := ms.Append(batch)
			e2 := l.Append(batch)
			if e1 != nil || e2 != nil {
				t.Fatalf("step %d: Append from %d: %v, want %v", step, at, e2, e1)
			}
			counts["append"]++
			if at <= last && at >= first {
				counts["replace"]++
			}
		case op < 55: // hard state
			if last > commit {
				commit += uint64(rng.IntN(int(last-commit) + 1))
			}
			st := &pb.HardState{Term: new(term), Vote: new(uint64(rng.IntN(4))), Commit: new(commit)}
			if rng.IntN(8) == 0 {
				st.Vote = nil
			}
			if err := errors.Join(ms.SetHardState(st), l.SetHardState(st)); err != nil {
				t.Fatalf("step %d: SetHardState: %v", step, err)
			}
			counts["hardstate"]++
		case op < 63: // snapshot of what is committed (or an out-of-date one)
			lo := max(snapIndex(), first-1)
			i := lo + uint64(rng.IntN(int(commit+1-min(lo, commit))+1))
			if rng.IntN(6) == 0 {
				i = snapIndex() - min(snapIndex(), uint64(rng.IntN(3)))
			}
			if i > commit || (i < first-1 && i > snapIndex()) {
				break
			}
			cs, data := genConfState(rng), genData(rng)
			s1, e1 := ms.CreateSnapshot(i, cs, data)
			s2, e2 := l.CreateSnapshot(i, cs, data)
			if !sameErr(e1, e2) || !proto.Equal(s1, s2) {
				t.Fatalf("step %d: CreateSnapshot(%d) = %v, %v; want %v, %v", step, i, s2, e2, s1, e1)
			}
			if e1 == nil {
				counts["snapshot"]++
			}
		case op < 71: // compaction up to the commit (or at or below the first index)
			ci := first + uint64(rng.IntN(int(commit+1-min(first, commit+1))+1))
			if rng.IntN(6) == 0 {
				ci = first - uint64(rng.IntN(2))
			}
			if ci > max(commit, first-1) {
				break
			}
			e1 := ms.Compact(ci)
			e2 := l.Compact(ci)
			if !sameErr(e1, e2) {
				t.Fatalf("step %d: Compact(%d) = %v, want %v", step, ci, e2, e1)
			}
			if e1 == nil {
				counts["compact"]++
			}
		case op < 75: // a snapshot from the leader
			idx := max(snapIndex(), commit) + 1 + uint64(rng.IntN(30))
			if rng.IntN(5) == 0 {
				idx = snapIndex() - min(snapIndex(), uint64(rng.IntN(2)))
				if idx > 0 && idx <= commit {
					idx = snapIndex()
				}
			}
			if rng.IntN(3) == 0 {
				term++
			}
			snap := &pb.Snapshot{Data: genData(rng), Metadata: &pb.SnapshotMetadata{
				Index: new(idx), Term: new(term), ConfState: genConfState(rng)}}
			if idx == 0 {
				if commit > 0 {
					break
				}
				snap.Metadata.Term = new(uint64(0))
			}
			e1 := ms.ApplySnapshot(proto.Clone(snap).(*pb.Snapshot))
			e2 := l.ApplySnapshot(proto.Clone(snap).(*pb.Snapshot))
			if !sameErr(e1, e2) {
				t.Fatalf("step %d: ApplySnapshot(%d) = %v, want %v", step, idx, e2, e1)
			}
			if e1 == nil {
				// raft's Ready that carries it also carries the commit.
				commit = idx
				st := &pb.HardState{Term: new(term), Commit: new(commit)}
				if err := errors.Join(ms.SetHardState(st), l.SetHardState(st)); err != nil {
					t.Fatal(err)
				}
				counts["install"]++
			}
		case op < 80:
			l = reopen(t, l)
			counts["reopen"]++
		case op < 85:
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		agree(t, step, l, ms, rng)
	}
	l = reopen(t, l)
	agree(t, -1, l, ms, rng)
	t.Logf("operations: %v", counts)
}
