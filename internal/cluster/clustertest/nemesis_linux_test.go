package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/netns"
)

// TestNemesis is the cluster's nemesis. Each round starts 3 nodes (odd seeds) or 5
// (even seeds), every one a `tern server` process in a network namespace of its
// own joined by a bridge, and runs on them at once:
//
//   - an idempotent producer (ids published in order, each retried under its id
//     until acknowledged) and an acking consumer (AckSync) on a stream replicated
//     on every node, in nemParts partitions, each a Raft group;
//   - a reader of the consumer's ack floors (ConsumerInfo), several a second;
//   - on every node, a client creating, deleting and listing streams: operations
//     of the meta group;
//
// while the nemesis injects faults one after another (faultKinds: kill -9 and
// restart, SIGSTOP and SIGCONT, a minority cut off, one link cut with the other
// nodes bridging it, a link cut one way, and on five nodes a 2|3 split and a node
// killed while another is paused or cut off), each healed, and the mesh whole
// again, before the next. Then it checks that every acknowledged publish is stored
// exactly once, in publishing order within its partition, and was delivered as
// itself; that the consumer acknowledged every message and was sent none again
// once its ack was confirmed (consume), and that its ack floors never fell below a
// confirmed ack (checkAckFloors); that no two nodes led one Raft group in one term
// (oneLeaderPerTerm); and that the history of stream creates, deletes and lists is
// linearizable (porcupine).
//
// The suite runs seeds 1 to 4 (two rounds of each size); TERN_CLUSTER_SEEDS=N runs
// seeds 1 to N and TERN_NEMESIS_FAULTS the faults of each round (make nemesis).
// One seed again: TERN_CLUSTER_SEEDS=7 go test -run 'TestNemesis/seed7$'. The
// output has the end of each node's log; TERN_NEMESIS_LOGS=dir keeps the whole logs
// of a failed round there. Needs root (TERN_NO_NETNS=1 skips it).
func TestNemesis(t *testing.T) {
	skipWithoutNetns(t)
	for seed := uint64(1); seed <= nemesisSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { nemesisRound(t, seed) })
	}
}

// nemesisSeeds is how many rounds TestNemesis runs: TERN_CLUSTER_SEEDS when set,
// else four, which between them take every kind of fault.
func nemesisSeeds() uint64 {
	if _, set := os.LookupEnv("TERN_CLUSTER_SEEDS"); set {
		return seeds()
	}
	return 4
}

// twinSeeds is how many rounds the Kafka and MQTT nemeses run:
// TERN_CLUSTER_SEEDS when set, else two (their rounds take longer).
func twinSeeds() uint64 {
	if _, set := os.LookupEnv("TERN_CLUSTER_SEEDS"); set {
		return seeds()
	}
	return 2
}

// nemesisFaults is how many faults a round injects: TERN_NEMESIS_FAULTS, else four.
func nemesisFaults() int {
	if n, err := strconv.Atoi(os.Getenv("TERN_NEMESIS_FAULTS")); err == nil && n > 0 {
		return n
	}
	return 4
}

const (
	// nemParts is the partition count of the nemesis's stream.
	nemParts = 3
	// nemMaxMsgs bounds what the producer publishes in a round; it stops when the
	// faults are over.
	nemMaxMsgs = 20000
	// quietAfter is how long after the cluster is whole again (a fault healed, the
	// mesh formed) the ack floors read count as quiet: time for a leader that was
	// cut off or paused to learn of its successor and stop answering.
	quietAfter = time.Second
)

// nemesis is one round's cluster, its network and the nemesis's choices.
type nemesis struct {
	t     *testing.T
	rng   *rand.Rand // which fault, which nodes, how long
	br    *netns.Bridge
	c     *clustertest.Cluster
	start time.Time
	// whole is when (from start) the cluster was last whole again after a fault;
	// -1 while one is under way.
	whole atomic.Int64
}

// since is the time from the start of the round.
func (r *nemesis) since() time.Duration { return time.Since(r.start) }

