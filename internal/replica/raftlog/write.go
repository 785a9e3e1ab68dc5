package raftlog

import (
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/fileutil"
	"os"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tern-mq/tern/internal/store"
)

// entryCost is what one entry costs the cache: its data and about what the
// Entry and its fields take.
func entryCost(e *pb.Entry) int { return len(e.Data) + 64 }

// writable reports why the log takes no writes, if it does not.
// dirty schedules a Sync under store.SyncInterval.
func (l *Log) dirty() {
	if l.isync != nil {
		l.isync.Dirty()
	}
}

func (l *Log) writable() error {
	if l.closed {
		return ErrClosed
	}
	return l.broken
}

// Append adds ents (consecutive indexes) to the log. Entries that overlap it
// replace its suffix from the first of them on, as in raft.MemoryStorage;
// entries at or below FirstIndex-1 are ignored. One write for the batch, fsynced
// before Append returns only under store.SyncAlways. The entries are kept in
// memory as they are (raft does not change them) until CacheBytes pushes them
// out.
func (l *Log) Append(ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	first := l.dummy + 1
	at := ents[0].GetIndex()
	if at+uint64(len(ents))-1 < first {
		return nil
	}
	if at < first {
		ents = ents[first-at:]
		at = first
	}
	if at > l.last+1 {
		return fmt.Errorf("raftlog %q: entries from %d leave a hole after the last index %d", l.cfg.Name, at, l.last)
	}
	for i, e := range ents {
		if e.GetIndex() != at+uint64(i) {
			return fmt.Errorf("raftlog %q: entry %d of a batch from %d has index %d", l.cfg.Name, i, at, e.GetIndex())
		}
	}
	if at <= l.last {
		if err := l.st.TruncateAfter(at - 1); err != nil {
			l.broken = fmt.Errorf("raftlog %q: replacing entries from %d: %w", l.cfg.Name, at, err)
			return l.broken
		}
		l.cutMem(at - 1)
	}
	ts := time.Now().UnixNano()
	for _, e := range ents {
		l.meta = appendMeta(l.meta[:0], e)
		if _, err := l.st.Append(nil, l.meta, e.Data, ts); err != nil {
			l.st.Rollback()
			return fmt.Errorf("raftlog %q: entry %d: %w", l.cfg.Name, e.GetIndex(), err)
		}
	}
	if err := l.st.Commit(); err != nil {
		return fmt.Errorf("raftlog %q: %w", l.cfg.Name, err)
	}
	l.dirty()
	for _, e := range ents {
		l.terms.add(e.GetIndex(), e.GetTerm())
	}
	l.last = at + uint64(len(ents)) - 1
	if len(l.cache) == 0 {
		l.cache, l.cacheFrom = nil, at // a fresh array: the old one may be in slices handed out
	}
	if n := len(l.cache) + len(ents); n > cap(l.cache) {
		// Twice what is live: trimming the front and appending at the back
		// then copy the live entries once per that many appended.
		c := make([]*pb.Entry, len(l.cache), max(2*n, 64))
		copy(c, l.cache)
		l.cache = c
	}
	l.cache = append(l.cache, ents...)
	for _, e := range ents {
		l.cacheBytes += entryCost(e)
	}
	l.trimCache()
	return nil
}

// cutMem forgets the entries above i.
func (l *Log) cutMem(i uint64) {
	l.last = i
	l.terms.truncateAfter(i)
	if i+1 <= l.cacheFrom {
		l.cache, l.cacheFrom, l.cacheBytes = nil, i+1, 0
		return
	}
	n := i + 1 - l.cacheFrom
	for _, e := range l.cache[n:] {
		l.cacheBytes -= entryCost(e)
	}
	// The capacity is cut too: the entries after n may still be in slices
	// handed out, so the next Append must not write over them.
	l.cache = l.cache[:n:n]
}

// trimCache drops the oldest cached entries while the cache is over its size.
func (l *Log) trimCache() {
	k := 0
	for k < len(l.cache) && l.cacheBytes > l.cfg.CacheBytes {
		l.cacheBytes -= entryCost(l.cache[k])
		k++
	}
	if k > 0 {
		l.cache = l.cache[k:] // the array is not cleared: slices handed out share it
		l.cacheFrom += uint64(k)
	}
}

// SetHardState saves st. Under store.SyncAlways it is written to a temporary
// file, fsynced and renamed over the hard state file (then the directory is
// fsynced) before SetHardState returns; otherwise it goes to the temporary
// file only, which Open takes if it finds it intact, and Sync does the rest.
func (l *Log) SetHardState(st *pb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	b := encodeHardState(st)
	if l.cfg.Sync == store.SyncAlways {
		if err := l.writeAtomic(hsFile, b); err != nil {
			return err
		}
	} else {
		if l.hsTmp == nil {
			f, err := os.OpenFile(l.path(hsTmpFile), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return l.ioErr("create", l.path(hsTmpFile), err)
			}
			l.hsTmp = f
		}
		// One write of a fixed size at offset 0: a crash leaves the old
		// record or the new one (or, after a power failure, a torn one, which
		// Open ignores in favour of the hard state file).
		if _, err := l.hsTmp.WriteAt(b, 0); err != nil {
			return l.ioErr("write", l.path(hsTmpFile), err)
		}
		l.dirty()
	}
	if st == nil {
		l.hs = nil
	} else {
		l.hs = proto.Clone(st).(*pb.HardState)
	}
	return nil
}

// writeAtomic replaces file name with b (through name+".tmp", fsynced, renamed, the
// directory fsynced): a crash leaves the old file or the new one.
func (l *Log) writeAtomic(name string, b []byte) error {
	if err := fileutil.WriteAtomic(l.path(name), b, true); err != nil {
		return l.ioErr("replace", l.path(name), err)
	}
	return nil
}

// Compact drops the entries before compactIndex, which becomes the dummy entry
// (its term is kept; FirstIndex is compactIndex+1). raft.ErrCompacted if
// compactIndex is not above the dummy. The segments wholly below it are
// deleted; the rest waits for the next compaction past them.
func (l *Log) Compact(compactIndex uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if compactIndex <= l.dummy {
		return raft.ErrCompacted
	}
	if compactIndex > l.last {
		return l.unavailable("compact to %d, the last index is %d", compactIndex, l.last)
	}
	if err := l.setMarker(true); err != nil {
		return err
	}
	if _, err := l.st.Purge(compactIndex, ""); err != nil {
		// The store's front may have moved part of the way: until Open finds
		// where, this log's first index cannot be trusted.
		l.broken = fmt.Errorf("raftlog %q: compact to %d: %w", l.cfg.Name, compactIndex, err)
		return l.broken
	}
	l.terms.compact(compactIndex)
	l.dummy = compactIndex
	if compactIndex >= l.cacheFrom {
		k := compactIndex + 1 - l.cacheFrom
		for _, e := range l.cache[:k] {
			l.cacheBytes -= entryCost(e)
		}
		l.cache = l.cache[k:]
		l.cacheFrom = compactIndex + 1
	}
	return nil
}

// setMarker creates (or removes) the marker file that says the store's first
// record is the dummy entry, and makes that durable: it must never reach the
// disk after the compaction or reset that depends on it.
func (l *Log) setMarker(on bool) error {
	if l.marker == on {
		return nil
	}
	path := l.path(markerFile)
	if on {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return l.ioErr("create", path, err)
		}
		f.Close()
	} else if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return l.ioErr("remove", path, err)
	}
	if err := l.syncDir(); err != nil {
		return err
	}
	l.marker = on
	return nil
}
