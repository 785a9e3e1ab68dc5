// Package s2pace paces attempts at compressing a sequence of batches whose
// contents may not shrink. It owns only that pacing; the compressing, and what a
// batch is, belong to its callers (the stream's Raft entries, the store's blocks).
package s2pace

// Gate paces one sequence of attempts. Payloads that do not shrink (random or
// already compressed bytes) would otherwise cost an S2 pass per batch and keep
// none of them. After a batch that did not shrink the next one is tried, after
// two misses in a row every second batch, then every fourth, down to one in 32;
// a batch that shrinks restores trying every batch. The zero Gate tries every
// batch.
type Gate struct {
	misses uint8 // attempts in a row that did not shrink, at most maxMisses
	skip   uint8 // batches left to pass before the next attempt
}

const maxMisses = 6

// Try reports whether the next batch should be compressed. After a true the
// caller reports the outcome with Shrank.
func (g *Gate) Try() bool {
	if g.skip > 0 {
		g.skip--
		return false
	}
	return true
}

// Shrank records the outcome of an attempt Try allowed.
func (g *Gate) Shrank(ok bool) {
	if ok {
		g.misses = 0
		return
	}
	if g.misses < maxMisses {
		g.misses++
	}
	g.skip = 1<<(g.misses-1) - 1
}

// Misses is how many attempts in a row did not shrink.
func (g *Gate) Misses() int { return int(g.misses) }
