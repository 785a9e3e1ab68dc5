package session

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// Config is what a server allows its clients; every session of a server shares one.
type Config struct {
	// MaxInflight bounds QoS 1 and 2 messages sent to a client and not yet
	// acknowledged; a v5 client's smaller receive maximum wins.
	MaxInflight int
	// MaxQueued bounds the messages a session holds behind its in-flight window and
	// while its client is away; a full queue refuses the newest message, or with
	// DropOld evicts the oldest.
	MaxQueued int
	DropOld   bool
	// ReceiveMaximum bounds the QoS 2 publishes a client may have unreleased at once
	// (reason 0x93 past it); advertised to v5 clients.
	ReceiveMaximum int
	// MaxPacketSize is advertised to v5 clients; the driver's decoder enforces it.
	MaxPacketSize int
	// TopicAliasMaximum is how many topic aliases a v5 client may set (0: none).
	TopicAliasMaximum int
	// OutboundTopicAliases is how many aliases the server uses towards a v5 client
	// whose Topic Alias Maximum allows as many (0: none).
	OutboundTopicAliases int
	// MaxSessionExpiry caps the session expiry a client asks for and is the expiry
	// of 3.x sessions that are not clean; 0 means sessions never expire.
	MaxSessionExpiry time.Duration
	// MaxKeepAlive caps (and replaces 0 in) a v5 client's keepalive; 0 accepts any.
	MaxKeepAlive time.Duration
	// Persist: the driver keeps persistent sessions in storage, so Ready lists the
	// records to write.
	Persist bool
	// StoredElsewhere: the QoS 1 and 2 messages the session stores come to
	// Enqueue already stored, under the MID they carry (a cluster's MQTT group
	// stores every message it routes to a persistent session as it commits it);
	// the session writes a message again only when its QoS 2 packet id is
	// assigned, and deletes it when its exchange ends. A message without a MID
	// (a retained message a new subscription gets) is kept in memory only.
	StoredElsewhere bool
}

// Sub is one MQTT subscription of a session: a filter and its options. A Sub is not
// changed once made; a SUBSCRIBE to the same filter replaces it with another.
type Sub struct {
	Filter      string // as the client wrote it, $share prefix included
	QoS         byte
	NoLocal     bool
	RAP         bool // retain as published
	SubID       uint32
	Shared      bool
	DollarGuard bool // the filter starts with a wildcard: '$' topics do not match
	// Denied: the driver refuses the subscription, as its client may not
	// subscribe to the filter (reason 0x87, 0x80 in MQTT 3), or for Reason when
	// set (0x80 in MQTT 3 too).
	Denied bool
	Reason packet.ReasonCode
	// Subjects and Queue are the driver's mapping of the filter onto broker
	// subscriptions, carried along and never looked at here.
	Subjects []string
	Queue    string

	live bool // the session's subscription of its filter, not one replaced or removed
}

// Link is the state of a session's current network connection, negotiated at
// CONNECT. It goes with the connection: a client that reconnects negotiates anew.
type Link struct {
	KeepAlive time.Duration
	// Aliases is the table of topic aliases towards the client, nil when none are
	// used; the driver's encoder reads and updates it where it serialises the
	// connection's PUBLISH packets (see OutAliases).
	Aliases     *OutAliases
	MaxPacket   uint32 // the client's maximum packet size, 0 = protocol limit
	ReceiveMax  uint16 // the client's
	Version     byte
	ProblemInfo bool // the client accepts reason strings

	graceful bool  // DISCONNECT without will
	heard    int64 // Unix ns; a Link is made per connection, and connected idle devices are many
	rare     *linkRare
}

// linkRare is what few connections need: a will, topic aliases set by the client.
type linkRare struct {
	will      *Will
	inAliases map[uint16]string
}

func (l *Link) will() *Will {
	if l.rare == nil {
		return nil
	}
	return l.rare.will
}

// aux is what only some sessions need: those that are stored, receive QoS 2, or wait
// offline for their expiry or a delayed will.
type aux struct {
	inQoS2   map[uint16]struct{} // QoS 2 publishes received, awaiting PUBREL
	nextMID  uint64              // ids of stored messages
	will     *Will               // a delayed will waiting to be published
	willAt   time.Time
	expireAt time.Time // when the offline session ends; zero: never
	msgExpAt int64     // no queued message expires before (Unix ns); 0: none does
}

// Session is the MQTT session of one client id, as a deterministic state machine:
// events go in through its methods, each with the current time, and what it wants
// done comes out of Ready. It is not safe for concurrent use. The zero Session is not
// usable; call Init or New.
type Session struct {
	cfg    *Config
	expiry time.Duration // how long the session outlives its connection; <0 never ends
	subs   map[string]*Sub
	fl     flight
	link   *Link // nil while the client is away
	x      *aux
	rd     *Ready

	started   bool // connected or restored once: a CONNECT finds it present
	ended     bool
	loading   bool // being restored from storage: nothing to write back
	persisted bool // something of the session may be in storage
}

// New returns a session that has never been connected.
func New(cfg *Config) *Session {
	s := &Session{}
	s.Init(cfg)
	return s
}

