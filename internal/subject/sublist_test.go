package subject

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// describe renders a result canonically: sorted plain items, then each group (in
// result order, which must be by name) with its sorted members.
func describe[T comparable](r *Result[T]) string {
	var b strings.Builder
	plain := make([]string, len(r.Plain))
	for i, it := range r.Plain {
		plain[i] = fmt.Sprint(it)
	}
	slices.Sort(plain)
	fmt.Fprintf(&b, "%v", plain)
	for _, g := range r.Groups {
		members := make([]string, len(g.Members))
		for i, it := range g.Members {
			members[i] = fmt.Sprint(it)
		}
		slices.Sort(members)
		fmt.Fprintf(&b, " %s%v", g.Name, members)
	}
	return b.String()
}

// snapshot records a result's contents, to check later that they never change.
type snapshot[T comparable] struct {
	r       *Result[T]
	plain   []T
	groups  []*Group[T]
	names   []string
	members [][]T
}

func takeSnapshot[T comparable](r *Result[T]) snapshot[T] {
	s := snapshot[T]{r: r, plain: slices.Clone(r.Plain), groups: slices.Clone(r.Groups)}
	for _, g := range r.Groups {
		s.names = append(s.names, g.Name)
		s.members = append(s.members, slices.Clone(g.Members))
	}
	return s
}

func (s snapshot[T]) check(t *testing.T) {
	t.Helper()
	if !slices.Equal(s.r.Plain, s.plain) || !slices.Equal(s.r.Groups, s.groups) {
		t.Fatalf("result handed out earlier changed: plain %v -> %v, groups %v -> %v", s.plain, s.r.Plain, s.groups, s.r.Groups)
	}
	for i, g := range s.r.Groups {
		if g.Name != s.names[i] || !slices.Equal(g.Members, s.members[i]) {
			t.Fatalf("group handed out earlier changed: %s%v -> %s%v", s.names[i], s.members[i], g.Name, g.Members)
		}
	}
}

func mustInsert[T comparable](t *testing.T, s *Sublist[T], filter, queue string, item T) {
	t.Helper()
	if err := s.Insert(filter, queue, item); err != nil {
		t.Fatalf("Insert(%q, %q, %v): %v", filter, queue, item, err)
	}
}

func mustRemove[T comparable](t *testing.T, s *Sublist[T], filter, queue string, item T) {
	t.Helper()
	if err := s.Remove(filter, queue, item); err != nil {
		t.Fatalf("Remove(%q, %q, %v): %v", filter, queue, item, err)
	}
}

func expectMatch[T comparable](t *testing.T, s *Sublist[T], subject, want string) {
	t.Helper()
	if got := describe(s.Match([]byte(subject))); got != want {
		t.Errorf("Match(%q) = %s, want %s", subject, got, want)
	}
}

func TestSublistWildcards(t *testing.T) {
	s := NewSublist[string]()
	for _, f := range []string{"a", "a.b", "a.c", "a.b.c", "a.*", "*.b", "a.*.c", "*.*", "a.>", "a.b.>", ">", "*.>", "b.*"} {
		mustInsert(t, s, f, "", f)
	}
	expectMatch(t, s, "a", "[> a]")
	expectMatch(t, s, "b", "[>]")
	expectMatch(t, s, "a.b", "[*.* *.> *.b > a.* a.> a.b]")
	expectMatch(t, s, "a.c", "[*.* *.> > a.* a.> a.c]")
	expectMatch(t, s, "b.b", "[*.* *.> *.b > b.*]")
	expectMatch(t, s, "a.b.c", "[*.> > a.*.c a.> a.b.> a.b.c]")
	expectMatch(t, s, "a.x.c", "[*.> > a.*.c a.>]")
	expectMatch(t, s, "a.b.c.d", "[*.> > a.> a.b.>]")
	expectMatch(t, s, "x.y.z", "[*.> >]")
	if s.Count() != 13 {
		t.Errorf("Count() = %d, want 13", s.Count())
	}
}

