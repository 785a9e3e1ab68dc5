package store

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/klauspost/compress/s2"
)

// Append encodes a record into the log's write buffer and returns its sequence. It is not
// visible to readers nor durable until Commit. ts is unix nanoseconds (0 = Config.Now()).
func (l *Log) Append(subject, header, payload []byte, ts int64) (uint64, error) {
	if l.shut.Load() {
		return 0, ErrClosed
	}
	if l.broken != nil {
		return 0, l.broken
	}
	n := recordSize(len(subject), len(header), len(payload))
	if len(subject) > maxSubject || int64(n) > l.cfg.SegmentBytes || (l.cfg.MaxBytes > 0 && int64(n) > l.cfg.MaxBytes) {
		return 0, fmt.Errorf("store %q: record of %d bytes (subject %d) exceeds the limit of %d: %w",
			l.cfg.Name, n, len(subject), l.maxRecord(), ErrTooLarge)
	}
	if l.cfg.Discard == DiscardNew {
		if l.cfg.MaxMsgs > 0 && l.msgs+uint64(l.npend)+1 > l.cfg.MaxMsgs {
			return 0, fmt.Errorf("store %q: %d messages: %w", l.cfg.Name, l.cfg.MaxMsgs, ErrFull)
		}
		if l.cfg.MaxBytes > 0 && l.bytes+l.pendBytes+uint64(n) > uint64(l.cfg.MaxBytes) {
			return 0, fmt.Errorf("store %q: %d bytes: %w", l.cfg.Name, l.cfg.MaxBytes, ErrFull)
		}
	}
	if ts == 0 {
		ts = l.cfg.Now().UnixNano()
	}
	seq := l.last + uint64(l.npend) + 1
	p := l.partFor(seq, n)
	l.runs.add(len(l.batch), n)
	if l.cfg.Compression == CompressS2 {
		// Its CRC waits for the commit: a record packed into a block needs none.
		l.batch = appendBareRecord(l.batch, seq, ts, subject, header, payload)
		l.bare = true
	} else {
		l.batch = appendRecord(l.batch, seq, ts, subject, header, payload)
	}
	p.n++
	l.npend++
	l.pendBytes += uint64(n)
	if l.keys != nil {
		l.keys.note(seq, subject, header)
	}
	return seq, nil
}

// partFor returns the part the next n bytes of the batch go to, starting a
// new one (a new segment) at seq when the last one has no room for them.
func (l *Log) partFor(seq uint64, n int) *part {
	if len(l.parts) == 0 {
		a := l.active()
		l.parts = append(l.parts, part{seg: a, base: a.base, off: a.size})
		if age := l.cfg.SegmentAge; age > 0 && a.size > 0 && a.born != 0 && l.cfg.Now().UnixNano()-a.born >= int64(age) {
			// Old enough: the batch starts a new segment, as if this one were full.
			l.parts = append(l.parts, part{base: seq, start: len(l.batch)})
			l.runs.cut(len(l.batch))
			return &l.parts[1]
		}
	}
	p := &l.parts[len(l.parts)-1]
	if used := p.off + int64(len(l.batch)-p.start); used > 0 && used+int64(n) > l.cfg.SegmentBytes {
		l.parts = append(l.parts, part{base: seq, start: len(l.batch)})
		p = &l.parts[len(l.parts)-1]
		l.runs.cut(len(l.batch))
	}
	return p
}

