package stream

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Entries of a replicated stream partition's Raft group. The leader proposes them;
// every replica applies them in log order with partitionMachine.
//
// A message batch (entryMsgs), all integers unsigned varints unless said:
//
//	op (1 byte, 1)  token  time (zig-zag varint, Unix ns, the leader's clock)  count
//	count times: subject  header  payload, each as length then bytes
//
// token identifies the proposal on the node that made it, which answers its
// publishers from the results applying it gave; other replicas ignore it.
const entryMsgs byte = 1

// Limits of entries, checked when they are decoded.
const (
	maxEntryMsgs = 1 << 20
)

// errBadEntry marks an entry that does not decode: a replica cannot follow such a log.
var errBadEntry = errors.New("stream: malformed replicated entry")

// appendMsgEntry appends a message batch of the items of q to dst.
func appendMsgEntry(dst []byte, token uint64, ts int64, q *inbound, items []int) []byte {
	dst = append(dst, entryMsgs)
	dst = binary.AppendUvarint(dst, token)
	dst = binary.AppendVarint(dst, ts)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, i := range items {
		it := &q.items[i]
		for _, b := range [3][]byte{q.get(it.subj), q.get(it.hdr), q.get(it.data)} {
			dst = binary.AppendUvarint(dst, uint64(len(b)))
			dst = append(dst, b...)
		}
	}
	return dst
}

// msgEntry is a decoded message batch; next walks its messages.
type msgEntry struct {
	token uint64
	ts    int64
	count int
	rest  []byte
}

