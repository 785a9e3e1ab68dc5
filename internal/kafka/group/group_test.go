package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// harness drives one group in virtual time and keeps the replies by token.
type harness struct {
	t       *testing.T
	g       *Group
	start   time.Time
	now     time.Time
	token   uint64
	replies map[uint64]Reply
	gens    []int32 // generation after each Ready that rebalanced
}

func newHarness(t *testing.T, cfg Config) *harness {
	start := time.Unix(1_000_000, 0)
	return &harness{t: t, g: New("g", cfg), start: start, now: start, replies: map[uint64]Reply{}}
}

func (h *harness) ready() {
	rd := h.g.Ready()
	for _, r := range rd.Replies {
		if _, dup := h.replies[r.Token]; dup {
			h.t.Fatalf("token %d answered twice", r.Token)
		}
		h.replies[r.Token] = r
	}
	if rd.Rebalanced {
		h.gens = append(h.gens, h.g.Generation())
	}
}

// advance moves the clock by d, ticking at every deadline on the way.
func (h *harness) advance(d time.Duration) {
	end := h.now.Add(d)
	for range 1000 {
		dl := h.g.deadline()
		if dl.IsZero() || dl.After(end) {
			break
		}
		h.now = dl
		h.g.Tick(h.now)
		h.ready()
	}
	h.now = end
	h.g.Tick(h.now)
	h.ready()
}

func (h *harness) join(version int16, member, instance, client string, protocols ...string) uint64 {
	h.token++
	j := Join{Token: h.token, Version: version, MemberID: member, InstanceID: instance, ClientID: client,
		ProtocolType: "consumer", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second,
		Nonce: fmt.Sprintf("n%d", h.token)}
	for _, p := range protocols {
		j.Protocols = append(j.Protocols, Protocol{Name: p, Metadata: []byte(client)})
	}
	h.g.Join(h.now, j)
	h.ready()
	return h.token
}

func (h *harness) sync(member string, gen int32, assign map[string]string) uint64 {
	return h.syncAs(member, "", gen, assign)
}

func (h *harness) syncAs(member, instance string, gen int32, assign map[string]string) uint64 {
	h.token++
	s := Sync{Token: h.token, MemberID: member, InstanceID: instance, Generation: gen}
	for m, a := range assign {
		s.Assignments = append(s.Assignments, Assignment{MemberID: m, Data: []byte(a)})
	}
	h.g.Sync(h.now, s)
	h.ready()
	return h.token
}

func (h *harness) joinResult(tok uint64) *JoinResult {
	h.t.Helper()
	r, ok := h.replies[tok]
	if !ok || r.Join == nil {
		h.t.Fatalf("join %d not answered (state %s)", tok, h.g.State())
	}
	return r.Join
}

func (h *harness) syncResult(tok uint64) *SyncResult {
	h.t.Helper()
	r, ok := h.replies[tok]
	if !ok || r.Sync == nil {
		h.t.Fatalf("sync %d not answered (state %s)", tok, h.g.State())
	}
	return r.Sync
}

func (h *harness) answered(tok uint64) bool { _, ok := h.replies[tok]; return ok }

// joinTwo makes a stable group of members a (leader) and b at generation 1.
func joinTwo(t *testing.T, h *harness) (a, b string) {
	t.Helper()
	ra := h.joinResult(h.join(4, "", "", "a", "range"))
	if ra.Err != kerr.MemberIDRequired.Code || ra.MemberID == "" {
		t.Fatalf("first join without an id: %+v, want MEMBER_ID_REQUIRED with an id", ra)
	}
	a = ra.MemberID
	ta := h.join(4, a, "", "a", "range")
	b = h.joinResult(h.join(4, "", "", "b", "range")).MemberID
	tb := h.join(4, b, "", "b", "range")
	if h.answered(ta) || h.answered(tb) {
		t.Fatal("joins answered during the initial delay")
	}
	h.advance(DefaultInitialRebalanceDelay)
	ja, jb := h.joinResult(ta), h.joinResult(tb)
	if ja.Err != 0 || jb.Err != 0 || ja.Generation != 1 || ja.Leader != a || len(ja.Members) != 2 || len(jb.Members) != 0 {
		t.Fatalf("joins: %+v / %+v", ja, jb)
	}
	sb := h.sync(b, 1, nil)
	if h.answered(sb) {
		t.Fatal("a follower's sync answered before the leader's")
	}
	sa := h.sync(a, 1, map[string]string{a: "p0", b: "p1"})
	if h.syncResult(sa).Err != 0 || string(h.syncResult(sa).Assignment) != "p0" || string(h.syncResult(sb).Assignment) != "p1" {
		t.Fatalf("syncs: %+v / %+v", h.syncResult(sa), h.syncResult(sb))
	}
	if h.g.State() != Stable {
		t.Fatalf("state %s after the leader's sync", h.g.State())
	}
	return a, b
}

