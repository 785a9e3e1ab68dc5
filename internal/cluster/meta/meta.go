package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tern-mq/tern/internal/streamapi"
)

// MetaGroup is the Raft group id of the meta group, MQTTGroup the MQTT state's;
// stream partitions' groups are numbered from FirstStreamGroup.
const (
	MetaGroup        uint64 = 1
	MQTTGroup        uint64 = 2 // persistent MQTT sessions and retained messages
	FirstStreamGroup uint64 = 16
)

// Errors Apply returns, wrapped with the names involved; callers branch with errors.Is.
var (
	// ErrBadCommand: the command did not decode or lacks what its op needs.
	ErrBadCommand = errors.New("meta: bad command")
	// ErrExists: a stream or consumer of that name exists with another configuration.
	ErrExists = errors.New("meta: already exists with a different configuration")
	// ErrNotFound: no such stream, consumer or node.
	ErrNotFound = errors.New("meta: not found")
	// ErrNoPlacement: fewer nodes qualify than the replicas asked for.
	ErrNoPlacement = errors.New("meta: not enough nodes for the replicas asked")
	// ErrInvalid: a value out of range (replicas not 1, 3 or 5, partitions < 1).
	ErrInvalid = errors.New("meta: invalid request")
	// ErrApplied: a command was committed again (a proposer's retry) after it
	// had been applied, and its first result is no longer known here (the state
	// came from a snapshot since). It was applied once, not twice.
	ErrApplied = errors.New("meta: command applied before")
)

// Op names a command.
type Op string

// Commands of the meta group.
const (
	OpAddNode        Op = "add_node"        // Node: a node joins or changes its tags
	OpEvictNode      Op = "evict_node"      // NodeID: removed for good; its replicas move
	OpAddStream      Op = "add_stream"      // Stream, Config, Replicas, Partitions, Tags; NodeID: where the request came in
	OpUpdateStream   Op = "update_stream"   // Stream, Config, Replicas (0: unchanged), Partitions (0: unchanged; more: groups added)
	OpDeleteStream   Op = "delete_stream"   // Stream
	OpAddConsumer    Op = "add_consumer"    // Stream, Consumer, Config
	OpDeleteConsumer Op = "delete_consumer" // Stream, Consumer
	OpClaimClient    Op = "claim_client"    // Client, NodeID: the client connected there
	OpReleaseClient  Op = "release_client"  // Client, NodeID: it left that node
)

// Command is one entry of the meta group's log.
type Command struct {
	Op Op `json:"op"`
	// ID lets the proposing node find its command's Result, and Apply skip a
	// command committed again by a retry (the last recentCommands IDs are kept).
	ID string `json:"id,omitempty"`
	// Time is the proposer's clock (Unix ns): Apply reads no clock of its own.
	Time       int64           `json:"time,omitempty"`
	Node       *Node           `json:"node,omitempty"`
	NodeID     uint64          `json:"node_id,omitempty"`
	Stream     string          `json:"stream,omitempty"`
	Consumer   string          `json:"consumer,omitempty"`
	Config     json.RawMessage `json:"config,omitempty"`
	Replicas   int             `json:"replicas,omitempty"`
	Partitions int             `json:"partitions,omitempty"`
	Tags       []string        `json:"tags,omitempty"`
	Client     string          `json:"client,omitempty"`
}

// EncodeCommand is a command as it goes into the log.
func EncodeCommand(c *Command) []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("meta: encoding a command: %v", err)) // only plain data: cannot fail
	}
	return b
}

// Node is a member of the cluster as the catalogue knows it.
type Node struct {
	ID   uint64            `json:"id"`
	Name string            `json:"name"`
	Tags map[string]string `json:"tags,omitempty"`
	// Evicted nodes are gone for good: they hold no replica and get none.
	Evicted bool `json:"evicted,omitempty"`
}