// Init makes s a session that has never been connected, for a driver that embeds it.
func (s *Session) Init(cfg *Config) {
	*s = Session{cfg: cfg}
}

// Ready returns what the events since the last call want done, nil if nothing. The
// driver applies it and gives it back with Release.
func (s *Session) Ready() *Ready {
	rd := s.rd
	s.rd = nil
	if rd != nil {
		rd.Deadline = s.Deadline()
	}
	return rd
}

func (s *Session) ready() *Ready {
	if s.rd == nil {
		s.rd = readyPool.Get().(*Ready)
	}
	return s.rd
}

// window is how many messages may be in flight to the connected client: a v5
// client's receive maximum, when lower than the server's.
func (s *Session) window() int { return min(s.cfg.MaxInflight, int(s.link.ReceiveMax)) }

func (s *Session) aux() *aux {
	if s.x == nil {
		s.x = &aux{}
	}
	return s.x
}

// Online reports whether a connection is bound to the session.
func (s *Session) Online() bool { return s.link != nil }

// Link returns the current connection's negotiated state, nil while offline.
func (s *Session) Link() *Link { return s.link }

// Ended reports whether the session is over.
func (s *Session) Ended() bool { return s.ended }

// Expiry is how long the session outlives its connection; negative for never.
func (s *Session) Expiry() time.Duration { return s.expiry }

// Subs calls f for each subscription, in no particular order.
func (s *Session) Subs(f func(*Sub)) {
	for _, e := range s.subs {
		f(e)
	}
}

// SubCount is the number of subscriptions.
func (s *Session) SubCount() int { return len(s.subs) }

// HasSub reports whether the session has a subscription of filter.
func (s *Session) HasSub(filter string) bool { return s.subs[filter] != nil }

// Inflight and Queued count QoS 1/2 messages in flight and queued.
func (s *Session) Inflight() int { return s.fl.inflightLen() }

// Queued counts the messages waiting behind the in-flight window or for the client.
func (s *Session) Queued() int { return s.fl.queueLen() }

// Deadline is when Tick must next run, zero for never: while the client is connected,
// when its keepalive passes (the driver may enforce that with its socket's read
// deadline instead); while it is away, the earliest of its delayed will, the end of
// the session, and the expiry of a queued message.
func (s *Session) Deadline() time.Time {
	if s.ended {
		return time.Time{}
	}
	if l := s.link; l != nil {
		if l.KeepAlive <= 0 {
			return time.Time{}
		}
		return KeepAliveDeadline(time.Unix(0, l.heard), l.KeepAlive)
	}
	x := s.x
	if x == nil {
		return time.Time{}
	}
	var d time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	if x.will != nil {
		earliest(x.willAt)
	}
	earliest(x.expireAt)
	if x.msgExpAt != 0 {
		earliest(time.Unix(0, x.msgExpAt))
	}
	return d
}

// KeepAliveDeadline is when a client last heard from at heard has been silent for
// 1.5 times its keepalive ka (MQTT §3.1.2.10).
func KeepAliveDeadline(heard time.Time, ka time.Duration) time.Time {
	return heard.Add(ka * 3 / 2)
}

// ExpiryLeft returns the whole seconds, rounded up, that a message expiring at
// expireAt (Unix ns) has left at now, and false if it has expired.
func ExpiryLeft(expireAt int64, now time.Time) (uint32, bool) {
	left := expireAt - now.UnixNano()
	if left <= 0 {
		return 0, false
	}
	return uint32((left + int64(time.Second) - 1) / int64(time.Second)), true
}

// ---------------------------------------------------------------------------------
// Storage: what a persistent session writes. A session is stored when the driver
// persists, its expiry is not 0 and it is neither being restored nor over.

func (s *Session) stored() bool {
	return s.cfg.Persist && s.expiry != 0 && !s.loading && !s.ended
}

func (s *Session) op(o Op) {
	if o.Kind != OpDeleteSession && o.Kind != OpDeleteMsg && o.Kind != OpDeleteQoS2 {
		s.persisted = true
	}
	rd := s.ready()
	rd.Persist = append(rd.Persist, o)
}

func (s *Session) saveSession() {
	if s.stored() {
		s.op(Op{Kind: OpSaveSession})
	}
}

func (s *Session) saveMsg(m *OutMsg) {
	if m.MID != 0 && s.cfg.Persist && !s.loading {
		s.op(Op{Kind: OpSaveMsg, MID: m.MID, Msg: m})
	}
}

func (s *Session) forgetMsg(m *OutMsg) {
	if m.MID != 0 && s.cfg.Persist {
		s.op(Op{Kind: OpDeleteMsg, MID: m.MID})
		m.MID = 0
	}
}

// forgetAll deletes everything the session stored.
func (s *Session) forgetAll() {
	if !s.cfg.Persist || !s.persisted {
		return
	}
	s.op(Op{Kind: OpDeleteSession})
	s.persisted = false
	for _, m := range s.fl.all() {
		s.forgetMsg(m)
	}
	if s.x != nil {
		for pid := range s.x.inQoS2 {
			s.op(Op{Kind: OpDeleteQoS2, PID: pid})
		}
	}
}

