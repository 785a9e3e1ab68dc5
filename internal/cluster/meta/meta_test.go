package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// applier feeds commands to a State with increasing indexes.
type applier struct {
	t  *testing.T
	s  *State
	ix uint64
}

func newApplier(t *testing.T) *applier { return &applier{t: t, s: New()} }

func (a *applier) apply(c Command) Result {
	a.ix++
	return a.s.Apply(a.ix, EncodeCommand(&c))
}

func (a *applier) must(c Command) Result {
	a.t.Helper()
	r := a.apply(c)
	if r.Err != nil {
		a.t.Fatalf("%s: %v", c.Op, r.Err)
	}
	return r
}

func (a *applier) nodes(n int, zone func(i int) string) {
	for i := 1; i <= n; i++ {
		nd := &Node{ID: uint64(i), Name: fmt.Sprintf("n%d", i)}
		if zone != nil {
			nd.Tags = map[string]string{"zone": zone(i)}
		}
		a.must(Command{Op: OpAddNode, Node: nd})
	}
}

func TestPlacementSpreadsReplicasAndLeaders(t *testing.T) {
	a := newApplier(t)
	a.nodes(3, nil)
	// A stream's partitions are groups of their own, on the same replicas with
	// the same preferred leader: one node leads the stream.
	r := a.must(Command{Op: OpAddStream, Stream: "orders", Config: []byte(`{"subjects":["orders.>"]}`), Replicas: 3, Partitions: 3})
	for i, g := range r.Stream.Groups {
		if g.ID != FirstStreamGroup+uint64(i) {
			t.Errorf("partition %d: group %d, want %d", i, g.ID, FirstStreamGroup+uint64(i))
		}
		if s := slices.Sorted(slices.Values(g.Replicas)); !slices.Equal(s, []uint64{1, 2, 3}) {
			t.Errorf("partition %d: replicas %v, want every node once", i, g.Replicas)
		}
		if !slices.Equal(g.Replicas, r.Stream.Groups[0].Replicas) || !slices.Equal(g.Founders, g.Replicas) {
			t.Errorf("partition %d: replicas %v, founders %v; partition 0's %v", i, g.Replicas, g.Founders, r.Stream.Groups[0].Replicas)
		}
	}
	// Streams' leaders spread: three more R3 streams are preferably led by the
	// two nodes that do not lead the first.
	leaders := map[uint64]int{r.Stream.Groups[0].Replicas[0]: 1}
	for i := range 2 {
		r := a.must(Command{Op: OpAddStream, Stream: fmt.Sprintf("r3-%d", i), Config: []byte(`{}`), Replicas: 3})
		leaders[r.Stream.Groups[0].Replicas[0]]++
	}
	if len(leaders) != 3 {
		t.Errorf("preferred leaders %v: want one stream led by each node", leaders)
	}

	// Six R1 streams on three nodes: two each.
	for i := range 6 {
		a.must(Command{Op: OpAddStream, Stream: fmt.Sprintf("s%d", i), Config: []byte(`{}`), Replicas: 1})
	}
	per := map[uint64]int{}
	for _, st := range a.s.Streams() {
		if st.Replicas == 1 {
			per[st.Groups[0].Replicas[0]]++
		}
	}
	if per[1] != 2 || per[2] != 2 || per[3] != 2 {
		t.Errorf("R1 streams per node %v, want 2 each", per)
	}
}

// TestPlacementPrefersTheRequestingNode: among nodes that tie on load, a new
// stream's replica and preferred leader go to the node its create came through;
// the spread of load and leaders still comes first.
func TestPlacementPrefersTheRequestingNode(t *testing.T) {
	a := newApplier(t)
	a.nodes(3, nil)
	r := a.must(Command{Op: OpAddStream, Stream: "near", Config: []byte(`{}`), Replicas: 3, NodeID: 2})
	if l := r.Stream.Groups[0].Replicas[0]; l != 2 {
		t.Fatalf("leader %d, want the requesting node 2", l)
	}
	// Node 2 leads a stream already: the next one asked through node 2 goes to
	// the node leading fewest (1, the lowest id of the two that lead none).
	r = a.must(Command{Op: OpAddStream, Stream: "next", Config: []byte(`{}`), Replicas: 3, NodeID: 2})
	if l := r.Stream.Groups[0].Replicas[0]; l != 1 {
		t.Fatalf("leader %d, want 1", l)
	}
	r = a.must(Command{Op: OpAddStream, Stream: "r1", Config: []byte(`{}`), Replicas: 1, NodeID: 3})
	if g := r.Stream.Groups[0].Replicas; len(g) != 1 || g[0] != 3 {
		t.Fatalf("R1 stream on %v, want the requesting node 3", g)
	}
}