// Group is one stream partition's Raft group and the nodes of its replicas, the
// preferred leader first. Every partition of a stream has the same replicas: the
// node leading the stream leads each of its partitions' groups. Founders are the replicas it was created with, never
// changed: a founder with no Raft state starts the group with them as its voters, and
// any other node starts empty and waits to be added (founders computed from Replicas
// after an eviction would start a second group beside the first).
type Group struct {
	ID       uint64   `json:"group"`
	Replicas []uint64 `json:"replicas"`
	Founders []uint64 `json:"founders"`
}

// Stream is a stream's definition and placement.
type Stream struct {
	Name     string          `json:"name"`
	Config   json.RawMessage `json:"config"`
	Replicas int             `json:"replicas"`
	Tags     []string        `json:"tags,omitempty"`
	// Groups has one entry per partition.
	Groups    []Group              `json:"groups"`
	Created   int64                `json:"created"`
	Revision  uint64               `json:"revision"` // index of the last change
	Consumers map[string]*Consumer `json:"consumers,omitempty"`
}

// Consumer is a durable consumer's definition.
type Consumer struct {
	Name     string          `json:"name"`
	Config   json.RawMessage `json:"config"`
	Created  int64           `json:"created"`
	Revision uint64          `json:"revision"`
}

// Client says where an MQTT client id is connected.
type Client struct {
	Node  uint64 `json:"node"`
	Since uint64 `json:"since"` // index of the claim
}

// Result is what applying a command gave, for the node that proposed it.
type Result struct {
	// ID is the command's ID, for the node waiting for it.
	ID       string
	Err      error
	Stream   *Stream   // add/update_stream: the stream as it now is (a copy)
	Consumer *Consumer // add_consumer
	// Claims: the client id, the node that claimed it, and the node it was
	// connected to before (0 if none). That node closes its connection.
	Client         string
	Node, Previous uint64
}

// recentCommands is how many of the last commands' IDs the state keeps to apply
// each command once: a proposer retries a command whose outcome it did not
// learn (a forward that timed out, a leader change), and the first attempt may
// have been committed too. A retry comes within seconds; thousands of other
// commands in between would be needed to outrun the window.
const recentCommands = 4096

// State is the catalogue. The zero value is not usable; call New.
type State struct {
	applied   uint64
	nextGroup uint64
	nodes     map[uint64]*Node
	streams   map[string]*Stream
	clients   map[string]*Client
	// recent are the IDs of the last recentCommands commands applied, a ring
	// whose oldest is at recentHead once full (replicated: they are in the
	// snapshot); results has each one's Result as applying it gave it here, for
	// a retry's proposer (a state restored from a snapshot has ErrApplied).
	recent     []string
	recentHead int
	results    map[string]Result
}

// New returns an empty catalogue.
func New() *State {
	return &State{nextGroup: FirstStreamGroup, nodes: map[uint64]*Node{}, streams: map[string]*Stream{}, clients: map[string]*Client{},
		results: map[string]Result{}}
}

// Applied is the index of the last command applied.
func (s *State) Applied() uint64 { return s.applied }

// Apply applies the command data committed at index. Commands at or below the last
// applied index are ignored (a replay after a snapshot).
func (s *State) Apply(index uint64, data []byte) Result {
	if index <= s.applied {
		return Result{}
	}
	s.applied = index
	var c Command
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	if c.ID != "" {
		if r, ok := s.results[c.ID]; ok {
			return r
		}
	}
	r := s.apply(index, &c)
	r.ID = c.ID
	if c.ID != "" {
		s.remember(c.ID, r)
	}
	return r
}

// remember keeps a command's ID and result, forgetting the oldest past
// recentCommands.
func (s *State) remember(id string, r Result) {
	if len(s.recent) < recentCommands {
		s.recent = append(s.recent, id)
	} else {
		delete(s.results, s.recent[s.recentHead])
		s.recent[s.recentHead] = id
		s.recentHead = (s.recentHead + 1) % recentCommands
	}
	s.results[id] = r
}

