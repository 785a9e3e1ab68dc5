package stream

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/s2pace"
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

// A message batch compressed in blocks (entryMsgsBlocks), all integers unsigned
// varints unless said:
//
//	op (1 byte, 10)  token  time (zig-zag varint)  count
//	then, to the end, blocks: messages  inner length  S2 length (4 bytes, little
//	endian)  S2 block
//
// A block's inner bytes are its messages' fields as an entryMsgs entry has
// them, which is also the inner form of the store's message blocks
// (store.AppendBlockMessage): at most store.BlockBytes of them, or one message.
// The leader compresses a batch of at least compressMinBytes that shrinks by an
// eighth or more — subjects and header keys repeat from message to message — so
// that its Raft log, its appends to the followers and theirs carry fewer bytes.
// Every replica expands it to apply it, and writes each block whose messages
// are all stored as they came to its log as it is (store.Log.AppendBlock):
// nobody compresses them again.
const entryMsgsBlocks byte = 10

// An entry of the batch compressed whole (entryMsgsS2): the op (1 byte, 9), then
// the S2 block (github.com/klauspost/compress/s2) of the whole entryMsgs entry,
// op included. Leaders proposed them before entryMsgsBlocks; replicas still
// apply them from their Raft logs.
const entryMsgsS2 byte = 9

// compressMinBytes is the smallest message batch compressed: below it the bytes
// saved are not worth a pass.
const compressMinBytes = 512

// maxEntryExpanded bounds what a compressed entry may expand to: a batch of
// maxEntryBytes and one message over it, with room to spare; a block that says
// more is malformed.
const maxEntryExpanded = 64 << 20

// entryBuffers are scratch buffers for message batches before compression and
// after expansion, shared by every stream: a stream keeps none while idle, which
// matters with a thousand of them.
var entryBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEntry bounds the buffers entryBuffers keeps: an entry of
// maxEntryBytes and one large message past it.
const maxPooledEntry = 2 * maxEntryBytes

// putEntryBuffer gives b back to entryBuffers unless it grew past
// maxPooledEntry.
func putEntryBuffer(b *[]byte) {
	if cap(*b) <= maxPooledEntry {
		entryBuffers.Put(b)
	}
}

// compressMsgEntry is the entry to propose for the message batch plain (made by
// appendMsgEntry): an entryMsgsBlocks entry in a buffer of its own, exactly its
// size, when that saves an eighth, else plain itself. The entry is made in
// scratch buffers, so a batch that does not shrink costs no allocation. sizes,
// when not nil, are the batch's messages' sizes in it (msgSizes).
func compressMsgEntry(plain []byte, sizes []int) []byte {
	if len(plain) < compressMinBytes {
		return plain
	}
	scratch := entryBuffers.Get().(*[]byte)
	defer putEntryBuffer(scratch)
	var ok bool
	if *scratch, ok = appendBlocksEntry((*scratch)[:0], plain, store.BlockBytes, sizes); !ok || len(*scratch) > len(plain)-len(plain)/8 {
		return plain
	}
	return bytes.Clone(*scratch)
}

// appendBlocksEntry appends to dst the entryMsgsBlocks entry of the batch plain,
// in blocks of at most blockBytes inner bytes or one message; false if plain
// is not a well-formed batch. sizes, when not nil, are the sizes of its messages'
// fields in plain, so that plain is not walked to find where each ends.
func appendBlocksEntry(dst, plain []byte, blockBytes int, sizes []int) ([]byte, bool) {
	e, err := decodeMsgEntry(plain)
	if err != nil {
		return dst, false
	}
	if sizes != nil && len(sizes) != e.count {
		return dst, false
	}
	out := append(dst, entryMsgsBlocks)
	out = binary.AppendUvarint(out, e.token)
	out = binary.AppendVarint(out, e.ts)
	out = binary.AppendUvarint(out, uint64(e.count))
	addBlock := func(inner []byte, msgs int) {
		out = binary.AppendUvarint(out, uint64(msgs))
		out = binary.AppendUvarint(out, uint64(len(inner)))
		// The block is made in place, after room for its length.
		at, n := len(out), s2.MaxEncodedLen(len(inner))
		out = slices.Grow(out, 4+n)[:at+4+n]
		block := s2.Encode(out[at+4:], inner)
		binary.LittleEndian.PutUint32(out[at:], uint32(len(block)))
		out = out[:at+4+len(block)]
	}
	inner, msgs := e.rest, 0 // inner[:size] are the next block's msgs messages
	size, left := 0, len(e.rest)
	for k := 0; ; k++ {
		var n int
		if sizes != nil {
			if k == len(sizes) {
				break
			}
			if n = sizes[k]; n < 3 || n > left {
				return dst, false
			}
			left -= n
		} else {
			before := len(e.rest)
			if _, _, _, ok, err := e.next(); err != nil {
				return dst, false
			} else if !ok {
				break
			}
			n = before - len(e.rest)
		}
		if msgs > 0 && size+n > blockBytes {
			addBlock(inner[:size], msgs)
			inner, size, msgs = inner[size:], 0, 0
		}
		size += n
		msgs++
	}
	if sizes != nil && left != 0 {
		return dst, false
	}
	if msgs > 0 {
		addBlock(inner[:size], msgs)
	}
	return out, true
}

// msgBlock is one block of an entryMsgsBlocks entry.
type msgBlock struct {
	msgs  int
	inner int    // the length of its messages' fields
	s2    []byte // the S2 block of them, in the entry
}