func TestSublistLiteralMatchesOnlyItself(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a.b", "", 1)
	for _, subj := range []string{"a", "a.c", "a.b.c", "b.a", "ab", "a.bb"} {
		expectMatch(t, s, subj, "[]")
	}
	expectMatch(t, s, "a.b", "[1]")
}

func TestQueueGroupsMergeAcrossFilters(t *testing.T) {
	s := NewSublist[string]()
	mustInsert(t, s, "a.*", "g", "g-star")
	mustInsert(t, s, "a.b", "g", "g-lit")
	mustInsert(t, s, "a.>", "g", "g-full")
	mustInsert(t, s, ">", "h", "h-all")
	mustInsert(t, s, "a.b", "f", "f-lit")
	mustInsert(t, s, "a.b", "", "plain")
	mustInsert(t, s, "a.c", "g", "g-other")

	r := s.Match([]byte("a.b"))
	if got, want := describe(r), "[plain] f[f-lit] g[g-full g-lit g-star] h[h-all]"; got != want {
		t.Fatalf("Match(a.b) = %s, want %s", got, want)
	}
	if len(r.Groups) != 3 {
		t.Fatalf("%d groups, want one per name", len(r.Groups))
	}
	expectMatch(t, s, "a.c", "[] g[g-full g-other g-star] h[h-all]")
	expectMatch(t, s, "a.b.c", "[] g[g-full] h[h-all]")
	expectMatch(t, s, "b", "[] h[h-all]")

	// The same item in the same group under two matching filters appears twice.
	mustInsert(t, s, "a.*", "f", "f-lit")
	expectMatch(t, s, "a.b", "[plain] f[f-lit f-lit] g[g-full g-lit g-star] h[h-all]")
	// Groups are kept sorted by name when new ones appear through the cache.
	mustInsert(t, s, "a.b", "a-first", "x")
	mustInsert(t, s, "a.b", "zz-last", "y")
	mustInsert(t, s, "a.b", "gg", "z")
	r = s.Match([]byte("a.b"))
	var names []string
	for _, g := range r.Groups {
		names = append(names, g.Name)
	}
	if !slices.IsSorted(names) || len(names) != 6 {
		t.Fatalf("group names %q: want 6, sorted", names)
	}
	// A fresh computation agrees with the incrementally updated cache entry.
	if got, want := describe(r), describe(s.compute("a.b")); got != want {
		t.Fatalf("cached %s, computed %s", got, want)
	}
}

func TestDuplicateInsertion(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a.b", "", 7)
	mustInsert(t, s, "a.b", "", 7)
	mustInsert(t, s, "a.*", "", 7)
	mustInsert(t, s, "a.b", "q", 7)
	mustInsert(t, s, "a.b", "q", 7)
	expectMatch(t, s, "a.b", "[7 7 7] q[7 7]")
	if s.Count() != 5 {
		t.Fatalf("Count() = %d, want 5", s.Count())
	}
	mustRemove(t, s, "a.b", "", 7)
	expectMatch(t, s, "a.b", "[7 7] q[7 7]")
	mustRemove(t, s, "a.b", "q", 7)
	expectMatch(t, s, "a.b", "[7 7] q[7]")
	mustRemove(t, s, "a.b", "", 7)
	mustRemove(t, s, "a.b", "q", 7)
	expectMatch(t, s, "a.b", "[7]")
	if err := s.Remove("a.b", "", 7); !errors.Is(err, ErrNotFound) {
		t.Fatalf("third Remove(a.b) = %v, want ErrNotFound", err)
	}
	mustRemove(t, s, "a.*", "", 7)
	expectMatch(t, s, "a.b", "[]")
	if s.Count() != 0 {
		t.Fatalf("Count() = %d, want 0", s.Count())
	}
}

