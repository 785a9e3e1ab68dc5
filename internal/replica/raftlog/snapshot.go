package raftlog

import (
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/fileutil"
	"os"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// CreateSnapshot records a snapshot of the state machine at index i (at or
// after the dummy, at most LastIndex) with cs (nil: the previous snapshot's
// ConfState) and data. The file is replaced atomically under every sync policy:
// written to snapshot.tmp, fsynced, renamed, directory fsynced. The log itself
// is unchanged; Compact drops the entries the snapshot covers. The returned
// snapshot shares data.
func (l *Log) CreateSnapshot(i uint64, cs *pb.ConfState, data []byte) (*pb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return nil, err
	}
	switch {
	case i <= l.snap.GetIndex():
		return nil, raft.ErrSnapOutOfDate
	case i > l.last:
		return nil, l.unavailable("snapshot at %d, the last index is %d", i, l.last)
	case i < l.dummy:
		return nil, raft.ErrCompacted
	}
	md := proto.Clone(l.snap).(*pb.SnapshotMetadata)
	md.Index = new(i)
	md.Term = new(l.terms.at(i))
	if cs != nil {
		md.ConfState = proto.Clone(cs).(*pb.ConfState)
	}
	out := &pb.Snapshot{Data: data, Metadata: proto.Clone(md).(*pb.SnapshotMetadata)}
	md = pb.EnsureSnapshotMetadata(md)
	b, err := encodeSnapshot(&pb.Snapshot{Data: data, Metadata: md})
	if err != nil {
		return nil, fmt.Errorf("raftlog %q: encoding snapshot: %w", l.cfg.Name, err)
	}
	if err := l.writeAtomic(snapFile, b); err != nil {
		return nil, err
	}
	l.snap, l.snapOnDisk = md, true
	return out, nil
}

// ApplySnapshot installs snap (a snapshot from the leader): it becomes the
// latest snapshot and the whole log is replaced by its dummy entry, so that the
// log starts after snap's index. raft.ErrSnapOutOfDate if it is not newer than
// the latest snapshot.
//
// The snapshot goes first to snapshot.install (fsynced), then the log is reset
// and synced, then the file is renamed to snapshot. A crash before the rename
// leaves snapshot.install, and Open finishes the install; a torn
// snapshot.install means the log was not touched yet, and Open removes it. Every
// step is fsynced, whatever the sync policy.
func (l *Log) ApplySnapshot(snap *pb.Snapshot) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	s := pb.EnsureSnapshot(proto.Clone(snap).(*pb.Snapshot))
	idx := s.Metadata.GetIndex()
	if cur := l.snap.GetIndex(); cur != 0 && cur >= idx {
		return raft.ErrSnapOutOfDate
	}
	if idx == 0 && s.Metadata.GetTerm() != 0 {
		return fmt.Errorf("raftlog %q: a snapshot at index 0 must have term 0, not %d", l.cfg.Name, s.Metadata.GetTerm())
	}
	b, err := encodeSnapshot(s)
	if err != nil {
		return fmt.Errorf("raftlog %q: encoding snapshot: %w", l.cfg.Name, err)
	}
	path := l.path(installFile)
	if err := fileutil.WriteSynced(path, b, true); err != nil {
		return l.ioErr("write", path, err)
	}
	if err := l.syncDir(); err != nil {
		return err
	}
	if err := l.install(s); err != nil {
		// The install file stays: the next Open finishes the install.
		l.broken = err
		return err
	}
	return nil
}

