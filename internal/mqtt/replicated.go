package mqtt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/subject"
)

// Proposer commits an entry of the cluster's MQTT group from any node (the cluster
// forwards it to the group's leader) and returns its index once committed.
type Proposer interface {
	ProposeMQTT(ctx context.Context, data []byte) (uint64, error)
}

// State is a node's replica of the cluster's MQTT group: every persistent session
// (its record, the QoS 1 and 2 messages stored for it, the QoS 2 publishes it
// received and did not release) and every retained message, as the records of the
// single-node store (kvStore keys and encodings). Every node applies the group's
// entries, so a client whose node died resumes its session on any other node.
//
// Besides records, an entry carries the QoS 1 and 2 messages MQTT clients published:
// applying one stores it, under a MID made of its position in the log, for every
// persistent session whose subscriptions match it then — the same sessions on every
// replica — and hands it to those of the sessions this node hosts. A publisher's
// PUBACK (PUBREC) waits for that commit, so a message acknowledged to its publisher
// is on a quorum of nodes for every persistent subscriber, wherever that subscriber
// is connected, or not connected at all.
type State struct {
	log       *slog.Logger
	maxQueued int

	mu       sync.RWMutex
	sessions map[string]*storedSession
	retained map[string][]byte
	// wills are the wills of connections with one, by key after kvWill (wills.go).
	wills map[string][]byte
	// subs indexes the stored sessions' subscriptions (shared ones excepted) by
	// their broker subjects, for the publications applied.
	subs     *subject.Sublist[*storedSub]
	applied  uint64
	appliedC chan struct{} // closed and replaced when applied moves

	srv *Server // the node's MQTT server, nil when it runs none

	// The ids of the last seenWindow publications applied, oldest first: part of
	// the state (and of snapshots), so every replica skips the same repeats.
	seen      map[uint64]struct{}
	seenOrder []uint64
}

// storedSub is one subscription of a stored session, in State.subs: sub's
// Subjects are the subjects inside the server, behind the prefix of the session's
// account, unlike a live session's.
type storedSub struct {
	client string
	sub    *sm.Sub
	prefix string // the session's account's (keyPrefix), "" for the global account
}

// storedSession is one client's records in the replicated state.
type storedSession struct {
	rec   []byte              // the session record, nil when only messages remain
	host  string              // rec's Host
	epoch uint64              // rec's Epoch
	subs  []*storedSub        // parsed from rec, indexed in State.subs
	msgs  map[uint64][]byte   // MID → encoded outMsg
	qos2  map[uint16]struct{} // QoS 2 publishes received and not released
}

func (ss *storedSession) empty() bool {
	return ss.rec == nil && len(ss.msgs) == 0 && len(ss.qos2) == 0
}

// NewState makes an empty replica of the MQTT group. maxQueued bounds the messages
// stored for one session (as Config.MaxQueued; newer ones are refused).
func NewState(maxQueued int, log *slog.Logger) *State {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxQueued <= 0 {
		maxQueued = DefaultConfig().MaxQueued
	}
	return &State{log: log, maxQueued: maxQueued, sessions: map[string]*storedSession{}, retained: map[string][]byte{}, wills: map[string][]byte{},
		subs: subject.NewSublist[*storedSub](), appliedC: make(chan struct{})}
}

var _ replica.StateMachine = (*State)(nil)

// Entry items. An entry is a count then that many items, each a kind byte and its
// fields (length-prefixed bytes, uvarints).
const (
	itemPut     = 1 // key, value
	itemDel     = 2 // key
	itemPublish = 3 // id, subject, payload, header, reply, flags (QoS | retain<<2), origin client, QoS 2 packet id
	// A session's own records, written by the node hosting it: applied only while
	// the session's record names that node as its host (or there is none yet),
	// so that a node another has taken the session from (it was paused, or cut
	// off, and declared dead) changes nothing once the other's claim is in the
	// log, and learns it (its held packets are never sent).
	itemPutFrom = 4 // node, epoch, key, value
	itemDelFrom = 5 // node, epoch, key
	// itemClaim makes a node the host of a stored session (its record's Host),
	// whatever the record says, and counts the claim in its Epoch: a client
	// connecting there, or the adoption of a session whose host is gone.
	itemClaim = 6 // client, node
	// itemPublishFrom is itemPublish from node, the host of the origin's session:
	// one that marks a QoS 2 packet id received is left out, like the session's
	// own records, once another node has claimed the session, or the new host,
	// which read the session before, would take the publisher's retry for a new
	// message.
	itemPublishFrom = 7 // node, epoch, then itemPublish's fields
)

