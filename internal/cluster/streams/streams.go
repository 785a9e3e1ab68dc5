// Package streams runs a cluster node's share of the cluster's streams when the
// cluster replicates (cluster_size): it answers the stream API's catalogue requests
// (create, update, delete, list) through the meta group, opens the stream replicas
// the catalogue places on this node and starts their Raft groups, and, on the node
// that leads a stream's group, serves that stream's requests, acks and captured
// subjects to the whole cluster.
//
// Routing needs no forwarding of its own: the leader subscribes to the stream's API
// and ack subjects as interest like any other, so a request made on any node reaches
// it over the routes and its answer goes back on the requester's reply subject. The
// catch-all "$TERN.API.>" of every node (a node-local subscription) leaves requests
// for the catalogue's streams to that leader and answers the rest: catalogue
// requests, and streams of the node alone (created before the cluster replicated).
//
// Accounts' streams are catalogued like the global account's, by their keys
// (stream.Key: "$A.<account>.<name>"), their configurations in the account's
// terms; their requests and acks come on the account's subjects
// ("$A.<account>.$TERN.API.>"), which a second pair of catch-alls takes.
package streams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Config is what the service runs on.
type Config struct {
	Node    *cluster.Node
	Streams *stream.Manager // started with ExternalAPI
	Broker  *broker.Broker
	// DefaultReplicas is the replica count of a stream created without one.
	DefaultReplicas int
	Log             *slog.Logger
}

// Service is the node's share of the cluster's streams.
type Service struct {
	cfg  Config
	log  *slog.Logger
	self uint64

	// catalogued holds the keys of the catalogue's streams, read by the
	// catch-all on every request.
	catalogued atomic.Pointer[map[string]struct{}]

	front []*broker.Subscription
	work  chan apiRequest

	leadersMu sync.Mutex
	leaders   map[uint64]uint64 // group → leader, as this node's replicas see it

	// Owned by the reconciler.
	local map[string]*placed
	swept bool

	readers chan struct{} // fetches being answered
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

// placed is a stream the catalogue placed on this node.
type placed struct {
	s        *stream.Stream
	group    uint64   // partition 0's, the stream's own
	groups   []uint64 // every partition's, group first
	revision uint64
	// pulling is set while this node, leading the stream's group, asks for the
	// leadership of a partition's group it does not lead.
	pulling atomic.Bool
	serving bool // the stream's API and ack subscriptions are this node's
	subs    []*broker.Subscription
	// membersAt is the catalogue revision the group's members were last found in
	// line with, while this node leads it (0: not checked since it leads).
	membersAt uint64
}

// apiRequest is a catalogue request copied off the publisher's buffers.
type apiRequest struct {
	op      string // after "$TERN.API."
	account string // "" for the global account
	reply   []byte
	body    []byte
}

// workers answer catalogue requests concurrently: each waits for the meta group.
const (
	workers    = 4
	maxWaiting = 1024
)

// Start subscribes the node's catch-all and starts reconciling. The stream engine
// must have been started with ExternalAPI.
func Start(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultReplicas == 0 {
		cfg.DefaultReplicas = 1
	}
	s := &Service{cfg: cfg, log: cfg.Log.With("component", "streams"), self: cfg.Node.RaftID(),
		work: make(chan apiRequest, maxWaiting), leaders: map[uint64]uint64{}, local: map[string]*placed{},
		readers: make(chan struct{}, fetchReaders), kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.catalogued.Store(&map[string]struct{}{})
	cfg.Streams.SetDescribeCluster(s.describe)
	cfg.Node.OnLeaderChange(s.leaderChanged)
	changed, stopWatch := cfg.Node.WatchCatalogue()
	s.front = []*broker.Subscription{
		{Sink: frontSink{s}, Subject: streamapi.APIPrefix + ">", NodeLocal: true},
		{Sink: frontSink{s}, Subject: streamapi.AckPrefix + ">", NodeLocal: true},
		{Sink: frontSink{s}, Subject: stream.AccountAPISubject, NodeLocal: true},
		{Sink: frontSink{s}, Subject: stream.AccountAckSubject, NodeLocal: true},
	}
	for _, sub := range s.front {
		if err := cfg.Broker.Subscribe(sub); err != nil {
			stopWatch()
			return nil, fmt.Errorf("streams: %w", err)
		}
	}
	for range workers {
		s.wg.Add(1)
		go s.worker()
	}
	s.wg.Add(1)
	go s.loop(changed, stopWatch)
	return s, nil
}

// Stop unsubscribes and stops the reconciler. The streams stay open: the stream
// engine closes them, and the cluster node their groups.
func (s *Service) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	for _, sub := range s.front {
		_ = s.cfg.Broker.Unsubscribe(sub)
	}
	close(s.done)
	s.wg.Wait()
	for _, p := range s.local {
		s.unserve(p)
	}
}

func (s *Service) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Service) leaderChanged(lc replica.LeaderChange) {
	if lc.Group == meta.MetaGroup {
		return
	}
	s.leadersMu.Lock()
	s.leaders[lc.Group] = lc.Leader
	s.leadersMu.Unlock()
	s.poke()
}

