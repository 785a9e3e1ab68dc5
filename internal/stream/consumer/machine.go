package consumer

import (
	"cmp"
	"container/heap"
	"slices"
	"sort"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Defaults of settings left zero in Config.
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 10000
	DefaultInactive      = 5 * time.Second
	DefaultMemberTimeout = 10 * time.Second
	DefaultPullExpires   = 30 * time.Second
	DefaultMaxWaiting    = 512
)

// Config is what the machine needs of a consumer's configuration.
type Config struct {
	Partitions    int
	AckPolicy     streamapi.AckPolicy
	AckWait       time.Duration
	Backoff       []time.Duration // ack wait per delivery; the last repeats
	MaxDeliver    int             // 0: no limit
	MaxAckPending int
	// Push: messages go to a deliver subject while it has subscribers, instead of
	// answering pull requests.
	Push bool
	// Ephemeral consumers end after Inactive without pulls or push subscribers.
	Ephemeral     bool
	Inactive      time.Duration
	MemberTimeout time.Duration // a group member that stops pulling leaves after this
	MaxWaiting    int           // pull requests queued
	// Journal: record every change in Ready.Journal (durable consumers).
	Journal bool
}

// FromAPI derives the machine's configuration from a consumer's API configuration.
func FromAPI(c streamapi.ConsumerConfig, partitions int, durable bool) Config {
	cfg := Config{
		Partitions: partitions, AckPolicy: c.AckPolicy, AckWait: time.Duration(c.AckWait),
		MaxDeliver: c.MaxDeliver, MaxAckPending: c.MaxAckPending, Push: c.DeliverSubject != "",
		Ephemeral: !durable, Inactive: time.Duration(c.InactiveThreshold),
		MemberTimeout: time.Duration(c.MemberTimeout), Journal: durable,
	}
	for _, b := range c.Backoff {
		cfg.Backoff = append(cfg.Backoff, time.Duration(b))
	}
	return cfg
}

