package mqtt

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/subject"
)

// subEntry is one MQTT subscription of a session: one filter and its options, held in
// the broker as one or two subscriptions (a trailing '#' also matches its parent).
type subEntry struct {
	filter      string // as the client wrote it, $share prefix included
	qos         byte
	noLocal     bool
	rap         bool // retain as published
	subID       uint32
	shared      bool
	dollarGuard bool // the filter starts with a wildcard: '$' subjects do not match
	subs        []*broker.Subscription
}

// will is a connection's last will, published when it ends without DISCONNECT.
type will struct {
	msg   broker.Message // owns its bytes
	delay time.Duration
}

// session is the state MQTT keeps for a client id across connections: subscriptions,
// messages in flight and queued, and QoS 2 publishes received but not yet released.
// It is the broker Sink of all its subscriptions, whether its client is connected or
// not.
type session struct {
	srv *Server
	id  string

	mu      sync.Mutex
	conn    atomic.Pointer[conn] // nil while the client is away; set under mu
	gen     uint32
	nextSID uint32
	ended   bool
	loading bool // being restored from storage: nothing to write back
	// persisted: something of the session may be in the store. Most sessions
	// (clean ones) never are, and have nothing to delete when they end.
	persisted bool
	expiry    time.Duration // how long the session outlives its connection; <0 never ends
	subs      map[string]*subEntry
	bySub     map[*broker.Subscription]*subEntry
	fl        flight
	inQoS2    map[uint16]struct{} // QoS 2 publishes received, awaiting PUBREL
	timers    *sessionTimers      // while the session is offline
	nextMID   uint64              // ids of stored messages
}

// sessionTimers end an offline session and publish its delayed will.
type sessionTimers struct {
	expiry *time.Timer
	will   *will // a delayed will waiting to be published
	willT  *time.Timer
}

func newSession(s *Server, id string) *session {
	return &session{srv: s, id: id, fl: flight{window: int32(s.cfg.MaxInflight)}}
}

// queuePolicy is the server's for offline and overflowing messages.
func (s *session) queuePolicy() queuePolicy {
	return queuePolicy{maxQueue: s.srv.cfg.MaxQueued, dropOld: s.srv.cfg.QueuePolicy == PolicyDropOld, drop: s.forgetMsgLocked}
}

// timersLocked returns the session's timers, made on first use. s.mu is held.
func (s *session) timersLocked() *sessionTimers {
	if s.timers == nil {
		s.timers = &sessionTimers{}
	}
	return s.timers
}

// stopTimersLocked stops both timers and returns a will that was waiting. s.mu is held.
func (s *session) stopTimersLocked() *will {
	t := s.timers
	if t == nil {
		return nil
	}
	s.timers = nil
	if t.expiry != nil {
		t.expiry.Stop()
	}
	if t.willT != nil {
		t.willT.Stop()
	}
	return t.will
}

// ---------------------------------------------------------------------------------
// Storage. A session with a non-zero expiry keeps its state in the server's kvStore
// (when the server has a store directory); the *Locked methods run under s.mu.

func (s *session) storedLocked() bool {
	return s.srv.kv != nil && s.expiry != 0 && !s.loading && !s.ended
}

// saveLocked writes the session record: expiry and subscriptions.
func (s *session) saveLocked() {
	if !s.storedLocked() {
		return
	}
	rec := sessionRecord{Expiry: int64(s.expiry)}
	for _, e := range s.subs {
		rec.Subs = append(rec.Subs, subRecord{Filter: e.filter, QoS: e.qos, NoLocal: e.noLocal, RAP: e.rap, SubID: e.subID})
	}
	b, _ := json.Marshal(rec)
	s.putLocked(kvSession+s.id, b)
}

// putLocked writes a record of the session to the store.
func (s *session) putLocked(key string, val []byte) {
	s.persisted = true
	s.srv.kv.put(key, val)
}

// saveMsgLocked writes (or rewrites) a stored message.
func (s *session) saveMsgLocked(om *outMsg) {
	if om.mid != 0 && s.srv.kv != nil && !s.loading {
		s.putLocked(msgKey(s.id, om.mid), encodeOutMsg(om))
	}
}

