package store

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// TruncateAfter removes every record with a sequence above seq, so that the next
// Append gets seq+1: what a replication log does when its leader's entries
// replace a conflicting suffix. Writer only; appends not yet committed are
// dropped first, as by Rollback. seq must be at least FirstSeq-1 (below that the
// records are gone already; Reset starts the log at any sequence). A seq inside
// a damaged range is refused with a *Corruption.
//
// The segments above seq are removed, the last one first, and the segment
// holding seq is cut after it: its tombstones above seq are dropped and its
// index file removed (it is the active segment again). A crash in the middle
// leaves a prefix of the old log that still holds every record up to seq, which
// Open recovers like any log. Under SyncAlways all of it is fsynced before
// TruncateAfter returns; under SyncInterval the directory is (so that a removed
// segment cannot come back beside new records that reuse its sequences).
//
// Readers see the log end at seq; a Reader past it continues at seq+1.
func (l *Log) TruncateAfter(seq uint64) error {
	cut := seq < l.last
	if err := l.truncateAfter(seq); err != nil || !cut || l.keys == nil {
		return err
	}
	return l.rebuildKeys()
}

func (l *Log) truncateAfter(seq uint64) error {
	if l.shut.Load() {
		return ErrClosed
	}
	if l.broken != nil {
		return l.broken
	}
	l.resetBatch()
	if seq >= l.last {
		return nil
	}
	if seq+1 < l.first {
		return fmt.Errorf("store %q: truncate after %d: the log starts at %d (use Reset)", l.cfg.Name, seq, l.first)
	}
	// k is the segment that ends the log afterwards: the last one starting at or
	// before seq+1 (an empty segment starting at seq+1 says where the log goes on).
	k := len(l.segs) - 1
	for k > 0 && l.segs[k].base > seq+1 {
		k--
	}
	s := l.segs[k]
	cut, err := l.cutOffset(s, seq)
	if err != nil {
		return err
	}
	gone, err := l.tallyAbove(seq)
	if err != nil {
		return err
	}
	lastTime := l.timeOf(seq)
	newTmax, ib := l.tmaxBefore(s, cut)
	// seq may lie in a hole left by removed segments; s then stays as it is.
	hole := seq > s.last

	f := s.f
	if !hole && s.sealed {
		// It becomes the active segment; those found by recovery are open read-only.
		if f, err = os.OpenFile(s.logPath, os.O_RDWR, 0); err != nil {
			return l.ioErr("open segment", s.logPath, err)
		}
	}
	removed := slices.Clone(l.segs[k+1:])

	// Memory first, so readers stop at seq before any byte goes.
	l.mu.Lock()
	for _, r := range removed {
		r.removed = true
	}
	clear(l.segs[k+1:])
	l.segs = l.segs[:k+1]
	old, wasSealed := s.f, s.sealed
	if !hole {
		s.f = f
		s.size = cut
		s.last = max(seq, s.base-1)
		n := 0
		for n < len(s.index) && int64(s.index[n].off) < cut {
			n++
		}
		s.index = s.index[:n]
		s.tmax, s.ib = newTmax, ib
		s.sealed = false
	}
	for _, rel := range s.dels.sorted() {
		if s.base+uint64(rel) > seq {
			s.dels.remove(rel)
			s.dead--
		}
	}
	s.holed = min(s.holed, s.dead) // Clean's measure only: holes cut away leave it high
	s.liveBytes -= gone.segBytes
	if len(l.corrupt) > 0 {
		kept := l.corrupt[:0]
		for _, c := range l.corrupt {
			if c.first > seq {
				l.bytes -= c.bytes
				c.seg.liveBytes -= int64(c.bytes)
				continue
			}
			kept = append(kept, c)
		}
		clear(l.corrupt[len(kept):])
		l.corrupt = kept
	}
	for subj, n := range gone.subjects {
		if si := l.subjects[subj]; si != nil {
			si.msgs -= n
			if si.msgs == 0 {
				delete(l.subjects, subj)
			}
		}
	}
	if gone.msgs > 0 && len(l.watches) > 0 {
		l.noteRemovedLocked(l.last)
	}
	l.msgs -= gone.msgs
	l.bytes -= gone.bytes
	l.last = s.last // seq, unless it lies in a hole (see below)
	l.lastTime = lastTime
	if l.first > l.last {
		l.first = l.last + 1
	}
	l.gen++
	l.mu.Unlock()
	if old != s.f {
		old.Close()
	}
	l.head, l.rc = cursor{}, cursor{}

	// On disk: the removed segments from the last one back, then the cut, so
	// that a crash leaves a prefix of the old log. A failure leaves the files
	// ahead of memory: the log stops writing until it is opened again.
	for i := len(removed) - 1; i >= 0; i-- {
		r := removed[i]
		l.forgetDel(r)
		r.closeFiles()
		if err := os.Remove(r.logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.broken = l.ioErr("remove segment", r.logPath, err)
			return l.broken
		}
		os.Remove(r.idxPath())
		os.Remove(r.delPath())
	}
	if !hole {
		if err := s.f.Truncate(cut); err != nil {
			l.broken = l.ioErr("truncate segment", s.logPath, err)
			return l.broken
		}
		if wasSealed {
			os.Remove(s.idxPath())
		}
	}

	// A subject whose last message went needs its previous one.
	for subj := range gone.subjects {
		si := l.subjects[subj]
		if si == nil || si.last <= seq {
			continue
		}
		prev, err := l.prevOfSubject([]byte(subj), seq+1)
		if err != nil {
			return err
		}
		l.mu.Lock()
		si.last = prev
		l.mu.Unlock()
	}
	// Tombstones above seq must not outlive the cut: the next records reuse
	// those sequences. (Open drops them too, should a crash come first.)
	if err := l.dropDelsAbove(s, seq); err != nil {
		return err
	}
	if hole {
		// An empty segment at seq+1 keeps the hole explained (its tombstones
		// went with the segment after it) and LastSeq where it belongs.
		if err := l.startSegment(seq+1, seqRange{s.last + 1, seq}); err != nil {
			return err
		}
	}
	switch l.cfg.Sync {
	case SyncAlways:
		if err := l.fsync(s.f); err != nil {
			return l.ioErr("fsync segment", s.logPath, err)
		}
		return l.syncDir()
	case SyncInterval:
		l.markDirty(s.f, false)
		if len(removed) > 0 {
			return l.syncDir()
		}
	default:
		l.markDirty(s.f, len(removed) > 0)
	}
	return nil
}