func (s *State) apply(index uint64, c *Command) Result {
	switch c.Op {
	case OpAddNode:
		return s.addNode(c)
	case OpEvictNode:
		return s.evictNode(index, c)
	case OpAddStream:
		return s.addStream(index, c)
	case OpUpdateStream:
		return s.updateStream(index, c)
	case OpDeleteStream:
		if _, ok := s.streams[c.Stream]; !ok {
			return Result{Err: fmt.Errorf("stream %q: %w", c.Stream, ErrNotFound)}
		}
		delete(s.streams, c.Stream)
		return Result{}
	case OpAddConsumer:
		return s.addConsumer(index, c)
	case OpDeleteConsumer:
		st := s.streams[c.Stream]
		if st == nil || st.Consumers[c.Consumer] == nil {
			return Result{Err: fmt.Errorf("consumer %q of stream %q: %w", c.Consumer, c.Stream, ErrNotFound)}
		}
		delete(st.Consumers, c.Consumer)
		st.Revision = index
		return Result{}
	case OpClaimClient:
		if c.Client == "" || c.NodeID == 0 {
			return Result{Err: fmt.Errorf("%w: claim needs a client id and a node", ErrBadCommand)}
		}
		var prev uint64
		if old := s.clients[c.Client]; old != nil {
			prev = old.Node
		}
		s.clients[c.Client] = &Client{Node: c.NodeID, Since: index}
		return Result{Client: c.Client, Node: c.NodeID, Previous: prev}
	case OpReleaseClient:
		if old := s.clients[c.Client]; old != nil && old.Node == c.NodeID {
			delete(s.clients, c.Client)
		}
		return Result{}
	}
	return Result{Err: fmt.Errorf("%w: unknown op %q", ErrBadCommand, c.Op)}
}

func (s *State) addNode(c *Command) Result {
	n := c.Node
	if n == nil || n.ID == 0 || n.Name == "" {
		return Result{Err: fmt.Errorf("%w: a node needs an id and a name", ErrBadCommand)}
	}
	if old := s.nodes[n.ID]; old != nil && old.Evicted {
		return Result{Err: fmt.Errorf("node %q (%x) was evicted: %w", n.Name, n.ID, ErrInvalid)}
	}
	s.nodes[n.ID] = &Node{ID: n.ID, Name: n.Name, Tags: maps.Clone(n.Tags)}
	return Result{}
}

// evictNode marks a node gone for good and moves each replica it held to another
// qualifying node, or drops it when none is left.
func (s *State) evictNode(index uint64, c *Command) Result {
	n := s.nodes[c.NodeID]
	if n == nil {
		return Result{Err: fmt.Errorf("node %x: %w", c.NodeID, ErrNotFound)}
	}
	n.Evicted = true
	for client, cl := range s.clients {
		if cl.Node == n.ID {
			delete(s.clients, client)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.streams)) {
		st := s.streams[name]
		at := slices.Index(st.Groups[0].Replicas, n.ID)
		if at < 0 {
			continue
		}
		replicas := slices.Delete(slices.Clone(st.Groups[0].Replicas), at, at+1)
		replicas = append(replicas, s.choose(st.Tags, 1, replicas, 0)...)
		st.setReplicas(replicas)
		st.Revision = index
	}
	return Result{}
}

func validReplicas(r int) bool { return r == 1 || r == 3 || r == 5 }

