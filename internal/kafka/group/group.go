package group

import (
	"cmp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Defaults of Config's zero fields: Kafka's group.min.session.timeout.ms,
// group.max.session.timeout.ms and group.initial.rebalance.delay.ms.
const (
	DefaultMinSessionTimeout     = 6 * time.Second
	DefaultMaxSessionTimeout     = 30 * time.Minute
	DefaultInitialRebalanceDelay = 3 * time.Second
)

// Config is what every group of a coordinator shares.
type Config struct {
	// A member's session timeout must be within these bounds, else its JoinGroup
	// gets INVALID_SESSION_TIMEOUT.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay holds the first rebalance of an empty group this long
	// (longer while members keep joining, up to the rebalance timeout), so that
	// consumers started together make one generation rather than one each.
	// Negative: no delay.
	InitialRebalanceDelay time.Duration
	// MaxSize bounds the members (0: no bound): more get GROUP_MAX_SIZE_REACHED.
	MaxSize int
}

func (c *Config) fillDefaults() {
	if c.MinSessionTimeout <= 0 {
		c.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if c.MaxSessionTimeout <= 0 {
		c.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if c.InitialRebalanceDelay == 0 {
		c.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	}
}

// State is a group's state, as DescribeGroups and ListGroups name it.
type State int

const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

func (s State) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}[s]
}

// Protocol is one of the assignment protocols a member supports, with its
// metadata (for consumers: the topics it subscribes to, kmsg.ConsumerMemberMetadata).
type Protocol struct {
	Name     string
	Metadata []byte
}

// Join is a JoinGroup request.
type Join struct {
	// Token is the caller's name for the request; its reply carries it.
	Token uint64
	// Version is the request's version: from 4 a new dynamic member is first given
	// its id with MEMBER_ID_REQUIRED (KIP-394); from 9 a static leader that
	// rejoins a stable group keeps its assignment (KIP-814).
	Version              int16
	MemberID, InstanceID string // "" for none
	ClientID, ClientHost string
	ProtocolType         string
	Protocols            []Protocol
	SessionTimeout       time.Duration
	RebalanceTimeout     time.Duration
	// Nonce is a fresh random string the caller makes: a new member's id is its
	// instance id or client id, a dash and Nonce, as Kafka's are.
	Nonce string
}

// JoinResult answers a Join.
type JoinResult struct {
	Err          int16
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	MemberID     string
	// Members, with their metadata for Protocol, go to the leader only.
	Members        []Member
	SkipAssignment bool
}

// Member is a member as the leader's JoinGroup answer lists it.
type Member struct {
	ID, InstanceID string
	Metadata       []byte
}

// Sync is a SyncGroup request.
type Sync struct {
	Token                uint64
	MemberID, InstanceID string
	Generation           int32
	// ProtocolType and Protocol, when given (v5+), must be the group's.
	ProtocolType, Protocol *string
	// Assignments, from the leader, give each member its assignment.
	Assignments []Assignment
}

// Assignment is one member's assignment, opaque to the coordinator.
type Assignment struct {
	MemberID string
	Data     []byte
}

// SyncResult answers a Sync.
type SyncResult struct {
	Err          int16
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// Reply is the answer to a parked request: exactly one of Join and Sync is set.
type Reply struct {
	Token uint64
	Join  *JoinResult
	Sync  *SyncResult
}

// Ready is what the machine wants done.
type Ready struct {
	Replies []Reply
	// Deadline is when Tick must run next; zero when nothing is timed.
	Deadline time.Time
	// Rebalanced is set when a join phase ended: a new generation (Generation)
	// began, or the group became empty.
	Rebalanced bool
}

// Group is one consumer group's state. It is not safe for concurrent use.
type Group struct {
	cfg Config
	id  string

	state        State
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	static       map[string]string    // instance id → member id
	pending      map[string]time.Time // member ids handed out, not yet joined → expiry
	seq          uint64               // join order

	// The join phase of a rebalance.
	joinDeadline time.Time // the rebalance timeout
	initialUntil time.Time // an empty group's initial delay; zero when none
	started      time.Time

	replies    []Reply
	rebalanced bool
}

type member struct {
	id, instance         string
	clientID, clientHost string
	protocolType         string
	protocols            []Protocol
	session, rebalance   time.Duration
	seq                  uint64
	heard                time.Time
	assignment           []byte
	commitConn           uint64 // the latest connection a commit of the member came over

	joining   bool // a JoinGroup is parked
	joinToken uint64
	syncing   bool // a SyncGroup is parked
	syncToken uint64
}

// New makes an empty group.
func New(id string, cfg Config) *Group {
	cfg.fillDefaults()
	return &Group{cfg: cfg, id: id, members: map[string]*member{}, static: map[string]string{}, pending: map[string]time.Time{}}
}

// ID is the group's id.
func (g *Group) ID() string { return g.id }

// State is the group's state.
func (g *Group) State() State { return g.state }

// Generation is the group's generation: 0 before its first rebalance.
func (g *Group) Generation() int32 { return g.generation }

// ProtocolType is the protocol type of the group's members ("consumer"), kept
// when the group is empty.
func (g *Group) ProtocolType() string { return g.protocolType }

// Leader is the leader's member id, "" when there is none.
func (g *Group) Leader() string { return g.leader }

// Len is how many members the group has.
func (g *Group) Len() int { return len(g.members) }

// Ready returns what the machine wants done since the last Ready.
func (g *Group) Ready() Ready {
	rd := Ready{Replies: g.replies, Deadline: g.deadline(), Rebalanced: g.rebalanced}
	g.replies, g.rebalanced = nil, false
	return rd
}

func (g *Group) joinReply(token uint64, r JoinResult) {
	g.replies = append(g.replies, Reply{Token: token, Join: &r})
}

func (g *Group) syncReply(token uint64, r SyncResult) {
	g.replies = append(g.replies, Reply{Token: token, Sync: &r})
}

// ordered lists the members in join order.
func (g *Group) ordered() []*member {
	out := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// ---------------------------------------------------------------------------------
// JoinGroup

// Join handles a JoinGroup request; its answer comes in a Ready, now or when the
// rebalance's join phase ends.
func (g *Group) Join(now time.Time, j Join) {
	fail := func(code int16) { g.joinReply(j.Token, JoinResult{Err: code, MemberID: j.MemberID, Generation: -1}) }
	switch {
	case g.state == Dead:
		fail(kerr.CoordinatorNotAvailable.Code)
	case j.SessionTimeout < g.cfg.MinSessionTimeout || j.SessionTimeout > g.cfg.MaxSessionTimeout:
		fail(kerr.InvalidSessionTimeout.Code)
	case j.ProtocolType == "" || len(j.Protocols) == 0 || !g.supports(j):
		fail(kerr.InconsistentGroupProtocol.Code)
	case j.MemberID == "":
		g.joinNew(now, j)
	default:
		g.joinKnown(now, j)
	}
}

// supports reports whether a joining member can be in the group: same protocol
// type, and a protocol every other member supports too.
func (g *Group) supports(j Join) bool {
	others := 0
	for _, m := range g.members {
		if m.id != j.MemberID {
			others++
		}
	}
	if others == 0 {
		return true
	}
	if j.ProtocolType != g.protocolType {
		return false
	}
	for _, p := range j.Protocols {
		n := 0
		for _, m := range g.members {
			if m.id != j.MemberID && m.supports(p.Name) {
				n++
			}
		}
		if n == others {
			return true
		}
	}
	return false
}

func (m *member) supports(name string) bool {
	for _, p := range m.protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

func (m *member) metadata(name string) []byte {
	for _, p := range m.protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

func sameProtocols(a, b []Protocol) bool {
	return slices.EqualFunc(a, b, func(x, y Protocol) bool { return x.Name == y.Name && string(x.Metadata) == string(y.Metadata) })
}

// joinNew handles a join without a member id.
func (g *Group) joinNew(now time.Time, j Join) {
	if g.cfg.MaxSize > 0 && len(g.members)+len(g.pending) >= g.cfg.MaxSize {
		g.joinReply(j.Token, JoinResult{Err: kerr.GroupMaxSizeReached.Code, Generation: -1})
		return
	}
	prefix := j.ClientID
	if j.InstanceID != "" {
		prefix = j.InstanceID
	}
	id := prefix + "-" + j.Nonce
	if j.InstanceID != "" {
		if old, ok := g.static[j.InstanceID]; ok {
			g.replaceStatic(now, g.members[old], id, j)
			return
		}
		g.addMember(now, id, j)
		return
	}
	if j.Version >= 4 {
		// KIP-394: the member learns its id first and joins with it, so that a
		// client that gives up on this answer leaves no member behind.
		g.pending[id] = now.Add(j.SessionTimeout)
		g.joinReply(j.Token, JoinResult{Err: kerr.MemberIDRequired.Code, MemberID: id, Generation: -1})
		return
	}
	g.addMember(now, id, j)
}

// joinKnown handles a join with a member id.
func (g *Group) joinKnown(now time.Time, j Join) {
	fail := func(code int16) { g.joinReply(j.Token, JoinResult{Err: code, MemberID: j.MemberID, Generation: -1}) }
	if _, ok := g.pending[j.MemberID]; ok {
		delete(g.pending, j.MemberID)
		if j.InstanceID != "" {
			if _, taken := g.static[j.InstanceID]; taken {
				fail(kerr.FencedInstanceID.Code)
				return
			}
		}
		g.addMember(now, j.MemberID, j)
		return
	}
	m := g.members[j.MemberID]
	if m == nil {
		fail(kerr.UnknownMemberID.Code)
		return
	}
	if m.instance != j.InstanceID {
		fail(kerr.FencedInstanceID.Code)
		return
	}
	switch g.state {
	case PreparingRebalance:
		g.updateMember(now, m, j)
		g.maybeCompleteJoin(now)
	case CompletingRebalance:
		if sameProtocols(m.protocols, j.Protocols) {
			// It missed the answer the others got: the same again.
			m.heard = now
			g.joinReply(j.Token, g.joinResult(m, false))
			return
		}
		g.updateMember(now, m, j)
		g.prepareRebalance(now)
	case Stable:
		if m.id == g.leader || !sameProtocols(m.protocols, j.Protocols) {
			g.updateMember(now, m, j)
			g.prepareRebalance(now)
			return
		}
		m.heard = now
		g.joinReply(j.Token, g.joinResult(m, false))
	default:
		fail(kerr.UnknownMemberID.Code)
	}
}

// addMember adds a member whose join waits for the rebalance it starts (or joins).
func (g *Group) addMember(now time.Time, id string, j Join) {
	g.seq++
	m := &member{id: id, instance: j.InstanceID, seq: g.seq}
	g.members[id] = m
	if m.instance != "" {
		g.static[m.instance] = id
	}
	if len(g.members) == 1 {
		g.protocolType = j.ProtocolType
	}
	g.updateMember(now, m, j)
	if g.state == PreparingRebalance {
		if !g.initialUntil.IsZero() {
			g.initialUntil = minTime(now.Add(g.cfg.InitialRebalanceDelay), g.started.Add(g.rebalanceTimeout()))
		}
		g.maybeCompleteJoin(now)
		return
	}
	g.prepareRebalance(now)
}

// updateMember takes a member's join: its protocols and timeouts, and its request
// parked until the join phase ends.
func (g *Group) updateMember(now time.Time, m *member, j Join) {
	if m.joining {
		g.joinReply(m.joinToken, JoinResult{Err: kerr.RebalanceInProgress.Code, MemberID: m.id, Generation: -1})
	}
	m.clientID, m.clientHost = j.ClientID, j.ClientHost
	m.protocolType, m.protocols = j.ProtocolType, j.Protocols
	m.session, m.rebalance = j.SessionTimeout, j.RebalanceTimeout
	if m.rebalance <= 0 {
		m.rebalance = m.session
	}
	m.heard = now
	m.joining, m.joinToken = true, j.Token
}

// replaceStatic gives a static member that joins again without its member id a new
// one: the old id is fenced, and the member keeps its place and assignment.
func (g *Group) replaceStatic(now time.Time, old *member, id string, j Join) {
	if old.joining {
		g.joinReply(old.joinToken, JoinResult{Err: kerr.FencedInstanceID.Code, MemberID: old.id, Generation: -1})
		old.joining = false
	}
	if old.syncing {
		g.syncReply(old.syncToken, SyncResult{Err: kerr.FencedInstanceID.Code})
		old.syncing = false
	}
	delete(g.members, old.id)
	wasLeader := g.leader == old.id
	if wasLeader {
		g.leader = id
	}
	old.id = id
	g.members[id] = old
	g.static[old.instance] = id
	changed := !sameProtocols(old.protocols, j.Protocols)
	switch g.state {
	case Stable:
		if !changed && (!wasLeader || j.Version >= 9) {
			// Nothing the assignment depends on changed: no rebalance. A leader
			// learns the members but keeps the assignment it made (KIP-814).
			old.clientID, old.clientHost = j.ClientID, j.ClientHost
			old.session, old.rebalance = j.SessionTimeout, max(j.RebalanceTimeout, j.SessionTimeout)
			old.heard = now
			r := g.joinResult(old, wasLeader)
			g.joinReply(j.Token, r)
			return
		}
		g.updateMember(now, old, j)
		g.prepareRebalance(now)
	case CompletingRebalance:
		// The leader may be assigning to the old id: start again.
		g.updateMember(now, old, j)
		g.prepareRebalance(now)
	default: // PreparingRebalance
		g.updateMember(now, old, j)
		g.maybeCompleteJoin(now)
	}
}

// joinResult is a member's answer for the current generation.
func (g *Group) joinResult(m *member, skipAssignment bool) JoinResult {
	r := JoinResult{Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol, Leader: g.leader,
		MemberID: m.id, SkipAssignment: skipAssignment}
	if m.id == g.leader {
		for _, o := range g.ordered() {
			r.Members = append(r.Members, Member{ID: o.id, InstanceID: o.instance, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (g *Group) rebalanceTimeout() time.Duration {
	var t time.Duration
	for _, m := range g.members {
		t = max(t, m.rebalance)
	}
	return t
}

// prepareRebalance starts a join phase: every member must join again.
func (g *Group) prepareRebalance(now time.Time) {
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			if m.syncing {
				g.syncReply(m.syncToken, SyncResult{Err: kerr.RebalanceInProgress.Code})
				m.syncing = false
			}
		}
	}
	fromEmpty := g.state == Empty
	g.state = PreparingRebalance
	g.started = now
	g.joinDeadline = now.Add(g.rebalanceTimeout())
	g.initialUntil = time.Time{}
	if fromEmpty && g.cfg.InitialRebalanceDelay > 0 {
		g.initialUntil = now.Add(min(g.cfg.InitialRebalanceDelay, g.rebalanceTimeout()))
	}
	g.maybeCompleteJoin(now)
}

// maybeCompleteJoin ends the join phase once every member joined again (and no
// member id handed out is still to join), or at the rebalance timeout; an empty
// group's first join phase ends when its initial delay has passed.
func (g *Group) maybeCompleteJoin(now time.Time) {
	if g.state != PreparingRebalance {
		return
	}
	if !g.initialUntil.IsZero() {
		if now.Before(g.initialUntil) {
			return
		}
		g.completeJoin(now)
		return
	}
	all := len(g.pending) == 0
	for _, m := range g.members {
		if !m.joining {
			all = false
		}
	}
	if all || !now.Before(g.joinDeadline) {
		g.completeJoin(now)
	}
}

// completeJoin ends a join phase: members that did not join again are removed, and
// the others get the new generation, the leader with every member's metadata.
func (g *Group) completeJoin(now time.Time) {
	for _, m := range g.ordered() {
		if !m.joining {
			g.remove(m, kerr.UnknownMemberID.Code)
		}
	}
	g.initialUntil = time.Time{}
	g.generation++
	g.rebalanced = true
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = Empty, "", ""
		return
	}
	g.state = CompletingRebalance
	g.protocol = g.selectProtocol()
	members := g.ordered()
	if g.members[g.leader] == nil {
		g.leader = members[0].id
	}
	for _, m := range members {
		m.assignment = nil
		m.joining = false
		m.heard = now
		g.joinReply(m.joinToken, g.joinResult(m, false))
	}
}

// selectProtocol picks the protocol every member supports that most members
// prefer (each votes for the first of its list all support); a tie goes to the
// leader's preference, or the first member's.
func (g *Group) selectProtocol() string {
	members := g.ordered()
	var candidates []string
	for _, p := range members[0].protocols {
		all := true
		for _, m := range members[1:] {
			if !m.supports(p.Name) {
				all = false
				break
			}
		}
		if all {
			candidates = append(candidates, p.Name)
		}
	}
	votes := map[string]int{}
	for _, m := range members {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	prefer := members[0]
	if l := g.members[g.leader]; l != nil {
		prefer = l
	}
	best, bestVotes := "", -1
	for _, p := range prefer.protocols {
		if slices.Contains(candidates, p.Name) && votes[p.Name] > bestVotes {
			best, bestVotes = p.Name, votes[p.Name]
		}
	}
	return best
}

// ---------------------------------------------------------------------------------
// SyncGroup, Heartbeat, LeaveGroup, commits

// Sync handles a SyncGroup request; its answer comes in a Ready, now or when the
// leader's SyncGroup brings the assignments.
func (g *Group) Sync(now time.Time, s Sync) {
	fail := func(code int16) { g.syncReply(s.Token, SyncResult{Err: code}) }
	m := g.members[s.MemberID]
	switch {
	case g.state == Dead:
		fail(kerr.CoordinatorNotAvailable.Code)
		return
	case m == nil:
		fail(kerr.UnknownMemberID.Code)
		return
	case m.instance != s.InstanceID:
		fail(kerr.FencedInstanceID.Code)
		return
	case s.Generation != g.generation:
		fail(kerr.IllegalGeneration.Code)
		return
	case s.ProtocolType != nil && *s.ProtocolType != g.protocolType, s.Protocol != nil && *s.Protocol != g.protocol:
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	switch g.state {
	case PreparingRebalance:
		fail(kerr.RebalanceInProgress.Code)
	case CompletingRebalance:
		if m.syncing {
			g.syncReply(m.syncToken, SyncResult{Err: kerr.RebalanceInProgress.Code})
		}
		m.syncing, m.syncToken, m.heard = true, s.Token, now
		if m.id != g.leader {
			return
		}
		for _, a := range s.Assignments {
			if o := g.members[a.MemberID]; o != nil {
				o.assignment = a.Data
			}
		}
		g.state = Stable
		for _, o := range g.ordered() {
			if o.syncing {
				o.syncing = false
				o.heard = now
				g.syncReply(o.syncToken, SyncResult{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: o.assignment})
			}
		}
	case Stable:
		m.heard = now
		g.syncReply(s.Token, SyncResult{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment})
	default:
		fail(kerr.UnknownMemberID.Code)
	}
}

// check is the validation Heartbeat and CheckCommit share.
func (g *Group) check(memberID, instanceID string, generation int32) (*member, int16) {
	if g.state == Dead {
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	if instanceID != "" {
		if id, ok := g.static[instanceID]; ok && id != memberID {
			return nil, kerr.FencedInstanceID.Code
		}
	}
	m := g.members[memberID]
	if m == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	if generation != g.generation {
		return nil, kerr.IllegalGeneration.Code
	}
	return m, 0
}

// Heartbeat handles a Heartbeat request: the member stays in the group for another
// session timeout, and learns of a rebalance with REBALANCE_IN_PROGRESS.
func (g *Group) Heartbeat(now time.Time, memberID, instanceID string, generation int32) int16 {
	m, code := g.check(memberID, instanceID, generation)
	if code != 0 {
		return code
	}
	m.heard = now
	if g.state == PreparingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// CheckCommit says whether an OffsetCommit may store its offsets, as Kafka's
// coordinator decides: a member of the current generation (its commit counts as a
// heartbeat), or anyone with generation -1 while the group is empty (a consumer
// that assigns partitions itself).
//
// conn identifies the client connection the commit came over, a later connection
// a larger number. A member's commit over an older connection than one it has
// committed over already is refused with REQUEST_TIMED_OUT: a client that gave up
// on a connection (a read timeout) sends its commits again over a new one, and a
// commit it sent before, read from the old connection only later (the network
// held it), must not overwrite the newer offsets. The caller stores the offsets of
// commits this accepts in the order it accepted them.
func (g *Group) CheckCommit(now time.Time, memberID, instanceID string, generation int32, conn uint64) int16 {
	if generation < 0 && g.state == Empty {
		return 0
	}
	m, code := g.check(memberID, instanceID, generation)
	if code != 0 {
		return code
	}
	if g.state == CompletingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	m.heard = now
	if conn < m.commitConn {
		return kerr.RequestTimedOut.Code
	}
	m.commitConn = conn
	return 0
}

// Leave handles one member of a LeaveGroup request: by member id, or by instance
// id for a static member (then a member id given must be its).
func (g *Group) Leave(now time.Time, memberID, instanceID string) int16 {
	if g.state == Dead {
		return kerr.CoordinatorNotAvailable.Code
	}
	if instanceID != "" {
		id, ok := g.static[instanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if memberID != "" && memberID != id {
			return kerr.FencedInstanceID.Code
		}
		memberID = id
	} else if _, ok := g.pending[memberID]; ok {
		delete(g.pending, memberID)
		g.maybeCompleteJoin(now)
		return 0
	}
	m := g.members[memberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	g.remove(m, kerr.UnknownMemberID.Code)
	g.afterRemoval(now)
	return 0
}

// remove drops a member, answering its parked requests with code.
func (g *Group) remove(m *member, code int16) {
	if m.joining {
		g.joinReply(m.joinToken, JoinResult{Err: code, MemberID: m.id, Generation: -1})
	}
	if m.syncing {
		g.syncReply(m.syncToken, SyncResult{Err: code})
	}
	delete(g.members, m.id)
	if m.instance != "" && g.static[m.instance] == m.id {
		delete(g.static, m.instance)
	}
	if g.leader == m.id {
		g.leader = ""
		if o := g.ordered(); len(o) > 0 {
			g.leader = o[0].id
		}
	}
}

// afterRemoval starts the rebalance a member's departure calls for.
func (g *Group) afterRemoval(now time.Time) {
	switch g.state {
	case Stable, CompletingRebalance:
		g.prepareRebalance(now)
	case PreparingRebalance:
		g.maybeCompleteJoin(now)
	}
}

// Tick handles what time brings: members whose session timed out leave, member ids
// handed out and never used expire, and a join phase ends at its timeout.
func (g *Group) Tick(now time.Time) {
	if g.state == Dead {
		return
	}
	for id, at := range g.pending {
		if !now.Before(at) {
			delete(g.pending, id)
		}
	}
	removed := false
	for _, m := range g.ordered() {
		if !m.joining && !m.syncing && !now.Before(m.heard.Add(m.session)) {
			g.remove(m, kerr.UnknownMemberID.Code)
			removed = true
		}
	}
	if removed {
		g.afterRemoval(now)
	}
	g.maybeCompleteJoin(now)
}

// deadline is the earliest time Tick has something to do.
func (g *Group) deadline() time.Time {
	var at time.Time
	until := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if g.state == Dead {
		return at
	}
	for _, t := range g.pending {
		until(t)
	}
	for _, m := range g.members {
		if !m.joining && !m.syncing {
			until(m.heard.Add(m.session))
		}
	}
	if g.state == PreparingRebalance {
		if !g.initialUntil.IsZero() {
			until(g.initialUntil)
		} else {
			until(g.joinDeadline)
		}
	}
	return at
}

// Delete ends an empty group (DeleteGroups): it answers NON_EMPTY_GROUP while the
// group has members, and from then on the group is Dead.
func (g *Group) Delete() int16 {
	switch g.state {
	case Dead:
		return kerr.GroupIDNotFound.Code
	case Empty:
		g.state = Dead
		return 0
	}
	return kerr.NonEmptyGroup.Code
}

// ---------------------------------------------------------------------------------
// Description

// Description is a group as DescribeGroups shows it.
type Description struct {
	State        State
	ProtocolType string
	Protocol     string // "" unless Stable or CompletingRebalance
	Members      []MemberDescription
}

// MemberDescription is one member: its metadata for the group's protocol and its
// assignment once the group is Stable.
type MemberDescription struct {
	ID, InstanceID       string
	ClientID, ClientHost string
	Metadata, Assignment []byte
}

// Subscriptions lists the metadata of every protocol of every member (for a
// consumer group, kmsg.ConsumerMemberMetadata: the topics each subscribes to),
// whatever the group's state; none when the group is empty.
func (g *Group) Subscriptions() [][]byte {
	var out [][]byte
	for _, m := range g.ordered() {
		for _, p := range m.protocols {
			out = append(out, p.Metadata)
		}
	}
	return out
}

// Describe describes the group.
func (g *Group) Describe() Description {
	d := Description{State: g.state, ProtocolType: g.protocolType}
	if g.state == Stable || g.state == CompletingRebalance {
		d.Protocol = g.protocol
	}
	for _, m := range g.ordered() {
		md := MemberDescription{ID: m.id, InstanceID: m.instance, ClientID: m.clientID, ClientHost: m.clientHost}
		if g.state == Stable {
			md.Metadata, md.Assignment = m.metadata(g.protocol), m.assignment
		}
		d.Members = append(d.Members, md)
	}
	return d
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