// cutOffset returns where segment s must end to hold nothing above seq.
func (l *Log) cutOffset(s *segment, seq uint64) (int64, error) {
	switch {
	case seq < s.base:
		return 0, nil
	case seq >= s.last:
		return s.size, nil
	}
	for _, c := range l.corrupt {
		if c.seg != s || c.last < seq || c.first > seq+1 {
			continue
		}
		switch {
		case c.first == seq+1:
			return c.off, nil
		case c.last == seq:
			return c.end, nil
		}
		return 0, fmt.Errorf("store %q: truncate after %d: %w", l.cfg.Name, seq, l.corruptErr(c))
	}
	_, size, err := l.rawAt(&l.rc, seq, randChunk)
	if err != nil && (l.rc.seg == nil || !l.rc.u.hole) {
		return 0, err
	}
	if c := &l.rc; c.u.block {
		if seq != c.seq+c.u.count-1 {
			return 0, fmt.Errorf("store %q: truncate after %d: %w", l.cfg.Name, seq, ErrCutInBlock)
		}
		return c.off + int64(c.u.n), nil
	}
	return l.rc.off + int64(size), nil
}

// removal is what truncation takes away from the counters.
type removal struct {
	msgs, bytes uint64
	segBytes    int64             // record bytes of live messages in the segment that is cut
	subjects    map[string]uint64 // live messages removed per subject
}

