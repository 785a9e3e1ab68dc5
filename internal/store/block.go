package store

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"

	"github.com/tern-mq/tern/internal/s2pace"
)

// A compressed block (Config.Compression = CompressS2) is a record whose flags say
// so and whose body holds consecutive records, exactly as Append encoded them,
// S2-compressed:
//
//	0  36 the record header: magic, CRC, length as for any record; seq = the first
//	      inner record's; time = the largest inner Time; flags = flagBlock, and
//	      flagBareInner when the inner records carry no CRC of their own;
//	      subject length 0; header length 8
//	36 4  count of inner records (at least 1)
//	40 4  their uncompressed length
//	44 .. S2 block (github.com/klauspost/compress/s2, block format)
//
// A block stands for the sequences seq … seq+count-1; everything that walks a
// segment steps over it as over count records. Its CRC covers the compressed
// bytes. The inner records of a block written with flagBareInner have a zero CRC,
// as the block's covers them; those of older blocks keep their own, which load
// checks.
//
// A message block (flags = flagBlock|flagMessages, made by AppendBlock) holds
// messages that share one time, the block's, in a shorter form than records:
// for each, its subject, header and payload, each as an unsigned varint length
// then the bytes (AppendBlockMessage). A replicated stream's leader compresses
// its entries' messages in that form, and every replica writes the compressed
// bytes it was sent instead of compressing them again. The expander serves
// both kinds of block alike (expander.at).
//
// A hole (flags = flagBlock|flagHole, written by Clean) stands for count
// consecutive sequences that were all deleted: a block header with a raw length
// of 0 and nothing after it. It keeps a cleaned segment's sequences contiguous,
// so that walking a segment counts sequences as it always does; it is never
// expanded, as none of its sequences can be read. A block of records that
// Clean packed (flagHoles) may hold holes among its records: the live records
// of a compressed segment stay compressed together.
const (
	flagBlock     = 1
	flagBareInner = 2
	flagMessages  = 4
	flagHole      = 8
	flagHoles     = 16
	blockHdrSize  = recHdrSize + 8
	offCount      = recHdrSize
	offRawLen     = recHdrSize + 4

	// maxBlockRaw bounds the inner bytes of a block holding more than one record,
	// and so what a random read expands to reach one message; a single record
	// larger than this is a block of its own when it shrinks.
	maxBlockRaw = 64 << 10
	// minBlockRaw: smaller runs are not worth a block header and a pass of S2.
	minBlockRaw = 128
)

// BlockBytes bounds the inner bytes of a block of more than one message
// (AppendBlock): a random read expands the whole block to reach one message.
const BlockBytes = maxBlockRaw

