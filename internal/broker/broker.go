package broker

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/filter"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/subject"
)

// Message is a message being routed. Its byte slices belong to the publisher and are
// valid only during Publish; a Sink that keeps the message must copy what it keeps.
type Message struct {
	Subject []byte
	// Route, when set, is the subject the message is routed by instead of Subject:
	// the stream engine delivers a stored message, under its own subject, to a
	// consumer's delivery or inbox subject.
	Route []byte
	Reply []byte
	// Header is the encoded header block (the native wire encoding is the canonical
	// header encoding of every front end), nil when the message has none.
	Header header.Block
	// Payload is the message body.
	Payload []byte
	// Origin is the sink of the publishing client, used to skip its own
	// subscriptions when it asked for no echo; nil for messages the server makes.
	Origin Sink
	// Acker, when set, takes the answer of a stream that captures the message in
	// process, instead of a pub-ack message on Reply, with AckTag: the Kafka API,
	// which answers a produce request's records together. It does not cross a
	// route: a stream on another node answers on Reply.
	Acker  Acker
	AckTag uint64
	// QoS is the delivery guarantee the publisher asked for (MQTT QoS 0, 1 or 2);
	// front ends without the notion leave it 0. Subscribers get at most this.
	QoS uint8
	// Retain marks a message the publisher asked the server to keep for future
	// subscribers (MQTT retained messages); front ends may show it to subscribers.
	Retain bool
	// Group, when set, restricts delivery to one member of that queue group: plain
	// subscribers and other groups do not get the message (a push consumer's
	// deliver group).
	Group string
	// FromRoute marks a message another cluster node forwarded: it is never given to
	// a Remote sink (one hop), and only the queue groups in Queues deliver it.
	FromRoute bool
	// Queues, for a message FromRoute, names the queue groups for which the sending
	// node chose this one: each delivers it to one local member.
	Queues []string
}

// Acker takes a stream's answers to the messages published with it
// (Message.Acker), in the order they were published.
type Acker interface {
	// StreamAck answers n messages published one after another with tag: stored
	// at sequences seq to seq+n-1 of partition part (dup: stored before), or,
	// when code (a streamapi error code) is not 0, refused for reason err.
	StreamAck(tag uint64, part int, seq uint64, n int, dup bool, code int, err string)
}

// Sink is a destination for deliveries: one client connection of any protocol.
type Sink interface {
	// Deliver queues m for sub on the sink's outbound buffer. It must not block and
	// must copy what it keeps of m. It returns false if the message was not queued
	// (the sink is closed, or slow and dropping).
	Deliver(sub *Subscription, m *Message) bool
	// Flush wakes the sink's writer so that what Deliver queued is sent. It must not
	// block.
	Flush()
}

// InlineFlusher is implemented by sinks whose writer's work the publishing
// goroutine may do itself while that writer is idle (a stream's writer commits,
// or for a replicated stream proposes, a captured batch on the publisher's
// goroutine): two goroutine wake-ups less per batch, which a client that keeps
// few requests in flight feels (a Kafka producer). Batch.FlushInline
// calls it in place of Flush; unlike Flush it may take locks of the sink and
// write to disk and the network.
type InlineFlusher interface {
	FlushInline()
}

// Grouper is implemented by sinks that can keep a publisher's run of messages
// together: a stream stores a Kafka record batch's records at consecutive
// sequences, with no other publisher's message between them, as the batch's
// answer (one base offset) says. Between Batch.BeginGroup and the batch's next
// flush, Publish hands such a sink its messages with DeliverGroup; the flush
// ends the group (EndGroup) before it wakes the sink.
type Grouper interface {
	// DeliverGroup is Deliver for a message of a group. stage is what the sink
	// returned for the group's previous message (nil for its first); the sink
	// returns what to pass next and to EndGroup.
	DeliverGroup(sub *Subscription, m *Message, stage any) (next any, ok bool)
	// EndGroup queues the group's messages, together.
	EndGroup(stage any)
}

// Staller is implemented by sinks that apply flow control (internal/outbound holds
// the one implementation and its thresholds): when a sink's queue is
// filling faster than it drains but it is still sending, publishers that delivered to
// it wait briefly for progress (Batch.WaitStalled) instead of overrunning it.
type Staller interface {
	// Stall returns a channel closed when the sink next makes progress, or nil when
	// publishers need not wait.
	Stall() <-chan struct{}
	// Stuck tells the sink a publisher waited in vain; it stops asking publishers to
	// wait until it has drained.
	Stuck()
}