// TestJoinSyncAndErrors walks one group through the cases Kafka's coordinator
// answers with an error, and a rebalance for a joining and a leaving member.
func TestJoinSyncAndErrors(t *testing.T) {
	h := newHarness(t, Config{})
	a, b := joinTwo(t, h)

	// Heartbeats: fine; unknown member; old generation.
	if c := h.g.Heartbeat(h.now, a, "", 1); c != 0 {
		t.Fatalf("heartbeat: %d", c)
	}
	if c := h.g.Heartbeat(h.now, "nobody", "", 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %d", c)
	}
	if c := h.g.Heartbeat(h.now, a, "", 0); c != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat of an old generation: %d", c)
	}
	if r := h.syncResult(h.sync(a, 7, nil)); r.Err != kerr.IllegalGeneration.Code {
		t.Fatalf("sync of a wrong generation: %+v", r)
	}
	if r := h.joinResult(h.join(4, "nobody", "", "x", "range")); r.Err != kerr.UnknownMemberID.Code {
		t.Fatalf("join of an unknown member: %+v", r)
	}
	if r := h.joinResult(h.join(4, "", "", "x", "other")); r.Err != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with no common protocol: %+v", r)
	}
	if c := h.g.CheckCommit(h.now, a, "", 1, 1); c != 0 {
		t.Fatalf("commit of a member: %d", c)
	}
	if c := h.g.CheckCommit(h.now, "", "", -1, 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("simple commit to a group with members: %d", c)
	}
	// a commits over a new connection (the old one timed out): a commit read
	// from the old one afterwards is refused, the new one's go on, and b's
	// connections are b's own.
	if c := h.g.CheckCommit(h.now, a, "", 1, 5); c != 0 {
		t.Fatalf("commit over a newer connection: %d", c)
	}
	if c := h.g.CheckCommit(h.now, a, "", 1, 1); c != kerr.RequestTimedOut.Code {
		t.Fatalf("commit over the connection given up: %d, want REQUEST_TIMED_OUT", c)
	}
	if c := h.g.CheckCommit(h.now, a, "", 1, 5); c != 0 {
		t.Fatalf("second commit over the newer connection: %d", c)
	}
	if c := h.g.CheckCommit(h.now, b, "", 1, 2); c != 0 {
		t.Fatalf("commit of another member over an older connection: %d", c)
	}

	// A follower re-joining with the same protocols changes nothing.
	if r := h.joinResult(h.join(4, b, "", "b", "range")); r.Err != 0 || r.Generation != 1 {
		t.Fatalf("follower rejoin: %+v", r)
	}
	// A third member starts a rebalance: the others learn it from heartbeats.
	c := h.joinResult(h.join(4, "", "", "c", "range")).MemberID
	tc := h.join(4, c, "", "c", "range")
	if h.g.State() != PreparingRebalance {
		t.Fatalf("state %s after a new member", h.g.State())
	}
	if code := h.g.Heartbeat(h.now, a, "", 1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat during a rebalance: %d", code)
	}
	if code := h.g.CheckCommit(h.now, a, "", 1, 5); code != 0 {
		t.Fatalf("commit of the old generation while preparing: %d", code)
	}
	ta := h.join(4, a, "", "a", "range")
	if h.answered(tc) || h.answered(ta) {
		t.Fatal("join answered before every member joined")
	}
	// b heartbeats but never joins again: it is removed at the rebalance
	// timeout.
	for range 2 {
		h.advance(8 * time.Second)
		if code := h.g.Heartbeat(h.now, b, "", 1); code != kerr.RebalanceInProgress.Code {
			t.Fatalf("heartbeat of a member yet to join: %d", code)
		}
	}
	if h.answered(ta) {
		t.Fatal("join answered before the rebalance timeout")
	}
	h.advance(4 * time.Second)
	if r := h.joinResult(ta); r.Err != 0 || r.Generation != 2 || len(r.Members) != 2 {
		t.Fatalf("join after the rebalance timeout: %+v", r)
	}
	if h.g.members[b] != nil {
		t.Fatal("b stayed after missing the rebalance")
	}
	if code := h.g.CheckCommit(h.now, a, "", 2, 5); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit while completing: %d", code)
	}
	h.sync(a, 2, map[string]string{a: "p0", c: "p1"})
	// c leaves: a rebalance with a alone.
	if code := h.g.Leave(h.now, c, ""); code != 0 {
		t.Fatalf("leave: %d", code)
	}
	if code := h.g.Leave(h.now, c, ""); code != kerr.UnknownMemberID.Code {
		t.Fatalf("second leave: %d", code)
	}
	if r := h.joinResult(h.join(4, a, "", "a", "range")); r.Err != 0 || r.Generation != 3 {
		t.Fatalf("join after a leave: %+v", r)
	}
	// a stops heartbeating: its session ends, the group is empty.
	h.sync(a, 3, map[string]string{a: "p0,p1"})
	h.advance(11 * time.Second)
	if h.g.State() != Empty || h.g.Generation() != 4 {
		t.Fatalf("state %s generation %d after the session timeout", h.g.State(), h.g.Generation())
	}
	if code := h.g.CheckCommit(h.now, "", "", -1, 1); code != 0 {
		t.Fatalf("simple commit to an empty group: %d", code)
	}
	if code := h.g.Delete(); code != 0 || h.g.State() != Dead {
		t.Fatalf("delete: %d, state %s", code, h.g.State())
	}
}