// AppendBlock appends the messages of inner, all of time ts (0 = Config.Now()),
// as one compressed block that the caller made: inner holds them as
// AppendBlockMessage wrote them, and block must be inner's S2 block
// (github.com/klauspost/compress/s2, block format), at most BlockBytes of inner
// bytes unless it holds one message. The messages take consecutive sequences;
// it returns the first. Like Append's, they count against the limits as records
// and become durable and visible at Commit. It refuses what RoomFor refuses, and
// nothing else: a caller that asked RoomFor first can count on it (and the
// messages are not walked again when inner and block are the slices RoomFor
// was given, unchanged, with no Commit or Rollback in between).
//
// A replicated stream's leader compresses its entries' messages this way, so
// that no replica compresses them again.
func (l *Log) AppendBlock(ts int64, inner, block []byte) (uint64, error) {
	st, err := l.checkBlock(inner, block)
	if err != nil {
		return 0, err
	}
	if ts == 0 {
		ts = l.cfg.Now().UnixNano()
	}
	seq := l.last + uint64(l.npend) + 1
	size := blockHdrSize + len(block)
	p := l.partFor(seq, size)
	at := len(l.batch)
	l.runs.cut(at)
	l.runs.add(at, size)
	l.runs.cut(at + size)
	l.batch = appendMessageBlock(l.batch, seq, ts, st.count, len(inner), block)
	l.ready = append(l.ready, readyBlock{bytes: st.bytes, runs: len(l.readyRuns) - l.readyUsed})
	l.readyUsed = len(l.readyRuns)
	l.scanned = blockScan{}
	p.n += st.count
	l.npend += st.count
	l.pendBytes += st.bytes
	if l.keys != nil {
		l.keys.noteBlock(seq, inner)
	}
	return seq, nil
}

// RoomFor reports whether AppendBlock would take the messages of inner with
// the compressed block, and if not the error it would give: ErrTooLarge for a
// message over the limit or a block larger than a segment, ErrFull when the
// limits discard new messages and they do not fit, ErrBadBlock for inner bytes
// that are not whole messages or a block that does not expand to them.
func (l *Log) RoomFor(inner, block []byte) error {
	_, err := l.checkBlock(inner, block)
	return err
}

// blockStats is what a walk of a message block's inner bytes learns.
type blockStats struct {
	count   int
	bytes   uint64 // the record bytes its messages count for
	largest int    // the largest record
}

// blockScan remembers the last block scanBlock walked, whose subject runs are
// Log.readyRuns[Log.readyUsed:], so that AppendBlock after RoomFor does not
// walk it again.
type blockScan struct {
	inner, block *byte
	n, m         int
	st           blockStats
}

// scanBlock walks the messages of inner (unless they are the ones it walked
// last) and leaves their subject runs after the appended blocks' in readyRuns.
func (l *Log) scanBlock(inner, block []byte) (blockStats, bool) {
	if len(inner) == 0 || len(block) == 0 {
		return blockStats{}, false
	}
	sc := &l.scanned
	if sc.inner == &inner[0] && sc.n == len(inner) && sc.block == &block[0] && sc.m == len(block) {
		return sc.st, true
	}
	*sc = blockScan{}
	clear(l.readyRuns[l.readyUsed:])
	l.readyRuns = l.readyRuns[:l.readyUsed]
	var st blockStats
	for b := inner; len(b) > 0; {
		subj, hdr, data, rest, ok := nextBlockMessage(b)
		if !ok {
			return st, false
		}
		n := recordSize(len(subj), len(hdr), len(data))
		st.largest = max(st.largest, n)
		st.bytes += uint64(n)
		st.count++
		b = rest
		if k := len(l.readyRuns) - 1; k >= l.readyUsed && l.readyRuns[k].subj == string(subj) {
			l.readyRuns[k].n++
			continue
		}
		// Only the writer changes subjects: it may read it without the lock.
		name := ""
		if si := l.subjects[string(subj)]; si != nil {
			name = si.subj
		} else {
			name = string(subj)
		}
		l.readyRuns = append(l.readyRuns, subjRun{subj: name, n: 1})
	}
	*sc = blockScan{inner: &inner[0], n: len(inner), block: &block[0], m: len(block), st: st}
	return st, true
}