// MultiSink is implemented by sinks that send one copy of a message however many of
// their plain subscriptions match it (MQTT 5: overlapping subscriptions of one client
// make one PUBLISH carrying every matching subscription's identifier). The broker
// hands the sink's eligible plain subscriptions marked with SetCoalesce that a message
// matches, when there are at least two, in one DeliverMatched call; a single one still
// goes through Deliver. Queue group members are never coalesced.
type MultiSink interface {
	Sink
	// DeliverMatched is Deliver for several subscriptions of this sink at once. subs
	// is the broker's scratch, valid only during the call. It returns false when the
	// message was not queued; every subscription then counts as not delivered.
	DeliverMatched(subs []*Subscription, m *Message) bool
}

// Remover is implemented by sinks that keep their own table of subscriptions; the
// broker tells them when a subscription ends by reaching its message limit.
type Remover interface {
	Removed(sub *Subscription)
}

// Subscription is one subscriber's interest in a subject.
type Subscription struct {
	Sink    Sink
	SID     uint64 // the client's id for the subscription
	Subject string
	Queue   string         // queue group, "" for a plain subscriber
	Filter  *filter.Filter // nil: every matching message
	// NoEcho skips messages whose Origin is this subscription's Sink.
	NoEcho bool
	// NodeLocal marks a service every node runs for itself (the stream API and
	// acks until streams are replicated): the InterestObserver is not told of it,
	// so other nodes do not forward its subjects here.
	NodeLocal bool

	// Weight is, for a queue-group subscription of a Remote sink, how many members
	// the group has on that node (0 counts as 1): a group without local members
	// spreads messages over nodes in proportion.
	Weight uint32

	remote    Remote                                    // Sink, when it is a Remote
	permit    atomic.Pointer[func(subject []byte) bool] // see SetPermit
	coalesce  atomic.Bool                               // see SetCoalesce
	max       atomic.Uint64                             // stop after this many deliveries; 0 = no limit
	delivered atomic.Uint64
	closed    atomic.Bool
}

// SetPermit makes f (nil: none) the check each message the subscription
// matches must pass, asked about its subject from publishers' goroutines: the
// subscriber's permissions may deny some subjects its filter matches. It may be
// set before Subscribe, or changed while the subscription is live (its
// subscriber's permissions changed); a message routed meanwhile may see the old
// one.
func (s *Subscription) SetPermit(f func(subject []byte) bool) {
	if f == nil {
		s.permit.Store(nil)
		return
	}
	s.permit.Store(&f)
}

// SetCoalesce marks a plain subscription of a MultiSink whose deliveries the sink
// takes together with those of its other marked subscriptions that match the same
// message. A sink marks only subscriptions that can overlap, so that the many that
// cannot cost the broker no grouping. The sink is compared and hashed, so it must
// be a pointer (as every sink is). The mark may change while the subscription is
// live; a message routed meanwhile may see the old one.
func (s *Subscription) SetCoalesce(on bool) { s.coalesce.Store(on) }

// Delivered reports how many messages this subscription has been given.
func (s *Subscription) Delivered() uint64 { return s.delivered.Load() }

// Closed reports whether the subscription has been removed or reached its limit.
func (s *Subscription) Closed() bool { return s.closed.Load() }

// Errors returned by Subscribe and Unsubscribe; callers branch with errors.Is.
var (
	ErrBadSubject = errors.New("broker: invalid subject")
	ErrBadQueue   = errors.New("broker: invalid queue group")
	ErrNotFound   = errors.New("broker: subscription not found")
)

// Broker routes messages from publishers to subscriptions. It is safe for concurrent
// use by any number of publishing and subscribing clients.
type Broker struct {
	subs     *subject.Sublist[*Subscription]
	observer atomic.Pointer[InterestObserver]
}

// New returns an empty broker.
func New() *Broker {
	return &Broker{subs: subject.NewSublist[*Subscription]()}
}

// Subscribe registers sub. Its subject must be a valid filter and its queue, if any, a
// valid queue group name.
func (b *Broker) Subscribe(sub *Subscription) error {
	if err := subject.ValidateFilter([]byte(sub.Subject)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSubject, err)
	}
	if sub.Queue != "" {
		if err := subject.ValidateQueue([]byte(sub.Queue)); err != nil {
			return fmt.Errorf("%w: %w", ErrBadQueue, err)
		}
	}
	sub.remote, _ = sub.Sink.(Remote)
	if err := b.subs.Insert(sub.Subject, sub.Queue, sub); err != nil {
		return fmt.Errorf("subscribe %q: %w", sub.Subject, err)
	}
	b.interest(sub, 1)
	return nil
}