func TestRemove(t *testing.T) {
	s := NewSublist[string]()
	mustInsert(t, s, "a.b.c", "", "x")
	mustInsert(t, s, "a.*", "g", "y")
	mustInsert(t, s, "a.>", "", "z")
	notFound := []struct{ filter, queue, item string }{
		{"a.b.c", "", "nope"},   // wrong item
		{"a.b", "", "x"},        // prefix of a filter
		{"a.b.c.d", "", "x"},    // extension of a filter
		{"a.b.*", "", "x"},      // wildcard where a literal is
		{"x.y", "", "x"},        // no such path
		{"a.*", "", "y"},        // queue member removed as plain
		{"a.*", "h", "y"},       // wrong group
		{"a.b.c", "g", "x"},     // plain removed as queue member
		{"a.>", "", "y"},        // right item, wrong filter
		{"*.>", "", "z"},        // different wildcard filter
		{">", "", "z"},          // different wildcard filter
		{"a.b.c", "", "x\x00"},  // near miss
		{"a.b.c", "", ""},       // zero value
		{"a.b.c", "g", "zzz"},   // nothing at all
		{"a.*", "g", "y-other"}, // wrong member
	}
	for _, c := range notFound {
		err := s.Remove(c.filter, c.queue, c.item)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Remove(%q, %q, %q) = %v, want ErrNotFound", c.filter, c.queue, c.item, err)
		}
	}
	for _, bad := range []string{"", "a..b", "a.>.b", "a b"} {
		if err := s.Remove(bad, "", "x"); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Remove(%q) = %v, want a validation error", bad, err)
		}
	}
	if s.Count() != 3 {
		t.Fatalf("failed removes changed Count() to %d", s.Count())
	}
	expectMatch(t, s, "a.b.c", "[x z]")
	mustRemove(t, s, "a.b.c", "", "x")
	expectMatch(t, s, "a.b.c", "[z]")
	expectMatch(t, s, "a.b", "[z] g[y]")
	mustRemove(t, s, "a.*", "g", "y")
	expectMatch(t, s, "a.b", "[z]")
	mustRemove(t, s, "a.>", "", "z")
	expectMatch(t, s, "a.b", "[]")
	expectMatch(t, s, "a.b.c", "[]")
	if !s.root.empty() || s.root.next != nil {
		t.Fatalf("trie not pruned after removing everything: %+v", s.root)
	}
}

func TestInsertRejectsInvalid(t *testing.T) {
	s := NewSublist[int]()
	cases := []struct {
		filter, queue string
		want          error
	}{
		{"", "", ErrEmpty},
		{"a..b", "", ErrEmptyToken},
		{"a.>.b", "", ErrBadWildcard},
		{"a*", "", ErrBadWildcard},
		{"a b", "", ErrInvalidChar},
		{strings.Repeat("a", MaxLen+1), "", ErrTooLong},
		{repeatTokens("a", MaxTokens+1), "", ErrTooManyTokens},
		{"a", "q.1", ErrBadQueue},
		{"a", "q 1", ErrBadQueue},
		{"a", strings.Repeat("q", MaxQueueLen+1), ErrBadQueue},
	}
	for _, c := range cases {
		if err := s.Insert(c.filter, c.queue, 1); !errors.Is(err, c.want) {
			t.Errorf("Insert(%.20q, %.20q) = %v, want %v", c.filter, c.queue, err, c.want)
		}
	}
	if s.Count() != 0 || !s.root.empty() {
		t.Fatalf("rejected inserts changed the trie: count %d", s.Count())
	}
}

