package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
)

// Groups other than the meta group (stream partitions) are started by the services
// that own their state machines, through the methods below. The node keeps their
// storage, closes it at Shutdown, and hands their leadership off before it goes.

// groupSet is the node's replicas of groups other than the meta group.
type groupSet struct {
	mu       sync.Mutex
	storages map[uint64]Storage
	// Leader-change listeners and catalogue watchers.
	leaderFns []func(replica.LeaderChange)
	watchers  map[chan struct{}]struct{}
}

// Replicating reports whether the node runs replication (cluster_size is set).
func (n *Node) Replicating() bool { return n.host != nil }

// RaftID is the node's id in every Raft group (0 without replication).
func (n *Node) RaftID() uint64 {
	if n.host == nil {
		return 0
	}
	return n.host.ID()
}

// Host is the node's Raft host, nil without replication; its Propose commits to a
// group this node holds a replica of.
func (n *Node) Host() *replica.Host { return n.host }

// NodeName names a node by Raft id, as membership last saw it ("" if unknown).
func (n *Node) NodeName(id uint64) string {
	if n.tr == nil {
		return ""
	}
	return n.tr.name(id)
}

func groupDir(dataDir string, id uint64) string {
	return filepath.Join(dataDir, "raft", fmt.Sprintf("g%016x", id))
}

// StartGroup starts this node's replica of group id with machine as its state
// machine. Its storage is opened under the data directory. A replica with no Raft
// state founds the group with founders as its voters when this node is one of them;
// otherwise it starts empty and waits for the group's leader to add it. Its
// followers learn of commits lazily (replica.GroupConfig.LazyCommit): a stream
// partition's followers serve nothing from their replica before they lead.
func (n *Node) StartGroup(id uint64, machine replica.StateMachine, founders []uint64) error {
	if n.host == nil {
		return ErrNoMetaGroup
	}
	st, err := n.cfg.OpenStorage(groupDir(n.cfg.DataDir, id))
	if err != nil {
		return fmt.Errorf("cluster: group %x storage: %w", id, err)
	}
	last, err := st.LastIndex()
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("cluster: group %x storage: %w", id, err)
	}
	gc := replica.GroupConfig{ID: id, Storage: st, StateMachine: machine, LazyCommit: true}
	if last == 0 && slices.Contains(founders, n.host.ID()) {
		if first, _ := st.FirstIndex(); first <= 1 {
			gc.Voters = slices.Clone(founders)
		}
	}
	if err := n.host.AddGroup(gc); err != nil {
		_ = st.Close()
		return fmt.Errorf("cluster: group %x: %w", id, err)
	}
	n.groups.mu.Lock()
	if n.groups.storages == nil {
		n.groups.storages = map[uint64]Storage{}
	}
	n.groups.storages[id] = st
	n.groups.mu.Unlock()
	if gc.Voters != nil && founders[0] == n.host.ID() {
		// The first founder stands at once rather than after an election
		// timeout: a stream is answered as created once its group has a leader.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := n.host.Campaign(ctx, id); err != nil {
				n.log.Debug("group: first founder's campaign", "group", id, "err", err)
			}
		}()
	}
	return nil
}

