package store

import (
	"errors"
	"os"
	"slices"
)

// Delete tombstones one message (work-queue and interest retention). Durable per the
// sync policy; deleting an absent seq returns ErrNotFound.
func (l *Log) Delete(seq uint64) error {
	_, err := l.deleteOne(seq, l.cfg.Sync == SyncAlways)
	return err
}

// DeleteMany tombstones several messages, skipping absent ones, and returns how many
// it deleted. Under SyncAlways it fsyncs each tombstone file it touched once at the
// end rather than once per message, which is what lets a work queue keep up with
// consumers that acknowledge every message. A crash before that fsync can bring
// messages of the batch back (they are redelivered); none is lost.
func (l *Log) DeleteMany(seqs []uint64) (int, error) {
	always := l.cfg.Sync == SyncAlways
	var touched []*segment
	n := 0
	var firstErr error
	for _, seq := range seqs {
		s, err := l.deleteOne(seq, false)
		if err != nil {
			if !errors.Is(err, ErrNotFound) && firstErr == nil {
				firstErr = err
			}
			continue
		}
		n++
		if always && !slices.Contains(touched, s) {
			touched = append(touched, s)
		}
	}
	for _, s := range touched {
		if err := l.syncDelFile(s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if len(touched) > 0 {
		if err := l.Sync(); err != nil && firstErr == nil { // a new tombstone file's directory entry
			firstErr = err
		}
	}
	return n, firstErr
}

// syncDelFile fsyncs s's tombstone file, reopening it if it was closed meanwhile (only
// a few stay open); a file removed with its segment needs nothing.
func (l *Log) syncDelFile(s *segment) error {
	f := s.delf
	if f == nil {
		var err error
		if f, err = os.Open(s.delPath()); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return l.ioErr("open tombstones", s.delPath(), err)
		}
		defer f.Close()
	}
	if err := l.fsync(f); err != nil {
		return l.ioErr("fsync tombstones", s.delPath(), err)
	}
	return nil
}

// deleteOne tombstones seq, fsyncing the tombstone when sync is set, and returns the
// segment that held it.
func (l *Log) deleteOne(seq uint64, sync bool) (*segment, error) {
	if l.shut.Load() {
		return nil, ErrClosed
	}
	if seq < l.first || seq > l.last {
		return nil, l.notFound(seq)
	}
	s := l.segFor(seq)
	if s == nil || s.dels.has(uint32(seq-s.base)) {
		return nil, l.notFound(seq)
	}
	var (
		n       uint64
		hasSubj bool
		newLast uint64
	)
	if l.corruptAt(seq) == nil {
		c := &l.rc
		if seq == l.first {
			c = &l.head
		}
		rec, size, err := l.rawAt(c, seq, randChunk)
		var corr *Corruption
		switch {
		case err == nil:
			n, hasSubj = uint64(size), true
			l.subjBuf = append(l.subjBuf[:0], rec.Subject...)
		case !errors.As(err, &corr):
			return nil, err
		}
	}
	if hasSubj {
		if si := l.subjects[string(l.subjBuf)]; si != nil && si.msgs > 1 && si.last == seq {
			var err error
			if newLast, err = l.prevOfSubject(l.subjBuf, seq); err != nil {
				return nil, err
			}
		}
	}
	l.delBuf = appendDelEntry(l.delBuf[:0], seq, seq)
	if err := l.writeDelSync(s, l.delBuf, sync); err != nil {
		return nil, err
	}
	first := l.first
	l.mu.Lock()
	l.killLocked(s, seq, n, l.subjBuf, hasSubj)
	if hasSubj && newLast != 0 {
		if si := l.subjects[string(l.subjBuf)]; si != nil {
			si.last = newLast
		}
	}
	l.mu.Unlock()
	l.afterKills(first, s)
	return s, nil
}

// killLocked marks seq (in s) dead and updates the counters. The caller holds
// mu for writing and has persisted the tombstone.
func (l *Log) killLocked(s *segment, seq, n uint64, subj []byte, hasSubj bool) {
	if len(l.watches) > 0 {
		if hasSubj {
			l.noteRemovedLocked(seq, subj)
		} else {
			l.noteRemovedLocked(seq)
		}
	}
	s.dead++
	s.liveBytes -= int64(n)
	l.msgs--
	l.bytes -= n
	if hasSubj {
		l.subjDecLocked(subj)
	}
	if seq == l.first {
		l.first++
		l.skipDeadLocked()
	} else {
		s.dels.add(uint32(seq - s.base))
	}
}

func (l *Log) subjDecLocked(subj []byte) {
	si := l.subjects[string(subj)]
	if si == nil {
		return
	}
	si.msgs--
	if si.msgs == 0 {
		delete(l.subjects, string(subj))
	}
}

// skipDeadLocked moves first past tombstoned sequences and holes.
func (l *Log) skipDeadLocked() {
	for l.first <= l.last {
		i := l.segIndex(l.first)
		s := l.segs[i]
		if l.first < s.base {
			l.first = s.base
			continue
		}
		if l.first > s.last {
			l.first = l.last + 1
			break
		}
		// Tombstones below first are implied by first itself.
		if !s.dels.remove(uint32(l.first - s.base)) {
			break
		}
		l.first++
	}
	if len(l.corrupt) > 0 {
		kept := l.corrupt[:0]
		for _, c := range l.corrupt {
			if c.last < l.first {
				l.bytes -= c.bytes
				c.seg.liveBytes -= int64(c.bytes)
				continue
			}
			kept = append(kept, c)
		}
		clear(l.corrupt[len(kept):])
		l.corrupt = kept
	}
}

// afterKills tidies up after tombstones in s: drops segments that died, keeps
// FirstTime current and compacts s's .del file when it has grown.
func (l *Log) afterKills(oldFirst uint64, s *segment) {
	if l.first != oldFirst {
		l.removeDeadFront()
		l.refreshFirstTime()
	}
	if s.removed {
		return
	}
	if s.sealed && s.live() == 0 {
		l.removeSegment(s)
		return
	}
	if s.delEntries >= compactDelEntries && s.delEntries >= 4*(s.dels.len()+1) {
		// Best effort: the uncompacted file is just as correct.
		_ = l.compactDel(s)
	}
}

// prevOfSubject finds the last live message of subj before seq, walking the
// index backwards one block at a time. 0 if there is none.
func (l *Log) prevOfSubject(subj []byte, before uint64) (uint64, error) {
	if before <= l.first {
		return 0, nil
	}
	hi := before - 1
	for i := l.segIndex(hi); i >= 0; i-- {
		s := l.segs[i]
		if hi > s.last {
			hi = s.last
		}
		if hi < s.base || hi < l.first {
			if s.base == 0 || s.base <= l.first {
				return 0, nil
			}
			hi = s.base - 1
			continue
		}
		for {
			e, ok := searchIndex(s.index, uint32(hi-s.base))
			lo := s.base
			if ok {
				lo = s.base + uint64(e.rel)
			}
			lo = max(lo, l.first)
			var found uint64
			for q := lo; q <= hi; q++ {
				if !l.isLive(q) || l.corruptAt(q) != nil {
					continue
				}
				rec, _, err := l.rawAt(&l.rc, q, randChunk)
				if err != nil {
					var corr *Corruption
					if errors.As(err, &corr) {
						continue
					}
					return 0, err
				}
				if string(rec.Subject) == string(subj) {
					found = q
				}
			}
			if found != 0 {
				return found, nil
			}
			if lo <= s.base || lo <= l.first {
				break
			}
			hi = lo - 1
		}
		if s.base <= l.first {
			return 0, nil
		}
		hi = s.base - 1
	}
	return 0, nil
}

// Purge removes every live message with Seq < upTo (upTo 0: all). If subject is non-empty
// only messages with exactly that subject are removed. Returns how many were removed.
func (l *Log) Purge(upTo uint64, subject string) (uint64, error) {
	if l.shut.Load() {
		return 0, ErrClosed
	}
	if upTo == 0 || upTo > l.last+1 {
		upTo = l.last + 1
	}
	if subject == "" {
		n, err := l.removeFront(upTo, false)
		if err == nil && l.first > l.last {
			err = l.rollEmpty()
		}
		return n, err
	}
	si := l.subjects[subject]
	if si == nil {
		return 0, nil
	}
	end := min(upTo-1, si.last)
	var removed uint64
	type kill struct{ seq, n uint64 }
	var kills []kill
	for seq := l.first; seq <= end && seq <= l.last; {
		s := l.segs[l.segIndex(seq)]
		if seq < s.base {
			seq = s.base
			continue
		}
		segEnd := min(end, s.last)
		kills = kills[:0]
		for q := seq; q <= segEnd; q++ {
			if !l.isLive(q) || l.corruptAt(q) != nil {
				continue
			}
			rec, size, err := l.rawAt(&l.rc, q, headChunk)
			if err != nil {
				var corr *Corruption
				if errors.As(err, &corr) {
					continue
				}
				return removed, err
			}
			if string(rec.Subject) == subject {
				kills = append(kills, kill{q, uint64(size)})
			}
		}
		seq = segEnd + 1
		if len(kills) == 0 {
			continue
		}
		buf := l.delBuf[:0]
		for i := 0; i < len(kills); {
			j := i
			for j+1 < len(kills) && kills[j+1].seq == kills[j].seq+1 {
				j++
			}
			buf = appendDelEntry(buf, kills[i].seq, kills[j].seq)
			i = j + 1
		}
		l.delBuf = buf
		if err := l.writeDel(s, buf); err != nil {
			return removed, err
		}
		first := l.first
		subj := []byte(subject)
		l.mu.Lock()
		for _, k := range kills {
			l.killLocked(s, k.seq, k.n, subj, true)
		}
		l.mu.Unlock()
		removed += uint64(len(kills))
		l.afterKills(first, s)
	}
	return removed, nil
}
