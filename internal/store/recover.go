package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const scanChunk = 1 << 20

var errShortSegment = errors.New("segment is shorter than its index says (truncated?)")

// Open opens (creating if needed) the log in cfg.Dir and recovers it: every
// record's CRC is checked, a torn tail of the last segment is cut off, damage
// anywhere else is reported in Report.Corrupt and stepped over, indexes are
// rebuilt where missing, and the tombstones and per-subject state are loaded.
// Open fails only for I/O errors and unusable directories.
func Open(cfg Config) (*Log, Report, error) {
	start := time.Now()
	var rep Report
	if err := cfg.setDefaults(); err != nil {
		return nil, rep, err
	}
	l := &Log{cfg: cfg, subjects: make(map[string]*subjInfo)}
	if cfg.Keys != nil {
		l.keys = newKeyState(cfg.Keys)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, rep, l.ioErr("create directory", cfg.Dir, err)
	}
	rc := &recovery{l: l, rep: &rep}
	if err := rc.run(); err != nil {
		for _, s := range rc.segs {
			s.closeFiles()
		}
		return nil, rep, err
	}
	if l.cfg.Discard == DiscardOld && l.overLimits() {
		if _, err := l.removeFront(0, true); err != nil {
			l.Close()
			return nil, rep, err
		}
	}
	rep.Msgs = l.msgs
	rep.Duration = time.Since(start)
	l.countKeys()
	if cfg.Sync == SyncInterval && !cfg.OwnerSyncs {
		l.isync = NewIntervalSync(cfg.SyncInterval, func() error {
			if l.shut.Load() {
				return nil // Close synced it
			}
			return l.Sync()
		})
	}
	return l, rep, nil
}

type recovery struct {
	l    *Log
	rep  *Report
	segs []*segment
	dels rangeCursor
	win  window
	exp  expander

	haveFirst bool
	delFiles  map[uint64][]byte // raw .del contents by segment base
}

func (rc *recovery) run() error {
	l := rc.l
	ents, err := os.ReadDir(l.cfg.Dir)
	if err != nil {
		return l.ioErr("read directory", l.cfg.Dir, err)
	}
	var bases []uint64
	other := map[uint64][]string{}
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(l.cfg.Dir, name)) // an unfinished rewrite
			continue
		}
		base, ext, ok := parseSegName(name)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		switch ext {
		case ".log":
			bases = append(bases, base)
		case ".idx", ".del":
			other[base] = append(other[base], ext)
		}
	}
	slices.Sort(bases)
	have := func(b uint64) bool { _, ok := slices.BinarySearch(bases, b); return ok }
	// Files of segments already removed: their tombstones concern nothing that
	// still exists (the .log goes first when a segment is removed).
	for b, exts := range other {
		if !have(b) {
			for _, x := range exts {
				os.Remove(filepath.Join(l.cfg.Dir, segName(b)+x))
			}
		}
	}

	// Tombstones first: the scan needs them to count live messages per subject.
	rc.delFiles = map[uint64][]byte{}
	var ranges []seqRange
	for _, b := range bases {
		path := filepath.Join(l.cfg.Dir, segName(b)+".del")
		buf, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return l.ioErr("read tombstones", path, err)
		}
		rc.delFiles[b] = buf
		var bad int
		ranges, bad = decodeDelEntries(ranges, buf)
		if bad >= 0 {
			rc.rep.Corrupt = append(rc.rep.Corrupt, Corruption{Log: l.cfg.Name, Segment: path, Offset: int64(bad),
				Err: errors.New("bad tombstone entry: a deleted message may have come back")})
		}
	}
	rc.dels.r = mergeRanges(ranges)

	var merged []uint64 // segments whose sequences a merge's file holds
	for i := 0; i < len(bases); i++ {
		s := newSegment(l.cfg.Dir, bases[i])
		last := i == len(bases)-1
		mode := os.O_RDONLY
		if last {
			mode = os.O_RDWR
		}
		f, err := os.OpenFile(s.logPath, mode, 0)
		if err != nil {
			return l.ioErr("open segment", s.logPath, err)
		}
		s.f = f
		rc.segs = append(rc.segs, s)
		covered, err := rc.scan(s, last, bases[i+1:])
		if err != nil {
			return err
		}
		merged = append(merged, bases[i+1:i+1+covered]...)
		i += covered
	}
	if len(rc.segs) == 0 {
		s, err := l.createSegment(1)
		if err != nil {
			return err
		}
		rc.segs = append(rc.segs, s)
		l.markDirty(nil, true)
	}
	l.segs = rc.segs
	l.last = l.active().last
	if !rc.haveFirst {
		l.first = l.last + 1
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		s.sealed = true
	}
	// The active segment gets its index file when it is sealed.
	os.Remove(l.active().idxPath())

	// Dead or empty sealed segments go (they hold nothing, or only tombstoned
	// messages); the active one stays to keep LastSeq.
	removed := false
	for _, s := range slices.Clone(l.segs[:len(l.segs)-1]) {
		if s.live() == 0 {
			l.removeSegment(s)
			removed = true
		}
	}
	if removed {
		if err := l.syncDir(); err != nil {
			return err
		}
	}

	// Interior tombstones (above first) stay in memory; everything below first
	// is implied by first itself.
	for _, r := range rc.dels.r {
		a, z := max(r.a, l.first+1), min(r.b, l.last)
		for a <= z {
			s := l.segs[l.segIndex(a)]
			if a < s.base {
				a = s.base
				continue
			}
			for q := a; q <= min(z, s.last); q++ {
				s.dels.add(uint32(q - s.base))
			}
			if s.last >= z {
				break
			}
			a = s.last + 1
		}
	}
	if err := rc.normalizeDels(); err != nil {
		return err
	}
	// The merged segments' tombstones are in the .del file of the segment
	// that holds their sequences now: their own files can go.
	for _, b := range merged {
		newSegment(l.cfg.Dir, b).removeFiles()
	}
	if len(merged) > 0 {
		return l.syncDir()
	}
	return nil
}