// maxEntryItems bounds the items of one entry: a message's MID is its entry's index
// times this plus its position.
const maxEntryItems = 1 << 16

// pubItem is a QoS 1 or 2 message an MQTT client (or a will) published.
type pubItem struct {
	subject, payload, header, reply []byte
	qos                             byte
	retain                          bool
	origin                          string // the publishing client, for No Local
	qos2PID                         uint16 // the origin's QoS 2 packet id, marked received in the same entry
	from                            string // the node hosting origin's session, when qos2PID is set
	epoch                           uint64 // the claim of origin's session from publishes under
	// id is unique to this publication (its node's random prefix and a count):
	// an entry proposed again — its first commit's answer was lost — applies once.
	id uint64
}

func appendItem(b []byte, op *kvOp) []byte {
	switch {
	case op.pub != nil:
		p := op.pub
		if p.from != "" {
			b = append(b, itemPublishFrom)
			b = appendBytes(b, []byte(p.from))
			b = binary.AppendUvarint(b, p.epoch)
		} else {
			b = append(b, itemPublish)
		}
		b = binary.AppendUvarint(b, p.id)
		b = appendBytes(b, p.subject)
		b = appendBytes(b, p.payload)
		b = appendBytes(b, p.header)
		b = appendBytes(b, p.reply)
		flags := uint64(p.qos)
		if p.retain {
			flags |= 4
		}
		b = binary.AppendUvarint(b, flags)
		b = appendBytes(b, []byte(p.origin))
		return binary.AppendUvarint(b, uint64(p.qos2PID))
	case op.claim:
		b = append(b, itemClaim)
		b = appendBytes(b, []byte(op.key))
		return appendBytes(b, []byte(op.from))
	case op.val != nil && op.from != "":
		b = append(b, itemPutFrom)
		b = appendBytes(b, []byte(op.from))
		b = binary.AppendUvarint(b, op.epoch)
		b = appendBytes(b, []byte(op.key))
		return appendBytes(b, op.val)
	case op.val != nil:
		b = append(b, itemPut)
		b = appendBytes(b, []byte(op.key))
		return appendBytes(b, op.val)
	case op.from != "":
		b = append(b, itemDelFrom)
		b = appendBytes(b, []byte(op.from))
		b = binary.AppendUvarint(b, op.epoch)
		return appendBytes(b, []byte(op.key))
	default:
		b = append(b, itemDel)
		return appendBytes(b, []byte(op.key))
	}
}

// decodedItem is one item of an entry; its slices point into the entry.
type decodedItem struct {
	kind     byte
	key, val []byte
	from     []byte // the writing (or claiming) node
	epoch    uint64 // the claim from writes under
	pub      pubItem
}

var errBadEntry = errors.New("mqtt group: bad entry")

