package subject

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Result is what a published subject matches: every plain subscriber and every queue
// group with at least one matching member. Results are shared between callers and
// cached: never modify one (nor append to its slices).
type Result[T comparable] struct {
	// Plain holds each plain subscriber whose filter matches, once per insertion.
	Plain []T
	// Groups holds one entry per queue group name with a matching member, sorted
	// by Name.
	Groups []*Group[T]
}

// Group is the members of one queue group whose filters match a subject. A group
// spans filters: members subscribed to "a.*" and to "a.b" are merged for "a.b".
type Group[T comparable] struct {
	Name string
	// Members holds each matching member once per insertion.
	Members []T
	// Cursor is for callers to spread messages over Members; the trie never reads it.
	// When the group's membership changes, later Results carry a new Group whose
	// Cursor starts at this one's value.
	Cursor atomic.Uint32
}

// cursorSeed starts the cursors of groups in newly computed results.
var cursorSeed atomic.Uint32

func newGroup[T comparable](name string, members []T, cursor uint32) *Group[T] {
	g := &Group[T]{Name: name, Members: members}
	g.Cursor.Store(cursor)
	return g
}

// node is one token position in the trie. Literal children are in next; the '*' and
// '>' children have their own fields. Items are stored at the node the filter ends at.
type node[T comparable] struct {
	next   map[string]*node[T]
	star   *node[T]
	full   *node[T]
	plain  []T
	queues []queueItems[T] // a slice, not a map: few per node, and iterated on every miss
}

// queueItems is the members of one queue group at a node, or (in a collector) the
// members a node contributes to a result.
type queueItems[T comparable] struct {
	name    string
	members []T
}

// queue returns the index of the named group in n.queues, or -1.
func (n *node[T]) queue(name string) int {
	return slices.IndexFunc(n.queues, func(q queueItems[T]) bool { return q.name == name })
}

func (n *node[T]) empty() bool {
	return len(n.next) == 0 && n.star == nil && n.full == nil && len(n.plain) == 0 && len(n.queues) == 0
}

// child returns n's child for tok, creating it if create is set, else nil if absent.
func (n *node[T]) child(tok string, create bool) *node[T] {
	var c **node[T]
	switch tok {
	case "*":
		c = &n.star
	case ">":
		c = &n.full
	default:
		if next := n.next[tok]; next != nil || !create {
			return next
		}
		if n.next == nil {
			n.next = make(map[string]*node[T])
		}
		nn := &node[T]{}
		// Clone so the trie does not pin the caller's (possibly large) backing string.
		n.next[strings.Clone(tok)] = nn
		return nn
	}
	if *c == nil && create {
		*c = &node[T]{}
	}
	return *c
}

// drop unlinks n's child for tok.
func (n *node[T]) drop(tok string) {
	switch tok {
	case "*":
		n.star = nil
	case ">":
		n.full = nil
	default:
		delete(n.next, tok)
		if len(n.next) == 0 {
			n.next = nil
		}
	}
}

// remove deletes one insertion of item in queue under the rest of the filter, pruning
// nodes left empty. It reports whether it found one.
func (n *node[T]) remove(filter, queue string, item T) bool {
	tok, rest, more := cut(filter)
	c := n.child(tok, false)
	if c == nil {
		return false
	}
	var ok bool
	if more {
		ok = c.remove(rest, queue, item)
	} else {
		ok = c.removeItem(queue, item)
	}
	if ok && c.empty() {
		n.drop(tok)
	}
	return ok
}

func (n *node[T]) removeItem(queue string, item T) bool {
	if queue == "" {
		i := slices.Index(n.plain, item)
		if i < 0 {
			return false
		}
		if n.plain = slices.Delete(n.plain, i, i+1); len(n.plain) == 0 {
			n.plain = nil
		}
		return true
	}
	qi := n.queue(queue)
	if qi < 0 {
		return false
	}
	q := &n.queues[qi]
	i := slices.Index(q.members, item)
	if i < 0 {
		return false
	}
	if q.members = slices.Delete(q.members, i, i+1); len(q.members) > 0 {
		return true
	}
	if n.queues = slices.Delete(n.queues, qi, qi+1); len(n.queues) == 0 {
		n.queues = nil
	}
	return true
}

// Sublist maps subscription filters to items, and published subjects to the items
// whose filters match them, with a bounded cache of match results. It is safe for
// concurrent use: any number of goroutines may Match while others Insert and Remove.
// A Match that starts after an Insert or Remove returns sees its effect.
type Sublist[T comparable] struct {
	mu    sync.RWMutex // guards root; see cache for how it orders cache writes
	root  *node[T]
	count atomic.Int64
	// gen counts the Inserts and Removes, so that a Memo knows when the result
	// it holds may be stale.
	gen   atomic.Uint64
	empty *Result[T] // the shared result for subjects nothing matches
	cache cache[T]
	// scratch holds *collector[T] for compute, so a miss allocates only the result.
	scratch sync.Pool
}

// NewSublist returns an empty Sublist.
func NewSublist[T comparable]() *Sublist[T] {
	return newSublist[T](cacheSize)
}