// normalizeDels rewrites each .del file as merged ranges when that differs from
// what is on disk: it drops tombstones above LastSeq (their messages were lost
// in a torn tail, and those sequences will be handed out again) and keeps the
// files small.
func (rc *recovery) normalizeDels() error {
	l := rc.l
	changed := false
	for _, s := range l.segs {
		want, _ := l.delContent(s)
		have, ok := rc.delFiles[s.base]
		if s.delf != nil {
			// Written during Open (a hole entry): reread it, and close it so
			// that no write goes to an inode the rename below replaces.
			s.delf.Close()
			s.delf = nil
			l.forgetDel(s)
			var err error
			if have, err = os.ReadFile(s.delPath()); err != nil {
				return l.ioErr("read tombstones", s.delPath(), err)
			}
			ok = true
		}
		s.delEntries = len(have) / delEntrySize
		if bytes.Equal(want, have) {
			continue
		}
		if len(want) == 0 {
			if ok {
				os.Remove(s.delPath())
				changed = true
			}
			s.delEntries = 0
			continue
		}
		tmp := s.delPath() + ".tmp"
		if err := l.writeFileSync(tmp, want, true); err != nil {
			return err
		}
		if err := os.Rename(tmp, s.delPath()); err != nil {
			return l.ioErr("rename tombstones", tmp, err)
		}
		s.delEntries = len(want) / delEntrySize
		changed = true
	}
	if changed {
		return l.syncDir()
	}
	return nil
}