func TestPlacementSpansZonesAndHonoursTags(t *testing.T) {
	a := newApplier(t)
	// Zones a, a, b, b, c.
	a.nodes(5, func(i int) string { return string(rune('a' + (i-1)/2)) })
	r := a.must(Command{Op: OpAddStream, Stream: "z", Config: []byte(`{}`), Replicas: 3})
	zones := map[string]bool{}
	for _, id := range r.Stream.Groups[0].Replicas {
		zones[a.s.nodes[id].Tags["zone"]] = true
	}
	if len(zones) != 3 {
		t.Errorf("replicas %v span zones %v, want all three", r.Stream.Groups[0].Replicas, zones)
	}
	r = a.must(Command{Op: OpAddStream, Stream: "only-b", Config: []byte(`{}`), Replicas: 1, Tags: []string{"zone=b"}})
	if id := r.Stream.Groups[0].Replicas[0]; a.s.nodes[id].Tags["zone"] != "b" {
		t.Errorf("zone=b stream placed on node %d of zone %q", id, a.s.nodes[id].Tags["zone"])
	}
	next := a.s.nextGroup
	if r := a.apply(Command{Op: OpAddStream, Stream: "too-many", Config: []byte(`{}`), Replicas: 3, Tags: []string{"zone=c"}}); !errors.Is(r.Err, ErrNoPlacement) {
		t.Fatalf("R3 on one qualifying node: %v, want ErrNoPlacement", r.Err)
	}
	if a.s.Stream("too-many") != nil || a.s.nextGroup != next {
		t.Error("a refused stream left a trace in the catalogue")
	}
}

func TestStreamCreateIsIdempotentAndConflictsAreRefused(t *testing.T) {
	a := newApplier(t)
	a.nodes(3, nil)
	cfg := []byte(`{"subjects":["a.>"]}`)
	first := a.must(Command{Op: OpAddStream, Stream: "s", Config: cfg, Replicas: 3, Time: 7})
	again := a.must(Command{Op: OpAddStream, Stream: "s", Config: cfg, Replicas: 3, Time: 9})
	if again.Stream.Created != 7 || again.Stream.Groups[0].ID != first.Stream.Groups[0].ID {
		t.Errorf("second create changed the stream: %+v", again.Stream)
	}
	if r := a.apply(Command{Op: OpAddStream, Stream: "s", Config: []byte(`{"subjects":["b.>"]}`), Replicas: 3}); !errors.Is(r.Err, ErrExists) {
		t.Errorf("create with another config: %v, want ErrExists", r.Err)
	}
	for _, bad := range []Command{
		{Op: OpAddStream, Stream: "r2", Config: cfg, Replicas: 2},
		{Op: OpAddStream, Stream: "r0", Config: cfg},
		{Op: OpUpdateStream, Stream: "s", Replicas: 4},
	} {
		if r := a.apply(bad); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, r.Err)
		}
	}
	if r := a.apply(Command{Op: OpDeleteStream, Stream: "nope"}); !errors.Is(r.Err, ErrNotFound) {
		t.Errorf("delete of a missing stream: %v", r.Err)
	}
	a.must(Command{Op: OpDeleteStream, Stream: "s"})
	if a.s.Stream("s") != nil {
		t.Error("deleted stream still listed")
	}
}