// AppendBlockMessage appends one message to dst in the inner form of a message
// block (AppendBlock): subject, header and payload, each as an unsigned varint
// length then the bytes.
func AppendBlockMessage(dst, subject, header, payload []byte) []byte {
	for _, f := range [3][]byte{subject, header, payload} {
		dst = binary.AppendUvarint(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	return dst
}

// nextBlockMessage reads the message at the front of b, a message block's inner
// bytes, and returns it with the rest of b; ok is false when b does not start
// with a whole message.
// The fields are capped, as a decoded record's are, and an empty header is nil.
func nextBlockMessage(b []byte) (subject, header, payload, rest []byte, ok bool) {
	fields := [3]*[]byte{&subject, &header, &payload}
	for _, f := range fields {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, nil, nil, b, false
		}
		end := n + int(l)
		*f = b[n:end:end]
		b = b[end:]
	}
	if len(header) == 0 {
		header = nil
	}
	return subject, header, payload, b, len(subject) <= maxSubject
}

var errBlock = errors.New("bad compressed block")

func recFlags(b []byte) uint16 { return binary.LittleEndian.Uint16(b[offFlags:]) }

// appendHole appends a hole standing for the count sequences from first on, all
// deleted; ts is the largest Time of the records it replaces.
func appendHole(dst []byte, first, count uint64, ts int64) []byte {
	at := len(dst)
	dst = append(dst, make([]byte, blockHdrSize)...)
	b := dst[at:]
	copy(b, recMagic[:])
	binary.LittleEndian.PutUint32(b[offLen:], blockHdrSize)
	binary.LittleEndian.PutUint64(b[offSeq:], first)
	binary.LittleEndian.PutUint64(b[offTime:], uint64(ts))
	binary.LittleEndian.PutUint16(b[offFlags:], flagBlock|flagHole)
	binary.LittleEndian.PutUint32(b[offHdr:], blockHdrSize-recHdrSize)
	binary.LittleEndian.PutUint32(b[offCount:], uint32(count))
	sealRecord(b)
	return dst
}

// unitCount is how many sequences the record or block at the start of b stands
// for; b holds at least blockHdrSize bytes when the flags say it is a block.
func unitCount(b []byte) uint64 {
	if recFlags(b)&flagBlock == 0 {
		return 1
	}
	return uint64(binary.LittleEndian.Uint32(b[offCount:]))
}

// packRuns splits a batch of records into the runs packBlocks packs: records up
// to maxBlockRaw bytes, or one larger record. The writer keeps it as it appends,
// so that packing does not walk the records' headers again: a batch larger than
// the CPU's caches made that walk, one dependent load per record, cost more than
// a tenth of a commit.
type packRuns struct {
	ends []int // where each run but the last ends (offsets in the batch)
	size int   // the last run's bytes
	rel  []int // within's answer
}

// add counts a record of n bytes at offset at, right after the last one.
func (r *packRuns) add(at, n int) {
	if r.size > 0 && r.size+n > maxBlockRaw {
		r.cut(at)
	}
	r.size += n
}

// cut ends the last run at offset at (a run never spans two segments).
func (r *packRuns) cut(at int) {
	if r.size > 0 {
		r.ends = append(r.ends, at)
		r.size = 0
	}
}

func (r *packRuns) reset() { r.ends, r.size = r.ends[:0], 0 }

// within returns the ends of the runs of batch[start:end] but the last, as
// offsets from start; start and end are where parts begin. The slice is reused
// by the next call.
func (r *packRuns) within(start, end int) []int {
	r.rel = r.rel[:0]
	for _, e := range r.ends {
		if e > start && e < end {
			r.rel = append(r.rel, e-start)
		}
	}
	return r.rel
}

// splitRuns is packRuns over records already in src (for callers that did not
// keep them as they appended).
func splitRuns(src []byte) []int {
	var r packRuns
	for at := 0; at < len(src); at += recLen(src[at:]) {
		r.add(at, recLen(src[at:]))
	}
	return r.ends
}

// packBlocks appends to dst the records of src (whole records, as Append encoded
// them, consecutive sequences) with runs of them packed into compressed blocks
// wherever that saves an eighth of their bytes; the rest are copied as they are.
// ends are where src's runs end but the last (packRuns, or splitRuns of src).
// When no run shrinks it appends nothing and reports false: src is then
// written as it is, without a copy. gate paces the attempts (nil: every run is
// tried). With bare, src's records have no CRC yet (appendBareRecord): those left
// plain get theirs in src, those packed none.
func packBlocks(dst, src []byte, ends []int, gate *s2pace.Gate, bare bool) ([]byte, bool) {
	start := len(dst)
	plain := 0 // src[plain:] is not in dst yet
	packed := false
	for at, n, k := 0, 0, 0; at < len(src); at, k = at+n, k+1 {
		end := len(src)
		if k < len(ends) {
			end = ends[k]
		}
		n = end - at
		run := src[at:end]
		if recFlags(run)&flagBlock != 0 {
			continue // a block of AppendBlock's, a run of its own: it stays as it is
		}
		shrank := false
		if len(run) >= minBlockRaw && (gate == nil || gate.Try()) {
			mark := len(dst)
			dst = append(dst, src[plain:at]...)
			dst, shrank = appendRun(dst, run, bare)
			if gate != nil {
				gate.Shrank(shrank)
			}
			if shrank {
				packed = true
				plain = at + n
			} else {
				dst = dst[:mark] // the run stays with the plain bytes before it
			}
		}
		if !shrank && bare {
			sealRecords(run)
		}
	}
	if !packed {
		return dst[:start], false
	}
	return append(dst, src[plain:]...), true
}

// appendRun appends run (whole records) to dst as one block, or as it is when a
// block would not save an eighth of it; it reports which. bare says the run's
// records have no CRC of their own (flagBareInner).
func appendRun(dst, run []byte, bare bool) ([]byte, bool) {
	at := len(dst)
	room := s2.MaxEncodedLen(len(run))
	if room < 0 {
		return append(dst, run...), false
	}
	room += blockHdrSize
	dst = slices.Grow(dst, room)[:at+room]
	enc := s2.Encode(dst[at+blockHdrSize:], run)
	size := blockHdrSize + len(enc)
	if &enc[0] != &dst[at+blockHdrSize] || size > len(run)-len(run)/8 {
		return append(dst[:at], run...), false
	}
	dst = dst[:at+size]
	var count int
	tmax := int64(minTime)
	flags := uint16(flagBlock)
	for r := run; len(r) > 0; r = r[recLen(r):] {
		count += int(unitCount(r))
		tmax = max(tmax, recTime(r))
		if recFlags(r) != 0 {
			flags |= flagHoles // Clean's: holes among the records
		}
	}
	if bare {
		flags |= flagBareInner
	}
	sealBlock(dst[at:], flags, recSeq(run), tmax, count, len(run))
	return dst, true
}

// appendMessageBlock appends a message block (AppendBlock) of count messages
// from seq on, of time ts, whose inner bytes, rawLen of them, S2 made body.
func appendMessageBlock(dst []byte, seq uint64, ts int64, count, rawLen int, body []byte) []byte {
	at := len(dst)
	dst = append(append(dst, make([]byte, blockHdrSize)...), body...)
	sealBlock(dst[at:], flagBlock|flagMessages, seq, ts, count, rawLen)
	return dst
}

// sealBlock fills in the header of the block that is exactly b, its compressed
// body in place, and its CRC.
func sealBlock(b []byte, flags uint16, seq uint64, ts int64, count, rawLen int) {
	copy(b, recMagic[:])
	binary.LittleEndian.PutUint32(b[offLen:], uint32(len(b)))
	binary.LittleEndian.PutUint64(b[offSeq:], seq)
	binary.LittleEndian.PutUint64(b[offTime:], uint64(ts))
	binary.LittleEndian.PutUint16(b[offFlags:], flags)
	binary.LittleEndian.PutUint16(b[offSubj:], 0)
	binary.LittleEndian.PutUint32(b[offHdr:], 8)
	binary.LittleEndian.PutUint32(b[offCount:], uint32(count))
	binary.LittleEndian.PutUint32(b[offRawLen:], uint32(rawLen))
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offLen:], crcTable))
}