func (s *Service) leaderOf(group uint64) uint64 {
	s.leadersMu.Lock()
	defer s.leadersMu.Unlock()
	return s.leaders[group]
}

// isCatalogued reports whether the stream of that name, in the account whose
// subjects start with prefix ("" for the global account), is the catalogue's.
func (s *Service) isCatalogued(prefix, name []byte) bool {
	if len(prefix) == 0 {
		_, ok := (*s.catalogued.Load())[string(name)]
		return ok
	}
	var buf [192]byte
	key := append(append(buf[:0], prefix...), name...)
	_, ok := (*s.catalogued.Load())[string(key)]
	return ok
}

// ---------------------------------------------------------------------------------
// The catch-all

// frontSink is the node's "$TERN.API.>" and "$TERN.ACK.>" subscription.
type frontSink struct{ s *Service }

var (
	apiPrefix     = []byte(streamapi.APIPrefix)
	ackPrefix     = []byte(streamapi.AckPrefix)
	clusterPrefix = []byte(streamapi.ClusterPrefix)
)

func (f frontSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	s := f.s
	subj := m.Subject
	prefix, account, own, inAccount := stream.CutAccount(subj)
	if inAccount {
		subj = own
	}
	if rest, ok := bytes.CutPrefix(subj, ackPrefix); ok {
		name, _, _ := bytes.Cut(rest, []byte{'.'})
		if s.isCatalogued(prefix, name) {
			return true // its leader's subscription has it
		}
		return s.cfg.Streams.AckSink().Deliver(sub, m)
	}
	if inAccount && !s.cfg.Streams.AccountKnown(string(account)) {
		return true // no such account: nobody answers
	}
	if bytes.HasPrefix(subj, clusterPrefix) {
		if inAccount {
			return s.cfg.Streams.APISink().Deliver(sub, m) // refused there
		}
		return true // the server's to answer
	}
	op, ok := bytes.CutPrefix(subj, apiPrefix)
	if !ok {
		return true
	}
	if catalogueOp(op) {
		if len(m.Reply) == 0 {
			return true
		}
		select {
		case s.work <- apiRequest{op: string(op), account: string(account), reply: bytes.Clone(m.Reply), body: bytes.Clone(m.Payload)}:
			return true
		default:
			return false
		}
	}
	if name := streamOf(op); name != nil && s.isCatalogued(prefix, name) {
		return true
	}
	return s.cfg.Streams.APISink().Deliver(sub, m)
}

func (frontSink) Flush() {}

// catalogueOp reports whether an API request changes or lists the catalogue.
func catalogueOp(op []byte) bool {
	return string(op) == "STREAM.LIST" || bytes.HasPrefix(op, []byte("STREAM.CREATE.")) ||
		bytes.HasPrefix(op, []byte("STREAM.UPDATE.")) || bytes.HasPrefix(op, []byte("STREAM.DELETE."))
}

// streamOf returns the stream an API request is about, nil if none.
func streamOf(op []byte) []byte {
	tok := bytes.Split(op, []byte{'.'})
	switch {
	case len(tok) == 3 && string(tok[0]) == "STREAM":
		return tok[2]
	case len(tok) == 4 && string(tok[0]) == "STREAM" && string(tok[1]) == "MSG":
		return tok[3]
	case len(tok) >= 3 && string(tok[0]) == "CONSUMER":
		return tok[2]
	}
	return nil
}