func TestScaleReplicasUpAndDown(t *testing.T) {
	a := newApplier(t)
	a.nodes(5, nil)
	r := a.must(Command{Op: OpAddStream, Stream: "s", Config: []byte(`{}`), Replicas: 1})
	leader := r.Stream.Groups[0].Replicas[0]
	r = a.must(Command{Op: OpUpdateStream, Stream: "s", Replicas: 5})
	if g := r.Stream.Groups[0]; len(g.Replicas) != 5 || g.Replicas[0] != leader {
		t.Fatalf("scaled to 5: %v (leader was %d)", g.Replicas, leader)
	}
	r = a.must(Command{Op: OpUpdateStream, Stream: "s", Replicas: 3})
	if g := r.Stream.Groups[0]; len(g.Replicas) != 3 || g.Replicas[0] != leader {
		t.Fatalf("scaled to 3: %v", g.Replicas)
	}
	before := a.s.Stream("s")
	a.apply(Command{Op: OpEvictNode, NodeID: 4})
	a.apply(Command{Op: OpEvictNode, NodeID: 5})
	if r := a.apply(Command{Op: OpUpdateStream, Stream: "s", Replicas: 5, Config: []byte(`{"x":1}`)}); !errors.Is(r.Err, ErrNoPlacement) {
		t.Fatalf("scale to 5 on 3 live nodes: %v", r.Err)
	}
	if after := a.s.Stream("s"); !bytes.Equal(after.Config, before.Config) || after.Replicas != 3 {
		t.Errorf("a refused update changed the stream: config %s, replicas %d", after.Config, after.Replicas)
	}
}

// Adding partitions adds a group per new partition, with the stream's replicas
// as its replicas and founders, and fresh group ids; partitions never go.
func TestAddPartitions(t *testing.T) {
	a := newApplier(t)
	a.nodes(4, nil)
	r := a.must(Command{Op: OpAddStream, Stream: "s", Config: []byte(`{}`), Replicas: 3, Partitions: 2})
	first := r.Stream.Groups
	a.must(Command{Op: OpAddStream, Stream: "other", Config: []byte(`{}`), Replicas: 1})
	next := a.s.nextGroup
	r = a.must(Command{Op: OpUpdateStream, Stream: "s", Config: []byte(`{"partitions":5}`), Partitions: 5})
	g := r.Stream.Groups
	if len(g) != 5 || g[0].ID != first[0].ID || g[1].ID != first[1].ID {
		t.Fatalf("groups after adding 3 partitions: %+v (were %+v)", g, first)
	}
	for i, grp := range g[2:] {
		if grp.ID != next+uint64(i) || !slices.Equal(grp.Replicas, first[0].Replicas) || !slices.Equal(grp.Founders, first[0].Replicas) {
			t.Errorf("new partition %d: %+v, want group %d on %v", i+2, grp, next+uint64(i), first[0].Replicas)
		}
	}
	if a.s.nextGroup != next+3 {
		t.Errorf("next group id %d, want %d", a.s.nextGroup, next+3)
	}
	// Unchanged partitions (0, or the count it has) leave the groups alone.
	for _, c := range []Command{{Op: OpUpdateStream, Stream: "s", Config: []byte(`{"x":1}`)}, {Op: OpUpdateStream, Stream: "s", Partitions: 5}} {
		if r := a.must(c); len(r.Stream.Groups) != 5 {
			t.Fatalf("%+v: %d groups", c, len(r.Stream.Groups))
		}
	}
	for _, n := range []int{4, 1025} {
		if r := a.apply(Command{Op: OpUpdateStream, Stream: "s", Partitions: n}); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("%d partitions for 5: %v, want ErrInvalid", n, r.Err)
		}
	}
	if len(a.s.Stream("s").Groups) != 5 || a.s.nextGroup != next+3 {
		t.Error("a refused change touched the groups")
	}
}

func TestEvictMovesReplicas(t *testing.T) {
	a := newApplier(t)
	a.nodes(4, nil)
	r := a.must(Command{Op: OpAddStream, Stream: "s", Config: []byte(`{}`), Replicas: 3, Partitions: 4})
	a.must(Command{Op: OpClaimClient, Client: "dev-1", NodeID: 2})
	a.must(Command{Op: OpEvictNode, NodeID: 2})
	st := a.s.Stream("s")
	for i, g := range st.Groups {
		if len(g.Replicas) != 3 || slices.Contains(g.Replicas, 2) {
			t.Errorf("partition %d after evicting node 2: %v (was %v)", i, g.Replicas, r.Stream.Groups[i].Replicas)
		}
		if !slices.Equal(g.Founders, r.Stream.Groups[i].Replicas) {
			t.Errorf("partition %d: founders %v changed from %v", i, g.Founders, r.Stream.Groups[i].Replicas)
		}
	}
	if _, ok := a.s.Client("dev-1"); ok {
		t.Error("a client of the evicted node is still registered there")
	}
	if r := a.apply(Command{Op: OpAddNode, Node: &Node{ID: 2, Name: "n2"}}); !errors.Is(r.Err, ErrInvalid) {
		t.Errorf("an evicted node rejoined: %v", r.Err)
	}
	// With no spare node left, evicting drops the replica.
	a.must(Command{Op: OpEvictNode, NodeID: 1})
	for i, g := range a.s.Stream("s").Groups {
		if len(g.Replicas) != 2 {
			t.Errorf("partition %d: %v, want the two nodes left", i, g.Replicas)
		}
	}
}

