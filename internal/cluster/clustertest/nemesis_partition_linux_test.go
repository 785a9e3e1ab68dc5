package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/netns"
)

// TestNemesisPartitions runs the nemesis workload (an idempotent producer and an
// acking consumer on a stream replicated on every node) on three nodes, each in a
// network namespace of its own joined by a bridge, while the network is cut at
// random (seeded): one node off from the others (a minority), one link cut both
// ways (the third node bridging the two), or one way only, each healed after a
// while. Meanwhile clients on every node create, delete and list streams, and the
// history of those catalogue operations must be linearizable (checked with
// porcupine): a create acknowledged before a list began is in it, a delete
// acknowledged is not, whichever node answers. Clients talk to their own node
// inside its namespace, so the cuts are between nodes only. Needs root
// (TERN_NO_NETNS=1 skips it).
func TestNemesisPartitions(t *testing.T) {
	skipWithoutNetns(t)
	for seed := uint64(1); seed <= seeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { partitionRound(t, seed) })
	}
}

func partitionRound(t *testing.T, seed uint64) {
	br, err := netns.NewBridge("tern-nem", 196, 3)
	if err != nil {
		t.Fatalf("%v (TERN_NO_NETNS=1 skips these tests)", err)
	}
	t.Cleanup(br.Close)
	c := clustertest.Start(t, clustertest.Options{N: 3, Bridge: br, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	connect := func(i int) *tern.Conn { return c.Nodes[i].Connect(t, c.Nodes[i].URL()) }
	rng := rand.New(rand.NewPCG(seed, 196))

	hist := &catalogueHistory{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.Nodes {
		js := connect(i).Streams()
		wg.Add(1)
		go func() {
			defer wg.Done()
			hist.run(i, js, rand.New(rand.NewPCG(seed, uint64(100+i))), stop)
		}()
	}

	fault := func(rng *rand.Rand) {
		i := rng.IntN(3)
		j := (i + 1 + rng.IntN(2)) % 3
		var what string
		var err error
		switch rng.IntN(3) {
		case 0:
			what, err = fmt.Sprintf("%s cut off from the others", c.Nodes[i].Name), br.Isolate(i)
		case 1:
			what, err = fmt.Sprintf("link %s–%s cut (the third node bridges them)", c.Nodes[i].Name, c.Nodes[j].Name), br.Cut(i, j)
		default:
			what, err = fmt.Sprintf("%s → %s cut one way", c.Nodes[i].Name, c.Nodes[j].Name), br.CutOneWay(i, j)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		d := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		t.Logf("%s for %v", what, d)
		time.Sleep(d)
		if err := br.Heal(); err != nil {
			t.Fatalf("heal: %v", err)
		}
	}
	nemesisWorkload(t, c, rng, 3, connect, fault)
	close(stop)
	wg.Wait()
	hist.check(t)
}

// catalogueHistory records the stream catalogue operations of the partition
// nemesis, for porcupine.
type catalogueHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// catalogueNames are the streams the history's clients create and delete.
var catalogueNames = []string{"CAT0", "CAT1", "CAT2"}

// catIn is an operation on one stream's existence: create, delete, or read (from
// a list).
type catIn struct {
	op   string // "create", "delete", "read"
	name string
}

// catOut is its outcome: ok (created; deleted; listed), notFound (a delete of a
// stream that was not there), unknown (no answer: it may or may not have
// happened); present is what a read saw.
type catOut struct {
	ok, notFound, unknown, present bool
}

func (h *catalogueHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *catalogueHistory) add(client int, in catIn, out catOut, call, ret int64) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	h.mu.Unlock()
}

// run issues operations from one client until stop, one at a time. An operation
// without an answer counts as happening at any time after its call (its return is
// the end of time); a list that fails saw nothing and is left out.
func (h *catalogueHistory) run(client int, js *tern.Streams, rng *rand.Rand, stop <-chan struct{}) {
	const forever = int64(1) << 62
	for n := 0; n < 2000; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name := catalogueNames[rng.IntN(len(catalogueNames))]
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		call := h.now()
		switch k := rng.IntN(4); {
		case k == 0:
			_, err := js.AddStream(ctx, tern.StreamConfig{Name: name, Subjects: []string{"cat." + name + ".>"}})
			ret := h.now()
			if err != nil {
				h.add(client, catIn{"create", name}, catOut{unknown: true}, call, forever)
			} else {
				h.add(client, catIn{"create", name}, catOut{ok: true}, call, ret)
			}
		case k == 1:
			err := js.DeleteStream(ctx, name)
			ret := h.now()
			switch {
			case err == nil:
				h.add(client, catIn{"delete", name}, catOut{ok: true}, call, ret)
			case errors.Is(err, tern.ErrStreamNotFound):
				h.add(client, catIn{"delete", name}, catOut{notFound: true}, call, ret)
			default:
				h.add(client, catIn{"delete", name}, catOut{unknown: true}, call, forever)
			}
		default:
			infos, err := js.ListStreams(ctx)
			ret := h.now()
			if err == nil {
				for _, nm := range catalogueNames {
					present := slices.ContainsFunc(infos, func(si tern.StreamInfo) bool { return si.Config.Name == nm })
					h.add(client, catIn{"read", nm}, catOut{ok: true, present: present}, call, ret)
				}
			}
		}
		cancel()
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
	}
}

// catalogueModel: each stream name is a register of its existence, checked on its
// own (a list is a read of each).
var catalogueModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range history {
			name := op.Input.(catIn).name
			by[name] = append(by[name], op)
		}
		var out [][]porcupine.Operation
		for _, name := range catalogueNames {
			if len(by[name]) > 0 {
				out = append(out, by[name])
			}
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{false} },
	Step: func(state, input, output interface{}) []interface{} {
		exists, in, out := state.(bool), input.(catIn), output.(catOut)
		switch in.op {
		case "create":
			if out.unknown {
				return []interface{}{exists, true}
			}
			return []interface{}{true}
		case "delete":
			switch {
			case out.unknown:
				return []interface{}{exists, false}
			case out.notFound && exists, out.ok && !exists:
				return nil
			}
			return []interface{}{false}
		default:
			if out.present != exists {
				return nil
			}
			return []interface{}{exists}
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		return fmt.Sprintf("%s(%s) -> %+v", input.(catIn).op, input.(catIn).name, output.(catOut))
	},
}

func (h *catalogueHistory) check(t *testing.T) {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	if len(ops) < 30 {
		t.Fatalf("only %d catalogue operations recorded", len(ops))
	}
	res, info := porcupine.CheckOperationsVerbose(catalogueModel.ToModel(), ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("catalogue history of %d operations is linearizable", len(ops))
	case porcupine.Illegal:
		file := t.TempDir() + "/catalogue.html"
		_ = porcupine.VisualizePath(catalogueModel.ToModel(), info, file)
		t.Fatalf("the catalogue history of %d operations is not linearizable (see %s)", len(ops), file)
	default:
		t.Logf("catalogue history of %d operations: linearizability check timed out", len(ops))
	}
}

// TestCatalogueModelRejectsStaleRead: the checker the partition nemesis relies on
// refuses a list that misses a stream whose create was acknowledged before the list
// began, and accepts one that overlaps the create.
func TestCatalogueModelRejectsStaleRead(t *testing.T) {
	m := catalogueModel.ToModel()
	created := porcupine.Operation{ClientId: 0, Input: catIn{"create", "CAT0"}, Output: catOut{ok: true}, Call: 0, Return: 10}
	stale := porcupine.Operation{ClientId: 1, Input: catIn{"read", "CAT0"}, Output: catOut{ok: true}, Call: 20, Return: 30}
	if porcupine.CheckOperations(m, []porcupine.Operation{created, stale}) {
		t.Fatal("a read after an acknowledged create that misses the stream passed the check")
	}
	overlapping := stale
	overlapping.Call = 5
	if !porcupine.CheckOperations(m, []porcupine.Operation{created, overlapping}) {
		t.Fatal("a read concurrent with the create that misses the stream failed the check")
	}
	unknownDelete := porcupine.Operation{ClientId: 2, Input: catIn{"delete", "CAT0"}, Output: catOut{unknown: true}, Call: 12, Return: 1 << 62}
	if !porcupine.CheckOperations(m, []porcupine.Operation{created, unknownDelete, stale}) {
		t.Fatal("a delete without an answer, concurrent with the read, failed the check")
	}
}
