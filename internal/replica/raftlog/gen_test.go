package raftlog

import (
	"fmt"
	"math/rand/v2"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rawStorage is Storage without Sync: what raft.MemoryStorage has too.
type rawStorage interface {
	raft.Storage
	Append(ents []*pb.Entry) error
	SetHardState(st *pb.HardState) error
	ApplySnapshot(snap *pb.Snapshot) error
	CreateSnapshot(i uint64, cs *pb.ConfState, data []byte) (*pb.Snapshot, error)
	Compact(compactIndex uint64) error
}

var _ rawStorage = (*raft.MemoryStorage)(nil)

// op is one step of a generated sequence.
type op struct {
	kind  string // append, hardstate, snapshot, compact, install, reopen, sync, none
	ents  []*pb.Entry
	hs    *pb.HardState
	index uint64 // snapshot, compact
	cs    *pb.ConfState
	data  []byte
	snap  *pb.Snapshot
}

func (o op) String() string {
	switch o.kind {
	case "append":
		return fmt.Sprintf("Append(%d…%d)", o.ents[0].GetIndex(), o.ents[len(o.ents)-1].GetIndex())
	case "hardstate":
		return fmt.Sprintf("SetHardState(%v)", o.hs)
	case "snapshot":
		return fmt.Sprintf("CreateSnapshot(%d)", o.index)
	case "compact":
		return fmt.Sprintf("Compact(%d)", o.index)
	case "install":
		return fmt.Sprintf("ApplySnapshot(%d)", o.snap.GetMetadata().GetIndex())
	}
	return o.kind
}

// apply runs o on s: what CreateSnapshot returned, and the error.
func (o op) apply(s rawStorage) (*pb.Snapshot, error) {
	switch o.kind {
	case "append":
		return nil, s.Append(o.ents)
	case "hardstate":
		return nil, s.SetHardState(o.hs)
	case "snapshot":
		return s.CreateSnapshot(o.index, o.cs, o.data)
	case "compact":
		return nil, s.Compact(o.index)
	case "install":
		return nil, s.ApplySnapshot(proto.Clone(o.snap).(*pb.Snapshot))
	}
	return nil, nil
}

// gen makes a seeded sequence of the operations a raft host makes: appends
// that overlap and replace the log's suffix, hard states, snapshots created and
// installed, compactions, restarts. It keeps raft's own rules (the commit never
// goes back, committed entries are never replaced, snapshots and compactions
// stay at or below the commit, an install is followed by the hard state of its
// Ready), which is what Open checks. It reads the state it builds on from a
// MemoryStorage that went through the same steps, so two processes that
// replay the seed get the same sequence.
type gen struct {
	rng          *rand.Rand
	term, commit uint64
	hsNext       *pb.HardState // comes next: the hard state of an install's Ready
}

func newGen(seed uint64) *gen {
	return &gen{rng: rand.New(rand.NewPCG(seed, 0x6e6)), term: 1}
}

// after tells the generator how o went on the model.
func (g *gen) after(o op, err error) {
	if o.kind == "install" && err == nil {
		g.commit = o.snap.GetMetadata().GetIndex()
		g.hsNext = &pb.HardState{Term: new(g.term), Commit: new(g.commit)}
	}
}

func (g *gen) next(ms *raft.MemoryStorage) op {
	rng := g.rng
	if g.hsNext != nil {
		hs := g.hsNext
		g.hsNext = nil
		return op{kind: "hardstate", hs: hs}
	}
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	s, _ := ms.Snapshot()
	snapIndex := s.GetMetadata().GetIndex()
	commit := g.commit
	switch r := rng.IntN(100); {
	case r < 40: // append, often overlapping the suffix after the commit
		at := last + 1
		if rng.IntN(3) == 0 {
			lo := max(commit+1, first) - min(max(commit+1, first), uint64(rng.IntN(3))) // sometimes below the first index
			at = lo + uint64(rng.IntN(int(last+2-lo)))
		}
		if rng.IntN(5) == 0 {
			g.term++
		}
		n := 1 + rng.IntN(12)
		if at+uint64(n) <= commit {
			n = int(commit-at) + 1 // the committed entries stay
		}
		batch := make([]*pb.Entry, n)
		for k := range batch {
			i := at + uint64(k)
			batch[k] = genEntry(rng, i, g.term)
			if i >= first && i <= commit {
				// What is below the first index is ignored; what is at or
				// below the commit must be what the log has.
				e, _ := ms.Entries(i, i+1, noLimit)
				batch[k] = e[0]
			}
		}
		return op{kind: "append", ents: batch}
	case r < 55: // hard state
		if last > commit {
			g.commit += uint64(rng.IntN(int(last-commit) + 1))
		}
		st := &pb.HardState{Term: new(g.term), Vote: new(uint64(rng.IntN(4))), Commit: new(g.commit)}
		if rng.IntN(8) == 0 {
			st.Vote = nil
		}
		return op{kind: "hardstate", hs: st}
	case r < 63: // a snapshot of what is committed (or an out-of-date one)
		lo := max(snapIndex, first-1)
		i := lo + uint64(rng.IntN(int(commit+1-min(lo, commit))+1))
		if rng.IntN(6) == 0 {
			i = snapIndex - min(snapIndex, uint64(rng.IntN(3)))
		}
		if i > commit || (i < first-1 && i > snapIndex) {
			return op{kind: "none"}
		}
		return op{kind: "snapshot", index: i, cs: genConfState(rng), data: genData(rng)}
	case r < 71: // compaction up to the commit (or at or below the first index)
		ci := first + uint64(rng.IntN(int(commit+1-min(first, commit+1))+1))
		if rng.IntN(6) == 0 {
			ci = first - uint64(rng.IntN(2))
		}
		if ci > max(commit, first-1) {
			return op{kind: "none"}
		}
		return op{kind: "compact", index: ci}
	case r < 75: // a snapshot from the leader (or an out-of-date one)
		idx := max(snapIndex, commit) + 1 + uint64(rng.IntN(30))
		if rng.IntN(5) == 0 {
			idx = snapIndex - min(snapIndex, uint64(rng.IntN(2)))
			if idx > 0 && idx <= commit {
				idx = snapIndex
			}
		}
		if rng.IntN(3) == 0 {
			g.term++
		}
		snap := &pb.Snapshot{Data: genData(rng), Metadata: &pb.SnapshotMetadata{
			Index: new(idx), Term: new(g.term), ConfState: genConfState(rng)}}
		if idx == 0 {
			if commit > 0 {
				return op{kind: "none"}
			}
			snap.Metadata.Term = new(uint64(0))
		}
		return op{kind: "install", snap: snap}
	case r < 80:
		return op{kind: "reopen"}
	case r < 85:
		return op{kind: "sync"}
	}
	return op{kind: "none"}
}