// install resets the log to s's dummy entry, syncs it and makes
// snapshot.install the snapshot file. Open calls it again for an install a
// crash cut short: each step can be done twice.
func (l *Log) install(s *pb.Snapshot) error {
	idx, term := s.Metadata.GetIndex(), s.Metadata.GetTerm()
	if idx > 0 {
		if err := l.setMarker(true); err != nil {
			return err
		}
		if err := l.st.Reset(idx); err != nil {
			return fmt.Errorf("raftlog %q: install snapshot %d: %w", l.cfg.Name, idx, err)
		}
		dummy := &pb.Entry{Term: new(term), Index: new(idx)}
		l.meta = appendMeta(l.meta[:0], dummy)
		if _, err := l.st.Append(nil, l.meta, nil, time.Now().UnixNano()); err != nil {
			l.st.Rollback()
			return fmt.Errorf("raftlog %q: install snapshot %d: %w", l.cfg.Name, idx, err)
		}
		if err := l.st.Commit(); err != nil {
			return fmt.Errorf("raftlog %q: install snapshot %d: %w", l.cfg.Name, idx, err)
		}
	} else {
		if err := l.st.Reset(1); err != nil {
			return fmt.Errorf("raftlog %q: install snapshot 0: %w", l.cfg.Name, err)
		}
		if err := l.setMarker(false); err != nil {
			return err
		}
	}
	if err := l.st.Sync(); err != nil {
		return fmt.Errorf("raftlog %q: install snapshot %d: %w", l.cfg.Name, idx, err)
	}
	if err := os.Rename(l.path(installFile), l.path(snapFile)); err != nil {
		return l.ioErr("rename", l.path(installFile), err)
	}
	if err := l.syncDir(); err != nil {
		return err
	}
	l.dummy, l.last = idx, idx
	l.terms = termRuns{{idx, term}}
	l.cache, l.cacheFrom, l.cacheBytes = nil, idx+1, 0
	l.snap, l.snapOnDisk = s.Metadata, true
	return nil
}

// loadHardState reads the hard state: the newest intact one of hardstate.tmp
// (SetHardState's, not yet taken by Sync), hardstate.sync (taken by a Sync that
// had not finished) and hardstate; none if none exists.
func (l *Log) loadHardState() error {
	for _, name := range []string{hsTmpFile, hsSyncFile} {
		tmp := l.path(name)
		b, err := os.ReadFile(tmp)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return l.ioErr("read", tmp, err)
		}
		if _, derr := decodeHardState(b); derr != nil {
			os.Remove(tmp) // torn by a crash before it was synced
			continue
		}
		if err := l.adopt(tmp, l.path(hsFile)); err != nil {
			return err
		}
		if name == hsTmpFile {
			os.Remove(l.path(hsSyncFile)) // older than the one adopted
		}
		break
	}
	b, err := os.ReadFile(l.path(hsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return l.ioErr("read", l.path(hsFile), err)
	}
	if l.hs, err = decodeHardState(b); err != nil {
		return l.damage(hsFile, "%v", err)
	}
	return nil
}

// adopt makes the intact temporary file tmp the file name, durably.
func (l *Log) adopt(tmp, name string) error {
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return l.ioErr("open", tmp, err)
	}
	err = f.Sync()
	f.Close()
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return l.ioErr("rename", tmp, err)
	}
	return l.syncDir()
}

// loadSnapshot reads the snapshot file's metadata (checking the whole file).
func (l *Log) loadSnapshot() error {
	b, err := os.ReadFile(l.path(snapFile))
	if errors.Is(err, os.ErrNotExist) {
		l.snap = pb.EnsureSnapshotMetadata(nil)
		return nil
	}
	if err != nil {
		return l.ioErr("read", l.path(snapFile), err)
	}
	s, err := decodeSnapshot(b)
	if err != nil {
		return l.damage(snapFile, "%v", err)
	}
	l.snap, l.snapOnDisk = pb.EnsureSnapshotMetadata(s.Metadata), true
	return nil
}

// loadInstall returns the snapshot of an install a crash interrupted, or nil.
// A torn install file is removed: the install had not touched the log yet.
func (l *Log) loadInstall() (*pb.Snapshot, error) {
	path := l.path(installFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, l.ioErr("read", path, err)
	}
	s, err := decodeSnapshot(b)
	if err != nil {
		os.Remove(path)
		return nil, nil
	}
	return pb.EnsureSnapshot(s), nil
}
