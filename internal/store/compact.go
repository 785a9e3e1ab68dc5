package store

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"time"
)

// Compaction (Config.Keys): a log that knows each record's key keeps, once a
// newer record of the same key exists, only the newer one, as a Kafka topic of
// cleanup.policy=compact does. What becomes removable is tracked as records are
// committed, so compacting never reads the log again; the removal itself is a
// Delete of each superseded record, decided by the owner's call to Compact (a
// replicated log's leader proposes the bounds, and every replica removes the
// same records).
//
// In memory: one entry per distinct live key (a 128-bit hash of it and its
// latest sequence, about 40 bytes), and one per superseded record and
// tombstone not yet removed. Open rebuilds all of it while it scans.

// KeySpace says what a record is compacted by.
type KeySpace uint8

const (
	// NotKeyed records are never removed by compaction.
	NotKeyed KeySpace = iota
	// KeyedBy records are compacted by Keyed.Key.
	KeyedBy
	// KeyedBySubject records are compacted by their subject; a subject is never
	// the same key as a Keyed.Key of the same bytes.
	KeyedBySubject
)

// Keyed is what Config.Keys says of a record.
type Keyed struct {
	Space KeySpace
	Key   string // with KeyedBy
	// Tombstone marks a record that deletes its key: once it is older than the
	// tombstone bound given to Compact, it goes too, and the key with it.
	Tombstone bool
}

// keyHash identifies a key: two independent 64-bit hashes, so that two keys
// of a log colliding (which would remove a live record) is as likely as a
// 128-bit hash collision.
type keyHash [2]uint64

// superseded is a record made removable by a later one of its key.
type superseded struct {
	old, by uint64
}

// tombstone is a record that deleted its key.
type tombstone struct {
	seq uint64
	key keyHash
}

// keyObs is a record appended since the last commit, for its key.
type keyObs struct {
	seq  uint64
	key  keyHash
	tomb bool
}

// keyState is a compacted log's knowledge of its keys; the writer's alone.
type keyState struct {
	fn       func(subject, header []byte) Keyed
	seeds    [2]maphash.Seed
	latest   map[keyHash]uint64 // each key's latest record
	old      fifo[superseded]   // in the order of their .by
	tombs    fifo[tombstone]    // in the order of their .seq
	pending  []keyObs           // appended, not yet committed
	prunedAt uint64             // Log.first when latest was last pruned
	due      []uint64           // Compact's scratch
}

// fifo is a queue on a slice that is moved down when half of it is taken.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) push(v T) { q.items = append(q.items, v) }
func (q *fifo[T]) len() int { return len(q.items) - q.head }
func (q *fifo[T]) peek() *T { return &q.items[q.head] }
func (q *fifo[T]) clear()   { q.items, q.head = q.items[:0], 0 }
func (q *fifo[T]) pop() (v T) {
	v = q.items[q.head]
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 1024 && q.head > len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		q.items, q.head = q.items[:n], 0
	}
	return v
}

func newKeyState(fn func(subject, header []byte) Keyed) *keyState {
	return &keyState{fn: fn, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, latest: make(map[keyHash]uint64)}
}

// hash returns the key of a record and whether it has one.
func (k *keyState) hash(subject, header []byte) (keyHash, bool, bool) {
	kd := k.fn(subject, header)
	var h keyHash
	var m maphash.Hash
	for i := range h {
		m.SetSeed(k.seeds[i])
		m.WriteByte(byte(kd.Space))
		switch kd.Space {
		case KeyedBy:
			m.WriteString(kd.Key)
		case KeyedBySubject:
			m.Write(subject)
		default:
			return h, false, false
		}
		h[i] = m.Sum64()
	}
	return h, true, kd.Tombstone
}

// note records an appended record, to be counted at Commit.
func (k *keyState) note(seq uint64, subject, header []byte) {
	if h, ok, tomb := k.hash(subject, header); ok {
		k.pending = append(k.pending, keyObs{seq: seq, key: h, tomb: tomb})
	}
}

// noteBlock records the messages of a block appended from first on.
func (k *keyState) noteBlock(first uint64, inner []byte) {
	for b := inner; len(b) > 0; first++ {
		subj, hdr, _, rest, ok := nextBlockMessage(b)
		if !ok {
			return
		}
		k.note(first, subj, hdr)
		b = rest
	}
}

// add counts a committed (or, at Open, a live) record of key h.
func (k *keyState) add(seq uint64, h keyHash, tomb bool) {
	if prev, ok := k.latest[h]; ok && prev < seq {
		k.old.push(superseded{old: prev, by: seq})
	}
	k.latest[h] = seq
	if tomb {
		k.tombs.push(tombstone{seq: seq, key: h})
	}
}

// commit counts what was appended since the last commit.
func (k *keyState) commit() {
	for _, o := range k.pending {
		k.add(o.seq, o.key, o.tomb)
	}
	k.pending = k.pending[:0]
}

func (k *keyState) reset() {
	clear(k.latest)
	k.old.clear()
	k.tombs.clear()
	k.pending = k.pending[:0]
	k.prunedAt = 0
}

