package membership

import (
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/memberlist"
)

// Why a node is refused. memberlist logs the error a delegate returns; these let
// tests and logs tell the reasons apart.
var (
	errForeignCluster = errors.New("belongs to another cluster")
	errIncompatible   = errors.New("incompatible version")
	errNameConflict   = errors.New("node name already taken")
)

// delegate receives memberlist's callbacks. Several of them run under memberlist's
// node lock, so none may call back into memberlist; they work on Membership's own
// table under m.mu instead.
type delegate struct{ m *Membership }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta hands memberlist this node's encoded metadata; encodeMeta already kept
// it within the limit, past which memberlist would panic.
func (d *delegate) NodeMeta(limit int) []byte {
	m := d.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.selfEnc) > limit {
		return nil
	}
	return append([]byte(nil), m.selfEnc...)
}

// Membership sends no messages of its own through memberlist.
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// checkPeer decodes a peer's metadata and refuses peers of another cluster or of
// another major version.
func (m *Membership) checkPeer(name string, raw []byte) (meta, error) {
	mt, err := decodeMeta(raw)
	if err != nil {
		return mt, fmt.Errorf("membership: node %s: %w", name, err)
	}
	if mt.cluster != m.cfg.ClusterName {
		return mt, fmt.Errorf("membership: node %s %w %q (this is %q)", name, errForeignCluster, mt.cluster, m.cfg.ClusterName)
	}
	theirs, err := majorVersion(mt.version)
	ours, _ := majorVersion(m.cfg.Version)
	if err != nil || theirs != ours {
		return mt, fmt.Errorf("membership: node %s runs version %q, this node %q: %w", name, mt.version, m.cfg.Version, errIncompatible)
	}
	return mt, nil
}

// NotifyAlive filters every alive message, gossiped or merged: a node refused here
// never becomes a peer.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	m := d.m
	if _, err := m.checkPeer(peer.Name, peer.Meta); err != nil {
		m.mu.Lock()
		ok := m.logLimited("alive/" + peer.Name + "/" + err.Error())
		m.mu.Unlock()
		if ok {
			m.log.Warn("refusing node", "node", peer.Name, "addr", peer.Address(), "err", err)
		}
		return err
	}
	return nil
}

// NotifyMerge vets a whole remote cluster before a join merges it with ours, in
// either direction. Besides the per-node checks it refuses a merge that would put
// two live processes under one name: memberlist alone would keep the first and
// ignore the second, but still merge the rest, leaving the second node half-joined.
// A live entry under a known name at the holder's own address is the holder
// restarted, not a conflict: memberlist settles that by incarnation numbers.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	m := d.m
	for _, p := range peers {
		mt, err := m.checkPeer(p.Name, p.Meta)
		if err != nil {
			m.mu.Lock()
			ok := m.logLimited("merge/" + p.Name + "/" + err.Error())
			m.mu.Unlock()
			if ok {
				m.log.Warn("refusing to merge with a cluster holding an unacceptable node", "node", p.Name, "addr", p.Address(), "err", err)
			}
			return err
		}
		if p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect {
			continue
		}
		m.mu.Lock()
		known, ok := m.nodes[p.Name]
		var conflict *Node
		if ok && known.State == StateAlive && known.ID != mt.id && known.Addr != p.Address() {
			c := copyNode(*known)
			conflict = &c
		}
		logIt := conflict != nil && m.logLimited("conflict/"+p.Name+"/"+mt.id)
		m.mu.Unlock()
		if conflict != nil {
			err := fmt.Errorf("membership: name %s is held by id %s at %s, claimed by id %s at %s: %w",
				p.Name, conflict.ID, conflict.Addr, mt.id, p.Address(), errNameConflict)
			if logIt {
				msg := "refusing to merge: two nodes share a name; give each node its own --server-name"
				if p.Name == m.cfg.NodeName {
					msg = "refusing to merge: another node uses this node's name; give each node its own --server-name"
				}
				m.log.Error(msg, "node", p.Name, "known_id", conflict.ID, "known_addr", conflict.Addr,
					"other_id", mt.id, "other_addr", p.Address())
			}
			return err
		}
	}
	return nil
}

