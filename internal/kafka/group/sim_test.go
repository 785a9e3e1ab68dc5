package group

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The simulation: clients that follow the classic group protocol as Kafka
// consumers do (join, MEMBER_ID_REQUIRED, the leader assigns, sync, heartbeat,
// rejoin when told) talk to one group through a network that delays each request
// at random, while members join, leave politely, crash (go silent) and restart, in
// virtual time. Under every seed: each parked request is answered once and in
// bounded time, generations only grow, a stable generation's assignments never
// overlap, and once the chaos stops the group settles with exactly the live
// clients, every partition assigned once. The same seed gives the same run.

const simPartitions = 12

type simClient struct {
	name     string
	instance string // static members only
	alive    bool   // false: crashed (silent) or gone
	member   string
	gen      int32
	busy     bool // a join or sync is in flight
	stable   bool
	owned    []int
	nextBeat time.Time
}

type simMsg struct {
	at   time.Time
	seq  int
	c    *simClient
	kind string // join, sync, beat, leave
	join Join
	sync Sync
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	g       *Group
	now     time.Time
	clients []*simClient
	net     []simMsg
	seq     int
	token   uint64
	parked  map[uint64]parked // requests waiting for a Ready
	trace   strings.Builder
	lastGen int32
}

type parked struct {
	c     *simClient
	kind  string
	since time.Time
}

const (
	simSession   = 6 * time.Second
	simRebalance = 10 * time.Second
	simBeat      = 1 * time.Second
)

func (s *sim) send(c *simClient, kind string) {
	s.seq++
	m := simMsg{at: s.now.Add(time.Duration(s.rng.IntN(200)) * time.Millisecond), seq: s.seq, c: c, kind: kind}
	switch kind {
	case "join":
		c.busy, c.stable = true, false
		m.join = Join{Version: 9, MemberID: c.member, InstanceID: c.instance, ClientID: c.name, ProtocolType: "consumer",
			Protocols:      []Protocol{{Name: "roundrobin", Metadata: []byte("t")}},
			SessionTimeout: simSession, RebalanceTimeout: simRebalance}
	case "sync":
		c.busy = true
		m.sync = Sync{MemberID: c.member, InstanceID: c.instance, Generation: c.gen}
	}
	s.net = append(s.net, m)
}

// deliver hands the requests due by now to the group.
func (s *sim) deliver() {
	sort.Slice(s.net, func(i, j int) bool {
		if !s.net[i].at.Equal(s.net[j].at) {
			return s.net[i].at.Before(s.net[j].at)
		}
		return s.net[i].seq < s.net[j].seq
	})
	for len(s.net) > 0 && !s.net[0].at.After(s.now) {
		m := s.net[0]
		s.net = s.net[1:]
		c := m.c
		switch m.kind {
		case "join":
			s.token++
			m.join.Token, m.join.Nonce = s.token, strconv.FormatUint(s.token, 10)
			s.parked[s.token] = parked{c: c, kind: "join", since: s.now}
			s.g.Join(s.now, m.join)
		case "sync":
			s.token++
			m.sync.Token = s.token
			if c.member == s.g.leader && m.sync.Generation == s.g.generation {
				m.sync.Assignments = s.assign()
			}
			s.parked[s.token] = parked{c: c, kind: "sync", since: s.now}
			s.g.Sync(s.now, m.sync)
		case "beat":
			if !c.alive {
				continue
			}
			switch code := s.g.Heartbeat(s.now, c.member, c.instance, c.gen); code {
			case 0:
			case kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code:
				if !c.busy {
					s.send(c, "join")
				}
			case kerr.UnknownMemberID.Code:
				if !c.busy {
					c.member = ""
					s.send(c, "join")
				}
			case kerr.FencedInstanceID.Code:
				c.alive = false
			default:
				s.t.Fatalf("heartbeat: code %d", code)
			}
		case "leave":
			s.g.Leave(s.now, m.c.member, m.c.instance)
		}
		s.ready()
	}
}

