package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tern-mq/tern/internal/kafka/group"
	"github.com/tern-mq/tern/internal/stream"
)

// Coordinators chooses the node that coordinates each consumer group: FindCoordinator
// answers with it, and a group request reaching another node gets NOT_COORDINATOR,
// which sends the client back to FindCoordinator. A group's membership lives in its
// coordinator's memory only (as Kafka rebuilds it after a coordinator moves, the
// members join again); its offsets are stream consumers, reachable from any node.
// Config.Coordinators nil means the default (nodeCoordinators): this node on a node
// alone, one node per group in a cluster.
type Coordinators interface {
	// Coordinator returns the broker coordinating group, and local true when it is
	// this node; ok false when no node can now (COORDINATOR_NOT_AVAILABLE).
	Coordinator(group string) (b Broker, local, ok bool)
}

// nodeCoordinators picks each group's coordinator among the brokers: the one whose
// id hashed with the group's name is highest (rendezvous hashing), so that every
// node picks the same one from the same brokers, and a node leaving moves only the
// groups it coordinated. On a node alone that is always this node.
type nodeCoordinators struct{ s *Server }

func (c nodeCoordinators) Coordinator(group string) (Broker, bool, bool) {
	self, brokers := c.s.brokers()
	var best Broker
	var bestScore uint64
	found := false
	for _, b := range brokers {
		h := fnv.New64a()
		_, _ = h.Write([]byte(group))
		_, _ = h.Write([]byte{byte(b.ID >> 24), byte(b.ID >> 16), byte(b.ID >> 8), byte(b.ID)})
		if score := h.Sum64(); !found || score > bestScore {
			best, bestScore, found = b, score, true
		}
	}
	if !found {
		return Broker{}, false, false
	}
	return best, best.ID == self, true
}

// groupRef names a consumer group: its id in its account ("" for the global
// one). Group ids are per account: two accounts' groups of one id are two groups,
// with two memberships and two sets of offsets (the durable consumers of each
// account's own streams).
type groupRef struct{ acct, id string }

// coordKey is what Coordinators places the group by: its id for the global
// account, "$A.<account>.<id>" for another.
func (g groupRef) coordKey() string {
	if g.acct == "" {
		return g.id
	}
	return stream.SubjectPrefix(g.acct) + g.id
}

// group is the connection's account's group of that id.
func (c *conn) group(id string) groupRef { return groupRef{acct: c.acct, id: id} }

// coordinatorCode is the error a request for group gets on this node: 0 when this
// node coordinates it.
func (s *Server) coordinatorCode(g groupRef) int16 {
	if g.id == "" {
		return kerr.InvalidGroupID.Code
	}
	_, local, ok := s.coords.Coordinator(g.coordKey())
	switch {
	case !ok:
		return kerr.CoordinatorNotAvailable.Code
	case !local:
		return kerr.NotCoordinator.Code
	}
	return 0
}

// groups drives the groups this node coordinates: each is a group.Group machine
// behind a lock, with one timer for its Deadline. JoinGroup and SyncGroup requests
// park their connection's goroutine on a channel until the machine answers.
type groups struct {
	s     *Server
	cfg   group.Config
	token atomic.Uint64

	mu     sync.Mutex
	m      map[groupRef]*groupDriver
	closed bool
}

type groupDriver struct {
	gs      *groups
	id      groupRef
	mu      sync.Mutex
	g       *group.Group
	timer   *time.Timer
	waiting map[uint64]chan group.Reply
}

func newGroups(s *Server, cfg group.Config) *groups {
	return &groups{s: s, cfg: cfg, m: map[groupRef]*groupDriver{}}
}

// get returns the driver of a group, made when create is set.
func (gs *groups) get(id groupRef, create bool) *groupDriver {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	d := gs.m[id]
	if d == nil && create && !gs.closed {
		d = &groupDriver{gs: gs, id: id, g: group.New(id.id, gs.cfg), waiting: map[uint64]chan group.Reply{}}
		gs.m[id] = d
	}
	return d
}

// list returns the drivers of an account's groups in group id order.
func (gs *groups) list(acct string) []*groupDriver {
	gs.mu.Lock()
	out := make([]*groupDriver, 0, len(gs.m))
	for _, d := range gs.m {
		if d.id.acct == acct {
			out = append(out, d)
		}
	}
	gs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id.id < out[j].id.id })
	return out
}

// forget drops a deleted group.
func (gs *groups) forget(d *groupDriver) {
	gs.mu.Lock()
	if gs.m[d.id] == d {
		delete(gs.m, d.id)
	}
	gs.mu.Unlock()
}

// close stops every group's timer; parked requests end with the server.
func (gs *groups) close() {
	gs.mu.Lock()
	gs.closed = true
	ds := make([]*groupDriver, 0, len(gs.m))
	for _, d := range gs.m {
		ds = append(ds, d)
	}
	gs.mu.Unlock()
	for _, d := range ds {
		d.mu.Lock()
		if d.timer != nil {
			d.timer.Stop()
		}
		d.mu.Unlock()
	}
}

func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// do runs one event on the machine and acts on what it wants done: answers for
// parked requests, the timer for its next deadline, a log line per rebalance.
func (d *groupDriver) do(event func(now time.Time, g *group.Group)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	event(time.Now(), d.g)
	d.apply(d.g.Ready())
}

func (d *groupDriver) apply(rd group.Ready) {
	for _, r := range rd.Replies {
		if ch := d.waiting[r.Token]; ch != nil {
			delete(d.waiting, r.Token)
			ch <- r
		}
	}
	if rd.Rebalanced {
		d.gs.s.log.Info("group rebalanced", "group", d.id.id, "account", acctAttr(d.id.acct), "generation", d.g.Generation(), "state", d.g.State().String(),
			"members", d.g.Len(), "leader", d.g.Leader())
	}
	if rd.Deadline.IsZero() {
		if d.timer != nil {
			d.timer.Stop()
		}
		return
	}
	wait := max(time.Until(rd.Deadline), time.Millisecond)
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.tick)
	} else {
		d.timer.Reset(wait)
	}
}

func (d *groupDriver) tick() {
	d.gs.mu.Lock()
	closed := d.gs.closed
	d.gs.mu.Unlock()
	if closed {
		return
	}
	d.do(func(now time.Time, g *group.Group) { g.Tick(now) })
}

// park registers a request that waits for the machine's answer.
func (d *groupDriver) park() (uint64, chan group.Reply) {
	tok := d.gs.token.Add(1)
	ch := make(chan group.Reply, 1)
	d.mu.Lock()
	d.waiting[tok] = ch
	d.mu.Unlock()
	return tok, ch
}

// wait waits for a parked request's answer, at most bound (the machine answers
// sooner) or until the server shuts down.
func (d *groupDriver) wait(tok uint64, ch chan group.Reply, bound time.Duration) (group.Reply, bool) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, true
	case <-timer.C:
	case <-d.gs.s.done:
	}
	d.mu.Lock()
	delete(d.waiting, tok)
	d.mu.Unlock()
	select {
	case r := <-ch:
		return r, true
	default:
		return group.Reply{}, false
	}
}