// logf logs what the nemesis does with the time from the start of the round and
// the wall clock, to find it among the nodes' logs.
func (r *nemesis) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%v %s] %s", r.since().Round(time.Millisecond), time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func nemesisRound(t *testing.T, seed uint64) {
	r := startNemesis(t, seed, nil)
	c, nodes := r.c, len(r.c.Nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	admin := r.client(0, "admin")
	c.WaitFor("a stream on every node (the catalogue knowing them all)", 30*time.Second, func() bool {
		js, err := admin.streams()
		if err != nil {
			return false
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err = js.AddStream(actx, tern.StreamConfig{Name: "NEM", Subjects: []string{"nem.>"}, Replicas: nodes,
			Partitions: nemParts})
		return err == nil
	})
	c.WaitFor("the consumer made", 30*time.Second, func() bool {
		js, err := admin.streams()
		if err != nil {
			return false
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err = js.AddConsumer(actx, "NEM", tern.ConsumerConfig{Durable: "C", AckPolicy: tern.AckExplicit,
			AckWait: tern.Duration(2 * time.Second)})
		if err != nil {
			t.Logf("making the consumer: %v", err)
		}
		return err == nil
	})
	r.whole.Store(int64(r.since()))

	// The clients: the producer on n2, the consumer on n3, the ack floors' reader
	// on n1, a catalogue client on every node.
	w := &nemWorkload{t: t, r: r, total: -1, published: map[string]partSeq{}, got: map[partSeq]string{},
		consumed: map[partSeq]int{}, confirmedAt: map[partSeq]time.Duration{}, unsure: map[partSeq]bool{},
		ackedAs: map[partSeq]delivery{}}
	hist := &catalogueHistory{start: r.start}
	stopProducing, stopWatching := make(chan struct{}), make(chan struct{})
	var workers, watchers sync.WaitGroup
	var once sync.Once
	stopAll := func() {
		once.Do(func() {
			cancel()
			close(stopWatching)
		})
	}
	// However the round ends, nothing of it runs on (or logs) after it.
	defer func() {
		stopAll()
		workers.Wait()
		watchers.Wait()
	}()
	workers.Add(2)
	go func() {
		defer workers.Done()
		w.produce(ctx, r.client(1, "producer"), rand.New(rand.NewPCG(seed, 17)), stopProducing)
	}()
	go func() {
		defer workers.Done()
		w.consume(ctx, r.client(2, "consumer"))
	}()
	watchers.Add(1 + nodes)
	go func() {
		defer watchers.Done()
		w.watchAcks(r.client(0, "ack-floors"), stopWatching)
	}()
	for i := range c.Nodes {
		go func() {
			defer watchers.Done()
			hist.run(i, r.client(i, "catalogue"), rand.New(rand.NewPCG(seed, uint64(100+i))), stopWatching)
		}()
	}

	r.injectFaults(seed, func() string {
		published, acked := w.progress()
		return fmt.Sprintf("%d messages published, %d acknowledged", published, acked)
	})
	time.Sleep(500 * time.Millisecond) // a little more traffic on the healed cluster
	close(stopProducing)

	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		w.mu.Lock()
		p, total, cn := len(w.published), w.total, len(w.consumed)
		w.mu.Unlock()
		js, _ := admin.streams()
		var in *tern.StreamInfo
		var ci *tern.ConsumerInfo
		var ierr, cerr error
		if js != nil {
			in, ierr = infoOf(js, "NEM")
			ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
			ci, cerr = js.ConsumerInfo(ictx, "NEM", "C")
			icancel()
		}
		t.Fatalf("90 s after the last fault: %d published (of %d), %d consumed; stream %+v %v; consumer %+v %v",
			p, total, cn, in, ierr, ci, cerr)
	}
	published, acked := w.progress()
	r.logf("the workload is done: %d messages published, %d acknowledged", published, acked)
	stopAll()
	watchers.Wait()
	w.check(admin)
	r.checkLeaders()
	hist.check(t, 30*time.Second)
}

// startNemesis starts a round's cluster: 3 nodes for an odd seed, 5 for an even
// one, each in a network namespace of its own on one bridge; with, on each,
// whatever listeners listen adds (MQTT, Kafka).
func startNemesis(t *testing.T, seed uint64, listen func(*clustertest.Options)) *nemesis {
	nodes := 3
	if seed%2 == 0 {
		nodes = 5
	}
	// Its own name and subnet (internal/netns locks both, so a test elsewhere using
	// either would wait for this one rather than share it).
	br, err := netns.NewBridge("tern-nem", 194, nodes)
	if err != nil {
		t.Fatalf("%v (TERN_NO_NETNS=1 skips these tests)", err)
	}
	t.Cleanup(br.Close) // after the nodes are killed: cleanups run last-in first-out
	size := strconv.Itoa(nodes)
	opts := clustertest.Options{N: nodes, Bridge: br, Args: func(int) []string { return []string{"--cluster-size", size} }}
	if listen != nil {
		listen(&opts)
	}
	c := clustertest.Start(t, opts)
	r := &nemesis{t: t, rng: rand.New(rand.NewPCG(seed, 16)), br: br, c: c, start: time.Now()}
	if dir := os.Getenv("TERN_NEMESIS_LOGS"); dir != "" {
		// The test's output has the end of each node's log; a failed round's
		// whole logs are kept in dir.
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			for _, n := range c.Nodes {
				file := filepath.Join(dir, fmt.Sprintf("%s-%s.log", strings.ReplaceAll(t.Name(), "/", "-"), n.Name))
				if err := os.WriteFile(file, []byte(n.Output()), 0o644); err != nil {
					t.Log(err)
				}
			}
			t.Logf("the nodes' logs are in %s", dir)
		})
	}
	return r
}

