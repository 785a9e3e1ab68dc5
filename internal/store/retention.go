package store

import (
	"errors"
	"os"
	"slices"
)

// removeFront removes live messages from the front: all below upTo, or (limits)
// until the count and byte limits hold again. It returns how many it removed.
func (l *Log) removeFront(upTo uint64, limits bool) (uint64, error) {
	var removed uint64
	start := l.first
	for l.first <= l.last {
		if limits && !l.overLimits() || !limits && l.first >= upTo {
			break
		}
		if s := l.segs[0]; s.sealed && s.contains(l.first) && l.wholeSegmentGoes(s, upTo, limits) {
			n, err := l.dropFrontSegment(s)
			removed += n
			if err != nil {
				l.finishFront(start, limits)
				return removed, err
			}
			continue
		}
		seq := l.first
		var (
			n       uint64
			hasSubj bool
		)
		if l.corruptAt(seq) == nil {
			rec, size, err := l.rawAt(&l.head, seq, headChunk)
			var corr *Corruption
			switch {
			case err == nil:
				n, hasSubj = uint64(size), true
				l.subjBuf = append(l.subjBuf[:0], rec.Subject...)
			case !errors.As(err, &corr):
				l.finishFront(start, limits)
				return removed, err
			}
		}
		s := l.segFor(seq)
		l.mu.Lock()
		l.killLocked(s, seq, n, l.subjBuf, hasSubj)
		l.mu.Unlock()
		removed++
		if len(l.segs) > 1 && l.segs[0].last < l.first {
			l.removeDeadFront()
		}
	}
	return removed, l.finishFront(start, limits)
}

// wholeSegmentGoes reports whether removing from the front will take every
// live message of s, the first segment.
func (l *Log) wholeSegmentGoes(s *segment, upTo uint64, limits bool) bool {
	if !limits {
		return upTo > s.last
	}
	return (l.cfg.MaxMsgs > 0 && l.msgs-s.live() >= l.cfg.MaxMsgs) ||
		(l.cfg.MaxBytes > 0 && int64(l.bytes)-s.liveBytes >= l.cfg.MaxBytes)
}

// dropFrontSegment removes all of the first segment at once: one sequential
// pass to learn the subjects of its live messages, one short critical section,
// and the files go. (The pass is the price of exact per-subject counts.)
func (l *Log) dropFrontSegment(s *segment) (uint64, error) {
	if l.dec == nil {
		l.dec = make(map[*subjInfo]uint64)
	}
	clear(l.dec)
	var cnt, lost, bytes uint64
	for q := l.first; q <= s.last; q++ {
		if s.dels.has(uint32(q - s.base)) {
			continue
		}
		if l.corruptAt(q) != nil {
			lost++
			continue
		}
		rec, size, err := l.rawAt(&l.head, q, headChunk)
		if err != nil {
			var corr *Corruption
			if !errors.As(err, &corr) {
				return 0, err
			}
			lost++ // unreadable now: its subject and size are unknown
			continue
		}
		if si := l.subjects[string(rec.Subject)]; si != nil {
			l.dec[si]++
		}
		cnt++
		bytes += uint64(size)
	}
	l.mu.Lock()
	if len(l.watches) > 0 {
		if lost > 0 {
			l.noteRemovedLocked(s.last)
		} else {
			subjs := make([][]byte, 0, len(l.dec))
			for si := range l.dec {
				subjs = append(subjs, []byte(si.subj))
			}
			l.noteRemovedLocked(s.last, subjs...)
		}
	}
	for si, k := range l.dec {
		si.msgs -= k
		if si.msgs == 0 {
			delete(l.subjects, si.subj)
		}
	}
	l.msgs -= cnt + lost
	l.bytes -= bytes
	s.liveBytes -= int64(bytes)
	s.dead = s.count()
	l.first = s.last + 1
	l.skipDeadLocked()
	l.mu.Unlock()
	l.removeDeadFront()
	return cnt + lost, nil
}

// finishFront persists a moved front as one floor entry [0, first-1] in the
// segment that now holds the first message. Retention's floors are not fsynced
// under SyncAlways: Open applies the limits again, so losing one changes nothing.
func (l *Log) finishFront(start uint64, limits bool) error {
	if l.first == start {
		return nil
	}
	l.removeDeadFront()
	l.refreshFirstTime()
	s := l.segFor(l.first)
	if s == nil {
		s = l.active()
	}
	l.delBuf = appendDelEntry(l.delBuf[:0], 0, l.first-1)
	var err error
	if limits {
		err = l.writeDelSync(s, l.delBuf, false)
	} else {
		err = l.writeDel(s, l.delBuf)
	}
	if err != nil {
		return err
	}
	if s.delEntries >= compactDelEntries && s.delEntries >= 4*(s.dels.len()+1) {
		_ = l.compactDel(s)
	}
	return nil
}

