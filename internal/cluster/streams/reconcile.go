package streams

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// reconcileEvery bounds how long a failed step waits to be tried again.
const reconcileEvery = time.Second

// loop keeps the node's streams in line with the catalogue and the groups'
// leadership: what changes wakes it, and a slow tick retries what failed.
func (s *Service) loop(changed <-chan struct{}, stopWatch func()) {
	defer s.wg.Done()
	defer stopWatch()
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	for {
		s.reconcile()
		select {
		case <-s.done:
			return
		case <-changed:
		case <-s.kick:
		case <-tick.C:
			s.restartFailed()
		}
	}
}

// restartFailed closes the replicas whose group stopped on an error (a catch-up
// that could not reach the leader, a disk error), so that the next pass opens them
// again from their disk.
func (s *Service) restartFailed() {
	stats, err := s.cfg.Node.Host().Stats()
	if err != nil || len(stats.Failed) == 0 {
		return
	}
	for name, p := range s.local {
		at := slices.IndexFunc(p.groups, func(g uint64) bool { return slices.Contains(stats.Failed, g) })
		if at < 0 {
			continue
		}
		var why error
		if st, err := s.cfg.Node.Host().Status(p.groups[at]); err == nil {
			why = st.Failed
		}
		s.log.Warn("stream replica failed; opening it again", "stream", name, "partition", at, "group", p.groups[at], "err", why)
		s.closeReplica(name, p)
	}
}

// closeReplica stops a stream replica's groups and closes it, keeping its data
// and Raft state, for the next pass to open it again.
func (s *Service) closeReplica(name string, p *placed) {
	s.unserve(p)
	if p.s.Replicated() {
		for _, g := range p.groups {
			if err := s.cfg.Node.StopGroup(g, false); err != nil {
				s.log.Warn("stopping a stream group", "stream", name, "group", g, "err", err)
			}
		}
	}
	if err := s.cfg.Streams.CloseStream(name); err != nil {
		s.log.Warn("closing a stream replica", "stream", name, "err", err)
	}
	delete(s.local, name)
}

// reconcile opens the streams the catalogue places here, removes those it no longer
// does, applies configuration changes, and serves each stream whose group this node
// leads.
func (s *Service) reconcile() {
	var streams []*meta.Stream
	s.cfg.Node.Catalogue(func(c *meta.State) { streams = c.Streams() })
	names := make(map[string]struct{}, len(streams))
	want := map[string]*meta.Stream{}
	all := make(map[string]*meta.Stream, len(streams))
	for _, st := range streams {
		names[st.Name] = struct{}{}
		all[st.Name] = st
		if len(st.Groups) > 0 && slices.Contains(st.Groups[0].Replicas, s.self) {
			want[st.Name] = st
		}
	}
	s.catalogued.Store(&names)

	for name, p := range s.local {
		st := want[name]
		if st != nil && st.Groups[0].ID == p.group {
			continue
		}
		if cur := all[name]; cur != nil && cur.Groups[0].ID == p.group && p.s.Replicated() {
			// Moved off this node: the replica stays until the group's leader
			// has taken it out of the group, which needs a majority of the
			// replicas it had. Leading it, this node hands the group over.
			leads, ok := s.follow(p)
			if ok && leads {
				s.changeMembers(p, cur.Groups[0].Replicas)
			}
			if !ok || leads || !s.leftGroup(name, p) {
				continue
			}
		}
		s.remove(name, p)
	}
	for name, st := range want {
		p := s.local[name]
		if p != nil && len(st.Groups) != len(p.groups) {
			// Partitions were added: the replica opens again with a group
			// (and a log) for each, the old ones as they were.
			s.log.Info("stream partitions added; opening the replica again", "stream", name, "partitions", len(st.Groups), "were", len(p.groups))
			s.closeReplica(name, p)
			p = nil
		}
		if p == nil {
			var err error
			if p, err = s.open(st); err != nil {
				s.log.Error("opening a stream replica", "stream", name, "group", st.Groups[0].ID, "err", err)
				continue
			}
			s.local[name] = p
		}
		if st.Revision != p.revision {
			s.reconfigure(p, st)
		}
		leads, ok := s.follow(p)
		if !ok {
			continue
		}
		if !leads {
			p.membersAt = 0
		} else if p.s.Replicated() && p.membersAt != st.Revision && s.changeMembers(p, st.Groups[0].Replicas) {
			p.membersAt = st.Revision
		}
	}
	if !s.swept {
		s.sweep(names)
	}
}

// follow makes the replica lead (capture, run consumers, serve the stream's API) if
// and only if its groups elected this node; ok is false when that failed, to be
// tried again. The node its partition 0's group elects leads the stream, and asks
// for the leadership of every other partition's group: a stream is served by one
// node, which must lead all of them.
func (s *Service) follow(p *placed) (leads, ok bool) {
	leads = !p.s.Replicated() || s.leaderOf(p.group) == s.self
	if leads && p.s.Replicated() {
		for _, g := range p.groups[1:] {
			if s.leaderOf(g) != s.self {
				leads = false
				s.pullLeadership(p, g)
				break
			}
		}
	}
	if err := p.s.SetLeader(leads); err != nil {
		s.log.Error("stream leadership", "stream", p.s.Key(), "leader", leads, "err", err)
		return leads, false
	}
	switch {
	case leads && !p.serving:
		s.serve(p)
	case !leads && p.serving:
		s.unserve(p)
	}
	return leads, true
}