func (s *session) forgetMsgLocked(om *outMsg) {
	if om.mid != 0 && s.srv.kv != nil {
		s.srv.kv.del(msgKey(s.id, om.mid))
		om.mid = 0
	}
}

// forgetLocked removes everything the session stored.
func (s *session) forgetLocked() {
	kv := s.srv.kv
	if kv == nil || !s.persisted {
		return
	}
	s.persisted = false
	kv.del(kvSession + s.id)
	for _, om := range s.fl.all() {
		s.forgetMsgLocked(om)
	}
	for pid := range s.inQoS2 {
		kv.del(qos2Key(s.id, pid))
	}
}

// storeAllLocked writes the whole session, for one that has just become persistent.
func (s *session) storeAllLocked() {
	if !s.storedLocked() {
		return
	}
	s.saveLocked()
	for _, om := range s.fl.all() {
		if om.mid == 0 { // stored already otherwise
			s.nextMID++
			om.mid = s.nextMID
			s.saveMsgLocked(om)
		}
	}
	for pid := range s.inQoS2 {
		s.putLocked(qos2Key(s.id, pid), nil)
	}
}

// takeConn detaches and returns the session's connection, if any (session takeover).
func (s *session) takeConn() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conn.Load()
	s.conn.Store(nil)
	return c
}

// bind makes c the session's connection. A will waiting for its delay is cancelled:
// the client came back in time.
func (s *session) bind(c *conn, expiry time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.conn.Store(c)
	s.expiry = expiry
	s.stopTimersLocked()
	s.fl.window = int32(min(s.srv.cfg.MaxInflight, int(c.receiveMax)))
	s.expiryChangedLocked()
}

// expiryChangedLocked stores a session that is now persistent and forgets one that
// is not.
func (s *session) expiryChangedLocked() {
	if s.srv.kv == nil || s.loading {
		return
	}
	if s.expiry == 0 {
		s.forgetLocked()
		return
	}
	s.storeAllLocked()
}

// unbind detaches c if it is still the session's connection; it returns the expiry.
func (s *session) unbind(c *conn) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn.Load() != c {
		return 0, false
	}
	s.conn.Store(nil)
	s.gen++
	return s.expiry, true
}

func (s *session) generation() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

func (s *session) online() bool {
	return s.conn.Load() != nil
}

func (s *session) setExpiryTimer(t *time.Timer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.timersLocked()
	if ts.expiry != nil {
		ts.expiry.Stop()
	}
	ts.expiry = t
}

// delayWill publishes w after its delay unless the client returns first; a session
// that ends sooner publishes it then.
func (s *session) delayWill(w *will) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.timersLocked()
	if ts.willT != nil {
		ts.willT.Stop()
	}
	ts.will = w
	ts.willT = time.AfterFunc(w.delay, func() {
		s.mu.Lock()
		pending := s.timers != nil && s.timers.will == w
		if pending {
			s.timers.will, s.timers.willT = nil, nil
		}
		s.mu.Unlock()
		if pending {
			s.srv.publish(&w.msg)
		}
	})
}

func (s *session) stopTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers; t != nil {
		if t.expiry != nil {
			t.expiry.Stop()
		}
		if t.willT != nil {
			t.willT.Stop()
		}
	}
}

// end removes the session's subscriptions and publishes a will still waiting.
func (s *session) end() {
	s.mu.Lock()
	s.forgetLocked()
	s.ended = true
	subs := make([]*broker.Subscription, 0, len(s.bySub))
	for sub := range s.bySub {
		subs = append(subs, sub)
	}
	s.subs = nil
	s.bySub = nil
	w := s.stopTimersLocked()
	s.mu.Unlock()
	for _, sub := range subs {
		_ = s.srv.broker.Unsubscribe(sub)
	}
	if w != nil {
		s.srv.publish(&w.msg)
	}
}

