package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

const settle = 10 * time.Second // bound for anything that should take about a second

func TestThreeNodesJoinThroughOneSeed(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	seed := a.Local().Addr
	bc := c.config("b", seed)
	bc.RouteAddr = "127.0.0.1:9001"
	bc.Tags = map[string]string{"zone": "z2", "rack": "r7"}
	b := c.start(bc)
	cn := c.start(c.config("c", seed))

	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)

	// b and c started together: a may hear of either first.
	joined := map[string]Node{}
	for len(joined) < 2 {
		ev, _ := waitEvent(t, a, settle, func(ev Event) bool { return ev.Kind == NodeJoined })
		joined[ev.Node.Name] = ev.Node
	}
	got, want := joined["b"], b.Local()
	if got.ID != want.ID || got.Addr != want.Addr || got.RouteAddr != "127.0.0.1:9001" ||
		got.Version != "1.2.3" || !maps.Equal(got.Tags, bc.Tags) || got.State != StateAlive {
		t.Fatalf("a saw b as %+v, b is %+v", got, want)
	}
	if got := joined["c"]; got.ID != cn.Local().ID {
		t.Fatalf("a saw c as %+v, c is %+v", got, cn.Local())
	}
	waitEvent(t, b, settle, is(NodeJoined, "c"))
	waitEvent(t, cn, settle, is(NodeJoined, "b"))

	for _, m := range []*Membership{a, b, cn} {
		for _, n := range m.Members() {
			if n.State != StateAlive || n.ID == "" || n.Addr == "" {
				t.Fatalf("%s lists %+v", m.Local().Name, n)
			}
		}
	}
	if a.Local().ID == b.Local().ID {
		t.Fatal("two nodes drew the same ID")
	}
}

// The same join list, naming every node including itself, starts every node.
func TestJoinListIncludingSelf(t *testing.T) {
	c := newCluster(t)
	ports := []int{freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")}
	var join []string
	for _, p := range ports {
		join = append(join, hostPort("127.0.0.1", p))
	}
	var ms []*Membership
	for i, name := range []string{"a", "b", "c"} {
		cfg := c.config(name, join...)
		cfg.GossipPort = ports[i]
		ms = append(ms, c.start(cfg))
	}
	waitMembers(t, settle, []string{"a", "b", "c"}, ms...)
	// No node tried to join itself.
	for i, name := range []string{"a", "b", "c"} {
		for line := range strings.Lines(c.logs.String()) {
			if strings.Contains(line, "n="+name) && strings.Contains(line, "push/pull sync with") && strings.Contains(line, join[i]) {
				t.Fatalf("%s joined its own address: %s", name, line)
			}
		}
	}
}

// The first node starts with nobody to join and keeps trying until the others come.
func TestFirstNodeAloneThenOthersJoinLater(t *testing.T) {
	c := newCluster(t)
	pb := freePort(t, "127.0.0.1")
	a := c.start(c.config("a", hostPort("127.0.0.1", pb)))
	time.Sleep(400 * time.Millisecond) // several failed attempts
	if got := names(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a alone has members %v", got)
	}
	if !strings.Contains(c.logs.String(), "no other member reachable yet") {
		t.Fatal("a did not say it keeps trying")
	}

	bc := c.config("b") // b joins nobody: a must find it by retrying
	bc.GossipPort = pb
	b := c.start(bc)
	waitMembers(t, settle, []string{"a", "b"}, a, b)

	cn := c.start(c.config("c", b.Local().Addr))
	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)
	if n := countLines(c.logs.String(), "joined the cluster"); n != 2 {
		t.Fatalf("%d join successes logged, want 2 (a once, c once)", n)
	}
}

func TestLeaveIsReportedAsLeft(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	b := c.start(c.config("b", a.Local().Addr))
	cn := c.start(c.config("c", a.Local().Addr))
	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)
	id := cn.Local().ID

	if err := cn.Leave(2 * time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if cn.Local().State != StateLeft {
		t.Fatalf("c after leaving is %v", cn.Local().State)
	}
	for _, m := range []*Membership{a, b} {
		ev, skipped := waitEvent(t, m, settle, func(ev Event) bool { return ev.Node.Name == "c" && ev.Kind != NodeJoined })
		if ev.Kind != NodeLeft || ev.Node.ID != id || ev.Node.State != StateLeft {
			t.Fatalf("%s saw %v %+v for c, want left (skipped %v)", m.Local().Name, ev.Kind, ev.Node, skipped)
		}
	}
	waitMembers(t, settle, []string{"a", "b"}, a, b)
	if err := cn.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Shutting down after leaving is not a failure on top.
	for _, m := range []*Membership{a, b} {
		for _, ev := range drain(m, time.Second) {
			if ev.Node.Name == "c" {
				t.Fatalf("%s saw %v for c after it left", m.Local().Name, ev.Kind)
			}
		}
	}
	if err := cn.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("leave after shutdown: %v", err)
	}
	if err := cn.UpdateTags(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("update after shutdown: %v", err)
	}
	if err := cn.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	for range cn.Events() { // closed: the loop ends
	}
}