// decodeEntry reads an entry of the MQTT group; it never panics on any input.
func decodeEntry(b []byte) ([]decodedItem, error) {
	r := &byteReader{b: b}
	n := r.uvarint()
	if r.err != nil || n > maxEntryItems || n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%w: item count", errBadEntry)
	}
	items := make([]decodedItem, 0, n)
	for i := range n {
		if len(r.b) == 0 {
			return nil, fmt.Errorf("%w: item %d of %d missing", errBadEntry, i, n)
		}
		it := decodedItem{kind: r.b[0]}
		r.b = r.b[1:]
		switch it.kind {
		case itemPut:
			it.key, it.val = r.bytes(), r.bytes()
		case itemDel:
			it.key = r.bytes()
		case itemPutFrom:
			it.from, it.epoch = r.bytes(), r.uvarint()
			it.key, it.val = r.bytes(), r.bytes()
		case itemDelFrom:
			it.from, it.epoch = r.bytes(), r.uvarint()
			it.key = r.bytes()
		case itemClaim:
			it.key, it.from = r.bytes(), r.bytes()
			if r.err == nil && (len(it.key) == 0 || len(it.from) == 0) {
				return nil, fmt.Errorf("%w: a claim without a client or a node", errBadEntry)
			}
		case itemPublish, itemPublishFrom:
			p := &it.pub
			if it.kind == itemPublishFrom {
				p.from, p.epoch = string(r.bytes()), r.uvarint()
			}
			p.id = r.uvarint()
			p.subject, p.payload, p.header, p.reply = r.bytes(), r.bytes(), r.bytes(), r.bytes()
			flags := r.uvarint()
			p.origin = string(r.bytes())
			pid := r.uvarint()
			if r.err == nil && (flags&^7 != 0 || flags&3 == 0 || flags&3 == 3 || pid > math.MaxUint16) {
				return nil, fmt.Errorf("%w: publish flags %#x, packet id %d", errBadEntry, flags, pid)
			}
			p.qos, p.retain, p.qos2PID = byte(flags&3), flags&4 != 0, uint16(pid)
			if r.err == nil && len(p.subject) == 0 {
				return nil, fmt.Errorf("%w: publish without a subject", errBadEntry)
			}
		default:
			return nil, fmt.Errorf("%w: item kind %d", errBadEntry, it.kind)
		}
		if r.err != nil {
			return nil, fmt.Errorf("%w: item %d: %w", errBadEntry, i, r.err)
		}
		items = append(items, it)
	}
	if len(r.b) > 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadEntry, len(r.b))
	}
	return items, nil
}

// feed is a stored message for a session this node may host, handed to it once the
// state's lock is released.
type feed struct {
	client string
	msg    *outMsg
}

// Apply implements replica.StateMachine.
func (st *State) Apply(ents []replica.Entry) error {
	var feeds []feed
	var retainedSet, retainedDel, lost []string
	st.mu.Lock()
	for _, e := range ents {
		items, err := decodeEntry(e.Data)
		if err != nil {
			// Every replica refuses the same bytes the same way: skipping keeps them equal.
			st.log.Error("mqtt group: entry skipped", "index", e.Index, "err", err)
			continue
		}
		for i := range items {
			it := &items[i]
			switch it.kind {
			case itemPut:
				if st.putLocked(string(it.key), it.val) && strings.HasPrefix(string(it.key), kvRetained) {
					retainedSet = append(retainedSet, string(it.key[len(kvRetained):]))
				}
			case itemDel:
				if st.delLocked(string(it.key)) && strings.HasPrefix(string(it.key), kvRetained) {
					retainedDel = append(retainedDel, string(it.key[len(kvRetained):]))
				}
			case itemPutFrom:
				if !st.fencedLocked(sessionOfKey(string(it.key)), string(it.from), it.epoch) {
					st.putLocked(string(it.key), it.val)
				}
			case itemDelFrom:
				if !st.fencedLocked(sessionOfKey(string(it.key)), string(it.from), it.epoch) {
					st.delLocked(string(it.key))
				}
			case itemClaim:
				client, node := string(it.key), string(it.from)
				if was := st.claimLocked(client, node); st.srv != nil && was == st.srv.nodeName && node != was {
					lost = append(lost, client)
				}
			case itemPublish, itemPublishFrom:
				if it.pub.qos2PID != 0 && it.pub.from != "" && st.fencedLocked(it.pub.origin, it.pub.from, it.pub.epoch) {
					continue
				}
				if st.seenLocked(it.pub.id) {
					continue // proposed again after its first commit
				}
				feeds = st.routeLocked(e.Index*maxEntryItems+uint64(i), &it.pub, feeds)
			}
		}
		st.applied = e.Index
	}
	close(st.appliedC)
	st.appliedC = make(chan struct{})
	srv := st.srv
	set := st.retainedLocked(retainedSet)
	st.mu.Unlock()
	if srv != nil {
		srv.retained.replicated(set, retainedDel)
		for _, f := range feeds {
			srv.feedStored(f.client, f.msg)
		}
		for _, client := range lost {
			srv.hostedElsewhere(client)
		}
	}
	return nil
}

// sessionOfKey is the client id of a session's record key (session, message,
// QoS 2 packet id), "" for any other key.
func sessionOfKey(key string) string {
	if len(key) < 2 {
		return ""
	}
	kind, rest := key[:2], key[2:]
	switch kind {
	case kvSession:
		return rest
	case kvMessage, kvQoS2:
		client, _, _ := parseIDKey(kind, rest)
		return client
	}
	return ""
}