// injectFaults runs the round's faults one at a time, each healed and followed
// by the mesh forming again; progress says how the workload stands after each.
// A round takes the kinds in order from where the previous round of its size
// stopped, so that a few rounds of a few faults go through them all; which nodes
// and for how long are the seed's draws.
func (r *nemesis) injectFaults(seed uint64, progress func() string) {
	kinds := faultKindsFor(len(r.c.Nodes))
	first := int(seed-1) / 2 * nemesisFaults()
	for k := range nemesisFaults() {
		time.Sleep(time.Duration(1000+r.rng.IntN(1000)) * time.Millisecond)
		kind := kinds[(first+k)%len(kinds)]
		r.whole.Store(-1)
		r.logf("fault %d of %d: %s", k+1, nemesisFaults(), kind.name)
		kind.run(r)
		mesh := r.waitMesh()
		r.whole.Store(int64(r.since()))
		r.logf("healed, the mesh whole again %v later; %s", mesh.Round(time.Millisecond), progress())
	}
}

// checkLeaders checks, from every node's log, that no two nodes led one Raft
// group in one term.
func (r *nemesis) checkLeaders() {
	r.t.Helper()
	outputs := map[string]string{}
	for _, n := range r.c.Nodes {
		outputs[n.Name] = n.Output()
	}
	if err := oneLeaderPerTerm(outputs); err != nil {
		r.t.Error(err)
	}
}