func TestClientRegistry(t *testing.T) {
	a := newApplier(t)
	if r := a.must(Command{Op: OpClaimClient, Client: "c", NodeID: 1}); r.Previous != 0 {
		t.Errorf("first claim: previous %d", r.Previous)
	}
	if r := a.must(Command{Op: OpClaimClient, Client: "c", NodeID: 2}); r.Previous != 1 {
		t.Errorf("takeover: previous %d, want 1", r.Previous)
	}
	a.must(Command{Op: OpReleaseClient, Client: "c", NodeID: 1}) // late release of the old node: ignored
	if c, ok := a.s.Client("c"); !ok || c.Node != 2 {
		t.Errorf("after a stale release: %+v %v, want node 2", c, ok)
	}
	a.must(Command{Op: OpReleaseClient, Client: "c", NodeID: 2})
	if _, ok := a.s.Client("c"); ok {
		t.Error("released client still registered")
	}
}

func TestConsumers(t *testing.T) {
	a := newApplier(t)
	a.nodes(1, nil)
	a.must(Command{Op: OpAddStream, Stream: "s", Config: []byte(`{}`), Replicas: 1})
	a.must(Command{Op: OpAddConsumer, Stream: "s", Consumer: "c", Config: []byte(`{"ack":"explicit"}`)})
	a.must(Command{Op: OpAddConsumer, Stream: "s", Consumer: "c", Config: []byte(`{"ack":"explicit"}`)})
	if r := a.apply(Command{Op: OpAddConsumer, Stream: "s", Consumer: "c", Config: []byte(`{"ack":"none"}`)}); !errors.Is(r.Err, ErrExists) {
		t.Errorf("conflicting consumer: %v", r.Err)
	}
	if r := a.apply(Command{Op: OpAddConsumer, Stream: "x", Consumer: "c", Config: []byte(`{}`)}); !errors.Is(r.Err, ErrNotFound) {
		t.Errorf("consumer of a missing stream: %v", r.Err)
	}
	a.must(Command{Op: OpDeleteConsumer, Stream: "s", Consumer: "c"})
	if len(a.s.Stream("s").Consumers) != 0 {
		t.Error("deleted consumer still listed")
	}
}

func TestBadCommandsChangeNothing(t *testing.T) {
	a := newApplier(t)
	a.nodes(1, nil)
	before := a.s.Snapshot()
	for _, data := range []string{``, `{`, `{"op":"nope"}`, `{"op":"add_node"}`, `{"op":"add_stream","stream":"s"}`, `{"op":"claim_client"}`, `{"op":"add_node","extra":1}`} {
		a.ix++
		if r := a.s.Apply(a.ix, []byte(data)); !errors.Is(r.Err, ErrBadCommand) {
			t.Errorf("%q: %v, want ErrBadCommand", data, r.Err)
		}
	}
	after := a.s.Snapshot()
	// Only the applied index moved.
	b := New()
	if err := b.Restore(after); err != nil {
		t.Fatal(err)
	}
	b.applied = 1
	if !bytes.Equal(b.Snapshot(), before) {
		t.Errorf("bad commands changed the state:\n%s\n%s", before, after)
	}
	// A replayed index is ignored.
	if r := a.s.Apply(1, EncodeCommand(&Command{Op: OpDeleteStream, Stream: "none"})); r.Err != nil {
		t.Errorf("replayed index applied: %v", r.Err)
	}
}

// TestDeterministicAndSnapshots: random command sequences give byte-identical state
// on two replicas, one of which restores from a snapshot halfway.
func TestDeterministicAndSnapshots(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cmds := randomCommands(rng, 300)
		x, y := New(), New()
		for i, data := range cmds {
			ix := uint64(i + 1)
			rx := x.Apply(ix, data)
			ry := y.Apply(ix, data)
			if (rx.Err == nil) != (ry.Err == nil) {
				t.Fatalf("seed %d, command %d: results differ: %v / %v", seed, i, rx.Err, ry.Err)
			}
			if i == len(cmds)/2 {
				y = New()
				if err := y.Restore(x.Snapshot()); err != nil {
					t.Fatalf("seed %d: restore: %v", seed, err)
				}
			}
		}
		if !bytes.Equal(x.Snapshot(), y.Snapshot()) {
			t.Fatalf("seed %d: replicas differ", seed)
		}
	}
}

