package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/fileutil"
	"github.com/tern-mq/tern/internal/replica"
)

// raftIDFile holds the node's Raft id under the data directory. The id must outlive
// restarts (the groups know the node by it) and never be taken by another node, so
// it is drawn at random once and kept.
const raftIDFile = "node-id"

// loadRaftID returns the Raft id kept in dir, drawing and storing one on first use.
func loadRaftID(dir string) (uint64, error) {
	path := filepath.Join(dir, raftIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
		if perr != nil || id == 0 {
			return 0, fmt.Errorf("cluster: %s: not a node id (16 hex digits): %q", path, b)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cluster: %w", err)
	}
	var id uint64
	for id == 0 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		id = binary.LittleEndian.Uint64(r[:])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("cluster: %w", err)
	}
	if err := fileutil.WriteAtomic(path, fmt.Appendf(nil, "%016x\n", id), true); err != nil {
		return 0, fmt.Errorf("cluster: storing the node id: %w", err)
	}
	return id, nil
}

// raftTransport carries the host's batches over the routes: a node's Raft id is
// turned into its name (gossiped with its metadata) and the batch goes in an RRAFT
// frame on the route to that node.
type raftTransport struct {
	routes *route.Manager
	mu     sync.RWMutex
	names  map[uint64]string
}

// ErrNoRoute is what Send returns for a node this one has no route to (or does not
// know); the host drops the batch and Raft sends again later.
var ErrNoRoute = errors.New("cluster: no route to the node")

func (t *raftTransport) Send(to uint64, b []byte) error {
	t.mu.RLock()
	name := t.names[to]
	t.mu.RUnlock()
	if name == "" || !t.routes.SendRaft(name, b) {
		return fmt.Errorf("%w %x", ErrNoRoute, to)
	}
	return nil
}

// learn records a member's Raft id, forget drops it.
func (t *raftTransport) learn(id uint64, name string) {
	if id == 0 {
		return
	}
	t.mu.Lock()
	if t.names == nil {
		t.names = map[uint64]string{}
	}
	// A restarted node keeps its id; one started afresh under the same name has
	// a new one: the old id keeps the name until membership drops it.
	t.names[id] = name
	t.mu.Unlock()
}

func (t *raftTransport) name(id uint64) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.names[id]
}

var _ replica.Transport = (*raftTransport)(nil)

// startReplication starts the Raft host on the routes and this node's replica of
// the meta group.
func (n *Node) startReplication(raftID uint64) error {
	n.tr = &raftTransport{routes: n.routes}
	n.tr.learn(raftID, n.cfg.NodeName)
	for _, m := range n.ms.Members() {
		n.tr.learn(m.RaftID, m.Name)
	}
	rc := n.cfg.Replica
	rc.NodeID, rc.Log = raftID, n.log
	host, err := replica.NewHost(rc, n.tr)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.host = host
	host.OnLeaderChange(n.leaderChanged)
	n.routes.HandleRaft(func(from string, batch []byte) error {
		if err := host.Enqueue(batch); err != nil && !errors.Is(err, replica.ErrStopped) {
			return err // malformed: the route closes, and says why in its log
		}
		return nil
	}, host.Kick)
	dir := filepath.Join(n.cfg.DataDir, "raft", "meta")
	st, err := n.cfg.OpenStorage(dir)
	if err != nil {
		return fmt.Errorf("cluster: meta group storage: %w", err)
	}
	n.metaStorage = st
	last, err := st.LastIndex()
	if err != nil {
		return fmt.Errorf("cluster: meta group storage: %w", err)
	}
	if n.rpc, err = newRequester(n.cfg.Broker, n.cfg.NodeName); err != nil {
		return err
	}
	if n.cfg.MQTTState != nil {
		if n.mqttStorage, err = n.cfg.OpenStorage(filepath.Join(n.cfg.DataDir, "raft", "mqtt")); err != nil {
			return fmt.Errorf("cluster: mqtt group storage: %w", err)
		}
		if err := n.startMQTTGroup(); err != nil {
			return err
		}
	}
	host.Start()
	n.meta = newMetaGroup(n, host)
	return n.meta.start(st, last > 0)
}

// GroupStatus is one Raft group as this node's replica sees it; nodes by name.
type GroupStatus struct {
	Group   uint64 `json:"group"`
	RaftID  string `json:"raft_id"` // this node's, hex
	Running bool   `json:"running"` // false: the group has not formed (or this node was not added yet)
	Role    string `json:"role,omitempty"`
	Leader  string `json:"leader,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Commit  uint64 `json:"commit,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	// Voters and Learners are the group's members; Replicas the leader's view of
	// each (on the leader only).
	Voters   []string        `json:"voters,omitempty"`
	Learners []string        `json:"learners,omitempty"`
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// ReplicaStatus is the leader's view of one replica.
type ReplicaStatus struct {
	Node    string `json:"node"`
	Learner bool   `json:"learner,omitempty"`
	Match   uint64 `json:"match"`
	Lag     uint64 `json:"lag"`
	State   string `json:"state"`
	Active  bool   `json:"active"`
}

func (n *Node) groupStatus(group uint64, running bool) *GroupStatus {
	gs := &GroupStatus{Group: group, RaftID: fmt.Sprintf("%016x", n.host.ID()), Running: running}
	if !running {
		return gs
	}
	st, err := n.host.Status(group)
	if err != nil {
		gs.Error = err.Error()
		return gs
	}
	name := func(id uint64) string {
		if s := n.tr.name(id); s != "" {
			return s
		}
		return fmt.Sprintf("%016x", id)
	}
	gs.Role = strings.TrimPrefix(st.State, "State")
	if st.Leader != 0 {
		gs.Leader = name(st.Leader)
	}
	gs.Term, gs.Commit, gs.Applied = st.Term, st.Commit, st.Applied
	for _, id := range st.Voters {
		gs.Voters = append(gs.Voters, name(id))
	}
	for _, id := range st.Learners {
		gs.Learners = append(gs.Learners, name(id))
	}
	for _, p := range st.Progress {
		gs.Replicas = append(gs.Replicas, ReplicaStatus{Node: name(p.Node), Learner: p.Learner, Match: p.Match, Lag: p.Lag,
			State: strings.ToLower(strings.TrimPrefix(p.State, "State")), Active: p.RecentActive})
	}
	slices.SortFunc(gs.Replicas, func(a, b ReplicaStatus) int { return strings.Compare(a.Node, b.Node) })
	if st.Failed != nil {
		gs.Error = st.Failed.Error()
	}
	return gs
}