// removeDeadFront unlinks sealed segments that lie wholly before first.
func (l *Log) removeDeadFront() {
	for len(l.segs) > 1 && l.segs[0].last < l.first {
		l.removeSegment(l.segs[0]) // never fails at the front
	}
}

// refreshFirstTime reads the Time of the new first message.
func (l *Log) refreshFirstTime() {
	if l.first > l.last || l.corruptAt(l.first) != nil {
		return
	}
	rec, _, err := l.rawAt(&l.head, l.first, headChunk)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.firstTime = rec.Time
	l.mu.Unlock()
}

// removeSegment drops a dead segment from the log and deletes its files: the
// .log first, so a crash never leaves records without their tombstones. A
// segment removed from the middle leaves a hole in the sequence; a tombstone
// range for the hole goes to the next segment first, so recovery knows the hole
// is deleted messages and not lost data. If that write fails the dead segment
// just stays for now.
func (l *Log) removeSegment(s *segment) error {
	i := l.segIndex(s.base)
	if i > 0 && l.segs[i-1] == s {
		i-- // an empty segment: segIndex gives the one after it
	}
	if l.segs[i] != s || i == len(l.segs)-1 {
		return nil // not a sealed segment of this log
	}
	if i > 0 {
		var e [delEntrySize]byte
		if err := l.writeDel(l.segs[i+1], appendDelEntry(e[:0], l.segs[i-1].last+1, s.last)); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.segs = slices.Delete(l.segs, i, i+1)
	s.removed = true
	if len(l.corrupt) > 0 {
		kept := l.corrupt[:0]
		for _, c := range l.corrupt {
			if c.seg == s {
				l.bytes -= c.bytes
				continue
			}
			kept = append(kept, c)
		}
		clear(l.corrupt[len(kept):])
		l.corrupt = kept
	}
	l.mu.Unlock()
	if l.head.seg == s {
		l.head.seg = nil
	}
	if l.rc.seg == s {
		l.rc.seg = nil
	}
	l.forgetDel(s)
	s.closeFiles()
	s.removeFiles()
	l.markDirty(nil, true)
	return nil
}

// rollEmpty starts a fresh, empty active segment once every message is gone, so
// the space of the old one comes back at once. The new segment's name keeps
// LastSeq across restarts, and its floor entry keeps the old ones dead even if
// their removal does not reach the disk.
func (l *Log) rollEmpty() error {
	a := l.active()
	if a.size == 0 {
		return nil
	}
	s, err := l.createSegment(l.last + 1)
	if err != nil {
		return err
	}
	l.delBuf = appendDelEntry(l.delBuf[:0], 0, l.last)
	if err := l.writeDel(s, l.delBuf); err != nil {
		l.forgetDel(s)
		s.closeFiles()
		os.Remove(s.logPath)
		os.Remove(s.delPath())
		return err
	}
	if l.cfg.Sync == SyncAlways {
		if err := l.syncDir(); err != nil {
			return err
		}
	} else {
		l.markDirty(nil, true)
	}
	l.mu.Lock()
	a.sealed = true
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	for len(l.segs) > 1 {
		l.removeSegment(l.segs[0])
	}
	return nil
}

// ExpireOld removes messages older than MaxAge relative to Config.Now(); the owner calls
// it periodically (no goroutine needed for it). Returns how many were removed.
func (l *Log) ExpireOld() (uint64, error) {
	if l.cfg.MaxAge <= 0 {
		return 0, nil
	}
	return l.ExpireBefore(l.cfg.Now().Add(-l.cfg.MaxAge).UnixNano())
}

// ExpireBefore removes the messages stored before cutoff (Unix ns), as ExpireOld does
// for MaxAge: a replica applies the cutoff its leader chose. Returns how many were
// removed.
func (l *Log) ExpireBefore(cutoff int64) (uint64, error) {
	if l.shut.Load() {
		return 0, ErrClosed
	}
	if l.first > l.last {
		return 0, nil
	}
	upTo, err := l.timeSeek(cutoff, &l.rc.win)
	if err != nil {
		return 0, err
	}
	if upTo <= l.first {
		return 0, nil
	}
	n, err := l.removeFront(upTo, false)
	if err == nil && l.first > l.last {
		err = l.rollEmpty()
	}
	return n, err
}