// storeAll writes the whole session, for one that has just become persistent.
func (s *Session) storeAll() {
	if !s.stored() {
		return
	}
	s.saveSession()
	for _, m := range s.fl.all() {
		if m.MID == 0 && !s.cfg.StoredElsewhere { // stored already otherwise
			s.aux().nextMID++
			m.MID = s.x.nextMID
			s.saveMsg(m)
		}
	}
	if s.x != nil {
		for pid := range s.x.inQoS2 {
			s.op(Op{Kind: OpSaveQoS2, PID: pid})
		}
	}
}

// expiryChanged stores a session that is now persistent and forgets one that is not.
func (s *Session) expiryChanged() {
	if !s.cfg.Persist || s.loading {
		return
	}
	if s.expiry == 0 {
		s.forgetAll()
		return
	}
	s.storeAll()
}

// ---------------------------------------------------------------------------------
// Connection events.

// ConnectOpts is what the driver adds to a CONNECT it accepted: the client id it
// assigned (for an empty one) and the will, parsed into a broker message.
type ConnectOpts struct {
	AssignedID string
	Will       *Will
	// Link, when set, is where the connection's Link is kept: a driver that holds
	// one per connection saves an allocation per connected client. Nil: Connect
	// allocates it.
	Link *Link
	// Fresh starts the session afresh whatever the CONNECT's clean start says (its
	// own expiry still holds): the driver found the session belongs to another
	// user, whose subscriptions and queued messages are not this client's to take.
	Fresh bool
}

// Connect binds a new connection whose CONNECT the driver accepted. Ready then
// holds the CONNACK, the resend of what was in flight (PUBLISH with DUP, or PUBREL
// after a PUBREC) and what queued while the client was away; Kick if another
// connection had the session (taken over). A clean start ends the previous state
// first, publishing a will it was waiting with.
func (s *Session) Connect(now time.Time, p *packet.Connect, o ConnectOpts) *Link {
	if s.ended { // ended while its driver looked it up: start afresh
		s.reopen()
	}
	v5 := p.ProtocolLevel == packet.V5
	l := o.Link
	if l == nil {
		l = new(Link)
	}
	*l = Link{Version: p.ProtocolLevel, ReceiveMax: 65535, ProblemInfo: true, heard: now.UnixNano()}
	if o.Will != nil {
		l.rare = &linkRare{will: o.Will}
	}
	if v5 {
		if p.Props.HasReceiveMaximum {
			l.ReceiveMax = p.Props.ReceiveMaximum
		}
		if p.Props.HasMaximumPacketSize {
			l.MaxPacket = p.Props.MaximumPacketSize
		}
		if p.Props.HasRequestProblemInfo {
			l.ProblemInfo = p.Props.RequestProblemInfo == 1
		}
		if n := min(int(p.Props.TopicAliasMaximum), s.cfg.OutboundTopicAliases); p.Props.HasTopicAliasMaximum && n > 0 {
			l.Aliases = NewOutAliases(uint16(n))
		}
	}
	// Session expiry: v5 says; v3 clean sessions end at once and others never.
	var expiry time.Duration
	switch {
	case v5 && p.Props.HasSessionExpiry && p.Props.SessionExpiry == 0xFFFFFFFF:
		expiry = -1
	case v5 && p.Props.HasSessionExpiry:
		expiry = time.Duration(p.Props.SessionExpiry) * time.Second
	case !v5 && !p.CleanStart:
		expiry = -1
	}
	expiry, capped := s.capExpiry(expiry)
	l.KeepAlive = time.Duration(p.KeepAlive) * time.Second
	serverKeepAlive := false
	if max := s.cfg.MaxKeepAlive; v5 && max > 0 && (l.KeepAlive == 0 || l.KeepAlive > max) {
		l.KeepAlive, serverKeepAlive = max, true
	}

	rd := s.ready()
	if old := s.link; old != nil {
		// The old connection closes without DISCONNECT; its client is back, so only
		// a will without delay is due.
		rd.Kick = true
		if w := old.will(); w != nil && w.Delay == 0 {
			rd.Publish = append(rd.Publish, w.Msg)
		}
		s.link = nil
	}
	if (p.CleanStart || o.Fresh) && s.started {
		s.end()
		s.reopen()
	}
	present := s.started
	s.started = true
	s.expiry = expiry
	s.link = l
	if x := s.x; x != nil {
		x.will, x.willAt, x.expireAt = nil, time.Time{}, time.Time{} // back in time: a delayed will is cancelled
	}
	s.expiryChanged()

	rd.connack = packet.Connack{SessionPresent: present, Reason: packet.Success}
	ca := &rd.connack
	if v5 {
		props := &ca.Props
		props.ReceiveMaximum, props.HasReceiveMaximum = uint16(s.cfg.ReceiveMaximum), true
		props.MaximumPacketSize, props.HasMaximumPacketSize = uint32(s.cfg.MaxPacketSize), true
		if s.cfg.TopicAliasMaximum > 0 {
			props.TopicAliasMaximum, props.HasTopicAliasMaximum = uint16(s.cfg.TopicAliasMaximum), true
		}
		props.AssignedClientID = o.AssignedID
		if serverKeepAlive {
			props.ServerKeepAlive, props.HasServerKeepAlive = uint16(l.KeepAlive/time.Second), true
		}
		if capped {
			props.SessionExpiry, props.HasSessionExpiry = uint32(expiry/time.Second), true
		}
	}
	rd.Packets = append(rd.Packets, Packet{Type: packet.TypeConnack, Connack: ca})

	for _, m := range s.fl.inflightOrder() {
		if m.Pubrec {
			rd.Packets = append(rd.Packets, Packet{Type: packet.TypePubrel, PID: m.PID, Reason: packet.Success})
			continue
		}
		s.emit(now, m, true)
	}
	s.pump(now)
	return l
}