// decodeBlocksEntry reads the header and the blocks of the entryMsgsBlocks
// entry b, appending the blocks to blocks. It checks that the blocks hold count
// messages and expand to no more than maxEntryExpanded; not their contents.
func decodeBlocksEntry(b []byte, blocks []msgBlock) (e msgEntry, _ []msgBlock, err error) {
	if len(b) == 0 || b[0] != entryMsgsBlocks {
		return e, blocks, fmt.Errorf("%w: unknown op", errBadEntry)
	}
	b = b[1:]
	var n int
	if e.token, n = binary.Uvarint(b); n <= 0 {
		return e, blocks, fmt.Errorf("%w: token", errBadEntry)
	}
	b = b[n:]
	if e.ts, n = binary.Varint(b); n <= 0 {
		return e, blocks, fmt.Errorf("%w: time", errBadEntry)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxEntryMsgs {
		return e, blocks, fmt.Errorf("%w: message count", errBadEntry)
	}
	b = b[n:]
	e.count = int(count)
	msgs, expanded := uint64(0), uint64(0)
	for len(b) > 0 {
		var blk msgBlock
		k, n := binary.Uvarint(b)
		if n <= 0 || k == 0 || k > count-msgs {
			return e, blocks, fmt.Errorf("%w: a block's message count", errBadEntry)
		}
		b = b[n:]
		inner, n := binary.Uvarint(b)
		if n <= 0 || inner > maxEntryExpanded-expanded || inner < 3*k {
			return e, blocks, fmt.Errorf("%w: a block's length", errBadEntry)
		}
		b = b[n:]
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			return e, blocks, fmt.Errorf("%w: a block's S2 length", errBadEntry)
		}
		l := int(binary.LittleEndian.Uint32(b))
		blk.s2, b = b[4:4+l:4+l], b[4+l:]
		if l, err := s2.DecodedLen(blk.s2); err != nil || uint64(l) != inner {
			return e, blocks, fmt.Errorf("%w: a block of %d bytes that says %d (%v)", errBadEntry, inner, l, err)
		}
		blk.msgs, blk.inner = int(k), int(inner)
		msgs += k
		expanded += inner
		blocks = append(blocks, blk)
	}
	if msgs != count {
		return e, blocks, fmt.Errorf("%w: blocks of %d messages in a batch of %d", errBadEntry, msgs, count)
	}
	return e, blocks, nil
}

// expandBlocksEntry appends to buf (reused) the entryMsgs entry of the batch e,
// whose blocks decodeBlocksEntry read.
func expandBlocksEntry(buf []byte, e msgEntry, blocks []msgBlock) ([]byte, error) {
	buf = append(buf[:0], entryMsgs)
	buf = binary.AppendUvarint(buf, e.token)
	buf = binary.AppendVarint(buf, e.ts)
	buf = binary.AppendUvarint(buf, uint64(e.count))
	for _, blk := range blocks {
		at := len(buf)
		buf = slices.Grow(buf, blk.inner)[:at+blk.inner]
		out, err := s2.Decode(buf[at:], blk.s2)
		if err != nil || len(out) != blk.inner || &out[0] != &buf[at] { // inner >= 3: decodeBlocksEntry
			return buf, fmt.Errorf("%w: a block: %v", errBadEntry, err)
		}
	}
	return buf, nil
}

// compressGate paces a partition's attempts at compressing its batches
// (s2pace.Gate).
type compressGate struct{ s2pace.Gate }

// entry is compressMsgEntry(plain) or plain, as the gate's pace says. Batches
// under compressMinBytes are not attempts and do not move the pace.
func (g *compressGate) entry(plain []byte, sizes []int) []byte {
	if len(plain) < compressMinBytes || !g.Try() {
		return plain
	}
	e := compressMsgEntry(plain, sizes)
	g.Shrank(e[0] != entryMsgs)
	return e
}

// expandMsgEntry expands a compressed message batch b into buf (reused) and
// returns the entryMsgs entry.
func expandMsgEntry(buf, b []byte) ([]byte, error) {
	n, err := s2.DecodedLen(b[1:])
	if err != nil || n > maxEntryExpanded {
		return buf, fmt.Errorf("%w: compressed batch of %d bytes (%v)", errBadEntry, n, err)
	}
	out, err := s2.Decode(buf[:cap(buf)], b[1:])
	if err != nil {
		return buf, fmt.Errorf("%w: compressed batch: %v", errBadEntry, err)
	}
	if len(out) == 0 || out[0] != entryMsgs {
		return out, fmt.Errorf("%w: a compressed batch of something else", errBadEntry)
	}
	return out, nil
}

// Limits of entries, checked when they are decoded.
const (
	maxEntryMsgs = 1 << 20
)

// errBadEntry marks an entry that does not decode: a replica cannot follow such a log.
var errBadEntry = errors.New("stream: malformed replicated entry")

// appendField appends a length-prefixed field of an entry.
func appendField(dst, f []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(f))), f...)
}

// readFields reads len(fields) length-prefixed fields off the front of b and returns
// what follows them; a field that does not fit is errBadEntry naming what.
func readFields(b []byte, what string, fields ...*[]byte) ([]byte, error) {
	for _, f := range fields {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return b, fmt.Errorf("%w: %s field", errBadEntry, what)
		}
		*f = b[n : n+int(l) : n+int(l)]
		b = b[n+int(l):]
	}
	return b, nil
}

// msgEntrySize is the size appendMsgEntry makes of the items of q.
func msgEntrySize(token uint64, ts int64, q *inbound, items []int) int {
	n := 1 + uvarintLen(token) + uvarintLen(uint64(ts<<1^ts>>63)) + uvarintLen(uint64(len(items)))
	for _, i := range items {
		n += q.items[i].entryLen()
	}
	return n
}