// fencedLocked reports whether what node wrote for client's session under claim
// epoch must be left out: the session's record names another host, or a later
// claim.
func (st *State) fencedLocked(client, node string, epoch uint64) bool {
	if client == "" {
		return false // not a session's record
	}
	ss := st.sessions[client]
	return ss != nil && ss.host != "" && (ss.host != node || ss.epoch != epoch)
}

// claimLocked makes node the host of client's stored session and returns the
// host it had ("" when there is no record to claim).
func (st *State) claimLocked(client, node string) (was string) {
	ss := st.sessions[client]
	if ss == nil || ss.rec == nil {
		return ""
	}
	var rec sessionRecord
	if err := json.Unmarshal(ss.rec, &rec); err != nil {
		return ""
	}
	was, rec.Host = rec.Host, node
	rec.Epoch++
	b, err := json.Marshal(rec)
	if err != nil {
		return was
	}
	ss.rec, ss.host, ss.epoch = b, node, rec.Epoch
	return was
}

// HostOf is the node that hosts client's stored session, "" when none does.
func (st *State) HostOf(client string) string {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if ss := st.sessions[client]; ss != nil {
		return ss.host
	}
	return ""
}

// hostErr is nil when node, under claim epoch, hosts client's stored
// session (or none does), so that what it wrote for the session was applied;
// else errHostedElsewhere, naming the host.
func (st *State) hostErr(client, node string, epoch uint64) error {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if !st.fencedLocked(client, node, epoch) {
		return nil
	}
	return fmt.Errorf("%w (%s)", errHostedElsewhere, st.sessions[client].host)
}

// retainedLocked decodes the retained messages of subjects that the state holds,
// for the server's retained store.
func (st *State) retainedLocked(subjects []string) []*retainedMsg {
	var out []*retainedMsg
	for _, subj := range subjects {
		if b, ok := st.retained[subj]; ok {
			if rm, err := decodeRetained(subj, b); err == nil {
				out = append(out, rm)
			}
		}
	}
	return out
}

// putLocked applies one record; it reports whether the key was a known kind.
func (st *State) putLocked(key string, val []byte) bool {
	if len(key) < 2 {
		return false
	}
	kind, rest := key[:2], key[2:]
	switch kind {
	case kvRetained:
		st.retained[rest] = append([]byte(nil), val...)
	case kvWill:
		st.wills[rest] = append([]byte(nil), val...)
	case kvSession:
		var rec sessionRecord
		if err := json.Unmarshal(val, &rec); err != nil {
			st.log.Error("mqtt group: bad session record ignored", keyAttr(rest), "err", err)
			return false
		}
		ss := st.session(rest)
		ss.rec, ss.host, ss.epoch = append([]byte(nil), val...), rec.Host, rec.Epoch
		st.unindexLocked(ss)
		prefix := keyPrefix(rest)
		for _, sr := range rec.Subs {
			if e, err := newSub(sr.Filter, sr.QoS, sr.NoLocal, sr.RAP, sr.SubID); err == nil && !e.Shared {
				if prefix != "" {
					for i, f := range e.Subjects {
						e.Subjects[i] = prefix + f
					}
				}
				x := &storedSub{client: rest, sub: e, prefix: prefix}
				ss.subs = append(ss.subs, x)
				for _, f := range e.Subjects {
					_ = st.subs.Insert(f, "", x) // valid: newSub made them
				}
			}
		}
	case kvMessage, kvQoS2:
		client, n, ok := parseIDKey(kind, rest)
		if !ok {
			return false
		}
		ss := st.session(client)
		if kind == kvQoS2 {
			ss.qos2[uint16(n)] = struct{}{}
		} else {
			ss.msgs[n] = append([]byte(nil), val...)
		}
	default:
		return false
	}
	return true
}

func (st *State) delLocked(key string) bool {
	if len(key) < 2 {
		return false
	}
	kind, rest := key[:2], key[2:]
	switch kind {
	case kvRetained:
		delete(st.retained, rest)
		return true
	case kvWill:
		delete(st.wills, rest)
		return true
	case kvSession:
		if ss := st.sessions[rest]; ss != nil {
			ss.rec, ss.host, ss.epoch = nil, "", 0
			st.unindexLocked(ss)
			st.dropIfEmpty(rest, ss)
		}
		return true
	case kvMessage, kvQoS2:
		client, n, ok := parseIDKey(kind, rest)
		if !ok {
			return false
		}
		if ss := st.sessions[client]; ss != nil {
			if kind == kvQoS2 {
				delete(ss.qos2, uint16(n))
			} else {
				delete(ss.msgs, n)
			}
			st.dropIfEmpty(client, ss)
		}
		return true
	}
	return false
}

