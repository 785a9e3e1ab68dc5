package streams

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/meta"
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
		if !slices.Contains(stats.Failed, p.group) {
			continue
		}
		s.log.Warn("stream replica failed; opening it again", "stream", name, "group", p.group)
		s.unserve(p)
		if err := s.cfg.Node.StopGroup(p.group, false); err != nil {
			s.log.Warn("stopping a failed stream group", "stream", name, "err", err)
		}
		if err := s.cfg.Streams.CloseStream(name); err != nil {
			s.log.Warn("closing a failed stream replica", "stream", name, "err", err)
		}
		delete(s.local, name)
	}
}

// reconcile opens the streams the catalogue places here, removes those it no longer
// does, applies configuration changes, and serves each stream whose group this node
// leads.
func (s *Service) reconcile() {
	var streams []*meta.Stream
	s.cfg.Node.Catalogue(func(c *meta.State) { streams = c.Streams() })
	names := make(map[string]struct{}, len(streams))
	want := map[string]*meta.Stream{}
	for _, st := range streams {
		names[st.Name] = struct{}{}
		if len(st.Groups) > 0 && slices.Contains(st.Groups[0].Replicas, s.self) {
			want[st.Name] = st
		}
	}
	s.catalogued.Store(&names)

	for name, p := range s.local {
		if st := want[name]; st == nil || st.Groups[0].ID != p.group {
			s.remove(name, p)
		}
	}
	for name, st := range want {
		p := s.local[name]
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
		leads := !p.s.Replicated() || s.leaderOf(p.group) == s.self
		if err := p.s.SetLeader(leads); err != nil {
			s.log.Error("stream leadership", "stream", name, "leader", leads, "err", err)
			continue
		}
		switch {
		case leads && !p.serving:
			s.serve(p)
		case !leads && p.serving:
			s.unserve(p)
		}
	}
	if !s.swept {
		s.sweep(names)
	}
}

// open opens this node's replica of st and starts its group.
func (s *Service) open(st *meta.Stream) (*placed, error) {
	var cfg streamapi.StreamConfig
	if err := json.Unmarshal(st.Config, &cfg); err != nil {
		return nil, err
	}
	g := st.Groups[0]
	created := time.Unix(0, st.Created).UTC()
	if st.Replicas <= 1 {
		str, _, err := s.cfg.Streams.OpenReplica(cfg, created, stream.ReplicaConfig{Group: g.ID})
		if err != nil {
			return nil, err
		}
		s.log.Info("stream opened", "stream", st.Name, "replicas", 1)
		return &placed{s: str, group: g.ID, revision: st.Revision}, nil
	}
	str, machine, err := s.cfg.Streams.OpenReplica(cfg, created, stream.ReplicaConfig{Group: g.ID,
		Replicator: s.cfg.Node.Host(), Fetch: s.fetcher(st.Name)})
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Node.StartGroup(g.ID, machine, g.Founders); err != nil {
		_ = s.cfg.Streams.CloseStream(st.Name)
		return nil, err
	}
	s.log.Info("stream replica opened", "stream", st.Name, "replicas", st.Replicas, "group", g.ID)
	return &placed{s: str, group: g.ID, revision: st.Revision}, nil
}

// remove stops serving a stream the catalogue took off this node (or deleted) and
// deletes its data.
func (s *Service) remove(name string, p *placed) {
	s.unserve(p)
	if p.s.Replicated() {
		if err := s.cfg.Node.StopGroup(p.group, true); err != nil {
			s.log.Warn("stopping a stream's group", "stream", name, "group", p.group, "err", err)
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
	if _, err := s.cfg.Streams.UpdateStream(cfg); err != nil {
		s.log.Error("updating a stream replica", "stream", st.Name, "err", err)
		return
	}
	p.revision = st.Revision
}

// serve subscribes this node to the stream's API and ack subjects, for every node.
func (s *Service) serve(p *placed) {
	api, acks := serveSubjects(p.s.Name())
	for _, subj := range api {
		p.subs = append(p.subs, &broker.Subscription{Sink: s.cfg.Streams.APISink(), Subject: subj})
	}
	for _, subj := range acks {
		p.subs = append(p.subs, &broker.Subscription{Sink: s.cfg.Streams.AckSink(), Subject: subj})
	}
	if p.s.Replicated() {
		p.subs = append(p.subs, &broker.Subscription{Sink: fetchSink{s, p.s}, Subject: fetchPrefix + p.s.Name()})
	}
	for _, sub := range p.subs {
		if err := s.cfg.Broker.Subscribe(sub); err != nil {
			s.log.Error("serving a stream", "stream", p.s.Name(), "subject", sub.Subject, "err", err)
		}
	}
	p.serving = true
	s.log.Info("serving stream", "stream", p.s.Name(), "group", p.group)
}

func (s *Service) unserve(p *placed) {
	for _, sub := range p.subs {
		_ = s.cfg.Broker.Unsubscribe(sub)
	}
	p.subs, p.serving = nil, false
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
	for name, group := range found {
		if _, ok := names[name]; ok || s.local[name] != nil {
			continue
		}
		if err := s.cfg.Streams.RemoveGroupStream(name); err != nil {
			s.log.Warn("removing a stream the catalogue deleted", "stream", name, "err", err)
			continue
		}
		_ = s.cfg.Node.StopGroup(group, true)
		s.log.Info("removed a stream the catalogue deleted while this node was away", "stream", name, "group", group)
	}
}
