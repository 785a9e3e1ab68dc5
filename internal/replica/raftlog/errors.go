package raftlog

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
)

// ErrCorrupt is matched (errors.Is) by every error that says this replica's
// files are damaged: an entry, the hard state, the snapshot, or the way they fit
// together. A replica whose Open or read fails with it cannot serve its group;
// its host rebuilds it from the other members. Errors about damaged entries also
// match store.ErrCorrupt and carry the store's *store.Corruption.
var ErrCorrupt = errors.New("raftlog: damaged")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("raftlog: closed")

// damage is an ErrCorrupt error naming the file and what is wrong with it.
func (l *Log) damage(file, format string, args ...any) error {
	return fmt.Errorf("raftlog %q: %s: %s: %w", l.cfg.Name, file, fmt.Sprintf(format, args...), ErrCorrupt)
}

// damaged wraps an error of the store that means damage, keeping it matchable.
func (l *Log) damaged(what string, err error) error {
	return fmt.Errorf("raftlog %q: %s: %w: %w", l.cfg.Name, what, ErrCorrupt, err)
}

// unavailable is raft.ErrUnavailable with the indexes asked for.
func (l *Log) unavailable(format string, args ...any) error {
	return fmt.Errorf("raftlog %q: %s: %w", l.cfg.Name, fmt.Sprintf(format, args...), raft.ErrUnavailable)
}
