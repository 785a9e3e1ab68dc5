package clustertest_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/netns"
)

// The partition tests run three nodes, each in a network namespace of its own,
// joined by a bridge, and cut links with iptables (this kernel has no netem). They
// need root; TERN_NO_NETNS=1 skips them on machines that cannot create namespaces.

// Bounds the partition tests hold the cluster to.
const (
	// staleBound: a route that hears nothing from its peer while membership still
	// believes the peer alive is closed, and the peer's interest purged, within
	// this (route.Config.StaleAfter plus a ping interval, and slack).
	staleBound = 4 * time.Second
	// healBound: once a cut is removed, routes and interest are back within this
	// (a dial pending behind a dropped SYN is retried by the kernel after 1 and
	// 3 s, and the redial backoff is at most 2 s).
	healBound = 10 * time.Second
)

// partitionRig is the cluster of the partition tests and its traffic: a
// publisher on n1 sending without pause, queue-group members on n2 and n3 and a
// plain subscriber on each of them.
type partitionRig struct {
	t   *testing.T
	br  *netns.Bridge
	c   *clustertest.Cluster
	rec *tally

	published atomic.Uint64 // messages handed to the publisher's connection
	stop      chan struct{}
	pubDone   chan error
}

const partSubject, partGroup = "part.work", "workers"

