package store

import (
	"os"
)

// A .del file is rewritten (merged into ranges) once it has this many entries
// and at least four times as many as the compacted form would. A variable for
// tests.
var compactDelEntries = 64 << 10

// At most this many .del files stay open; deletes mostly hit the first segments.
const maxOpenDels = 8

// writeDel appends encoded tombstone entries to s's .del file, fsynced under
// SyncAlways. On failure the file is cut back so no half entry stays.
func (l *Log) writeDel(s *segment, buf []byte) error {
	return l.writeDelSync(s, buf, l.cfg.Sync == SyncAlways)
}

func (l *Log) writeDelSync(s *segment, buf []byte, sync bool) error {
	created := false
	if s.delf == nil {
		f, err := os.OpenFile(s.delPath(), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return l.ioErr("open tombstones", s.delPath(), err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return l.ioErr("stat tombstones", s.delPath(), err)
		}
		created = st.Size() == 0
		s.delf, s.delSize = f, st.Size()/delEntrySize*delEntrySize
		s.delEntries = int(s.delSize / delEntrySize)
		l.trackDel(s)
	}
	if _, err := s.delf.WriteAt(buf, s.delSize); err != nil {
		s.delf.Truncate(s.delSize)
		return l.ioErr("write tombstones", s.delPath(), err)
	}
	if sync {
		if err := l.fsync(s.delf); err != nil {
			s.delf.Truncate(s.delSize)
			return l.ioErr("fsync tombstones", s.delPath(), err)
		}
		if created {
			if err := l.syncDir(); err != nil {
				return err
			}
		}
	} else {
		l.markDirty(s.delf, created)
	}
	s.delSize += int64(len(buf))
	s.delEntries += len(buf) / delEntrySize
	return nil
}

// trackDel keeps at most maxOpenDels tombstone files open; deletes mostly hit the
// first segment or two, and a segment's file reopens on demand.
func (l *Log) trackDel(s *segment) {
	l.openDels = append(l.openDels, s)
	for len(l.openDels) > maxOpenDels {
		old := l.openDels[0]
		l.openDels = l.openDels[1:]
		if old.delf != nil {
			if l.cfg.Sync != SyncNever {
				_ = l.fsync(old.delf) // it may be dirty; Sync cannot reach it once closed
			}
			old.delf.Close()
			old.delf = nil
		}
	}
}

func (l *Log) forgetDel(s *segment) {
	for i, x := range l.openDels {
		if x == s {
			l.openDels = append(l.openDels[:i], l.openDels[i+1:]...)
			return
		}
	}
}

// compactDel rewrites s's .del file as merged ranges: the floor (if s holds the
// first message) and its interior tombstones above it.
func (l *Log) compactDel(s *segment) error {
	buf, kept := l.delContent(s)
	tmp := s.delPath() + ".tmp"
	if err := l.writeFileSync(tmp, buf, l.cfg.Sync != SyncNever); err != nil {
		return err
	}
	if s.delf != nil {
		s.delf.Close()
		s.delf = nil
		l.forgetDel(s)
	}
	if err := os.Rename(tmp, s.delPath()); err != nil {
		os.Remove(tmp)
		return l.ioErr("rename tombstones", tmp, err)
	}
	l.markDirty(nil, true)
	s.delEntries = len(buf) / delEntrySize
	var d delSet
	for _, r := range kept {
		d.add(r)
	}
	l.mu.Lock()
	s.dels = d
	l.mu.Unlock()
	return nil
}

// delContent is what s's .del file needs to say: [0, first-1] if s holds the
// first message past its base, the hole before s left by removed segments, then
// its interior tombstones as ranges. It also returns the interior members
// (relative sequences) still above first.
func (l *Log) delContent(s *segment) ([]byte, []uint32) {
	var buf []byte
	i := l.segIndex(s.base)
	switch {
	case i == 0:
		if l.first > s.base {
			buf = appendDelEntry(buf, 0, l.first-1)
		}
	case l.segs[i-1].last+1 < s.base:
		buf = appendDelEntry(buf, l.segs[i-1].last+1, s.base-1)
	}
	rels := s.dels.sorted()
	kept := rels[:0]
	for _, r := range rels {
		if s.base+uint64(r) > l.first {
			kept = append(kept, r)
		}
	}
	for i := 0; i < len(kept); {
		j := i
		for j+1 < len(kept) && kept[j+1] == kept[j]+1 {
			j++
		}
		buf = appendDelEntry(buf, s.base+uint64(kept[i]), s.base+uint64(kept[j]))
		i = j + 1
	}
	return buf, kept
}

// writeFileSync writes a whole file, fsyncing it when asked.
func (l *Log) writeFileSync(path string, buf []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return l.ioErr("create", path, err)
	}
	_, err = f.Write(buf)
	if err == nil && sync {
		err = l.fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return l.ioErr("write", path, err)
	}
	return nil
}
