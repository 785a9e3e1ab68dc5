package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
)

// metaProposePrefix is the subject of the meta group's forwarding: a node that is
// not the leader sends a command to "$TERN.SYS.META.PROPOSE.<leader>" and waits for
// the answer (Node.Request). Node services live under the reserved "$TERN.SYS."
// prefix.
const metaProposePrefix = "$TERN.SYS.META.PROPOSE."

// MaxMetaVoters bounds the meta group's voters; further nodes are learners.
const MaxMetaVoters = 5

// ErrNoMetaGroup is returned by Propose before the meta group has formed (the
// cluster has not yet reached its size) or on a node that runs no replication.
var ErrNoMetaGroup = errors.New("cluster: the meta group has not formed")

// metaGroup is this node's replica of the meta group: it applies the committed
// commands to the catalogue (meta.State), hands each proposer its Result, forwards
// the proposals of a node that is not the leader to the leader over the bus, forms
// the group when the cluster first reaches its size, and, while this node leads,
// keeps the catalogue's nodes and the group's voters in line with membership.
type metaGroup struct {
	n    *Node
	log  *slog.Logger
	host *replica.Host

	mu      sync.RWMutex
	state   *meta.State
	waiters map[string]chan meta.Result
	started atomic.Bool // the group runs on this node

	proposeSub *broker.Subscription

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	// clients is the MQTT client registry's local end, nil until the MQTT server
	// asks for it.
	clients *ClientRegistry

	// Owned by loop: the members last seen while forming, and since when; whether
	// this node announced its replica.
	view      string
	viewSince time.Time
	announced bool
}

func newMetaGroup(n *Node, host *replica.Host) *metaGroup {
	return &metaGroup{n: n, log: n.log.With("component", "meta"), host: host, state: meta.New(),
		waiters: map[string]chan meta.Result{},
		kick:    make(chan struct{}, 1), done: make(chan struct{})}
}

// ---------------------------------------------------------------------------------
// replica.StateMachine

func (g *metaGroup) Apply(ents []replica.Entry) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	self := g.host.ID()
	catalogue := false // a change the reconciler may act on (not a client record)
	for _, e := range ents {
		r := g.state.Apply(e.Index, e.Data)
		if r.Err != nil && !errors.Is(r.Err, meta.ErrBadCommand) {
			g.log.Debug("meta command refused", "index", e.Index, "err", r.Err)
		}
		if r.Client != "" && r.Node != self && g.clients != nil {
			g.clients.movedAway(r.Client, e.Index)
		}
		catalogue = catalogue || r.Client == ""
		if w := g.waiters[r.ID]; w != nil && r.ID != "" {
			w <- r
			delete(g.waiters, r.ID)
		}
	}
	if catalogue {
		g.poke()
		g.n.catalogueChanged()
	}
	return nil
}

func (g *metaGroup) Snapshot() ([]byte, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.state.Snapshot(), nil
}

func (g *metaGroup) Restore(data []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.n.catalogueChanged()
	if len(data) == 0 {
		g.state = meta.New()
		return nil
	}
	return g.state.Restore(data)
}

// ---------------------------------------------------------------------------------
// Reading

// read runs f on the catalogue as this node last applied it (possibly behind the
// leader's by what is in flight).
func (g *metaGroup) read(f func(*meta.State)) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	f(g.state)
}

// ---------------------------------------------------------------------------------
// Proposing

// propose commits cmd through the meta group and returns what applying it gave. On
// a node that is not the leader the command is forwarded to the leader. Errors are
// the meta package's (a refused command) or replication's (no leader within ctx).
func (g *metaGroup) propose(ctx context.Context, cmd *meta.Command) (meta.Result, error) {
	r, _, err := g.proposeAt(ctx, cmd)
	return r, err
}