func (l *Log) checkBlock(inner, block []byte) (blockStats, error) {
	if l.shut.Load() {
		return blockStats{}, ErrClosed
	}
	if l.broken != nil {
		return blockStats{}, l.broken
	}
	st, ok := l.scanBlock(inner, block)
	if !ok {
		return st, fmt.Errorf("store %q: message %d of a block: %w", l.cfg.Name, st.count, ErrBadBlock)
	}
	if n, err := s2.DecodedLen(block); err != nil || n != len(inner) || st.count > math.MaxUint32 {
		return st, fmt.Errorf("store %q: a block of %d messages, %d inner bytes: %w", l.cfg.Name, st.count, len(inner), ErrBadBlock)
	}
	if int64(st.largest) > l.cfg.SegmentBytes || (l.cfg.MaxBytes > 0 && int64(st.largest) > l.cfg.MaxBytes) {
		return st, fmt.Errorf("store %q: record of %d bytes exceeds the limit of %d: %w",
			l.cfg.Name, st.largest, l.maxRecord(), ErrTooLarge)
	}
	if size := blockHdrSize + len(block); int64(size) > l.cfg.SegmentBytes {
		return st, fmt.Errorf("store %q: block of %d bytes exceeds the segment size of %d: %w",
			l.cfg.Name, size, l.cfg.SegmentBytes, ErrTooLarge)
	}
	if l.cfg.Discard == DiscardNew {
		if l.cfg.MaxMsgs > 0 && l.msgs+uint64(l.npend)+uint64(st.count) > l.cfg.MaxMsgs {
			return st, fmt.Errorf("store %q: %d messages: %w", l.cfg.Name, l.cfg.MaxMsgs, ErrFull)
		}
		if l.cfg.MaxBytes > 0 && l.bytes+l.pendBytes+st.bytes > uint64(l.cfg.MaxBytes) {
			return st, fmt.Errorf("store %q: %d bytes: %w", l.cfg.Name, l.cfg.MaxBytes, ErrFull)
		}
	}
	return st, nil
}

// A block AppendBlock put in the batch, for publishBatch: the record bytes its
// messages count for, and how many of Log.readyRuns are its.
type readyBlock struct {
	bytes uint64
	runs  int
}

// subjRun is n consecutive messages of one subject.
type subjRun struct {
	subj string
	n    uint64
}

func (l *Log) maxRecord() int64 {
	if l.cfg.MaxBytes > 0 {
		return min(l.cfg.MaxBytes, l.cfg.SegmentBytes)
	}
	return l.cfg.SegmentBytes
}

// Rollback discards what was appended since the last Commit (sequences are reused).
func (l *Log) Rollback() { l.resetBatch() }

func (l *Log) resetBatch() {
	if cap(l.batch) > 64<<20 {
		l.batch = nil // one huge batch should not pin its buffer forever
	}
	if cap(l.packed) > 64<<20 {
		l.packed = nil
	}
	l.batch = l.batch[:0]
	l.packed = l.packed[:0]
	l.parts = l.parts[:0]
	l.npend = 0
	l.pendBytes = 0
	l.bare = false
	l.runs.reset()
	l.ready = l.ready[:0]
	clear(l.readyRuns) // their subjects
	l.readyRuns = l.readyRuns[:0]
	l.readyUsed = 0
	l.scanned = blockScan{}
	if l.keys != nil {
		l.keys.pending = l.keys.pending[:0]
	}
}

func (l *Log) partEnd(i int) int {
	if i+1 < len(l.parts) {
		return l.parts[i+1].start
	}
	return len(l.batch)
}

// pack packs every part's records into compressed blocks where they shrink.
func (l *Log) pack() {
	for i := range l.parts {
		p := &l.parts[i]
		if p.n == 0 {
			continue
		}
		from := len(l.packed)
		var packed bool
		start, end := p.start, l.partEnd(i)
		if l.packed, packed = packBlocks(l.packed, l.batch[start:end], l.runs.within(start, end), &l.gate, l.bare); packed {
			p.packedFrom, p.packedTo = from, len(l.packed)
		}
	}
}

// written is what part i puts in its segment file.
func (l *Log) written(i int) []byte {
	if p := &l.parts[i]; p.packedTo > 0 {
		return l.packed[p.packedFrom:p.packedTo]
	}
	return l.batch[l.parts[i].start:l.partEnd(i)]
}

