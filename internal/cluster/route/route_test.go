package route

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/wire"
)

// testNode is one node of an in-process cluster on loopback: a broker, its interest
// count and a route manager on a real socket.
type testNode struct {
	name string
	b    *broker.Broker
	m    *Manager
	addr string
}

func startNode(t *testing.T, cluster, name string) *testNode {
	t.Helper()
	return startNodeWithID(t, cluster, name, name+"-id")
}

func startNodeWithID(t *testing.T, cluster, name, id string, clientURLs ...string) *testNode {
	t.Helper()
	return startNodeWith(t, cluster, name, id, func(c *Config) { c.Hello.ClientURLs = clientURLs })
}

// startNodeWith starts a node after letting mutate (which may be nil) adjust its
// configuration.
func startNodeWith(t *testing.T, cluster, name, id string, mutate func(*Config)) *testNode {
	t.Helper()
	b := broker.New()
	local := interest.NewLocal()
	if err := b.SetObserver(local); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Hello:  wire.RouteHello{Cluster: cluster, NodeName: name, NodeID: id, RouteAddr: ln.Addr().String()},
		Broker: b, Local: local, Lease: 600 * time.Millisecond, PingInterval: 50 * time.Millisecond,
		// A backlog exclusion that the tests' loads pass at once, so that they
		// do not hang on a loaded machine's timing of the no-progress one.
		ExcludeBacklog: 4 << 20,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.Serve(ln) }()
	t.Cleanup(m.Shutdown)
	return &testNode{name: name, b: b, m: m, addr: ln.Addr().String()}
}

// mesh tells every node of every other, as membership would.
func mesh(nodes ...*testNode) {
	for _, n := range nodes {
		for _, o := range nodes {
			n.m.Want(o.name, o.addr)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: under the race detector, beside other packages' tests on two
	// CPUs, 20 MiB through a route has taken over 10 s.
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// inbox is a local subscriber.
type inbox struct {
	mu   sync.Mutex
	msgs []broker.Message
}

func (in *inbox) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := broker.Message{Subject: append([]byte(nil), m.Subject...), Reply: append([]byte(nil), m.Reply...),
		Payload: append([]byte(nil), m.Payload...), Header: append([]byte(nil), m.Header...), QoS: m.QoS, Retain: m.Retain}
	in.msgs = append(in.msgs, c)
	return true
}
func (in *inbox) Flush() {}
func (in *inbox) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.msgs)
}

func subscribe(t *testing.T, n *testNode, s broker.Sink, subj, queue string) *broker.Subscription {
	t.Helper()
	sub := &broker.Subscription{Sink: s, Subject: subj, Queue: queue}
	if err := n.b.Subscribe(sub); err != nil {
		t.Fatal(err)
	}
	return sub
}

func publish(n *testNode, m *broker.Message) int {
	var p broker.Batch
	got := n.b.Publish(&p, m)
	p.Flush()
	return got
}

// interestOf reports how many interest entries node n holds from peer.
func interestOf(n *testNode, peer string) int {
	for _, in := range n.m.Routes() {
		if in.Node == peer {
			return in.Interest
		}
	}
	return -1
}

func TestMessagesCrossNodesOnce(t *testing.T) {
	a, b, c := startNode(t, "t", "a"), startNode(t, "t", "b"), startNode(t, "t", "c")
	mesh(a, b, c)
	waitFor(t, "full mesh", func() bool { return len(a.m.Routes()) == 2 && len(b.m.Routes()) == 2 && len(c.m.Routes()) == 2 })

	onB := &inbox{}
	subscribe(t, b, onB, "orders.>", "")
	subscribe(t, b, onB, "orders.eu", "")
	waitFor(t, "b's interest at a", func() bool { return interestOf(a, "b") == 2 })
	hdr := []byte("k: v\r\n")
	if got := publish(a, &broker.Message{Subject: []byte("orders.eu"), Reply: []byte("_INBOX.1"), Header: hdr, Payload: []byte("hello"), QoS: 1}); got != 1 {
		t.Fatalf("matched %d, want node b once", got)
	}
	waitFor(t, "delivery on b", func() bool { return onB.count() == 2 }) // two local subscriptions on b
	onB.mu.Lock()
	m := onB.msgs[0]
	onB.mu.Unlock()
	if string(m.Payload) != "hello" || string(m.Reply) != "_INBOX.1" || string(m.Header) != string(hdr) || m.QoS != 1 {
		t.Fatalf("b got %+v", m)
	}
	if got := publish(a, &broker.Message{Subject: []byte("other")}); got != 0 {
		t.Fatalf("a subject nobody wants matched %d", got)
	}
	// c has no interest: nothing went there.
	for _, in := range a.m.Routes() {
		if in.Node == "c" && in.OutMsgs != 0 {
			t.Fatalf("a forwarded %d messages to c, which wants none", in.OutMsgs)
		}
	}
}