// proposeAt is propose, also returning the log index the command was committed at.
func (g *metaGroup) proposeAt(ctx context.Context, cmd *meta.Command) (meta.Result, uint64, error) {
	if !g.started.Load() {
		return meta.Result{}, 0, ErrNoMetaGroup
	}
	if cmd.ID == "" {
		cmd.ID = rand.Text()
	}
	if cmd.Time == 0 {
		cmd.Time = time.Now().UnixNano()
	}
	data := meta.EncodeCommand(cmd)
	for {
		r, index, err := g.proposeLocal(ctx, cmd.ID, data)
		if err == nil {
			return r, index, nil
		}
		var nl *replica.NotLeaderError
		if errors.As(err, &nl) && nl.Leader != 0 && nl.Leader != g.host.ID() {
			if name := g.n.tr.name(nl.Leader); name != "" {
				r, index, ferr := g.forward(ctx, name, data)
				if ferr == nil {
					return r, index, nil
				}
				err = ferr
			}
		}
		if !retryable(err) {
			return meta.Result{}, 0, err
		}
		select {
		case <-ctx.Done():
			return meta.Result{}, 0, fmt.Errorf("cluster: meta group: %w (last: %w)", ctx.Err(), err)
		case <-g.done:
			return meta.Result{}, 0, replica.ErrStopped
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	return errors.Is(err, replica.ErrNotLeader) || errors.Is(err, replica.ErrProposalDropped) ||
		errors.Is(err, ErrNoRoute) || errors.Is(err, ErrNoResponders) || errors.Is(err, errRequestTimeout)
}

func (g *metaGroup) proposeLocal(ctx context.Context, id string, data []byte) (meta.Result, uint64, error) {
	ch := make(chan meta.Result, 1)
	g.mu.Lock()
	g.waiters[id] = ch
	g.mu.Unlock()
	index, err := g.host.Propose(ctx, meta.MetaGroup, data)
	if err != nil {
		g.mu.Lock()
		delete(g.waiters, id)
		g.mu.Unlock()
		return meta.Result{}, 0, err
	}
	select {
	case r := <-ch:
		return r, index, nil
	default:
		// Propose returns once the entry is applied here, so the result is in; a
		// command applied twice (a retry that raced the first) finds no waiter
		// the second time and reads the state instead.
		g.mu.Lock()
		delete(g.waiters, id)
		g.mu.Unlock()
		return meta.Result{}, index, nil
	}
}

// wireResult is a Result on its way back to the node that forwarded the command.
type wireResult struct {
	Code     string         `json:"code,omitempty"`
	Error    string         `json:"error,omitempty"`
	Stream   *meta.Stream   `json:"stream,omitempty"`
	Consumer *meta.Consumer `json:"consumer,omitempty"`
	Client   string         `json:"client,omitempty"`
	Node     uint64         `json:"node,omitempty"`
	Previous uint64         `json:"previous,omitempty"`
	Index    uint64         `json:"index,omitempty"`
}

var resultCodes = []struct {
	code string
	err  error
}{
	{"bad_command", meta.ErrBadCommand}, {"exists", meta.ErrExists}, {"not_found", meta.ErrNotFound},
	{"no_placement", meta.ErrNoPlacement}, {"invalid", meta.ErrInvalid},
	{"not_leader", replica.ErrNotLeader}, {"dropped", replica.ErrProposalDropped},
}

func encodeResult(r meta.Result, index uint64, err error) []byte {
	w := wireResult{Stream: r.Stream, Consumer: r.Consumer, Client: r.Client, Node: r.Node, Previous: r.Previous, Index: index}
	if err == nil {
		err = r.Err
	}
	if err != nil {
		w.Code, w.Error = "internal", err.Error()
		for _, c := range resultCodes {
			if errors.Is(err, c.err) {
				w.Code = c.code
				break
			}
		}
	}
	b, _ := json.Marshal(&w)
	return b
}

func decodeResult(b []byte) (meta.Result, uint64, error) {
	var w wireResult
	if err := json.Unmarshal(b, &w); err != nil {
		return meta.Result{}, 0, fmt.Errorf("cluster: meta reply: %w", err)
	}
	r := meta.Result{Stream: w.Stream, Consumer: w.Consumer, Client: w.Client, Node: w.Node, Previous: w.Previous}
	if w.Code == "" {
		return r, w.Index, nil
	}
	for _, c := range resultCodes {
		if c.code == w.Code {
			if c.err == replica.ErrNotLeader || c.err == replica.ErrProposalDropped {
				return r, 0, fmt.Errorf("%w (at the leader: %s)", c.err, w.Error)
			}
			r.Err = fmt.Errorf("%w (%s)", c.err, w.Error)
			return r, w.Index, nil
		}
	}
	return r, 0, fmt.Errorf("cluster: meta command failed at the leader: %s", w.Error)
}

// forward sends an encoded command to the named leader and waits for its answer.
func (g *metaGroup) forward(ctx context.Context, leader string, data []byte) (meta.Result, uint64, error) {
	b, err := g.n.Request(ctx, metaProposePrefix+leader, data, 2*time.Second)
	if err != nil {
		return meta.Result{}, 0, err
	}
	return decodeResult(b)
}

// rpcSink takes the commands other nodes forward to this one, each answered from a
// goroutine of its own: a proposal waits for a commit, and the sink runs on a
// route's reader.
type rpcSink struct{ g *metaGroup }

func (s rpcSink) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	g := s.g
	if len(m.Reply) == 0 {
		return true
	}
	reply := string(m.Reply)
	data := append([]byte(nil), m.Payload...)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var cmd meta.Command
		var r meta.Result
		var index uint64
		err := json.Unmarshal(data, &cmd)
		if err == nil {
			// Proposed here only: a forward is never forwarded again, so two
			// nodes that disagree on the leader cannot bounce it between them.
			r, index, err = g.proposeLocal(ctx, cmd.ID, data)
		} else {
			err = fmt.Errorf("%w: %v", meta.ErrBadCommand, err)
		}
		var p broker.Batch
		g.n.cfg.Broker.Publish(&p, &broker.Message{Subject: []byte(reply), Payload: encodeResult(r, index, err)})
		p.Flush()
	}()
	return true
}