func TestCacheSeesInsertAndRemove(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a.*", "", 1)
	for range 2 { // a subject is cached on its second miss
		expectMatch(t, s, "a.b", "[1]")
		expectMatch(t, s, "a.c", "[1]")
		expectMatch(t, s, "x.y", "[]")
	}
	if s.CacheLen() != 3 {
		t.Fatalf("CacheLen() = %d, want 3", s.CacheLen())
	}
	unaffected := s.Match([]byte("x.y"))

	steps := []struct {
		insert        bool
		filter, queue string
		item          int
		ab, ac        string
	}{
		{true, "a.b", "", 2, "[1 2]", "[1]"},     // literal filter
		{true, "a.>", "", 3, "[1 2 3]", "[1 3]"}, // wildcard filter
		{true, "*.b", "q", 4, "[1 2 3] q[4]", "[1 3]"},
		{true, "a.b", "q", 5, "[1 2 3] q[4 5]", "[1 3]"},
		{true, "a.c", "r", 6, "[1 2 3] q[4 5]", "[1 3] r[6]"},
		{false, "a.b", "", 2, "[1 3] q[4 5]", "[1 3] r[6]"},
		{false, "a.*", "", 1, "[3] q[4 5]", "[3] r[6]"},
		{false, "*.b", "q", 4, "[3] q[5]", "[3] r[6]"},
		{false, "a.b", "q", 5, "[3]", "[3] r[6]"},
		{false, "a.c", "r", 6, "[3]", "[3]"},
		{false, "a.>", "", 3, "[]", "[]"},
	}
	for _, st := range steps {
		if st.insert {
			mustInsert(t, s, st.filter, st.queue, st.item)
		} else {
			mustRemove(t, s, st.filter, st.queue, st.item)
		}
		expectMatch(t, s, "a.b", st.ab)
		expectMatch(t, s, "a.c", st.ac)
		// Cached entries are updated in place, not dropped.
		if s.CacheLen() != 3 {
			t.Fatalf("after %+v: CacheLen() = %d, want 3", st, s.CacheLen())
		}
	}
	if s.Match([]byte("x.y")) != unaffected {
		t.Fatal("a cached result no change matched was replaced")
	}
	if s.Match([]byte("a.b")) != s.empty {
		t.Fatal("removing every match did not give the shared empty result")
	}
}

func TestCachedResultsAreImmutable(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a.*", "", 1)
	mustInsert(t, s, "a.b", "g", 2)
	mustInsert(t, s, "a.>", "g", 3)
	mustInsert(t, s, "a.>", "h", 4)
	subjects := []string{"a.b", "a.c", "a.b.c", "b"}
	var snaps []snapshot[int]
	for _, subj := range subjects {
		snaps = append(snaps, takeSnapshot(s.Match([]byte(subj))))
	}
	// Change every kind of membership the results above hold.
	mustInsert(t, s, "a.b", "", 10)
	mustInsert(t, s, "a.*", "g", 11)
	mustInsert(t, s, ">", "h", 12)
	mustInsert(t, s, "a.b", "i", 13)
	mustInsert(t, s, ">", "", 14)
	mustRemove(t, s, "a.*", "", 1)
	mustRemove(t, s, "a.b", "g", 2)
	mustRemove(t, s, "a.>", "h", 4)
	for _, sn := range snaps {
		sn.check(t)
	}
	expectMatch(t, s, "a.b", "[10 14] g[11 3] h[12] i[13]")
	// Results are full-capacity slices: appending to one cannot write into another.
	r := s.Match([]byte("a.b"))
	if cap(r.Plain) != len(r.Plain) || cap(r.Groups) != len(r.Groups) {
		t.Fatalf("result slices have spare capacity: plain %d/%d groups %d/%d", len(r.Plain), cap(r.Plain), len(r.Groups), cap(r.Groups))
	}
	for _, g := range r.Groups {
		if cap(g.Members) != len(g.Members) {
			t.Fatalf("group %s members %d/%d", g.Name, len(g.Members), cap(g.Members))
		}
	}
	fresh := s.compute("a.b")
	for _, g := range fresh.Groups {
		if cap(g.Members) != len(g.Members) {
			t.Fatalf("computed group %s members %d/%d", g.Name, len(g.Members), cap(g.Members))
		}
	}
}

func TestEmptyResultIsShared(t *testing.T) {
	s := NewSublist[int]()
	r1 := s.Match([]byte("a"))
	r2 := s.Match([]byte("b.c"))
	if r1 != r2 || r1.Plain != nil || r1.Groups != nil {
		t.Fatalf("empty results %p %p %+v", r1, r2, r1)
	}
	mustInsert(t, s, "x", "", 1)
	if r := s.Match([]byte("y")); r != r1 {
		t.Fatal("non-matching subject got a new empty result")
	}
}