// tallyAbove reads the live records above seq for their subjects and sizes.
func (l *Log) tallyAbove(seq uint64) (removal, error) {
	g := removal{subjects: map[string]uint64{}}
	for q := seq + 1; q <= l.last; q++ {
		s := l.segFor(q)
		if s == nil {
			if i := l.segIndex(q); l.segs[i].base > q {
				q = l.segs[i].base - 1 // a hole: go on at the next segment
			}
			continue
		}
		if s.dels.has(uint32(q - s.base)) {
			continue
		}
		g.msgs++
		if l.corruptAt(q) != nil {
			continue // its bytes go with its range
		}
		rec, size, err := l.rawAt(&l.rc, q, headChunk)
		if err != nil {
			var corr *Corruption
			if errors.As(err, &corr) {
				continue // unreadable since Open: subject and size unknown
			}
			return g, err
		}
		g.subjects[string(rec.Subject)]++
		g.bytes += uint64(size)
		if s.base <= seq {
			g.segBytes += int64(size)
		}
	}
	return g, nil
}

// timeOf returns the Time of record seq, or 0 if it cannot be read.
func (l *Log) timeOf(seq uint64) int64 {
	if seq == 0 || l.segFor(seq) == nil || l.corruptAt(seq) != nil {
		return 0
	}
	rec, _, err := l.rawAt(&l.rc, seq, randChunk)
	if err != nil {
		return 0
	}
	return rec.Time
}

// tmaxBefore returns the largest record Time of s below offset cut and the
// index builder that continues after it.
func (l *Log) tmaxBefore(s *segment, cut int64) (int64, indexBuilder) {
	ib := newIndexBuilder()
	var e indexEntry
	found := false
	for _, x := range s.index {
		if int64(x.off) >= cut {
			break
		}
		e, found = x, true
	}
	if !found {
		return minTime, ib
	}
	t := e.tmax
	var w window
	for off := int64(e.off); off < cut; {
		raw, err := w.record(s.f, off, cut, randChunk)
		if err != nil {
			break // damage up to the cut: nothing intact after it to count
		}
		t = max(t, recTime(raw))
		off += int64(len(raw))
	}
	ib.lastOff, ib.tmax = int64(e.off), t
	return t, ib
}

// dropDelsAbove rewrites s's tombstone file if it names sequences above seq.
func (l *Log) dropDelsAbove(s *segment, seq uint64) error {
	buf, err := os.ReadFile(s.delPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return l.ioErr("read tombstones", s.delPath(), err)
	}
	ranges, _ := decodeDelEntries(nil, buf)
	for _, r := range ranges {
		if r.b > seq {
			return l.compactDel(s)
		}
	}
	return nil
}

// startSegment adds an empty active segment at base (after the last one)
// whose tombstone file holds dead, the sequences before base that no segment
// holds.
func (l *Log) startSegment(base uint64, dead seqRange) error {
	s, err := l.emptySegment(base, dead)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.active().sealed = true
	l.segs = append(l.segs, s)
	l.last = base - 1
	if l.msgs == 0 {
		l.first = base
	}
	l.mu.Unlock()
	return nil
}