// StopGroup stops this node's replica of group id; remove also deletes its Raft
// state (the replica left the group for good).
func (n *Node) StopGroup(id uint64, remove bool) error {
	if n.host == nil {
		return ErrNoMetaGroup
	}
	err := n.host.RemoveGroup(id)
	n.groups.mu.Lock()
	st := n.groups.storages[id]
	delete(n.groups.storages, id)
	n.groups.mu.Unlock()
	if st != nil {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if remove {
		if rerr := os.RemoveAll(groupDir(n.cfg.DataDir, id)); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// GroupStatus is this node's view of group id (nil without replication).
func (n *Node) GroupStatus(id uint64) *GroupStatus {
	if n.host == nil {
		return nil
	}
	n.groups.mu.Lock()
	_, running := n.groups.storages[id]
	n.groups.mu.Unlock()
	return n.groupStatus(id, running)
}

// OnLeaderChange adds fn to the functions told of every leadership change a replica
// of this node sees. fn runs on the Raft loop: it must not block.
func (n *Node) OnLeaderChange(fn func(replica.LeaderChange)) {
	n.groups.mu.Lock()
	n.groups.leaderFns = append(n.groups.leaderFns, fn)
	n.groups.mu.Unlock()
}

func (n *Node) leaderChanged(lc replica.LeaderChange) {
	if lc.Leader == n.RaftID() {
		// One line per group and term this node led: the record a check of "one
		// leader per term" reads.
		n.log.Info("leading group", "group", lc.Group, "term", lc.Term)
	}
	n.groups.mu.Lock()
	fns := n.groups.leaderFns
	n.groups.mu.Unlock()
	for _, fn := range fns {
		fn(lc)
	}
}

// Catalogue runs f on the meta group's catalogue as this node last applied it. f
// must not keep the State or block.
func (n *Node) Catalogue(f func(*meta.State)) {
	if n.meta == nil {
		f(meta.New())
		return
	}
	n.meta.read(f)
}

// ReadCatalogue runs f on the catalogue once it holds every change committed
// before the call (a read index of the meta group, confirmed by a quorum): a
// linearizable read, from any node. It fails when the meta group has no quorum
// within ctx.
func (n *Node) ReadCatalogue(ctx context.Context, f func(*meta.State)) error {
	if n.meta == nil || !n.meta.started.Load() {
		return ErrNoMetaGroup
	}
	if _, err := n.host.ReadIndex(ctx, meta.MetaGroup); err != nil {
		return fmt.Errorf("cluster: reading the catalogue: %w", err)
	}
	n.meta.read(f)
	return nil
}

// WatchCatalogue signals (coalesced) each change of the catalogue's nodes, streams
// and consumers as this node applies it. stop ends the watch.
func (n *Node) WatchCatalogue() (ch <-chan struct{}, stop func()) {
	c := make(chan struct{}, 1)
	n.groups.mu.Lock()
	if n.groups.watchers == nil {
		n.groups.watchers = map[chan struct{}]struct{}{}
	}
	n.groups.watchers[c] = struct{}{}
	n.groups.mu.Unlock()
	return c, func() {
		n.groups.mu.Lock()
		delete(n.groups.watchers, c)
		n.groups.mu.Unlock()
	}
}

func (n *Node) catalogueChanged() {
	n.groups.mu.Lock()
	defer n.groups.mu.Unlock()
	for c := range n.groups.watchers {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// ProposeMeta commits cmd through the meta group (forwarded to its leader) and
// returns what applying it gave; a command the catalogue refused has Result.Err set.
func (n *Node) ProposeMeta(ctx context.Context, cmd *meta.Command) (meta.Result, error) {
	if n.meta == nil {
		return meta.Result{}, ErrNoMetaGroup
	}
	return n.meta.propose(ctx, cmd)
}

// handOffGroups moves the leadership of every group this node leads, other than the
// meta group, to an up-to-date voter before the node goes: the stream groups and
// the MQTT group.
func (n *Node) handOffGroups(limit time.Duration) {
	n.groups.mu.Lock()
	ids := make([]uint64, 0, len(n.groups.storages)+1)
	for id := range n.groups.storages {
		ids = append(ids, id)
	}
	n.groups.mu.Unlock()
	if n.mqttStarted.Load() {
		ids = append(ids, meta.MQTTGroup)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		st, err := n.host.Status(id)
		if err != nil || st.State != "StateLeader" {
			continue
		}
		to := handOffTarget(st, n.host.ID())
		if to == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.host.TransferLeadership(ctx, id, to); err != nil {
				n.log.Warn("group leadership not handed off before shutdown", "group", id, "to", n.tr.name(to), "err", err)
			}
		}()
	}
	wg.Wait()
}

// handOffTarget picks the voter to hand a group's leadership to: an active one,
// preferably caught up.
func handOffTarget(st replica.Status, self uint64) uint64 {
	var to uint64
	for _, p := range st.Progress {
		if p.Node != self && !p.Learner && p.RecentActive && (to == 0 || p.Lag == 0) {
			to = p.Node
		}
	}
	return to
}

// closeGroups closes the storage of every group left, once the host has stopped.
func (n *Node) closeGroups() {
	n.groups.mu.Lock()
	defer n.groups.mu.Unlock()
	for id, st := range n.groups.storages {
		if err := st.Close(); err != nil {
			n.log.Warn("cluster: closing a group's storage", "group", id, "err", err)
		}
	}
	n.groups.storages = nil
}