// waitMesh waits, up to a minute, until every node sees every other alive with a
// route to it, and says every few seconds what is still missing.
func (r *nemesis) waitMesh() time.Duration {
	r.t.Helper()
	began := time.Now()
	said := began
	for !r.c.MeshOf(r.c.Nodes...) {
		if time.Since(began) > time.Minute {
			r.t.Fatalf("no mesh a minute after the fault: %s", meshGaps(r.c))
		}
		if time.Since(said) > 5*time.Second {
			said = time.Now()
			r.logf("no mesh yet: %s", meshGaps(r.c))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(began)
}

// meshGaps says what each node misses of the mesh: peers it does not believe
// alive, peers it has no route to.
func meshGaps(c *clustertest.Cluster) string {
	var gaps []string
	for _, n := range c.Nodes {
		st, err := n.Status()
		if err != nil {
			gaps = append(gaps, fmt.Sprintf("%s: %v", n.Name, err))
			continue
		}
		var dead, unrouted []string
		for _, p := range c.Nodes {
			if p == n {
				continue
			}
			if !clustertest.Alive(st, p.Name) {
				dead = append(dead, p.Name)
			}
			if _, ok := clustertest.RouteTo(st, p.Name); !ok {
				unrouted = append(unrouted, p.Name)
			}
		}
		if len(dead)+len(unrouted) > 0 {
			gaps = append(gaps, fmt.Sprintf("%s: not alive %v, no route %v", n.Name, dead, unrouted))
		}
	}
	return strings.Join(gaps, "; ")
}

// faultKind is one kind of fault: run injects it, waits, and heals it.
type faultKind struct {
	name  string
	nodes int // the smallest cluster it is for
	run   func(r *nemesis)
}

// faultKinds are the nemesis's faults. Each leaves a majority of the nodes up and
// linked to each other, so that the cluster can go on, and the rest cut off from
// it, or dead, or frozen, for up to a few seconds: long enough for the others to
// find a node dead (2 s) and elect leaders without it.
var faultKinds = []faultKind{
	{"kill -9 and restart", 3, func(r *nemesis) {
		v, d := r.c.Nodes[r.pick(1)[0]], r.span(500, 2000)
		r.logf("kill -9 %s, restarted %v later", v.Name, d)
		v.Kill()
		time.Sleep(d)
		v.Restart(r.t)
	}},
	{"SIGSTOP and SIGCONT", 3, func(r *nemesis) {
		v, d := r.c.Nodes[r.pick(1)[0]], r.span(500, 2500)
		r.logf("SIGSTOP %s for %v", v.Name, d)
		v.Stop()
		time.Sleep(d)
		v.Cont()
	}},
	{"a node cut off", 3, func(r *nemesis) {
		v, d := r.pick(1)[0], r.span(1000, 3000)
		r.logf("%s cut off from the others for %v", r.c.Nodes[v].Name, d)
		r.cut(r.br.Isolate(v), d)
	}},
	{"one link cut, the others bridging", 3, func(r *nemesis) {
		ij, d := r.pick(2), r.span(1000, 3000)
		r.logf("link %s–%s cut both ways for %v", r.c.Nodes[ij[0]].Name, r.c.Nodes[ij[1]].Name, d)
		r.cut(r.br.Cut(ij[0], ij[1]), d)
	}},
	{"one link cut one way", 3, func(r *nemesis) {
		ij, d := r.pick(2), r.span(1000, 3000)
		r.logf("%s → %s cut (the other way still flows) for %v", r.c.Nodes[ij[0]].Name, r.c.Nodes[ij[1]].Name, d)
		r.cut(r.br.CutOneWay(ij[0], ij[1]), d)
	}},
	{"a 2|3 split", 5, func(r *nemesis) {
		all, d := r.pick(len(r.c.Nodes)), r.span(1000, 3000)
		r.logf("%s | %s for %v", r.names(all[:2]), r.names(all[2:]), d)
		r.cut(r.br.Partition(all[:2], all[2:]), d)
	}},
	{"kill -9 while another is paused", 5, func(r *nemesis) {
		ab, d := r.pick(2), r.span(500, 2000)
		a, b := r.c.Nodes[ab[0]], r.c.Nodes[ab[1]]
		r.logf("kill -9 %s and SIGSTOP %s for %v, then %s restarted", a.Name, b.Name, d, a.Name)
		a.Kill()
		b.Stop()
		time.Sleep(d)
		b.Cont()
		a.Restart(r.t)
	}},
	{"kill -9 while another is cut off", 5, func(r *nemesis) {
		ab, d1, d2 := r.pick(2), r.span(500, 1500), r.span(500, 1500)
		a, b := r.c.Nodes[ab[0]], r.c.Nodes[ab[1]]
		r.logf("kill -9 %s and %s cut off; %s restarted %v later, %s back %v after that", a.Name, b.Name, a.Name, d1, b.Name, d2)
		a.Kill()
		if err := r.br.Isolate(ab[1]); err != nil {
			r.t.Fatalf("cut: %v", err)
		}
		time.Sleep(d1)
		a.Restart(r.t) // catches up from the majority while b is still away
		r.cut(nil, d2)
	}},
}

// faultKindsFor are the kinds of fault for a cluster of n nodes.
func faultKindsFor(n int) []faultKind {
	var out []faultKind
	for _, k := range faultKinds {
		if n >= k.nodes {
			out = append(out, k)
		}
	}
	return out
}

// pick draws k distinct nodes.
func (r *nemesis) pick(k int) []int { return r.rng.Perm(len(r.c.Nodes))[:k] }

// span draws a duration between lo and hi milliseconds.
func (r *nemesis) span(lo, hi int) time.Duration {
	return time.Duration(lo+r.rng.IntN(hi-lo)) * time.Millisecond
}

func (r *nemesis) names(nodes []int) string {
	var s []string
	for _, i := range nodes {
		s = append(s, r.c.Nodes[i].Name)
	}
	return strings.Join(s, ",")
}

// cut keeps the cut just made (err is its error) for d, then heals every cut.
func (r *nemesis) cut(err error, d time.Duration) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("cut: %v", err)
	}
	time.Sleep(d)
	if err := r.br.Heal(); err != nil {
		r.t.Fatalf("heal: %v", err)
	}
}