func newSublist[T comparable](cacheEntries int) *Sublist[T] {
	s := &Sublist[T]{root: &node[T]{}, empty: &Result[T]{}}
	s.cache.init(cacheEntries)
	return s
}

// Insert adds item under filter, as a member of queue group queue, or as a plain
// subscriber if queue is "". The filter must pass ValidateFilter and a non-empty
// queue ValidateQueue; otherwise Insert returns their error. Inserting the same item
// twice makes it match twice; each insertion needs its own Remove.
func (s *Sublist[T]) Insert(filter, queue string, item T) error {
	if err := validate(filter, true); err != nil {
		return err
	}
	if queue != "" {
		if err := validateQueue(queue); err != nil {
			return err
		}
		queue = strings.Clone(queue)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.root
	for tok := range Tokens(filter) {
		n = n.child(tok, true)
	}
	if queue == "" {
		n.plain = append(n.plain, item)
	} else if qi := n.queue(queue); qi >= 0 {
		n.queues[qi].members = append(n.queues[qi].members, item)
	} else {
		n.queues = append(n.queues, queueItems[T]{queue, []T{item}})
	}
	s.count.Add(1)
	s.cache.update(filter, func(_ string, r *Result[T]) *Result[T] {
		return added(r, queue, item)
	})
	s.gen.Add(1)
	return nil
}

// Remove deletes one insertion of item under filter and queue. It returns an error
// wrapping ErrNotFound if there is none, or the ValidateFilter error for an invalid
// filter.
func (s *Sublist[T]) Remove(filter, queue string, item T) error {
	if err := validate(filter, true); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.root.remove(filter, queue, item) {
		if queue == "" {
			return fmt.Errorf("remove %q: %w", filter, ErrNotFound)
		}
		return fmt.Errorf("remove %q queue %q: %w", filter, queue, ErrNotFound)
	}
	s.count.Add(-1)
	s.cache.update(filter, func(subject string, r *Result[T]) *Result[T] {
		if nr := s.removed(r, queue, item); nr != nil {
			return nr
		}
		return s.compute(subject) // not expected: the cached result lacked the item
	})
	s.gen.Add(1)
	return nil
}

// Match returns what subject matches. The subject should have passed
// ValidatePublish; for other input Match returns some result without panicking. The
// result is shared and immutable. On a cache hit Match takes one shard read lock and
// allocates nothing.
func (s *Sublist[T]) Match(subject []byte) *Result[T] {
	h := s.cache.hash(subject)
	sh := s.cache.shardOfHash(h)
	if r := sh.get(subject); r != nil {
		return r
	}
	return s.matchSlow(sh, h, subject)
}

// Memo holds the last subject one publisher matched and its result. The zero
// Memo is empty; a Memo belongs to one goroutine.
type Memo[T comparable] struct {
	list    *Sublist[T]
	gen     uint64
	subject []byte
	r       *Result[T]
}

// MatchMemo is Match for a publisher that sends runs of one subject (the records
// of a Kafka batch, a client's burst): while the subject is the one m holds and
// nothing was inserted or removed since, it answers m's result without hashing
// the subject or touching the cache's shared locks. Like Match, it sees the effect
// of every Insert and Remove that returned before it started.
func (s *Sublist[T]) MatchMemo(m *Memo[T], subject []byte) *Result[T] {
	gen := s.gen.Load() // before Match: a change during it leaves m stale, so refreshed next time
	if m.list == s && m.gen == gen && m.r != nil && string(m.subject) == string(subject) {
		return m.r
	}
	r := s.Match(subject)
	if len(subject) <= MaxLen {
		m.list, m.gen, m.r = s, gen, r
		m.subject = append(m.subject[:0], subject...)
	}
	return r
}

// matchSlow computes a result from the trie and caches it if it has queue
// groups (whose cursors spread the subject's messages over their members from
// one message to the next) or the subject missed recently before
// (shard.admit). Holding the read lock keeps writers out until the result is
// stored, so it cannot be stale. Subjects longer than any valid one are
// answered but not cached.
func (s *Sublist[T]) matchSlow(sh *shard[T], h uint64, subject []byte) *Result[T] {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r := sh.get(subject); r != nil {
		return r
	}
	// compute keeps nothing of the subject it is given.
	r := s.compute(unsafe.String(unsafe.SliceData(subject), len(subject)))
	if len(subject) > MaxLen || len(r.Groups) == 0 && !sh.admit(h) {
		return r
	}
	return sh.put(string(subject), r, s.cache.perShard)
}

// Count reports the number of insertions not yet removed.
func (s *Sublist[T]) Count() int { return int(s.count.Load()) }

// CacheLen reports the number of cached match results.
func (s *Sublist[T]) CacheLen() int { return s.cache.len() }

// collector gathers what a subject matches during a trie walk.
type collector[T comparable] struct {
	plain  []T
	queues []queueItems[T]
}

// maxScratch bounds the capacity of a collector kept for reuse.
const maxScratch = 1024

// reset empties c, dropping its references to items, and reports whether it is
// small enough to keep.
func (c *collector[T]) reset() bool {
	clear(c.plain)
	clear(c.queues)
	c.plain, c.queues = c.plain[:0], c.queues[:0]
	return cap(c.plain) <= maxScratch && cap(c.queues) <= maxScratch
}

func (c *collector[T]) add(n *node[T]) {
	c.plain = append(c.plain, n.plain...)
	c.queues = append(c.queues, n.queues...)
}

// walk collects the items of every filter below n that matches subject, the part of
// the published subject still to match (at least one token).
func (c *collector[T]) walk(n *node[T], subject string) {
	tok, rest, more := cut(subject)
	if n.full != nil {
		c.add(n.full)
	}
	if next := n.next[tok]; next != nil {
		if more {
			c.walk(next, rest)
		} else {
			c.add(next)
		}
	}
	if n.star != nil {
		if more {
			c.walk(n.star, rest)
		} else {
			c.add(n.star)
		}
	}
}

// compute builds a fresh result for subject from the trie. Called with mu held. The
// result copies every slice it takes from the trie.
func (s *Sublist[T]) compute(subject string) *Result[T] {
	c, _ := s.scratch.Get().(*collector[T])
	if c == nil {
		c = &collector[T]{}
	}
	defer func() {
		if c.reset() {
			s.scratch.Put(c)
		}
	}()
	c.walk(s.root, subject)
	if len(c.plain) == 0 && len(c.queues) == 0 {
		return s.empty
	}
	r := &Result[T]{}
	if len(c.plain) > 0 {
		r.Plain = make([]T, len(c.plain))
		copy(r.Plain, c.plain)
	}
	if len(c.queues) == 0 {
		return r
	}
	slices.SortStableFunc(c.queues, func(a, b queueItems[T]) int { return strings.Compare(a.name, b.name) })
	names, total := 0, 0
	for i, q := range c.queues {
		if i == 0 || q.name != c.queues[i-1].name {
			names++
		}
		total += len(q.members)
	}
	groups := make([]Group[T], names)
	r.Groups = make([]*Group[T], names)
	members := make([]T, 0, total) // one backing array, split between the groups
	g := -1
	for i, q := range c.queues {
		if i == 0 || q.name != c.queues[i-1].name {
			g++
			groups[g].Name = q.name
			// Each subject's result starts its groups somewhere else: messages on
			// many distinct subjects (a group on "jobs.*", one subject per job)
			// are spread over the members instead of all starting at the same one.
			groups[g].Cursor.Store(cursorSeed.Add(1))
			r.Groups[g] = &groups[g]
		}
		start := len(members) - len(groups[g].Members)
		members = append(members, q.members...)
		groups[g].Members = members[start:len(members):len(members)]
	}
	return r
}

// added returns a copy of r with item added as a plain subscriber or to queue.
func added[T comparable](r *Result[T], queue string, item T) *Result[T] {
	if queue == "" {
		return &Result[T]{Plain: appended(r.Plain, item), Groups: r.Groups}
	}
	i, found := findGroup(r.Groups, queue)
	groups := make([]*Group[T], 0, len(r.Groups)+1)
	groups = append(groups, r.Groups[:i]...)
	if found {
		old := r.Groups[i]
		groups = append(groups, newGroup(old.Name, appended(old.Members, item), old.Cursor.Load()))
		i++
	} else {
		groups = append(groups, newGroup(queue, []T{item}, 0))
	}
	groups = append(groups, r.Groups[i:]...)
	return &Result[T]{Plain: r.Plain, Groups: slices.Clip(groups)}
}

// removed returns a copy of r without one insertion of item as a plain subscriber or
// in queue, or nil if r has no such insertion.
func (s *Sublist[T]) removed(r *Result[T], queue string, item T) *Result[T] {
	plain, groups := r.Plain, r.Groups
	if queue == "" {
		i := slices.Index(plain, item)
		if i < 0 {
			return nil
		}
		plain = slices.Concat(plain[:i], plain[i+1:])
	} else {
		gi, found := findGroup(groups, queue)
		if !found {
			return nil
		}
		old := groups[gi]
		mi := slices.Index(old.Members, item)
		if mi < 0 {
			return nil
		}
		if len(old.Members) == 1 {
			groups = slices.Concat(groups[:gi], groups[gi+1:])
		} else {
			members := slices.Concat(old.Members[:mi], old.Members[mi+1:])
			groups = slices.Concat(groups[:gi], []*Group[T]{newGroup(old.Name, members, old.Cursor.Load())}, groups[gi+1:])
		}
	}
	if len(plain) == 0 && len(groups) == 0 {
		return s.empty
	}
	return &Result[T]{Plain: slices.Clip(plain), Groups: slices.Clip(groups)}
}

// appended returns a new slice holding items then item.
func appended[T any](items []T, item T) []T {
	out := make([]T, len(items)+1)
	copy(out, items)
	out[len(items)] = item
	return out
}

// findGroup finds queue in groups, which are sorted by name.
func findGroup[T comparable](groups []*Group[T], queue string) (int, bool) {
	return slices.BinarySearchFunc(groups, queue, func(g *Group[T], name string) int {
		return strings.Compare(g.Name, name)
	})
}