func (s *State) addStream(index uint64, c *Command) Result {
	if c.Stream == "" || len(c.Config) == 0 {
		return Result{Err: fmt.Errorf("%w: a stream needs a name and a configuration", ErrBadCommand)}
	}
	parts := max(c.Partitions, 1)
	if !validReplicas(c.Replicas) || parts > streamapi.MaxPartitions {
		return Result{Err: fmt.Errorf("stream %q: replicas %d, partitions %d: %w (replicas 1, 3 or 5; up to %d partitions)",
			c.Stream, c.Replicas, c.Partitions, ErrInvalid, streamapi.MaxPartitions)}
	}
	if old := s.streams[c.Stream]; old != nil {
		if bytes.Equal(old.Config, c.Config) && old.Replicas == c.Replicas && slices.Equal(old.Tags, c.Tags) {
			return Result{Stream: old.clone()} // create is idempotent
		}
		return Result{Err: fmt.Errorf("stream %q: %w", c.Stream, ErrExists)}
	}
	st := &Stream{Name: c.Stream, Config: bytes.Clone(c.Config), Replicas: c.Replicas, Tags: slices.Clone(c.Tags),
		Created: c.Time, Revision: index}
	// In the catalogue from the start, so each partition placed counts in the load
	// the next one sees; taken out again if one cannot be placed.
	// Ties go to the node the request came through (NodeID): its client most
	// likely publishes and consumes there, and a leader on that node saves every
	// message a hop between nodes.
	nodes := s.choose(st.Tags, c.Replicas, nil, c.NodeID)
	if len(nodes) < c.Replicas {
		return Result{Err: fmt.Errorf("stream %q: %d replicas, %d qualifying nodes: %w", c.Stream, c.Replicas, len(nodes), ErrNoPlacement)}
	}
	nodes = s.leaderFirst(nodes, c.NodeID)
	for range parts {
		st.Groups = append(st.Groups, Group{ID: s.nextGroup, Replicas: slices.Clone(nodes), Founders: slices.Clone(nodes)})
		s.nextGroup++
	}
	s.streams[c.Stream] = st
	return Result{Stream: st.clone()}
}

func (s *State) updateStream(index uint64, c *Command) Result {
	st := s.streams[c.Stream]
	if st == nil {
		return Result{Err: fmt.Errorf("stream %q: %w", c.Stream, ErrNotFound)}
	}
	if c.Replicas != 0 && !validReplicas(c.Replicas) {
		return Result{Err: fmt.Errorf("stream %q: replicas %d: %w (1, 3 or 5)", c.Stream, c.Replicas, ErrInvalid)}
	}
	if c.Partitions != 0 && (c.Partitions < len(st.Groups) || c.Partitions > streamapi.MaxPartitions) {
		return Result{Err: fmt.Errorf("stream %q: %d partitions for %d: %w (partitions can be added, up to %d, not removed)",
			c.Stream, c.Partitions, len(st.Groups), ErrInvalid, streamapi.MaxPartitions)}
	}
	replicas := st.Groups[0].Replicas
	if c.Replicas != 0 && c.Replicas != st.Replicas {
		if len(replicas) > c.Replicas {
			replicas = slices.Clone(replicas[:c.Replicas]) // the preferred leader stays
		} else {
			have := slices.Clone(replicas)
			replicas = append(have, s.choose(st.Tags, c.Replicas-len(have), have, 0)...)
			if len(replicas) < c.Replicas {
				return Result{Err: fmt.Errorf("stream %q: %d replicas: %w", c.Stream, c.Replicas, ErrNoPlacement)}
			}
		}
	}
	if len(c.Config) > 0 {
		st.Config = bytes.Clone(c.Config)
	}
	if c.Replicas != 0 && c.Replicas != st.Replicas {
		st.Replicas = c.Replicas
		st.setReplicas(replicas)
	}
	// A new partition's group has the stream's replicas, and they found it: the
	// node leading the stream leads every partition's group.
	for len(st.Groups) < c.Partitions {
		st.Groups = append(st.Groups, Group{ID: s.nextGroup, Replicas: slices.Clone(st.Groups[0].Replicas), Founders: slices.Clone(st.Groups[0].Replicas)})
		s.nextGroup++
	}
	st.Revision = index
	return Result{Stream: st.clone()}
}

func (s *State) addConsumer(index uint64, c *Command) Result {
	st := s.streams[c.Stream]
	if st == nil {
		return Result{Err: fmt.Errorf("stream %q: %w", c.Stream, ErrNotFound)}
	}
	if c.Consumer == "" || len(c.Config) == 0 {
		return Result{Err: fmt.Errorf("%w: a consumer needs a name and a configuration", ErrBadCommand)}
	}
	if old := st.Consumers[c.Consumer]; old != nil {
		if bytes.Equal(old.Config, c.Config) {
			cp := *old
			return Result{Consumer: &cp}
		}
		return Result{Err: fmt.Errorf("consumer %q of stream %q: %w", c.Consumer, c.Stream, ErrExists)}
	}
	if st.Consumers == nil {
		st.Consumers = map[string]*Consumer{}
	}
	co := &Consumer{Name: c.Consumer, Config: bytes.Clone(c.Config), Created: c.Time, Revision: index}
	st.Consumers[c.Consumer] = co
	st.Revision = index
	cp := *co
	return Result{Consumer: &cp}
}