// expander holds one block's inner records, expanded, so that reading its
// messages one after another expands it once.
type expander struct {
	f     *os.File // the block's file and offset; nil when nothing is held
	off   int64
	first uint64 // its first sequence
	count uint64
	buf   []byte // the inner records
	// A message block's inner bytes, and their time (flagMessages), when it
	// holds one.
	msgs     []byte
	messages bool
	time     int64
	// A walk position: the record with sequence posSeq starts at buf[pos] (at
	// msgs[pos] in a message block, whose next message starts at msgs[next]
	// once at has read it, so that a walk forward reads each message once).
	pos, next int
	posSeq    uint64
}

func (e *expander) holds(f *os.File, off int64) bool { return e.f != nil && e.f == f && e.off == off }

func (e *expander) reset() { e.f = nil }

// expandBufs keeps the buffers of expanders that are done (closed readers), so
// that a reader per fetch or replay does not allocate one per block size.
var expandBufs = sync.Pool{New: func() any { return new([]byte) }}

// release gives the expander's buffer back for another one to use.
func (e *expander) release() {
	for _, b := range [2][]byte{e.buf, e.msgs} {
		if b != nil && cap(b) <= 2*maxBlockRaw {
			b = b[:0]
			expandBufs.Put(&b)
		}
	}
	e.buf, e.msgs, e.f = nil, nil, nil
}