// pullLeadership asks, in the background, for the leadership of group (a partition
// of a stream this node leads) for this node.
func (s *Service) pullLeadership(p *placed, group uint64) {
	if !p.pulling.CompareAndSwap(false, true) {
		return
	}
	s.wg.Go(func() {
		defer p.pulling.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Node.Host().TransferLeadership(ctx, group, s.self); err != nil {
			s.log.Debug("taking a partition's leadership", "stream", p.s.Key(), "group", group, "err", err)
		}
		s.poke()
	})
}

// open opens this node's replica of st and starts its groups, one per partition.
func (s *Service) open(st *meta.Stream) (*placed, error) {
	var cfg streamapi.StreamConfig
	if err := json.Unmarshal(st.Config, &cfg); err != nil {
		return nil, err
	}
	groups := make([]uint64, len(st.Groups))
	for i, g := range st.Groups {
		groups[i] = g.ID
	}
	created := time.Unix(0, st.Created).UTC()
	account, _ := stream.SplitKey(st.Name)
	if st.Replicas <= 1 {
		str, _, err := s.cfg.Streams.OpenReplica(cfg, created, stream.ReplicaConfig{Account: account, Groups: groups})
		if err != nil {
			return nil, err
		}
		s.log.Info("stream opened", "stream", st.Name, "replicas", 1)
		return &placed{s: str, group: groups[0], groups: groups, revision: st.Revision}, nil
	}
	str, machines, err := s.cfg.Streams.OpenReplica(cfg, created, stream.ReplicaConfig{Account: account, Groups: groups,
		Replicator: s.cfg.Node.Host(), Fetch: s.fetcher(st.Name)})
	if err != nil {
		return nil, err
	}
	for i, g := range st.Groups {
		if err := s.cfg.Node.StartGroup(g.ID, machines[i], g.Founders); err != nil {
			for _, started := range st.Groups[:i] {
				_ = s.cfg.Node.StopGroup(started.ID, false)
			}
			_ = s.cfg.Streams.CloseStream(st.Name)
			return nil, err
		}
	}
	s.log.Info("stream replica opened", "stream", st.Name, "replicas", st.Replicas, "groups", groups)
	return &placed{s: str, group: groups[0], groups: groups, revision: st.Revision}, nil
}

// remove stops serving a stream the catalogue took off this node (or deleted) and
// deletes its data.
func (s *Service) remove(name string, p *placed) {
	s.unserve(p)
	if p.s.Replicated() {
		for _, g := range p.groups {
			if err := s.cfg.Node.StopGroup(g, true); err != nil {
				s.log.Warn("stopping a stream's group", "stream", name, "group", g, "err", err)
			}
		}
	}
	if err := s.cfg.Streams.DeleteStream(name); err != nil && !errors.Is(err, stream.ErrStreamNotFound) {
		s.log.Warn("removing a stream replica", "stream", name, "err", err)
	}
	delete(s.local, name)
	s.log.Info("stream replica removed", "stream", name, "group", p.group)
}

// reconfigure applies a configuration the catalogue changed.
func (s *Service) reconfigure(p *placed, st *meta.Stream) {
	var cfg streamapi.StreamConfig
	if err := json.Unmarshal(st.Config, &cfg); err != nil {
		s.log.Error("stream configuration in the catalogue", "stream", st.Name, "err", err)
		return
	}
	if _, err := s.cfg.Streams.UpdateAccountStream(p.s.Account(), cfg); err != nil {
		s.log.Error("updating a stream replica", "stream", st.Name, "err", err)
		return
	}
	p.revision = st.Revision
}

// serve subscribes this node to the stream's API and ack subjects, for every node.
func (s *Service) serve(p *placed) {
	api, acks := serveSubjects(p.s.Key())
	for _, subj := range api {
		p.subs = append(p.subs, &broker.Subscription{Sink: s.cfg.Streams.APISink(), Subject: subj})
	}
	for _, subj := range acks {
		p.subs = append(p.subs, &broker.Subscription{Sink: s.cfg.Streams.AckSink(), Subject: subj})
	}
	if p.s.Replicated() {
		p.subs = append(p.subs, &broker.Subscription{Sink: fetchSink{s, p.s}, Subject: fetchPrefix + p.s.Key()})
	}
	for _, sub := range p.subs {
		if err := s.cfg.Broker.Subscribe(sub); err != nil {
			s.log.Error("serving a stream", "stream", p.s.Key(), "subject", sub.Subject, "err", err)
		}
	}
	p.serving = true
	s.log.Info("serving stream", "stream", p.s.Key(), "group", p.group)
}