// subscribe adds or replaces the subscription of e.filter. It reports whether the
// filter was already subscribed (for retain handling 1).
func (s *session) subscribe(e *subEntry, subjects []string, queue string) (existed bool, err error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false, ErrServerClosed
	}
	old := s.subs[e.filter]
	coalesce := s.markOverlapsLocked(e)
	for _, subj := range subjects {
		s.nextSID++
		sub := &broker.Subscription{Sink: s, SID: uint64(s.nextSID), Subject: subj, Queue: queue, NoEcho: e.noLocal}
		sub.SetCoalesce(coalesce)
		e.subs = append(e.subs, sub)
		if s.bySub == nil {
			s.bySub = make(map[*broker.Subscription]*subEntry)
		}
		s.bySub[sub] = e
	}
	if s.subs == nil {
		s.subs = make(map[string]*subEntry)
	}
	s.subs[e.filter] = e
	s.mu.Unlock()
	for i, sub := range e.subs {
		if err = s.srv.broker.Subscribe(sub); err != nil {
			for _, done := range e.subs[:i] {
				_ = s.srv.broker.Unsubscribe(done)
			}
			s.mu.Lock()
			for _, sub := range e.subs {
				delete(s.bySub, sub)
			}
			if s.subs[e.filter] == e {
				if old != nil {
					s.subs[e.filter] = old
				} else {
					delete(s.subs, e.filter)
				}
			}
			s.mu.Unlock()
			return old != nil, err
		}
	}
	if old != nil {
		s.dropSubs(old)
	}
	s.mu.Lock()
	s.saveLocked()
	s.mu.Unlock()
	return old != nil, nil
}

// markOverlapsLocked has the broker coalesce the deliveries of e's subscriptions with
// those of every other non-shared subscription whose filter some topic also matches,
// and reports whether there is any. Subscriptions that overlap nothing, most of them,
// cost the broker no grouping. Marks stay after the overlapping filter goes: they
// then cost a little grouping, not a duplicate. The others are marked before e is in
// the broker, so a message that reaches e finds them marked. s.mu is held.
func (s *session) markOverlapsLocked(e *subEntry) bool {
	if e.shared {
		return false
	}
	found := false
	for f, o := range s.subs {
		if f == e.filter || o.shared || !filtersOverlap(f, e.filter) {
			continue
		}
		found = true
		for _, sub := range o.subs {
			sub.SetCoalesce(true)
		}
	}
	return found
}

// unsubscribe removes the subscription of filter; it reports whether there was one.
func (s *session) unsubscribe(filter string) bool {
	s.mu.Lock()
	e := s.subs[filter]
	if e != nil {
		delete(s.subs, filter)
	}
	s.mu.Unlock()
	if e == nil {
		return false
	}
	s.dropSubs(e)
	s.mu.Lock()
	s.saveLocked()
	s.mu.Unlock()
	return true
}

func (s *session) dropSubs(e *subEntry) {
	for _, sub := range e.subs {
		_ = s.srv.broker.Unsubscribe(sub)
	}
	s.mu.Lock()
	for _, sub := range e.subs {
		delete(s.bySub, sub)
	}
	s.mu.Unlock()
}

// Deliver implements broker.Sink.
func (s *session) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	one := [1]*broker.Subscription{sub}
	return s.DeliverMatched(one[:], m)
}