// capExpiry applies MaxSessionExpiry; it reports whether it lowered d.
func (s *Session) capExpiry(d time.Duration) (time.Duration, bool) {
	if max := s.cfg.MaxSessionExpiry; max > 0 && (d < 0 || d > max) {
		return max, true
	}
	return d, false
}

// reopen makes an ended session new again, for a clean start.
func (s *Session) reopen() {
	rd := s.ready()
	s.Init(s.cfg)
	s.rd = rd
	rd.Ended = false
}

// Disconnected tells the session its connection ended. A will is due unless the
// client sent DISCONNECT without asking for it: at once without a delay, else after
// the delay unless the client comes back first. A session with expiry 0 ends now;
// others wait offline for their expiry (Deadline).
func (s *Session) Disconnected(now time.Time) {
	l := s.link
	if l == nil || s.ended {
		return
	}
	s.link = nil
	rd := s.ready()
	if w := l.will(); w != nil && !l.graceful {
		if w.Delay == 0 {
			rd.Publish = append(rd.Publish, w.Msg)
		} else {
			x := s.aux()
			x.will, x.willAt = w, now.Add(w.Delay)
		}
	}
	if s.expiry == 0 {
		s.end()
		return
	}
	if s.expiry > 0 {
		s.aux().expireAt = now.Add(s.expiry)
	}
	s.noteQueueExpiry(now)
}

// End ends the session now (the server drops it): its subscriptions go, its stored
// records are deleted, and a will still waiting is published. A connection it has
// is kicked.
func (s *Session) End(now time.Time) {
	if s.ended {
		return
	}
	rd := s.ready()
	if l := s.link; l != nil {
		rd.Kick = true
		if w := l.will(); w != nil && w.Delay == 0 {
			rd.Publish = append(rd.Publish, w.Msg)
		}
		s.link = nil
	}
	s.end()
}

func (s *Session) end() {
	rd := s.ready()
	s.forgetAll()
	s.ended = true
	for _, e := range s.subs {
		e.live = false
		rd.Subs = append(rd.Subs, SubChange{Remove: e})
	}
	s.subs = nil
	if x := s.x; x != nil && x.will != nil {
		rd.Publish = append(rd.Publish, x.will.Msg)
	}
	s.x = nil
	s.fl.q = nil
	rd.Ended = true
}

// Tick runs the session's timers at now: the keepalive of a connected client; the
// delayed will, session expiry and queued messages' expiry of an offline one. It
// returns the error that ends a connection whose keepalive passed (Ready.Close).
func (s *Session) Tick(now time.Time) error {
	if s.ended {
		return nil
	}
	if l := s.link; l != nil {
		if l.KeepAlive > 0 && !now.Before(KeepAliveDeadline(time.Unix(0, l.heard), l.KeepAlive)) {
			return s.fail(packet.KeepAliveTimeout, fmt.Sprintf("keepalive %v passed without a packet", l.KeepAlive))
		}
		return nil
	}
	x := s.x
	if x == nil {
		return nil
	}
	if x.will != nil && !now.Before(x.willAt) {
		rd := s.ready()
		rd.Publish = append(rd.Publish, x.will.Msg)
		x.will, x.willAt = nil, time.Time{}
	}
	if !x.expireAt.IsZero() && !now.Before(x.expireAt) {
		s.end()
		return nil
	}
	if x.msgExpAt != 0 && now.UnixNano() >= x.msgExpAt {
		x.msgExpAt = s.fl.purge(now, s.forgetMsg)
	}
	s.ready() // the deadline moved
	return nil
}

// Heard tells the session its client sent something at now (keepalive); every
// client packet event implies it.
func (s *Session) Heard(now time.Time) {
	if s.link != nil && now.UnixNano() > s.link.heard {
		s.link.heard = now.UnixNano()
	}
}

// fail ends the connection for a protocol violation: a v5 client is told why.
func (s *Session) fail(reason packet.ReasonCode, text string) error {
	e := &Error{Reason: reason, Text: text}
	rd := s.ready()
	if l := s.link; l != nil && l.Version == packet.V5 {
		p := Packet{Type: packet.TypeDisconnect, Reason: reason}
		if l.ProblemInfo {
			p.Text = text
		}
		rd.Packets = append(rd.Packets, p)
	}
	rd.Close = e
	return e
}