func (s *Service) unserve(p *placed) {
	if !p.serving {
		return
	}
	for _, sub := range p.subs {
		_ = s.cfg.Broker.Unsubscribe(sub)
	}
	p.subs, p.serving = nil, false
	s.log.Info("stopped serving stream", "stream", p.s.Key(), "group", p.group)
}

// changeMembers brings the groups of a stream this node leads in line with the
// replicas the catalogue places it on, one change per group and pass: a new replica
// joins as a learner and becomes a voter once it has caught up, and a replica moved
// off is removed (the leader itself hands its leadership over first). It reports
// whether every group was in line already.
func (s *Service) changeMembers(p *placed, want []uint64) bool {
	inLine := true
	for part, g := range p.groups {
		if !s.changeGroupMembers(p, part, g, want) {
			inLine = false
		}
	}
	return inLine
}

// changeGroupMembers is changeMembers for partition part's group.
func (s *Service) changeGroupMembers(p *placed, part int, group uint64, want []uint64) bool {
	host := s.cfg.Node.Host()
	st, err := host.Status(group)
	if err != nil || st.State != "StateLeader" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in := map[uint64]bool{}
	for _, id := range st.Voters {
		in[id] = true
	}
	for _, id := range st.Learners {
		in[id] = true
	}
	name := p.s.Key()
	for _, id := range want {
		if !in[id] {
			if _, err := host.AddLearner(ctx, group, id); err != nil {
				s.log.Debug("adding a stream replica", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(id), "err", err)
			} else {
				s.log.Info("stream replica added as a learner", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(id))
			}
			return false
		}
	}
	waiting := false // a learner still catching up
	for _, pr := range st.Progress {
		if pr.Learner && slices.Contains(want, pr.Node) && !(pr.RecentActive && pr.Lag == 0) {
			waiting = true
		}
		if pr.Learner && slices.Contains(want, pr.Node) && pr.RecentActive && pr.Lag == 0 {
			if _, err := host.Promote(ctx, group, pr.Node); err != nil {
				s.log.Debug("promoting a stream replica", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(pr.Node), "err", err)
			} else {
				s.log.Info("stream replica promoted to voter", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(pr.Node))
			}
			return false
		}
	}
	for id := range in {
		if slices.Contains(want, id) {
			continue
		}
		if id == s.self {
			if to := handOffTo(st, want); to != 0 {
				_ = host.TransferLeadership(ctx, group, to)
			}
			return false
		}
		if _, err := host.RemoveReplica(ctx, group, id); err != nil {
			s.log.Debug("removing a stream replica", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(id), "err", err)
		} else {
			s.log.Info("stream replica removed from the group", "stream", name, "partition", part, "node", s.cfg.Node.NodeName(id))
		}
		return false
	}
	return !waiting
}

// handOffTo picks a caught-up voter among want to lead instead of this node.
func handOffTo(st replica.Status, want []uint64) uint64 {
	for _, pr := range st.Progress {
		if !pr.Learner && pr.Node != st.Node && slices.Contains(want, pr.Node) && pr.RecentActive && pr.Lag == 0 {
			return pr.Node
		}
	}
	return 0
}

// leftGroup reports whether the group of a stream moved off this node has let this
// replica go: its leader (another node) no longer lists it.
func (s *Service) leftGroup(name string, p *placed) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := s.cfg.Node.Request(ctx, infoSubject(name), nil, time.Second)
	if err != nil {
		return false
	}
	var r streamapi.Response[streamapi.StreamInfo]
	if json.Unmarshal(b, &r) != nil || r.Value == nil || r.Value.Cluster == nil || r.Value.Cluster.Group != p.group {
		return false
	}
	self := s.cfg.Node.NodeName(s.self)
	if r.Value.Cluster.Leader == "" || r.Value.Cluster.Leader == self {
		return false
	}
	return !slices.ContainsFunc(r.Value.Cluster.Replicas, func(rp streamapi.StreamReplica) bool { return rp.Node == self })
}

// sweep removes, once, what a stream the catalogue deleted while this node was
// away left on its disk. It waits until this node's replica of the meta group has
// caught up with its leader, so that a stream is never removed for being missing
// from a catalogue still being replayed.
func (s *Service) sweep(names map[string]struct{}) {
	st := s.cfg.Node.Status().Meta
	if st == nil || !st.Running || st.Leader == "" || st.Applied < st.Commit || st.Commit == 0 {
		return
	}
	s.swept = true
	found, err := s.cfg.Streams.GroupStreams()
	if err != nil {
		s.log.Warn("looking for stream replicas left behind", "err", err)
		return
	}
	for name, groups := range found {
		if _, ok := names[name]; ok || s.local[name] != nil {
			continue
		}
		if err := s.cfg.Streams.RemoveGroupStream(name); err != nil {
			s.log.Warn("removing a stream the catalogue deleted", "stream", name, "err", err)
			continue
		}
		for _, g := range groups {
			_ = s.cfg.Node.StopGroup(g, true)
		}
		s.log.Info("removed a stream the catalogue deleted while this node was away", "stream", name, "groups", groups)
	}
}