// nsClient is a client on one node's host: its connections are made inside the
// node's namespace, so that cuts between nodes cut it off as they cut off its
// node. A connection there cannot reconnect by itself (clustertest.Node.Connect),
// and a node killed drops its clients, so nsClient connects again when its
// connection is lost: to its node first, else to another over the bridge, and
// back to its node once that answers again.
type nsClient struct {
	c     *clustertest.Cluster
	home  int
	name  string
	mu    sync.Mutex
	nc    *tern.Conn
	js    *tern.Streams
	tried time.Time // the last attempt to go back to the home node
}

// client makes a client of node home, closed when the test ends.
func (r *nemesis) client(home int, role string) *nsClient {
	cl := &nsClient{c: r.c, home: home, name: role + "@" + r.c.Nodes[home].Name}
	r.t.Cleanup(func() {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		if cl.nc != nil {
			cl.nc.Close()
		}
	})
	return cl
}

// streams is the stream API of a live connection, made now if there is none.
// One goroutine uses a client: a connection it replaces is idle.
func (cl *nsClient) streams() (*tern.Streams, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	home := cl.c.Nodes[cl.home]
	if cl.nc != nil && !cl.nc.IsClosed() {
		if cl.nc.ServerInfo().ServerName != home.Name && time.Since(cl.tried) > time.Second {
			cl.tried = time.Now()
			if nc, err := cl.dial(home.URL()); err == nil {
				cl.nc.Close()
				cl.nc, cl.js = nc, nc.Streams()
			}
		}
		return cl.js, nil
	}
	urls := []string{home.URL()}
	for i, n := range cl.c.Nodes {
		if i != cl.home {
			urls = append(urls, n.URL())
		}
	}
	cl.tried = time.Now()
	nc, err := cl.dial(strings.Join(urls, ","))
	if err != nil {
		return nil, err
	}
	cl.nc, cl.js = nc, nc.Streams()
	return cl.js, nil
}

// server is the name of the node the client is connected to, "" when it is not.
func (cl *nsClient) server() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.nc == nil || cl.nc.IsClosed() {
		return ""
	}
	return cl.nc.ServerInfo().ServerName
}

func (cl *nsClient) dial(urls string) (*tern.Conn, error) {
	var nc *tern.Conn
	err := cl.c.Nodes[cl.home].In(func() error {
		var err error
		nc, err = tern.Connect(urls, tern.NoReconnect(), tern.Timeout(time.Second), tern.Name("nemesis-"+cl.name))
		return err
	})
	return nc, err
}

// nemWorkload is what the producer, the consumer and the ack floors' reader saw.
type nemWorkload struct {
	t *testing.T
	r *nemesis

	mu          sync.Mutex
	published   map[string]partSeq        // id → where its publish was acknowledged
	total       int                       // ids published once the producer is done, -1 before
	pubErr      error                     // why the producer gave up
	got         map[partSeq]string        // the id delivered from each position
	consumed    map[partSeq]int           // confirmed acks
	confirmedAt map[partSeq]time.Duration // when each position's first ack was confirmed
	unsure      map[partSeq]bool          // acked without a confirmation (it may or may not count)
	ackedAs     map[partSeq]delivery      // the delivery whose ack was first confirmed
	again       []string                  // deliveries after a confirmed ack, described
	inFlight    int                       // deliveries after a confirmed ack sent before it
	samples     []ackSample
}

// produce publishes n-0, n-1, … until stopped, each until it is acknowledged:
// under the same id each time, so that a retry of a publish that was stored is
// answered as its duplicate. Keys spread the ids over the partitions.
func (w *nemWorkload) produce(ctx context.Context, cl *nsClient, pace *rand.Rand, stop <-chan struct{}) {
	n := 0
	defer func() {
		w.mu.Lock()
		w.total = n
		w.mu.Unlock()
	}()
	for ; n < nemMaxMsgs; n++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("n-%d", n)
		for attempt := 1; ; attempt++ {
			js, err := cl.streams()
			if err == nil {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				var ack *tern.PubAck
				ack, err = js.Publish(pctx, "nem.x", []byte(id), tern.MsgID(id), tern.Key(fmt.Sprint("k", n%8)))
				pcancel()
				if err == nil {
					w.mu.Lock()
					w.published[id] = partSeq{ack.Partition, ack.Seq}
					w.mu.Unlock()
					break
				}
			}
			if ctx.Err() != nil || attempt == 10_000 {
				w.mu.Lock()
				w.pubErr = fmt.Errorf("publishing %s, attempt %d: %w", id, attempt, err)
				w.mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(pace.IntN(5)) * time.Millisecond)
	}
}

