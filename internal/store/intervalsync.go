package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// IntervalSync makes a log's writes durable within its interval under
// SyncInterval without a goroutine or a ticker per log: a write marks it Dirty,
// and one timer per interval, shared by every log of the process, syncs the logs
// written since their last sync. A log nothing is written to costs nothing,
// however many a node has (a thousand idle stream replicas).
type IntervalSync struct {
	every time.Duration
	sync  func() error
	dirty atomic.Bool // scheduled, not yet synced
}

// NewIntervalSync returns the schedule of one log: sync is called at most every
// after the first write since the last call.
func NewIntervalSync(every time.Duration, sync func() error) *IntervalSync {
	return &IntervalSync{every: every, sync: sync}
}

// Dirty notes a write. It costs an atomic load when the log is already
// scheduled, which is every write but the first of an interval.
func (s *IntervalSync) Dirty() {
	if s.dirty.Load() || !s.dirty.CompareAndSwap(false, true) {
		return
	}
	syncBatchOf(s.every).add(s)
}

// syncBatch is the logs waiting for one interval's timer.
type syncBatch struct {
	every time.Duration

	mu      sync.Mutex
	pending []*IntervalSync
	armed   bool
}

var (
	batchesMu sync.Mutex
	batches   = map[time.Duration]*syncBatch{}
)

func syncBatchOf(every time.Duration) *syncBatch {
	batchesMu.Lock()
	defer batchesMu.Unlock()
	b := batches[every]
	if b == nil {
		b = &syncBatch{every: every}
		batches[every] = b
	}
	return b
}

func (b *syncBatch) add(s *IntervalSync) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, s)
	if !b.armed {
		b.armed = true
		time.AfterFunc(b.every, b.flush)
	}
}

// syncWorkers bounds the fsyncs one flush runs at once: enough to overlap the
// devices' latency, few enough not to flood them.
const syncWorkers = 8

// flush syncs every log pending, each cleared before its sync so that a write
// during it schedules the log again; a log whose sync fails is scheduled again.
func (b *syncBatch) flush() {
	b.mu.Lock()
	logs := b.pending
	b.pending, b.armed = nil, false
	b.mu.Unlock()
	sem := make(chan struct{}, syncWorkers)
	var wg sync.WaitGroup
	for _, s := range logs {
		s.dirty.Store(false)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				<-sem
				wg.Done()
			}()
			if err := s.sync(); err != nil && err != ErrClosed {
				s.Dirty()
			}
		}()
	}
	wg.Wait()
}