// serveSubjects are the subjects of one stream's API requests and acks (by its
// key: in its account's subject space), served by the node leading its group.
func serveSubjects(key string) (api, acks []string) {
	account, name := stream.SplitKey(key)
	p := stream.SubjectPrefix(account) + streamapi.APIPrefix
	return []string{p + "STREAM.INFO." + name, p + "STREAM.PURGE." + name, p + "STREAM.MSG.GET." + name,
			p + "CONSUMER.*." + name, p + "CONSUMER.*." + name + ".*"},
		[]string{stream.SubjectPrefix(account) + streamapi.AckPrefix + name + ".>"}
}

// infoSubject is where the stream of that key answers info requests.
func infoSubject(key string) string {
	account, name := stream.SplitKey(key)
	return stream.SubjectPrefix(account) + streamapi.StreamInfoSubject(name)
}

// ---------------------------------------------------------------------------------
// Catalogue requests

func (s *Service) worker() {
	defer s.wg.Done()
	var b broker.Batch
	for {
		select {
		case <-s.done:
			return
		case req := <-s.work:
			if resp := s.handle(req); resp != nil {
				s.cfg.Broker.Publish(&b, &broker.Message{Subject: req.reply, Payload: resp})
				b.Flush()
			}
		}
	}
}

// opTimeout bounds how long a catalogue request waits for the meta group and then
// for the stream's leader.
const opTimeout = 10 * time.Second

// handle answers a catalogue request; nil means the stream engine answers it.
func (s *Service) handle(req apiRequest) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if req.op == "STREAM.LIST" {
		return s.list(ctx, req.account)
	}
	verb, name, _ := strings.Cut(strings.TrimPrefix(req.op, "STREAM."), ".")
	if strings.Contains(name, ".") {
		return stream.Respond[struct{}](nil, &streamapi.APIError{Code: streamapi.CodeBadRequest, Description: "unknown API request " + req.op})
	}
	key := stream.Key(req.account, name)
	var known bool
	s.cfg.Node.Catalogue(func(c *meta.State) { known = c.Stream(key) != nil })
	if !known {
		if st, err := s.cfg.Streams.Stream(key); err == nil && st.Group() == 0 {
			// A stream of this node alone: answered as a single node does.
			s.cfg.Streams.APISink().Deliver(nil, &broker.Message{Subject: []byte(stream.SubjectPrefix(req.account) + streamapi.APIPrefix + req.op),
				Reply: req.reply, Payload: req.body})
			return nil
		}
	}
	switch verb {
	case "CREATE":
		return s.create(ctx, req.account, name, req.body)
	case "UPDATE":
		return s.update(ctx, req.account, name, req.body)
	default:
		return s.delete(ctx, key)
	}
}

// metaError turns the catalogue's refusals into the stream API's codes.
func metaError(err error) error {
	code := streamapi.CodeInternal
	switch {
	case errors.Is(err, meta.ErrExists):
		code = streamapi.CodeConflict
	case errors.Is(err, meta.ErrNotFound):
		code = streamapi.CodeStreamNotFound
	case errors.Is(err, meta.ErrInvalid), errors.Is(err, meta.ErrBadCommand):
		code = streamapi.CodeBadRequest
	case errors.Is(err, meta.ErrNoPlacement), errors.Is(err, cluster.ErrNoMetaGroup), errors.Is(err, context.DeadlineExceeded):
		code = streamapi.CodeUnavailable
	}
	return &streamapi.APIError{Code: code, Description: err.Error()}
}

func badRequest(format string, args ...any) error {
	return &streamapi.APIError{Code: streamapi.CodeBadRequest, Description: fmt.Sprintf(format, args...)}
}

// accountStreams returns the configurations of an account's streams (but name's),
// in the catalogue or of this node alone.
func (s *Service) accountStreams(account, name string) []streamapi.StreamConfig {
	var out []streamapi.StreamConfig
	s.cfg.Node.Catalogue(func(c *meta.State) {
		for _, st := range c.Streams() {
			acct, other := stream.SplitKey(st.Name)
			var oc streamapi.StreamConfig
			if acct == account && other != name && json.Unmarshal(st.Config, &oc) == nil {
				out = append(out, oc)
			}
		}
	})
	for _, st := range s.cfg.Streams.AccountStreams(account) {
		if st.Group() == 0 && st.Name() != name {
			out = append(out, st.Config())
		}
	}
	return out
}