// unindexLocked takes a session's subscriptions out of the index.
func (st *State) unindexLocked(ss *storedSession) {
	for _, x := range ss.subs {
		for _, f := range x.sub.Subjects {
			_ = st.subs.Remove(f, "", x)
		}
	}
	ss.subs = nil
}

func (st *State) session(client string) *storedSession {
	ss := st.sessions[client]
	if ss == nil {
		ss = &storedSession{msgs: map[uint64][]byte{}, qos2: map[uint16]struct{}{}}
		st.sessions[client] = ss
	}
	return ss
}

func (st *State) dropIfEmpty(client string, ss *storedSession) {
	if ss.empty() {
		delete(st.sessions, client)
	}
}

// parseIDKey splits the rest of a message or QoS 2 key into its client and id, as
// msgKey and qos2Key write them.
func parseIDKey(kind, rest string) (string, uint64, bool) {
	// The last NUL: an account's session key holds one (sessionKey).
	i := strings.LastIndexByte(rest, 0)
	if i < 0 {
		return "", 0, false
	}
	client, id := rest[:i], rest[i+1:]
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || id != strconv.FormatUint(n, 10) || (kind == kvQoS2 && (n == 0 || n > math.MaxUint16)) {
		return "", 0, false
	}
	return client, n, true
}

// seenWindow is how many publication ids the state remembers to apply each once.
const seenWindow = 1 << 16

// seenLocked reports whether publication id was applied already, and remembers
// it otherwise (0: an item without an id, always applied).
func (st *State) seenLocked(id uint64) bool {
	if id == 0 {
		return false
	}
	if _, ok := st.seen[id]; ok {
		return true
	}
	if st.seen == nil {
		st.seen = make(map[uint64]struct{})
	}
	if len(st.seenOrder) >= seenWindow {
		delete(st.seen, st.seenOrder[0])
		st.seenOrder = st.seenOrder[1:]
	}
	st.seen[id] = struct{}{}
	st.seenOrder = append(st.seenOrder, id)
	return false
}

// routeLocked stores p, under mid, for every stored session whose subscriptions
// match it, by the rule a session applies to a delivery (sm.RouteLive) for a client
// that is away: the highest QoS granted, retain as published, every subscription
// identifier once. Shared subscriptions are left to the broker, which picks one
// member of the group. The origin's QoS 2 packet id is marked received.
func (st *State) routeLocked(mid uint64, p *pubItem, feeds []feed) []feed {
	if p.qos2PID != 0 && p.origin != "" {
		st.session(p.origin).qos2[p.qos2PID] = struct{}{}
	}
	expireAt := expiryOf(p.header)
	matched := st.subs.Match(p.subject).Plain
	// One copy per session, from all its matching subscriptions (sm.RouteLive's
	// rule), in the order of each client's first match.
	type route struct {
		qos        byte
		found, rap bool
		ids        []uint32
		prefix     string
	}
	// The topic as the sessions' account names it; every session a subject
	// reaches is of one account, whose prefix the subject starts with.
	var topic, reply, topicPrefix string
	named := false
	byClient := make(map[string]*route, len(matched))
	var order []string
	for _, x := range matched {
		r := byClient[x.client]
		if r == nil {
			r = &route{prefix: x.prefix}
			byClient[x.client] = r
			order = append(order, x.client)
		}
		e := x.sub
		if (e.DollarGuard && IsDollar(external(p.subject, x.prefix))) || (e.NoLocal && x.client == p.origin) {
			continue
		}
		r.found = true
		r.qos = max(r.qos, min(p.qos, e.QoS))
		r.rap = r.rap || e.RAP
		if e.SubID != 0 && !slices.Contains(r.ids, e.SubID) {
			r.ids = append(r.ids, e.SubID)
		}
	}
	for _, client := range order {
		r, ss := byClient[client], st.sessions[client]
		found, qos, rap, ids := r.found && ss != nil, r.qos, r.rap, r.ids
		if !found || qos == 0 {
			continue // QoS 0 goes the broker's way, to a connected client only
		}
		if len(ss.msgs) >= st.maxQueued {
			st.log.Debug("mqtt group: session queue full, message refused", keyAttr(client))
			continue
		}
		if !named || r.prefix != topicPrefix {
			named, topicPrefix, reply = true, r.prefix, ""
			topic = string(AppendTopic(nil, external(p.subject, r.prefix)))
			if rp := externalReply(p.reply, r.prefix); len(rp) > 0 {
				reply = string(AppendTopic(nil, rp))
			}
		}
		m := &outMsg{MID: mid, Topic: topic, Reply: reply, QoS: qos, Retain: p.retain && rap, ExpireAt: expireAt, SubIDs: ids}
		if len(p.header) > 0 {
			m.Header = append([]byte(nil), p.header...)
		}
		m.Payload = append([]byte(nil), p.payload...)
		ss.msgs[mid] = encodeOutMsg(m)
		feeds = append(feeds, feed{client: client, msg: m})
	}
	return feeds
}