func TestQueueGroupAcrossNodes(t *testing.T) {
	a, b, c := startNode(t, "t", "a"), startNode(t, "t", "b"), startNode(t, "t", "c")
	mesh(a, b, c)
	wb, wc1, wc2 := &inbox{}, &inbox{}, &inbox{}
	subscribe(t, b, wb, "jobs", "workers")
	subscribe(t, c, wc1, "jobs", "workers")
	subscribe(t, c, wc2, "jobs", "workers")
	waitFor(t, "group interest at a", func() bool { return interestOf(a, "b") == 1 && interestOf(a, "c") == 1 })
	const n = 300
	for i := 0; i < n; i++ {
		if got := publish(a, &broker.Message{Subject: []byte("jobs"), Payload: []byte(fmt.Sprint(i))}); got != 1 {
			t.Fatalf("matched %d", got)
		}
	}
	waitFor(t, "every job once", func() bool { return wb.count()+wc1.count()+wc2.count() == n })
	// Spread by member count: c has two of the three members.
	if wb.count() != n/3 || wc1.count()+wc2.count() != 2*n/3 {
		t.Fatalf("b got %d, c got %d+%d of %d", wb.count(), wc1.count(), wc2.count(), n)
	}
	// A local member takes everything.
	wa := &inbox{}
	subscribe(t, a, wa, "jobs", "workers")
	for i := 0; i < 10; i++ {
		publish(a, &broker.Message{Subject: []byte("jobs")})
	}
	if wa.count() != 10 {
		t.Fatalf("local member got %d of 10", wa.count())
	}
	time.Sleep(50 * time.Millisecond)
	if wb.count()+wc1.count()+wc2.count() != n {
		t.Fatal("a message left the node although a local member was there")
	}
}

func TestRequestReplyAcrossNodes(t *testing.T) {
	a, c := startNode(t, "t", "a"), startNode(t, "t", "c")
	mesh(a, c)
	replies := &inbox{}
	subscribe(t, a, replies, "_INBOX.a.*", "")
	responder := &echo{n: c}
	subscribe(t, c, responder, "svc.echo", "")
	waitFor(t, "interest both ways", func() bool { return interestOf(a, "c") == 1 && interestOf(c, "a") == 1 })
	if got := publish(a, &broker.Message{Subject: []byte("svc.echo"), Reply: []byte("_INBOX.a.1"), Payload: []byte("ping")}); got != 1 {
		t.Fatalf("request matched %d", got)
	}
	waitFor(t, "reply", func() bool { return replies.count() == 1 })
	if got := string(replies.msgs[0].Payload); got != "re: ping" {
		t.Fatalf("reply %q", got)
	}
	// No responder anywhere: nothing matches, so the requester can be told at once.
	if got := publish(a, &broker.Message{Subject: []byte("svc.none"), Reply: []byte("_INBOX.a.2")}); got != 0 {
		t.Fatalf("request without responders matched %d", got)
	}
}

// echo answers requests on its node.
type echo struct{ n *testNode }

func (e *echo) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	reply := append([]byte(nil), m.Reply...)
	payload := append([]byte("re: "), m.Payload...)
	go publish(e.n, &broker.Message{Subject: reply, Payload: payload})
	return true
}
func (e *echo) Flush() {}