func randomCommands(rng *rand.Rand, n int) [][]byte {
	var out [][]byte
	replicas := []int{1, 3, 5, 2}
	for range n {
		var c Command
		stream := fmt.Sprintf("s%d", rng.IntN(8))
		switch rng.IntN(9) {
		case 0, 1:
			c = Command{Op: OpAddNode, Node: &Node{ID: uint64(1 + rng.IntN(7)), Name: "n", Tags: map[string]string{"zone": string(rune('a' + rng.IntN(3)))}}}
		case 2:
			c = Command{Op: OpEvictNode, NodeID: uint64(1 + rng.IntN(9))}
		case 3:
			c = Command{Op: OpAddStream, Stream: stream, Config: []byte(fmt.Sprintf(`{"v":%d}`, rng.IntN(2))), Replicas: replicas[rng.IntN(4)], Partitions: rng.IntN(4)}
		case 4:
			c = Command{Op: OpUpdateStream, Stream: stream, Replicas: replicas[rng.IntN(4)]}
		case 5:
			c = Command{Op: OpDeleteStream, Stream: stream}
		case 6:
			c = Command{Op: OpAddConsumer, Stream: stream, Consumer: fmt.Sprintf("c%d", rng.IntN(3)), Config: []byte(`{}`)}
		case 7:
			c = Command{Op: OpClaimClient, Client: fmt.Sprintf("d%d", rng.IntN(5)), NodeID: uint64(1 + rng.IntN(5))}
		case 8:
			c = Command{Op: OpReleaseClient, Client: fmt.Sprintf("d%d", rng.IntN(5)), NodeID: uint64(1 + rng.IntN(5))}
		}
		c.Time = int64(rng.Uint32())
		out = append(out, EncodeCommand(&c))
	}
	return out
}

// TestCommandAppliedOnce: a command committed twice (a proposer's retry whose
// first attempt was committed too) is applied once: the retry gets the first
// result and changes nothing, even after other commands in between and on a
// replica restored from a snapshot taken between the two.
func TestCommandAppliedOnce(t *testing.T) {
	s := New()
	add := func(st *State, index uint64, c *Command) Result { return st.Apply(index, EncodeCommand(c)) }
	node := &Command{Op: OpAddNode, ID: "n1", Node: &Node{ID: 1, Name: "n1"}}
	add(s, 1, node)
	create := &Command{Op: OpAddStream, ID: "create-cat", Stream: "CAT", Config: json.RawMessage(`{}`), Replicas: 1, NodeID: 1}
	first := add(s, 2, create)
	if first.Err != nil || first.Stream == nil {
		t.Fatalf("create: %+v", first)
	}
	if r := add(s, 3, &Command{Op: OpDeleteStream, ID: "delete-cat", Stream: "CAT"}); r.Err != nil {
		t.Fatalf("delete: %v", r.Err)
	}
	snap := s.Snapshot()
	again := add(s, 4, create)
	if s.Stream("CAT") != nil {
		t.Fatal("the create committed again brought the deleted stream back")
	}
	if again.Err != nil || again.Stream == nil || again.Stream.Groups[0].ID != first.Stream.Groups[0].ID {
		t.Fatalf("the retry got %+v, want the first result %+v", again, first)
	}
	restored := New()
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if r := add(restored, 4, create); !errors.Is(r.Err, ErrApplied) || restored.Stream("CAT") != nil {
		t.Fatalf("a restored replica applied the retry: %+v, stream %v", r, restored.Stream("CAT"))
	}
	if !bytes.Equal(restored.Snapshot(), s.Snapshot()) {
		t.Fatal("the replica restored from a snapshot and the other disagree after the retry")
	}
	// The window forgets the oldest IDs past recentCommands.
	for i := range recentCommands {
		add(s, uint64(5+i), &Command{Op: OpReleaseClient, ID: fmt.Sprint("r", i), Client: "c", NodeID: 1})
	}
	if _, ok := s.results["create-cat"]; ok || len(s.results) != recentCommands {
		t.Fatalf("%d results kept, the create's among them: %v", len(s.results), ok)
	}
}