// Commit writes everything appended since the last Commit with one write per segment
// touched (group commit), fsyncs when the policy is SyncAlways, applies count/byte
// retention, and makes the records readable. On error (e.g. ENOSPC → wraps ErrNoSpace)
// none of the uncommitted records become visible, the file is truncated back to the
// last good offset, the sequences are handed out again, and the log stays usable once
// space returns.
func (l *Log) Commit() error {
	if l.shut.Load() {
		return ErrClosed
	}
	if l.broken != nil {
		return l.broken
	}
	if l.npend == 0 {
		l.scanned = blockScan{} // RoomFor's walk is for before the next commit only
		return nil
	}
	defer l.resetBatch()
	if err := l.writeBatch(); err != nil {
		return err
	}
	sealed := l.publishBatch()
	if l.keys != nil {
		l.keys.commit()
		l.countKeys()
	}
	for _, s := range sealed {
		l.writeIndex(s)
	}
	if l.cfg.Discard == DiscardOld && l.overLimits() {
		if _, err := l.removeFront(0, true); err != nil {
			// The records are committed; only the tombstone write for the
			// retention failed, and Open applies the limits again.
			return fmt.Errorf("store %q: retention after commit: %w", l.cfg.Name, err)
		}
	}
	return nil
}

// writeBatch puts the batch on disk, one write per segment, and undoes all of it
// on failure so the files end at their last committed offsets.
func (l *Log) writeBatch() error {
	var created []*segment
	undo := func(err error) error {
		a := l.active()
		if terr := a.f.Truncate(a.size); terr != nil {
			// Stale records beyond the committed end would come back at recovery
			// with sequences that will be handed out again: stop writing.
			l.broken = fmt.Errorf("store %q: cannot undo a failed write to %s (%v) after: %w", l.cfg.Name, a.logPath, terr, err)
		}
		for _, s := range created {
			s.f.Close()
			os.Remove(s.logPath)
		}
		return err
	}
	if l.cfg.Compression == CompressS2 {
		l.pack()
	} else if l.bare {
		sealRecords(l.batch) // compression was turned off since these were appended
	}
	for i := range l.parts {
		p := &l.parts[i]
		if p.n == 0 {
			continue // the active segment was full before this batch
		}
		if p.seg == nil {
			s, err := l.createSegment(p.base)
			if err != nil {
				return undo(err)
			}
			created = append(created, s)
			p.seg = s
		}
		if _, err := p.seg.f.WriteAt(l.written(i), p.off); err != nil {
			return undo(l.ioErr("write segment", p.seg.logPath, err))
		}
	}
	if l.cfg.Sync == SyncAlways {
		for i := range l.parts {
			if l.parts[i].n == 0 {
				continue
			}
			if err := l.fsync(l.parts[i].seg.f); err != nil {
				return undo(l.ioErr("fsync segment", l.parts[i].seg.logPath, err))
			}
		}
		if len(created) > 0 {
			if err := l.syncDir(); err != nil {
				return undo(err)
			}
		}
	} else {
		for i := range l.parts {
			if l.parts[i].n > 0 {
				l.markDirty(l.parts[i].seg.f, false)
			}
		}
		if len(created) > 0 {
			l.markDirty(nil, true)
		}
	}
	return nil
}

// createSegment makes the (empty) file of a new segment.
func (l *Log) createSegment(base uint64) (*segment, error) {
	s := newSegment(l.cfg.Dir, base)
	f, err := os.OpenFile(s.logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, l.ioErr("create segment", s.logPath, err)
	}
	s.f = f
	return s, nil
}