func decodeMsgEntry(b []byte) (msgEntry, error) {
	var e msgEntry
	if len(b) == 0 || b[0] != entryMsgs {
		return e, fmt.Errorf("%w: unknown op", errBadEntry)
	}
	b = b[1:]
	var n int
	if e.token, n = binary.Uvarint(b); n <= 0 {
		return e, fmt.Errorf("%w: token", errBadEntry)
	}
	b = b[n:]
	if e.ts, n = binary.Varint(b); n <= 0 {
		return e, fmt.Errorf("%w: time", errBadEntry)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxEntryMsgs {
		return e, fmt.Errorf("%w: message count", errBadEntry)
	}
	e.count, e.rest = int(count), b[n:]
	return e, nil
}

// next returns the next message; ok is false after the last. An entry whose bytes
// do not add up is an error.
func (e *msgEntry) next() (subj, hdr, data []byte, ok bool, err error) {
	if e.count == 0 {
		if len(e.rest) != 0 {
			return nil, nil, nil, false, fmt.Errorf("%w: %d bytes after the last message", errBadEntry, len(e.rest))
		}
		return nil, nil, nil, false, nil
	}
	var parts [3][]byte
	for i := range parts {
		l, n := binary.Uvarint(e.rest)
		if n <= 0 || l > uint64(len(e.rest)-n) {
			return nil, nil, nil, false, fmt.Errorf("%w: message field", errBadEntry)
		}
		parts[i] = e.rest[n : n+int(l) : n+int(l)]
		e.rest = e.rest[n+int(l):]
	}
	e.count--
	return parts[0], parts[1], parts[2], true, nil
}

// pubResult is what applying one message of a batch gave: its sequence, or that it
// was a duplicate of the message at seq, or the error the store refused it with.
type pubResult struct {
	seq  uint64
	dup  bool
	code int
	err  string
}

// partitionMachine is one replica of a stream partition: the Raft group's state
// machine (replica.StateMachine). Applying a message batch stores its messages, in
// order and with the leader's time, after the duplicate check, and commits them
// once; every replica does the same, so every replica's log holds the same
// messages under the same sequences.
//
// last is the sequence of the last message the machine stored. After a restart
// the group applies again the entries after its snapshot; a message whose
// sequence the log already holds was stored before the restart and is not stored
// twice.
type partitionMachine struct {
	log    *store.Log
	dedup  *dedupWindow
	last   uint64
	lastTS int64 // time of the last batch applied: the duplicate window's clock
	// done hands a batch's results to the node that proposed it (nil: none here).
	done    func(token uint64, res []pubResult)
	results []pubResult
	batches []appliedBatch
}

func newPartitionMachine(l *store.Log, window time.Duration, done func(uint64, []pubResult)) *partitionMachine {
	m := &partitionMachine{log: l, dedup: newDedupWindow(window), done: done}
	st := l.State()
	m.last, m.lastTS = st.LastSeq, st.LastTime
	m.rebuildDedup()
	return m
}

// rebuildDedup reloads the message ids stored within the window before the last
// stored message. The window is measured on the leader's clock as the entries
// carry it, never this node's, so that every replica decides alike.
func (m *partitionMachine) rebuildDedup() {
	m.dedup = newDedupWindow(m.dedup.window)
	if m.lastTS == 0 {
		return
	}
	r := m.log.NewReader(m.log.SeqForTime(m.lastTS - int64(m.dedup.window)))
	defer r.Close()
	for {
		rec, err := r.Next()
		if err != nil || rec.Seq > m.last {
			return
		}
		if id, ok := header.Block(rec.Header).Lookup(streamapi.HeaderMsgID); ok && id != "" {
			m.dedup.add(string([]byte(id)), 0, rec.Seq, rec.Time)
		}
	}
}

// Apply implements replica.StateMachine: the messages of every entry are stored,
// committed to the log once, and then each entry's results go to its proposer.
func (m *partitionMachine) Apply(ents []replica.Entry) error {
	m.results = m.results[:0]
	m.batches = m.batches[:0]
	for _, ent := range ents {
		e, err := decodeMsgEntry(ent.Data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", ent.Index, err)
		}
		from := len(m.results)
		for {
			subj, hdr, data, ok, err := e.next()
			if err != nil {
				return fmt.Errorf("entry %d: %w", ent.Index, err)
			}
			if !ok {
				break
			}
			m.results = append(m.results, m.store(e.ts, subj, hdr, data))
		}
		m.lastTS = max(m.lastTS, e.ts)
		m.batches = append(m.batches, appliedBatch{token: e.token, from: from, to: len(m.results)})
	}
	if len(m.results) > 0 {
		if err := m.log.Commit(); err != nil {
			// The entries are committed in the group; this replica could not
			// store them and must not go on as if it had.
			return fmt.Errorf("stream replica: %w", err)
		}
	}
	if m.done != nil {
		for _, b := range m.batches {
			m.done(b.token, m.results[b.from:b.to])
		}
	}
	return nil
}

// appliedBatch locates one entry's results in partitionMachine.results.
type appliedBatch struct {
	token    uint64
	from, to int
}

// store applies one message. Refusals by the store's limits are results, not
// failures: every replica refuses alike.
func (m *partitionMachine) store(ts int64, subj, hdr, data []byte) pubResult {
	id, hasID := header.Block(hdr).Lookup(streamapi.HeaderMsgID)
	if hasID && id != "" {
		if _, seq, dup := m.dedup.lookup(id, ts); dup {
			return pubResult{seq: seq, dup: true}
		}
	}
	seq := m.last + 1
	if st := m.log.State(); st.LastSeq >= seq {
		// Stored before a restart: this entry is being applied again.
		m.last = seq
		if hasID && id != "" {
			m.dedup.add(string([]byte(id)), 0, seq, ts)
		}
		return pubResult{seq: seq}
	}
	got, err := m.log.Append(subj, hdr, data, ts)
	if err != nil {
		return pubResult{code: errorCode(err), err: err.Error()}
	}
	if got != seq {
		return pubResult{code: streamapi.CodeInternal, err: fmt.Sprintf("stored at %d, expected %d", got, seq)}
	}
	m.last = seq
	if hasID && id != "" {
		m.dedup.add(string([]byte(id)), 0, seq, ts)
	}
	return pubResult{seq: seq}
}

// partitionSnapshot is what a snapshot of a partition replica holds: where its
// log ends. The messages themselves are in the replicas' logs; a replica whose log
// ends before the snapshot's must fetch the rest from another.
type partitionSnapshot struct {
	Last   uint64 `json:"last"`
	LastTS int64  `json:"last_ts"`
}

// Snapshot implements replica.StateMachine. The log is synced first: once the
// group compacts its Raft log behind the snapshot, the messages live only here.
func (m *partitionMachine) Snapshot() ([]byte, error) {
	if err := m.log.Sync(); err != nil {
		return nil, fmt.Errorf("stream replica: %w", err)
	}
	return json.Marshal(partitionSnapshot{Last: m.last, LastTS: m.lastTS})
}

// errBehindSnapshot is Restore's error for a replica whose log ends before the
// snapshot's end: it has to fetch the missing messages first.
var errBehindSnapshot = errors.New("stream replica: log ends before the snapshot")

// Restore implements replica.StateMachine.
func (m *partitionMachine) Restore(data []byte) error {
	var snap partitionSnapshot
	if len(data) > 0 {
		if err := json.Unmarshal(data, &snap); err != nil {
			return fmt.Errorf("stream replica: snapshot: %w", err)
		}
	}
	if st := m.log.State(); st.LastSeq < snap.Last {
		return fmt.Errorf("%w: log at %d, snapshot at %d", errBehindSnapshot, st.LastSeq, snap.Last)
	}
	m.last, m.lastTS = snap.Last, snap.LastTS
	m.rebuildDedup()
	return nil
}
