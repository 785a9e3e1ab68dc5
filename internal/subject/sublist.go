package subject

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// cacheSize bounds the number of cached match results.
const cacheSize = 4096

// Result is what a subject matches: every plain subscriber, and each queue group with a
// matching member. Results are shared and must not be modified.
type Result[T comparable] struct {
	Plain  []T
	Groups []*Group[T]
}

// Group is a queue group's members that match a subject.
type Group[T comparable] struct {
	Name    string
	Members []T
	// Cursor is for callers to spread messages over Members; the trie never reads it.
	Cursor atomic.Uint32
}

type node[T comparable] struct {
	next   map[string]*node[T]
	star   *node[T] // '*'
	full   *node[T] // '>'
	plain  []T
	queues map[string][]T
}

func (n *node[T]) empty() bool {
	return len(n.next) == 0 && n.star == nil && n.full == nil && len(n.plain) == 0 && len(n.queues) == 0
}

// Sublist maps subscription filters to items and subjects to the items whose filters
// match them. It is safe for concurrent use.
type Sublist[T comparable] struct {
	mu    sync.RWMutex
	root  *node[T]
	count int
	cache map[string]*Result[T]
	empty *Result[T]
}

// NewSublist returns an empty Sublist.
func NewSublist[T comparable]() *Sublist[T] {
	return &Sublist[T]{root: &node[T]{}, cache: make(map[string]*Result[T]), empty: &Result[T]{}}
}

// Insert adds item under filter, in queue group queue ("" for a plain subscriber). The
// same item inserted twice is matched twice.
func (s *Sublist[T]) Insert(filter, queue string, item T) error {
	if err := ValidateFilter([]byte(filter)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.root
	for rest, more := filter, true; more; {
		var tok string
		tok, rest, more = cut(rest)
		n = n.child(tok, true)
	}
	if queue == "" {
		n.plain = append(n.plain, item)
	} else {
		if n.queues == nil {
			n.queues = make(map[string][]T)
		}
		n.queues[queue] = append(n.queues[queue], item)
	}
	s.count++
	s.refreshCache(filter)
	return nil
}

// Remove deletes one insertion of item under filter and queue; ErrNotFound if none.
func (s *Sublist[T]) Remove(filter, queue string, item T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := []*node[T]{s.root}
	toks := []string{}
	n := s.root
	for rest, more := filter, true; more; {
		var tok string
		tok, rest, more = cut(rest)
		if n = n.child(tok, false); n == nil {
			return fmt.Errorf("remove %q: %w", filter, ErrNotFound)
		}
		path = append(path, n)
		toks = append(toks, tok)
	}
	if queue == "" {
		i := slices.Index(n.plain, item)
		if i < 0 {
			return fmt.Errorf("remove %q: %w", filter, ErrNotFound)
		}
		n.plain = slices.Delete(n.plain, i, i+1)
	} else {
		members := n.queues[queue]
		i := slices.Index(members, item)
		if i < 0 {
			return fmt.Errorf("remove %q queue %q: %w", filter, queue, ErrNotFound)
		}
		if members = slices.Delete(members, i, i+1); len(members) == 0 {
			delete(n.queues, queue)
		} else {
			n.queues[queue] = members
		}
	}
	s.count--
	// Prune nodes left empty, deepest first.
	for i := len(path) - 1; i > 0 && path[i].empty(); i-- {
		parent, tok := path[i-1], toks[i-1]
		switch tok {
		case "*":
			parent.star = nil
		case ">":
			parent.full = nil
		default:
			delete(parent.next, tok)
		}
	}
	s.refreshCache(filter)
	return nil
}

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
		n.next[tok] = nn
		return nn
	}
	if *c == nil && create {
		*c = &node[T]{}
	}
	return *c
}

// refreshCache recomputes the cached results filter affects. Called with mu held.
func (s *Sublist[T]) refreshCache(filter string) {
	for subj := range s.cache {
		if Matches(filter, subj) {
			s.cache[subj] = s.compute(subj)
		}
	}
}

// Match returns the items whose filters match subject, which must be a valid publish
// subject. The result is shared: do not modify it.
func (s *Sublist[T]) Match(subject []byte) *Result[T] {
	s.mu.RLock()
	r, ok := s.cache[string(subject)]
	s.mu.RUnlock()
	if ok {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.cache[string(subject)]; ok {
		return r
	}
	key := string(subject)
	r = s.compute(key)
	if len(s.cache) >= cacheSize {
		evict := cacheSize / 4
		for k := range s.cache {
			delete(s.cache, k)
			if evict--; evict == 0 {
				break
			}
		}
	}
	s.cache[key] = r
	return r
}

// compute walks the trie for subject. Called with mu held.
func (s *Sublist[T]) compute(subject string) *Result[T] {
	var plain []T
	var groups map[string][]T
	add := func(n *node[T]) {
		plain = append(plain, n.plain...)
		for name, members := range n.queues {
			if groups == nil {
				groups = make(map[string][]T)
			}
			groups[name] = append(groups[name], members...)
		}
	}
	var walk func(n *node[T], subj string)
	walk = func(n *node[T], subj string) {
		tok, rest, more := cut(subj)
		if n.full != nil {
			add(n.full)
		}
		if c := n.next[tok]; c != nil {
			if more {
				walk(c, rest)
			} else {
				add(c)
			}
		}
		if n.star != nil {
			if more {
				walk(n.star, rest)
			} else {
				add(n.star)
			}
		}
	}
	walk(s.root, subject)
	if len(plain) == 0 && len(groups) == 0 {
		return s.empty
	}
	r := &Result[T]{Plain: plain}
	names := make([]string, 0, len(groups))
	for name := range groups {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r.Groups = append(r.Groups, &Group[T]{Name: name, Members: groups[name]})
	}
	return r
}

// Count reports the number of insertions.
func (s *Sublist[T]) Count() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.count
}

// CacheLen reports the number of cached results.
func (s *Sublist[T]) CacheLen() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.cache)
}