func (s *Session) protocolError(reason packet.ReasonCode, format string, args ...any) error {
	return s.fail(reason, fmt.Sprintf(format, args...))
}

// ---------------------------------------------------------------------------------
// Client packets.

// Publish takes a PUBLISH from the client. It resolves a topic alias and returns
// the message's topic, and whether the driver is to publish it into the broker and
// then report the outcome with Published. It returns an error, with Ready.Close set,
// for a packet that breaks the protocol: an alias out of range or never set, more
// unreleased QoS 2 publishes than the receive maximum.
func (s *Session) Publish(now time.Time, p *packet.Publish) (topic string, publish bool, err error) {
	s.Heard(now)
	topic = p.Topic
	if l := s.link; l != nil && l.Version == packet.V5 && p.Props.HasTopicAlias {
		a := p.Props.TopicAlias
		if a == 0 || int(a) > s.cfg.TopicAliasMaximum {
			return "", false, s.protocolError(packet.TopicAliasInvalid, "topic alias %d out of 1..%d", a, s.cfg.TopicAliasMaximum)
		}
		if topic != "" {
			if l.rare == nil {
				l.rare = &linkRare{}
			}
			if l.rare.inAliases == nil {
				l.rare.inAliases = make(map[uint16]string)
			}
			l.rare.inAliases[a] = strings.Clone(topic)
		} else if l.rare != nil {
			topic = l.rare.inAliases[a]
		}
		if topic == "" {
			return "", false, s.protocolError(packet.ProtocolError, "topic alias %d not set", a)
		}
	}
	if p.QoS == 2 {
		x := s.aux()
		if _, dup := x.inQoS2[p.PacketID]; dup {
			// A resend of a message already published: acknowledge, do not publish again.
			s.ack(packet.TypePubrec, p.PacketID, packet.Success)
			return topic, false, nil
		}
		if len(x.inQoS2) >= s.cfg.ReceiveMaximum {
			return "", false, s.protocolError(packet.ReceiveMaximumExceeded, "more than %d QoS 2 publishes unreleased", s.cfg.ReceiveMaximum)
		}
		s.markQoS2(p.PacketID)
		if s.stored() {
			s.op(Op{Kind: OpSaveQoS2, PID: p.PacketID})
		}
	}
	if !MayPublish(topic) {
		s.Published(p, packet.NotAuthorized)
		return topic, false, nil
	}
	return topic, true, nil
}

// MayPublish reports whether a client may publish to topic: not to the "$" topics.
// A QoS 1 PUBLISH without a topic alias changes no session state, so a driver may
// take it on a path of its own — publish when MayPublish allows, then acknowledge
// with the outcome (NotAuthorized when it does not) — as Publish and Published would.
func MayPublish(topic string) bool { return !strings.HasPrefix(topic, "$") }

// Published acknowledges a QoS 1 or 2 PUBLISH with the outcome of its publication;
// a failed QoS 2 exchange ends at PUBREC.
func (s *Session) Published(p *packet.Publish, reason packet.ReasonCode) {
	switch p.QoS {
	case 1:
		s.ack(packet.TypePuback, p.PacketID, reason)
	case 2:
		if reason >= 0x80 {
			s.release(p.PacketID)
		}
		s.ack(packet.TypePubrec, p.PacketID, reason)
	}
}

func (s *Session) ack(t packet.Type, pid uint16, reason packet.ReasonCode) {
	rd := s.ready()
	rd.Packets = append(rd.Packets, Packet{Type: t, PID: pid, Reason: reason})
}

func (s *Session) markQoS2(pid uint16) {
	x := s.aux()
	if x.inQoS2 == nil {
		x.inQoS2 = make(map[uint16]struct{})
	}
	x.inQoS2[pid] = struct{}{}
}

// release forgets a QoS 2 publish received; it reports whether pid was awaiting
// release.
func (s *Session) release(pid uint16) bool {
	if s.x == nil {
		return false
	}
	_, ok := s.x.inQoS2[pid]
	delete(s.x.inQoS2, pid)
	if ok && s.cfg.Persist {
		s.op(Op{Kind: OpDeleteQoS2, PID: pid})
	}
	return ok
}

// Ack takes PUBACK, PUBREC, PUBREL or PUBCOMP from the client.
func (s *Session) Ack(now time.Time, p *packet.Ack) {
	s.Heard(now)
	switch p.Type {
	case packet.TypePuback, packet.TypePubcomp:
		s.acked(now, p.PacketID)
	case packet.TypePubrec:
		if p.Reason >= 0x80 { // a failure ends the exchange at once
			s.acked(now, p.PacketID)
			return
		}
		m := s.fl.received(p.PacketID)
		if m == nil {
			s.ack(packet.TypePubrel, p.PacketID, packet.PacketIdentifierNotFound)
			return
		}
		s.saveMsg(m)
		s.ack(packet.TypePubrel, p.PacketID, packet.Success)
	case packet.TypePubrel:
		reason := packet.Success
		if !s.release(p.PacketID) {
			reason = packet.PacketIdentifierNotFound
		}
		s.ack(packet.TypePubcomp, p.PacketID, reason)
	}
}