// NotifyConflict reports memberlist's own detection of a name at two addresses
// (seen through gossip rather than a join); memberlist keeps the node it knew.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	m := d.m
	theirs, _ := decodeMeta(other.Meta)
	m.mu.Lock()
	holder := ""
	if n, ok := m.nodes[existing.Name]; ok {
		holder = n.ID
	}
	ok := m.logLimited("conflict/" + other.Name + "/" + theirs.id)
	m.mu.Unlock()
	if ok {
		m.log.Error("ignoring a second node with a taken name; give each node its own --server-name",
			"node", existing.Name, "known_id", holder, "known_addr", existing.Address(),
			"other_id", theirs.id, "other_addr", other.Address())
	}
}

func (m *Membership) nodeFrom(n *memberlist.Node) (Node, meta, error) {
	mt, err := decodeMeta(n.Meta)
	if err != nil {
		return Node{}, mt, fmt.Errorf("membership: node %s: %w", n.Name, err)
	}
	return Node{
		Name:      n.Name,
		ID:        mt.id,
		Addr:      n.Address(),
		RouteAddr: mt.route,
		Version:   mt.version,
		Tags:      maps.Clone(mt.tags),
		RaftID:    mt.raftID,
		MetaGroup: mt.metaGroup,
		State:     StateAlive,
	}, mt, nil
}

// NotifyJoin: a node became alive in memberlist (this one included, at Create).
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	m := d.m
	node, _, err := m.nodeFrom(n)
	if err != nil {
		m.log.Error("undecodable node passed the alive check", "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes[n.Name] = &node
	if n.Name == m.cfg.NodeName {
		return
	}
	m.log.Info("node joined", "node", node.Name, "id", node.ID, "addr", node.Addr, "route", node.RouteAddr)
	m.emit(NodeJoined, node)
}

// NotifyUpdate: a live node announced new metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	m := d.m
	node, mt, err := m.nodeFrom(n)
	if err != nil {
		m.log.Error("undecodable node passed the alive check", "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.nodes[n.Name]
	if n.Name == m.cfg.NodeName {
		if ok {
			node.State = old.State
		}
		m.nodes[n.Name] = &node
		return
	}
	switch {
	case !ok:
		m.nodes[n.Name] = &node
		m.log.Info("node joined", "node", node.Name, "id", node.ID, "addr", node.Addr, "route", node.RouteAddr)
		m.emit(NodeJoined, node)
	case old.ID != node.ID:
		// A new process under the name, come back before the old one was found
		// dead: the old one is gone all the same, and layers above key state by ID.
		gone := *old
		gone.State = StateDead
		m.nodes[n.Name] = &node
		m.log.Info("node restarted", "node", node.Name, "old_id", gone.ID, "id", node.ID, "addr", node.Addr)
		m.emit(NodeFailed, gone)
		m.emit(NodeJoined, node)
	case mt.leaving:
		// The leave intent: NotifyLeave finds it in the metadata memberlist passes
		// it; it is no news for the layers above.
		m.nodes[n.Name] = &node
	default:
		m.nodes[n.Name] = &node
		if !sameNode(*old, node) {
			m.log.Info("node updated", "node", node.Name, "id", node.ID, "route", node.RouteAddr, "tags", node.Tags)
			m.emit(NodeUpdated, node)
		}
	}
}

// NotifyLeave: memberlist marked a node dead or left. It does not say which (the
// state it passes is not filled in), hence the leave intent in the metadata.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	m := d.m
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.nodes[n.Name]
	if !ok {
		return
	}
	if n.Name == m.cfg.NodeName {
		old.State = StateLeft
		return
	}
	delete(m.nodes, n.Name)
	gone := *old
	if mt, err := decodeMeta(n.Meta); err == nil && mt.leaving && mt.id == gone.ID {
		gone.State = StateLeft
		m.log.Info("node left", "node", gone.Name, "id", gone.ID, "addr", gone.Addr)
		m.emit(NodeLeft, gone)
	} else {
		gone.State = StateDead
		m.log.Warn("node failed", "node", gone.Name, "id", gone.ID, "addr", gone.Addr)
		m.emit(NodeFailed, gone)
	}
	if !m.othersAlive() {
		select {
		case m.alone <- struct{}{}:
		default:
		}
	}
}

func sameNode(a, b Node) bool {
	return a.Name == b.Name && a.ID == b.ID && a.Addr == b.Addr && a.RouteAddr == b.RouteAddr &&
		a.Version == b.Version && a.State == b.State && a.RaftID == b.RaftID && a.MetaGroup == b.MetaGroup && maps.Equal(a.Tags, b.Tags)
}
