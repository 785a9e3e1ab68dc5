package mqtt

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
	"github.com/tern-mq/tern/internal/subject"
)

// outMsg is a QoS 1/2 message of a session, as the session machine keeps it and the
// store records it.
type outMsg = sm.OutMsg

// session drives the session machine (package mqtt/session) of one client id: it
// feeds it events under mu and applies the Ready that comes back — records to the
// kvStore, packets to the bound connection's outbound queue, subscriptions and wills
// to the broker — and arms one timer from the Ready's deadline while the client is
// away. It is the broker Sink of all its subscriptions, whether its client is
// connected or not.
//
// QoS 0 deliveries take no lock of the session: they route by its view, an
// immutable picture of its subscriptions and presence replaced under mu whenever
// those change, and write to the connection under the connection's outbound queue
// lock, which also guards the encoder and the topic aliases towards the client.
type session struct {
	srv *Server
	// id is the session's key (sessionKey): its client id, behind its account's
	// name for an account other than the global one.
	id   string
	mu   sync.Mutex
	conn atomic.Pointer[conn] // nil while the client is away; set under mu
	// x is made on first subscription or timer, under mu, and never replaced;
	// deliveries read it without the lock.
	x atomic.Pointer[sessionExtra]
	m sm.Session
}

// heldWrite is a Ready's packets waiting for the MQTT group.
type heldWrite struct {
	seq     uint64
	c       *conn // the connection they are for; nothing is written to another
	packets []sm.Packet
	sc      subChanges
}

// sessionExtra is what sessions with subscriptions or timers need; many idle
// devices' sessions have neither.
type sessionExtra struct {
	// epoch is the claim of the session this node writes under, in a cluster
	// that replicates MQTT state (State.hosts); 0 for a session never claimed.
	epoch atomic.Uint64

	// prefix starts the subjects of the session's account inside the server, ""
	// for the global account (accounts.go). Set when x is made.
	prefix  string
	view    atomic.Pointer[routeView] // stored under mu; nil until the first subscription
	nextSID uint64
	timer   *time.Timer
	// In a cluster (Server.state set), under mu: fedMID is the highest MID of the
	// messages the MQTT group stored for this session that the session has (a
	// message read when the session was rebuilt is not fed again); disowned is set
	// once the client connected to another node, which hosts the session from then
	// on: this copy writes nothing more; claimOrder is the order of this node's
	// last committed claim of the client id in the cluster's registry.
	fedMID     uint64
	disowned   bool
	claimOrder uint64
	// held are Readies waiting, in order, for their records to be committed by
	// the MQTT group before their packets are written (see mustHold); heldSeq
	// numbers them.
	held    []heldWrite
	heldSeq uint64
	// access is the user the session belongs to and that user's rights, with
	// authentication on (Config.Auth); nil for the anonymous user with every
	// right. Stored under mu, at CONNECT and restore; read without it.
	access atomic.Pointer[access]
	// acct is the session's account as its users' logins gave it, which counts
	// its connections and subscriptions (nil while nothing is counted); counted
	// is how many subscriptions it counts (countSubsLocked). Under mu.
	acct    *auth.Account
	counted int
}

// routeView is what routing a delivery reads of a session, for deliveries made
// without its lock. It is never changed once stored: a change to the session's
// subscriptions makes a new map, and one to its connection or presence a new view
// sharing the map. Changes are events (SUBSCRIBE, UNSUBSCRIBE, a connection bound or
// gone, the session's end), never deliveries.
type routeView struct {
	// conn is the bound connection when the view was made, nil while the client
	// is away.
	conn *conn
	p    sm.Presence
	// subs maps the session's broker subscriptions to the live machine Subs they
	// were made for. Without the lock only the Subs' options, which never change,
	// are read.
	subs map[*broker.Subscription]*sm.Sub
}

// bySub is the session's broker subscriptions and their Subs, read-only.
func (x *sessionExtra) bySub() map[*broker.Subscription]*sm.Sub {
	if v := x.view.Load(); v != nil {
		return v.subs
	}
	return nil
}

