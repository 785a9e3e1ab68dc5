package mqtt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/store"
)

// kvStore keeps MQTT state that must survive a restart — persistent sessions, the
// messages queued and in flight for them, QoS 2 publishes awaiting release, retained
// messages — as keys and values in one store.Log: a put appends a record whose
// subject is the key and tombstones the key's previous record, a delete tombstones
// it. One writer goroutine applies everything queued since its last wake-up as one
// batch: only the last change of each key is written (a message acknowledged in the
// batch that queued it costs nothing), one commit, one DeleteMany, so one fsync each
// under sync=always.
type kvStore struct {
	log    *store.Log // nil when the records go to the cluster's MQTT group
	logger *slog.Logger

	// In a cluster, each wake-up's records and published messages are proposed
	// to the MQTT group as one entry instead (proposeBatch); nothing is proposed
	// before the proposer is set.
	prop    Proposer
	state   *State
	propSet chan struct{}

	mu    sync.Mutex
	ops   []kvOp
	spare []kvOp
	quit  bool

	wake chan struct{}
	done chan struct{}

	live map[string]uint64 // key → seq of its record; the writer's
	last map[string]int    // scratch: index of each key's last op in a batch
	dels []uint64
}

type kvOp struct {
	key string
	val []byte // nil: delete
	// In a cluster: pub is a published message instead of a record, and done,
	// when set, is called once the op is committed (with the error that kept it
	// from being committed before shutdown). An op without key and pub is a
	// barrier (sync).
	pub  *pubItem
	done func(error)
	// In a cluster: from, when set, is the node writing a session's record as
	// its host (fenced: applied only while the session is that node's); with
	// claim set, the op makes node from the host of the session whose client id
	// is key.
	from  string
	epoch uint64 // the claim of the session from writes under
	claim bool
}

// newReplicatedKV makes the store of a server whose state lives in the cluster's
// MQTT group; it proposes nothing until setProposer.
func newReplicatedKV(logger *slog.Logger) *kvStore {
	k := &kvStore{logger: logger, wake: make(chan struct{}, 1), done: make(chan struct{}), propSet: make(chan struct{})}
	go k.run()
	return k
}

func (k *kvStore) setProposer(st *State, p Proposer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.prop == nil {
		k.prop, k.state = p, st
		close(k.propSet)
	}
}

// openKV opens (recovering) the log in dir and returns its live contents.
func openKV(dir string, sync store.SyncPolicy, interval time.Duration, logger *slog.Logger) (*kvStore, map[string][]byte, error) {
	l, rep, err := store.Open(store.Config{Dir: dir, Name: "mqtt", Sync: sync, SyncInterval: interval, SegmentBytes: 16 << 20})
	if err != nil {
		return nil, nil, fmt.Errorf("mqtt state: %w", err)
	}
	for _, c := range rep.Corrupt {
		logger.Error("mqtt state: damaged records skipped", "detail", c)
	}
	k := &kvStore{log: l, logger: logger, wake: make(chan struct{}, 1), done: make(chan struct{}),
		live: make(map[string]uint64), last: make(map[string]int)}
	data := make(map[string][]byte)
	r := l.NewReader(l.State().FirstSeq)
	for {
		rec, err := r.Next()
		if err != nil {
			var corr *store.Corruption
			if errors.As(err, &corr) {
				continue // reported by Open; the records around it are read
			}
			if !errors.Is(err, io.EOF) {
				r.Close()
				_ = l.Close()
				return nil, nil, fmt.Errorf("mqtt state: %w", err)
			}
			break
		}
		key := string(rec.Subject)
		if old, ok := k.live[key]; ok {
			k.dels = append(k.dels, old) // a crash between a put and its tombstone
		}
		k.live[key] = rec.Seq
		data[key] = append([]byte(nil), rec.Payload...)
	}
	r.Close()
	if len(k.dels) > 0 {
		_, _ = l.DeleteMany(k.dels)
		k.dels = k.dels[:0]
	}
	go k.run()
	return k, data, nil
}