func TestShutdownWithoutLeaveIsReportedAsFailed(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	b := c.start(c.config("b", a.Local().Addr))
	cn := c.start(c.config("c", a.Local().Addr))
	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)
	id := cn.Local().ID

	start := time.Now()
	if err := cn.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Probe 100ms, suspicion 4×100ms: declared dead in about a second.
	for _, m := range []*Membership{a, b} {
		ev, skipped := waitEvent(t, m, 5*time.Second, func(ev Event) bool { return ev.Node.Name == "c" && ev.Kind != NodeJoined })
		if ev.Kind != NodeFailed || ev.Node.ID != id || ev.Node.State != StateDead {
			t.Fatalf("%s saw %v %+v for c, want failed (skipped %v)", m.Local().Name, ev.Kind, ev.Node, skipped)
		}
		t.Logf("%s declared c failed after %v", m.Local().Name, time.Since(start).Round(time.Millisecond))
	}
	waitMembers(t, settle, []string{"a", "b"}, a, b)
}

// With the defaults Tern picks, a node that vanishes is declared dead within the
// two seconds doc.go promises for three nodes (checked with some slack: the test
// machine is shared and the race detector slows everything).
func TestDefaultTimingDetectsFailureWithinTwoSeconds(t *testing.T) {
	c := newCluster(t)
	cfg := func(name string, join ...string) Config {
		cf := c.config(name, join...)
		cf.ProbeInterval, cf.ProbeTimeout, cf.SuspicionMult, cf.GossipInterval = 0, 0, 0, 0
		return cf
	}
	a := c.start(cfg("a"))
	b := c.start(cfg("b", a.Local().Addr))
	cn := c.start(cfg("c", a.Local().Addr))
	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)

	start := time.Now()
	if err := cn.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, 5*time.Second, is(NodeFailed, "c"))
	took := time.Since(start)
	t.Logf("declared dead after %v with the default timing", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Fatalf("declared dead after %v, want about 2s at most", took)
	}
}

// A node restarted under its name (new process, new ID, new port as a rescheduled
// pod gets) rejoins by itself; the others see the old process fail and the new one
// join.
func TestRestartedNodeRejoins(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	seed := a.Local().Addr
	b := c.start(c.config("b", seed))
	waitMembers(t, settle, []string{"a", "b"}, a, b)
	oldID := b.Local().ID
	waitEvent(t, a, settle, is(NodeJoined, "b"))

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	b2 := c.start(c.config("b", seed)) // at once: a still believes the old b alive
	newID := b2.Local().ID
	if newID == oldID {
		t.Fatal("restart kept the ID")
	}
	ev, _ := waitEvent(t, a, settle, func(ev Event) bool { return ev.Node.Name == "b" })
	if ev.Kind != NodeFailed || ev.Node.ID != oldID {
		t.Fatalf("first event about b: %v %s, want failed %s", ev.Kind, ev.Node.ID, oldID)
	}
	ev, _ = waitEvent(t, a, settle, func(ev Event) bool { return ev.Node.Name == "b" })
	if ev.Kind != NodeJoined || ev.Node.ID != newID || ev.Node.Addr != b2.Local().Addr {
		t.Fatalf("second event about b: %v %+v, want joined %s", ev.Kind, ev.Node, newID)
	}
	waitMembers(t, settle, []string{"a", "b"}, a, b2)
}

// A node restarted at the same address is recognized by memberlist's incarnation
// numbers before failure detection notices anything; the layers above still learn
// that the process changed.
func TestRestartAtSameAddressBeforeDetection(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	bc := c.config("b", a.Local().Addr)
	bc.GossipPort = freePort(t, "127.0.0.1")
	bc.SuspicionMult = 50 // a must not find the old b dead first
	b := c.start(bc)
	waitMembers(t, settle, []string{"a", "b"}, a, b)
	oldID := b.Local().ID
	waitEvent(t, a, settle, is(NodeJoined, "b"))
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	b2 := c.start(bc)
	ev, _ := waitEvent(t, a, settle, func(ev Event) bool { return ev.Node.Name == "b" })
	if ev.Kind != NodeFailed || ev.Node.ID != oldID {
		t.Fatalf("first event about b: %v %s, want failed %s", ev.Kind, ev.Node.ID, oldID)
	}
	ev, _ = waitEvent(t, a, settle, func(ev Event) bool { return ev.Node.Name == "b" })
	if ev.Kind != NodeJoined || ev.Node.ID != b2.Local().ID {
		t.Fatalf("second event about b: %v %+v, want joined %s", ev.Kind, ev.Node, b2.Local().ID)
	}
}

