package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// node records what the broker forwards to another cluster node.
type node struct {
	mu  sync.Mutex
	got []string // subject|queues
	// counting: only count deliveries and the groups named (no strings built)
	counting bool
	n, nq    int
	excluded bool
}

func (n *node) Excluded() bool { return n.excluded }

func (n *node) Deliver(*Subscription, *Message) bool {
	panic("a Remote is given messages through DeliverRemote only")
}
func (n *node) Flush() {}
func (n *node) DeliverRemote(m *Message, queues []string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.counting {
		n.n++
		n.nq += len(queues)
		return true
	}
	n.got = append(n.got, string(m.Subject)+"|"+strings.Join(queues, ","))
	return true
}

func (n *node) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	got := n.got
	n.got = nil
	return got
}

func remoteSub(t *testing.T, b *Broker, n *node, subj, queue string, weight uint32) *Subscription {
	t.Helper()
	sub := &Subscription{Sink: n, Subject: subj, Queue: queue, Weight: weight}
	if err := b.Subscribe(sub); err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestRemoteGetsAMessageOnce: a node whose several subscriptions match gets the
// message once, and counts once among the matches.
func TestRemoteGetsAMessageOnce(t *testing.T) {
	b := New()
	local := &recorder{}
	n2 := &node{}
	subscribe(t, b, local, "orders.>", "")
	remoteSub(t, b, n2, "orders.*", "", 0)
	remoteSub(t, b, n2, "orders.eu", "", 0)
	remoteSub(t, b, n2, ">", "", 0)
	var p Batch
	if got := publish(b, &p, "orders.eu", "x"); got != 2 {
		t.Fatalf("matched %d, want 2 (one local subscriber, one node)", got)
	}
	if got := n2.take(); !slices.Equal(got, []string{"orders.eu|"}) {
		t.Fatalf("node got %q", got)
	}
	if local.count() != 1 {
		t.Fatalf("local subscriber got %d", local.count())
	}
}

// TestFromRouteIsNotForwarded: a message another node forwarded reaches local
// subscribers and never another node.
func TestFromRouteIsNotForwarded(t *testing.T) {
	b := New()
	local := &recorder{}
	n2 := &node{}
	subscribe(t, b, local, "a", "")
	remoteSub(t, b, n2, "a", "", 0)
	var p Batch
	if got := b.Publish(&p, &Message{Subject: []byte("a"), FromRoute: true}); got != 1 {
		t.Fatalf("matched %d, want the local subscriber only", got)
	}
	if got := n2.take(); len(got) != 0 {
		t.Fatalf("a forwarded message went on to another node: %q", got)
	}
	// No local subscriber: a message from a route matches nothing.
	if got := b.Publish(&p, &Message{Subject: []byte("b.c"), FromRoute: true}); got != 0 {
		t.Fatalf("matched %d", got)
	}
}

// TestQueueGroupPrefersLocalMembers: while the group has a local member, no message
// leaves the node; without one, nodes share the messages in proportion to their
// members.
func TestQueueGroupPrefersLocalMembers(t *testing.T) {
	b := New()
	local := &recorder{}
	n2, n3 := &node{}, &node{}
	ls := subscribe(t, b, local, "jobs", "workers")
	remoteSub(t, b, n2, "jobs", "workers", 3)
	remoteSub(t, b, n3, "jobs", "workers", 1)
	var p Batch
	for i := 0; i < 100; i++ {
		if got := publish(b, &p, "jobs", "x"); got != 1 {
			t.Fatalf("matched %d", got)
		}
	}
	if local.count() != 100 || len(n2.take())+len(n3.take()) != 0 {
		t.Fatalf("with a local member: local %d", local.count())
	}
	if err := b.Unsubscribe(ls); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4000; i++ {
		if got := publish(b, &p, "jobs", "x"); got != 1 {
			t.Fatalf("matched %d", got)
		}
	}
	got2, got3 := n2.take(), n3.take()
	if len(got2) != 3000 || len(got3) != 1000 {
		t.Fatalf("nodes with 3 and 1 members got %d and %d of 4000", len(got2), len(got3))
	}
	// An excluded node's members are passed over while others remain.
	n2.excluded = true
	for i := 0; i < 100; i++ {
		publish(b, &p, "jobs", "x")
	}
	if got2, got3 := n2.take(), n3.take(); len(got2) != 0 || len(got3) != 100 {
		t.Fatalf("with the 3-member node excluded: %d and %d of 100", len(got2), len(got3))
	}
	if got2[0] != "jobs|workers" {
		t.Fatalf("forwarded as %q, want the group named", got2[0])
	}
}

// TestPlainAndGroupToOneNode: a node with a plain subscriber that is also chosen for
// two groups gets the message once, naming both groups.
func TestPlainAndGroupToOneNode(t *testing.T) {
	b := New()
	n2 := &node{}
	remoteSub(t, b, n2, "a.*", "", 0)
	remoteSub(t, b, n2, "a.b", "g1", 2)
	remoteSub(t, b, n2, "a.>", "g2", 1)
	var p Batch
	if got := publish(b, &p, "a.b", "x"); got != 3 {
		t.Fatalf("matched %d, want the plain interest and two groups", got)
	}
	if got := n2.take(); !slices.Equal(got, []string{"a.b|g1,g2"}) {
		t.Fatalf("node got %q", got)
	}
	// The next message's targets start afresh.
	if got := publish(b, &p, "a.c", "x"); got != 2 {
		t.Fatalf("matched %d", got)
	}
	if got := n2.take(); !slices.Equal(got, []string{"a.c|g2"}) {
		t.Fatalf("node got %q", got)
	}
}

// TestFromRouteDeliversListedGroups: on the receiving node, only the groups the
// sender chose deliver, each to one local member; plain subscribers get it.
func TestFromRouteDeliversListedGroups(t *testing.T) {
	b := New()
	plain, g1a, g1b, g2 := &recorder{}, &recorder{}, &recorder{}, &recorder{}
	subscribe(t, b, plain, "a", "")
	subscribe(t, b, g1a, "a", "g1")
	subscribe(t, b, g1b, "a", "g1")
	subscribe(t, b, g2, "a", "g2")
	var p Batch
	for i := 0; i < 10; i++ {
		b.Publish(&p, &Message{Subject: []byte("a"), FromRoute: true, Queues: []string{"g1"}})
	}
	if plain.count() != 10 || g1a.count()+g1b.count() != 10 || g2.count() != 0 {
		t.Fatalf("plain %d, g1 %d+%d, g2 %d; want 10, 10 in all, 0", plain.count(), g1a.count(), g1b.count(), g2.count())
	}
}

// TestDeliverGroupToRemoteMember: a message restricted to one group (a push
// consumer's deliver group) whose only member is on another node goes there with the
// group named, and to no plain interest.
func TestDeliverGroupToRemoteMember(t *testing.T) {
	b := New()
	n2, n3 := &node{}, &node{}
	remoteSub(t, b, n2, "deliver.x", "dg", 1)
	remoteSub(t, b, n3, "deliver.x", "", 0)
	var p Batch
	if got := b.Publish(&p, &Message{Subject: []byte("s"), Route: []byte("deliver.x"), Group: "dg"}); got != 1 {
		t.Fatalf("matched %d", got)
	}
	if got := n2.take(); !slices.Equal(got, []string{"s|dg"}) {
		t.Fatalf("member's node got %q", got)
	}
	if got := n3.take(); len(got) != 0 {
		t.Fatalf("plain interest got a group-only message: %q", got)
	}
}

// TestRemoteDeliveryDoesNotAllocate: forwarding to nodes reuses the batch's scratch.
func TestRemoteDeliveryDoesNotAllocate(t *testing.T) {
	b := New()
	nodes := []*node{{counting: true}, {counting: true}, {counting: true}}
	for i, n := range nodes {
		remoteSub(t, b, n, "a.*", "", 0)
		remoteSub(t, b, n, "a.b", fmt.Sprintf("g%d", i), 1)
	}
	m := &Message{Subject: []byte("a.b")}
	var p Batch
	b.Publish(&p, m)
	allocs := testing.AllocsPerRun(200, func() { b.Publish(&p, m) })
	if allocs != 0 {
		t.Fatalf("%.1f allocations per publish to 3 nodes", allocs)
	}
	var sent, groups int
	for _, n := range nodes {
		sent, groups = sent+n.n, groups+n.nq
	}
	// One publish before, AllocsPerRun's warm-up, and its 200 runs.
	if runs := 1 + 1 + 200; sent != 3*runs || groups != 3*runs {
		t.Fatalf("%d deliveries naming %d groups over %d publishes to 3 nodes; want each node once, each group once", sent, groups, runs)
	}
}

type interestLog struct {
	mu  sync.Mutex
	got []string
}

func (l *interestLog) Interest(subject, queue string, delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s/%s%+d", subject, queue, delta))
}

// TestObserverSeesLocalInterest: the observer learns of local subscriptions coming
// and going (also by reaching a message limit), and of no Remote's.
func TestObserverSeesLocalInterest(t *testing.T) {
	b := New()
	log := &interestLog{}
	if err := b.SetObserver(log); err != nil {
		t.Fatal(err)
	}
	a := subscribe(t, b, &recorder{}, "a.*", "")
	subscribe(t, b, &recorder{}, "jobs", "w")
	remoteSub(t, b, &node{counting: true}, "b", "", 0)
	if err := b.Subscribe(&Subscription{Sink: &recorder{}, Subject: "$SVC.>", NodeLocal: true}); err != nil {
		t.Fatal(err)
	}
	limited := subscribe(t, b, &recorder{}, "once", "")
	if err := b.AutoUnsubscribe(limited, 1); err != nil {
		t.Fatal(err)
	}
	var p Batch
	publish(b, &p, "once", "x")
	publish(b, &p, "once", "x")
	if err := b.Unsubscribe(a); err != nil {
		t.Fatal(err)
	}
	if err := b.Unsubscribe(a); err != nil { // again: no second report
		t.Fatal(err)
	}
	want := []string{"a.*/+1", "jobs/w+1", "once/+1", "once/-1", "a.*/-1"}
	if !slices.Equal(log.got, want) {
		t.Fatalf("observed %q, want %q", log.got, want)
	}
	if err := New().SetObserver(log); err != nil {
		t.Fatal(err)
	}
	if err := b.SetObserver(log); !errors.Is(err, ErrObserverLate) {
		t.Fatalf("observer set after subscriptions: %v", err)
	}
}