// acked ends the exchange of pid and fills the window from the queue.
func (s *Session) acked(now time.Time, pid uint16) {
	if m := s.fl.ack(pid); m != nil {
		s.forgetMsg(m)
	}
	s.pump(now)
}

// Discard ends the exchange of a PUBLISH the driver could not send (larger than the
// client's maximum packet size): it counts as delivered.
func (s *Session) Discard(now time.Time, pid uint16) {
	if pid != 0 {
		s.acked(now, pid)
	}
}

// Subscribe takes a SUBSCRIBE. subs[i] is the driver's parse of p.Subs[i] (with
// Subjects and Queue filled in), nil for a filter it found invalid. Ready then lists
// the broker subscriptions to make, the SUBACK, and the subscriptions that want
// retained messages.
func (s *Session) Subscribe(now time.Time, p *packet.Subscribe, subs []*Sub) error {
	s.Heard(now)
	v5 := s.link != nil && s.link.Version == packet.V5
	failure := func(r packet.ReasonCode) packet.ReasonCode {
		if !v5 {
			return 0x80
		}
		return r
	}
	reasons := make([]packet.ReasonCode, len(p.Subs))
	rd := s.ready()
	changed := false
	defer func() {
		if changed {
			s.saveSession()
		}
	}()
	for i, sp := range p.Subs {
		reasons[i] = packet.ReasonCode(min(sp.QoS, 2))
		if v5 && sp.NoLocal && strings.HasPrefix(sp.Filter, "$share/") {
			return s.protocolError(packet.ProtocolError, "no local on shared subscription %q", sp.Filter)
		}
		e := subs[i]
		switch {
		case e == nil:
			reasons[i] = failure(packet.TopicFilterInvalid)
			continue
		case e.Denied && e.Reason != 0:
			reasons[i] = failure(e.Reason)
			continue
		case e.Denied:
			reasons[i] = failure(packet.NotAuthorized)
			continue
		case s.ended:
			reasons[i] = failure(packet.UnspecifiedError)
			continue
		}
		old := s.subs[e.Filter]
		if s.subs == nil {
			s.subs = make(map[string]*Sub)
		}
		s.subs[e.Filter] = e
		s.live(old, e)
		changed = true
		rd.Subs = append(rd.Subs, SubChange{Add: e, Remove: old})
		if !e.Shared && (sp.RetainHandling == 0 || sp.RetainHandling == 1 && old == nil) {
			rd.Retained = append(rd.Retained, e)
		}
	}
	rd.Packets = append(rd.Packets, Packet{Type: packet.TypeSuback, PID: p.PacketID, Reasons: reasons})
	return nil
}

// Recheck decides the session's subscriptions again, for a client whose rights may
// differ from those they were made with (it resumed the session with rights that
// changed since): keep reports whether one stays. Those that do not are removed
// (and the session saved); the others are made again in the broker, Ready listing
// each as removed and added, so that the driver applies the new rights to their
// deliveries. The client is told nothing.
func (s *Session) Recheck(keep func(*Sub) bool) {
	if len(s.subs) == 0 || s.ended {
		return
	}
	rd := s.ready()
	removed := false
	for _, f := range slices.Sorted(maps.Keys(s.subs)) {
		e := s.subs[f]
		if keep(e) {
			rd.Subs = append(rd.Subs, SubChange{Add: e, Remove: e})
			continue
		}
		delete(s.subs, f)
		s.live(e, nil)
		removed = true
		rd.Subs = append(rd.Subs, SubChange{Remove: e})
	}
	if removed {
		s.saveSession()
	}
}

// Prune removes the subscriptions keep refuses, for a client whose rights
// changed while its session lives (a reload of the users file): the driver
// applies the new rights to the deliveries of those that stay itself, so Ready
// lists only the removed ones (and the session is saved when there are). The
// client is told nothing.
func (s *Session) Prune(keep func(*Sub) bool) {
	if len(s.subs) == 0 || s.ended {
		return
	}
	var rd *Ready
	for _, f := range slices.Sorted(maps.Keys(s.subs)) {
		e := s.subs[f]
		if keep(e) {
			continue
		}
		if rd == nil {
			rd = s.ready()
		}
		delete(s.subs, f)
		s.live(e, nil)
		rd.Subs = append(rd.Subs, SubChange{Remove: e})
	}
	if rd != nil {
		s.saveSession()
	}
}

// Unsubscribe takes an UNSUBSCRIBE.
func (s *Session) Unsubscribe(now time.Time, p *packet.Unsubscribe) {
	s.Heard(now)
	rd := s.ready()
	reasons := make([]packet.ReasonCode, len(p.Filters))
	removed := 0
	for i, f := range p.Filters {
		e := s.subs[f]
		if e == nil {
			reasons[i] = packet.NoSubscriptionExisted
			continue
		}
		delete(s.subs, f)
		s.live(e, nil)
		removed++
		rd.Subs = append(rd.Subs, SubChange{Remove: e})
	}
	if removed > 0 {
		s.saveSession()
	}
	rd.Packets = append(rd.Packets, Packet{Type: packet.TypeUnsuback, PID: p.PacketID, Reasons: reasons})
}