// DeliverMatched implements broker.MultiSink: the client gets one copy of a message
// that several of its subscriptions match (MQTT 5, 3.3.4; 3.1.1 allows it), at the
// highest QoS they were granted, with every one's subscription identifier. An
// identifier is sent once even when several of them have it: one SUBSCRIBE gives all
// its filters the same, and a filter ending in "/#" is two broker subscriptions. The
// retain flag is kept if any of them asked for retain as published: that
// subscription is owed the flag and the copy is its delivery too. Subscriptions with
// no local do not reach here for the client's own messages (the broker's NoEcho).
func (s *session) DeliverMatched(subs []*broker.Subscription, m *broker.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	var idBuf [4]uint32 // on the stack: QoS 0 delivery allocates nothing
	ids := idBuf[:0]
	var qos byte
	found, rap, shared := false, false, true
	for _, sub := range subs {
		e := s.bySub[sub]
		if e == nil || e.dollarGuard && IsDollar(m.Subject) {
			continue
		}
		found = true
		qos = max(qos, min(m.QoS, e.qos))
		rap = rap || e.rap
		shared = shared && e.shared
		if e.subID != 0 && !slices.Contains(ids, e.subID) {
			ids = append(ids, e.subID)
		}
	}
	if !found {
		return false
	}
	expireAt := expiryOf(m.Header)
	if expireAt != 0 && time.Now().UnixNano() >= expireAt {
		return true // expired on the way: delivered to nobody, by definition
	}
	retain := m.Retain && rap
	c := s.conn.Load()
	if qos == 0 {
		if c == nil {
			return false
		}
		return c.deliverQoS0(m, retain, ids, expireAt)
	}
	if c == nil && shared {
		return false // let an online member of the group have it
	}
	om := &outMsg{payload: append([]byte(nil), m.Payload...), qos: qos, retain: retain, expireAt: expireAt}
	if len(ids) > 0 {
		om.subIDs = make([]uint32, len(ids)) // not a slice of ids: idBuf would escape
		copy(om.subIDs, ids)
	}
	om.topic = string(AppendTopic(nil, m.Subject))
	if len(m.Header) > 0 {
		om.header = append([]byte(nil), m.Header...)
	}
	if len(m.Reply) > 0 {
		om.reply = string(AppendTopic(nil, m.Reply))
	}
	return s.sendOrQueueLocked(om)
}

// sendOrQueueLocked puts a QoS 1/2 message in flight if the window and the client
// allow, else queues it. s.mu is held.
func (s *session) sendOrQueueLocked(om *outMsg) bool {
	if s.storedLocked() {
		s.nextMID++
		om.mid = s.nextMID
	}
	if c := s.conn.Load(); c != nil && s.fl.canSend() {
		s.fl.start(om)
		s.saveMsgLocked(om)
		c.writeOut(om, false)
		return true
	}
	if !s.fl.enqueue(om, s.queuePolicy()) {
		om.mid = 0
		s.srv.queueDrops.Add(1)
		return false
	}
	s.saveMsgLocked(om)
	return true
}

// deliverRetained sends a retained message matched by a new subscription.
func (s *session) deliverRetained(e *subEntry, rm *retainedMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conn.Load()
	if c == nil || s.ended {
		return
	}
	qos := min(rm.qos, e.qos)
	om := &outMsg{
		topic: string(AppendTopic(nil, []byte(rm.subject))), payload: rm.payload, header: rm.header,
		qos: qos, retain: true, expireAt: rm.expireAt,
	}
	if e.subID != 0 {
		om.subIDs = []uint32{e.subID}
	}
	if rm.reply != "" {
		om.reply = string(AppendTopic(nil, []byte(rm.reply)))
	}
	if qos == 0 {
		c.writeOut(om, false)
		return
	}
	s.sendOrQueueLocked(om)
}

// Stall implements broker.Staller for the session's connection.
func (s *session) Stall() <-chan struct{} {
	if c := s.conn.Load(); c != nil {
		return c.q.Stall()
	}
	return nil
}

// Stuck implements broker.Staller.
func (s *session) Stuck() {
	if c := s.conn.Load(); c != nil {
		c.q.Stuck()
	}
}

// Flush implements broker.Sink.
func (s *session) Flush() {
	if c := s.conn.Load(); c != nil {
		c.Flush()
	}
}

// resume resends what was in flight when the client left (PUBLISH with DUP, or
// PUBREL after a PUBREC) and then what queued while it was away.
func (s *session) resume(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conn.Load()
	if c == nil {
		return
	}
	resend := s.fl.resend()
	for _, om := range resend {
		if om.pubrec {
			c.writeAck(packet.TypePubrel, om.pid, packet.Success)
			continue
		}
		c.writeOut(om, true)
	}
	s.pumpLocked(now)
	if len(resend) > 0 {
		c.Flush()
	}
}

