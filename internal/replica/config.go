package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of Config. They aim at a new acknowledged publish within one second of a
// leader's kill -9 on a LAN: a follower that stops hearing its leader campaigns after
// a randomized ElectionTicks..2×ElectionTicks ticks (400–800 ms), and with PreVote
// the election then needs two round trips plus the first commit of the new term.
const (
	DefaultTickInterval    = 50 * time.Millisecond
	DefaultElectionTicks   = 8 // 400 ms: the base election timeout
	DefaultHeartbeatTicks  = 2 // 100 ms between (coalesced) heartbeats
	DefaultMaxSizePerMsg   = 1 << 20
	DefaultMaxInflightMsgs = 256
	// DefaultMaxInflightBytes keeps what one group has in flight to a follower
	// under the route's backlog limit (4 MiB, internal/cluster/route): a follower
	// slower than its leader's disk (a busy machine) is fed at its own pace
	// instead of filling the route until it is excluded and the group, missing
	// its heartbeats, elects again.
	DefaultMaxInflightBytes   = 2 << 20
	DefaultMaxUncommittedSize = 64 << 20
	DefaultSnapshotEntries    = 10000
	DefaultCompactionOverhead = 5000
	DefaultMaxProposalBatch   = 4096
)

// Config configures a Host (and the Core inside it). The zero value of every field
// but NodeID takes its default.
type Config struct {
	// NodeID is this node's id, non-zero and never reused by another node. In every
	// group the node's replica id is its node id, so a node holds at most one
	// replica of a group.
	NodeID uint64

	// TickInterval is the real time of one tick (the driver's ticker; the Core only
	// counts ticks).
	TickInterval time.Duration
	// ElectionTicks is raft's election timeout in ticks; a follower campaigns after
	// a randomized timeout in [ElectionTicks, 2×ElectionTicks). CheckQuorum makes a
	// leader that has not heard a quorum for ElectionTicks step down.
	ElectionTicks int
	// HeartbeatTicks is the heartbeat interval in ticks: each group's leader beats
	// that often, and the beats of all groups a node pair shares travel together
	// once per interval.
	HeartbeatTicks int

	// MaxSizePerMsg limits the entries of one append message (bytes).
	MaxSizePerMsg uint64
	// MaxInflightMsgs limits the append messages in flight to one follower,
	// MaxInflightBytes their bytes (one message at least is always in flight).
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// MaxUncommittedSize limits a leader's uncommitted entries (bytes) per group;
	// past it proposals fail with ErrProposalDropped.
	MaxUncommittedSize uint64
	// MaxProposalBatch limits the proposals to one group stepped in one Ready.
	MaxProposalBatch int

	// SnapshotEntries: a group takes a snapshot of its state machine once this many
	// entries have been applied since its last snapshot, then compacts its log.
	SnapshotEntries uint64
	// CompactionOverhead is how many applied entries stay in the log behind a
	// snapshot, so that a follower a little behind catches up from the log
	// instead of a snapshot.
	CompactionOverhead uint64

	// DisablePreVote and DisableCheckQuorum turn the two off (both are on by
	// default: they keep a partitioned node from disrupting a healthy group and
	// make a leader cut off from its quorum step down).
	DisablePreVote     bool
	DisableCheckQuorum bool

	// DisableQuiescence keeps every group ticking. By default a group whose log
	// is fully replicated and applied everywhere, with nothing pending, stops
	// ticking and sending heartbeats until something happens to it (see the
	// package documentation, "Quiescence").
	DisableQuiescence bool

	// SendBeforeSync lets a leader's appends and heartbeats go out before the
	// entries of the same iteration are synced to its own log, so that with an
	// fsync per iteration the leader's fsync and its followers' overlap (Raft
	// thesis §10.2.1: the leader counts itself in a quorum only once its own
	// copy is durable). What depends on this node's own writes — append and
	// vote responses, and every message of a group whose term or vote changed
	// in the iteration — still waits for the sync. Worth it only where Sync
	// costs an fsync; elsewhere it splits an iteration's batch to a node in two.
	SendBeforeSync bool

	// Log receives raft's warnings and errors; nil discards them.
	// package and drops the rest.
	Log *slog.Logger
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.NodeID == 0 {
		return cfg, errors.New("replica: Config.NodeID must not be 0")
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = DefaultElectionTicks
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if cfg.HeartbeatTicks >= cfg.ElectionTicks {
		return cfg, fmt.Errorf("replica: HeartbeatTicks (%d) must be below ElectionTicks (%d)",
			cfg.HeartbeatTicks, cfg.ElectionTicks)
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = DefaultMaxSizePerMsg
	}
	if cfg.MaxInflightMsgs <= 0 {
		cfg.MaxInflightMsgs = DefaultMaxInflightMsgs
	}
	if cfg.MaxInflightBytes == 0 {
		cfg.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if cfg.MaxUncommittedSize == 0 {
		cfg.MaxUncommittedSize = DefaultMaxUncommittedSize
	}
	if cfg.MaxProposalBatch <= 0 {
		cfg.MaxProposalBatch = DefaultMaxProposalBatch
	}
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = DefaultSnapshotEntries
	}
	if cfg.CompactionOverhead == 0 {
		cfg.CompactionOverhead = DefaultCompactionOverhead
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// slogLogger is raft's Logger on a slog.Logger. Debug and info lines are dropped:
// elections in thousands of groups would flood the log. Fatal and Panic panic, as
// raft expects of them (it calls them on broken invariants only).
type slogLogger struct{ l *slog.Logger }

func (slogLogger) Debug(...any)          {}
func (slogLogger) Debugf(string, ...any) {}
func (slogLogger) Info(...any)           {}
func (slogLogger) Infof(string, ...any)  {}
func (g slogLogger) Warning(v ...any)    { g.l.Warn(fmt.Sprint(v...)) }
func (g slogLogger) Warningf(format string, v ...any) {
	g.l.Warn(fmt.Sprintf(format, v...))
}
func (g slogLogger) Error(v ...any) { g.l.Error(fmt.Sprint(v...)) }
func (g slogLogger) Errorf(format string, v ...any) {
	g.l.Error(fmt.Sprintf(format, v...))
}
func (slogLogger) Fatal(v ...any)                 { panic(fmt.Sprint(v...)) }
func (slogLogger) Fatalf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
func (slogLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (slogLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