func TestInterestGoesWithTheNode(t *testing.T) {
	a, b := startNode(t, "t", "a"), startNode(t, "t", "b")
	mesh(a, b)
	onB := &inbox{}
	sub := subscribe(t, b, onB, "x", "")
	waitFor(t, "interest", func() bool { return interestOf(a, "b") == 1 })
	if err := b.b.Unsubscribe(sub); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "interest withdrawn", func() bool { return interestOf(a, "b") == 0 })
	subscribe(t, b, onB, "y", "")
	waitFor(t, "interest again", func() bool { return interestOf(a, "b") == 1 })
	// Membership says b is gone: its interest goes at once.
	a.m.Drop("b")
	if publish(a, &broker.Message{Subject: []byte("y")}) != 0 {
		t.Fatal("a dropped node's interest still matched")
	}
	// b shut down: a's route closes and the interest is gone.
	a.m.Want("b", b.addr)
	waitFor(t, "route back", func() bool { return interestOf(a, "b") == 1 })
	b.m.Shutdown()
	waitFor(t, "route gone", func() bool { return len(a.m.Routes()) == 0 })
	if publish(a, &broker.Message{Subject: []byte("y")}) != 0 {
		t.Fatal("a closed route's interest still matched")
	}
}

func TestFromRouteIsNotForwardedAgain(t *testing.T) {
	a, b, c := startNode(t, "t", "a"), startNode(t, "t", "b"), startNode(t, "t", "c")
	mesh(a, b, c)
	onB, onC := &inbox{}, &inbox{}
	subscribe(t, b, onB, "z", "")
	subscribe(t, c, onC, "z", "")
	waitFor(t, "interest", func() bool { return interestOf(a, "b") == 1 && interestOf(a, "c") == 1 && interestOf(b, "c") == 1 })
	publish(a, &broker.Message{Subject: []byte("z")})
	waitFor(t, "both", func() bool { return onB.count() == 1 && onC.count() == 1 })
	time.Sleep(50 * time.Millisecond)
	if onB.count() != 1 || onC.count() != 1 {
		t.Fatalf("b got %d, c got %d: a forwarded message went another hop", onB.count(), onC.count())
	}
}

func TestRefusesOtherClusterAndItself(t *testing.T) {
	a := startNode(t, "one", "a")
	other := startNode(t, "two", "b")
	twin := startNodeWithID(t, "one", "a", "another-id") // a's name, another process
	a.m.Want("b", other.addr)
	a.m.Want("a-twin", twin.addr)
	time.Sleep(300 * time.Millisecond)
	if n := len(a.m.Routes()) + len(other.m.Routes()) + len(twin.m.Routes()); n != 0 {
		t.Fatalf("%d routes up between nodes that must refuse each other", n)
	}
}

// TestLeaseExpiresSilentPeer: a peer whose refreshes stop loses its interest after
// the lease even though its route stays up (it still answers, so the route is not
// stale).
func TestLeaseExpiresSilentPeer(t *testing.T) {
	a := startNode(t, "t", "a")
	// A hand-made peer: handshake, one interest entry, then silence.
	nc, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out []byte
	out = wire.AppendRouteHello(out, &wire.RouteHello{Version: wire.Version, Cluster: "t", NodeName: "z", NodeID: "z-id"})
	out = wire.AppendRouteInterest(out, "quiet", "", 1)
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	go func() { // read and discard what a sends, answering so that a hears the peer
		buf := make([]byte, 4096)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
			if _, err := nc.Write(wire.AppendPong(nil)); err != nil {
				return
			}
		}
	}()
	waitFor(t, "interest", func() bool { return interestOf(a, "z") == 1 })
	waitFor(t, "lease expiry", func() bool { return interestOf(a, "z") == 0 })
	if publish(a, &broker.Message{Subject: []byte("quiet")}) != 0 {
		t.Fatal("expired interest still matched")
	}
}