func (rpcSink) Flush() {}

// ---------------------------------------------------------------------------------
// Forming the group and keeping it in line with membership

// start subscribes to the forwarding subjects and runs the loop that forms the
// group (or restarts it from its storage) and reconciles membership on the leader.
func (g *metaGroup) start(storage replica.Storage, restarting bool) error {
	g.proposeSub = &broker.Subscription{Sink: rpcSink{g}, Subject: metaProposePrefix + g.n.cfg.NodeName}
	if err := g.n.cfg.Broker.Subscribe(g.proposeSub); err != nil {
		return fmt.Errorf("cluster: meta group: %w", err)
	}
	if restarting {
		if err := g.host.AddGroup(replica.GroupConfig{ID: meta.MetaGroup, Storage: storage, StateMachine: g}); err != nil {
			return fmt.Errorf("cluster: meta group: %w", err)
		}
		g.started.Store(true)
		if err := g.n.addMQTTGroup(nil); err != nil {
			return err
		}
		g.announce()
		g.log.Info("meta group restarted from storage")
	}
	g.wg.Add(1)
	go g.loop(storage)
	return nil
}

func (g *metaGroup) stop() {
	close(g.done)
	_ = g.n.cfg.Broker.Unsubscribe(g.proposeSub)
	g.wg.Wait()
	g.mu.RLock()
	clients := g.clients
	g.mu.RUnlock()
	if clients != nil {
		clients.wg.Wait()
	}
}

func (g *metaGroup) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// loop forms the group once enough nodes are members, then, while this node leads,
// reconciles: every member is a node of the catalogue and a replica of the group,
// voters up to MaxMetaVoters.
func (g *metaGroup) loop(storage replica.Storage) {
	defer g.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-g.done:
			return
		case <-tick.C:
		case <-g.kick:
		}
		if !g.started.Load() {
			g.form(storage)
			continue
		}
		if !g.announced {
			if st, err := g.host.Status(meta.MetaGroup); err == nil && st.Leader != 0 {
				g.announce()
			}
		}
		g.reconcile()
		g.reconcileMQTT()
	}
}