func TestGroupCursorCarriesOver(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a", "g", 1)
	s.Match([]byte("a"))
	r := s.Match([]byte("a")) // cached
	r.Groups[0].Cursor.Store(41)
	mustInsert(t, s, "a", "g", 2)
	r2 := s.Match([]byte("a"))
	if r2 == r || r2.Groups[0] == r.Groups[0] {
		t.Fatal("membership change did not produce a new result and group")
	}
	if c := r2.Groups[0].Cursor.Load(); c != 41 {
		t.Fatalf("new group cursor %d, want 41", c)
	}
	if r.Groups[0].Cursor.Load() != 41 || len(r.Groups[0].Members) != 1 {
		t.Fatal("old group changed")
	}
}

func TestCacheIsBounded(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, ">", "", 1)
	for i := range 3 * cacheSize {
		subj := fmt.Sprintf("s.%d", i)
		for range 2 {
			if r := s.Match([]byte(subj)); len(r.Plain) != 1 {
				t.Fatalf("Match(%s) = %+v", subj, r)
			}
		}
		if n := s.CacheLen(); n > cacheSize {
			t.Fatalf("cache holds %d > %d entries", n, cacheSize)
		}
	}
	if n := s.CacheLen(); n < cacheSize/2 {
		t.Fatalf("cache holds only %d entries after %d distinct subjects", n, 3*cacheSize)
	}
	mustInsert(t, s, "s.*", "", 2)
	for i := range 3 * cacheSize {
		if r := s.Match(fmt.Appendf(nil, "s.%d", i)); len(r.Plain) != 2 {
			t.Fatalf("after insert Match(s.%d) = %+v", i, r)
		}
	}
}

// A subject matched once is answered and not cached (most are reply subjects
// never seen again); matched again soon after, it is cached.
func TestSubjectSeenOnceIsNotCached(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "_INBOX.abc.*", "", 1)
	mustInsert(t, s, "_INBOX.abc.7", "g", 2)
	for i := range 1000 {
		subj := fmt.Appendf(nil, "_INBOX.abc.%d", 100+i)
		if r := s.Match(subj); fmt.Sprint(r.Plain) != "[1]" || len(r.Groups) != 0 {
			t.Fatalf("Match(%s) = %+v", subj, r)
		}
	}
	if n := s.CacheLen(); n != 0 {
		t.Fatalf("%d subjects seen once were cached", n)
	}
	for range 3 {
		if r := s.Match([]byte("_INBOX.abc.7")); fmt.Sprint(r.Plain) != "[1]" || len(r.Groups) != 1 {
			t.Fatalf("Match(_INBOX.abc.7) = %+v", r)
		}
	}
	if n := s.CacheLen(); n != 1 {
		t.Fatalf("a subject matched three times: %d cached, want 1", n)
	}
	// A subject with a queue group is cached at once: its group's cursor
	// turns from the first message on.
	mustInsert(t, s, "jobs.*", "workers", 3)
	s.Match([]byte("jobs.1"))
	if n := s.CacheLen(); n != 2 {
		t.Fatalf("a subject with a queue group matched once: %d cached, want 2", n)
	}
	// The uncached answer must not keep the caller's buffer.
	subj := []byte("_INBOX.abc.zz")
	r := s.Match(subj)
	copy(subj, "xxxxxxxxxxxxx")
	if fmt.Sprint(r.Plain) != "[1]" || fmt.Sprint(s.Match([]byte("_INBOX.abc.zz")).Plain) != "[1]" {
		t.Fatal("an uncached match depends on the subject's buffer")
	}
}

func TestShardHashesAgree(t *testing.T) {
	var c cache[int]
	c.init(cacheSize)
	for _, subj := range []string{"", "a", "a.b", "sensors.k1.temp", strings.Repeat("x", 1000)} {
		if c.shardOfHash(c.hash([]byte(subj))) != c.shardOfString(subj) {
			t.Fatalf("%.20q hashes to different shards as bytes and as a string", subj)
		}
	}
	if maphash.String(c.seed, "a") == maphash.String(c.seed, "b") {
		t.Fatal("degenerate hash")
	}
}