// TestSilentRouteIsClosed: a route whose peer stops answering (a cut link, while
// membership still believes the peer alive) is closed after StaleAfter and the
// peer's interest goes with it, long before the lease would end it.
func TestSilentRouteIsClosed(t *testing.T) {
	a := startNode(t, "t", "a")
	nc, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out []byte
	out = wire.AppendRouteHello(out, &wire.RouteHello{Version: wire.Version, Cluster: "t", NodeName: "z", NodeID: "z-id"})
	out = wire.AppendRouteInterest(out, "cut.off", "", 1)
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	go func() { // read and discard, never answer
		buf := make([]byte, 4096)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
		}
	}()
	waitFor(t, "interest", func() bool { return interestOf(a, "z") == 1 })
	start := time.Now()
	waitFor(t, "the silent route to close", func() bool { return interestOf(a, "z") == -1 })
	// PingInterval 50 ms: StaleAfter is 200 ms, checked every ping; the lease
	// (600 ms) would clear the interest but leave the route up.
	if took := time.Since(start); took > time.Second {
		t.Fatalf("silent route closed after %v, want about 200-250 ms", took)
	}
	if publish(a, &broker.Message{Subject: []byte("cut.off")}) != 0 {
		t.Fatal("the closed route's interest still matched")
	}
}

// fakePeer is a hand-made node speaking the route protocol to a real one.
type fakePeer struct {
	t    *testing.T
	nc   net.Conn
	buf  []byte
	fill int
}

func dialFake(t *testing.T, addr, name, id string) *fakePeer {
	t.Helper()
	p := dialRaw(t, addr)
	p.send(wire.AppendRouteHello(nil, &wire.RouteHello{Version: wire.Version, Cluster: "t", NodeName: name, NodeID: id}))
	if f := p.next(); f.Type != wire.TypeRouteHello {
		t.Fatalf("first frame %s", f.Type)
	}
	return p
}

// dialRaw connects a fake peer that has sent nothing yet.
func dialRaw(t *testing.T, addr string) *fakePeer {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &fakePeer{t: t, nc: nc, buf: make([]byte, 1<<20)}
}

func (p *fakePeer) send(b []byte) {
	if _, err := p.nc.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// next returns the next frame other than PING/PONG/RINT/RREFRESH (answering pings).
func (p *fakePeer) next() wire.Frame {
	p.t.Helper()
	_ = p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var f wire.Frame
		k, err := f.Decode(p.buf[:p.fill], 0)
		if err == nil {
			out := f
			out.Subject = append([]byte(nil), f.Subject...)
			out.Payload = append([]byte(nil), f.Payload...)
			copy(p.buf, p.buf[k:p.fill])
			p.fill -= k
			switch f.Type {
			case wire.TypePing:
				p.send(wire.AppendPong(nil))
				continue
			case wire.TypePong, wire.TypeRouteInterest, wire.TypeRouteRefresh:
				continue
			}
			return out
		}
		n, rerr := p.nc.Read(p.buf[p.fill:])
		p.fill += n
		if rerr != nil {
			p.t.Fatalf("fake peer read: %v", rerr)
		}
	}
}

// TestQoS1ForwardsAreResentAfterReconnect: messages forwarded with a sequence number
// and not acknowledged when the route broke are sent again on the next route, until
// acknowledged.
func TestQoS1ForwardsAreResentAfterReconnect(t *testing.T) {
	a := startNode(t, "t", "a")
	p := dialFake(t, a.addr, "z", "z-1")
	p.send(wire.AppendRouteInterest(nil, "q", "", 1))
	waitFor(t, "interest", func() bool { return interestOf(a, "z") == 1 })
	for i := 0; i < 5; i++ {
		publish(a, &broker.Message{Subject: []byte("q"), Payload: []byte(fmt.Sprint(i)), QoS: 1})
	}
	publish(a, &broker.Message{Subject: []byte("q"), Payload: []byte("qos0")}) // not kept
	for i := 0; i < 6; i++ {
		f := p.next()
		want := uint64(i + 1)
		if i == 5 {
			want = 0
		}
		if f.Type != wire.TypeRouteMsg || f.Seq != want {
			t.Fatalf("frame %d: %s seq %d, want RMSG seq %d", i, f.Type, f.Seq, want)
		}
	}
	p.send(wire.AppendRouteAck(nil, 2)) // the first two arrived
	waitFor(t, "ack applied", func() bool { n, _ := a.m.Unacked("z"); return n == 3 })
	p.nc.Close()
	waitFor(t, "route gone", func() bool { return len(a.m.Routes()) == 0 })

	p = dialFake(t, a.addr, "z", "z-1")
	for want := uint64(3); want <= 5; want++ {
		f := p.next()
		if f.Type != wire.TypeRouteMsg || f.Seq != want || string(f.Payload) != fmt.Sprint(want-1) {
			t.Fatalf("after reconnect: %s seq %d %q, want seq %d re-sent", f.Type, f.Seq, f.Payload, want)
		}
	}
	p.send(wire.AppendRouteAck(nil, 5))
	waitFor(t, "all acknowledged", func() bool { n, _ := a.m.Unacked("z"); return n == 0 })
}