// replicating lists the alive members that run replication, by name.
func (g *metaGroup) replicating() []membership.Node {
	var out []membership.Node
	for _, m := range g.n.ms.Members() {
		if m.State == membership.StateAlive && m.RaftID != 0 {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b membership.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// form starts the group on this node: as a founding voter once the cluster has
// ClusterSize members that replicate (the first of them by name, up to
// MaxMetaVoters, are the founders; every founder computes the same list), or empty,
// waiting to be added by the leader, when this node is not a founder.
func (g *metaGroup) form(storage replica.Storage) {
	members := g.replicating()
	var names []string
	formed := false
	var announcing []string
	for _, m := range members {
		names = append(names, m.Name+"/"+fmt.Sprint(m.RaftID))
		if m.MetaGroup {
			formed = true
			announcing = append(announcing, m.Name)
		}
	}
	// Founders decide alone, from what membership shows them: only a view that
	// has held still for a while (gossip has converged) may found the group.
	if key := strings.Join(names, ","); key != g.view {
		g.view, g.viewSince = key, time.Now()
	}
	self := false
	var voters []uint64
	switch {
	case formed:
		// The group exists (a node announces its replica): join it, empty, and
		// wait for its leader to add this node.
	case len(members) < g.n.cfg.ClusterSize || time.Since(g.viewSince) < formStable:
		return
	default:
		for _, m := range members[:min(g.n.cfg.ClusterSize, MaxMetaVoters)] {
			voters = append(voters, m.RaftID)
			self = self || m.RaftID == g.host.ID()
		}
	}
	gc := replica.GroupConfig{ID: meta.MetaGroup, Storage: storage, StateMachine: g}
	if self {
		gc.Voters = voters
	}
	if err := g.host.AddGroup(gc); err != nil {
		g.log.Error("meta group could not start", "err", err)
		return
	}
	g.started.Store(true)
	// The MQTT group is founded by the same founders, at the same time.
	if err := g.n.addMQTTGroup(gc.Voters); err != nil {
		g.log.Error("mqtt group could not start", "err", err)
	}
	if self {
		g.announce()
		g.log.Info("meta group formed", "voters", len(voters))
	} else {
		g.log.Info("meta group joined as a later node; waiting for the leader to add this node", "holding_replicas", announcing, "members", names)
	}
}

// formStable is how long the view of the members must hold still before a node
// founds the meta group.
const formStable = time.Second

// announce tells the other nodes this one holds a replica of the meta group, so
// that a node started later joins it instead of founding another. A founder (or a
// restarted replica) announces at once; a node that joined empty only once it has
// heard from a leader: until then the group may not exist yet, and its flag would
// keep the founders from founding it.
func (g *metaGroup) announce() {
	if g.announced {
		return
	}
	g.announced = true
	if err := g.n.ms.SetMetaGroup(); err != nil {
		g.log.Warn("announcing the meta group replica", "err", err)
	}
}

// reconcile runs on the leader: nodes join the catalogue and the group (as
// learners, promoted to voters once caught up while voters are fewer than the
// target: the largest odd number up to MaxMetaVoters that the members allow).
func (g *metaGroup) reconcile() {
	st, err := g.host.Status(meta.MetaGroup)
	if err != nil || st.State != "StateLeader" {
		return
	}
	members := g.replicating()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	var missing []meta.Node
	g.read(func(s *meta.State) {
		known := map[uint64]meta.Node{}
		for _, nd := range s.Nodes() {
			known[nd.ID] = nd
		}
		for _, m := range members {
			nd, ok := known[m.RaftID]
			if !ok || nd.Name != m.Name || !maps.Equal(nd.Tags, m.Tags) {
				if !nd.Evicted {
					missing = append(missing, meta.Node{ID: m.RaftID, Name: m.Name, Tags: m.Tags})
				}
			}
		}
	})
	for i := range missing {
		if _, err := g.propose(ctx, &meta.Command{Op: meta.OpAddNode, Node: &missing[i]}); err != nil {
			g.log.Warn("adding a node to the catalogue", "node", missing[i].Name, "err", err)
			return
		}
	}

	g.reconcileMembers(ctx, meta.MetaGroup, st, members)
}

// reconcileMQTT keeps the MQTT group's members in line with membership, as
// reconcile does the meta group's, on the node that leads the MQTT group.
func (g *metaGroup) reconcileMQTT() {
	if !g.n.mqttStarted.Load() {
		return
	}
	st, err := g.host.Status(meta.MQTTGroup)
	if err != nil || st.State != "StateLeader" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g.reconcileMembers(ctx, meta.MQTTGroup, st, g.replicating())
}

// reconcileMembers makes one membership change of group, led here, at a time:
// evicted nodes leave, members join as learners, learners caught up become voters
// while voters are fewer than the target (the largest odd number up to
// MaxMetaVoters that the members allow).
func (g *metaGroup) reconcileMembers(ctx context.Context, group uint64, st replica.Status, members []membership.Node) {
	what := "the meta group"
	if group == meta.MQTTGroup {
		what = "the mqtt group"
	}
	in := map[uint64]bool{}
	for _, id := range st.Voters {
		in[id] = true
	}
	for _, id := range st.Learners {
		in[id] = true
	}
	var evicted []uint64
	g.read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if nd.Evicted && in[nd.ID] && nd.ID != g.host.ID() {
				evicted = append(evicted, nd.ID)
			}
		}
	})
	for _, id := range evicted {
		if _, err := g.host.RemoveReplica(ctx, group, id); err != nil {
			g.log.Debug("removing an evicted node from "+what, "node", g.n.tr.name(id), "err", err)
		} else {
			g.log.Info("evicted node removed from "+what, "node", g.n.tr.name(id))
		}
		return // one membership change at a time
	}
	for _, m := range members {
		if !in[m.RaftID] && !g.evicted(m.RaftID) {
			if _, err := g.host.AddLearner(ctx, group, m.RaftID); err != nil {
				g.log.Debug("adding a learner to "+what, "node", m.Name, "err", err)
			} else {
				g.log.Info("node added as a learner to "+what, "node", m.Name)
			}
			return // one membership change at a time
		}
	}
	target := min(MaxMetaVoters, len(members))
	if target%2 == 0 {
		target--
	}
	if len(st.Voters) >= target {
		return
	}
	for _, p := range st.Progress {
		if p.Learner && p.RecentActive && p.Lag == 0 {
			if _, err := g.host.Promote(ctx, group, p.Node); err != nil {
				g.log.Debug("promoting a learner of "+what, "node", g.n.tr.name(p.Node), "err", err)
			} else {
				g.log.Info("node promoted to voter of "+what, "node", g.n.tr.name(p.Node))
			}
			return
		}
	}
}