// route routes m, matched by subs, by the view: the session's subscriptions among
// subs and its presence go to the machine's rule (sm.RouteLive). dollar: the
// message's subject, as the session's account names it, starts with '$'.
func (v *routeView) route(subs []*broker.Subscription, m *broker.Message, dollar bool, expireAt int64, now time.Time, ids []uint32) (sm.Verdict, byte, bool, []uint32) {
	if v == nil {
		return sm.Refuse, 0, false, ids
	}
	var subBuf [4]*sm.Sub
	es := subBuf[:0]
	for _, sub := range subs {
		if e := v.subs[sub]; e != nil {
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		return sm.Refuse, 0, false, ids
	}
	return sm.RouteLive(v.p, now, es, m.QoS, m.Retain, dollar, expireAt, ids)
}

// newSession makes the session of key (sessionKey).
func newSession(s *Server, key string) *session {
	sess := &session{srv: s, id: key}
	sess.m.Init(&s.smCfg)
	return sess
}

// extra returns the session's sessionExtra, made if needed. mu is held.
func (s *session) extra() *sessionExtra {
	x := s.x.Load()
	if x == nil {
		x = &sessionExtra{prefix: keyPrefix(s.id)}
		s.x.Store(x)
	}
	return x
}

// prefix is the subject prefix of the session's account, "" for the global
// account.
func (s *session) prefix() string {
	if x := s.x.Load(); x != nil {
		return x.prefix
	}
	return keyPrefix(s.id)
}

// viewLocked stores a new view of the session when its subscriptions, connection or
// presence differ from the current view's: subs when changed is set, else the
// current view's subscriptions. With hold the connection is left out: a view online
// without a connection sends QoS 0 deliveries the way of QoS 1 and 2, through mu. mu
// is held.
func (s *session) viewLocked(subs map[*broker.Subscription]*sm.Sub, changed, hold bool) {
	x := s.x.Load()
	if x == nil {
		return // no subscription yet: nothing to route
	}
	old := x.view.Load()
	if !changed {
		if old == nil {
			return
		}
		subs = old.subs
	}
	c, p := s.conn.Load(), s.m.Presence()
	if hold {
		c = nil
	}
	if !changed && old.conn == c && old.p == p {
		return
	}
	x.view.Store(&routeView{conn: c, p: p, subs: subs})
}

// unholdLocked lets the connection a Ready bound into the view once the Ready's
// packets, its CONNACK first, are written. mu is held.
func (s *session) unholdLocked(sc *subChanges) {
	if sc.hold {
		sc.hold = false
		s.viewLocked(nil, false, false)
	}
}

// bindsConn reports whether rd binds a connection to the session: it carries the
// CONNACK, which must be the connection's first packet.
func bindsConn(rd *sm.Ready) bool {
	for i := range rd.Packets {
		if rd.Packets[i].Type == packet.TypeConnack {
			return true
		}
	}
	return false
}

// subChanges are the broker calls a Ready asks for, made outside the session's lock
// (the broker may deliver to this very session while subscribing), and the view
// they make.
type subChanges struct {
	add, remove []*broker.Subscription
	subs        map[*broker.Subscription]*sm.Sub // the subscriptions after the Ready, when changed
	changed     bool
	hold        bool // the Ready binds a connection, kept out of the view until it is written
}

// step runs event under the session's lock and applies the Ready it produces.
// Records and packets are written under the lock, in the machine's order; broker
// calls, wills and the session's end follow outside it. A Ready that makes new
// subscriptions writes its packets only once they are in the broker, so that a
// client that reads its SUBACK finds them there.
func (s *session) step(event func(now time.Time) error) error {
	_, err := s.stepAt(time.Now(), event)
	return err
}

// stepAt is step at the given time (a reader's, when its packets were read), also
// reporting whether the event queued packets: a reader flushes its own connection
// only then (a PUBACK that moves nothing out of the queue must not cost a write).
func (s *session) stepAt(now time.Time, event func(now time.Time) error) (wrote bool, err error) {
	s.mu.Lock()
	err = event(now)
	rd := s.m.Ready()
	if rd == nil {
		s.viewLocked(nil, false, false) // every change of connection or presence makes a Ready; cheap to be sure
		s.mu.Unlock()
		return false, err
	}
	wrote = len(rd.Packets) > 0
	s.persistLocked(rd.Persist)
	// Deliveries route by the new view from here on. It changes before the Ready's
	// packets are written: a QoS 0 delivery routed by the old view finds it
	// replaced under the queue's lock and routes again, so nothing reaches the
	// client for a subscription after its UNSUBACK. A connection just bound is the
	// exception: its first packet must be its CONNACK, so it joins the view once
	// the Ready is written; QoS 0 deliveries meanwhile wait for mu.
	sc := s.bindSubsLocked(rd.Subs)
	if sc.changed {
		s.countSubsLocked(s.m.SubCount())
	}
	sc.hold = bindsConn(rd)
	s.viewLocked(sc.subs, sc.changed, sc.hold)
	late := len(sc.add) > 0
	if !late {
		s.writeOrHoldLocked(rd, sc, now)
	}
	s.armLocked(rd.Deadline)
	s.mu.Unlock()
	s.outside(rd, sc, late, now)
	return wrote, err
}

// writeOrHoldLocked writes a Ready's packets, or holds them until the MQTT group
// has committed its records (mustHold).
func (s *session) writeOrHoldLocked(rd *sm.Ready, sc subChanges, now time.Time) {
	if s.mustHold(rd) {
		s.holdLocked(rd, sc)
		return
	}
	s.writeLocked(rd, now)
	s.unholdLocked(&sc)
}

// mustHold reports whether a Ready's packets must wait until the MQTT group has
// committed its records (in a cluster that replicates MQTT state): a PUBCOMP
// until the packet id it releases is forgotten (or the publisher could reuse the
// id for a new message that a node restored from the group would drop as a
// duplicate); a QoS 2 PUBLISH until its packet id is stored (or a node taking
// over the session would send the message again under another id); and a PUBREL
// until the PUBREC it answers is stored. The client delivers the message at the
// PUBREL and forgets the packet id at its PUBCOMP, so a node taking over the
// session without the PUBREC would send the PUBLISH again, and the client would
// take it for a new message. Once one Ready waits, every later one does, so that
// packets keep their order.
func (s *session) mustHold(rd *sm.Ready) bool {
	if s.srv.state == nil || len(rd.Packets) == 0 {
		return false
	}
	if x := s.x.Load(); x != nil && len(x.held) > 0 {
		return true
	}
	if len(rd.Persist) == 0 {
		return false
	}
	for i := range rd.Packets {
		p := &rd.Packets[i]
		if p.Type == packet.TypePubcomp || p.Type == packet.TypePubrel ||
			p.Type == packet.TypePublish && p.Msg != nil && p.Msg.QoS == 2 {
			return true
		}
	}
	return false
}

// holdLocked keeps a Ready's packets for writeHeld, called once the MQTT group has
// committed what is queued for it now: the Ready's records among it.
func (s *session) holdLocked(rd *sm.Ready, sc subChanges) {
	x := s.extra()
	x.heldSeq++
	seq := x.heldSeq
	x.held = append(x.held, heldWrite{seq: seq, c: s.conn.Load(), packets: slices.Clone(rd.Packets), sc: sc})
	s.srv.kv.enqueue(kvOp{done: func(err error) {
		// Committed is not enough: the group leaves this node's records out
		// once another node has claimed the session, and the packets must not
		// go out without them.
		if err == nil {
			err = s.srv.state.hostErr(s.id, s.srv.nodeName, s.claimEpoch())
		}
		s.writeHeld(seq, err)
	}})
}

// errHostedElsewhere: another node has claimed the session in the MQTT group.
var errHostedElsewhere = errors.New("the session is hosted by another node")

// writeHeld writes, in order, the held packets up to number upTo, once the MQTT
// group has committed what was queued before (err: it could not, and the
// connection closes: its client resumes the session elsewhere).
func (s *session) writeHeld(upTo uint64, err error) {
	s.mu.Lock()
	x := s.extra()
	var flush []*conn
	for len(x.held) > 0 && x.held[0].seq <= upTo {
		h := x.held[0]
		x.held = x.held[1:]
		if c := s.conn.Load(); err == nil && c != nil && c == h.c {
			s.writeLocked(&sm.Ready{Packets: h.packets}, time.Now())
			if !slices.Contains(flush, c) {
				flush = append(flush, c)
			}
		}
		s.unholdLocked(&h.sc)
	}
	if len(x.held) == 0 {
		x.held = nil
	}
	s.mu.Unlock()
	if err != nil {
		if c := s.conn.Load(); c != nil {
			c.close(fmt.Errorf("%w: session state not replicated: %w", errClosedByServer, err))
		}
		return
	}
	for _, c := range flush {
		c.Flush()
	}
}

// outside applies what a Ready asks outside the session's lock.
func (s *session) outside(rd *sm.Ready, sc subChanges, late bool, now time.Time) {
	defer sm.Release(rd)
	for i, sub := range sc.add {
		if err := s.srv.broker.Subscribe(sub); err != nil {
			// Filters were validated into broker subjects before the machine saw
			// them: this is a bug, not a client's error.
			s.srv.log.Error("mqtt subscribe failed", keyAttr(s.id), "subject", sub.Subject, "err", err)
			s.mu.Lock()
			x := s.x.Load()
			v := x.view.Load()
			subs := maps.Clone(v.subs)
			for _, done := range sc.add[i:] {
				delete(subs, done)
			}
			x.view.Store(&routeView{conn: v.conn, p: v.p, subs: subs})
			s.mu.Unlock()
			break
		}
	}
	for _, sub := range sc.remove {
		_ = s.srv.broker.Unsubscribe(sub)
	}
	if late {
		if s.srv.state != nil && len(rd.Persist) > 0 {
			// The subscriptions must be in the MQTT group before the SUBACK: a
			// message published after it is stored for them on every node.
			s.srv.kv.sync()
		}
		s.mu.Lock()
		s.writeLocked(rd, now)
		s.unholdLocked(&sc)
		s.mu.Unlock()
	}
	for i := range rd.Publish {
		if s.srv.state != nil && s.isDisowned() {
			break // the client is on another node now: its will is not for this copy to send
		}
		w := &rd.Publish[i]
		s.srv.publish(&broker.Message{Subject: w.Subject, Payload: w.Payload, Header: w.Header, Reply: w.Reply, QoS: w.QoS, Retain: w.Retain})
	}
	if rd.Ended {
		s.srv.forget(s)
	}
	if len(rd.Retained) > 0 {
		s.deliverRetained(rd.Retained, now)
	}
}

// persistLocked writes a Ready's records to the store.
func (s *session) persistLocked(ops []sm.Op) {
	kv := s.srv.kv
	if kv == nil || s.disownedLocked() {
		return
	}
	for _, o := range ops {
		switch o.Kind {
		case sm.OpSaveQoS2:
			if s.srv.state != nil {
				continue // marked by the entry that carries the message (proposePublish)
			}
			kv.put(qos2Key(s.id, o.PID), nil)
		case sm.OpSaveSession:
			s.saveRecordLocked()
		case sm.OpDeleteSession:
			s.delLocked(kvSession + s.id)
		case sm.OpSaveMsg:
			s.putLocked(msgKey(s.id, o.MID), encodeOutMsg(o.Msg))
		case sm.OpDeleteMsg:
			s.delLocked(msgKey(s.id, o.MID))
		case sm.OpDeleteQoS2:
			s.delLocked(qos2Key(s.id, o.PID))
		}
	}
}

// putLocked and delLocked write one of the session's records: in a cluster as
// its host, so that the MQTT group leaves them out once another node has taken
// the session.
func (s *session) putLocked(key string, val []byte) {
	if s.srv.state != nil {
		s.srv.kv.putAs(s.srv.nodeName, s.claimEpoch(), key, val)
		return
	}
	s.srv.kv.put(key, val)
}

func (s *session) delLocked(key string) {
	if s.srv.state != nil {
		s.srv.kv.delAs(s.srv.nodeName, s.claimEpoch(), key)
		return
	}
	s.srv.kv.del(key)
}

// saveRecordLocked writes the session record: expiry, subscriptions and, in a
// cluster, this node as the session's host. mu is held.
func (s *session) saveRecordLocked() {
	rec := sessionRecord{Expiry: int64(s.m.Expiry()), Host: s.srv.nodeName, Epoch: s.claimEpoch(), User: s.accessLocked().ownerName()}
	s.m.Subs(func(e *sm.Sub) {
		rec.Subs = append(rec.Subs, subRecord{Filter: e.Filter, QoS: e.QoS, NoLocal: e.NoLocal, RAP: e.RAP, SubID: e.SubID})
	})
	b, _ := json.Marshal(rec)
	s.putLocked(kvSession+s.id, b)
}

// bindSubsLocked turns a Ready's subscription changes into broker subscriptions,
// known to Deliver once in the view (sc.subs); the broker learns of them outside the
// lock.
func (s *session) bindSubsLocked(changes []sm.SubChange) subChanges {
	var sc subChanges
	if len(changes) == 0 {
		return sc
	}
	x := s.extra()
	bySub := maps.Clone(x.bySub()) // the view's map is never changed
	for _, ch := range changes {
		if ch.Remove != nil {
			for sub, e := range bySub {
				if e == ch.Remove {
					delete(bySub, sub)
					sc.remove = append(sc.remove, sub)
				}
			}
		}
		if e := ch.Add; e != nil {
			if bySub == nil {
				bySub = make(map[*broker.Subscription]*sm.Sub)
			}
			coalesce := markOverlaps(bySub, e)
			acc := x.access.Load()
			for _, subj := range e.Subjects {
				x.nextSID++
				sub := &broker.Subscription{Sink: s, SID: x.nextSID, Subject: subj, Queue: e.Queue, NoEcho: e.NoLocal}
				// The user's rights decide what the filter delivers: those of a
				// filter that reaches subjects it may not read check each message.
				ok, permit := s.srv.maySubscribe(acc, subj)
				if !ok {
					continue // the parent level of a "/#" filter, refused alone (mayKeep)
				}
				if x.prefix != "" {
					// The account's own subjects: the prefix keeps the filter
					// inside them; the user's rights are on the account's names.
					sub.Subject = x.prefix + subj
					permit = s.accountPermit(acc, subj, true)
				}
				sub.SetPermit(permit)
				sub.SetCoalesce(coalesce)
				bySub[sub] = e
				sc.add = append(sc.add, sub)
				for _, im := range acc.account().Imports(subj) {
					x.nextSID++
					k := &importSink{s: s, im: auth.ImportedSubscription{Strip: im.Strip, Add: x.prefix + im.Add}, subj: subj}
					k.setPermit(s.accountPermit(acc, subj, false))
					isub := &broker.Subscription{Sink: k, SID: x.nextSID, Subject: im.Filter, Queue: importQueue(s.id, e.Queue)}
					bySub[isub] = e
					sc.add = append(sc.add, isub)
				}
			}
		}
	}
	if len(bySub) == 0 {
		bySub = nil
	}
	sc.subs, sc.changed = bySub, true
	return sc
}

// accountPermit is the check each message of an account's subjects delivered to a
// subscription to subj (the account's name of a filter's subject) must pass: nil
// unless the user's rights reach only part of what the filter matches. The check
// is on the account's name of the message's subject: the broker's, behind the
// session's prefix (inside), or the importer's name (an importSink's).
func (s *session) accountPermit(a *access, subj string, inside bool) func([]byte) bool {
	if a == nil || a.user == nil || !a.restricted {
		return nil
	}
	if ok, check := a.perms.CanSubscribe(subj); !ok || !check {
		return nil
	}
	ck, wildFirst, prefix := a.perms, auth.WildFirst(subj), s.prefix()
	if !inside {
		return func(b []byte) bool { return ck.MayReceive(b, wildFirst) }
	}
	return func(b []byte) bool { return ck.MayReceive(external(b, prefix), wildFirst) }
}

// countSubsLocked counts the session's n subscriptions against its account: the
// change since it last counted is acquired (SUBSCRIBE acquired its new ones
// already, within the account's maximum, see reserveSubs; those a restore brings
// back are counted whatever the maximum) or released. mu is held.
func (s *session) countSubsLocked(n int) {
	x := s.x.Load()
	if x == nil {
		if n == 0 {
			return
		}
		x = s.extra()
	}
	if x.acct == nil {
		if n == 0 {
			return
		}
		if x.acct = x.access.Load().account(); x.acct == nil {
			return // the anonymous user with every right: nothing to count against
		}
	}
	switch d := n - x.counted; {
	case d > 0:
		x.acct.AddSubscriptions(d)
	case d < 0:
		x.acct.ReleaseSubscriptions(-d)
	}
	x.counted = n
}

// reserveSubs acquires, before a SUBSCRIBE is taken, the account's subscriptions
// for its filters that the session does not have yet; a filter over the account's
// maximum is refused (QuotaExceeded). mu is held.
func (s *session) reserveSubs(subs []*sm.Sub) {
	x := s.x.Load()
	var acct *auth.Account
	if x != nil {
		acct = x.access.Load().account()
	}
	if acct == nil || acct.Limits.MaxSubscriptions <= 0 {
		return
	}
	if x.acct == nil {
		x.acct = acct
	}
	for _, e := range subs {
		if e == nil || e.Denied || s.m.HasSub(e.Filter) {
			continue
		}
		if !x.acct.AcquireSubscriptions(1) {
			e.Denied, e.Reason = true, packet.QuotaExceeded
			continue
		}
		x.counted++
	}
}

// markOverlaps has the broker coalesce the deliveries of e's subscriptions with
// those of every other non-shared subscription of bySub whose filter some topic also
// matches, and reports whether there is any. Subscriptions that overlap nothing, most
// of them, cost the broker no grouping. Marks stay after the overlapping filter goes:
// they then cost a little grouping, not a duplicate. The others are marked before e
// is in the broker, so a message that reaches e finds them marked.
func markOverlaps(bySub map[*broker.Subscription]*sm.Sub, e *sm.Sub) bool {
	if e.Shared {
		return false
	}
	found := false
	for sub, o := range bySub {
		if o.Shared || o.Filter == e.Filter || !filtersOverlap(o.Filter, e.Filter) {
			continue
		}
		found = true
		sub.SetCoalesce(true)
	}
	return found
}

// writeLocked encodes a Ready's packets onto the bound connection. A PUBLISH the
// connection refuses (too large for the client) is discarded by the machine, whose
// next Ready is written in turn.
func (s *session) writeLocked(rd *sm.Ready, now time.Time) {
	c := s.conn.Load()
	if c == nil {
		return
	}
	for first := true; ; first = false {
		discarded := false
		for i := range rd.Packets {
			if !c.writePacket(&rd.Packets[i]) {
				if now.IsZero() {
					now = time.Now()
				}
				s.m.Discard(now, rd.Packets[i].PID)
				discarded = true
			}
		}
		if !first {
			sm.Release(rd)
		}
		if !discarded {
			return
		}
		if rd = s.m.Ready(); rd == nil {
			return
		}
		s.persistLocked(rd.Persist)
	}
}

// armLocked sets the session's one timer to deadline while its client is away (a
// connected client's keepalive is its reader's read deadline).
func (s *session) armLocked(deadline time.Time) {
	if s.m.Online() || deadline.IsZero() {
		if x := s.x.Load(); x != nil && x.timer != nil {
			x.timer.Stop()
		}
		return
	}
	d := time.Until(deadline)
	x := s.extra()
	if x.timer == nil {
		x.timer = time.AfterFunc(d, s.tick)
		return
	}
	x.timer.Reset(d)
}

func (s *session) tick() {
	_ = s.step(func(now time.Time) error {
		s.m.Tick(now)
		return nil
	})
}

func (s *session) stopTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.x.Load(); x != nil && x.timer != nil {
		x.timer.Stop()
	}
}