// Unsubscribe removes sub; removing it again, or after it reached its message limit,
// is a no-op. Messages being routed concurrently may still reach its sink.
func (b *Broker) Unsubscribe(sub *Subscription) error {
	if sub.closed.Swap(true) {
		return nil
	}
	if err := b.subs.Remove(sub.Subject, sub.Queue, sub); err != nil {
		if errors.Is(err, subject.ErrNotFound) {
			return fmt.Errorf("unsubscribe %q: %w", sub.Subject, ErrNotFound)
		}
		return fmt.Errorf("unsubscribe %q: %w", sub.Subject, err)
	}
	b.interest(sub, -1)
	return nil
}

// AutoUnsubscribe makes sub stop after max deliveries in total (counting those it has
// had). If it already had that many it is removed at once.
func (b *Broker) AutoUnsubscribe(sub *Subscription, max uint64) error {
	sub.max.Store(max)
	if sub.delivered.Load() >= max {
		return b.Unsubscribe(sub)
	}
	return nil
}

// HasInterest reports whether any subscription matches subject.
func (b *Broker) HasInterest(subject []byte) bool {
	r := b.subs.Match(subject)
	return len(r.Plain) > 0 || len(r.Groups) > 0
}

// Count reports the number of subscriptions.
func (b *Broker) Count() int { return b.subs.Count() }

// Batch collects the sinks a publishing client has delivered to since its last Flush,
// so each is woken once per batch rather than once per message. A Batch belongs to one
// publishing goroutine; the zero value is ready to use.
type Batch struct {
	pending map[Sink]struct{}
	stalls  []stall
	last    Sink // most recent Add, to skip the map for runs to one sink
	fm      filter.Message
	hdr     header.Block
	co      coalescer
	remotes []remoteTarget
	match   subject.Memo[*Subscription] // the last subject published and its subscribers

	grouping bool         // since BeginGroup, until the next flush
	groups   []groupStage // the Groupers delivered to in the group
}

// groupStage is a Grouper's part of a group.
type groupStage struct {
	sink  Grouper
	stage any
}

// BeginGroup makes the messages published until the next Flush or FlushInline a
// group: each Grouper sink among their destinations takes its share together.
func (p *Batch) BeginGroup() { p.grouping = true }

// deliverGroup hands m to g as part of the group.
func (p *Batch) deliverGroup(g Grouper, sub *Subscription, m *Message) bool {
	i := 0
	for i < len(p.groups) && p.groups[i].sink != g {
		i++
	}
	if i == len(p.groups) {
		p.groups = append(p.groups, groupStage{sink: g})
	}
	next, ok := g.DeliverGroup(sub, m, p.groups[i].stage)
	p.groups[i].stage = next
	return ok
}

// deliverTo hands m to sub's sink, in the group when there is one and the sink
// is a Grouper.
func (p *Batch) deliverTo(sub *Subscription, m *Message) bool {
	if p.grouping {
		if g, ok := sub.Sink.(Grouper); ok {
			return p.deliverGroup(g, sub, m)
		}
	}
	return sub.Sink.Deliver(sub, m)
}

// endGroup ends the group: every Grouper queues its share.
func (p *Batch) endGroup() {
	for i := range p.groups {
		if p.groups[i].stage != nil {
			p.groups[i].sink.EndGroup(p.groups[i].stage)
		}
		p.groups[i] = groupStage{}
	}
	p.groups, p.grouping = p.groups[:0], false
}

// Add records that s needs a Flush; publishers call it for control frames they queue
// on their own connection.
func (p *Batch) Add(s Sink) {
	if s == p.last {
		return
	}
	p.last = s
	if p.pending == nil {
		p.pending = make(map[Sink]struct{}, 8)
	}
	p.pending[s] = struct{}{}
}

type stall struct {
	sink Staller
	ch   <-chan struct{}
}

// Flush wakes every sink delivered to since the last Flush and notes those asking
// publishers to wait.
func (p *Batch) Flush() { p.flush(false) }

// FlushInline is Flush for a publisher that holds no lock and may do the work
// of the sinks that offer it (InlineFlusher) on its own goroutine: a client
// connection's reader after a read.
func (p *Batch) FlushInline() { p.flush(true) }

func (p *Batch) flush(inline bool) {
	if p.grouping {
		p.endGroup()
	}
	for s := range p.pending {
		if f, ok := s.(InlineFlusher); ok && inline {
			f.FlushInline()
		} else {
			s.Flush()
		}
		if st, ok := s.(Staller); ok {
			if ch := st.Stall(); ch != nil {
				p.stalls = append(p.stalls, stall{st, ch})
			}
		}
	}
	clear(p.pending)
	p.last = nil
}