// choose picks up to n nodes for a group that already has those in have: nodes that
// are not evicted, carry every tag asked for and are not in have, spread across
// zones (the "zone" tag), then least loaded, then prefer (0: none), then lowest id.
func (s *State) choose(tags []string, n int, have []uint64, prefer uint64) []uint64 {
	load := s.load()
	zones := map[string]int{}
	for _, id := range have {
		if nd := s.nodes[id]; nd != nil {
			zones[nd.Tags["zone"]]++
		}
	}
	var cands []*Node
	for _, nd := range s.nodes {
		if !nd.Evicted && !slices.Contains(have, nd.ID) && hasTags(nd, tags) {
			cands = append(cands, nd)
		}
	}
	var out []uint64
	for len(out) < n && len(cands) > 0 {
		best := 0
		for i, nd := range cands[1:] {
			if less(nd, cands[best], zones, load, prefer) {
				best = i + 1
			}
		}
		nd := cands[best]
		out = append(out, nd.ID)
		zones[nd.Tags["zone"]]++
		load[nd.ID]++
		cands = slices.Delete(cands, best, best+1)
	}
	return out
}

func less(a, b *Node, zones map[string]int, load map[uint64]int, prefer uint64) bool {
	if za, zb := zones[a.Tags["zone"]], zones[b.Tags["zone"]]; za != zb {
		return za < zb
	}
	if load[a.ID] != load[b.ID] {
		return load[a.ID] < load[b.ID]
	}
	if a.ID == prefer || b.ID == prefer {
		return a.ID == prefer
	}
	return a.ID < b.ID
}

// hasTags: each tag is "key=value" (the node's tag must have that value) or "key"
// (the node must have the tag).
func hasTags(n *Node, tags []string) bool {
	for _, t := range tags {
		k, v, withValue := strings.Cut(t, "=")
		got, ok := n.Tags[k]
		if !ok || withValue && got != v {
			return false
		}
	}
	return true
}

// load counts the replicas each node holds.
func (s *State) load() map[uint64]int {
	l := map[uint64]int{}
	for _, st := range s.streams {
		for _, g := range st.Groups {
			for _, id := range g.Replicas {
				l[id]++
			}
		}
	}
	return l
}

// leaderFirst orders a new group's nodes so the one preferred as leader of the fewest
// groups comes first: leaders spread as replicas do. Among those, prefer goes
// first, then the lowest id.
func (s *State) leaderFirst(nodes []uint64, prefer uint64) []uint64 {
	leads := map[uint64]int{}
	for _, st := range s.streams {
		for _, g := range st.Groups {
			if len(g.Replicas) > 0 {
				leads[g.Replicas[0]]++
			}
		}
	}
	best := 0
	for i, id := range nodes {
		b := nodes[best]
		if leads[id] < leads[b] || leads[id] == leads[b] && b != prefer && (id == prefer || id < b) {
			best = i
		}
	}
	nodes[0], nodes[best] = nodes[best], nodes[0]
	return nodes
}

// setReplicas places every partition of the stream on replicas.
func (st *Stream) setReplicas(replicas []uint64) {
	for i := range st.Groups {
		st.Groups[i].Replicas = slices.Clone(replicas)
	}
}

func (st *Stream) clone() *Stream {
	cp := *st
	cp.Config = bytes.Clone(st.Config)
	cp.Tags = slices.Clone(st.Tags)
	cp.Groups = make([]Group, len(st.Groups))
	for i, g := range st.Groups {
		cp.Groups[i] = Group{ID: g.ID, Replicas: slices.Clone(g.Replicas), Founders: slices.Clone(g.Founders)}
	}
	cp.Consumers = make(map[string]*Consumer, len(st.Consumers))
	for k, c := range st.Consumers {
		cc := *c
		cp.Consumers[k] = &cc
	}
	return &cp
}