// Ping takes a PINGREQ.
func (s *Session) Ping(now time.Time) {
	s.Heard(now)
	rd := s.ready()
	rd.Packets = append(rd.Packets, Packet{Type: packet.TypePingresp})
}

// ClientDisconnect takes a DISCONNECT: the session expiry it may set, and whether
// the will is still due when the connection ends (reason 0x04). The driver then
// closes the connection and calls Disconnected.
func (s *Session) ClientDisconnect(now time.Time, p *packet.Disconnect) error {
	s.Heard(now)
	l := s.link
	if l == nil {
		return nil
	}
	if l.Version == packet.V5 && p.Props.HasSessionExpiry {
		if s.expiry == 0 && p.Props.SessionExpiry != 0 {
			return s.protocolError(packet.ProtocolError, "session expiry set at DISCONNECT after 0 at CONNECT")
		}
		d := time.Duration(p.Props.SessionExpiry) * time.Second
		if p.Props.SessionExpiry == 0xFFFFFFFF {
			d = -1
		}
		s.expiry, _ = s.capExpiry(d)
		s.expiryChanged()
	}
	l.graceful = p.Reason != packet.DisconnectWithWill
	return nil
}

// ---------------------------------------------------------------------------------
// Deliveries from the broker.

// Verdict is what becomes of a message the broker matched to one of the session's
// subscriptions.
type Verdict uint8

const (
	// Refuse: not for this session (the subscription is gone, a '$' topic on a
	// wildcard filter, QoS 0 for an absent client, a shared subscription whose
	// client is away so that another member gets it).
	Refuse Verdict = iota
	// Expired on the way: delivered to nobody, by definition.
	Expired
	// Send at QoS 0 now, straight to the connection.
	Send
	// Queue at QoS 1 or 2: the driver copies the message into an OutMsg and gives
	// it to Enqueue.
	Queue
)

// Presence is what routing reads of a session besides the subscriptions a message
// matched: whether a client is connected, and whether the session is over.
type Presence struct {
	Online, Ended bool
}

// Presence returns the session's, for a driver that keeps a copy to route by (see
// RouteLive); it changes only with Connect, Disconnected, End, Tick and Restored.
func (s *Session) Presence() Presence { return Presence{Online: s.link != nil, Ended: s.ended} }

// Route decides how a message that subs, one or several of the session's
// subscriptions, matched reaches the client: the message's QoS, retain flag, whether
// its subject starts with '$', and its expiry (Unix ns, 0 for none). The client gets
// one copy (MQTT 5, 3.3.4; 3.1.1 allows it) at the highest QoS the matching
// subscriptions were granted, with the retain flag if any of them asked for retain as
// published, and the identifier of each, once: Route appends them to ids and returns
// it. It changes nothing. Subscriptions replaced or removed count for nothing; the
// rule for the others is RouteLive's.
func (s *Session) Route(now time.Time, subs []*Sub, qos byte, retain, dollar bool, expireAt int64, ids []uint32) (v Verdict, outQoS byte, outRetain bool, outIDs []uint32) {
	var buf [8]*Sub
	live := buf[:0]
	for _, e := range subs {
		if e.live {
			live = append(live, e)
		}
	}
	return RouteLive(s.Presence(), now, live, qos, retain, dollar, expireAt, ids)
}

// RouteLive is the rule of Route as a pure function: subs are live subscriptions of a
// session whose presence is p. It reads only what never changes in a Sub once made
// (its options), so a driver may route without the session's lock from copies of p
// and of its subscriptions that it replaces whenever they change — its QoS 0 fast
// path: RouteLive allocates nothing, and ids may be on the caller's stack.
func RouteLive(p Presence, now time.Time, subs []*Sub, qos byte, retain, dollar bool, expireAt int64, ids []uint32) (v Verdict, outQoS byte, outRetain bool, outIDs []uint32) {
	if p.Ended {
		return Refuse, 0, false, ids
	}
	found, rap, shared := false, false, true
	for _, e := range subs {
		if e.DollarGuard && dollar { // a flag, not a map lookup: this is every delivery's path
			continue
		}
		found = true
		outQoS = max(outQoS, min(qos, e.QoS))
		rap = rap || e.RAP
		shared = shared && e.Shared
		if e.SubID != 0 && !slices.Contains(ids, e.SubID) {
			ids = append(ids, e.SubID)
		}
	}
	switch {
	case !found:
		return Refuse, 0, false, ids
	case expireAt != 0 && now.UnixNano() >= expireAt:
		return Expired, 0, false, ids
	}
	outRetain = retain && rap
	switch {
	case outQoS == 0 && !p.Online:
		return Refuse, 0, false, ids
	case outQoS == 0:
		return Send, 0, outRetain, ids
	case !p.Online && shared:
		return Refuse, 0, false, ids // let an online member of the group have it
	}
	return Queue, outQoS, outRetain, ids
}

