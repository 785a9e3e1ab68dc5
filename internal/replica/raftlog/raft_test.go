package raftlog

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tern-mq/tern/internal/store"
)

// member is one replica of the test cluster: a RawNode on a Log, driven the
// way the package comment says, with a state machine that lists the data of
// the entries it applied.
type member struct {
	id       uint64
	cfg      Config
	log      *Log
	rn       *raft.RawNode
	cs       *pb.ConfState
	applied  []string // the state machine
	index    uint64   // last applied index
	installs int      // snapshots received from the leader
}

var quietLogger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

func (m *member) start(t *testing.T, peers []raft.Peer) {
	t.Helper()
	l, _, err := Open(m.cfg)
	if err != nil {
		t.Fatalf("member %d: Open: %v", m.id, err)
	}
	m.log = l
	// The state machine starts from the snapshot, as after a restart.
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m.applied, m.index = nil, snap.GetMetadata().GetIndex()
	m.cs = snap.GetMetadata().GetConfState()
	if len(snap.Data) > 0 {
		if err := json.Unmarshal(snap.Data, &m.applied); err != nil {
			t.Fatal(err)
		}
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: m.id, ElectionTick: 10, HeartbeatTick: 1, Storage: l, Applied: m.index,
		MaxSizePerMsg: 16 << 10, MaxInflightMsgs: 64, PreVote: true, CheckQuorum: true,
		Logger: quietLogger,
	})
	if err != nil {
		t.Fatalf("member %d: NewRawNode: %v", m.id, err)
	}
	if last, _ := l.LastIndex(); last == 0 && peers != nil {
		if err := rn.Bootstrap(peers); err != nil {
			t.Fatal(err)
		}
	}
	m.rn = rn
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	if err := m.log.Close(); err != nil {
		t.Fatalf("member %d: Close: %v", m.id, err)
	}
	m.log, m.rn = nil, nil
}

func (m *member) up() bool { return m.rn != nil }

// ready handles every Ready: persist (snapshot, entries, hard state, Sync),
// then send, then apply, then compact now and then.
func (m *member) ready(t *testing.T, send func(*pb.Message)) {
	t.Helper()
	for m.rn.HasReady() {
		rd := m.rn.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := m.log.ApplySnapshot(rd.Snapshot); err != nil {
				t.Fatalf("member %d: ApplySnapshot: %v", m.id, err)
			}
			m.applied = nil
			if err := json.Unmarshal(rd.Snapshot.Data, &m.applied); err != nil {
				t.Fatal(err)
			}
			m.index = rd.Snapshot.GetMetadata().GetIndex()
			m.cs = rd.Snapshot.GetMetadata().GetConfState()
			m.installs++
		}
		if err := m.log.Append(rd.Entries); err != nil {
			t.Fatalf("member %d: Append: %v", m.id, err)
		}
		if !raft.IsEmptyHardState(rd.HardState) {
			if err := m.log.SetHardState(rd.HardState); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.log.Sync(); err != nil {
			t.Fatal(err)
		}
		for _, msg := range rd.Messages {
			send(msg)
		}
		for _, e := range rd.CommittedEntries {
			if e.GetIndex() <= m.index {
				continue
			}
			switch e.GetType() {
			case pb.EntryType_EntryConfChange:
				var cc pb.ConfChange
				if err := proto.Unmarshal(e.Data, &cc); err != nil {
					t.Fatal(err)
				}
				m.cs = m.rn.ApplyConfChange(&cc)
			case pb.EntryType_EntryNormal:
				if len(e.Data) > 0 {
					m.applied = append(m.applied, string(e.Data))
				}
			}
			m.index = e.GetIndex()
		}
		// Snapshot every 40 applied entries and keep 10 behind it, so that
		// a member that was away long needs a snapshot.
		if snap, _ := m.log.Snapshot(); m.index >= snap.GetMetadata().GetIndex()+40 {
			data, _ := json.Marshal(m.applied)
			if _, err := m.log.CreateSnapshot(m.index, m.cs, data); err != nil {
				t.Fatalf("member %d: CreateSnapshot(%d): %v", m.id, m.index, err)
			}
			if first, _ := m.log.FirstIndex(); m.index > first+10 {
				if err := m.log.Compact(m.index - 10); err != nil {
					t.Fatalf("member %d: Compact: %v", m.id, err)
				}
			}
		}
		m.rn.Advance(rd)
	}
}