func TestPartitions(t *testing.T) {
	skipWithoutNetns(t)
	br, err := netns.NewBridge("tern-clu", 195, 3)
	if err != nil {
		t.Fatalf("%v (TERN_NO_NETNS=1 skips these tests)", err)
	}
	t.Cleanup(br.Close) // after the nodes are killed: cleanups run last-in first-out
	r := &partitionRig{t: t, br: br, rec: newTally(), stop: make(chan struct{}), pubDone: make(chan error, 1)}
	r.c = clustertest.Start(t, clustertest.Options{N: 3, Bridge: br})
	n1, n2, n3 := r.node(1), r.node(2), r.node(3)
	c2, c3 := n2.Connect(t, n2.URL()), n3.Connect(t, n3.URL())
	for _, s := range []struct {
		nc   *tern.Conn
		name string
	}{{c2, "q2"}, {c3, "q3"}} {
		if _, err := s.nc.QueueSubscribe(partSubject, partGroup, r.rec.handler(s.name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c2.Subscribe(partSubject, r.rec.handler("plain2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Subscribe(partSubject, r.rec.handler("plain3")); err != nil {
		t.Fatal(err)
	}
	r.c.WaitFor("interest of n2 and n3 at n1", 5*time.Second, func() bool {
		return interestFrom(n1, "n2") == 2 && interestFrom(n1, "n3") == 2
	})
	pub := n1.Connect(t, n1.URL())
	go r.publish(pub)
	defer r.finish()

	// One round of the three in the suite; make soak runs more rounds in a seeded
	// order on the same cluster, which also checks that cuts and heals repeated
	// leave nothing behind.
	phases := []struct {
		name string
		run  func(*testing.T)
	}{{"OneLinkCut", r.oneLinkCut}, {"NodeOff", r.nodeOff}, {"OneWay", r.oneWay}}
	for round := uint64(1); round <= seeds(); round++ {
		order := []int{0, 1, 2}
		if round > 1 {
			order = rand.New(rand.NewPCG(round, 15)).Perm(3)
		}
		for _, i := range order {
			name := phases[i].name
			if seeds() > 1 {
				name = fmt.Sprintf("round%d/%s", round, name)
			}
			if !t.Run(name, func(t *testing.T) {
				t.Cleanup(func() { _ = br.Heal() }) // a failed phase leaves no cut for the next
				phases[i].run(t)
			}) {
				return
			}
		}
	}
}

func (r *partitionRig) node(i int) *clustertest.Node { return r.c.Nodes[i-1] }

// publish sends two messages a millisecond until stopped: at most two minutes'
// worth a round, so that the last round's heal still has traffic to wait for.
func (r *partitionRig) publish(pub *tern.Conn) {
	buf := make([]byte, 0, 16)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for seq, limit := uint64(0), 240_000*seeds(); seq < limit; {
		select {
		case <-r.stop:
			r.pubDone <- pub.Flush()
			return
		case <-tick.C:
		}
		for k := 0; k < 2; k++ {
			if err := pub.Publish(partSubject, seqMsg(seq, buf)); err != nil {
				r.pubDone <- err
				return
			}
			seq++
			r.published.Store(seq)
		}
	}
	r.pubDone <- pub.Flush()
}

// finish stops the publisher and checks what held throughout: n2 got every
// message once (n1→n2 was never cut), and the queue group never got one twice.
func (r *partitionRig) finish() {
	t := r.t
	close(r.stop)
	if err := <-r.pubDone; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	total := r.published.Load()
	clustertest.WaitFor(t, "n2's plain subscriber to get every message", 10*time.Second,
		func() bool { return uint64(r.rec.count("plain2")) == total })
	time.Sleep(100 * time.Millisecond)
	r.checkGroup()
	for seq := uint64(0); seq < total; seq++ {
		if k := r.rec.got("plain2", seq); k != 1 {
			t.Fatalf("n2's plain subscriber got message %d %d times", seq, k)
		}
	}
	t.Logf("%d messages published; n2's plain subscriber got all once, n3's %d; queue group n2 %d, n3 %d, never twice",
		total, r.rec.count("plain3"), r.rec.count("q2"), r.rec.count("q3"))
}

func (r *partitionRig) checkGroup() {
	r.t.Helper()
	if d := r.rec.dupes("q2", "q3"); len(d) > 0 {
		r.t.Fatalf("queue group got messages more than once: %v", d)
	}
}

// allToN2 checks that every message published in [from, to) reached n2's group
// member: n1 held no interest of n3 meanwhile.
func (r *partitionRig) allToN2(t *testing.T, from, to uint64) {
	t.Helper()
	clustertest.WaitFor(t, "n2 to catch up", 5*time.Second, func() bool {
		return r.rec.got("plain2", to-1) == 1
	})
	time.Sleep(20 * time.Millisecond)
	for seq := from; seq < to; seq++ {
		if k := r.rec.got("q2", seq); k != 1 {
			t.Fatalf("message %d, published while n1 held no interest of n3, reached n2's group member %d times (n3's: %d)",
				seq, k, r.rec.got("q3", seq))
		}
	}
}

// lostInGroup counts the messages of [from, to) that no group member got: those
// n1 gave the route to n3 while it carried nothing.
func (r *partitionRig) lostInGroup(from, to uint64) int {
	lost := 0
	for seq := from; seq < to; seq++ {
		if r.rec.got("q2", seq)+r.rec.got("q3", seq) == 0 {
			lost++
		}
	}
	return lost
}

// views describes what each node believes: members alive and routes.
func (r *partitionRig) views() string {
	var b strings.Builder
	for _, n := range r.c.Nodes {
		st, err := n.Status()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", n.Name, err)
			continue
		}
		var alive, routes []string
		for _, m := range st.Members {
			alive = append(alive, m.Name)
		}
		for _, rt := range st.Routes {
			routes = append(routes, fmt.Sprintf("%s(%d)", rt.Node, rt.Interest))
		}
		fmt.Fprintf(&b, "%s alive %v routes %v; ", n.Name, alive, routes)
	}
	return b.String()
}

// deaths watches every node's member list and records each time a node stops
// believing another alive.
type deaths struct {
	mu     sync.Mutex
	seen   []string
	once   sync.Once
	stop   chan struct{}
	done   chan struct{}
	prefix time.Time
}

func (r *partitionRig) watchDeaths() *deaths {
	d := &deaths{stop: make(chan struct{}), done: make(chan struct{}), prefix: time.Now()}
	go func() {
		defer close(d.done)
		reported := map[string]bool{}
		for {
			select {
			case <-d.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, n := range r.c.Nodes {
				st, err := n.Status()
				if err != nil {
					continue
				}
				for _, p := range r.c.Nodes {
					key := n.Name + " → " + p.Name
					if p != n && !clustertest.Alive(st, p.Name) && !reported[key] {
						reported[key] = true
						d.mu.Lock()
						d.seen = append(d.seen, fmt.Sprintf("%s declared %s dead after %v", n.Name, p.Name, time.Since(d.prefix).Round(time.Millisecond)))
						d.mu.Unlock()
					}
				}
			}
		}
	}()
	return d
}

func (d *deaths) end() []string {
	d.once.Do(func() { close(d.stop) })
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen
}

// heal removes the cuts and waits until the mesh and n3's interest at n1 are back.
func (r *partitionRig) heal(t *testing.T) {
	t.Helper()
	if err := r.br.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	n1 := r.node(1)
	r.c.WaitFor("the mesh and n3's interest at n1 after the cut was removed", healBound, func() bool {
		return r.c.MeshOf(r.c.Nodes...) && interestFrom(n1, "n3") == 2
	})
	back := r.published.Load()
	clustertest.WaitFor(t, "n3 to receive from n1 again", 5*time.Second, func() bool {
		return r.rec.got("plain3", back+10) == 1
	})
	t.Logf("healed: mesh, interest and delivery to n3 back %v after the cut was removed", time.Since(healed).Round(time.Millisecond))
	r.checkGroup()
}

// oneLinkCut cuts n1↔n3 both ways. n2 still reaches both, so membership's indirect
// probes keep everyone alive, but the route n1↔n3 carries nothing: each end must
// close it and purge the other's interest (or n1's messages for n3 would be lost
// in a dead connection and its queue-group members would be picked for messages
// they never get), and n1's messages for the group go to n2. Routes are one hop:
// n3's subscribers get nothing from n1 until the link is back.
func (r *partitionRig) oneLinkCut(t *testing.T) {
	n1, n3 := r.node(1), r.node(3)
	d := r.watchDeaths()
	defer d.end()
	cutSeq := r.published.Load()
	if err := r.br.Cut(0, 2); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	purged1, stop1 := watch(func() bool { return noRoute(n1, "n3") })
	purged3, stop3 := watch(func() bool { return noRoute(n3, "n1") })
	defer stop1()
	defer stop3()
	clustertest.WaitFor(t, "n1 and n3 to close their route", staleBound, func() bool {
		return !purged1().IsZero() && !purged3().IsZero()
	})
	from := r.published.Load()
	t.Logf("cut n1↔n3: route closed and interest purged at n1 after %v, at n3 after %v",
		purged1().Sub(cut).Round(time.Millisecond), purged3().Sub(cut).Round(time.Millisecond))
	// Membership gets two more seconds to make up its mind.
	time.Sleep(2 * time.Second)
	to := r.published.Load()
	view := r.views()
	if seen := d.end(); len(seen) > 0 {
		t.Errorf("membership declared nodes dead although n2 reaches both sides: %v", seen)
	}
	if hasRoute(n1, "n3") || hasRoute(n3, "n1") {
		t.Errorf("a route n1↔n3 is up through the cut: %s", view)
	}
	t.Logf("during the cut: %s", view)
	r.allToN2(t, from, to)
	r.checkGroup()
	t.Logf("queue-group messages lost until n1 closed the route: %d of %d", r.lostInGroup(cutSeq, from), from-cutSeq)
	r.heal(t)
}

// nodeOff cuts n3 off from both others: they declare it dead within the documented
// time and purge its interest; n3 likewise. Once the cut is gone, n3 rejoins and
// the routes and interest come back.
func (r *partitionRig) nodeOff(t *testing.T) {
	n1, n2 := r.node(1), r.node(2)
	cutSeq := r.published.Load()
	if err := r.br.Isolate(2); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	dead1, stop1 := watch(func() bool { return notAlive(n1, "n3") })
	dead2, stop2 := watch(func() bool { return notAlive(n2, "n3") })
	defer stop1()
	defer stop2()
	clustertest.WaitFor(t, "n1 and n2 to declare n3 dead", 3*deathBound, func() bool {
		return !dead1().IsZero() && !dead2().IsZero()
	})
	t1, t2 := dead1().Sub(cut), dead2().Sub(cut)
	t.Logf("n3 cut off: declared dead by n1 after %v, by n2 after %v", t1.Round(time.Millisecond), t2.Round(time.Millisecond))
	if t1 > deathBound || t2 > deathBound {
		t.Errorf("n3 declared dead after %v (n1) and %v (n2), want within %v", t1, t2, deathBound)
	}
	if interestFrom(n1, "n3") != -1 || interestFrom(n2, "n3") != -1 {
		t.Errorf("n3's route or interest outlived its death: %s", r.views())
	}
	from := r.published.Load()
	clustertest.WaitFor(t, "n3 to declare n1 and n2 dead", 3*deathBound, func() bool {
		st, err := r.node(3).Status()
		return err == nil && len(st.Members) == 1 && len(st.Routes) == 0
	})
	time.Sleep(500 * time.Millisecond)
	to := r.published.Load()
	t.Logf("during the cut: %s", r.views())
	r.allToN2(t, from, to)
	r.checkGroup()
	t.Logf("queue-group messages lost until n3 was declared dead: %d of %d", r.lostInGroup(cutSeq, from), from-cutSeq)
	r.heal(t)
}

// oneWay drops what n1 sends n3 but lets n3's packets reach n1. Membership
// confirms each through n2. Neither TCP direction of the route works (n3's data
// reaches n1 but n1's acknowledgements do not reach n3), so the route must go as
// in oneLinkCut; this reports what else happens.
func (r *partitionRig) oneWay(t *testing.T) {
	n1, n3 := r.node(1), r.node(3)
	d := r.watchDeaths()
	defer d.end()
	cutSeq := r.published.Load()
	if err := r.br.CutOneWay(0, 2); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	purged1, stop1 := watch(func() bool { return noRoute(n1, "n3") })
	purged3, stop3 := watch(func() bool { return noRoute(n3, "n1") })
	defer stop1()
	defer stop3()
	clustertest.WaitFor(t, "n1 to purge n3's interest", staleBound, func() bool { return !purged1().IsZero() })
	from := r.published.Load()
	time.Sleep(2 * time.Second)
	to := r.published.Load()
	view := r.views()
	seen := d.end()
	t.Logf("n1→n3 dropped: route gone at n1 after %v, at n3 after %v; deaths declared: %v; then %s",
		since(purged1(), cut), since(purged3(), cut), seen, view)
	if len(seen) > 0 {
		t.Errorf("membership declared nodes dead although n2 reaches both: %v", seen)
	}
	if hasRoute(n1, "n3") {
		t.Errorf("n1 has a route to n3 through a one-way cut: %s", view)
	}
	r.allToN2(t, from, to)
	r.checkGroup()
	t.Logf("queue-group messages lost until n1 closed the route: %d of %d", r.lostInGroup(cutSeq, from), from-cutSeq)
	r.heal(t)
}
