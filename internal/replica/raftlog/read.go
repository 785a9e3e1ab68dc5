package raftlog

import (
	"errors"
	"fmt"
	"os"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// InitialState returns the saved hard state (nil if none was ever set) and the
// ConfState of the latest snapshot.
func (l *Log) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	var hs *pb.HardState
	if l.hs != nil {
		hs = proto.Clone(l.hs).(*pb.HardState)
	}
	return hs, pb.EnsureConfState(proto.Clone(l.snap.GetConfState()).(*pb.ConfState)), nil
}

// FirstIndex returns the index of the first entry Entries may return: the one
// after the dummy entry (the last compacted or the snapshot's index).
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.dummy + 1, nil
}

// LastIndex returns the index of the last entry (the dummy's if there is none).
func (l *Log) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.last, nil
}

// Term returns the term of entry i, for i from FirstIndex-1 to LastIndex. It
// never reads the disk.
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return 0, ErrClosed
	case i < l.dummy:
		return 0, raft.ErrCompacted
	case i > l.last:
		return 0, raft.ErrUnavailable
	}
	return l.terms.at(i), nil
}

// Entries returns the entries lo … hi-1, as many as fit in maxSize bytes (by
// proto.Size, as raft counts them) but at least one. Recent entries come from
// memory (the ones Append received, shared, not copied); older ones are read
// from the segments. The caller may append to the slice but must not change the
// entries.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, ErrClosed
	case lo <= l.dummy:
		return nil, raft.ErrCompacted
	case hi > l.last+1:
		return nil, l.unavailable("entries [%d, %d) asked for, the last is %d", lo, hi, l.last)
	case l.last == l.dummy:
		return nil, raft.ErrUnavailable
	case lo > hi:
		return nil, fmt.Errorf("raftlog %q: entries [%d, %d): %w", l.cfg.Name, lo, hi, raft.ErrUnavailable)
	}
	if lo >= l.cacheFrom {
		ents := l.cache[lo-l.cacheFrom : hi-l.cacheFrom]
		n := limitSize(ents, maxSize)
		return ents[:n:n], nil
	}
	return l.readEntries(lo, hi, maxSize)
}

// limitSize returns how many of ents fit in maxSize (at least one).
func limitSize(ents []*pb.Entry, maxSize uint64) int {
	if maxSize == noLimit {
		return len(ents)
	}
	var size uint64
	for i, e := range ents {
		size += sizeOf(e)
		if i > 0 && size > maxSize {
			return i
		}
	}
	return len(ents)
}

const noLimit = 1<<64 - 1

// sizeOf is proto.Size(e), computed from the fields.
func sizeOf(e *pb.Entry) uint64 {
	m := meta{term: e.GetTerm(), typ: e.GetType()}
	if e.Term != nil {
		m.presence |= hasTerm
	}
	if e.Index != nil {
		m.presence |= hasIndex
	}
	if e.Type != nil {
		m.presence |= hasType
	}
	if e.Data != nil {
		m.presence |= hasData
	}
	return entrySize(m, e.GetIndex(), len(e.Data)) + uint64(len(e.ProtoReflect().GetUnknown()))
}

// Entries read from disk share allocations: their data go to buffers of
// arenaMin to arenaMax bytes, sized for the rest of the call (an entry larger
// than a quarter of arenaMax gets its own), the Entry structs to slabs of up to
// slabMax.
const (
	arenaMin = 4 << 10
	arenaMax = 64 << 10
	slabMax  = 64
)

// readEntries reads lo … up to the cache from the segments, then continues
// with the cache.
func (l *Log) readEntries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	end := min(hi, l.cacheFrom)
	out := make([]*pb.Entry, 0, min(hi-lo, 256))
	var size uint64
	var arena []byte
	var slab []diskEntry
	r := l.st.NewReader(lo)
	defer r.Close()
	for i := lo; i < end; i++ {
		rec, err := r.Next()
		if err != nil {
			return nil, l.readErr(i, err)
		}
		if rec.Seq != i {
			return nil, l.damage(logDir, "entry %d missing", i)
		}
		m, err := decodeMeta(rec.Header, len(rec.Payload))
		if err != nil || len(rec.Subject) != 0 {
			return nil, l.damage(logDir, "entry %d: %v", i, errMeta)
		}
		size += entrySize(m, i, len(rec.Payload))
		if len(out) > 0 && size > maxSize {
			return out, nil
		}
		var data []byte
		if m.presence&hasData != 0 {
			n := len(rec.Payload)
			if n > arenaMax/4 {
				data = append([]byte(nil), rec.Payload...)
			} else {
				if len(arena)+n > cap(arena) {
					// Enough for the rest if they are like this one.
					want := uint64(n) * (end - i)
					if maxSize != noLimit {
						want = min(want, maxSize-min(maxSize, size)+uint64(n))
					}
					arena = make([]byte, 0, min(max(want, arenaMin), arenaMax))
				}
				arena = append(arena, rec.Payload...)
				data = arena[len(arena)-n : len(arena) : len(arena)]
			}
		}
		if len(slab) == 0 {
			slab = make([]diskEntry, min(end-i, slabMax))
		}
		out = append(out, fillEntry(&slab[0], i, m, data))
		slab = slab[1:]
	}
	for i := end; i < hi; i++ {
		e := l.cache[i-l.cacheFrom]
		size += sizeOf(e)
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// Snapshot returns the latest snapshot (an empty one if there is none), read
// from its file.
func (l *Log) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if !l.snapOnDisk {
		return &pb.Snapshot{Metadata: proto.Clone(l.snap).(*pb.SnapshotMetadata)}, nil
	}
	b, err := os.ReadFile(l.path(snapFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, l.damage(snapFile, "missing")
	}
	if err != nil {
		return nil, l.ioErr("read", l.path(snapFile), err)
	}
	s, err := decodeSnapshot(b)
	if err != nil {
		return nil, l.damage(snapFile, "%v", err)
	}
	if !proto.Equal(s.Metadata, l.snap) {
		return nil, l.damage(snapFile, "changed since it was written")
	}
	s.Metadata = pb.EnsureSnapshotMetadata(s.Metadata)
	return s, nil
}