// handOff moves the meta group's leadership to an up-to-date voter before this node
// goes, so the group does not wait out an election timeout to go on.
func (g *metaGroup) handOff(limit time.Duration) {
	if !g.started.Load() {
		return
	}
	st, err := g.host.Status(meta.MetaGroup)
	if err != nil || st.State != "StateLeader" {
		return
	}
	to := handOffTarget(st, g.host.ID())
	if to == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := g.host.TransferLeadership(ctx, meta.MetaGroup, to); err != nil {
		g.log.Warn("meta group: leadership not handed off before shutdown", "to", g.n.tr.name(to), "err", err)
		return
	}
	g.log.Info("meta group: leadership handed off before shutdown", "to", g.n.tr.name(to))
}

// ErrNodeAlive is Evict's answer for a node that is still a member: only a node
// that is gone may be removed for good.
var ErrNodeAlive = errors.New("cluster: the node is alive; stop it before evicting it")

// Evict removes the named node from the cluster for good: the catalogue marks it
// evicted (its stream replicas move to other nodes) and the meta group's leader
// removes it from the group. The node must be gone (not an alive member).
func (n *Node) Evict(ctx context.Context, name string) error {
	if n.meta == nil {
		return ErrNoMetaGroup
	}
	if name == n.cfg.NodeName {
		return fmt.Errorf("%w (it is this node)", ErrNodeAlive)
	}
	for _, m := range n.ms.Members() {
		if m.Name == name && m.State == membership.StateAlive {
			return fmt.Errorf("%s: %w", name, ErrNodeAlive)
		}
	}
	var id uint64
	n.meta.read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if nd.Name == name && !nd.Evicted {
				id = nd.ID
			}
		}
	})
	if id == 0 {
		return fmt.Errorf("node %q: %w", name, meta.ErrNotFound)
	}
	r, err := n.meta.propose(ctx, &meta.Command{Op: meta.OpEvictNode, NodeID: id})
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return fmt.Errorf("evicting %s: %w", name, err)
	}
	n.meta.poke()
	return nil
}

// evicted reports whether the catalogue has node id evicted.
func (g *metaGroup) evicted(id uint64) bool {
	out := false
	g.read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if nd.ID == id {
				out = nd.Evicted
			}
		}
	})
	return out
}