// TestRaftCluster runs three RawNodes, each on its own Log on disk, with
// messages passed in memory: 1,000 proposals, while members are restarted from
// their directories (the leader among them) and one is away long enough to
// come back by snapshot. At the end every member has applied the same entries
// in the same order, each proposal among them.
func TestRaftCluster(t *testing.T) {
	const proposals = 1000
	rng := rand.New(rand.NewPCG(7, 11))
	dir := t.TempDir()
	peers := []raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}
	ms := make([]*member, 3)
	for i := range ms {
		policy := []store.SyncPolicy{store.SyncNever, store.SyncInterval, store.SyncAlways}[i]
		ms[i] = &member{id: uint64(i + 1), cfg: Config{
			Dir: filepath.Join(dir, fmt.Sprint(i+1)), Name: fmt.Sprintf("g/%d", i+1),
			Sync: policy, SegmentBytes: 4 << 10, CacheBytes: 8 << 10,
		}}
		ms[i].start(t, peers)
	}
	defer func() {
		for _, m := range ms {
			if m.up() {
				m.stop(t)
			}
		}
	}()
	var queue []*pb.Message
	send := func(msg *pb.Message) { queue = append(queue, msg) }
	deliver := func() {
		q := queue
		queue = nil
		for _, msg := range q {
			to := ms[msg.GetTo()-1]
			if !to.up() {
				if msg.GetType() == pb.MessageType_MsgSnap {
					if from := ms[msg.GetFrom()-1]; from.up() {
						from.rn.ReportSnapshot(to.id, raft.SnapshotFailure)
					}
				}
				continue
			}
			if err := to.rn.Step(msg); err != nil && err != raft.ErrStepPeerNotFound {
				t.Fatalf("member %d: Step: %v", to.id, err)
			}
			if msg.GetType() == pb.MessageType_MsgSnap {
				if from := ms[msg.GetFrom()-1]; from.up() {
					from.rn.ReportSnapshot(to.id, raft.SnapshotFinish)
				}
			}
		}
	}
	leader := func() *member {
		for _, m := range ms {
			if m.up() && m.rn.BasicStatus().RaftState == raft.StateLeader {
				return m
			}
		}
		return nil
	}
	want := map[string]bool{}
	next := 0 // proposals made
	restarts, nextRestart := 0, 100
	away := -1 // member kept down for a while
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		if round > 200_000 || time.Now().After(deadline) {
			t.Fatalf("no convergence after %d rounds: %d proposals, applied %d/%d/%d", round, next,
				len(ms[0].applied), len(ms[1].applied), len(ms[2].applied))
		}
		for _, m := range ms {
			if m.up() {
				m.rn.Tick()
			}
		}
		if ld := leader(); ld != nil && next < proposals {
			for k := 0; k < 1+rng.IntN(8) && next < proposals; k++ {
				v := fmt.Sprintf("p%04d", next)
				if ld.rn.Propose([]byte(v)) == nil {
					want[v] = true
					next++
				}
			}
		}
		for range 3 {
			for _, m := range ms {
				if m.up() {
					m.ready(t, send)
				}
			}
			deliver()
		}
		// Restarts: now and then a member (the leader too) closes its log
		// and opens it again; one member stays away for a while.
		switch {
		case next >= nextRestart:
			// Every 100 proposals: the leader, then members at random.
			m := leader()
			if restarts%2 == 1 || m == nil {
				m = ms[rng.IntN(2)]
			}
			m.stop(t)
			m.start(t, nil)
			restarts++
			nextRestart += 100
		case next >= 300 && away == -1:
			away = 3
			ms[2].stop(t)
		case next >= 650 && away == 3 && !ms[2].up():
			ms[2].start(t, nil)
			restarts++
		}
		if next == proposals && allApplied(ms, want) {
			break
		}
	}
	for _, m := range ms[1:] {
		if !slices.Equal(m.applied, ms[0].applied) {
			t.Fatalf("member %d applied %d entries, member 1 %d: they differ", m.id, len(m.applied), len(ms[0].applied))
		}
	}
	snapshotsReceived := ms[0].installs + ms[1].installs + ms[2].installs
	if restarts == 0 || ms[2].installs == 0 {
		t.Fatalf("%d restarts, %d snapshots received: the run did not test what it should", restarts, snapshotsReceived)
	}
	// And once more, everyone from disk: the state machines rebuilt from
	// snapshot and log agree.
	for _, m := range ms {
		m.stop(t)
		m.start(t, nil)
	}
	for round := 0; round < 2000 && !(allApplied(ms, want) && sameApplied(ms)); round++ {
		for _, m := range ms {
			m.rn.Tick()
		}
		for range 3 {
			for _, m := range ms {
				m.ready(t, send)
			}
			deliver()
		}
	}
	if !allApplied(ms, want) || !sameApplied(ms) {
		t.Fatal("after restarting every member the state machines differ")
	}
	t.Logf("%d proposals, %d applied, %d restarts, %d snapshots received", next, len(ms[0].applied), restarts, snapshotsReceived)
}

func allApplied(ms []*member, want map[string]bool) bool {
	for _, m := range ms {
		if !m.up() {
			return false
		}
		seen := 0
		have := map[string]bool{}
		for _, v := range m.applied {
			if want[v] && !have[v] {
				have[v] = true
				seen++
			}
		}
		if seen != len(want) {
			return false
		}
	}
	return true
}

func sameApplied(ms []*member) bool {
	for _, m := range ms[1:] {
		if strings.Join(m.applied, ",") != strings.Join(ms[0].applied, ",") {
			return false
		}
	}
	return true
}