// WaitStalled waits, at most max in all, for each sink noted by Flush to make
// progress; a sink that makes none in time is told it is Stuck and will not hold
// publishers again until it drains. It returns at once when no sink is stalled.
func (p *Batch) WaitStalled(max time.Duration) {
	if len(p.stalls) == 0 {
		return
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	expired := false
	for _, s := range p.stalls {
		if expired {
			s.sink.Stuck()
			continue
		}
		select {
		case <-s.ch:
		case <-timer.C:
			expired = true
			s.sink.Stuck()
		}
	}
	clear(p.stalls)
	p.stalls = p.stalls[:0]
}

// Publish routes m to its subscribers and returns how many subscriptions matched and
// were eligible (its filter accepted, not its own when no echo). Subjects must have
// been validated by the caller (subject.ValidatePublish). The sinks delivered to are
// added to p; the caller calls p.Flush after a batch of publishes.
func (b *Broker) Publish(p *Batch, m *Message) int {
	route := m.Subject
	if m.Route != nil {
		route = m.Route
	}
	r := b.subs.MatchMemo(&p.match, route)
	if len(r.Plain) == 0 && len(r.Groups) == 0 {
		return 0
	}
	filtered := false
	matched := 0
	if m.Group == "" {
		for _, sub := range r.Plain {
			if sub.remote != nil {
				if !m.FromRoute && !sub.closed.Load() && p.toRemote(sub.remote, "") {
					matched++
				}
				continue
			}
			if !b.eligible(p, sub, m, &filtered) {
				continue
			}
			matched++
			if sub.coalesce.Load() {
				p.co.subs = append(p.co.subs, sub)
				continue
			}
			b.deliver(p, sub, m)
		}
		if len(p.co.subs) > 0 {
			b.deliverCoalesced(p, m)
		}
	}
	for _, g := range r.Groups {
		if m.Group != "" && g.Name != m.Group || m.FromRoute && !slices.Contains(m.Queues, g.Name) {
			continue
		}
		n := uint32(len(g.Members))
		start := g.Cursor.Add(1)
		found, remotes := false, false
		for i := uint32(0); i < n; i++ {
			sub := g.Members[(start+i)%n]
			if sub.remote != nil {
				remotes = true
				continue
			}
			if !b.eligible(p, sub, m, &filtered) {
				continue
			}
			if !found {
				found = true
				matched++
			}
			if b.deliver(p, sub, m) {
				break
			}
		}
		if !found && remotes && !m.FromRoute {
			if rs := pickRemote(g.Members, start); rs != nil {
				p.toRemote(rs, g.Name)
				matched++
			}
		}
	}
	if len(p.remotes) > 0 {
		p.deliverRemotes(m)
	}
	return matched
}

func (b *Broker) eligible(p *Batch, sub *Subscription, m *Message, filtered *bool) bool {
	if sub.closed.Load() {
		return false
	}
	if sub.NoEcho && m.Origin == sub.Sink && m.Origin != nil {
		return false
	}
	if f := sub.permit.Load(); f != nil && !(*f)(m.Subject) {
		return false
	}
	if sub.Filter != nil {
		if !*filtered {
			*filtered = true
			p.hdr = m.Header
			p.fm = filter.Message{Subject: m.Subject, Size: len(m.Payload)}
			if len(m.Header) > 0 {
				p.fm.Headers = &p.hdr
			}
		}
		return sub.Filter.Match(&p.fm)
	}
	return true
}

// take counts a delivery to sub ahead of it; it reports false, and counts nothing
// more, when sub has had its limit. n is the count including this delivery.
func take(sub *Subscription) (n, max uint64, ok bool) {
	max = sub.max.Load()
	n = sub.delivered.Add(1)
	return n, max, max == 0 || n <= max
}

// untake takes back a delivery counted by take that the sink refused.
func untake(sub *Subscription) { sub.delivered.Add(^uint64(0)) }

// reachedLimit ends sub, whose delivery numbered by its limit was made.
func (b *Broker) reachedLimit(sub *Subscription) {
	if !sub.closed.Swap(true) {
		if b.subs.Remove(sub.Subject, sub.Queue, sub) == nil {
			b.interest(sub, -1)
		}
		if r, ok := sub.Sink.(Remover); ok {
			r.Removed(sub)
		}
	}
}

// deliver hands m to sub's sink and enforces the subscription's message limit.
func (b *Broker) deliver(p *Batch, sub *Subscription, m *Message) bool {
	n, max, ok := take(sub)
	if !ok {
		return false
	}
	if !p.deliverTo(sub, m) {
		untake(sub)
		return false
	}
	p.Add(sub.Sink)
	if max != 0 && n == max {
		b.reachedLimit(sub)
	}
	return true
}