// assign is the leader's round-robin assignment over the members it was told of.
func (s *sim) assign() []Assignment {
	members := s.g.ordered()
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.id
	}
	sort.Strings(ids)
	parts := make(map[string][]string)
	for p := range simPartitions {
		id := ids[p%len(ids)]
		parts[id] = append(parts[id], strconv.Itoa(p))
	}
	var out []Assignment
	for _, id := range ids {
		out = append(out, Assignment{MemberID: id, Data: []byte(strings.Join(parts[id], ","))})
	}
	return out
}

func (s *sim) ready() {
	rd := s.g.Ready()
	if g := s.g.Generation(); g < s.lastGen {
		s.t.Fatalf("generation went back from %d to %d", s.lastGen, g)
	}
	s.lastGen = s.g.Generation()
	for _, r := range rd.Replies {
		p, ok := s.parked[r.Token]
		if !ok {
			s.t.Fatalf("reply to token %d, which is not waiting (answered twice?)", r.Token)
		}
		delete(s.parked, r.Token)
		c := p.c
		if r.Join != nil {
			fmt.Fprintf(&s.trace, "%s join %s err %d gen %d\n", s.now.Format("05.000"), c.name, r.Join.Err, r.Join.Generation)
			if p.kind != "join" {
				s.t.Fatalf("a sync answered as a join")
			}
			s.onJoin(c, r.Join)
		} else {
			fmt.Fprintf(&s.trace, "%s sync %s err %d %q\n", s.now.Format("05.000"), c.name, r.Sync.Err, r.Sync.Assignment)
			s.onSync(c, r.Sync)
		}
	}
	if s.g.State() == Stable {
		s.checkDisjoint()
	}
}

func (s *sim) onJoin(c *simClient, r *JoinResult) {
	c.busy = false
	if !c.alive {
		return
	}
	switch r.Err {
	case 0:
		// A static leader told to skip the assignment (KIP-814) still syncs,
		// to learn its own.
		c.member, c.gen = r.MemberID, r.Generation
		s.send(c, "sync")
	case kerr.MemberIDRequired.Code:
		c.member = r.MemberID
		s.send(c, "join")
	case kerr.UnknownMemberID.Code:
		c.member = ""
		s.send(c, "join")
	case kerr.RebalanceInProgress.Code:
		s.send(c, "join")
	case kerr.FencedInstanceID.Code:
		c.alive = false
	default:
		s.t.Fatalf("join of %s: code %d", c.name, r.Err)
	}
}

func (s *sim) onSync(c *simClient, r *SyncResult) {
	c.busy = false
	if !c.alive {
		return
	}
	switch r.Err {
	case 0:
		c.stable = true
		c.owned = c.owned[:0]
		for _, f := range strings.Split(string(r.Assignment), ",") {
			if n, err := strconv.Atoi(f); err == nil {
				c.owned = append(c.owned, n)
			}
		}
	case kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code:
		s.send(c, "join")
	case kerr.UnknownMemberID.Code:
		c.member = ""
		s.send(c, "join")
	case kerr.FencedInstanceID.Code:
		c.alive = false
	default:
		s.t.Fatalf("sync of %s: code %d", c.name, r.Err)
	}
}

// checkDisjoint: the assignments the coordinator holds for a stable generation
// never give one partition to two members.
func (s *sim) checkDisjoint() {
	owner := map[string]string{}
	for _, m := range s.g.members {
		for _, p := range strings.Split(string(m.assignment), ",") {
			if p == "" {
				continue
			}
			if o, ok := owner[p]; ok {
				s.t.Fatalf("generation %d: partition %s assigned to %s and %s", s.g.generation, p, o, m.id)
			}
			owner[p] = m.id
		}
	}
}

// checkBounded: no request waits longer than the rebalance timeout plus a session
// (plus the initial delay).
func (s *sim) checkBounded() {
	limit := simRebalance + simSession + DefaultInitialRebalanceDelay + time.Second
	for tok, p := range s.parked {
		if s.now.Sub(p.since) > limit {
			s.t.Fatalf("%s of %s (token %d) waiting since %v, state %s", p.kind, p.c.name, tok, s.now.Sub(p.since), s.g.State())
		}
	}
}