// growExpandBuf returns b with length n, from the pool when b is nil.
func growExpandBuf(b []byte, n int64) []byte {
	if b == nil && n <= 2*maxBlockRaw {
		b = *expandBufs.Get().(*[]byte)
	}
	if int64(cap(b)) < n {
		b = make([]byte, n)
	}
	return b[:n]
}

// load checks raw, the block record read at off in f (its length and header
// already checked by peekRecord), and expands it: the block's CRC, the S2 data,
// then every inner record's framing and sequence, and its CRC unless the block
// says its inner records have none (flagBareInner). limit bounds the
// expanded size. Any fault is errBlock or errCRC, which callers treat as damage.
func (e *expander) load(f *os.File, off int64, raw []byte, limit int64) error {
	e.f = nil
	if len(raw) < blockHdrSize || recFlags(raw)&flagHole != 0 {
		return errBlock
	}
	if crc32.Checksum(raw[offLen:], crcTable) != binary.LittleEndian.Uint32(raw[offCRC:]) {
		return errCRC
	}
	count := uint64(binary.LittleEndian.Uint32(raw[offCount:]))
	rawLen := int64(binary.LittleEndian.Uint32(raw[offRawLen:]))
	messages := recFlags(raw)&flagMessages != 0
	least := int64(count) * recHdrSize
	switch {
	case messages:
		least = int64(count) * 3 // three lengths of one byte
	case recFlags(raw)&flagHoles != 0:
		least = blockHdrSize // a hole stands for many
	}
	if count == 0 || rawLen < least || rawLen > max(limit, maxBlockRaw) {
		return errBlock
	}
	body := raw[blockHdrSize:]
	if n, err := s2.DecodedLen(body); err != nil || int64(n) != rawLen {
		return errBlock
	}
	inner := &e.buf
	if messages {
		inner = &e.msgs
	}
	*inner = growExpandBuf(*inner, rawLen)
	out, err := s2.Decode(*inner, body)
	if err != nil || int64(len(out)) != rawLen || &out[0] != &(*inner)[0] {
		return errBlock
	}
	first := recSeq(raw)
	if messages {
		// Its messages are whole and as many as it says.
		n := uint64(0)
		for b := e.msgs; len(b) > 0; n++ {
			_, _, _, rest, ok := nextBlockMessage(b)
			if !ok || n == count {
				return errBlock
			}
			b = rest
		}
		if n != count {
			return errBlock
		}
		e.hold(f, off, first, count, true, recTime(raw))
		return nil
	}
	decode := decodeRecord
	if recFlags(raw)&flagBareInner != 0 {
		decode = parseRecord // the block's CRC, checked above, covers them
	}
	holes := recFlags(raw)&flagHoles != 0
	seq, b := first, e.buf
	for len(b) > 0 {
		if len(b) < recHdrSize {
			return errBlock
		}
		n, err := peekRecord(b)
		if err != nil || n > len(b) || recSeq(b) != seq {
			return errBlock
		}
		switch f := recFlags(b); {
		case f == 0:
			if _, err := decode(b[:n]); err != nil {
				return err
			}
			seq++
		case f == flagBlock|flagHole && holes:
			if _, c, err := checkUnit(b[:n]); err != nil || c > count {
				return errBlock
			}
			seq += unitCount(b)
		default:
			return errBlock
		}
		b = b[n:]
	}
	if seq-first != count {
		return errBlock
	}
	e.hold(f, off, first, count, false, 0)
	return nil
}