func (c *Config) fillDefaults() {
	if c.AckPolicy == "" {
		c.AckPolicy = streamapi.AckExplicit
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.Inactive <= 0 {
		c.Inactive = DefaultInactive
	}
	if c.MemberTimeout <= 0 {
		c.MemberTimeout = DefaultMemberTimeout
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
}

// Key names a message: its partition and stream sequence.
type Key struct {
	Part int
	Seq  uint64
}

// Msg is a stream message as the Source reads it.
type Msg struct {
	Seq     uint64
	Subject []byte
	Header  []byte
	Payload []byte
	Time    int64
}

// Source reads the stream for the machine. Its answers must depend only on the
// stream's contents, so that replicas given the same log decide the same.
type Source interface {
	// Next returns the first message of partition part at or after seq that the
	// consumer's filter accepts. When there is none (yet), ok is false and resume is
	// where the next look starts: past messages the filter refused, or past
	// unreadable ones.
	Next(part int, seq uint64) (msg Msg, resume uint64, ok bool)
	// Read returns message seq of partition part, or ok false when it is gone.
	Read(part int, seq uint64) (msg Msg, ok bool)
}

// Delivery is a message the machine wants sent.
type Delivery struct {
	Key         Key
	Msg         Msg
	Deliveries  uint64 // 1 on first delivery
	ConsumerSeq uint64
	Redelivery  bool
	// Reply is the pull request's reply subject the message answers; nil for a push
	// consumer, whose messages go to its deliver subject.
	Reply []byte
	req   *pullRequest
}

// Status ends a pull request: Code is a streamapi status ("404", "408", "409"), or ""
// when the request is only dropped.
type Status struct {
	Reply       []byte
	Code        string
	Description string
	Member      string
}

// DeadLetter is a message that reached MaxDeliver or was terminated.
type DeadLetter struct {
	Key        Key
	Deliveries uint64
	Reason     string
}

// Ready is what the machine wants done since the last Advance.
type Ready struct {
	Statuses    []Status
	DeadLetters []DeadLetter
	// Retired lists messages the consumer is done with (acknowledged, or sent under
	// ack policy none), for work-queue and interest retention. Dead letters retire
	// once they are published.
	Retired []Key
	// Journal holds the encoded records of every change (Config.Journal), valid
	// until the next-but-one Advance.
	Journal []byte
	// Deadline is when Tick has work next; zero when there is none.
	Deadline time.Time
	// Remove: an ephemeral consumer stayed inactive and should be deleted.
	Remove bool
	// Members is the group's member list after it changed, nil when it did not.
	Members []string
}

// Machine is one consumer's state.
type Machine struct {
	cfg Config

	parts       []part
	pending     map[Key]*pendingMsg
	timers      redeliveryHeap
	waiting     []*pullRequest
	members     map[string]int64 // last pull, unix ns
	cseq        uint64
	redelivered uint64
	lastActive  int64
	interest    bool
	rr          int
	closed      bool
	// Group members whose partitions had nothing in this round of deliveries, so
	// that requests behind theirs are served.
	dry    []string
	allDry bool

	statuses     []Status
	dead         []DeadLetter
	retired      []Key
	journal      []byte
	spareJournal []byte
	remove       bool
	membersMoved bool
}

type part struct {
	next      uint64 // next stream sequence to consider for a first delivery
	redeliver []uint64
	backlog   []uint64 // last-per-subject start: delivered before next
	owner     string   // consumer-group member, "" when there are no members
	nextDirty bool
}

type pendingMsg struct {
	key        Key
	deliveries uint64
	deadline   int64
	idx        int // position in timers; -1 while queued for redelivery
}

type pullRequest struct {
	reply     []byte
	batch     int
	maxBytes  int
	expires   int64
	noWait    bool
	member    string
	sent      int
	sentBytes int
}

// New makes a machine at position st (State.Parts may be shorter than the
// partition count: missing partitions start at sequence 1). backlog, when not nil,
// lists per partition the messages to deliver before st's positions (deliver policy
// last per subject). Pending messages of st are due for redelivery an ack wait after
// now.
func New(cfg Config, st State, backlog [][]uint64, now time.Time) *Machine {
	cfg.fillDefaults()
	m := &Machine{
		cfg: cfg, parts: make([]part, cfg.Partitions), pending: make(map[Key]*pendingMsg),
		members: make(map[string]int64), lastActive: now.UnixNano(),
		cseq: st.ConsumerSeq, redelivered: st.Redelivered,
	}
	deadline := now.UnixNano() + int64(cfg.AckWait)
	for i := range m.parts {
		m.parts[i].next = 1
		if i < len(backlog) {
			m.parts[i].backlog = backlog[i]
		}
		if i >= len(st.Parts) {
			continue
		}
		p := st.Parts[i]
		m.parts[i].next = max(p.Next, 1)
		for _, e := range p.Pending {
			pm := &pendingMsg{key: Key{i, e[0]}, deliveries: e[1], deadline: deadline}
			m.pending[pm.key] = pm
			heap.Push(&m.timers, pm)
		}
	}
	return m
}

// State returns the snapshot of the machine's position.
func (m *Machine) State() State {
	st := State{ConsumerSeq: m.cseq, Redelivered: m.redelivered, Parts: make([]PartState, len(m.parts))}
	for i := range m.parts {
		st.Parts[i].Next = m.parts[i].next
	}
	for k, pm := range m.pending {
		st.Parts[k.Part].Pending = append(st.Parts[k.Part].Pending, [2]uint64{k.Seq, pm.deliveries})
	}
	for i := range st.Parts {
		slices.SortFunc(st.Parts[i].Pending, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	}
	return st
}

// Ready returns what the machine wants done. The caller acts on it and calls
// Advance before the next Ready.
func (m *Machine) Ready() Ready {
	if m.cfg.Journal {
		wrote := len(m.journal) > 0
		for i := range m.parts {
			if m.parts[i].nextDirty {
				m.journal = AppendRecord(m.journal, RecNext, uint64(i), m.parts[i].next)
				m.parts[i].nextDirty = false
				wrote = true
			}
		}
		if wrote {
			m.journal = AppendRecord(m.journal, RecConsumerSeq, m.cseq, m.redelivered)
		}
	}
	rd := Ready{
		Statuses: m.statuses, DeadLetters: m.dead, Retired: m.retired, Journal: m.journal,
		Deadline: m.deadline(), Remove: m.remove,
	}
	if m.membersMoved {
		rd.Members = m.Members()
	}
	return rd
}

// Advance tells the machine the last Ready was acted on.
func (m *Machine) Advance() {
	clear(m.statuses)
	m.statuses = m.statuses[:0]
	m.dead = m.dead[:0]
	m.retired = m.retired[:0]
	// The journal just handed out is being written outside the lock: new records go
	// to the other buffer.
	m.journal, m.spareJournal = m.spareJournal[:0], m.journal
	m.membersMoved = false
}

// deadline is the earliest time Tick has something to do.
func (m *Machine) deadline() time.Time {
	var at int64
	until := func(t int64) {
		if at == 0 || t < at {
			at = t
		}
	}
	for _, seen := range m.members {
		until(seen + int64(m.cfg.MemberTimeout) + 1)
	}
	if len(m.timers) > 0 {
		until(m.timers[0].deadline)
	}
	for _, r := range m.waiting {
		until(r.expires)
	}
	if m.cfg.Ephemeral && !m.remove {
		until(m.lastActive + int64(m.cfg.Inactive))
	}
	if at == 0 {
		return time.Time{}
	}
	return time.Unix(0, at)
}

// SetInterest tells a push consumer whether its deliver subject has subscribers: it
// delivers only while it has, and having them keeps an ephemeral consumer alive.
func (m *Machine) SetInterest(now time.Time, has bool) {
	m.interest = has
	if has {
		m.lastActive = now.UnixNano()
	}
}

// Tick handles what time brings: group members that stopped pulling leave, ack
// deadlines that passed make messages due again (or dead letters after MaxDeliver),
// pull requests that expired end, and an idle ephemeral consumer asks to be removed.
func (m *Machine) Tick(now time.Time) {
	m.clearDry()
	nowNs := now.UnixNano()
	changed := false
	for name, seen := range m.members {
		if nowNs-seen > int64(m.cfg.MemberTimeout) {
			delete(m.members, name)
			changed = true
		}
	}
	if changed {
		m.rebalance()
	}
	for len(m.timers) > 0 && m.timers[0].deadline <= nowNs {
		pm := heap.Pop(&m.timers).(*pendingMsg)
		if m.cfg.MaxDeliver > 0 && pm.deliveries >= uint64(m.cfg.MaxDeliver) {
			delete(m.pending, pm.key)
			m.record(RecAcked, uint64(pm.key.Part), pm.key.Seq)
			m.dead = append(m.dead, DeadLetter{Key: pm.key, Deliveries: pm.deliveries, Reason: "max deliveries reached"})
			continue
		}
		m.parts[pm.key.Part].redeliver = append(m.parts[pm.key.Part].redeliver, pm.key.Seq)
	}
	kept := m.waiting[:0]
	for _, r := range m.waiting {
		if r.expires <= nowNs {
			m.status(r, streamapi.StatusTimeout, "request expired")
			continue
		}
		kept = append(kept, r)
	}
	clear(m.waiting[len(kept):])
	m.waiting = kept
	if len(m.waiting) > 0 {
		m.lastActive = nowNs
	}
	if m.cfg.Ephemeral && nowNs-m.lastActive >= int64(m.cfg.Inactive) {
		m.remove = true
	}
}

// Purged tells the machine that partition part now starts at first: its position
// moves up to it.
func (m *Machine) Purged(part int, first uint64) {
	p := &m.parts[part]
	if p.next < first {
		p.next = first
		p.nextDirty = true
	}
}

// Close ends every waiting pull request ("consumer deleted").
func (m *Machine) Close() {
	m.closed = true
	for _, r := range m.waiting {
		m.status(r, streamapi.StatusConflict, "consumer deleted")
	}
	clear(m.waiting)
	m.waiting = m.waiting[:0]
}

func (m *Machine) record(typ byte, vals ...uint64) {
	if m.cfg.Journal {
		m.journal = AppendRecord(m.journal, typ, vals...)
	}
}

func (m *Machine) status(r *pullRequest, code, desc string) {
	m.statuses = append(m.statuses, Status{Reply: r.reply, Code: code, Description: desc, Member: r.member})
}

// ---------------------------------------------------------------------------------
// What the consumer looks like, for Info and retention.

// Redelivered counts deliveries after the first of a message.
func (m *Machine) Redelivered() uint64 { return m.redelivered }

// NumAckPending is how many delivered messages await an ack.
func (m *Machine) NumAckPending() int { return len(m.pending) }

// NumWaiting is how many pull requests wait.
func (m *Machine) NumWaiting() int { return len(m.waiting) }

// Position is the next sequence of partition part to consider for a first delivery.
func (m *Machine) Position(part int) uint64 { return m.parts[part].next }

// Backlog is how many last-per-subject messages of partition part wait.
func (m *Machine) Backlog(part int) int { return len(m.parts[part].backlog) }

// Owner is the group member partition part is assigned to ("" without members).
func (m *Machine) Owner(part int) string { return m.parts[part].owner }

// Assigned lists the partitions assigned to member.
func (m *Machine) Assigned(member string) []int {
	var out []int
	for i := range m.parts {
		if m.parts[i].owner == member {
			out = append(out, i)
		}
	}
	return out
}

// Members lists the group's members in name order.
func (m *Machine) Members() []string {
	names := make([]string, 0, len(m.members))
	for n := range m.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PendingIn returns how many messages of partition part await an ack and the
// lowest of their sequences (0 when none).
func (m *Machine) PendingIn(part int) (n int, lowest uint64) {
	for k := range m.pending {
		if k.Part == part {
			n++
			if lowest == 0 || k.Seq < lowest {
				lowest = k.Seq
			}
		}
	}
	return n, lowest
}

// Done reports whether the consumer is done with a message it would deliver: past
// its position and not awaiting an ack.
func (m *Machine) Done(key Key) bool {
	if key.Seq >= m.parts[key.Part].next {
		return false
	}
	_, pending := m.pending[key]
	return !pending
}

// redeliveryHeap orders pending messages by ack deadline, then by key, so that
// messages due together come back in stream order.
type redeliveryHeap []*pendingMsg

func (h redeliveryHeap) Len() int { return len(h) }
func (h redeliveryHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	if a.key.Part != b.key.Part {
		return a.key.Part < b.key.Part
	}
	return a.key.Seq < b.key.Seq
}
func (h redeliveryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *redeliveryHeap) Push(x any) {
	p := x.(*pendingMsg)
	p.idx = len(*h)
	*h = append(*h, p)
}
func (h *redeliveryHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.idx = -1
	return p
}