// Snapshot implements replica.StateMachine: every record, as key and value pairs.
func (st *State) Snapshot() ([]byte, error) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	var b []byte
	n := 0
	put := func(key string, val []byte) {
		b = appendBytes(b, []byte(key))
		b = appendBytes(b, val)
		n++
	}
	if len(st.seenOrder) > 0 {
		var ids []byte
		for _, id := range st.seenOrder {
			ids = binary.AppendUvarint(ids, id)
		}
		put(kvSeen, ids)
	}
	for _, subj := range slices.Sorted(maps.Keys(st.retained)) {
		put(kvRetained+subj, st.retained[subj])
	}
	for _, rest := range slices.Sorted(maps.Keys(st.wills)) {
		put(kvWill+rest, st.wills[rest])
	}
	for _, client := range slices.Sorted(maps.Keys(st.sessions)) {
		ss := st.sessions[client]
		if ss.rec != nil {
			put(kvSession+client, ss.rec)
		}
		for _, mid := range slices.Sorted(maps.Keys(ss.msgs)) {
			put(msgKey(client, mid), ss.msgs[mid])
		}
		for _, pid := range slices.Sorted(maps.Keys(ss.qos2)) {
			put(qos2Key(client, pid), []byte{})
		}
	}
	return append(binary.AppendUvarint(make([]byte, 0, len(b)+10), uint64(n)), b...), nil
}

// Restore implements replica.StateMachine.
func (st *State) Restore(data []byte) error {
	st.mu.Lock()
	old := slices.Collect(maps.Keys(st.retained))
	st.sessions, st.retained, st.wills = map[string]*storedSession{}, map[string][]byte{}, map[string][]byte{}
	st.subs = subject.NewSublist[*storedSub]()
	st.seen, st.seenOrder = nil, nil
	var err error
	if len(data) > 0 {
		r := &byteReader{b: data}
		n := r.uvarint()
		for i := uint64(0); i < n && r.err == nil; i++ {
			key, val := r.bytes(), r.bytes()
			if r.err == nil && string(key) == kvSeen {
				ids := &byteReader{b: val}
				for len(ids.b) > 0 && ids.err == nil {
					st.seenLocked(ids.uvarint())
				}
				err = ids.err
			} else if r.err == nil {
				st.putLocked(string(key), val)
			}
		}
		err = r.err
		if err == nil && len(r.b) > 0 {
			err = fmt.Errorf("%d trailing bytes", len(r.b))
		}
	}
	set := st.retainedLocked(slices.Collect(maps.Keys(st.retained)))
	srv := st.srv
	st.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mqtt group: snapshot: %w", err)
	}
	if srv != nil {
		srv.retained.replicated(set, old)
	}
	return nil
}