func runSim(t *testing.T, seed uint64) string {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), g: New("g", Config{}),
		now: time.Unix(1_000_000, 0), parked: map[uint64]parked{}}
	next := 0
	newClient := func(static bool) {
		next++
		c := &simClient{name: fmt.Sprintf("c%d", next), alive: true}
		if static {
			c.instance = "i" + c.name
		}
		s.clients = append(s.clients, c)
		s.send(c, "join")
	}
	for range 4 {
		newClient(s.rng.IntN(3) == 0)
	}
	step := func(chaos bool) {
		s.now = s.now.Add(time.Duration(20+s.rng.IntN(300)) * time.Millisecond)
		if dl := s.g.deadline(); !dl.IsZero() && !dl.After(s.now) {
			s.g.Tick(s.now)
			s.ready()
		}
		s.deliver()
		for _, c := range s.clients {
			if c.alive && c.stable && !s.now.Before(c.nextBeat) {
				c.nextBeat = s.now.Add(simBeat)
				s.send(c, "beat")
			}
		}
		if chaos {
			switch r := s.rng.IntN(1000); {
			case r < 6 && len(s.clients) < 10:
				newClient(s.rng.IntN(3) == 0)
			case r < 10: // a polite leave
				if c := s.pickAlive(); c != nil && c.member != "" {
					c.alive = false
					s.send(c, "leave")
				}
			case r < 14: // a crash: silence
				if c := s.pickAlive(); c != nil {
					c.alive = false
				}
			case r < 18: // a static member restarts: same instance, no member id
				for _, c := range s.clients {
					if c.instance != "" && !c.alive {
						n := &simClient{name: c.name + "r", instance: c.instance, alive: true}
						c.instance = ""
						s.clients = append(s.clients, n)
						s.send(n, "join")
						break
					}
				}
			}
		}
		s.checkBounded()
	}
	for range 3000 {
		step(true)
	}
	// Calm: crashed members time out, the rest settle.
	for range 400 {
		step(false)
	}
	if st := s.g.State(); st != Stable {
		t.Fatalf("seed %d: state %s after the calm", seed, st)
	}
	var live []string
	for _, c := range s.clients {
		if c.alive {
			live = append(live, c.member)
			if !c.stable || c.gen != s.g.generation {
				t.Fatalf("seed %d: %s not stable in generation %d (gen %d)", seed, c.name, s.g.generation, c.gen)
			}
		}
	}
	var members []string
	for id := range s.g.members {
		members = append(members, id)
	}
	slices.Sort(live)
	slices.Sort(members)
	if !slices.Equal(live, members) {
		t.Fatalf("seed %d: members %v, live clients %v", seed, members, live)
	}
	seen := map[int]bool{}
	for _, c := range s.clients {
		if c.alive {
			for _, p := range c.owned {
				seen[p] = true
			}
		}
	}
	if len(live) > 0 && len(seen) != simPartitions {
		t.Fatalf("seed %d: %d of %d partitions owned after the calm", seed, len(seen), simPartitions)
	}
	if len(s.parked) != 0 {
		t.Fatalf("seed %d: %d requests never answered", seed, len(s.parked))
	}
	return s.trace.String()
}

func (s *sim) pickAlive() *simClient {
	var alive []*simClient
	for _, c := range s.clients {
		if c.alive && !c.busy {
			alive = append(alive, c)
		}
	}
	if len(alive) <= 1 {
		return nil
	}
	return alive[s.rng.IntN(len(alive))]
}

// TestSimulation runs the simulation under many seeds, and one seed twice to
// check that a run is a function of its seed.
func TestSimulation(t *testing.T) {
	for seed := range uint64(40) {
		runSim(t, seed)
	}
	a, b := runSim(t, 7), runSim(t, 7)
	if a != b {
		t.Fatal("the same seed gave two different runs")
	}
	h := fnv.New64a()
	h.Write([]byte(a))
	t.Logf("seed 7: %d lines, trace hash %x", strings.Count(a, "\n"), h.Sum64())
}
