package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// nemesisFaults is how many faults a nemesis round injects: a few in the suite,
// TERN_NEMESIS_FAULTS in make nemesis.
func nemesisFaults() int {
	if n, err := strconv.Atoi(os.Getenv("TERN_NEMESIS_FAULTS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// TestNemesisReplicatedStream runs an idempotent producer and an acking consumer
// against a stream replicated on every node while, at random (seeded), a node is
// killed with SIGKILL and restarted, or paused with SIGSTOP and resumed — on five
// nodes, two at once, one killed and one paused. After the faults it checks that
// every acknowledged publish is in the stream exactly once, in the order
// acknowledged, and that no message the consumer acknowledged (and had confirmed)
// came to it again. Odd seeds run 3 nodes, even ones 5: the suite runs seed 1.
func TestNemesisReplicatedStream(t *testing.T) {
	for seed := uint64(1); seed <= seeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { nemesisRound(t, seed) })
	}
}

func nemesisRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 16))
	nodes := 3
	if seed%2 == 0 {
		nodes = 5
	}
	size := strconv.Itoa(nodes)
	c := clustertest.Start(t, clustertest.Options{N: nodes, Args: func(int) []string { return []string{"--cluster-size", size} }})
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL())
	}
	all := strings.Join(urls, ",")
	connect := func(i int) *tern.Conn { return c.Nodes[i].Connect(t, all, tern.MaxReconnects(-1)) }
	fault := func(rng *rand.Rand) {
		victim := c.Nodes[rng.IntN(len(c.Nodes))]
		if nodes == 5 && rng.IntN(3) == 0 {
			// Two of five at once, a minority: one killed, another paused.
			other := c.Nodes[(slices.Index(c.Nodes, victim)+1+rng.IntN(4))%5]
			pause := time.Duration(500+rng.IntN(1500)) * time.Millisecond
			t.Logf("kill -9 %s and SIGSTOP %s for %v", victim.Name, other.Name, pause)
			victim.Kill()
			other.Stop()
			time.Sleep(pause)
			other.Cont()
			victim.Restart(t)
		} else if rng.IntN(2) == 0 {
			t.Logf("kill -9 %s", victim.Name)
			victim.Kill()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			victim.Restart(t)
		} else {
			pause := time.Duration(500+rng.IntN(2000)) * time.Millisecond
			t.Logf("SIGSTOP %s for %v", victim.Name, pause)
			victim.Stop()
			time.Sleep(pause)
			victim.Cont()
		}
	}
	nemesisWorkload(t, c, rng, nodes, connect, fault)
}

// nemParts is the partition count of the nemesis's stream: each partition is a Raft
// group of its own.
const nemParts = 3

// partSeq is where a message is stored.
type partSeq struct {
	part int
	seq  uint64
}