// scan reads every record of s, checking CRCs and sequences, and builds its
// index and the log's counters. next are the bases of the segments after s:
// s holds sequences below the first, unless it is a merge of it and more
// (Clean) whose files a crash left behind. Then s's intact records go on past
// their bases, and scan reports how many of them s covers, for the caller to
// skip and remove; never the last one, whose base bounds s.
func (rc *recovery) scan(s *segment, last bool, next []uint64) (covered int, err error) {
	bound := uint64(math.MaxUint64)
	if len(next) > 0 {
		bound = next[0] - 1
	}
	// fits reports whether s may hold sequences up to end.
	fits := func(end uint64) bool {
		for end > bound && covered+1 < len(next) {
			covered++
			bound = next[covered] - 1
		}
		return end <= bound
	}
	l := rc.l
	st, err := s.f.Stat()
	if err != nil {
		return 0, l.ioErr("stat segment", s.logPath, err)
	}
	size := st.Size()
	var ix *idxFile
	if !last {
		if buf, err := os.ReadFile(s.idxPath()); err == nil {
			if x, err := decodeIndex(buf); err == nil && x.base == s.base {
				ix = &x
			}
		}
	}
	w := &rc.win
	w.reset()
	off, expect := int64(0), s.base
	for off < size {
		raw, err := w.record(s.f, off, size, scanChunk)
		var rec Record
		if err == nil && recFlags(raw)&flagHole != 0 {
			var first, count uint64
			if first, count, err = checkUnit(raw); err == nil && (first != expect || !fits(expect+count-1)) {
				err = errSeq
			}
			if err == nil {
				rc.acceptHole(s, raw, off, count)
				off += int64(len(raw))
				expect += count
				continue
			}
		} else if err == nil && recFlags(raw)&flagBlock != 0 {
			if err = rc.exp.load(s.f, off, raw, l.cfg.SegmentBytes); err == nil &&
				(rc.exp.first != expect || !fits(expect+rc.exp.count-1)) {
				err = errSeq
			}
			if err == nil {
				for q := expect; q < expect+rc.exp.count; q++ {
					rec, n := rc.exp.at(q)
					if n == 0 {
						rc.acceptInnerHole(s, off, q)
						continue
					}
					rc.accept(s, rec, off, n)
				}
				off += int64(len(raw))
				expect += rc.exp.count
				rc.exp.reset()
				continue
			}
		} else if err == nil {
			if rec, err = decodeRecord(raw); err == nil && (rec.Seq != expect || !fits(rec.Seq)) {
				err = errSeq
			}
			if err == nil {
				rc.accept(s, rec, off, len(raw))
				off += int64(len(raw))
				expect++
				continue
			}
		}
		if !isDecodeErr(err) {
			return 0, l.ioErr("read segment", s.logPath, err)
		}
		noff, nseq, found, err2 := resync(w, s.f, off, size, expect, bound, scanChunk)
		if err2 != nil {
			return 0, l.ioErr("read segment", s.logPath, err2)
		}
		if found {
			if nseq > expect {
				rc.corrupt(s, off, noff, expect, nseq-1, err)
			} else {
				rc.corrupt(s, off, noff, 0, 0, err) // stray bytes between intact records
			}
			off, expect = noff, nseq
			continue
		}
		if last {
			// A torn tail: whatever the last write left half done.
			if err := s.f.Truncate(off); err != nil {
				return 0, l.ioErr("truncate torn tail of", s.logPath, err)
			}
			rc.rep.TruncatedBytes += size - off
			size = off
			break
		}
		if expect <= bound {
			rc.corrupt(s, off, size, expect, bound, err)
			expect = bound + 1
		} else {
			rc.corrupt(s, off, size, 0, 0, err)
		}
		off = size
	}
	if !last && expect <= bound && rc.countDeleted(expect, bound) < bound-expect+1 {
		// Intact up to here, but sequences are missing before the next segment
		// (and they are not a hole left by removing a dead segment).
		e := errMissing
		if ix != nil && ix.size > size {
			e = errShortSegment
		}
		rc.corrupt(s, size, size, expect, bound, e)
		expect = bound + 1
	}
	s.size = size
	s.last = expect - 1
	if !last && (ix == nil || ix.last != s.last || ix.size != s.size || !slices.Equal(ix.entries, s.index)) {
		l.writeIndex(s)
	}
	return covered, nil
}

// accept counts one intact record found by the scan.
func (rc *recovery) accept(s *segment, rec Record, off int64, n int) {
	l := rc.l
	if s.born == 0 {
		s.born = rec.Time
	}
	s.index = s.ib.add(s.index, l.cfg.IndexEvery, uint32(rec.Seq-s.base), off, rec.Time)
	s.tmax = max(s.tmax, rec.Time)
	l.lastTime = rec.Time
	if rc.dels.has(rec.Seq) {
		s.dead++
		return
	}
	l.msgs++
	l.bytes += uint64(n)
	s.liveBytes += int64(n)
	si := l.subjects[string(rec.Subject)]
	if si == nil {
		si = &subjInfo{subj: string(rec.Subject)}
		l.subjects[si.subj] = si
	}
	si.msgs++
	si.last = rec.Seq
	if l.keys != nil {
		if h, ok, tomb := l.keys.hash(rec.Subject, rec.Header); ok {
			l.keys.add(rec.Seq, h, tomb)
		}
	}
	if !rc.haveFirst {
		rc.haveFirst = true
		l.first, l.firstTime = rec.Seq, rec.Time
	}
}