// TestResentForwardsAreDeliveredOnce: a node drops what a peer sends again with a
// sequence it already delivered, and acknowledges cumulatively.
func TestResentForwardsAreDeliveredOnce(t *testing.T) {
	a := startNode(t, "t", "a")
	got := &inbox{}
	subscribe(t, a, got, "q", "")
	p := dialFake(t, a.addr, "z", "z-1")
	var out []byte
	for _, seq := range []uint64{1, 2, 3, 2, 3, 4} {
		out = wire.AppendRouteMsg(out, seq, 1, "q", "", "", []string(nil), nil, []byte(fmt.Sprint(seq)))
	}
	p.send(out)
	waitFor(t, "deliveries", func() bool { return got.count() >= 4 })
	for {
		f := p.next()
		if f.Type == wire.TypeRouteAck && f.Seq == 4 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	if got.count() != 4 {
		t.Fatalf("%d deliveries of 4 distinct messages", got.count())
	}
	// The same process reconnecting keeps its history; a new process starts afresh.
	p.nc.Close()
	waitFor(t, "route gone", func() bool { return len(a.m.Routes()) == 0 })
	p = dialFake(t, a.addr, "z", "z-1")
	p.send(wire.AppendRouteMsg(nil, 4, 1, "q", "", "", []string(nil), nil, []byte("again")))
	p.send(wire.AppendRouteMsg(nil, 5, 1, "q", "", "", []string(nil), nil, []byte("new")))
	waitFor(t, "the new one", func() bool { return got.count() == 5 })
	p.nc.Close()
	waitFor(t, "route gone", func() bool { return len(a.m.Routes()) == 0 })
	p = dialFake(t, a.addr, "z", "z-2")
	p.send(wire.AppendRouteMsg(nil, 1, 1, "q", "", "", []string(nil), nil, []byte("restarted")))
	waitFor(t, "a restarted peer's first", func() bool { return got.count() == 6 })
}

// TestStalledPeerIsExcluded: a peer that stops reading is excluded at once — the
// publisher is not slowed, other peers keep getting traffic — and re-admitted when it
// reads again, receiving the QoS 1 messages held back meanwhile.
func TestStalledPeerIsExcluded(t *testing.T) {
	a, b := startNode(t, "t", "a"), startNode(t, "t", "b")
	mesh(a, b)
	onB := &inbox{}
	subscribe(t, b, onB, "load", "")
	stalled := dialFake(t, a.addr, "z", "z-1") // never reads from here on
	stalled.send(wire.AppendRouteInterest(nil, "load", "", 1))
	// It still writes: its interest refreshes keep the lease.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for gen := uint64(1); ; gen++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var out []byte
			out = wire.AppendRouteRefresh(out, wire.RefreshBegin, gen)
			out = wire.AppendRouteInterest(out, "load", "", 1)
			out = wire.AppendRouteRefresh(out, wire.RefreshEnd, gen)
			if _, err := stalled.nc.Write(out); err != nil {
				return
			}
		}
	}()
	waitFor(t, "interest", func() bool { return interestOf(a, "z") == 1 && interestOf(a, "b") == 1 })

	payload := make([]byte, 1024)
	start := time.Now()
	const n = 20000 // 20 MiB: more than the peer's socket and the exclusion backlog
	for i := 1; i <= n; i++ {
		publish(a, &broker.Message{Subject: []byte("load"), Payload: payload})
		if i%500 == 0 {
			// b keeps up, so that only the stalled peer's backlog passes
			// ExcludeBacklog: on a loaded machine b's writer could fall that
			// far behind a publisher that does not wait, and be excluded too.
			waitFor(t, "b keeping up", func() bool { return onB.count() >= i })
		}
	}
	took := time.Since(start)
	waitFor(t, "exclusion", func() bool {
		for _, in := range a.m.Routes() {
			if in.Node == "z" {
				return in.Excluded
			}
		}
		return false
	})
	const more = 1000 // while it is excluded: not forwarded to it
	for i := 0; i < more; i++ {
		publish(a, &broker.Message{Subject: []byte("load"), Payload: payload})
	}
	waitFor(t, "everything at b", func() bool { return onB.count() == n+more })
	var z Info
	for _, in := range a.m.Routes() {
		if in.Node == "z" {
			z = in
		}
	}
	if z.Exclusions != 1 || z.ExcludedDrops == 0 {
		t.Fatalf("stalled route: %+v", z)
	}
	t.Logf("%d publishes in %v with a stalled peer; %d not forwarded to it", n, took, z.ExcludedDrops)

	// A QoS 1 message while excluded is held, then sent on re-admission.
	publish(a, &broker.Message{Subject: []byte("load"), Payload: []byte("held"), QoS: 1})
	go func() { // the peer reads again
		buf := make([]byte, 1<<20)
		for {
			if _, err := stalled.nc.Read(buf); err != nil {
				return
			}
		}
	}()
	waitFor(t, "re-admission", func() bool {
		for _, in := range a.m.Routes() {
			if in.Node == "z" {
				return !in.Excluded
			}
		}
		return false
	})
	if n, _ := a.m.Unacked("z"); n != 1 {
		t.Fatalf("%d unacknowledged, want the held message", n)
	}
}

