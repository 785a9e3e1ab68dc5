package stream

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/store"
)

// Reading a stream's partitions by position, for front ends that keep their own
// positions instead of a consumer's (the Kafka API: a consumer names the offset it
// wants on every fetch). Reads go to the partition logs directly, beside the writer;
// nothing here changes the stream.

// Partitions is how many partitions the stream has.
func (s *Stream) Partitions() int { return len(s.parts) }

// Created is when the stream was created.
func (s *Stream) Created() time.Time { return s.created }

func (s *Stream) partition(p int) (*store.Log, error) {
	if p < 0 || p >= len(s.parts) {
		return nil, fmt.Errorf("stream %q: no partition %d: %w", s.name, p, store.ErrNotFound)
	}
	return s.parts[p], nil
}

// PartitionState is partition p's counters: its first and last sequences, message
// count and times.
func (s *Stream) PartitionState(p int) (store.State, error) {
	l, err := s.partition(p)
	if err != nil {
		return store.State{}, err
	}
	return l.State(), nil
}

// PartitionFileBytes is what partition p's segment files hold on this node
// (store.Log.FileBytes): its messages as stored, compressed or not, with
// removed ones their segments still keep.
func (s *Stream) PartitionFileBytes(p int) (int64, error) {
	l, err := s.partition(p)
	if err != nil {
		return 0, err
	}
	return l.FileBytes(), nil
}

// PartitionReader reads partition p forward from the first live message at or
// after seq. The caller closes it.
func (s *Stream) PartitionReader(p int, seq uint64) (*store.Reader, error) {
	l, err := s.partition(p)
	if err != nil {
		return nil, err
	}
	return l.NewReader(seq), nil
}

// PartitionSeqForTime is the first live sequence of partition p stored at or after
// t (unix nanoseconds), or the last sequence + 1 when there is none.
func (s *Stream) PartitionSeqForTime(p int, t int64) (uint64, error) {
	l, err := s.partition(p)
	if err != nil {
		return 0, err
	}
	return l.SeqForTime(t), nil
}

// WatchAppends makes every commit of new messages to partition p send on c without
// blocking (a full c means a wake-up is already pending), until stop is called: a
// reader waiting for data sleeps on c, as a pull consumer sleeps on its kick
// channel, and is woken by the same notify. One channel may watch many partitions.
func (s *Stream) WatchAppends(p int, c chan<- struct{}) (stop func()) {
	return s.appendWatch.add(p, c)
}

// appendWatchers are the channels WatchAppends registered, by partition.
type appendWatchers struct {
	n      atomic.Int32 // registrations, so that a commit with none takes no lock
	mu     sync.Mutex
	byPart map[int]map[chan<- struct{}]int
}

func (w *appendWatchers) add(p int, c chan<- struct{}) func() {
	w.mu.Lock()
	if w.byPart == nil {
		w.byPart = make(map[int]map[chan<- struct{}]int)
	}
	m := w.byPart[p]
	if m == nil {
		m = make(map[chan<- struct{}]int)
		w.byPart[p] = m
	}
	m[c]++
	w.n.Add(1)
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if m[c]--; m[c] <= 0 {
				delete(m, c)
			}
			if len(m) == 0 {
				delete(w.byPart, p)
			}
			w.n.Add(-1)
			w.mu.Unlock()
		})
	}
}

// wake signals the watchers of partition p; notify calls it after each commit.
func (w *appendWatchers) wake(p int) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	for c := range w.byPart[p] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}