// persistent reports whether the session outlives its connection.
func (s *session) persistent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Expiry() != 0
}

func (s *session) isDisowned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disownedLocked()
}

func (s *session) disownedLocked() bool {
	x := s.x.Load()
	return x != nil && x.disowned
}

// noteClaim records the order of this node's committed claim of the client id.
func (s *session) noteClaim(order uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.extra()
	x.claimOrder = max(x.claimOrder, order)
}

// claimedAt is the order of this node's last committed claim of the client id.
func (s *session) claimedAt() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.x.Load(); x != nil {
		return x.claimOrder
	}
	return 0
}

func (s *session) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Ended()
}

// connect binds c, whose CONNECT was accepted, and negotiates into c.link; the
// CONNACK is the first packet Ready writes to c. A connection that had the session
// is told it was taken over.
//
// With authentication, a is the user's access: a session that belongs to another
// user starts afresh (its subscriptions and queued messages were chosen with that
// user's rights), and one resumed by its user with rights that changed since (the
// users file was reloaded, or the session was restored) has its subscriptions
// decided again: those no longer allowed are dropped.
func (s *session) connect(c *conn, p *packet.Connect, o sm.ConnectOpts, a *access) {
	var old *conn
	o.Link = &c.link
	authOn := s.srv.cfg.Auth != nil
	_ = s.step(func(now time.Time) error {
		old = s.conn.Swap(c)
		prev := s.accessLocked()
		if authOn {
			o.Fresh = prev.ownerName() != a.ownerName()
			s.setAccessLocked(a)
		}
		s.m.Connect(now, p, o)
		if authOn && !o.Fresh && !p.CleanStart && prev.userOf() != a.userOf() {
			s.m.Recheck(func(e *sm.Sub) bool { return s.srv.mayKeep(a, e) })
		}
		return nil
	})
	if old != nil && old != c {
		old.takenOver()
	}
}

