package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// memStorage is a raft.MemoryStorage whose writes become durable only at Sync:
// the durable copy is what a restart (crash) keeps.
type memStorage struct {
	*raft.MemoryStorage
	durable *raft.MemoryStorage
	pending []func(*raft.MemoryStorage)
	syncs   atomic.Int64
	failing error         // Sync returns it
	delay   time.Duration // each Sync takes this long (a disk's fsync)
}

func newMemStorage() *memStorage {
	return &memStorage{MemoryStorage: raft.NewMemoryStorage(), durable: raft.NewMemoryStorage()}
}

func (s *memStorage) Append(ents []*raftpb.Entry) error {
	if err := s.MemoryStorage.Append(ents); err != nil {
		return err
	}
	cp := append([]*raftpb.Entry(nil), ents...)
	s.pending = append(s.pending, func(d *raft.MemoryStorage) { must(d.Append(cp)) })
	return nil
}

func (s *memStorage) SetHardState(st *raftpb.HardState) error {
	if err := s.MemoryStorage.SetHardState(st); err != nil {
		return err
	}
	cp := proto.Clone(st).(*raftpb.HardState)
	s.pending = append(s.pending, func(d *raft.MemoryStorage) { must(d.SetHardState(cp)) })
	return nil
}

func (s *memStorage) ApplySnapshot(snap *raftpb.Snapshot) error {
	if err := s.MemoryStorage.ApplySnapshot(snap); err != nil {
		return err
	}
	s.pending = append(s.pending, func(d *raft.MemoryStorage) { must(d.ApplySnapshot(snap)) })
	return nil
}

func (s *memStorage) CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	snap, err := s.MemoryStorage.CreateSnapshot(i, cs, data)
	if err != nil {
		return nil, err
	}
	s.pending = append(s.pending, func(d *raft.MemoryStorage) {
		if _, err := d.CreateSnapshot(i, cs, data); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			panic(err)
		}
	})
	return snap, nil
}

func (s *memStorage) Compact(i uint64) error {
	if err := s.MemoryStorage.Compact(i); err != nil {
		return err
	}
	s.pending = append(s.pending, func(d *raft.MemoryStorage) {
		if err := d.Compact(i); err != nil && !errors.Is(err, raft.ErrCompacted) {
			panic(err)
		}
	})
	return nil
}

func (s *memStorage) Sync() error {
	if s.failing != nil {
		return s.failing
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	for _, f := range s.pending {
		f(s.durable)
	}
	clear(s.pending)
	s.pending = s.pending[:0]
	s.syncs.Add(1)
	return nil
}

func (s *memStorage) syncsAtomic() int { return int(s.syncs.Load()) }

// restart returns the storage a crashed node comes back with: what was synced.
func (s *memStorage) restart() *memStorage {
	live := raft.NewMemoryStorage()
	d := s.durable
	snap, _ := d.Snapshot()
	if snap.GetMetadata().GetIndex() > 0 {
		must(live.ApplySnapshot(snap))
	}
	hs, _, _ := d.InitialState()
	if !raft.IsEmptyHardState(hs) {
		must(live.SetHardState(hs))
	}
	first, _ := d.FirstIndex()
	last, _ := d.LastIndex()
	if last >= first {
		ents, err := d.Entries(first, last+1, math.MaxUint64)
		must(err)
		must(live.Append(ents))
	}
	return &memStorage{MemoryStorage: live, durable: d}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// chainSM is a state machine whose state is a hash chain over the applied
// entries: two replicas with the same digest at an index applied the same
// entries in the same order.
type chainSM struct {
	applied uint64
	digest  uint64
	count   uint64
	onApply func(e Entry, digest uint64) // for checks
	fail    error
}

func chain(d uint64, e Entry) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], d)
	binary.LittleEndian.PutUint64(b[8:], e.Index)
	h.Write(b[:])
	h.Write(e.Data)
	return h.Sum64()
}

func (m *chainSM) Apply(ents []Entry) error {
	if m.fail != nil {
		return m.fail
	}
	for _, e := range ents {
		if e.Index <= m.applied {
			return fmt.Errorf("entry %d applied after %d", e.Index, m.applied)
		}
		m.digest = chain(m.digest, e)
		m.count++
		m.applied = e.Index
		if m.onApply != nil {
			m.onApply(e, m.digest)
		}
	}
	return nil
}

func (m *chainSM) Snapshot() ([]byte, error) {
	b := binary.LittleEndian.AppendUint64(nil, m.applied)
	b = binary.LittleEndian.AppendUint64(b, m.digest)
	return binary.LittleEndian.AppendUint64(b, m.count), nil
}

func (m *chainSM) Restore(data []byte) error {
	if len(data) == 0 {
		m.applied, m.digest, m.count = 0, 0, 0
		return nil
	}
	if len(data) != 24 {
		return fmt.Errorf("bad snapshot of %d bytes", len(data))
	}
	m.applied = binary.LittleEndian.Uint64(data)
	m.digest = binary.LittleEndian.Uint64(data[8:])
	m.count = binary.LittleEndian.Uint64(data[16:])
	return nil
}