// waitApplied returns once the state has applied index, or ctx ends.
func (st *State) waitApplied(ctx context.Context, index uint64) error {
	for {
		st.mu.RLock()
		applied, ch := st.applied, st.appliedC
		st.mu.RUnlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// storedOf returns a copy of client's stored session: its record, messages by MID
// and unreleased QoS 2 packet ids; ok is false when it has no record.
func (st *State) storedOf(client string) (rec sessionRecord, msgs []*outMsg, qos2 []uint16, ok bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	ss := st.sessions[client]
	if ss == nil || ss.rec == nil {
		return rec, nil, nil, false
	}
	if err := json.Unmarshal(ss.rec, &rec); err != nil {
		return rec, nil, nil, false
	}
	for _, mid := range slices.Sorted(maps.Keys(ss.msgs)) {
		m, err := decodeOutMsg(ss.msgs[mid])
		if err != nil {
			st.log.Error("mqtt group: bad stored message skipped", keyAttr(client), "err", err)
			continue
		}
		m.MID = mid
		msgs = append(msgs, m)
	}
	qos2 = slices.Sorted(maps.Keys(ss.qos2))
	return rec, msgs, qos2, true
}

// ---------------------------------------------------------------------------------
// The server's side.

// SetReplication makes the server keep its persistent sessions and retained
// messages in the cluster's MQTT group: st is this node's replica, p commits
// entries. Call it before the first client connects; the server must have been made
// with Config.Replicated.
func (s *Server) SetReplication(st *State, p Proposer, nodeName string) {
	s.nodeName = nodeName
	s.pubIDs.Store(rand.Uint64() | 1<<63) // never 0, which is no id
	s.life = strconv.FormatUint(rand.Uint64(), 36)
	s.orphanWills = map[string]time.Time{}
	st.mu.Lock()
	st.srv = s
	set := st.retainedLocked(slices.Collect(maps.Keys(st.retained)))
	st.mu.Unlock()
	s.retained.replicated(set, nil)
	s.state = st
	s.kv.setProposer(st, p)
}

// replicatedSession rebuilds the session of clientID from the MQTT group, for a
// client that connects here while its session was hosted by another node (or by
// none, since that node died): nil when the group has no session of it. s.mu is
// held, so that every message the group stores for the client from now on finds
// the session (feedStored) or is in what was read.
func (s *Server) replicatedSession(clientID string) *session {
	rec, msgs, qos2, ok := s.state.storedOf(clientID)
	if !ok {
		return nil
	}
	sess := newSession(s, clientID)
	if rec.Epoch != 0 {
		sess.mu.Lock()
		sess.extra().epoch.Store(rec.Epoch)
		sess.mu.Unlock()
	}
	sess.m.Restore(time.Duration(rec.Expiry))
	acc := sess.restoreOwner(rec.User)
	for _, sr := range rec.Subs {
		e, err := newSub(sr.Filter, sr.QoS, sr.NoLocal, sr.RAP, sr.SubID)
		if err != nil || !s.mayKeep(acc, e) {
			continue
		}
		sess.m.RestoreSub(e)
	}
	x := sess.extra()
	for _, m := range msgs {
		sess.m.RestoreMsg(m)
		x.fedMID = max(x.fedMID, m.MID)
	}
	for _, pid := range qos2 {
		sess.m.RestoreQoS2(pid)
	}
	_ = sess.step(func(now time.Time) error {
		sess.m.Restored(now)
		return nil
	})
	s.log.Info("mqtt session resumed from the cluster", keyAttr(clientID), "messages", len(msgs))
	return sess
}

// AdoptOrphans hosts here the persistent sessions of the MQTT group that no node
// hosts: those whose host is a node that is not alive (killed, or gone for good),
// when adopt is set (the cluster sets it on the MQTT group's leader), and those
// whose host is this node but which it does not hold (it restarted). They wait
// offline here, take what the group stores for them, and end when their expiry
// passes, as on the node that hosted them. A client that connects to another node
// later takes its session there (ClaimedElsewhere lets it go here). It returns how
// many sessions it took.
func (s *Server) AdoptOrphans(adopt bool, alive func(node string) bool) int {
	if s.state == nil {
		return 0
	}
	s.publishOrphanWills(adopt, alive, time.Now())
	var orphans []string
	s.state.mu.RLock()
	for client, ss := range s.state.sessions {
		if ss.host != "" && (ss.host == s.nodeName || adopt && !alive(ss.host)) {
			orphans = append(orphans, client)
		}
	}
	s.state.mu.RUnlock()
	now := time.Now()
	var claimed []string
	for _, client := range orphans {
		s.mu.Lock()
		skip := s.closing || s.sessions[client] != nil || now.Sub(s.disowned[client]) < disownedGrace
		s.mu.Unlock()
		if skip {
			continue
		}
		if s.state.HostOf(client) != s.nodeName {
			// Claimed before it is read: its old host, should it come back,
			// writes nothing more to it once the claim is in the log.
			s.kv.claim(s.nodeName, client, nil)
		}
		claimed = append(claimed, client)
	}
	if len(claimed) == 0 {
		return 0
	}
	s.kv.sync()
	n := 0
	for _, client := range claimed {
		s.mu.Lock()
		if s.closing || s.sessions[client] != nil || s.state.HostOf(client) != s.nodeName {
			s.mu.Unlock()
			continue
		}
		if sess := s.replicatedSession(client); sess != nil {
			s.sessions[client] = sess
			n++
		}
		s.mu.Unlock()
	}
	if n > 0 {
		s.log.Info("mqtt sessions of nodes that are gone now hosted here", "sessions", n)
	}
	return n
}

// disownedGrace is how long a session this node let go is not taken back on the
// strength of a record naming this node as its host: the new host's record may
// not be committed yet.
const disownedGrace = time.Minute

// feedStored hands a message the group stored for client to its session, if this
// node hosts it.
func (s *Server) feedStored(client string, m *outMsg) {
	s.mu.Lock()
	sess := s.sessions[client]
	s.mu.Unlock()
	if sess != nil {
		sess.enqueueStored(m)
	}
}

// proposePublish commits a QoS 1 or 2 message a client (origin) published, with
// the QoS 2 packet id to mark received, and calls done once it is committed.
func (s *Server) proposePublish(m *broker.Message, origin string, epoch uint64, qos2PID uint16, done func(error)) {
	p := &pubItem{id: s.pubIDs.Add(1), subject: clone(m.Subject), payload: clone(m.Payload), header: clone(m.Header), reply: clone(m.Reply),
		qos: m.QoS, retain: m.Retain, origin: origin, qos2PID: qos2PID}
	if qos2PID != 0 {
		p.from, p.epoch = s.nodeName, epoch
		if done != nil {
			inner := done
			done = func(err error) {
				if err == nil {
					err = s.state.hostErr(origin, s.nodeName, epoch)
				}
				inner(err)
			}
		}
	}
	s.kv.enqueue(kvOp{pub: p, done: done})
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// replicatedTimeout bounds one attempt to commit an entry; the writer tries again
// until it succeeds or the server stops.
const replicatedTimeout = 5 * time.Second

// proposeBatch commits ops through the group as entries of at most maxEntryItems
// items and about 1 MiB, in order, each attempt retried until it commits or the
// store closes; then calls every op's done.
func (k *kvStore) proposeBatch(ops []kvOp) {
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < maxEntryItems-1 && size < 1<<20 {
			size += len(ops[n].key) + len(ops[n].val) + 16
			if p := ops[n].pub; p != nil {
				size += len(p.subject) + len(p.payload) + len(p.header) + len(p.reply)
			}
			n++
		}
		batch := ops[:n]
		ops = ops[n:]
		items := 0
		for i := range batch {
			if batch[i].pub != nil || batch[i].key != "" {
				items++
			}
		}
		var err error
		if items > 0 {
			data := binary.AppendUvarint(make([]byte, 0, size+8), uint64(items))
			for i := range batch {
				if batch[i].pub != nil || batch[i].key != "" {
					data = appendItem(data, &batch[i])
				}
			}
			err = k.commit(data)
		}
		for i := range batch {
			if batch[i].done != nil {
				batch[i].done(err)
			}
		}
	}
}

// commit proposes one entry until it is committed and applied here.
func (k *kvStore) commit(data []byte) error {
	backoff := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), replicatedTimeout)
		index, err := k.prop.ProposeMQTT(ctx, data)
		if err == nil {
			err = k.state.waitApplied(ctx, index)
		}
		cancel()
		if err == nil {
			return nil
		}
		k.mu.Lock()
		quit := k.quit
		k.mu.Unlock()
		if quit {
			return fmt.Errorf("mqtt group: not committed before shutdown: %w", err)
		}
		k.logger.Warn("mqtt group: entry not committed yet, trying again", "err", err)
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// sync returns once every record queued before it is committed.
func (k *kvStore) sync() {
	done := make(chan struct{})
	k.enqueue(kvOp{done: func(error) { close(done) }})
	<-done
}