// hold records the block load checked and starts a walk at its first record.
func (e *expander) hold(f *os.File, off int64, first, count uint64, messages bool, ts int64) {
	e.f, e.off, e.first, e.count = f, off, first, count
	e.messages, e.time = messages, ts
	e.pos, e.next, e.posSeq = 0, -1, first
}

// expand makes e hold the block at off in f, which stands for the sequences from
// first on, reading it through w unless e holds it already; maxRaw bounds its
// expanded size (Config.SegmentBytes). A fault leaves e empty.
func (e *expander) expand(w *window, f *os.File, off, limit int64, chunk int, first uint64, maxRaw int64) error {
	if e.holds(f, off) {
		return nil
	}
	raw, err := w.record(f, off, limit, chunk)
	if err != nil {
		return err
	}
	if err := e.load(f, off, raw, maxRaw); err != nil {
		return err
	}
	if e.first != first {
		e.reset()
		return errSeq
	}
	return nil
}

// at returns the inner record seq (first <= seq < first+count) and its length;
// a sequence in a hole (deleted) gives a record with its Seq alone and length 0.
// Its slices alias the expander's buffer: valid until the next load.
// The length is the record's, for a message block's message too: what it counts
// for in the log's sizes.
func (e *expander) at(seq uint64) (Record, int) {
	if seq < e.posSeq {
		e.pos, e.next, e.posSeq = 0, -1, e.first
	}
	if e.messages {
		for ; e.posSeq < seq; e.posSeq++ {
			if e.next < 0 {
				_, _, _, rest, _ := nextBlockMessage(e.msgs[e.pos:]) // checked by load
				e.next = len(e.msgs) - len(rest)
			}
			e.pos, e.next = e.next, -1
		}
		subj, hdr, data, rest, _ := nextBlockMessage(e.msgs[e.pos:])
		e.next = len(e.msgs) - len(rest)
		return Record{Seq: seq, Time: e.time, Subject: subj, Header: hdr, Payload: data}, recordSize(len(subj), len(hdr), len(data))
	}
	for {
		c := unitCount(e.buf[e.pos:])
		if e.posSeq+c > seq {
			break
		}
		e.pos += recLen(e.buf[e.pos:])
		e.posSeq += c
	}
	if recFlags(e.buf[e.pos:]) != 0 {
		return Record{Seq: seq}, 0 // in a hole: deleted
	}
	n := recLen(e.buf[e.pos:])
	rec, _ := parseRecord(e.buf[e.pos : e.pos+n]) // checked by load
	return rec, n
}

// appendRecordAt appends to dst inner record seq as a bare record (no CRC) and
// returns it decoded from there.
func (e *expander) appendRecordAt(dst []byte, seq uint64) ([]byte, Record) {
	rec, n := e.at(seq)
	at := len(dst)
	if e.messages {
		dst = appendBareRecord(dst, seq, rec.Time, rec.Subject, rec.Header, rec.Payload)
	} else {
		dst = append(dst, e.buf[e.pos:e.pos+n]...)
	}
	rec, _ = parseRecord(dst[at:]) // checked by load
	return dst, rec
}

// firstInBlockAtOrAfter expands the block raw (at off in f) and returns the
// sequence of its first record with Time >= t, or false when there is none.
func firstInBlockAtOrAfter(f *os.File, off int64, raw []byte, limit, t int64) (uint64, bool, error) {
	var e expander
	defer e.release()
	if err := e.load(f, off, raw, limit); err != nil {
		return 0, false, err
	}
	for seq := e.first; seq < e.first+e.count; seq++ {
		if rec, _ := e.at(seq); rec.Time >= t {
			return seq, true, nil
		}
	}
	return 0, false, nil
}
