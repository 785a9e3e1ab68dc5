package interest

import "time"

// Change is what the route must do in the local broker: subscribe key with weight on
// the node's behalf, replacing any earlier subscription of key; weight 0 removes it.
type Change struct {
	Key    Key
	Weight uint32
}

// Table is the interest one other node advertised. Feed it the node's frames; apply
// the changes each call returns, in order.
type Table struct {
	lease   time.Duration
	entries map[Key]entry
	gen     uint64 // generation of the refresh in progress, 0 when none
	renewed time.Time
	changes []Change
}

type entry struct {
	weight uint32
	gen    uint64 // refresh generation that last repeated it
}

// NewTable starts a table at now; it expires lease after the last completed refresh
// (or now, before the first).
func NewTable(lease time.Duration, now time.Time) *Table {
	return &Table{lease: lease, entries: make(map[Key]entry), renewed: now}
}

// Set applies an interest frame: key now has weight (0: gone). The returned slice is
// valid until the next call.
func (t *Table) Set(key Key, weight uint32) []Change {
	t.changes = t.changes[:0]
	e, had := t.entries[key]
	switch {
	case weight == 0 && had:
		delete(t.entries, key)
		t.changes = append(t.changes, Change{key, 0})
	case weight == 0:
	default:
		if !had || e.weight != weight {
			t.changes = append(t.changes, Change{key, weight})
		}
		t.entries[key] = entry{weight: weight, gen: t.gen}
	}
	return t.changes
}

// BeginRefresh starts refresh generation gen: the entries set until EndRefresh(gen)
// are all the node has.
func (t *Table) BeginRefresh(gen uint64) {
	t.gen = gen
}

// EndRefresh completes generation gen at now: entries the refresh did not repeat are
// dropped, and the lease is renewed. An end without its begin (a refresh cut by a
// reconnect) changes nothing.
func (t *Table) EndRefresh(gen uint64, now time.Time) []Change {
	t.changes = t.changes[:0]
	if gen == 0 || gen != t.gen {
		return t.changes
	}
	for k, e := range t.entries {
		if e.gen != gen {
			delete(t.entries, k)
			t.changes = append(t.changes, Change{k, 0})
		}
	}
	t.gen = 0
	t.renewed = now
	sortChanges(t.changes)
	return t.changes
}

// Expired reports whether the lease ran out at now: the node stopped refreshing.
func (t *Table) Expired(now time.Time) bool { return now.Sub(t.renewed) > t.lease }

// Clear drops every entry (the route closed, the node died, or its lease ran out).
func (t *Table) Clear() []Change {
	t.changes = t.changes[:0]
	for k := range t.entries {
		t.changes = append(t.changes, Change{k, 0})
	}
	clear(t.entries)
	t.gen = 0
	sortChanges(t.changes)
	return t.changes
}

// Len is the number of entries.
func (t *Table) Len() int { return len(t.entries) }

// Weight returns key's weight, 0 when absent.
func (t *Table) Weight(key Key) uint32 { return t.entries[key].weight }