func TestDifferentClusterNameIsNotMerged(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	bc := c.config("b", a.Local().Addr)
	bc.ClusterName = "other"
	b := c.start(bc)
	time.Sleep(time.Second) // many join attempts
	if got := names(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a: %v", got)
	}
	if got := names(b.Members()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("b: %v", got)
	}
	if !strings.Contains(c.logs.String(), "unacceptable label") {
		t.Fatal("a did not log the foreign label")
	}
}

// A second node under a taken name is refused by the cluster with a clear error,
// whichever member it asks, and the first keeps working.
func TestSameNameTwice(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	b := c.start(c.config("b", a.Local().Addr))
	waitMembers(t, settle, []string{"a", "b"}, a, b)
	aID := a.Local().ID

	dc := c.config("a", b.Local().Addr, a.Local().Addr)
	dc.Logger = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("n", "dup")
	dup := c.start(dc)
	time.Sleep(time.Second) // many join attempts through both members
	if got := names(dup.Members()); !slices.Equal(got, []string{"a"}) || dup.Members()[0].ID != dup.Local().ID {
		t.Fatalf("duplicate sees %v", dup.Members())
	}
	for _, m := range []*Membership{a, b} {
		ms := m.Members()
		if !slices.Equal(names(ms), []string{"a", "b"}) || ms[0].ID != aID {
			t.Fatalf("%s sees %+v", m.Local().Name, ms)
		}
	}
	logs := c.logs.String()
	for n, msg := range map[string]string{
		"a":   "another node uses this node's name", // dup asked a directly
		"b":   "two nodes share a name",
		"dup": "another node uses this node's name",
	} {
		found := false
		for line := range strings.Lines(logs) {
			found = found || (strings.Contains(line, "level=ERROR") && strings.Contains(line, msg) && strings.Contains(line, " n="+n+" "))
		}
		if !found {
			t.Fatalf("%s logged no name conflict", n)
		}
	}
	if countLines(logs, "panic") > 0 {
		t.Fatal("panic logged")
	}

	// The cluster still takes new members.
	d := c.start(c.config("d", b.Local().Addr))
	waitMembers(t, settle, []string{"a", "b", "d"}, a, b, d)
	for _, ev := range drain(a, 200*time.Millisecond) {
		if ev.Node.ID == dup.Local().ID {
			t.Fatalf("a saw the duplicate: %v", ev)
		}
	}
}

// A join host that resolves to several addresses (a headless service) joins every
// one of them, skipping this node's own.
func TestJoinNameResolvingToSeveralAddresses(t *testing.T) {
	c := newCluster(t)
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	port := freePort(t, ips...)
	resolve := func(ctx context.Context, host string) ([]string, error) {
		if host == "tern-headless.test" {
			return ips, nil
		}
		return nil, fmt.Errorf("no such host %q", host)
	}
	var ms []*Membership
	for i, name := range []string{"a", "b", "c"} {
		cfg := c.config(name, hostPort("tern-headless.test", port))
		cfg.BindAddr = ips[i]
		cfg.GossipPort = port
		cfg.Resolve = resolve
		ms = append(ms, c.start(cfg))
	}
	waitMembers(t, settle, []string{"a", "b", "c"}, ms...)
	for i, m := range ms {
		if got, want := m.Local().Addr, hostPort(ips[i], port); got != want {
			t.Fatalf("node %d at %s, want %s", i, got, want)
		}
	}
}

// The default resolver: "localhost" may give 127.0.0.1 and ::1; whichever answers.
func TestJoinThroughLocalhost(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	_, port, _ := net.SplitHostPort(a.Local().Addr)
	b := c.start(c.config("b", "localhost:"+port))
	waitMembers(t, settle, []string{"a", "b"}, a, b)
}

// Join entries name route ports by default; gossip is at the next port.
func TestJoinByRoutePort(t *testing.T) {
	c := newCluster(t)
	ac := c.config("a")
	ac.GossipPort = freePort(t, "127.0.0.1")
	a := c.start(ac)
	bc := c.config("b", hostPort("127.0.0.1", ac.GossipPort-GossipPortOffset))
	bc.JoinGossip = false
	b := c.start(bc)
	waitMembers(t, settle, []string{"a", "b"}, a, b)
}

