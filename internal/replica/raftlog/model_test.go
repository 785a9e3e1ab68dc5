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
	g := newGen(seed)
	counts := map[string]int{}
	for step := 0; step < steps; step++ {
		o := g.next(ms)
		s1, e1 := o.apply(ms)
		var s2 *pb.Snapshot
		var e2 error
		switch o.kind {
		case "reopen":
			l = reopen(t, l)
		case "sync":
			e2 = l.Sync()
		default:
			s2, e2 = o.apply(l)
		}
		if !sameErr(e1, e2) || !proto.Equal(s1, s2) {
			t.Fatalf("step %d: %s = %v, %v; want %v, %v", step, o, s2, e2, s1, e1)
		}
		g.after(o, e1)
		if e1 == nil {
			counts[o.kind]++
		}
		agree(t, step, l, ms, rng)
	}
	if g.hsNext != nil {
		// An install's Ready also carries its hard state; without it Open
		// would raise the commit to the first index (as raft needs).
		o := g.next(ms)
		if err := errors.Join(ms.SetHardState(o.hs), l.SetHardState(o.hs)); err != nil {
			t.Fatal(err)
		}
	}
	l = reopen(t, l)
	agree(t, -1, l, ms, rng)
	t.Logf("operations: %v", counts)
}
