package store

import (
	"math/bits"
	"slices"
	"sync/atomic"
)

// CountFrom returns how many live messages have a sequence of at least seq.
// Damaged stretches count as live, as they do in State.
func (l *Log) CountFrom(seq uint64) uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	seq = max(seq, l.first)
	if seq > l.last || len(l.segs) == 0 {
		return 0
	}
	var n uint64
	for i := l.segIndex(seq); i < len(l.segs); i++ {
		s := l.segs[i]
		lo := max(seq, s.base)
		if lo > s.last {
			continue
		}
		// Every tombstone of a segment lies at or above first, so below lo there
		// is nothing to subtract but the ones counted here.
		n += s.last - lo + 1 - uint64(s.dels.countFrom(uint32(lo-s.base)))
	}
	return n
}

// countFrom is how many members are at least rel.
func (d *delSet) countFrom(rel uint32) int {
	if d.n == 0 || rel == 0 {
		return d.n
	}
	if rel > d.maxRel {
		return 0
	}
	if d.bits == nil {
		n := 0
		for r := range d.m {
			if r >= rel {
				n++
			}
		}
		return n
	}
	w := int(rel >> 6)
	if w >= len(d.bits) {
		return 0
	}
	n := bits.OnesCount64(d.bits[w] &^ (1<<(rel&63) - 1))
	for _, x := range d.bits[w+1:] {
		n += bits.OnesCount64(x)
	}
	return n
}

// RemovalWatch learns the highest sequence the log has removed (deleted, purged,
// expired, dropped by a limit) since it last asked: what a reader keeping counts
// of a stretch of the log needs to know whether they still hold.
type RemovalWatch struct {
	l     *Log
	match func(subject []byte) bool
	high  atomic.Uint64
}

// WatchRemovals starts a RemovalWatch for the messages match accepts (nil: all);
// Stop ends it. match runs with the log locked: it must not call into the log.
// Messages whose subject cannot be read any more count as matching.
func (l *Log) WatchRemovals(match func(subject []byte) bool) *RemovalWatch {
	w := &RemovalWatch{l: l, match: match}
	l.mu.Lock()
	l.watches = append(l.watches, w)
	l.mu.Unlock()
	return w
}

// Take returns the highest sequence removed since the last Take (0: none) and
// starts over.
func (w *RemovalWatch) Take() uint64 { return w.high.Swap(0) }

// Stop ends the watch.
func (w *RemovalWatch) Stop() {
	l := w.l
	l.mu.Lock()
	for i, x := range l.watches {
		if x == w {
			l.watches = append(l.watches[:i], l.watches[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
}

// noteRemovedLocked tells the watches that care that seq is gone: those whose
// match accepts one of its subjects (nil: unknown, so all of them). The caller
// holds mu for writing.
func (l *Log) noteRemovedLocked(seq uint64, subjects ...[]byte) {
	for _, w := range l.watches {
		if w.match != nil && subjects != nil && !slices.ContainsFunc(subjects, w.match) {
			continue
		}
		for {
			old := w.high.Load()
			if old >= seq || w.high.CompareAndSwap(old, seq) {
				break
			}
		}
	}
}