// nemesisWorkload runs the nemesis rounds' producer and consumer on a stream of
// as many replicas as nodes and nemParts partitions, injects nemesisFaults faults
// (fault, each followed by the mesh forming again) and checks what must hold after
// them. connect(i) makes a client connection through node i.
func nemesisWorkload(t *testing.T, c *clustertest.Cluster, rng *rand.Rand, nodes int, connect func(i int) *tern.Conn, fault func(rng *rand.Rand)) {
	seed := rng.Uint64()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := connect(0)
	c.WaitFor("a stream on every node (the catalogue knowing them all)", 30*time.Second, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err := admin.Streams().AddStream(actx, tern.StreamConfig{Name: "NEM", Subjects: []string{"nem.>"}, Replicas: nodes,
			Partitions: nemParts})
		return err == nil
	})
	c.WaitFor("the consumer made", 30*time.Second, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err := admin.Streams().AddConsumer(actx, "NEM", tern.ConsumerConfig{Durable: "C", AckPolicy: tern.AckExplicit,
			AckWait: tern.Duration(2 * time.Second)})
		if err != nil {
			t.Logf("making the consumer: %v", err)
		}
		return err == nil
	})

	// The producer publishes ids in order, each retried (same id) until
	// acknowledged, keyed so that they spread over the partitions; the consumer
	// acknowledges synchronously what it gets.
	const total = 600
	var (
		mu        sync.Mutex
		published = map[string]partSeq{} // id → where it was acknowledged
		consumed  = map[partSeq]int{}    // confirmed acks
		unsure    = map[partSeq]bool{}   // acked without a confirmation (it may or may not count)
		again     []partSeq              // delivered after a confirmed ack
	)
	ackFloors := func(ci *tern.ConsumerInfo) (floor uint64) {
		for _, p := range ci.Partitions {
			floor += p.AckFloor
		}
		return floor
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		js := connect(1).Streams()
		pace := rand.New(rand.NewPCG(seed, 17))
		for i := range total {
			id := fmt.Sprintf("n-%d", i)
			for {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				ack, err := js.Publish(pctx, "nem.x", []byte(id), tern.MsgID(id), tern.Key(fmt.Sprint("k", i%8)))
				pcancel()
				if err == nil {
					at := partSeq{ack.Partition, ack.Seq}
					mu.Lock()
					if prev, ok := published[id]; ok && prev != at {
						t.Errorf("%s acknowledged at %v and at %v", id, prev, at)
					}
					published[id] = at
					mu.Unlock()
					break
				}
				if ctx.Err() != nil {
					t.Errorf("publishing %s: %v", id, err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Duration(pace.IntN(3)) * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		cjs := connect(2).Streams()
		pull := cjs.Pull("NEM", "C")
		for {
			mu.Lock()
			seen := len(consumed)+len(unsure) >= total
			mu.Unlock()
			if seen {
				// Every message was acknowledged, some without a confirmation:
				// done once the consumer's position says so (an ack that was
				// lost brings its message again).
				ictx, icancel := context.WithTimeout(ctx, time.Second)
				ci, err := cjs.ConsumerInfo(ictx, "NEM", "C")
				icancel()
				if err == nil && ackFloors(ci) == total && ci.NumAckPending == 0 {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			default:
			}
			fctx, fcancel := context.WithTimeout(ctx, time.Second)
			msgs, _ := pull.Fetch(fctx, 20)
			fcancel()
			for _, m := range msgs {
				md, err := m.Metadata()
				if err != nil {
					t.Errorf("metadata: %v", err)
					continue
				}
				at := partSeq{md.Partition, md.StreamSeq}
				mu.Lock()
				if consumed[at] > 0 {
					again = append(again, at)
				}
				mu.Unlock()
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				err = m.AckSync(actx)
				acancel()
				mu.Lock()
				if err == nil {
					consumed[at]++
					delete(unsure, at)
				} else if consumed[at] == 0 {
					unsure[at] = true
				}
				mu.Unlock()
			}
		}
	}()

	// The nemesis: faults one at a time, each followed by the cluster's recovery.
	for range nemesisFaults() {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		fault(rng)
		c.WaitFor("the mesh after the fault", 60*time.Second, func() bool { return c.MeshOf(c.Nodes...) })
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		mu.Lock()
		p, cn := len(published), len(consumed)
		mu.Unlock()
		in, err := infoOf(admin.Streams(), "NEM")
		ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
		ci, cerr := admin.Streams().ConsumerInfo(ictx, "NEM", "C")
		icancel()
		t.Fatalf("a minute after the last fault: %d of %d published, %d consumed; stream %+v %v; consumer %+v %v",
			p, total, cn, in, err, ci, cerr)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(published) != total {
		t.Fatalf("%d of %d publishes acknowledged", len(published), total)
	}
	// Every acknowledged publish is stored exactly once, in the order of its
	// acknowledgement within its partition: sequences 1, 2, ... of each
	// partition, one per id, in the order the ids were published.
	bySeq := map[partSeq]string{}
	for id, at := range published {
		if other, ok := bySeq[at]; ok {
			t.Fatalf("%v acknowledged for %s and %s", at, id, other)
		}
		bySeq[at] = id
	}
	next := make([]uint64, nemParts)
	for i := range total {
		at := published[fmt.Sprintf("n-%d", i)]
		next[at.part]++
		if at.seq != next[at.part] {
			t.Fatalf("n-%d acknowledged at sequence %d of partition %d, want %d (stored out of order or twice)", i, at.seq, at.part, next[at.part])
		}
	}
	for p, n := range next {
		if n == 0 {
			t.Fatalf("partition %d got none of the %d messages: the keys do not spread", p, total)
		}
	}
	js := admin.Streams()
	var info *tern.StreamInfo
	c.WaitFor("the stream described after the faults", 20*time.Second, func() bool {
		var err error
		info, err = infoOf(js, "NEM")
		return err == nil
	})
	if info.State.Msgs != total || len(info.State.Parts) != nemParts {
		t.Fatalf("the stream holds %d messages in %d partitions, want %d in %d", info.State.Msgs, len(info.State.Parts), total, nemParts)
	}
	for p, ps := range info.State.Parts {
		if ps.LastSeq != next[p] {
			t.Fatalf("partition %d ends at %d, want %d", p, ps.LastSeq, next[p])
		}
	}
	if len(consumed)+len(unsure) != total {
		t.Fatalf("the consumer acknowledged %d of %d messages (%d unconfirmed)", len(consumed)+len(unsure), total, len(unsure))
	}
	c.WaitFor("the consumer's position: everything acknowledged", 20*time.Second, func() bool {
		ictx, icancel := context.WithTimeout(ctx, 2*time.Second)
		ci, err := js.ConsumerInfo(ictx, "NEM", "C")
		icancel()
		return err == nil && ackFloors(ci) == total && ci.NumAckPending == 0
	})
	if len(again) > 0 {
		t.Fatalf("%d messages came again after a confirmed ack (first: %v)", len(again), again[0])
	}
	outputs := map[string]string{}
	for _, n := range c.Nodes {
		outputs[n.Name] = n.Output()
	}
	if err := oneLeaderPerTerm(outputs); err != nil {
		t.Fatal(err)
	}
}

// leadingLine is what a node logs for each group and term it leads.
var leadingLine = regexp.MustCompile(`msg="leading group" group=(\d+) term=(\d+)`)

// oneLeaderPerTerm checks, from every node's log (by node name), that no two nodes
// led one group in one term: only a leader accepts writes, so two in a term could
// both have had writes committed.
func oneLeaderPerTerm(outputs map[string]string) error {
	type groupTerm struct{ group, term string }
	leader := map[groupTerm]string{}
	for _, node := range slices.Sorted(maps.Keys(outputs)) {
		for _, m := range leadingLine.FindAllStringSubmatch(outputs[node], -1) {
			gt := groupTerm{m[1], m[2]}
			if other, ok := leader[gt]; ok && other != node {
				return fmt.Errorf("group %s had two leaders in term %s: %s and %s", gt.group, gt.term, other, node)
			}
			leader[gt] = node
		}
	}
	if len(leader) == 0 {
		return errors.New("no node logged leading a group: the check has nothing to check")
	}
	return nil
}

// TestOneLeaderPerTermCheck: the check finds two leaders of a group in one term, and
// lets one node lead many terms and many groups.
func TestOneLeaderPerTermCheck(t *testing.T) {
	line := func(group, term int) string {
		return fmt.Sprintf("time=x level=INFO msg=\"leading group\" group=%d term=%d\n", group, term)
	}
	ok := map[string]string{"n1": line(1, 2) + line(16, 2) + line(1, 7), "n2": line(1, 3) + line(16, 3)}
	if err := oneLeaderPerTerm(ok); err != nil {
		t.Fatalf("one leader per term: %v", err)
	}
	two := map[string]string{"n1": line(1, 2) + line(16, 4), "n2": line(16, 3), "n3": line(16, 4)}
	if err := oneLeaderPerTerm(two); err == nil || !strings.Contains(err.Error(), "group 16 had two leaders in term 4") {
		t.Fatalf("two leaders of group 16 in term 4: %v", err)
	}
	if err := oneLeaderPerTerm(map[string]string{"n1": "nothing"}); err == nil {
		t.Fatal("no leadership logged at all passed the check")
	}
}