// emptySegment creates the files of an empty segment at base whose tombstone
// file holds dead. The tombstones are written before the segment file: Open
// removes a .del without its .log, so a crash in between changes nothing.
// Unless the policy is SyncNever both reach the disk before it returns.
func (l *Log) emptySegment(base uint64, dead seqRange) (*segment, error) {
	s := newSegment(l.cfg.Dir, base)
	sync := l.cfg.Sync != SyncNever
	if err := l.writeFileSync(s.delPath(), appendDelEntry(nil, dead.a, dead.b), sync); err != nil {
		return nil, err
	}
	if sync {
		if err := l.syncDir(); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(s.logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		os.Remove(s.delPath())
		return nil, l.ioErr("create segment", s.logPath, err)
	}
	s.f = f
	s.delEntries = 1
	if sync {
		if err := l.syncDir(); err != nil {
			f.Close()
			os.Remove(s.logPath)
			os.Remove(s.delPath())
			return nil, err
		}
	} else {
		l.markDirty(nil, true)
	}
	return s, nil
}

// Reset empties the log and makes next the sequence of the next Append: a
// replication log that installs a snapshot starts again after the snapshot's
// index, which may lie below LastSeq or beyond it. Writer only; appends not yet
// committed are dropped first.
//
// It goes in two steps, each of which a crash leaves either done or not: every
// record is made dead by a floor tombstone in a fresh, empty segment named
// LastSeq+1 (as a purge of everything does), then, if next differs from that,
// an empty segment named next takes its place. A crash during Reset therefore
// leaves the log as it was, empty with its old LastSeq, or reset; the owner
// that must not see the middle state calls Reset again after Open. Under
// SyncAlways and SyncInterval each step is fsynced before the next one starts.
func (l *Log) Reset(next uint64) error {
	if l.shut.Load() {
		return ErrClosed
	}
	if l.broken != nil {
		return l.broken
	}
	if next == 0 {
		return fmt.Errorf("store %q: reset to sequence 0", l.cfg.Name)
	}
	l.resetBatch()
	if a := l.active(); len(l.segs) == 1 && a.size == 0 && a.base == next {
		return nil
	}
	if err := l.killAll(); err != nil {
		return err
	}
	if next != l.last+1 {
		// The log is one empty segment at LastSeq+1; one at next replaces it.
		old := l.active()
		s, err := l.emptySegment(next, seqRange{0, next - 1})
		if err != nil {
			return err
		}
		l.mu.Lock()
		old.removed = true
		l.segs[0] = s
		l.last, l.first = next-1, next
		l.mu.Unlock()
		l.forgetDel(old)
		old.closeFiles()
		os.Remove(old.logPath)
		os.Remove(old.idxPath())
		os.Remove(old.delPath())
		if l.cfg.Sync != SyncNever {
			if err := l.syncDir(); err != nil {
				return err
			}
		} else {
			l.markDirty(nil, true)
		}
	}
	l.mu.Lock()
	l.gen++
	l.firstTime, l.lastTime = 0, 0
	l.mu.Unlock()
	l.head, l.rc = cursor{}, cursor{}
	if l.keys != nil {
		l.keys.reset()
		l.countKeys()
	}
	return nil
}

// killAll makes every record dead at once, without reading them: a floor
// [0, LastSeq] in an empty active segment named LastSeq+1 (a new one unless the
// active segment is empty), then the older segments go.
func (l *Log) killAll() error {
	a := l.active()
	if len(l.segs) == 1 && a.size == 0 {
		return nil
	}
	s := a
	if a.size > 0 {
		var err error
		if s, err = l.createSegment(l.last + 1); err != nil {
			return err
		}
	}
	l.delBuf = appendDelEntry(l.delBuf[:0], 0, l.last)
	// For a new segment this fsyncs the directory too (its .del is new).
	if err := l.writeDelSync(s, l.delBuf, l.cfg.Sync != SyncNever); err != nil {
		if s != a {
			l.forgetDel(s)
			s.closeFiles()
			os.Remove(s.logPath)
			os.Remove(s.delPath())
		}
		return err
	}
	if l.cfg.Sync == SyncNever {
		l.markDirty(nil, s != a)
	}
	l.mu.Lock()
	if s != a {
		a.sealed = true
		l.segs = append(l.segs, s)
	}
	if l.msgs > 0 && len(l.watches) > 0 {
		l.noteRemovedLocked(l.last)
	}
	for _, x := range l.segs[:len(l.segs)-1] {
		x.dead = x.count()
		x.liveBytes = 0
	}
	l.msgs, l.bytes = 0, 0
	clear(l.subjects)
	l.corrupt = nil
	l.first = l.last + 1
	l.mu.Unlock()
	for _, x := range slices.Clone(l.segs[:len(l.segs)-1]) {
		l.removeSegment(x)
	}
	return nil
}