// accessLocked is the session's access. mu is held.
func (s *session) accessLocked() *access {
	if x := s.x.Load(); x != nil {
		return x.access.Load()
	}
	return nil
}

// setAccessLocked gives the session access a. mu is held.
func (s *session) setAccessLocked(a *access) {
	if a == nil {
		if x := s.x.Load(); x != nil {
			x.access.Store(nil)
		}
		return
	}
	s.extra().access.Store(a)
}

// restoreOwner gives a session being restored the rights its user has now, and
// returns them: none when the user is no more. Nothing to do without
// authentication.
func (s *session) restoreOwner(name string) *access {
	if s.srv.cfg.Auth == nil {
		return nil
	}
	acc, problem := s.ownerAccess(name)
	if problem != "" {
		acct, id := splitKey(s.id)
		s.srv.log.Warn("mqtt session restored without rights: "+problem, "client_id", id, "account", acct, "user", name)
	}
	s.mu.Lock()
	s.setAccessLocked(acc)
	s.mu.Unlock()
	return acc
}

// ownerAccess is the access of the session's user, called name, by the users
// file in force, for a session without its client: no rights when the user is
// no more or is in another account (problem says which).
func (s *session) ownerAccess(name string) (acc *access, problem string) {
	u := s.srv.cfg.Auth.UserNamed(name)
	acct, _ := splitKey(s.id)
	switch {
	case u == nil:
		problem = "its user is not in the users file"
	case accountName(u) != acct:
		// The session's subjects are its account's: a user moved to another
		// account since has none of its rights there.
		problem, u = "its user is in another account now", nil
	}
	return newAccess(u, name, nil), problem
}