// acceptHole counts a hole found by the scan: count sequences from the one
// expected, deleted. Any the tombstones do not name (a damaged .del) are lost
// messages, reported as damage.
func (rc *recovery) acceptHole(s *segment, raw []byte, off int64, count uint64) {
	first := recSeq(raw)
	if s.born == 0 {
		s.born = recTime(raw)
	}
	s.index = s.ib.add(s.index, rc.l.cfg.IndexEvery, uint32(first-s.base), off, recTime(raw))
	s.tmax = max(s.tmax, recTime(raw))
	if rc.countDeleted(first, first+count-1) < count {
		rc.corrupt(s, off, off+int64(len(raw)), first, first+count-1, errHoleLive)
		return
	}
	s.dead += count
	s.holed += count
}

// acceptInnerHole counts seq, in a hole inside the block at off: deleted, or,
// when the tombstones do not say so, a lost message.
func (rc *recovery) acceptInnerHole(s *segment, off int64, seq uint64) {
	s.index = s.ib.add(s.index, rc.l.cfg.IndexEvery, uint32(seq-s.base), off, minTime)
	if !rc.dels.has(seq) {
		// Reported with no bytes of its own, and without the fresh index
		// entry damage asks for: the block's other records are intact, and
		// an entry must point at the start of a unit.
		lastOff := s.ib.lastOff
		rc.corrupt(s, off, off, seq, seq, errHoleLive)
		s.ib.lastOff = lastOff
		return
	}
	s.dead++
	s.holed++
}

// corrupt reports damaged bytes [off, end) of s that held the sequences
// first..last (0, 0 when no sequence was lost). Those sequences stay in the log
// as unreadable messages until deleted or removed from the front.
func (rc *recovery) corrupt(s *segment, off, end int64, first, last uint64, err error) {
	l := rc.l
	rc.rep.Corrupt = append(rc.rep.Corrupt, Corruption{Log: l.cfg.Name, Segment: s.logPath, Offset: off,
		FirstSeq: first, LastSeq: last, Err: err})
	s.ib.lastOff = -1 // index the next intact record, so lookups never start inside the damage
	if first == 0 && last == 0 {
		return
	}
	dead := rc.countDeleted(first, last)
	live := last - first + 1 - dead
	s.dead += dead
	if live == 0 {
		return // every message there was deleted anyway
	}
	cr := &corruptRange{seg: s, off: off, end: end, first: first, last: last, err: err}
	{
		cr.bytes = uint64(end - off)
		l.msgs += live
		l.bytes += cr.bytes
		s.liveBytes += int64(cr.bytes)
		if !rc.haveFirst {
			rc.haveFirst = true
			l.first = first
			if rc.dels.has(first) {
				l.first = rc.dels.r[rc.dels.i].b + 1
			}
		}
	}
	l.corrupt = append(l.corrupt, cr)
}

// countDeleted counts tombstoned sequences in [a, b] (a increasing across calls).
func (rc *recovery) countDeleted(a, b uint64) uint64 {
	c := &rc.dels
	rc.dels.has(a) // moves the cursor to the first range that can intersect
	var n uint64
	for i := c.i; i < len(c.r) && c.r[i].a <= b; i++ {
		lo, hi := max(c.r[i].a, a), min(c.r[i].b, b)
		if lo <= hi {
			n += hi - lo + 1
		}
	}
	return n
}

// resync looks for the first intact record or block after the damage at off: one
// whose seq is in [minSeq, maxSeq] and which leaves room before it for the
// records minSeq..seq-1 (each at least a byte, as they may have been in a
// compressed block), so stray bytes that happen to look like a record with a wild
// sequence are not taken for one.
func resync(w *window, f *os.File, off, limit int64, minSeq, maxSeq uint64, chunk int) (int64, uint64, bool, error) {
	pos := off + 1
	for pos+recHdrSize <= limit {
		n := int(min(int64(chunk), limit-pos))
		b, err := w.get(f, pos, n, limit, chunk)
		if err != nil {
			return 0, 0, false, err
		}
		i := bytes.Index(b, recMagic[:])
		if i < 0 {
			pos += int64(max(len(b)-len(recMagic)+1, 1))
			continue
		}
		cand := pos + int64(i)
		raw, err := w.record(f, cand, limit, chunk)
		if err == nil {
			var seq uint64
			if seq, _, err = checkUnit(raw); err == nil &&
				seq >= minSeq && seq <= maxSeq && seq-minSeq <= uint64(cand-off) {
				return cand, seq, true, nil
			}
		}
		if err != nil && !isDecodeErr(err) {
			return 0, 0, false, err
		}
		pos = cand + 1
	}
	return 0, 0, false, nil
}

var (
	_ = fmt.Sprintf
	_ = io.EOF
)
