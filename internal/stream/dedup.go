package stream

import "time"

// dedupWindow remembers the message ids a stream stored within its duplicate window,
// so that a producer retrying a publish whose ack it lost does not store it twice.
// It belongs to the stream's writer.
type dedupWindow struct {
	window time.Duration
	ids    map[string]dedupEntry
	order  []dedupAge // insertion order, for expiry; a ring would save the copy
	head   int
}

type dedupEntry struct {
	part int
	seq  uint64
	at   int64
}

type dedupAge struct {
	id string
	at int64
}

func newDedupWindow(window time.Duration) *dedupWindow {
	return &dedupWindow{window: window, ids: make(map[string]dedupEntry)}
}

func (d *dedupWindow) setWindow(w time.Duration) { d.window = w }

// lookup reports whether id was stored within the window, and where.
func (d *dedupWindow) lookup(id string, now int64) (part int, seq uint64, dup bool) {
	d.expire(now)
	e, ok := d.ids[id]
	if !ok {
		return 0, 0, false
	}
	return e.part, e.seq, true
}

func (d *dedupWindow) add(id string, part int, seq uint64, at int64) {
	d.ids[id] = dedupEntry{part, seq, at}
	d.order = append(d.order, dedupAge{id, at})
}

func (d *dedupWindow) remove(id string) { delete(d.ids, id) }

func (d *dedupWindow) expire(now int64) {
	cutoff := now - int64(d.window)
	for d.head < len(d.order) && d.order[d.head].at < cutoff {
		a := d.order[d.head]
		if e, ok := d.ids[a.id]; ok && e.at == a.at {
			delete(d.ids, a.id)
		}
		d.order[d.head] = dedupAge{}
		d.head++
	}
	// Compact once the expired prefix dominates, so memory follows the window.
	if d.head > 1024 && d.head*2 > len(d.order) {
		n := copy(d.order, d.order[d.head:])
		clear(d.order[n:])
		d.order = d.order[:n]
		d.head = 0
	}
}

func (d *dedupWindow) len() int { return len(d.ids) }