// disconnected ends c's part in the session if it is still the bound connection.
func (s *session) disconnected(c *conn) {
	_ = s.step(func(now time.Time) error {
		if s.conn.Load() != c {
			return nil // taken over; the new connection owns the session
		}
		s.conn.Store(nil)
		s.m.Disconnected(now)
		return nil
	})
}

// Deliver implements broker.Sink.
func (s *session) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	one := [1]*broker.Subscription{sub}
	return s.DeliverMatched(one[:], m)
}

// DeliverMatched implements broker.MultiSink: the machine's rule (sm.RouteLive)
// makes one copy of a message several of the session's subscriptions match. It
// routes by the session's view, without its lock: QoS 0 goes straight to the
// connection, with what it needs gathered on the stack; QoS 1 and 2 are copied and
// handed to the machine under the lock (enqueue).
func (s *session) DeliverMatched(subs []*broker.Subscription, m *broker.Message) bool {
	x := s.x.Load()
	if x == nil {
		return false
	}
	expireAt := expiryOf(m.Header)
	var now time.Time
	if expireAt != 0 {
		now = time.Now()
	}
	dollar := IsDollar(external(m.Subject, x.prefix))
	for {
		v := x.view.Load()
		var idBuf [4]uint32
		verdict, _, retain, ids := v.route(subs, m, dollar, expireAt, now, idBuf[:0])
		switch verdict {
		case sm.Refuse:
			return false
		case sm.Expired:
			return true
		case sm.Send:
			if v.conn == nil {
				break // a connection being bound: its CONNACK goes first, under mu
			}
			if ok, current := v.conn.deliverQoS0(m, x.prefix, retain, ids, expireAt, now, x, v); current {
				return ok
			}
			continue // the view was replaced meanwhile: route by the new one
		}
		return s.enqueue(x, subs, m, expireAt, now)
	}
}