// Enqueue puts a QoS 1/2 message in flight if the window and the client allow, else
// queues it. It reports false when the queue refused it (full, drop-new) or the
// session is over. now is read only for a message that expires (m.ExpireAt set): a
// driver may pass the zero Time for one that does not.
func (s *Session) Enqueue(now time.Time, m *OutMsg) bool {
	if s.ended {
		return false
	}
	switch {
	case s.cfg.StoredElsewhere && !s.stored():
		s.forgetMsg(m) // stored for a session that no longer persists
	case s.cfg.StoredElsewhere:
	case s.stored():
		s.aux().nextMID++
		m.MID = s.x.nextMID
	}
	if s.link != nil && s.fl.canSend(s.window()) {
		s.fl.start(m)
		if !s.cfg.StoredElsewhere || m.QoS == 2 {
			s.saveMsg(m)
		}
		s.emit(now, m, false)
		return true
	}
	evicted, ok := s.fl.enqueue(m, s.cfg.MaxQueued, s.cfg.DropOld)
	if !ok {
		if s.cfg.StoredElsewhere {
			s.forgetMsg(m)
		}
		m.MID = 0
		return false
	}
	if evicted != nil {
		s.forgetMsg(evicted)
	}
	if !s.cfg.StoredElsewhere {
		s.saveMsg(m)
	}
	if m.ExpireAt != 0 && s.link == nil {
		x := s.aux()
		if x.msgExpAt == 0 || m.ExpireAt < x.msgExpAt {
			x.msgExpAt = m.ExpireAt
			s.ready() // the deadline moved
		}
	}
	return true
}

// DeliverRetained sends a retained message matched by a new subscription sub, at
// the lower of its QoS and the subscription's.
func (s *Session) DeliverRetained(now time.Time, sub *Sub, m *OutMsg) {
	if s.link == nil || s.ended {
		return
	}
	m.QoS, m.Retain = min(m.QoS, sub.QoS), true
	if sub.SubID != 0 {
		m.SubIDs = []uint32{sub.SubID}
	}
	if m.QoS == 0 {
		s.emit(now, m, false)
		return
	}
	s.Enqueue(now, m)
}

// emit adds a PUBLISH of m. A message whose expiry has passed is not sent: in
// flight, its exchange ends as if acknowledged.
func (s *Session) emit(now time.Time, m *OutMsg, dup bool) {
	p := Packet{Type: packet.TypePublish, PID: m.PID, Msg: m, Dup: dup}
	if m.ExpireAt != 0 {
		left, ok := ExpiryLeft(m.ExpireAt, now)
		if !ok {
			if m.QoS > 0 {
				if m := s.fl.ack(m.PID); m != nil {
					s.forgetMsg(m)
				}
			}
			return
		}
		p.ExpiryLeft = left
	}
	rd := s.ready()
	rd.Packets = append(rd.Packets, p)
}

// pump moves queued messages into the window while the client is connected.
func (s *Session) pump(now time.Time) {
	if s.link == nil {
		return
	}
	for {
		m := s.fl.next(now, s.window(), s.forgetMsg)
		if m == nil {
			return
		}
		s.fl.start(m)
		if m.QoS == 2 {
			s.saveMsg(m) // its packet id must survive a restart for exactly once
		}
		s.emit(now, m, false)
	}
}

// noteQueueExpiry sets the earliest expiry among queued messages, for Deadline.
func (s *Session) noteQueueExpiry(now time.Time) {
	if s.fl.queueLen() == 0 {
		return
	}
	s.aux().msgExpAt = s.fl.purge(now, s.forgetMsg)
}

// ---------------------------------------------------------------------------------
// Restoring a stored session.

// Restore starts rebuilding a stored session with the given expiry; RestoreSub,
// RestoreMsg and RestoreQoS2 follow, then Restored. Nothing restored is written back.
func (s *Session) Restore(expiry time.Duration) {
	s.expiry, s.started, s.loading, s.persisted = expiry, true, true, true
}

// RestoreSub puts back a stored subscription; Ready lists it to subscribe.
func (s *Session) RestoreSub(e *Sub) {
	if s.subs == nil {
		s.subs = make(map[string]*Sub)
	}
	old := s.subs[e.Filter]
	s.subs[e.Filter] = e
	s.live(old, e)
	rd := s.ready()
	rd.Subs = append(rd.Subs, SubChange{Add: e, Remove: old})
}

// live marks the subscription that replaces old (nil for a removal).
func (s *Session) live(old, e *Sub) {
	if old != nil {
		old.live = false
	}
	if e != nil {
		e.live = true
	}
}

// RestoreMsg puts back a stored message; messages must come in the order of their
// MIDs.
func (s *Session) RestoreMsg(m *OutMsg) {
	s.fl.restore(m)
	x := s.aux()
	x.nextMID = max(x.nextMID, m.MID)
}

// RestoreQoS2 puts back a QoS 2 publish received and not released.
func (s *Session) RestoreQoS2(pid uint16) { s.markQoS2(pid) }

// Restored ends a restore: the session waits offline, its expiry counted from now.
func (s *Session) Restored(now time.Time) {
	s.loading = false
	if s.expiry > 0 {
		s.aux().expireAt = now.Add(s.expiry)
	}
	s.noteQueueExpiry(now)
	s.ready()
}
