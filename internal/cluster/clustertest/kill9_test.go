package clustertest_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// TestKill9UnderLoad kills one node of three with SIGKILL while a publisher on
// another sends continuously to queue-group members and plain subscribers on the
// other two, and clients connected to the victim with every node's URL.
func TestKill9UnderLoad(t *testing.T) {
	for seed := uint64(1); seed <= seeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { kill9Round(t, seed) })
	}
}

func kill9Round(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 15))
	c := clustertest.Start(t, clustertest.Options{N: 3})
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	const subject, group = "load.work", "workers"
	rec := newTally()

	pub := n1.Connect(t, n1.URL())
	c2 := n2.Connect(t, n2.URL())
	c3 := n3.Connect(t, n3.URL(), tern.NoReconnect())
	for _, s := range []struct {
		nc   *tern.Conn
		name string
	}{{c2, "q2"}, {c3, "q3"}} {
		if _, err := s.nc.QueueSubscribe(subject, group, rec.handler(s.name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c2.Subscribe(subject, rec.handler("plain2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Subscribe(subject, rec.handler("plain3")); err != nil {
		t.Fatal(err)
	}
	// Clients of the victim that know every node: one with the client's default
	// reconnect timing, one that retries at once.
	all := n3.URL() + "," + n1.URL() + "," + n2.URL()
	roamers := []struct {
		name string
		opts []tern.Option
	}{
		{"roam-default", nil},
		{"roam-eager", []tern.Option{tern.ReconnectWait(2 * time.Millisecond)}},
	}
	for _, r := range roamers {
		nc := n3.Connect(t, all, r.opts...)
		if _, err := nc.Subscribe(subject, rec.handler(r.name)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := nc.ConnectedURL(); got != n3.URL() {
			t.Fatalf("%s connected to %s, want %s", r.name, got, n3.URL())
		}
	}
	c.WaitFor("interest of n2 and n3 at n1", 5*time.Second, func() bool {
		return interestFrom(n1, "n2") == 2 && interestFrom(n1, "n3") == 2
	})

	// The publisher: 5 messages a millisecond, every publish time kept.
	const rate, total = 5, 15_000
	sent := make([]int64, total)
	var published atomic.Uint64
	var purgedSeq atomic.Uint64 // first seq published after n1 was seen without n3
	purgedSeq.Store(total)
	var purgeSeen atomic.Bool
	pubDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 0, 16)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for seq := uint64(0); seq < total; {
			<-tick.C
			for k := 0; k < rate && seq < total; k++ {
				if purgeSeen.Load() && purgedSeq.Load() == total {
					purgedSeq.Store(seq)
				}
				sent[seq] = time.Now().UnixNano()
				if err := pub.Publish(subject, seqMsg(seq, buf)); err != nil {
					pubDone <- err
					return
				}
				published.Store(seq + 1)
				seq++
			}
		}
		pubDone <- pub.Flush()
	}()

	killAfter := 600*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
	time.Sleep(killAfter)
	routeGone1, stop1 := watch(func() bool { return noRoute(n1, "n3") })
	routeGone2, stop2 := watch(func() bool { return noRoute(n2, "n3") })
	dead1, stop3 := watch(func() bool { return notAlive(n1, "n3") })
	dead2, stop4 := watch(func() bool { return notAlive(n2, "n3") })
	defer func() { stop1(); stop2(); stop3(); stop4() }()
	killedAt := time.Now()
	n3.Kill()
	killSeq := published.Load()
	seen := make(chan struct{})
	defer close(seen)
	go func() {
		for routeGone1().IsZero() {
			select {
			case <-seen:
				return
			case <-time.After(time.Millisecond):
			}
		}
		purgeSeen.Store(true)
	}()

	if err := <-pubDone; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	c.WaitFor("n2's plain subscriber to get every message", 10*time.Second, func() bool { return rec.count("plain2") == total })
	c.WaitFor("n3 declared dead by n1 and n2", 5*time.Second, func() bool { return !dead1().IsZero() && !dead2().IsZero() })
	time.Sleep(100 * time.Millisecond) // anything still on its way

	gone1, gone2 := routeGone1().Sub(killedAt), routeGone2().Sub(killedAt)
	t.Logf("seed %d: killed n3 %v into the run at seq %d; route and interest gone at n1 after %v, at n2 after %v; declared dead by n1 after %v, by n2 after %v",
		seed, killAfter, killSeq, gone1, gone2, dead1().Sub(killedAt), dead2().Sub(killedAt))
	if routeGone1().IsZero() || gone1 > time.Second || routeGone2().IsZero() || gone2 > time.Second {
		t.Errorf("routes to the killed node closed after %v (n1) and %v (n2), want within 1s: the kernel resets its connections at once", gone1, gone2)
	}
	for _, d := range []time.Duration{dead1().Sub(killedAt), dead2().Sub(killedAt)} {
		if d > deathBound {
			t.Errorf("n3 declared dead after %v, want within %v", d, deathBound)
		}
	}
	if i1, i2 := interestFrom(n1, "n3"), interestFrom(n2, "n3"); i1 != -1 || i2 != -1 {
		t.Errorf("n1 or n2 holds a route to n3 again (interest %d, %d)", i1, i2)
	}

	// n1 → n2 was never disturbed: every message, once.
	for seq := uint64(0); seq < total; seq++ {
		if k := rec.got("plain2", seq); k != 1 {
			t.Fatalf("n2's plain subscriber got message %d %d times", seq, k)
		}
	}
	// The queue group: never twice; once n1 has dropped n3, everything to n2.
	if d := rec.dupes("q2", "q3"); len(d) > 0 {
		t.Fatalf("queue group got messages more than once: %v", d)
	}
	from := purgedSeq.Load()
	if from == total {
		t.Fatalf("the publisher finished before n1 was seen without n3")
	}
	var lost, lostBeforeKill int
	for seq := uint64(0); seq < total; seq++ {
		switch k2, k3 := rec.got("q2", seq), rec.got("q3", seq); {
		case seq >= from && k2 != 1:
			t.Fatalf("message %d, published after n1 dropped n3's interest, reached n2's group member %d times", seq, k2)
		case k2+k3 == 0:
			lost++
			if seq < killSeq {
				lostBeforeKill++
			}
		}
	}
	// Those lost were given to n3 and died with it (core messages are at most
	// once), before the kill or in the moment before n1 saw its route close.
	t.Logf("queue group: n2 %d, n3 %d, none %d of %d (%d of those published before the kill); from message %d on all to n2",
		rec.count("q2"), rec.count("q3"), lost, total, lostBeforeKill, from)

	// The victim's clients moved to another node and receive again.
	for _, r := range roamers {
		if d := rec.dupes(r.name); len(d) > 0 {
			t.Fatalf("%s got messages more than once: %v", r.name, d)
		}
		// Messages published after the kill can only come through the new
		// connection: the first of them to arrive is when delivery resumed.
		firstSeq := uint64(total)
		for seq := killSeq; seq < total; seq++ {
			if time.Unix(0, sent[seq]).After(killedAt) && rec.got(r.name, seq) > 0 {
				firstSeq = seq
				break
			}
		}
		if firstSeq == total {
			t.Fatalf("%s received nothing after n3 was killed", r.name)
		}
		back := rec.when(r.name, firstSeq).Sub(killedAt)
		missing := 0
		for seq := firstSeq; seq < total; seq++ {
			if rec.got(r.name, seq) == 0 {
				missing++
			}
		}
		t.Logf("%s: receiving again %v after the kill (from message %d, published %v after it; %d missing from then on)",
			r.name, back.Round(time.Millisecond), firstSeq, time.Unix(0, sent[firstSeq]).Sub(killedAt).Round(time.Millisecond), missing)
		if missing > 0 {
			t.Errorf("%s missed %d messages once it was receiving again", r.name, missing)
		}
		if back > 2*time.Second {
			t.Errorf("%s took %v to receive again after the kill", r.name, back)
		}
	}
}