func TestMatchHitDoesNotAllocate(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "sensors.*.temp", "", 1)
	mustInsert(t, s, "sensors.>", "g", 2)
	subj := []byte("sensors.k1.temp")
	none := []byte("other")
	s.Match(subj)
	s.Match(none)
	if n := testing.AllocsPerRun(1000, func() { s.Match(subj) }); n != 0 {
		t.Fatalf("cached Match allocates %.1f times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { s.Match(none) }); n != 0 {
		t.Fatalf("cached empty Match allocates %.1f times", n)
	}
}

func TestMatchOnInvalidSubjectDoesNotPanic(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "a.*", "", 1)
	mustInsert(t, s, ">", "g", 2)
	mustInsert(t, s, "a.b", "", 3)
	for _, subj := range []string{"", ".", "a.", ".a", "a..b", "a.*", "*", ">", "a.>", "a b", strings.Repeat("a.", 2*MaxTokens)} {
		s.Match([]byte(subj))
	}
	n := s.CacheLen()
	if r := s.Match([]byte(strings.Repeat("a", MaxLen+1))); describe(r) != "[] g[2]" {
		t.Errorf("Match(too long) = %s", describe(r))
	}
	if s.CacheLen() != n {
		t.Error("a subject longer than MaxLen was cached")
	}
	mustRemove(t, s, "a.*", "", 1)
	mustRemove(t, s, ">", "g", 2)
	mustRemove(t, s, "a.b", "", 3)
	for _, subj := range []string{"", "a.", "a.*", ">"} {
		if r := s.Match([]byte(subj)); len(r.Plain) != 0 || len(r.Groups) != 0 {
			t.Errorf("Match(%q) after removing everything = %s", subj, describe(r))
		}
	}
}

// model is a brute-force Sublist: a list of insertions matched one by one.
type model struct {
	entries []modelEntry
}

type modelEntry struct {
	filter, queue string
	item          int
}

func (m *model) remove(e modelEntry) bool {
	i := slices.Index(m.entries, e)
	if i < 0 {
		return false
	}
	m.entries = slices.Delete(m.entries, i, i+1)
	return true
}

func (m *model) match(subject string) string {
	r := &Result[int]{}
	groups := map[string]*Group[int]{}
	for _, e := range m.entries {
		if !Matches(e.filter, subject) {
			continue
		}
		if e.queue == "" {
			r.Plain = append(r.Plain, e.item)
			continue
		}
		g := groups[e.queue]
		if g == nil {
			g = &Group[int]{Name: e.queue}
			groups[e.queue] = g
			r.Groups = append(r.Groups, g)
		}
		g.Members = append(g.Members, e.item)
	}
	slices.SortFunc(r.Groups, func(a, b *Group[int]) int { return strings.Compare(a.Name, b.Name) })
	return describe(r)
}

// randomSubjects generates filters and subjects over a small alphabet so that
// matches, overlaps and duplicates are common.
type randomSubjects struct{ rng *rand.Rand }

func (g randomSubjects) filter() string {
	n := 1 + g.rng.IntN(4)
	toks := make([]string, n)
	for i := range toks {
		if g.rng.IntN(4) == 0 {
			toks[i] = "*"
		} else {
			toks[i] = string(rune('a' + g.rng.IntN(3)))
		}
	}
	if g.rng.IntN(5) == 0 {
		toks[n-1] = ">"
	}
	return strings.Join(toks, ".")
}

func (g randomSubjects) subject() string {
	n := 1 + g.rng.IntN(5)
	toks := make([]string, n)
	for i := range toks {
		toks[i] = string(rune('a' + g.rng.IntN(4))) // 'd' is in no filter
	}
	return strings.Join(toks, ".")
}