// CompactBounds returns the bounds Compact takes, by the log's clock: records
// superseded by one below bound may go, and tombstones below tombBound. Neither
// reaches into the active segment (the head of the log, which consumers that
// keep up read in full, as Kafka's cleaner leaves its active segment), bound
// leaves the records of the last minLag (Kafka's min.compaction.lag.ms), and
// tombBound those of the last tombstoneAge (delete.retention.ms). Any reader
// may call it.
func (l *Log) CompactBounds(minLag, tombstoneAge time.Duration) (bound, tombBound uint64) {
	l.mu.RLock()
	head := l.active().base
	l.mu.RUnlock()
	now := l.cfg.Now()
	bound = head
	if minLag > 0 {
		bound = min(bound, l.SeqForTime(now.Add(-minLag).UnixNano()))
	}
	tombBound = min(bound, l.SeqForTime(now.Add(-tombstoneAge).UnixNano()))
	return bound, tombBound
}

// CompactDue reports whether Compact with these bounds would remove anything
// (a record it names may have gone already). Writer only.
func (l *Log) CompactDue(bound, tombBound uint64) bool {
	k := l.keys
	if k == nil {
		return false
	}
	tombBound = min(tombBound, bound)
	return k.old.len() > 0 && k.old.peek().by < bound || k.tombs.len() > 0 && k.tombs.peek().seq < tombBound
}

// Compact removes, in a log with Config.Keys, every record superseded by a
// later one of its key below bound, and every tombstone below tombBound (at
// most bound: a tombstone goes only after the records it superseded) that is
// still its key's latest record, forgetting the key. It returns how many
// records it removed. Writer only; the same bounds on the same log remove the
// same records.
func (l *Log) Compact(bound, tombBound uint64) (int, error) {
	k := l.keys
	if k == nil {
		return 0, fmt.Errorf("store %q: compact: %w", l.cfg.Name, ErrNotCompacted)
	}
	tombBound = min(tombBound, bound)
	due := k.due[:0]
	for k.old.len() > 0 && k.old.peek().by < bound {
		due = append(due, k.old.pop().old)
	}
	for k.tombs.len() > 0 && k.tombs.peek().seq < tombBound {
		t := k.tombs.pop()
		if k.latest[t.key] == t.seq {
			delete(k.latest, t.key)
			due = append(due, t.seq)
		}
	}
	k.due = due[:0]
	n := 0
	if len(due) > 0 {
		var err error
		if n, err = l.DeleteMany(due); err != nil {
			return n, fmt.Errorf("store %q: compact: %w", l.cfg.Name, err)
		}
	}
	l.pruneKeys()
	l.countKeys()
	return n, nil
}

// SetKeys makes the log compacted by the keys fn says (Config.Keys), learning
// those of the records it holds by reading them, or, with nil, no longer
// compacted. Writer only, between commits.
func (l *Log) SetKeys(fn func(subject, header []byte) Keyed) error {
	if l.npend > 0 {
		return fmt.Errorf("store %q: keys set with appends not committed", l.cfg.Name)
	}
	l.cfg.Keys = fn
	if fn == nil {
		l.keys = nil
		l.countKeys()
		return nil
	}
	l.keys = newKeyState(fn)
	return l.rebuildKeys()
}

// countKeys publishes how many keys the log knows, for State. Writer only.
func (l *Log) countKeys() {
	n := 0
	if l.keys != nil {
		n = len(l.keys.latest)
	}
	l.keyCount.Store(int64(n))
}

// pruneKeys forgets keys whose latest record fell off the front of the log
// (age or size limits beside compaction), once the front has moved by as many
// sequences as there are keys, so that the walk costs O(1) a removed record.
func (l *Log) pruneKeys() {
	k := l.keys
	if l.first-k.prunedAt < uint64(len(k.latest)) {
		return
	}
	k.prunedAt = l.first
	for h, seq := range k.latest {
		if seq < l.first {
			delete(k.latest, h)
		}
	}
}

// Keys returns how many distinct keys a compacted log holds (0 without
// Config.Keys), counting keys whose latest record was removed otherwise until
// they are forgotten.
func (l *Log) Keys() int {
	if l.keys == nil {
		return 0
	}
	return len(l.keys.latest)
}

// rebuildKeys reads the whole log again for its keys, after TruncateAfter
// removed records they may name.
func (l *Log) rebuildKeys() error {
	k := l.keys
	k.reset()
	r := l.NewReader(l.first)
	defer r.Close()
	for {
		rec, err := r.Next()
		var corr *Corruption
		switch {
		case err == nil:
			if h, ok, tomb := k.hash(rec.Subject, rec.Header); ok {
				k.add(rec.Seq, h, tomb)
			}
		case errors.Is(err, io.EOF):
			l.countKeys()
			return nil
		case errors.As(err, &corr):
		default:
			return fmt.Errorf("store %q: reading keys: %w", l.cfg.Name, err)
		}
	}
}