// entryLen is the size of the item's fields in a message batch, lengths
// included.
func (it *inItem) entryLen() int {
	n := 0
	for _, f := range [3]span{it.subj, it.hdr, it.data} {
		n += uvarintLen(uint64(f.n)) + f.n
	}
	return n
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// msgSizes appends to dst the size of each of the items of q in a message batch
// (appendMsgEntry).
func msgSizes(dst []int, q *inbound, items []int) []int {
	for _, i := range items {
		dst = append(dst, q.items[i].entryLen())
	}
	return dst
}

// appendMsgEntry appends a message batch of the items of q to dst.
func appendMsgEntry(dst []byte, token uint64, ts int64, q *inbound, items []int) []byte {
	dst = slices.Grow(dst, msgEntrySize(token, ts, q, items))
	dst = append(dst, entryMsgs)
	dst = binary.AppendUvarint(dst, token)
	dst = binary.AppendVarint(dst, ts)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, i := range items {
		// The store's form of a message in a message block: an entry's blocks
		// are written to the replicas' logs as they are.
		it := &q.items[i]
		dst = store.AppendBlockMessage(dst, q.get(it.subj), q.get(it.hdr), q.get(it.data))
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
	if e.rest, err = readFields(e.rest, "message", &subj, &hdr, &data); err != nil {
		return nil, nil, nil, false, err
	}
	e.count--
	return subj, hdr, data, true, nil
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
	part int // the partition's index in its stream
	// mu is the log's writer role, between the group's apply loop (Apply,
	// Restore) and the stream's writer, which swaps in the segment rewrites
	// finished beside it (finishCleaning).
	mu     sync.Mutex
	log    *store.Log
	dedup  *dedupWindow
	last   uint64
	lastTS int64 // time of the last batch applied: the duplicate window's clock
	// failed is set by store when this replica could not store a message (its
	// disk, not the stream's limits): the Apply under way fails.
	failed error
	// done hands a batch's results to the node that proposed it (nil: none here).
	done func(token uint64, res []pubResult)
	// fetch gets the records a snapshot is ahead of the log by (nil: none can be).
	fetch Fetcher
	// purged hands a purge's count to the node that proposed it (nil: none here).
	purged func(token, n uint64, err error)
	logger *slog.Logger
	// consumers are the stream's durable consumers (nil: entries of consumers
	// cannot be applied).
	consumers *consumerSet
	delSeqs   []uint64   // applyRemoval's scratch
	blocks    []msgBlock // Apply's, of the entry it applies
	results   []pubResult
	batches   []appliedBatch
	// compression is the store.Compression the stream's configuration asks
	// for, set by setCompression from any goroutine; logCompression is what the
	// log was opened with or last given (CompressNone unless the opener says).
	// The log's setting is for its writer, this machine, to change: Apply and
	// Restore pass it on before they write.
	compression    atomic.Int32
	logCompression store.Compression
	// segmentAge is the store.Config.SegmentAge the configuration asks for
	// (a compacted stream's max lag), passed to the log as compression is.
	segmentAge atomic.Int64
	// lent are the plain batches of the compressed entries this node proposed
	// and has not seen applied: applying one of them stores its plain batch
	// instead of expanding the entry again.
	lent lentPlains
}

// lentPlains hands the plain batch of a compressed entry from its proposer to
// the machine applying it. Whichever takes it back (take or unlend) owns the
// pooled buffer.
type lentPlains struct {
	mu  sync.Mutex
	all []lentPlain
}

type lentPlain struct {
	entry []byte // the compressed entry proposed
	plain *[]byte
}

// lend registers plain as the batch entry expands to.
func (l *lentPlains) lend(entry []byte, plain *[]byte) {
	l.mu.Lock()
	l.all = append(l.all, lentPlain{entry, plain})
	l.mu.Unlock()
}

// take returns the plain batch lent for an entry of the bytes data and forgets
// it; nil when none is. Equal compressed bytes expand to the same batch, so the
// entry applied need not be the proposer's slice (the group keeps a copy).
func (l *lentPlains) take(data []byte) *[]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lp := range l.all {
		if bytes.Equal(lp.entry, data) {
			l.all = slices.Delete(l.all, i, i+1)
			return lp.plain
		}
	}
	return nil
}

// unlend forgets the plain batch lent for entry; false when the machine took it.
func (l *lentPlains) unlend(entry []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lp := range l.all {
		if len(lp.entry) > 0 && &lp.entry[0] == &entry[0] {
			l.all = slices.Delete(l.all, i, i+1)
			return true
		}
	}
	return false
}

func newPartitionMachine(l *store.Log, window time.Duration, done func(uint64, []pubResult)) *partitionMachine {
	m := &partitionMachine{log: l, dedup: newDedupWindow(window), done: done, logger: slog.New(slog.DiscardHandler)}
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
			m.dedup.add(parseMsgID(id), m.part, rec.Seq, rec.Time)
		}
	}
}

// finishCleaning swaps in a segment rewrite finished beside the log's writer
// and starts the next: called by the rewrite as it finishes, and by the
// stream's writer tick. When the group is applying, its Apply does it, and
// this waits for no one.
func (m *partitionMachine) finishCleaning() {
	if !m.mu.TryLock() {
		return
	}
	defer m.mu.Unlock()
	m.swapCleaned()
}

// swapCleaned swaps in a finished segment rewrite and starts the next; m.mu is
// held.
func (m *partitionMachine) swapCleaned() {
	if m.log.Cleaning() {
		clean(m.log, m.finishCleaning, m.logger)
	}
}

// setCompression asks the machine to write the log's next commits with c (the
// stream's configuration changed). Any goroutine.
func (m *partitionMachine) setCompression(c store.Compression) {
	m.compression.Store(int32(c))
}

// passCompression gives the log the compression setCompression last asked for,
// and the segment age segmentAge holds. Only how the log is laid out changes;
// the messages stored are the same on every replica.
func (m *partitionMachine) passCompression() error {
	m.log.SetSegmentAge(time.Duration(m.segmentAge.Load()))
	c := store.Compression(m.compression.Load())
	if c == m.logCompression {
		return nil
	}
	if err := m.log.SetCompression(c); err != nil {
		return fmt.Errorf("stream replica: %w", err)
	}
	m.logCompression = c
	return nil
}