// progress is how many messages were published and acknowledged so far.
func (w *nemWorkload) progress() (published, acked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.published), len(w.consumed) + len(w.unsure)
}

// allAcked reports whether the producer is done and the consumer acknowledged as
// many messages as it published (some perhaps without a confirmation).
func (w *nemWorkload) allAcked() (total int, done bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total, w.total >= 0 && len(w.consumed)+len(w.unsure) >= w.total
}

// consume fetches and acknowledges, one AckSync at a time, until every message
// published was acknowledged and the consumer's position says so (an ack that was
// lost brings its message again).
//
// A message must not be delivered again once its ack is confirmed (committed), but
// a delivery the consumer made before that may arrive after it: the consumer sends
// a message again when its ack wait ends, and the ack of the first copy may be on
// its way then (or that copy itself, held up with a node paused or cut off). So
// each fetch is a pull request on a subscription of its own, closed after it: a
// delivery comes for the request it answers, and one that answers a request made
// after the message's ack was confirmed was sent after the ack was committed,
// which is a lost ack. One answering an earlier request is only counted.
func (w *nemWorkload) consume(ctx context.Context, cl *nsClient) {
	for range 1_000_000 {
		if ctx.Err() != nil {
			return
		}
		js, err := cl.streams()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if total, done := w.allAcked(); done {
			ictx, icancel := context.WithTimeout(ctx, time.Second)
			ci, err := js.ConsumerInfo(ictx, "NEM", "C")
			icancel()
			if err == nil && sumFloors(ci) == uint64(total) && ci.NumAckPending == 0 {
				return
			}
		}
		pull := js.Pull("NEM", "C")
		asked := w.r.since()
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		msgs, _ := pull.Fetch(fctx, 20)
		fcancel()
		for _, m := range msgs {
			md, err := m.Metadata()
			if err != nil {
				w.t.Errorf("metadata: %v", err)
				continue
			}
			at := partSeq{md.Partition, md.StreamSeq}
			d := delivery{consumerSeq: md.ConsumerSeq, deliveries: md.Deliveries, asked: asked, got: w.r.since(),
				via: cl.server()}
			w.mu.Lock()
			if prev, ok := w.got[at]; ok && prev != string(m.Data) {
				w.t.Errorf("%v delivered as %q and as %q", at, prev, m.Data)
			}
			w.got[at] = string(m.Data)
			if w.consumed[at] > 0 {
				if asked > w.confirmedAt[at] {
					w.again = append(w.again, fmt.Sprintf("%v %s, its ack confirmed at %v after %s",
						at, d, w.confirmedAt[at].Round(time.Millisecond), w.ackedAs[at]))
				} else {
					w.inFlight++
				}
			}
			w.mu.Unlock()
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			err = m.AckSync(actx)
			acancel()
			confirmed := w.r.since()
			w.mu.Lock()
			if err == nil {
				if w.consumed[at] == 0 {
					w.confirmedAt[at] = confirmed
					w.ackedAs[at] = d
				}
				w.consumed[at]++
				delete(w.unsure, at)
			} else if w.consumed[at] == 0 {
				w.unsure[at] = true
			}
			w.mu.Unlock()
		}
		_ = pull.Close() // what comes for this request from now on is dropped, and sent again
	}
}

// delivery is how the consumer got a message.
type delivery struct {
	consumerSeq, deliveries uint64        // from its metadata
	asked, got              time.Duration // its pull request made, it received (from the start of the round)
	via                     string        // the node the consumer was connected to
}

func (d delivery) String() string {
	return fmt.Sprintf("delivery %d (consumer sequence %d) asked for at %v, got at %v through %s",
		d.deliveries, d.consumerSeq, d.asked.Round(time.Millisecond), d.got.Round(time.Millisecond), d.via)
}

func sumFloors(ci *tern.ConsumerInfo) (sum uint64) {
	for _, p := range ci.Partitions {
		sum += p.AckFloor
	}
	return sum
}

// floorsOf is a consumer's ack floors by partition.
func floorsOf(ci *tern.ConsumerInfo) []uint64 {
	floors := make([]uint64, len(ci.Partitions))
	for _, p := range ci.Partitions {
		if p.Partition >= 0 && p.Partition < len(floors) {
			floors[p.Partition] = p.AckFloor
		}
	}
	return floors
}