// checkAccount refuses a configuration of an account's stream that overlaps the
// subjects another stream of the account captures (in the catalogue or of this
// node alone), or that would take the account past its limits.
func (s *Service) checkAccount(account string, cfg streamapi.StreamConfig) error {
	others := s.accountStreams(account, cfg.Name)
	for _, o := range others {
		for _, a := range cfg.Subjects {
			for _, b := range o.Subjects {
				if stream.Overlaps(a, b) {
					return &streamapi.APIError{Code: streamapi.CodeConflict,
						Description: fmt.Sprintf("stream %q: %v: %q of stream %q", cfg.Name, stream.ErrOverlap, b, o.Name)}
				}
			}
		}
	}
	return s.cfg.Streams.CheckAccount(account, cfg, others)
}

// decodeConfig decodes the stream configuration of a create or update of name.
func decodeConfig(name string, body []byte) (streamapi.StreamConfig, error) {
	var cfg streamapi.StreamConfig
	if err := stream.DecodeRequest(body, &cfg); err != nil {
		return cfg, err
	}
	if cfg.Name == "" {
		cfg.Name = name
	}
	if cfg.Name != name {
		return cfg, badRequest("name %q in the body differs from %q in the subject", cfg.Name, name)
	}
	return cfg, nil
}

// commit proposes cmd to the meta group; a refusal is an error with the stream
// API's code.
func (s *Service) commit(ctx context.Context, cmd *meta.Command) (meta.Result, error) {
	r, err := s.cfg.Node.ProposeMeta(ctx, cmd)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return r, metaError(err)
	}
	return r, nil
}

func (s *Service) create(ctx context.Context, account, name string, body []byte) []byte {
	cfg, err := decodeConfig(name, body)
	if err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = s.cfg.DefaultReplicas
	}
	if err := s.cfg.Streams.Normalise(&cfg); err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	if err := s.checkAccount(account, cfg); err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	raw, _ := json.Marshal(cfg)
	r, err := s.commit(ctx, &meta.Command{Op: meta.OpAddStream, Stream: stream.Key(account, name), Config: raw, Replicas: cfg.Replicas, Partitions: cfg.Partitions,
		NodeID: s.self})
	if err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	return s.infoFromLeader(ctx, r.Stream, nil)
}

func (s *Service) update(ctx context.Context, account, name string, body []byte) []byte {
	cfg, err := decodeConfig(name, body)
	if err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	key := stream.Key(account, name)
	var old *meta.Stream
	s.cfg.Node.Catalogue(func(c *meta.State) { old = c.Stream(key) })
	if old == nil {
		return stream.Respond[streamapi.StreamInfo](nil, metaError(fmt.Errorf("stream %q: %w", name, meta.ErrNotFound)))
	}
	var was streamapi.StreamConfig
	if err := json.Unmarshal(old.Config, &was); err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = was.Replicas
	}
	if err := s.cfg.Streams.Normalise(&cfg); err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	switch {
	case cfg.Replicas != was.Replicas && (cfg.Replicas == 1 || was.Replicas == 1):
		return stream.Respond[streamapi.StreamInfo](nil, badRequest("stream %q: a stream of one replica is not replicated, and cannot become so (nor the other way): %d to %d replicas", name, was.Replicas, cfg.Replicas))
	case cfg.Retention != was.Retention || cfg.Sync != was.Sync || cfg.SegmentBytes != was.SegmentBytes:
		return stream.Respond[streamapi.StreamInfo](nil, badRequest("stream %q: retention, sync and segment size cannot change", name))
	case cfg.Partitions < was.Partitions:
		return stream.Respond[streamapi.StreamInfo](nil, badRequest("stream %q: it has %d partitions, and partitions can be added but not removed", name, was.Partitions))
	}
	if err := s.checkAccount(account, cfg); err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	raw, _ := json.Marshal(cfg)
	r, err := s.commit(ctx, &meta.Command{Op: meta.OpUpdateStream, Stream: key, Config: raw, Replicas: cfg.Replicas, Partitions: cfg.Partitions})
	if err != nil {
		return stream.Respond[streamapi.StreamInfo](nil, err)
	}
	return s.infoFromLeader(ctx, r.Stream, &cfg)
}

func (s *Service) delete(ctx context.Context, key string) []byte {
	if _, err := s.commit(ctx, &meta.Command{Op: meta.OpDeleteStream, Stream: key}); err != nil {
		return stream.Respond[streamapi.Deleted](nil, err)
	}
	return stream.Respond(&streamapi.Deleted{Deleted: true}, nil)
}