// enqueue is DeliverMatched for a message that the view routes at QoS 1 or 2, or to
// a connection being bound. The session may have changed since: under the lock the
// view is current, and the message is routed again by it.
func (s *session) enqueue(x *sessionExtra, subs []*broker.Subscription, m *broker.Message, expireAt int64, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := x.view.Load()
	var idBuf [4]uint32
	verdict, qos, retain, ids := v.route(subs, m, IsDollar(external(m.Subject, x.prefix)), expireAt, now, idBuf[:0])
	switch verdict {
	case sm.Refuse:
		return false
	case sm.Expired:
		return true
	case sm.Send: // at QoS 0 after all (the subscription changed, or the connection is bound now)
		if v.conn == nil {
			return false // held out by a Ready still being written (never so: CONNECT subscribes nothing)
		}
		ok, _ := v.conn.deliverQoS0(m, x.prefix, retain, ids, expireAt, now, x, v) // current: views change under mu
		return ok
	}
	if s.storedByGroup(v, subs, m) {
		return true
	}
	om := &outMsg{Payload: append([]byte(nil), m.Payload...), QoS: qos, Retain: retain, ExpireAt: expireAt}
	if len(ids) > 0 {
		om.SubIDs = make([]uint32, len(ids)) // not a slice of ids: idBuf would escape
		copy(om.SubIDs, ids)
	}
	var topicBuf [128]byte
	om.Topic = string(AppendTopic(topicBuf[:0], external(m.Subject, x.prefix)))
	if len(m.Header) > 0 {
		om.Header = append([]byte(nil), m.Header...)
	}
	if reply := externalReply(m.Reply, x.prefix); len(reply) > 0 {
		om.Reply = string(AppendTopic(topicBuf[:0], reply))
	}
	// now stays zero for a message without expiry: Enqueue does not read it then,
	// and this is every QoS 1 and 2 delivery's path.
	ok := s.m.Enqueue(now, om)
	if !ok && !s.m.Ended() {
		s.srv.queueDrops.Add(1)
	}
	// Enqueue asks for packets and records only: no broker call, so the Ready is
	// applied here, under the lock the broker's delivery holds.
	if rd := s.m.Ready(); rd != nil {
		s.persistLocked(rd.Persist)
		s.writeOrHoldLocked(rd, subChanges{}, now)
		s.armLocked(rd.Deadline)
		sm.Release(rd)
	}
	return ok
}