// watchAcks reads the consumer's ack floors every 100 ms until stopped, marking
// the readings the cluster was quiet for from quietAfter before the call to
// the answer (checkAckFloors).
func (w *nemWorkload) watchAcks(cl *nsClient, stop <-chan struct{}) {
	for range 10_000 {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		js, err := cl.streams()
		if err != nil {
			continue
		}
		whole := time.Duration(w.r.whole.Load())
		call := w.r.since()
		ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
		ci, err := js.ConsumerInfo(ictx, "NEM", "C")
		icancel()
		ret := w.r.since()
		if err != nil {
			continue
		}
		s := ackSample{call: call, ret: ret, floors: floorsOf(ci),
			quiet: whole >= 0 && time.Duration(w.r.whole.Load()) == whole && call-whole >= quietAfter}
		w.mu.Lock()
		w.samples = append(w.samples, s)
		w.mu.Unlock()
	}
}

// check makes the round's checks of the stream and the consumer, once the
// producer and the consumer are done.
func (w *nemWorkload) check(admin *nsClient) {
	t := w.t
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pubErr != nil {
		t.Fatal(w.pubErr)
	}
	total := w.total
	t.Logf("%d messages published; the consumer confirmed %d acks, %d unconfirmed; %d readings of its ack floors",
		total, len(w.consumed), len(w.unsure), len(w.samples))
	if err := checkStored(w.published, total, nemParts, w.got); err != nil {
		t.Fatal(err)
	}
	perPart := make([]uint64, nemParts)
	for _, at := range w.published {
		perPart[at.part]++
	}
	var info *tern.StreamInfo
	w.r.c.WaitFor("the stream described after the faults", 20*time.Second, func() bool {
		js, err := admin.streams()
		if err != nil {
			return false
		}
		info, err = infoOf(js, "NEM")
		return err == nil
	})
	if info.State.Msgs != uint64(total) || len(info.State.Parts) != nemParts {
		t.Errorf("the stream holds %d messages in %d partitions, want %d in %d", info.State.Msgs, len(info.State.Parts), total, nemParts)
	}
	for p, ps := range info.State.Parts {
		if p < nemParts && ps.LastSeq != perPart[p] {
			t.Errorf("partition %d ends at %d, want %d", p, ps.LastSeq, perPart[p])
		}
	}
	if len(w.consumed)+len(w.unsure) != total {
		t.Errorf("the consumer acknowledged %d of %d messages (%d unconfirmed)", len(w.consumed)+len(w.unsure), total, len(w.unsure))
	}
	// Every message acknowledged, by the consumer's position too: its floors at the
	// ends of the partitions, nothing waiting for an ack.
	var last *tern.ConsumerInfo
	var lastErr error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if js, err := admin.streams(); err != nil {
			lastErr = err
		} else {
			ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
			last, lastErr = js.ConsumerInfo(ictx, "NEM", "C")
			icancel()
		}
		if lastErr == nil && last.NumAckPending == 0 && slices.Equal(floorsOf(last), perPart) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the consumer's position 20 s after the workload: %+v %v, want ack floors %v", last, lastErr, perPart)
			break
		}
	}
	if len(w.again) > 0 {
		t.Errorf("%d messages came again after a confirmed ack, for pull requests made after it:\n%s",
			len(w.again), strings.Join(w.again, "\n"))
	}
	if w.inFlight > 0 {
		t.Logf("%d deliveries came after the ack of their message was confirmed, for pull requests made before it", w.inFlight)
	}
	falls, err := checkAckFloors(w.samples, w.confirmedAt)
	quiet := 0
	for _, s := range w.samples {
		if s.quiet {
			quiet++
		}
	}
	if err != nil {
		t.Error(err)
	} else {
		t.Logf("ack floors: %d quiet readings of %d never below a confirmed ack; %d falls over unconfirmed acks", quiet, len(w.samples), falls)
	}
}

// run makes catalogue operations from one client until stop, one at a time. An
// operation without an answer counts as happening at any time after its call (its
// return is forever); a list that fails saw nothing and is left out.
func (h *catalogueHistory) run(client int, cl *nsClient, rng *rand.Rand, stop <-chan struct{}) {
	for range 5000 {
		select {
		case <-stop:
			return
		default:
		}
		js, err := cl.streams()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
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