// infoFromLeader asks the stream's leader for its info, retrying until the leader
// serves the stream (its group elected it and its subscriptions reached this node),
// describes the group with every replica the catalogue placed, and, with want,
// shows that configuration. Past the deadline it answers from the catalogue.
func (s *Service) infoFromLeader(ctx context.Context, st *meta.Stream, want *streamapi.StreamConfig) []byte {
	for {
		b, err := s.cfg.Node.Request(ctx, infoSubject(st.Name), nil, 500*time.Millisecond)
		if err == nil {
			var r streamapi.Response[streamapi.StreamInfo]
			if json.Unmarshal(b, &r) == nil && r.Value != nil && (want == nil || sameConfig(r.Value.Config, *want)) &&
				describesPlacement(r.Value.Cluster, st) {
				return b
			}
		}
		select {
		case <-ctx.Done():
			info := catalogueInfo(st)
			return stream.Respond(&info, nil)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// describesPlacement reports whether a replicated stream's info comes from an
// elected leader that knows every replica the catalogue placed: a leader that has
// just opened the stream may answer before its group's status has a term and its
// followers' progress, and a client reading the create's answer must see the
// replicas it asked for.
func describesPlacement(c *streamapi.StreamCluster, st *meta.Stream) bool {
	if st.Replicas <= 1 || len(st.Groups) == 0 {
		return true
	}
	return c != nil && c.Term > 0 && c.Leader != "" && len(c.Replicas) >= len(st.Groups[0].Replicas)
}

func sameConfig(a, b streamapi.StreamConfig) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// catalogueInfo is a stream's info as the catalogue has it: no state.
func catalogueInfo(st *meta.Stream) streamapi.StreamInfo {
	var cfg streamapi.StreamConfig
	_ = json.Unmarshal(st.Config, &cfg)
	info := streamapi.StreamInfo{Config: cfg, Created: time.Unix(0, st.Created).UTC()}
	if len(st.Groups) > 0 {
		info.Cluster = &streamapi.StreamCluster{Group: st.Groups[0].ID}
	}
	return info
}

// list answers STREAM.LIST for an account: every stream of the account in the
// catalogue, each described by its leader (from the catalogue if it does not
// answer in time), and this node's own.
func (s *Service) list(ctx context.Context, account string) []byte {
	var sts []*meta.Stream
	// A linearizable read: a stream whose create was acknowledged before the
	// request is listed, one whose delete was is not, whichever node answers.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.cfg.Node.ReadCatalogue(rctx, func(c *meta.State) {
		for _, st := range c.Streams() {
			if acct, _ := stream.SplitKey(st.Name); acct == account {
				sts = append(sts, st)
			}
		}
	})
	rcancel()
	if err != nil {
		return stream.Respond[streamapi.StreamList](nil, &streamapi.APIError{Code: streamapi.CodeUnavailable,
			Description: "the catalogue cannot be read: " + err.Error()})
	}
	infos := make([]streamapi.StreamInfo, len(sts))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, st := range sts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			infos[i] = catalogueInfo(st)
			b, err := s.cfg.Node.Request(ctx, infoSubject(st.Name), nil, time.Second)
			var r streamapi.Response[streamapi.StreamInfo]
			if err == nil && json.Unmarshal(b, &r) == nil && r.Value != nil {
				infos[i] = *r.Value
			}
		}()
	}
	wg.Wait()
	for _, st := range s.cfg.Streams.AccountStreams(account) {
		if st.Group() == 0 {
			infos = append(infos, st.Info())
		}
	}
	slices.SortFunc(infos, func(a, b streamapi.StreamInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return stream.Respond(&streamapi.StreamList{Streams: infos}, nil)
}

// describe is the stream engine's view of a group, for StreamInfo.
func (s *Service) describe(group uint64) *streamapi.StreamCluster {
	gs := s.cfg.Node.GroupStatus(group)
	if gs == nil {
		return nil
	}
	out := &streamapi.StreamCluster{Group: group, Leader: gs.Leader, Term: gs.Term, Applied: gs.Applied}
	if !gs.Running {
		// A stream of one replica: this node is all of it.
		out.Leader = s.cfg.Node.NodeName(s.self)
		out.Replicas = []streamapi.StreamReplica{{Node: out.Leader, Leader: true, Active: true}}
		return out
	}
	for _, r := range gs.Replicas {
		out.Replicas = append(out.Replicas, streamapi.StreamReplica{Node: r.Node, Leader: r.Node == gs.Leader,
			Learner: r.Learner, Lag: r.Lag, Active: r.Active || r.Node == gs.Leader})
	}
	return out
}