// TestWatchClientURLs: a watch is signalled when a route comes and when it goes, and
// ClientURLs read after the signal has the change.
func TestWatchClientURLs(t *testing.T) {
	a := startNodeWithID(t, "t", "a", "a-id", "tern://a:7400")
	b := startNodeWithID(t, "t", "b", "b-id", "tern://b:7400", "mqtt://b:1883")
	ch, stop := a.m.WatchClientURLs()
	waitSignal := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for fmt.Sprint(a.m.ClientURLs()) != want {
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("ClientURLs %v, want %s", a.m.ClientURLs(), want)
			}
		}
	}
	if got := fmt.Sprint(a.m.ClientURLs()); got != "[tern://a:7400]" {
		t.Fatalf("alone: %s", got)
	}
	mesh(a, b)
	waitSignal("[mqtt://b:1883 tern://a:7400 tern://b:7400]")
	b.m.Shutdown()
	waitSignal("[tern://a:7400]")
	stop()
	stop() // a second stop is harmless
	for range ch {
	}
	a.m.Shutdown()
	if _, ok := <-func() <-chan struct{} { c, _ := a.m.WatchClientURLs(); return c }(); ok {
		t.Fatal("a watch made after Shutdown is open")
	}
}

// TestRaftBatchesCrossRoutes: RRAFT batches reach the peer's handler whole, in
// order, named by their sender; a node with no route to the target is told so.
func TestRaftBatchesCrossRoutes(t *testing.T) {
	a, b := startNode(t, "c", "a"), startNode(t, "c", "b")
	if a.m.SendRaft("b", []byte{1}) {
		t.Fatal("SendRaft reported a batch sent before any route was up")
	}
	type got struct {
		from  string
		batch []byte
	}
	ch := make(chan got, 100)
	b.m.HandleRaft(func(from string, batch []byte) error {
		ch <- got{from, append([]byte(nil), batch...)}
		return nil
	}, nil)
	mesh(a, b)
	waitFor(t, "route a→b", func() bool { return len(a.m.Routes()) == 1 && len(b.m.Routes()) == 1 })
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	want := [][]byte{{1}, big, {2, 3}}
	for _, w := range want {
		if !a.m.SendRaft("b", w) {
			t.Fatal("SendRaft refused a batch on an established route")
		}
	}
	for i, w := range want {
		select {
		case g := <-ch:
			if g.from != "a" || string(g.batch) != string(w) {
				t.Fatalf("batch %d: from %q, %d bytes; want from a, %d bytes", i, g.from, len(g.batch), len(w))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d never arrived", i)
		}
	}
	if a.m.SendRaft("nobody", []byte{1}) {
		t.Fatal("SendRaft reported a batch sent to an unknown node")
	}
}