func TestUpdateTags(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	b := c.start(c.config("b", a.Local().Addr))
	waitMembers(t, settle, []string{"a", "b"}, a, b)
	waitEvent(t, a, settle, is(NodeJoined, "b"))

	tags := map[string]string{"zone": "z9", "rack": "r1"}
	if err := b.UpdateTags(tags); err != nil {
		t.Fatal(err)
	}
	tags["zone"] = "changed after the call"
	ev, _ := waitEvent(t, a, settle, is(NodeUpdated, "b"))
	if want := map[string]string{"zone": "z9", "rack": "r1"}; !maps.Equal(ev.Node.Tags, want) || !maps.Equal(b.Local().Tags, want) {
		t.Fatalf("a saw tags %v, b has %v", ev.Node.Tags, b.Local().Tags)
	}

	err := b.UpdateTags(map[string]string{"big": strings.Repeat("x", 255), "bigger": strings.Repeat("y", 255)})
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("oversized tags: %v", err)
	}
	if err := b.UpdateTags(map[string]string{"": "x"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("empty key: %v", err)
	}
	if got := b.Local().Tags["zone"]; got != "z9" {
		t.Fatalf("refused update changed tags to %v", b.Local().Tags)
	}
	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateTags(tags); !errors.Is(err, ErrClosed) {
		t.Fatalf("update after leave: %v", err)
	}
}

// Nothing memberlist calls waits for the reader: events queue without bound and
// arrive in order once read.
func TestSlowReaderNeverBlocks(t *testing.T) {
	m := &Membership{
		nodes:  map[string]*Node{},
		wake:   make(chan struct{}, 1),
		events: make(chan Event, eventBuffer),
		done:   make(chan struct{}),
	}
	m.wg.Add(1)
	go m.pump()
	const n = 10 * eventBuffer
	emitted := make(chan struct{})
	go func() {
		for i := range n {
			m.mu.Lock()
			m.emit(NodeJoined, Node{Name: fmt.Sprint(i)})
			m.mu.Unlock()
		}
		close(emitted)
	}()
	select {
	case <-emitted:
	case <-time.After(5 * time.Second):
		t.Fatal("emit blocked on an unread channel")
	}
	for i := range n {
		ev := <-m.Events()
		if ev.Node.Name != fmt.Sprint(i) {
			t.Fatalf("event %d is %s", i, ev.Node.Name)
		}
	}
	m.mu.Lock()
	m.emit(NodeJoined, Node{Name: "unread"})
	m.mu.Unlock()
	close(m.done)
	m.wg.Wait()
	for range m.Events() {
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	base := Config{NodeName: "a", BindAddr: "127.0.0.1", Version: "1.0.0"}
	for name, mod := range map[string]func(*Config){
		"no name":            func(c *Config) { c.NodeName = "" },
		"space in name":      func(c *Config) { c.NodeName = "a b" },
		"long cluster":       func(c *Config) { c.ClusterName = strings.Repeat("c", 65) },
		"host name bind":     func(c *Config) { c.BindAddr = "localhost" },
		"no version":         func(c *Config) { c.Version = "" },
		"odd version":        func(c *Config) { c.Version = "dev" },
		"timeout > interval": func(c *Config) { c.ProbeTimeout = time.Second; c.ProbeInterval = time.Second },
		"bad join":           func(c *Config) { c.Join = []string{"host:notaport"} },
		"empty tag key":      func(c *Config) { c.Tags = map[string]string{"": "x"} },
		"tags too big": func(c *Config) {
			c.Tags = map[string]string{"a": strings.Repeat("x", 250), "b": strings.Repeat("y", 250)}
		},
		"port": func(c *Config) { c.GossipPort = 70000 },
	} {
		cfg := base
		mod(&cfg)
		m, err := Start(cfg)
		if err == nil {
			m.Shutdown()
			t.Errorf("%s: started", name)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrMetaTooLarge) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestStartFailsOnTakenPort(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	_, port, _ := net.SplitHostPort(a.Local().Addr)
	cfg := c.config("b")
	fmt.Sscan(port, &cfg.GossipPort)
	if m, err := Start(cfg); err == nil {
		m.Shutdown()
		t.Fatal("two nodes bound one port")
	} else if !strings.Contains(err.Error(), "membership: start b") {
		t.Fatalf("error without context: %v", err)
	}
}