// storedByGroup reports whether the cluster's MQTT group stores m for this session
// itself (and hands it to enqueueStored): every QoS 1 and 2 message an MQTT client
// publishes in a cluster goes through the group, which stores it for each
// persistent session whose subscriptions, other than shared ones, match it. It
// does not route what the session's account imports: the broker's delivery does.
// mu is held.
func (s *session) storedByGroup(v *routeView, subs []*broker.Subscription, m *broker.Message) bool {
	if s.srv.state == nil || m.QoS == 0 || s.m.Expiry() == 0 {
		return false
	}
	for _, sub := range subs {
		if e := v.subs[sub]; e != nil && !e.Shared && !imported(sub) {
			return true
		}
	}
	return false
}

// enqueueStored gives the session a message the MQTT group stored for it.
func (s *session) enqueueStored(m *outMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.extra()
	if x.disowned || m.MID <= x.fedMID {
		return
	}
	x.fedMID = m.MID
	if a := x.access.Load(); a != nil && (a.restricted || a.user == nil) {
		// Stored for the session's subscriptions by subject alone: the rights
		// of its user are this copy's to apply.
		if subj, err := AppendSubject(nil, m.Topic); err != nil || !s.srv.mayRead(a, subj) {
			return
		}
	}
	var now time.Time
	if m.ExpireAt != 0 {
		now = time.Now()
	}
	if !s.m.Enqueue(now, m) && !s.m.Ended() {
		s.srv.queueDrops.Add(1)
	}
	if rd := s.m.Ready(); rd != nil {
		s.persistLocked(rd.Persist)
		s.writeOrHoldLocked(rd, subChanges{}, now)
		s.armLocked(rd.Deadline)
		sm.Release(rd)
		if c := s.conn.Load(); c != nil {
			defer c.Flush() // after the unlock: nothing else will flush it
		}
	}
}