// pumpLocked moves queued messages into the window and wakes the writer: outside a
// broker publish no batch flush will.
func (s *session) pumpLocked(now time.Time) {
	c := s.conn.Load()
	if c == nil {
		return
	}
	for sent := false; ; sent = true {
		om := s.fl.next(now, s.forgetMsgLocked)
		if om == nil {
			if sent {
				c.Flush()
			}
			return
		}
		s.fl.start(om)
		if om.qos == 2 {
			s.saveMsgLocked(om) // its packet id must survive a restart for exactly once
		}
		c.writeOut(om, false)
	}
}

// acked handles PUBACK and PUBCOMP.
func (s *session) acked(pid uint16, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	om := s.fl.ack(pid)
	if om != nil {
		s.forgetMsgLocked(om)
	}
	s.pumpLocked(now)
	return om != nil
}

// pubrec handles PUBREC; a failure reason ends the exchange at once.
func (s *session) pubrec(pid uint16, failed bool, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if failed {
		om := s.fl.ack(pid)
		if om != nil {
			s.forgetMsgLocked(om)
		}
		s.pumpLocked(now)
		return om != nil
	}
	om := s.fl.received(pid)
	if om != nil {
		s.saveMsgLocked(om)
	}
	return om != nil
}

// receivedQoS2 records an incoming QoS 2 publish; it reports false for a duplicate
// (already published, not yet released) and full when the receive maximum is reached.
func (s *session) receivedQoS2(pid uint16, limit int) (isNew, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.inQoS2[pid]; dup {
		return false, false
	}
	if len(s.inQoS2) >= limit {
		return false, true
	}
	s.markQoS2(pid)
	if s.storedLocked() {
		s.putLocked(qos2Key(s.id, pid), nil)
	}
	return true, false
}

// released handles PUBREL; it reports whether pid was awaiting release.
func (s *session) released(pid uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.inQoS2[pid]
	delete(s.inQoS2, pid)
	if ok && s.srv.kv != nil {
		s.srv.kv.del(qos2Key(s.id, pid))
	}
	return ok
}

func (s *session) setExpiry(d time.Duration) {
	s.mu.Lock()
	s.expiry = d
	s.expiryChangedLocked()
	s.mu.Unlock()
}

// newSubEntry prepares a subscription: the broker subjects of its filter and, for a
// shared subscription, its queue group.
func newSubEntry(filter string, qos byte, noLocal, rap bool, subID uint32) (e *subEntry, subjects []string, queue string, err error) {
	e = &subEntry{filter: filter, qos: min(qos, 2), noLocal: noLocal, rap: rap, subID: subID}
	match := filter
	group, inner, shared, err := packet.ParseShared(filter)
	if err != nil {
		return nil, nil, "", err
	}
	if shared {
		match, queue, e.shared = inner, string(appendLevel(nil, group)), true
		if err := subject.ValidateQueue([]byte(queue)); err != nil {
			return nil, nil, "", err
		}
	}
	if err := packet.ValidFilter(match); err != nil {
		return nil, nil, "", err
	}
	if subjects, err = FilterSubjects(match); err != nil {
		return nil, nil, "", err
	}
	e.dollarGuard = match[0] == '+' || match[0] == '#'
	return e, subjects, queue, nil
}

// restoreSub re-creates a stored subscription.
func (s *session) restoreSub(sr subRecord) error {
	e, subjects, queue, err := newSubEntry(sr.Filter, sr.QoS, sr.NoLocal, sr.RAP, sr.SubID)
	if err != nil {
		return err
	}
	_, err = s.subscribe(e, subjects, queue)
	return err
}

// markQoS2 records a QoS 2 publish received and not yet released. The sessions'
// maps are made on first use: most devices never subscribe or use QoS 2.
func (s *session) markQoS2(pid uint16) {
	if s.inQoS2 == nil {
		s.inQoS2 = make(map[uint16]struct{})
	}
	s.inQoS2[pid] = struct{}{}
}
