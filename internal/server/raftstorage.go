package server

import (
	"fmt"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/replica/raftlog"
	"github.com/tern-mq/tern/internal/store"
)

// raftStorage is a group's raftlog as the Raft host drives it. The host calls Sync
// once per loop iteration before it sends what depends on the writes; whether that
// fsyncs is the server's sync policy (docs/storage.md, "Sync policies in a cluster"):
// under always it does, so a quorum has every acknowledged entry on disk; under
// interval the log's own goroutine fsyncs every sync_interval and the host does not
// wait, so a quorum has it in memory; under never only the OS writes back.
type raftStorage struct {
	*raftlog.Log
	durable bool
}

func (r *raftStorage) Sync() error {
	if !r.durable {
		return nil
	}
	return r.Log.Sync()
}

// openRaftStorage opens the durable Raft log of one group in dir.
func (s *Server) openRaftStorage(dir string) (cluster.Storage, error) {
	policy, err := store.ParseSyncPolicy(s.cfg.Sync)
	if err != nil {
		return nil, err
	}
	cfg := raftlog.Config{Dir: dir, Sync: policy, SyncInterval: s.cfg.SyncInterval}
	if policy == store.SyncAlways {
		// The host's Sync per iteration makes every write durable at once: one
		// fsync per file and iteration rather than one per write.
		cfg.Sync = store.SyncNever
	}
	l, rep, err := raftlog.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("raft log %s: %w", dir, err)
	}
	if rep.TruncatedBytes > 0 || rep.FinishedInstall {
		s.log.Warn("raft log recovered", "dir", dir, "truncated_bytes", rep.TruncatedBytes, "finished_snapshot_install", rep.FinishedInstall)
	}
	return &raftStorage{Log: l, durable: policy == store.SyncAlways}, nil
}