// Stream returns a copy of the named stream's definition, nil if there is none.
func (s *State) Stream(name string) *Stream {
	if st := s.streams[name]; st != nil {
		return st.clone()
	}
	return nil
}

// Streams returns copies of every stream, in name order.
func (s *State) Streams() []*Stream {
	out := make([]*Stream, 0, len(s.streams))
	for _, name := range slices.Sorted(maps.Keys(s.streams)) {
		out = append(out, s.streams[name].clone())
	}
	return out
}

// Nodes returns copies of the nodes the catalogue knows, in id order.
func (s *State) Nodes() []Node {
	out := make([]Node, 0, len(s.nodes))
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		n := *s.nodes[id]
		n.Tags = maps.Clone(n.Tags)
		out = append(out, n)
	}
	return out
}

// Client says where an MQTT client id is connected; ok is false if nowhere.
func (s *State) Client(id string) (c Client, ok bool) {
	if cl := s.clients[id]; cl != nil {
		return *cl, true
	}
	return Client{}, false
}

// snapshot is the State as it is encoded.
type snapshot struct {
	Applied   uint64             `json:"applied"`
	NextGroup uint64             `json:"next_group"`
	Nodes     []*Node            `json:"nodes"`
	Streams   []*Stream          `json:"streams"`
	Clients   map[string]*Client `json:"clients"`
	Recent    []string           `json:"recent,omitempty"`
}

// Snapshot encodes the whole state (deterministically: the same state gives the
// same bytes on every node).
func (s *State) Snapshot() []byte {
	snap := snapshot{Applied: s.applied, NextGroup: s.nextGroup, Clients: s.clients}
	if len(s.recent) > 0 {
		snap.Recent = append(slices.Clone(s.recent[s.recentHead:]), s.recent[:s.recentHead]...)
	}
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		snap.Nodes = append(snap.Nodes, s.nodes[id])
	}
	for _, name := range slices.Sorted(maps.Keys(s.streams)) {
		snap.Streams = append(snap.Streams, s.streams[name])
	}
	b, err := json.Marshal(&snap)
	if err != nil {
		panic(fmt.Sprintf("meta: encoding a snapshot: %v", err))
	}
	return b
}

// Restore replaces the state with a snapshot's. On error the state is unchanged.
func (s *State) Restore(data []byte) error {
	var snap snapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return fmt.Errorf("meta: snapshot: %w", err)
	}
	n := New()
	n.applied, n.nextGroup = snap.Applied, max(snap.NextGroup, FirstStreamGroup)
	for _, nd := range snap.Nodes {
		if nd == nil || nd.ID == 0 {
			return errors.New("meta: snapshot: a node without an id")
		}
		n.nodes[nd.ID] = nd
	}
	for _, st := range snap.Streams {
		if st == nil || st.Name == "" {
			return errors.New("meta: snapshot: a stream without a name")
		}
		if len(st.Groups) == 0 {
			return fmt.Errorf("meta: snapshot: stream %q has no group", st.Name)
		}
		for _, g := range st.Groups {
			if g.ID >= n.nextGroup {
				return fmt.Errorf("meta: snapshot: stream %q has group %d past the next group %d", st.Name, g.ID, n.nextGroup)
			}
		}
		for k, c := range st.Consumers {
			if c == nil {
				delete(st.Consumers, k)
			}
		}
		n.streams[st.Name] = st
	}
	for k, c := range snap.Clients {
		if c != nil {
			n.clients[k] = c
		}
	}
	if len(snap.Recent) > recentCommands {
		return fmt.Errorf("meta: snapshot: %d recent commands, at most %d", len(snap.Recent), recentCommands)
	}
	for _, id := range snap.Recent {
		n.remember(id, Result{ID: id, Err: fmt.Errorf("%w: %s", ErrApplied, id)})
	}
	*s = *n
	return nil
}