// publishBatch makes the written batch visible and returns the segments it sealed.
func (l *Log) publishBatch() []*segment {
	var sealed []*segment
	l.mu.Lock()
	defer l.mu.Unlock()
	wasEmpty := l.first > l.last
	var si *subjInfo
	ready, runs := l.ready, l.readyRuns
	for i := range l.parts {
		p := &l.parts[i]
		s := p.seg
		if s != l.active() {
			prev := l.active()
			prev.sealed = true
			sealed = append(sealed, prev)
			l.segs = append(l.segs, s)
		}
		// The records as appended, and the units (records and blocks) the file got:
		// a block's records are all indexed at the block's offset.
		b := l.batch[p.start:l.partEnd(i)]
		if s.born == 0 && len(b) > 0 {
			s.born = recTime(b)
		}
		s.liveBytes += int64(len(b))
		off := p.off
		for out := l.written(i); len(out) > 0; {
			if recFlags(b)&flagBlock != 0 {
				// AppendBlock's, written as it is: its messages share its time.
				seq, ts, n := recSeq(b), recTime(b), recLen(b)
				s.index = s.ib.add(s.index, l.cfg.IndexEvery, uint32(seq-s.base), off, ts)
				s.tmax = max(s.tmax, ts)
				rb := ready[0]
				ready = ready[1:]
				s.liveBytes += int64(rb.bytes) - int64(n)
				for _, r := range runs[:rb.runs] {
					if si == nil || si.subj != r.subj {
						if si = l.subjects[r.subj]; si == nil {
							si = &subjInfo{subj: r.subj}
							l.subjects[si.subj] = si
						}
					}
					si.msgs += r.n
					seq += r.n
					si.last = seq - 1
				}
				runs = runs[rb.runs:]
				l.lastTime = ts
				if wasEmpty {
					l.firstTime = ts
					wasEmpty = false
				}
				off += int64(n)
				out, b = out[n:], b[n:]
				continue
			}
			for k := unitCount(out); k > 0; k-- {
				n := recLen(b)
				rec := b[:n]
				seq, ts := recSeq(rec), recTime(rec)
				s.index = s.ib.add(s.index, l.cfg.IndexEvery, uint32(seq-s.base), off, ts)
				s.tmax = max(s.tmax, ts)
				// A commit's records mostly share one subject: the last one's
				// entry saves a map lookup per record.
				if subj := recSubject(rec); si == nil || si.subj != string(subj) {
					if si = l.subjects[string(subj)]; si == nil {
						si = &subjInfo{subj: string(subj)}
						l.subjects[si.subj] = si
					}
				}
				si.msgs++
				si.last = seq
				l.lastTime = ts
				if wasEmpty {
					l.firstTime = ts
					wasEmpty = false
				}
				b = b[n:]
			}
			n := recLen(out)
			off += int64(n)
			out = out[n:]
		}
		s.size = off
		s.last += uint64(p.n)
	}
	l.last += uint64(l.npend)
	l.msgs += uint64(l.npend)
	l.bytes += l.pendBytes
	return sealed
}

// writeIndex persists a sealed segment's index. It is only an accelerator that
// recovery can rebuild, so failures are ignored (the partial file is removed).
func (l *Log) writeIndex(s *segment) {
	buf := encodeIndex(nil, idxFile{base: s.base, last: s.last, size: s.size, tmax: s.tmax, entries: s.index})
	path := s.idxPath()
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		os.Remove(path)
	}
}

func (l *Log) overLimits() bool {
	return (l.cfg.MaxMsgs > 0 && l.msgs > l.cfg.MaxMsgs) ||
		(l.cfg.MaxBytes > 0 && l.bytes > uint64(l.cfg.MaxBytes))
}

// SetLimits changes the retention limits of an open log (a stream's
// configuration was updated). Writer only. With DiscardOld, limits that are
// now exceeded are applied at once; MaxAge takes effect at the next ExpireOld.
func (l *Log) SetLimits(maxAge time.Duration, maxBytes int64, maxMsgs uint64, discard Discard) error {
	if l.shut.Load() {
		return ErrClosed
	}
	l.cfg.MaxAge, l.cfg.MaxBytes, l.cfg.MaxMsgs, l.cfg.Discard = maxAge, maxBytes, maxMsgs, discard
	if discard == DiscardOld && l.overLimits() {
		if _, err := l.removeFront(0, true); err != nil {
			return fmt.Errorf("store %q: applying new limits: %w", l.cfg.Name, err)
		}
	}
	return nil
}

// SetSegmentAge changes Config.SegmentAge of an open log. Writer only.
func (l *Log) SetSegmentAge(age time.Duration) { l.cfg.SegmentAge = age }

// SetCompression changes how the next commits are written (a stream's
// configuration was updated). Writer only. Records already written stay as they
// are: blocks are read whatever the setting.
func (l *Log) SetCompression(c Compression) error {
	if l.shut.Load() {
		return ErrClosed
	}
	switch c {
	case CompressNone, CompressS2:
	default:
		return fmt.Errorf("store %q: unknown compression %d", l.cfg.Name, int(c))
	}
	l.cfg.Compression = c
	return nil
}
