package interest

import "sync"

// Key is one interest: a subject filter and a queue group ("" for plain subscribers).
type Key struct {
	Subject string
	Queue   string
}

// Listener is told of every change of the local interest: the new weight of key (0
// when the last subscription went). It is called with Local's lock held, so the
// calls of all changes come in order; it must not block or call Local.
type Listener interface {
	InterestChanged(key Key, weight uint32)
}

// Local counts the node's local subscriptions per key. It implements
// broker.InterestObserver.
type Local struct {
	mu        sync.Mutex
	counts    map[Key]uint32
	listeners []Listener
}

// NewLocal returns an empty count.
func NewLocal() *Local { return &Local{counts: make(map[Key]uint32)} }

// Interest implements broker.InterestObserver.
func (l *Local) Interest(subject, queue string, delta int) {
	k := Key{subject, queue}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.counts[k]
	switch {
	case delta > 0:
		n++
	case n > 0:
		n--
	default:
		return // a removal never counted: nothing to tell
	}
	if n == 0 {
		delete(l.counts, k)
	} else {
		l.counts[k] = n
	}
	for _, li := range l.listeners {
		li.InterestChanged(k, n)
	}
}

// Listen adds li: it is first given every current entry, then every change, with no
// change lost or repeated in between.
func (l *Local) Listen(li Listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, n := range l.counts {
		li.InterestChanged(k, n)
	}
	l.listeners = append(l.listeners, li)
}

// Forget removes li.
func (l *Local) Forget(li Listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.listeners {
		if x == li {
			l.listeners = append(l.listeners[:i], l.listeners[i+1:]...)
			return
		}
	}
}

// Each calls fn for every entry, under the lock (a refresh sends them all at once,
// consistent with the changes around it).
func (l *Local) Each(fn func(Key, uint32)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, n := range l.counts {
		fn(k, n)
	}
}

// Len is the number of distinct keys.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.counts)
}