// disown lets another node host the session: its client connected there. The
// broker subscriptions and the timer go; the records stay, the other node's now.
func (s *session) disown() {
	s.mu.Lock()
	s.extra().disowned = true
	s.countSubsLocked(0) // the other node counts them now
	var subs []*broker.Subscription
	if x := s.x.Load(); x != nil {
		if x.timer != nil {
			x.timer.Stop()
		}
		if v := x.view.Load(); v != nil {
			for sub := range v.subs {
				subs = append(subs, sub)
			}
			x.view.Store(&routeView{p: sm.Presence{Ended: true}})
		}
	}
	s.mu.Unlock()
	for _, sub := range subs {
		_ = s.srv.broker.Unsubscribe(sub)
	}
}

// deliverRetained sends the retained messages new subscriptions match: those of
// the session's account, and those of the subjects the account imports, under
// the importer's names.
func (s *session) deliverRetained(subs []*sm.Sub, now time.Time) {
	var acc *access
	if x := s.x.Load(); x != nil {
		acc = x.access.Load()
	}
	prefix := s.prefix()
	for _, e := range subs {
		send := func(subj []byte, rm *retainedMsg, reply []byte) {
			if !s.srv.mayReceive(acc, subj, e.DollarGuard) {
				return
			}
			om := &outMsg{
				Topic: string(AppendTopic(nil, subj)), Payload: rm.payload, Header: rm.header,
				QoS: rm.qos, ExpireAt: rm.expireAt,
			}
			if len(reply) > 0 {
				om.Reply = string(AppendTopic(nil, reply))
			}
			_ = s.step(func(now time.Time) error {
				s.m.DeliverRetained(now, e, om)
				return nil
			})
		}
		allowed := s.srv.allowedSubjects(acc, e)
		filters := allowed
		if prefix != "" {
			filters = make([]string, len(allowed))
			for i, f := range allowed {
				filters[i] = prefix + f
			}
		}
		s.srv.retained.match(filters, e.DollarGuard, len(prefix), now, func(rm *retainedMsg) {
			send(external([]byte(rm.subject), prefix), rm, externalReply([]byte(rm.reply), prefix))
		})
		for _, f := range allowed {
			for _, im := range acc.account().Imports(f) {
				s.srv.retained.match([]string{im.Filter}, e.DollarGuard, im.Strip, now, func(rm *retainedMsg) {
					send([]byte(im.Add+rm.subject[im.Strip:]), rm, nil)
				})
			}
		}
	}
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

// newSub parses a subscription: the broker subjects of its filter and, for a shared
// subscription, its queue group.
func newSub(filter string, qos byte, noLocal, rap bool, subID uint32) (*sm.Sub, error) {
	e := &sm.Sub{Filter: filter, QoS: min(qos, 2), NoLocal: noLocal, RAP: rap, SubID: subID}
	match := filter
	group, inner, shared, err := packet.ParseShared(filter)
	if err != nil {
		return nil, err
	}
	if shared {
		match, e.Queue, e.Shared = inner, string(appendLevel(nil, group)), true
		if err := subject.ValidateQueue([]byte(e.Queue)); err != nil {
			return nil, err
		}
	}
	if err := packet.ValidFilter(match); err != nil {
		return nil, err
	}
	if e.Subjects, err = FilterSubjects(match); err != nil {
		return nil, err
	}
	e.DollarGuard = match[0] == '+' || match[0] == '#'
	return e, nil
}

// countConnection makes the session's account count a connection its client
// made, which acct (the user's account) acquired: it reports whether the session
// took it (to release when the connection ends), not when it is the anonymous
// user's with every right (acct nil), which nothing counts.
func (s *session) countConnection(acct *auth.Account) bool {
	if acct == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.extra(); x.acct == nil {
		x.acct = acct
	}
	return true
}

// releaseConnection releases a connection countConnection counted.
func (s *session) releaseConnection() {
	s.mu.Lock()
	acct := s.extra().acct
	s.mu.Unlock()
	acct.ReleaseConnection()
}

// claimEpoch is the claim of the session this node writes under (State.hosts).
func (s *session) claimEpoch() uint64 {
	if x := s.x.Load(); x != nil {
		return x.epoch.Load()
	}
	return 0
}