// TestStaticMembership: a static member that restarts gets a new id without a
// rebalance, the old id is fenced, and its session timeout still removes it.
func TestStaticMembership(t *testing.T) {
	h := newHarness(t, Config{InitialRebalanceDelay: -1})
	ra := h.joinResult(h.join(5, "", "ia", "a", "range"))
	if ra.Err != 0 || ra.Generation != 1 {
		t.Fatalf("static first join: %+v (no MEMBER_ID_REQUIRED for static members)", ra)
	}
	old := ra.MemberID
	if s := h.syncResult(h.syncAs(old, "ia", 1, map[string]string{old: "p0"})); s.Err != 0 {
		t.Fatalf("static sync: %+v", s)
	}
	r := h.joinResult(h.join(9, "", "ia", "a", "range"))
	if r.Err != 0 || r.Generation != 1 || r.MemberID == old || !r.SkipAssignment {
		t.Fatalf("static rejoin: %+v", r)
	}
	if code := h.g.Heartbeat(h.now, old, "ia", 1); code != kerr.FencedInstanceID.Code {
		t.Fatalf("heartbeat of the old id: %d", code)
	}
	if s := h.syncResult(h.sync(r.MemberID, 1, nil)); s.Err != kerr.FencedInstanceID.Code {
		// sync without the instance id: the member is static
		t.Fatalf("sync without the instance id: %+v", s)
	}
	h.advance(11 * time.Second)
	if h.g.State() != Empty {
		t.Fatalf("state %s after the static member's session ended", h.g.State())
	}
}

// TestPendingMemberExpires: an id handed out with MEMBER_ID_REQUIRED that never
// joins holds a rebalance only until its session timeout.
func TestPendingMemberExpires(t *testing.T) {
	h := newHarness(t, Config{InitialRebalanceDelay: -1})
	a := h.joinResult(h.join(4, "", "", "a", "range")).MemberID
	h.join(4, a, "", "a", "range")
	h.sync(a, 1, map[string]string{a: "p0"})
	h.joinResult(h.join(4, "", "", "b", "range")) // b never comes back
	ta := h.join(4, a, "", "a", "range")          // a rejoins (leader)
	if h.answered(ta) {
		t.Fatal("join answered while a member id handed out may still join")
	}
	h.advance(10 * time.Second)
	if r := h.joinResult(ta); r.Err != 0 || r.Generation != 2 {
		t.Fatalf("join once the pending id expired: %+v", r)
	}
}
