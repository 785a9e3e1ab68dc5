package server

import (
	"fmt"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/replica/raftlog"
	"github.com/tern-mq/tern/internal/store"
)

// openRaftStorage opens the durable Raft log of one group in dir, fsynced as the
// server's sync policy says (docs/storage.md, "Raft logs").
func (s *Server) openRaftStorage(dir string) (cluster.Storage, error) {
	policy, err := store.ParseSyncPolicy(s.cfg.Sync)
	if err != nil {
		return nil, err
	}
	l, rep, err := raftlog.Open(raftlog.Config{Dir: dir, Sync: policy})
	if err != nil {
		return nil, fmt.Errorf("raft log %s: %w", dir, err)
	}
	if rep.TruncatedBytes > 0 || rep.FinishedInstall {
		s.log.Warn("raft log recovered", "dir", dir, "truncated_bytes", rep.TruncatedBytes, "finished_snapshot_install", rep.FinishedInstall)
	}
	return l, nil
}