// Apply implements replica.StateMachine: the messages of every entry are stored,
// committed to the log once, and then each entry's results go to its proposer.
func (m *partitionMachine) Apply(ents []replica.Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.passCompression(); err != nil {
		return err
	}
	// A rewrite beside the log's writer, this machine, that finished while
	// finishCleaning could not take the log: swapped in now.
	m.swapCleaned()
	m.results = m.results[:0]
	m.batches = m.batches[:0]
	committed := 0
	for _, ent := range ents {
		var op byte
		if len(ent.Data) > 0 {
			op = ent.Data[0]
		}
		var err error
		switch op {
		case entryMsgs:
			err = m.applyMsgs(ent.Data, nil)
		case entryMsgsBlocks:
			var e msgEntry
			if e, m.blocks, err = decodeBlocksEntry(ent.Data, m.blocks[:0]); err != nil {
				break
			}
			buf := m.lent.take(ent.Data)
			if buf == nil {
				buf = entryBuffers.Get().(*[]byte)
				*buf, err = expandBlocksEntry(*buf, e, m.blocks)
			} // else proposed here: its plain batch
			if err == nil {
				err = m.applyMsgs(*buf, m.blocks) // the log copies what it keeps
			}
			putEntryBuffer(buf)
		case entryMsgsS2:
			buf := entryBuffers.Get().(*[]byte)
			if *buf, err = expandMsgEntry(*buf, ent.Data); err == nil {
				err = m.applyMsgs(*buf, nil)
			}
			putEntryBuffer(buf)
		case entryDelete, entryExpire, entryPurge, entryCompact:
			// The messages of earlier entries of this batch are committed
			// first: a removal may name them.
			if len(m.results) > committed {
				if err := m.log.Commit(); err != nil {
					return fmt.Errorf("stream replica: %w", err)
				}
				committed = len(m.results)
			}
			switch op {
			case entryPurge:
				err = m.applyPurge(ent.Data)
			case entryCompact:
				err = m.applyCompaction(ent.Data)
			default:
				err = m.applyRemoval(ent.Data)
			}
		default:
			if m.consumers == nil {
				err = fmt.Errorf("%w: a consumer entry for a stream without consumers", errBadEntry)
			} else {
				err = m.consumers.apply(ent.Index, ent.Data)
			}
		}
		if err != nil {
			return fmt.Errorf("entry %d: %w", ent.Index, err)
		}
	}
	if len(m.results) > committed {
		if err := m.log.Commit(); err != nil {
			// The entries are committed in the group; this replica could not
			// store them and must not go on as if it had.
			return fmt.Errorf("stream replica: %w", err)
		}
	}
	if m.consumers != nil {
		if err := m.consumers.flush(); err != nil {
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

// applyMsgs stores the messages of one message batch, b an entryMsgs entry;
// its results go after the others of this Apply. blocks are the batch's as it
// was proposed (entryMsgsBlocks), in the same order, or nil.
func (m *partitionMachine) applyMsgs(b []byte, blocks []msgBlock) error {
	e, err := decodeMsgEntry(b)
	if err != nil {
		return err
	}
	from := len(m.results)
	// Only an entry applied again after a restart finds its messages stored.
	replay := m.log.State().LastSeq > m.last
	// Each block's messages are stored as its block when they all can be;
	// without blocks, the batch is one run of messages stored one by one.
	runs := blocks
	if runs == nil {
		runs = []msgBlock{{msgs: e.count, inner: len(e.rest)}}
	}
	for _, run := range runs {
		if run.inner > len(e.rest) || run.msgs > e.count {
			return fmt.Errorf("%w: blocks longer than the batch", errBadEntry)
		}
		part := msgEntry{ts: e.ts, count: run.msgs, rest: e.rest[:run.inner]}
		e.rest, e.count = e.rest[run.inner:], e.count-run.msgs
		if blocks != nil && !replay && m.logCompression == store.CompressS2 && m.log.RoomFor(part.rest, run.s2) == nil {
			err = m.storeBlock(part, run.s2)
		} else {
			err = m.storeEach(part, replay)
		}
		if err != nil {
			m.log.Rollback()
			return err
		}
	}
	if e.count != 0 || len(e.rest) != 0 {
		m.log.Rollback()
		return fmt.Errorf("%w: a batch longer than its blocks", errBadEntry)
	}
	m.lastTS = max(m.lastTS, e.ts)
	m.batches = append(m.batches, appliedBatch{token: e.token, from: from, to: len(m.results)})
	return nil
}

// storeEach stores the messages of e one by one.
func (m *partitionMachine) storeEach(e msgEntry, replay bool) error {
	for {
		subj, hdr, data, ok, err := e.next()
		if err != nil || !ok {
			return err
		}
		m.results = append(m.results, m.store(e.ts, subj, hdr, data, replay))
		if m.failed != nil {
			err := m.failed
			m.failed = nil
			return err
		}
	}
}

// storeBlock stores the messages of e, a block of a batch the log has room for
// (store.Log.RoomFor), as block, the S2 block of their fields, when none of them
// is a duplicate or refused; otherwise those that are not one by one.
func (m *partitionMachine) storeBlock(e msgEntry, block []byte) error {
	from := len(m.results)
	all := true
	for walk := e; ; {
		_, hdr, _, ok, err := walk.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		res, id, fresh := m.admit(e.ts, hdr, false)
		if fresh {
			m.stored(res.seq, id, e.ts)
		}
		all = all && fresh
		m.results = append(m.results, res)
	}
	if all {
		first, err := m.log.AppendBlock(e.ts, e.rest, block)
		if err == nil && first != m.results[from].seq {
			err = fmt.Errorf("stored at %d, expected %d", first, m.results[from].seq)
		}
		if err != nil {
			return fmt.Errorf("storing messages from %d: %w", m.results[from].seq, err)
		}
		return nil
	}
	for i := from; ; i++ {
		subj, hdr, data, ok, err := e.next()
		if err != nil || !ok {
			return err
		}
		if res := m.results[i]; !res.dup && res.code == 0 {
			got, err := m.log.Append(subj, hdr, data, e.ts)
			if err == nil && got != res.seq {
				err = fmt.Errorf("stored at %d, expected %d", got, res.seq)
			}
			if err != nil {
				return fmt.Errorf("storing message %d: %w", res.seq, err)
			}
		}
	}
}

// appliedBatch locates one entry's results in partitionMachine.results.
type appliedBatch struct {
	token    uint64
	from, to int
}

// store applies one message; replay: its entry may have been stored before a
// restart. Refusals by the store's limits are results, not failures: every
// replica refuses alike.
func (m *partitionMachine) store(ts int64, subj, hdr, data []byte, replay bool) pubResult {
	res, id, fresh := m.admit(ts, hdr, replay)
	if !fresh {
		return res
	}
	seq := res.seq
	got, err := m.log.Append(subj, hdr, data, ts)
	if err != nil {
		if !errors.Is(err, store.ErrFull) && !errors.Is(err, store.ErrTooLarge) {
			// Not a refusal every replica makes alike (those are the limits) but
			// this replica's disk failing (full, an I/O error): it must not go
			// on without the message, or its sequences would part from the
			// others'. Apply fails; the replica is opened again and replays.
			m.failed = fmt.Errorf("storing message %d: %w", seq, err)
		}
		return pubResult{code: errorCode(err), err: err.Error()}
	}
	if got != seq {
		return pubResult{code: streamapi.CodeInternal, err: fmt.Sprintf("stored at %d, expected %d", got, seq)}
	}
	m.stored(seq, id, ts)
	return res
}

// admit is the decision on one message short of storing it: fresh, to be
// stored at res.seq (the caller then calls stored), or res is the result
// already: a duplicate, a message stored before a restart (replay), or a
// refusal by its expected last id. id is its parsed message id, if it has one.
func (m *partitionMachine) admit(ts int64, hdr []byte, replay bool) (res pubResult, id msgID, fresh bool) {
	var c idCheck
	m.dedup.check(hdr, ts, &c)
	if c.dup {
		return pubResult{seq: c.seq, dup: true}, c.id, false
	}
	seq := m.last + 1
	if replay && m.log.State().LastSeq >= seq {
		// Stored before a restart: this entry is being applied again.
		m.stored(seq, c.id, ts)
		return pubResult{seq: seq}, c.id, false
	}
	if wrong, code, text := m.dedup.wrongLast(&c, ts); wrong {
		return pubResult{code: code, err: text}, c.id, false
	}
	return pubResult{seq: seq}, c.id, true
}

// stored records that the message with id (zero: none) is stored at seq.
func (m *partitionMachine) stored(seq uint64, id msgID, ts int64) {
	m.last = seq
	if id.id != "" {
		m.dedup.add(id, m.part, seq, ts)
	}
}

// partitionSnapshot is what a snapshot of a partition replica holds: where its
// log ends. The messages themselves are in the replicas' logs; a replica whose log
// ends before the snapshot's must fetch the rest from another.
type partitionSnapshot struct {
	Last      uint64             `json:"last"`
	LastTS    int64              `json:"last_ts"`
	Consumers []snapshotConsumer `json:"consumers,omitempty"`
}

// Snapshot implements replica.StateMachine. The log is synced first: once the
// group compacts its Raft log behind the snapshot, the messages live only here.
func (m *partitionMachine) Snapshot() ([]byte, error) {
	if err := m.log.Sync(); err != nil {
		return nil, fmt.Errorf("stream replica: %w", err)
	}
	snap := partitionSnapshot{Last: m.last, LastTS: m.lastTS}
	if m.consumers != nil {
		var err error
		if snap.Consumers, err = m.consumers.snapshot(); err != nil {
			return nil, fmt.Errorf("stream replica: %w", err)
		}
	}
	return json.Marshal(snap)
}

// errBehindSnapshot is Restore's error for a replica whose log ends before the
// snapshot's end: it has to fetch the missing messages first.
var errBehindSnapshot = errors.New("stream replica: log ends before the snapshot")

// Restore implements replica.StateMachine.
func (m *partitionMachine) Restore(data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var snap partitionSnapshot
	if len(data) > 0 {
		if err := json.Unmarshal(data, &snap); err != nil {
			return fmt.Errorf("stream replica: snapshot: %w", err)
		}
	}
	if err := m.passCompression(); err != nil {
		return err
	}
	if st := m.log.State(); st.LastSeq < snap.Last {
		if m.fetch == nil {
			return fmt.Errorf("%w: log at %d, snapshot at %d", errBehindSnapshot, st.LastSeq, snap.Last)
		}
		// This runs on the Raft loop, which waits: a replica that missed so much
		// that its group compacted past it is rare, and it cannot apply anything
		// before it has the messages.
		start := time.Now()
		if err := m.catchUp(snap.Last); err != nil {
			return fmt.Errorf("%w: log at %d, snapshot at %d: %w", errBehindSnapshot, st.LastSeq, snap.Last, err)
		}
		m.logger.Info("stream replica caught up from the leader", "from", st.LastSeq+1, "to", snap.Last,
			"took", time.Since(start).Round(time.Millisecond))
	}
	m.last, m.lastTS = snap.Last, snap.LastTS
	m.rebuildDedup()
	if m.consumers != nil {
		if err := m.consumers.restore(snap.Consumers); err != nil {
			return fmt.Errorf("stream replica: %w", err)
		}
	}
	return nil
}

// Replicator is how a replica of a stream reaches its partition's Raft group: the
// node's replica.Host satisfies it.
type Replicator interface {
	// Propose commits data to group and returns once this node has applied it.
	Propose(ctx context.Context, group uint64, data []byte) (uint64, error)
	// Submit is Propose without the wait, which the Proposal's Wait does.
	Submit(group uint64, data []byte) (replica.Proposal, error)
	// ReadIndex returns once this node has applied everything the group had
	// committed when it was called (this node leading it).
	ReadIndex(ctx context.Context, group uint64) (uint64, error)
	// LeaderReadIndex is ReadIndex that also proves this node leads the group:
	// it fails unless this node led it when called and still does, in the same
	// term, once a quorum confirmed the read.
	LeaderReadIndex(ctx context.Context, group uint64) (uint64, error)
}

// streamRepl is a stream's replication: each partition's group and the machine that
// applies the group's entries to the partition's log, and the results of this
// node's proposals, which the machines hand over as they apply them.
//
// Partition 0's group is the stream's own: its entries carry the consumers' state
// besides partition 0's messages, and its leader leads the stream (the cluster
// keeps every partition's group led by that node). Each other group carries its
// partition's messages and removals only.
type streamRepl struct {
	r        Replicator
	groups   []uint64
	machines []*partitionMachine
	leader   atomic.Bool
	// leaseUntil ends the leadership a quorum last confirmed (confirmLeader);
	// nil when there is none.
	leaseUntil atomic.Pointer[time.Time]

	mu      sync.Mutex
	waiting map[uint64]*proposalWait // by token
	// ackBatch and ackBuf answer publishers from applied (under mu).
	ackBatch broker.Batch
	ackBuf   []byte
	purges   map[uint64]*purgeResult // likewise, for purges
	purgeSeq atomic.Uint64           // purge tokens: bit 31 set, apart from the writer's

	// Owned by the writer.
	tokenBase, token uint64
	proposals        []partProposal // by partition
	touched          []int          // the partitions of the batch being written
	round            []int          // the partitions whose entries are proposed
}

// maxEntryBytes bounds the messages of one Raft entry (a partition's share of a
// captured batch is split into entries of at most this much): far below what a
// replica's Raft log takes as one record (its segment size), and small enough
// for the group's flow control to pace.
const maxEntryBytes = 1 << 20

// proposalWait is the writer's proposal of one entry, waiting for its results.
// The machine answers the entry's publishers itself once this node applied it
// (applied), without waking the writer: the acknowledgement leaves from the
// goroutine that committed the entry.
type proposalWait struct {
	s        *Stream
	q        *inbound
	items    []int // the entry's messages: indexes into q and s.acks
	res      []pubResult
	answered bool
}

// partProposal is one partition's share of a captured batch.
type partProposal struct {
	all   []int // indexes into the batch
	next  int   // all[next:] are still to propose
	items []int // the entry being proposed: a run of all
	entry []byte
	// plain is entry's pooled buffer when entry went uncompressed: back to
	// entryBuffers once the entry committed (the group keeps its own copy).
	plain *[]byte
	token uint64
	wait  *proposalWait
	prop  replica.Proposal // submitted, awaited by await
	res   []pubResult
	err   error
	// answered: the machine filled the items' acks and answered them (applied)
	answered bool
	gate     compressGate
	sizes    []int // the entry's messages' sizes in it, for compressing it
}

// consumers is the machine holding the stream's consumers: partition 0's.
func (r *streamRepl) consumers() *consumerSet { return r.machines[0].consumers }

// proposeTimeout bounds how long the leader's writer waits for a batch to commit
// before answering its publishers with an error they retry on.
const proposeTimeout = 5 * time.Second

// replicate proposes q's messages to their partitions' groups, one entry per
// partition (proposed side by side), and answers their publishers from what
// applying them gave (acks only once a quorum has the batch).
func (s *Stream) replicate(q *inbound) {
	s.startReplicate(q)
	if s.proposeRound(q) {
		s.finishReplicate(q)
	} else {
		s.endReplicate(q)
	}
}

// startReplicate sorts q's messages by partition, with an ack each.
func (s *Stream) startReplicate(q *inbound) {
	r := s.repl
	s.acks = s.acks[:0]
	for p := range r.proposals {
		r.proposals[p].all, r.proposals[p].next = r.proposals[p].all[:0], 0
	}
	for i := range q.items {
		it := &q.items[i]
		a := pendingAck{reply: it.reply, acker: it.acker, ackTag: it.ackTag, part: -1}
		if it.tooBig {
			a.code, a.err = streamapi.CodeTooLarge, "message larger than the stream's max_msg_size"
		} else {
			a.part = s.partitionOf(q.get(it.subj), header.Block(q.get(it.hdr)))
			r.proposals[a.part].all = append(r.proposals[a.part].all, i)
		}
		s.acks = append(s.acks, a)
	}
	r.touched = r.touched[:0]
	for p := range r.proposals {
		if len(r.proposals[p].all) > 0 {
			r.touched = append(r.touched, p)
		}
	}
}

// proposeRound submits the next entry of every partition with messages left to
// propose, and reports whether there was any. A large batch goes as several
// entries of at most maxEntryBytes, each partition's in order, so that no entry
// outgrows what a replica's Raft log takes as one record.
func (s *Stream) proposeRound(q *inbound) bool {
	r := s.repl
	r.round = r.round[:0]
	now := time.Now().UnixNano()
	for _, p := range r.touched {
		pp := &r.proposals[p]
		if pp.next == len(pp.all) {
			continue
		}
		end, size := pp.next, 0
		for end < len(pp.all) {
			it := &q.items[pp.all[end]]
			n := it.subj.n + it.hdr.n + it.data.n + 16
			if end > pp.next && size+n > maxEntryBytes {
				break
			}
			size += n
			end++
		}
		pp.items, pp.next = pp.all[pp.next:end], end
		r.token++
		pp.token = r.tokenBase | r.token&0x7fffffff
		// An entry's bytes belong to the group from its proposal until it
		// commits (replica.Host.Propose); a plain entry's buffer goes back to
		// the pool then (awaitRound). A compressed one is made from the plain
		// one, which is lent to the partition's machine, to apply without
		// expanding the entry, until the entry is applied or abandoned.
		plain := entryBuffers.Get().(*[]byte)
		*plain = appendMsgEntry((*plain)[:0], pp.token, now, q, pp.items)
		pp.sizes = msgSizes(pp.sizes[:0], q, pp.items)
		pp.entry, pp.plain = pp.gate.entry(*plain, pp.sizes), plain
		if pp.entry[0] != entryMsgs {
			r.machines[p].lent.lend(pp.entry, plain)
		}
		r.round = append(r.round, p)
	}
	for _, p := range r.round {
		r.submit(s, q, p)
	}
	return len(r.round) > 0
}

// finishReplicate waits for the round proposed and proposes the rest, round by
// round, then answers the publishers.
func (s *Stream) finishReplicate(q *inbound) {
	for {
		s.awaitRound()
		if !s.proposeRound(q) {
			break
		}
	}
	s.endReplicate(q)
}

// awaitRound collects the results of the round proposed.
func (s *Stream) awaitRound() {
	r := s.repl
	for _, p := range r.round {
		pp := &r.proposals[p]
		// A plain entry is its pooled buffer, which goes back below.
		compressed := pp.entry[0] != entryMsgs
		r.await(p)
		if pp.err != nil {
			// Not committed here (no leader, a new one, too slow): the
			// publisher retries, with its message id if it has one. The rest
			// of the partition's messages (pp.items is the run of pp.all
			// before pp.next) are not proposed after a failed entry: stored
			// behind it, they would pass it by.
			why := fmt.Sprintf("stream %q not replicated: %v", s.name, pp.err)
			for _, i := range pp.all[pp.next-len(pp.items):] {
				s.acks[i].code, s.acks[i].err = streamapi.CodeUnavailable, why
			}
			pp.next = len(pp.all)
		} else {
			if !pp.answered {
				s.fillAcks(pp.items, pp.res)
			}
			if !compressed {
				putEntryBuffer(pp.plain) // the group has its copy
			}
		}
		// A compressed entry's plain batch is no longer needed once applied
		// here, nor wanted by one that failed: applied later, it expands.
		if compressed && r.machines[p].lent.unlend(pp.entry) {
			putEntryBuffer(pp.plain)
		}
		pp.entry, pp.plain, pp.res, pp.err, pp.answered = nil, nil, nil, nil, false
	}
}

// endReplicate answers what the machine did not and wakes the consumers.
func (s *Stream) endReplicate(q *inbound) {
	s.answer(q) // what the machine did not answer
	if s.retention == streamapi.RetainInterest && s.numConsumers() == 0 {
		// Nobody was interested: the messages were acknowledged and are gone.
		var gone []partSeq
		for _, a := range s.acks {
			if a.code == 0 && !a.dup && a.seq != 0 {
				gone = append(gone, partSeq{a.part, a.seq})
			}
		}
		s.replicateRemovals(gone, nil)
		return
	}
	for _, p := range s.repl.touched {
		s.notify(p)
	}
}

// submit proposes partition p's entry without waiting for it (await does).
func (r *streamRepl) submit(s *Stream, q *inbound, p int) {
	pp := &r.proposals[p]
	pp.wait = &proposalWait{s: s, q: q, items: pp.items}
	r.mu.Lock()
	r.waiting[pp.token] = pp.wait
	r.mu.Unlock()
	pp.prop, pp.err = r.r.Submit(r.groups[p], pp.entry)
	if pp.err != nil {
		r.mu.Lock()
		delete(r.waiting, pp.token)
		r.mu.Unlock()
		pp.wait = nil
	}
}

// await waits for partition p's entry to commit and collects its results.
func (r *streamRepl) await(p int) {
	pp := &r.proposals[p]
	w := pp.wait
	if w == nil {
		return // not submitted: pp.err says why
	}
	pp.wait = nil
	ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
	_, pp.err = pp.prop.Wait(ctx)
	cancel()
	pp.prop = replica.Proposal{}
	r.mu.Lock()
	delete(r.waiting, pp.token)
	pp.res, pp.answered = w.res, w.answered
	if w.answered {
		pp.err = nil // applied and answered, though the wait gave up
	}
	r.mu.Unlock()
	if pp.err == nil && len(pp.res) != len(pp.items) {
		pp.err = fmt.Errorf("partition %d: %d results for %d messages", p, len(pp.res), len(pp.items))
	}
}

// fillAcks sets the acks of items from their results.
func (s *Stream) fillAcks(items []int, res []pubResult) {
	for j, i := range items {
		a := &s.acks[i]
		if res[j].code != 0 {
			a.code, a.err = res[j].code, res[j].err
		} else {
			a.seq, a.dup = res[j].seq, res[j].dup
		}
	}
}

// applied is the machine's hand-over of a batch's results when this node
// proposed it (dropped otherwise): their publishers are answered at once, on the
// goroutine applying the entry, while the writer still waits in propose.
func (r *streamRepl) applied(token uint64, res []pubResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiting[token]
	if w == nil {
		return
	}
	w.res = append(w.res[:0], res...)
	if len(res) != len(w.items) || w.answered {
		return // the writer reports it
	}
	s := w.s
	s.fillAcks(w.items, res)
	r.ackBuf = answerAcks(s.m.broker, &r.ackBatch, r.ackBuf, w.q, len(w.items),
		func(k int) *pendingAck { return &s.acks[w.items[k]] }, s.name)
	for _, i := range w.items {
		s.acks[i].reply, s.acks[i].acker = span{}, nil // answered
	}
	w.answered = true
}

// SetLeader tells a replica whether its node leads the stream's group: only the
// leader captures the stream's subjects (the routes bring it every publish) and
// proposes them, and only the leader runs the stream's consumers (each from the
// position the group's committed records give it). Becoming leader waits for the
// group's loop to apply what was committed before: never call it from the loop.
func (s *Stream) SetLeader(leader bool) error {
	if s.repl == nil || s.repl.leader.Load() == leader {
		return nil
	}
	if leader {
		// Consumers start where the committed records leave them: everything the
		// groups committed before this node led is applied first.
		ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
		defer cancel()
		for p, g := range s.repl.groups {
			if _, err := s.repl.r.ReadIndex(ctx, g); err != nil {
				return fmt.Errorf("stream %q: partition %d: catching up before leading: %w", s.name, p, err)
			}
		}
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	s.repl.leaseUntil.Store(nil)
	s.repl.leader.Store(leader)
	if !leader {
		s.unsubscribe()
		s.stopConsumers()
		return nil
	}
	for _, name := range s.repl.consumers().names() {
		s.startReplicaConsumer(name)
	}
	return s.subscribe(s.cfg.Subjects)
}

// stopConsumers stops and forgets every consumer, keeping their files.
func (s *Stream) stopConsumers() {
	s.cmu.Lock()
	cs := make([]*Consumer, 0, len(s.consumers))
	for name, c := range s.consumers {
		cs = append(cs, c)
		delete(s.consumers, name)
	}
	s.cmu.Unlock()
	for _, c := range cs {
		c.stop(false)
	}
}

// ReplicaConfig places a stream in the cluster.
type ReplicaConfig struct {
	// Account is the stream's account, "" for the global one.
	Account string
	// Groups are the Raft groups of the stream's partitions, one each.
	Groups []uint64
	// Replicator commits the stream's batches to its groups; nil: the stream has
	// one replica, this one.
	Replicator Replicator
	// Fetch gets the records a lagging replica of a partition misses from its
	// group's leader.
	Fetch func(part int) Fetcher
}

// OpenReplica opens this node's replica of a stream the cluster placed in Raft
// groups, one per partition. With a Replicator the stream is replicated: each
// partition's log is written by its group's machine, returned here (in partition
// order) for the caller to register with the groups, and it captures nothing until
// SetLeader. Without one the stream has one replica, this one, and runs as a stream
// of this node does (no machines). Either way the stream is not recovered by New:
// the cluster opens it again after a restart.
func (m *Manager) OpenReplica(cfg streamapi.StreamConfig, created time.Time, rc ReplicaConfig) (*Stream, []replica.StateMachine, error) {
	r := rc.Replicator
	if err := m.normalise(&cfg); err != nil {
		return nil, nil, err
	}
	if len(rc.Groups) != cfg.Partitions {
		return nil, nil, fmt.Errorf("stream %q: %w: %d groups for %d partitions", cfg.Name, ErrBadConfig, len(rc.Groups), cfg.Partitions)
	}
	group := rc.Groups[0]
	account := normAccount(rc.Account)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, nil, ErrClosed
	}
	key := Key(account, cfg.Name)
	if s := m.streams[key]; s != nil {
		return nil, nil, fmt.Errorf("stream %q: %w", cfg.Name, ErrExists)
	}
	dir := m.streamDir(account, cfg.Name)
	var old streamDef
	if readJSON(filepath.Join(dir, "stream.json"), &old) == nil && old.Group != group {
		// A stream of the same name the cluster deleted (and made again) while
		// this node was away: its data is not the new stream's.
		if err := os.RemoveAll(dir); err != nil {
			return nil, nil, fmt.Errorf("stream %q: %w", cfg.Name, diskErr(err))
		}
	}
	def := streamDef{Config: cfg, Created: created, Group: group, Account: account}
	if len(rc.Groups) > 1 {
		def.Groups = rc.Groups
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("stream %q: %w", cfg.Name, diskErr(err))
	}
	if err := writeJSON(filepath.Join(dir, "stream.json"), def, true); err != nil {
		return nil, nil, fmt.Errorf("stream %q: %w", cfg.Name, err)
	}
	s, err := openStream(m, def, dir)
	if err != nil {
		return nil, nil, err
	}
	var machines []replica.StateMachine
	if r != nil {
		if err := s.dropDamaged(); err != nil {
			s.close(false)
			return nil, nil, err
		}
		s.repl = &streamRepl{r: r, groups: rc.Groups, waiting: map[uint64]*proposalWait{}, purges: map[uint64]*purgeResult{},
			tokenBase: rand.Uint64() &^ 0xffffffff, proposals: make([]partProposal, len(s.parts))}
		for p, l := range s.parts {
			pm := newPartitionMachine(l, time.Duration(cfg.DuplicateWindow), s.repl.applied)
			pm.logCompression = s.compression() // what openStream opened l with
			pm.setCompression(pm.logCompression)
			pm.segmentAge.Store(int64(s.logConfig(p).SegmentAge))
			pm.part = p
			if rc.Fetch != nil {
				pm.fetch = rc.Fetch(p)
			}
			pm.purged = s.repl.purgeApplied
			pm.logger = m.log.With("stream", cfg.Name, "partition", p)
			s.repl.machines = append(s.repl.machines, pm)
			machines = append(machines, pm)
		}
		s.repl.machines[0].consumers = &consumerSet{s: s}
		if err := s.repl.consumers().load(); err != nil {
			s.close(false)
			return nil, nil, err
		}
		s.stopConsumers() // until this node leads the groups
	}
	if err := s.start(); err != nil {
		s.close(false)
		return nil, nil, err
	}
	m.streams[key] = s
	return s, machines, nil
}

// dropDamaged drops, in each partition, the records recovery found damaged on
// disk (a flipped byte, a bad sector) and everything after them: they come back
// from the partition's group, replayed from its Raft log or fetched from its
// leader when the group has compacted past them (Restore).
func (s *Stream) dropDamaged() error {
	for p, from := range s.damagedFrom {
		if from == 0 {
			continue
		}
		lastSeq := s.parts[p].State().LastSeq
		if err := s.parts[p].TruncateAfter(from - 1); err != nil {
			return fmt.Errorf("stream %q: partition %d: dropping damaged records: %w", s.name, p, err)
		}
		s.m.log.Error("stream replica damaged on disk: its records from the damage on are dropped and fetched again from the group",
			"stream", s.name, "partition", p, "from", from, "to", lastSeq)
	}
	return nil
}

// GroupStreams lists the streams found on disk that the cluster placed here (by
// key, with their partitions' groups), opened or not: a node that finds one the
// catalogue no longer has removes it.
func (m *Manager) GroupStreams() (map[string][]uint64, error) {
	out := map[string][]uint64{}
	err := m.eachStreamDir(func(_ string, def streamDef) error {
		key := Key(def.Account, def.Config.Name)
		switch {
		case len(def.Groups) > 0:
			out[key] = def.Groups
		case def.Group != 0:
			out[key] = []uint64{def.Group}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveGroupStream deletes the data of a stream (by key) the cluster placed here
// that is not open (see GroupStreams).
func (m *Manager) RemoveGroupStream(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.streams[key] != nil {
		return fmt.Errorf("stream %q: %w: it is open", key, ErrExists)
	}
	account, name := SplitKey(key)
	if err := streamapi.ValidName("stream", name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if account == "" && key != name {
		return fmt.Errorf("%w: stream key %q", ErrBadConfig, key)
	}
	return os.RemoveAll(m.streamDir(account, name))
}

// Group is the Raft group the cluster placed the stream (its partition 0) in, 0 for
// a stream of this node alone.
func (s *Stream) Group() uint64 { return s.group }

// Groups are the Raft groups of the stream's partitions, in partition order; nil for
// a stream of this node alone.
func (s *Stream) Groups() []uint64 {
	if len(s.groups) > 0 {
		return s.groups
	}
	if s.group != 0 {
		return []uint64{s.group}
	}
	return nil
}

// Replicated reports whether the stream's log is written by a Raft group.
func (s *Stream) Replicated() bool { return s.repl != nil }

// Leads reports whether this replica serves the stream: always for a stream of
// this node alone, for a replicated one while this node leads its groups.
func (s *Stream) Leads() bool { return s.repl == nil || s.repl.leader.Load() }
