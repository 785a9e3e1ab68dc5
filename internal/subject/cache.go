package subject

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const (
	// cacheSize bounds the number of match results one Sublist caches.
	cacheSize = 4096
	// cacheShards is the number of independently locked parts of the cache, so that
	// publishers on different subjects do not contend on one lock word.
	cacheShards = 16
)

// cache maps published subjects to their match results. It is split into shards by a
// hash of the subject; each shard holds at most perShard entries.
//
// Locking: a shard's map is read under its RLock (or, by a Sublist writer holding the
// Sublist write lock, without it: see update) and written only under its Lock while
// holding the Sublist lock, read-locked to fill a miss or write-locked to update
// entries after an insert or remove. So a result computed from the trie can only be
// stored while the trie cannot change, and a writer sees every stored entry.
type cache[T comparable] struct {
	seed     maphash.Seed
	perShard int // most entries a shard holds
	shards   [cacheShards]shard[T]
}

type shard[T comparable] struct {
	mu sync.RWMutex
	m  map[string]*Result[T]
	_  [128 - 24 - 8]byte // keep shards' lock words on separate cache lines
	// door holds hashes of subjects that missed once and were not cached: a
	// subject without queue groups is cached on its second miss while its hash
	// is still here. Most subjects seen once are seen only once (a client's
	// reply subject per request or publish), and caching each would cost a key,
	// an eviction and a longer scan of every wildcard insert, for no hit.
	door [doorSlots]atomic.Uint64
}

// doorSlots is the number of recent one-time subjects a shard remembers.
const doorSlots = 64

func (c *cache[T]) init(size int) {
	c.seed = maphash.MakeSeed()
	c.perShard = max(1, size/cacheShards)
	for i := range c.shards {
		c.shards[i].m = make(map[string]*Result[T])
	}
}

// hash is the hash that places subject in a shard and in its door.
func (c *cache[T]) hash(subject []byte) uint64 { return maphash.Bytes(c.seed, subject) }

func (c *cache[T]) shardOfHash(h uint64) *shard[T] { return &c.shards[h%cacheShards] }

func (c *cache[T]) shardOfString(subject string) *shard[T] {
	return c.shardOfHash(maphash.String(c.seed, subject))
}

// get returns the cached result for subject or nil. It allocates nothing.
func (sh *shard[T]) get(subject []byte) *Result[T] {
	sh.mu.RLock()
	r := sh.m[string(subject)]
	sh.mu.RUnlock()
	return r
}

// admit reports whether the subject of hash h, which just missed, is to be
// cached: it missed recently before. Otherwise it remembers h, in the place of
// whichever subject had its slot.
func (sh *shard[T]) admit(h uint64) bool {
	slot := &sh.door[(h/cacheShards)%doorSlots]
	if slot.Load() == h {
		slot.Store(0)
		return true
	}
	slot.Store(h)
	return false
}

// put stores r under key unless an entry is already there, and returns the entry
// that is. A full shard first drops a quarter of its entries, whichever the map
// yields first. Called with the Sublist lock held (read or write).
func (sh *shard[T]) put(key string, r *Result[T], limit int) *Result[T] {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[key]; old != nil {
		return old
	}
	if len(sh.m) >= limit {
		drop := max(1, limit/4)
		for k := range sh.m {
			delete(sh.m, k)
			if drop--; drop == 0 {
				break
			}
		}
	}
	sh.m[key] = r
	return r
}

func (c *cache[T]) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// update replaces the result of every cached subject that filter matches with
// fn(subject, result). Called with the Sublist write lock held: no other goroutine
// writes a shard meanwhile, so scanning needs no shard lock and readers of the old
// results are blocked only while the new ones are swapped in.
func (c *cache[T]) update(filter string, fn func(subject string, r *Result[T]) *Result[T]) {
	if IsLiteral(filter) {
		// Only the subject equal to the filter can match.
		sh := c.shardOfString(filter)
		if r := sh.m[filter]; r != nil {
			nr := fn(filter, r)
			sh.mu.Lock()
			sh.m[filter] = nr
			sh.mu.Unlock()
		}
		return
	}
	type change struct {
		subject string
		r       *Result[T]
	}
	changes := make([]change, 0, 16)
	for i := range c.shards {
		sh := &c.shards[i]
		clear(changes)
		changes = changes[:0]
		for subj, r := range sh.m {
			if Matches(filter, subj) {
				changes = append(changes, change{subj, fn(subj, r)})
			}
		}
		if len(changes) == 0 {
			continue
		}
		sh.mu.Lock()
		for _, ch := range changes {
			sh.m[ch.subject] = ch.r
		}
		sh.mu.Unlock()
	}
}