func (g randomSubjects) queue() string {
	return []string{"", "", "", "q1", "q2"}[g.rng.IntN(5)]
}

// TestSublistAgreesWithBruteForce interleaves random inserts, removes and matches and
// compares every match with the model, with the normal cache and with one so small
// that it evicts constantly.
func TestSublistAgreesWithBruteForce(t *testing.T) {
	seeds, steps := uint64(12), 2000
	if testing.Short() {
		seeds = 3
	}
	for _, cacheEntries := range []int{cacheSize, cacheShards} {
		for seed := uint64(1); seed <= seeds; seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(cacheEntries)))
			gen := randomSubjects{rng}
			s := newSublist[int](cacheEntries)
			var m model
			var snaps []snapshot[int]
			for step := range steps {
				switch op := rng.IntN(10); {
				case op < 4:
					e := modelEntry{gen.filter(), gen.queue(), rng.IntN(30)}
					mustInsert(t, s, e.filter, e.queue, e.item)
					m.entries = append(m.entries, e)
				case op < 6 && len(m.entries) > 0:
					e := m.entries[rng.IntN(len(m.entries))]
					mustRemove(t, s, e.filter, e.queue, e.item)
					m.remove(e)
				case op < 7:
					// Often absent, sometimes present: both must agree with the model.
					e := modelEntry{gen.filter(), gen.queue(), rng.IntN(30)}
					err := s.Remove(e.filter, e.queue, e.item)
					if found := m.remove(e); found != (err == nil) || (!found && !errors.Is(err, ErrNotFound)) {
						t.Fatalf("seed %d step %d: Remove(%+v) = %v, model found %v", seed, step, e, err, found)
					}
				default:
					subj := gen.subject()
					r := s.Match([]byte(subj))
					if got, want := describe(r), m.match(subj); got != want {
						t.Fatalf("cache %d seed %d step %d: Match(%q) = %s, want %s", cacheEntries, seed, step, subj, got, want)
					}
					if len(r.Plain) == 0 && len(r.Groups) == 0 && r != s.empty {
						t.Fatalf("seed %d step %d: empty result for %q is not the shared one", seed, step, subj)
					}
					if rng.IntN(50) == 0 {
						snaps = append(snaps, takeSnapshot(r))
					}
				}
				if s.Count() != len(m.entries) {
					t.Fatalf("seed %d step %d: Count() = %d, model has %d", seed, step, s.Count(), len(m.entries))
				}
				if s.CacheLen() > cacheEntries {
					t.Fatalf("seed %d step %d: CacheLen() = %d > %d", seed, step, s.CacheLen(), cacheEntries)
				}
			}
			for _, sn := range snaps {
				sn.check(t)
			}
		}
	}
}