func (k *kvStore) put(key string, val []byte) {
	if val == nil {
		val = []byte{}
	}
	k.enqueue(kvOp{key: key, val: val})
}

func (k *kvStore) del(key string) { k.enqueue(kvOp{key: key}) }

// putAs and delAs write a session's record as its host, node, under the
// session's claim epoch (in a cluster).
func (k *kvStore) putAs(node string, epoch uint64, key string, val []byte) {
	if val == nil {
		val = []byte{}
	}
	k.enqueue(kvOp{key: key, val: val, from: node, epoch: epoch})
}

func (k *kvStore) delAs(node string, epoch uint64, key string) {
	k.enqueue(kvOp{key: key, from: node, epoch: epoch})
}

// claim makes node the host of client's stored session (in a cluster); done, when
// set, is called once the claim is committed.
func (k *kvStore) claim(node, client string, done func(error)) {
	k.enqueue(kvOp{key: client, from: node, claim: true, done: done})
}

func (k *kvStore) enqueue(op kvOp) {
	k.mu.Lock()
	quit := k.quit
	if !quit {
		k.ops = append(k.ops, op)
	}
	k.mu.Unlock()
	if quit && op.done != nil {
		op.done(errServerClosing)
		return
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *kvStore) run() {
	defer close(k.done)
	for {
		<-k.wake
		k.mu.Lock()
		ops, quit := k.ops, k.quit
		k.ops = k.spare[:0]
		k.mu.Unlock()
		if k.log == nil {
			k.replicate(ops, quit)
		} else {
			k.apply(ops)
		}
		clear(ops)
		k.mu.Lock()
		k.spare = ops[:0]
		k.mu.Unlock()
		if quit {
			return
		}
	}
}

// errServerClosing is what an op queued while the store closes is told.
var errServerClosing = errors.New("mqtt state: closing")

// replicate proposes a batch once the proposer is set; a store closed before that
// proposes nothing.
func (k *kvStore) replicate(ops []kvOp, quit bool) {
	if len(ops) == 0 {
		return
	}
	select {
	case <-k.propSet:
		k.proposeBatch(ops)
		return
	default:
	}
	if !quit {
		// Not set yet: wait for it, or for close.
		for {
			select {
			case <-k.propSet:
				k.proposeBatch(ops)
				return
			case <-time.After(100 * time.Millisecond):
			}
			k.mu.Lock()
			quit = k.quit
			k.mu.Unlock()
			if quit {
				break
			}
		}
	}
	for i := range ops {
		if ops[i].done != nil {
			ops[i].done(errServerClosing)
		}
	}
}

// apply writes one batch: the last op of each key wins.
func (k *kvStore) apply(ops []kvOp) {
	if len(ops) == 0 {
		return
	}
	clear(k.last)
	for i, op := range ops {
		k.last[op.key] = i
	}
	defer func() {
		for _, op := range ops {
			if op.done != nil {
				op.done(nil)
			}
		}
	}()
	k.dels = k.dels[:0]
	for i, op := range ops {
		if k.last[op.key] != i {
			continue
		}
		if old, ok := k.live[op.key]; ok {
			k.dels = append(k.dels, old)
			delete(k.live, op.key)
		}
		if op.val == nil {
			continue
		}
		seq, err := k.log.Append([]byte(op.key), nil, op.val, 0)
		if err != nil {
			k.logger.Error("mqtt state: write failed", "err", err)
			continue
		}
		k.live[op.key] = seq
	}
	if err := k.log.Commit(); err != nil {
		k.logger.Error("mqtt state: commit failed", "err", err)
	}
	if len(k.dels) > 0 {
		if _, err := k.log.DeleteMany(k.dels); err != nil {
			k.logger.Error("mqtt state: delete failed", "err", err)
		}
	}
}

// close writes what is queued and closes the log.
func (k *kvStore) close() error {
	k.mu.Lock()
	if k.quit {
		k.mu.Unlock()
		return nil
	}
	k.quit = true
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
	<-k.done
	if k.log == nil {
		return nil
	}
	return k.log.Close()
}

// ---------------------------------------------------------------------------------
// Keys and values. Keys use NUL as separator: MQTT client ids and topics cannot
// contain it.

const (
	kvSession  = "s\x00" // + client id → sessionRecord (JSON)
	kvMessage  = "m\x00" // + client id + "\x00" + message id → encoded outMsg
	kvQoS2     = "q\x00" // + client id + "\x00" + packet id → empty
	kvRetained = "r\x00" // + subject → encoded retainedMsg
	kvWill     = "w\x00" // + client id + "\x00" + connection → willRecord (JSON), in a cluster only
	// kvSeen is the MQTT group's snapshot record of the publication ids it
	// applied last (State.seenOrder), uvarints.
	kvSeen = "x\x00seen"
)

func msgKey(client string, mid uint64) string {
	return kvMessage + client + "\x00" + fmt.Sprint(mid)
}

func qos2Key(client string, pid uint16) string {
	return kvQoS2 + client + "\x00" + fmt.Sprint(pid)
}

// sessionRecord is what a persistent session stores besides its messages.
type sessionRecord struct {
	Expiry int64       `json:"expiry_ns"` // <0: never
	Subs   []subRecord `json:"subs,omitempty"`
	// Host is the cluster node that hosts the session (runs its expiry, takes
	// what the MQTT group stores for it); "" alone.
	Host string `json:"host,omitempty"`
	// Epoch counts the claims of the session in the cluster's MQTT group: a host
	// writes as (Host, Epoch), so that what it proposed before another node's
	// claim, and its own claim back after, is still left out.
	Epoch uint64 `json:"epoch,omitempty"`
	// User is the user the session belongs to, "" anonymous (or made without
	// authentication): a restored session has that user's rights.
	User string `json:"user,omitempty"`
}

type subRecord struct {
	Filter  string `json:"filter"`
	QoS     byte   `json:"qos"`
	NoLocal bool   `json:"no_local,omitempty"`
	RAP     bool   `json:"rap,omitempty"`
	SubID   uint32 `json:"sub_id,omitempty"`
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

var errTruncated = errors.New("truncated value")

type byteReader struct {
	b   []byte
	err error
}

func (r *byteReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *byteReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errTruncated
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Flags of a stored message. The first subscription identifier has a field of its own
// (0 for none), as in records written before a message could carry several; the
// others follow it, counted, only when flagMoreSubIDs is set, so those records read
// the same.
const (
	flagRetain     = 4
	flagPubrec     = 8
	flagMoreSubIDs = 16
	knownFlags     = 3 | flagRetain | flagPubrec | flagMoreSubIDs
)

// encodeOutMsg stores a message queued or in flight for a session.
func encodeOutMsg(m *outMsg) []byte {
	b := make([]byte, 0, 32+5*len(m.SubIDs)+len(m.Topic)+len(m.Reply)+len(m.Header)+len(m.Payload))
	flags := uint64(m.QoS)
	if m.Retain {
		flags |= flagRetain
	}
	if m.Pubrec {
		flags |= flagPubrec
	}
	var first uint32
	if len(m.SubIDs) > 0 {
		first = m.SubIDs[0]
	}
	if len(m.SubIDs) > 1 {
		flags |= flagMoreSubIDs
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(m.PID))
	b = binary.AppendUvarint(b, uint64(first))
	if len(m.SubIDs) > 1 {
		b = binary.AppendUvarint(b, uint64(len(m.SubIDs)-1))
		for _, id := range m.SubIDs[1:] {
			b = binary.AppendUvarint(b, uint64(id))
		}
	}
	b = binary.AppendUvarint(b, uint64(m.ExpireAt))
	b = appendBytes(b, []byte(m.Topic))
	b = appendBytes(b, []byte(m.Reply))
	b = appendBytes(b, m.Header)
	return appendBytes(b, m.Payload)
}

func decodeOutMsg(b []byte) (*outMsg, error) {
	r := &byteReader{b: b}
	flags := r.uvarint()
	m := &outMsg{QoS: byte(flags & 3), Retain: flags&flagRetain != 0, Pubrec: flags&flagPubrec != 0}
	pid := r.uvarint()
	ids, err := readSubIDs(r, flags&flagMoreSubIDs != 0)
	if err != nil {
		return nil, fmt.Errorf("mqtt state: bad message record: %w", err)
	}
	m.SubIDs = ids
	m.ExpireAt = int64(r.uvarint())
	m.Topic = string(r.bytes())
	m.Reply = string(r.bytes())
	if h := r.bytes(); len(h) > 0 {
		m.Header = h
	}
	m.Payload = r.bytes()
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("mqtt state: bad message record: %w", r.err)
	case flags&^knownFlags != 0:
		return nil, fmt.Errorf("mqtt state: bad message record: unknown flags %#x", flags)
	case m.QoS == 0 || m.QoS > 2:
		return nil, fmt.Errorf("mqtt state: bad message record: QoS %d", m.QoS)
	case pid > math.MaxUint16:
		return nil, fmt.Errorf("mqtt state: bad message record: packet id %d", pid)
	case len(r.b) > 0:
		return nil, fmt.Errorf("mqtt state: bad message record: %d trailing bytes", len(r.b))
	}
	m.PID = uint16(pid)
	return m, nil
}

// readSubIDs reads a stored message's subscription identifiers: the first (0 for
// none) and, with more, their count and the others. Only what encodeOutMsg writes is
// accepted (no flag without a first, no zero among the others), so that a record
// that decodes encodes back to an equal message.
func readSubIDs(r *byteReader, more bool) ([]uint32, error) {
	first := r.uvarint()
	switch {
	case r.err != nil:
		return nil, nil // reported with the record's other fields
	case first > math.MaxUint32:
		return nil, fmt.Errorf("subscription id %d", first)
	case first == 0 && more:
		return nil, errors.New("more subscription ids without a first")
	case first == 0:
		return nil, nil
	case !more:
		return []uint32{uint32(first)}, nil
	}
	n := r.uvarint()
	switch {
	case r.err != nil:
		return nil, nil
	case n == 0 || n > uint64(len(r.b)): // each takes a byte at least
		return nil, fmt.Errorf("%d more subscription ids in %d bytes", n, len(r.b))
	}
	ids := make([]uint32, 1, n+1)
	ids[0] = uint32(first)
	for range n {
		id := r.uvarint()
		if r.err != nil {
			return nil, nil
		}
		if id == 0 || id > math.MaxUint32 {
			return nil, fmt.Errorf("subscription id %d", id)
		}
		ids = append(ids, uint32(id))
	}
	return ids, nil
}

func encodeRetained(rm *retainedMsg) []byte {
	b := binary.AppendUvarint(nil, uint64(rm.qos))
	b = binary.AppendUvarint(b, uint64(rm.expireAt))
	b = appendBytes(b, []byte(rm.reply))
	b = appendBytes(b, rm.header)
	return appendBytes(b, rm.payload)
}

func decodeRetained(subj string, b []byte) (*retainedMsg, error) {
	r := &byteReader{b: b}
	qos := r.uvarint()
	rm := &retainedMsg{subject: subj, expireAt: int64(r.uvarint())}
	rm.reply = string(r.bytes())
	if h := r.bytes(); len(h) > 0 {
		rm.header = h
	}
	rm.payload = r.bytes()
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("mqtt state: bad retained record: %w", r.err)
	case qos > 2:
		return nil, fmt.Errorf("mqtt state: bad retained record: QoS %d", qos)
	case len(r.b) > 0:
		return nil, fmt.Errorf("mqtt state: bad retained record: %d trailing bytes", len(r.b))
	}
	rm.qos = byte(qos)
	return rm, nil
}