// TestConcurrentMatchInsertRemove runs matchers against writers under the race
// detector. Stable subscriptions must be in every result; results handed out must
// never change; at the end the trie and cache must hold exactly the stable ones.
func TestConcurrentMatchInsertRemove(t *testing.T) {
	s := NewSublist[int]()
	mustInsert(t, s, "load.>", "", -1)
	mustInsert(t, s, "load.*", "stable", -2)
	subjects := make([][]byte, 64)
	for i := range subjects {
		subjects[i] = fmt.Appendf(nil, "load.%d", i)
	}
	duration := 300 * time.Millisecond
	if testing.Short() {
		duration = 50 * time.Millisecond
	}
	deadline := time.Now().Add(duration)
	var stop atomic.Bool
	var failed atomic.Value
	fail := func(msg string) {
		failed.CompareAndSwap(nil, msg)
		stop.Store(true)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var kept []snapshot[int]
			var memo Memo[int]
			for i := 0; i < 200000 && !stop.Load(); i++ {
				r := s.Match(subjects[(i+g)%len(subjects)])
				if g%2 == 1 { // runs of one subject, through a memo
					r = s.MatchMemo(&memo, subjects[(i/16+g)%len(subjects)])
				}
				stable := slices.Contains(r.Plain, -1)
				for _, grp := range r.Groups {
					sum := 0
					for _, it := range grp.Members { // read everything: the race detector checks nobody writes it
						sum += it
					}
					grp.Cursor.Add(1)
					if grp.Name == "stable" && !slices.Contains(grp.Members, -2) {
						stable = false
					}
					_ = sum
				}
				if !stable {
					fail(fmt.Sprintf("stable subscription missing: %s", describe(r)))
					return
				}
				if i%1000 == 0 {
					kept = append(kept, takeSnapshot(r))
				}
			}
			for _, sn := range kept {
				if !slices.Equal(sn.r.Plain, sn.plain) || !slices.Equal(sn.r.Groups, sn.groups) {
					fail("a result changed after it was handed out")
				}
			}
		})
	}
	for w := range 2 {
		wg.Go(func() {
			filters := []string{"load.%d", "load.*", "load.>", ">", "*.%d", "other.%d"}
			for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
				f := filters[i%len(filters)]
				if strings.Contains(f, "%d") {
					f = fmt.Sprintf(f, i%64)
				}
				queue := []string{"", "q", "stable"}[i%3]
				item := w*1_000_000 + i
				if err := s.Insert(f, queue, item); err != nil {
					fail(err.Error())
					return
				}
				if i%7 == 0 {
					_ = s.CacheLen()
				}
				if err := s.Remove(f, queue, item); err != nil {
					fail(err.Error())
					return
				}
			}
			stop.Store(true)
		})
	}
	wg.Wait()
	if msg := failed.Load(); msg != nil {
		t.Fatal(msg)
	}
	if s.Count() != 2 {
		t.Fatalf("Count() = %d after balanced inserts and removes, want 2", s.Count())
	}
	for _, subj := range subjects {
		if got := describe(s.Match(subj)); got != "[-1] stable[-2]" {
			t.Fatalf("Match(%s) = %s after the writers finished", subj, got)
		}
	}
}

func TestMatchMemo(t *testing.T) {
	s := NewSublist[int]()
	other := NewSublist[int]()
	mustInsert(t, s, "a.*", "", 1)
	mustInsert(t, other, "a.b", "", 9)
	var m Memo[int]
	memo := func(list *Sublist[int], subject, want string) {
		t.Helper()
		if got := describe(list.MatchMemo(&m, []byte(subject))); got != want {
			t.Fatalf("MatchMemo(%q) = %s, want %s", subject, got, want)
		}
	}
	memo(s, "a.b", "[1]")
	held := s.MatchMemo(&m, []byte("a.b"))
	subj := []byte("a.b")
	if n := testing.AllocsPerRun(1000, func() { s.MatchMemo(&m, subj) }); n != 0 {
		t.Fatalf("a memo hit allocates %.1f times", n)
	}
	if s.MatchMemo(&m, subj) != held {
		t.Fatal("a memo hit gave another result")
	}
	// The subject's bytes are the memo's own: the caller's buffer may change.
	subj[2] = 'c'
	memo(s, "a.b", "[1]")
	memo(s, "x.y", "[]")
	memo(s, "a.b", "[1]")
	// Every Insert and Remove that returned is seen, whatever it matched.
	mustInsert(t, s, "a.b", "q", 2)
	memo(s, "a.b", "[1] q[2]")
	mustInsert(t, s, "z", "", 3)
	if s.MatchMemo(&m, []byte("a.b")) == held {
		t.Fatal("the memo's result outlived an Insert")
	}
	mustRemove(t, s, "a.*", "", 1)
	memo(s, "a.b", "[] q[2]")
	// Another sublist's answer is not taken for this one's.
	memo(other, "a.b", "[9]")
	memo(s, "a.b", "[] q[2]")
	// Subjects too long to cache are matched each time, never held.
	long := "a." + strings.Repeat("x", MaxLen)
	memo(s, long, "[]")
	if m.r == nil || string(m.subject) != "a.b" {
		t.Fatalf("the memo took a subject longer than MaxLen: %q", m.subject)
	}
}
