package subject

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxLen)
	many := strings.Repeat("a.", MaxTokens-1) + "a"
	cases := []struct {
		s         string
		pub, filt error
	}{
		{"a", nil, nil},
		{"sensors.k1.temp", nil, nil},
		{"a-b_c:d/e", nil, nil},
		{long, nil, nil},
		{long + "a", ErrTooLong, ErrTooLong},
		{many, nil, nil},
		{many + ".a", ErrTooManyTokens, ErrTooManyTokens},
		{"", ErrEmpty, ErrEmpty},
		{".a", ErrEmptyToken, ErrEmptyToken},
		{"a.", ErrEmptyToken, ErrEmptyToken},
		{"a..b", ErrEmptyToken, ErrEmptyToken},
		{"a b", ErrInvalidChar, ErrInvalidChar},
		{"a\tb", ErrInvalidChar, ErrInvalidChar},
		{"a\x00", ErrInvalidChar, ErrInvalidChar},
		{"a\x7f", ErrInvalidChar, ErrInvalidChar},
		{"a.*", ErrWildcardInPublish, nil},
		{"a.>", ErrWildcardInPublish, nil},
		{"*.*.>", ErrWildcardInPublish, nil},
		{">", ErrWildcardInPublish, nil},
		{"a.>.b", ErrWildcardInPublish, ErrBadWildcard},
		{"a*", ErrWildcardInPublish, ErrBadWildcard},
		{"a.b>", ErrWildcardInPublish, ErrBadWildcard},
		{"*b", ErrWildcardInPublish, ErrBadWildcard},
	}
	for _, c := range cases {
		if err := ValidatePublish([]byte(c.s)); !errors.Is(err, c.pub) || (c.pub == nil) != (err == nil) {
			t.Errorf("ValidatePublish(%.20q) = %v, want %v", c.s, err, c.pub)
		}
		if err := ValidateFilter([]byte(c.s)); !errors.Is(err, c.filt) || (c.filt == nil) != (err == nil) {
			t.Errorf("ValidateFilter(%.20q) = %v, want %v", c.s, err, c.filt)
		}
	}
	for _, q := range []string{"", "a b", "a.b", "a*", strings.Repeat("q", MaxQueueLen+1)} {
		if err := ValidateQueue([]byte(q)); !errors.Is(err, ErrBadQueue) {
			t.Errorf("ValidateQueue(%q) = %v", q, err)
		}
	}
	if err := ValidateQueue([]byte("workers-1")); err != nil {
		t.Error(err)
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	s := []byte("sensors.k1.temp")
	if n := testing.AllocsPerRun(100, func() { _ = ValidatePublish(s) }); n != 0 {
		t.Fatalf("ValidatePublish allocates %.0f", n)
	}
}

func TestMatches(t *testing.T) {
	cases := []struct {
		f, s string
		want bool
	}{
		{"a.b", "a.b", true}, {"a.b", "a.c", false}, {"a.b", "a.b.c", false}, {"a.b.c", "a.b", false},
		{"a.*", "a.b", true}, {"a.*", "a.b.c", false}, {"a.*", "a", false}, {"*.b", "a.b", true},
		{"a.>", "a.b", true}, {"a.>", "a.b.c", true}, {"a.>", "a", false}, {">", "a", true}, {">", "a.b", true},
		{"*.*.>", "a.b", false}, {"*.*.>", "a.b.c", true},
	}
	for _, c := range cases {
		if got := Matches(c.f, c.s); got != c.want {
			t.Errorf("Matches(%q, %q) = %v", c.f, c.s, got)
		}
	}
	if IsLiteral("a.*") || IsLiteral(">") || !IsLiteral("a.b") {
		t.Error("IsLiteral")
	}
}

func names(items []string) []string { s := append([]string{}, items...); sort.Strings(s); return s }

func TestSublistMatchAndQueueGroups(t *testing.T) {
	s := NewSublist[string]()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Insert("a.b", "", "exact"))
	must(s.Insert("a.*", "", "star"))
	must(s.Insert("a.>", "", "full"))
	must(s.Insert(">", "", "all"))
	must(s.Insert("b.*", "", "other"))
	must(s.Insert("a.*", "g", "m1"))
	must(s.Insert("a.b", "g", "m2"))
	must(s.Insert("a.>", "h", "h1"))
	r := s.Match([]byte("a.b"))
	if got := fmt.Sprint(names(r.Plain)); got != "[all exact full star]" {
		t.Fatalf("plain %s", got)
	}
	if len(r.Groups) != 2 || r.Groups[0].Name != "g" || fmt.Sprint(names(r.Groups[0].Members)) != "[m1 m2]" || r.Groups[1].Name != "h" {
		t.Fatalf("groups %+v", r.Groups)
	}
	if r := s.Match([]byte("c")); fmt.Sprint(r.Plain) != "[all]" || len(r.Groups) != 0 {
		t.Fatalf("c matched %+v", r)
	}
	if err := s.Remove("a.b", "", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.Remove("x.y", "", "exact"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.Insert("a..b", "", "bad"); err == nil {
		t.Fatal("bad filter inserted")
	}
	if s.Count() != 8 {
		t.Fatalf("count %d", s.Count())
	}
}

func TestCacheStaysCorrectAndResultsImmutable(t *testing.T) {
	s := NewSublist[int]()
	_ = s.Insert("a.*", "", 1)
	before := s.Match([]byte("a.b"))
	if len(before.Plain) != 1 || s.CacheLen() != 1 {
		t.Fatalf("first match %+v cache %d", before, s.CacheLen())
	}
	_ = s.Insert("a.b", "", 2)
	after := s.Match([]byte("a.b"))
	if len(after.Plain) != 2 {
		t.Fatalf("insert not seen through cache: %+v", after.Plain)
	}
	if len(before.Plain) != 1 {
		t.Fatalf("cached result handed out earlier was modified: %+v", before.Plain)
	}
	_ = s.Remove("a.*", "", 1)
	if got := s.Match([]byte("a.b")).Plain; fmt.Sprint(got) != "[2]" {
		t.Fatalf("remove not seen through cache: %v", got)
	}
	_ = s.Remove("a.b", "", 2)
	if got := s.Match([]byte("a.b")); len(got.Plain) != 0 {
		t.Fatalf("after removing all: %v", got.Plain)
	}
	if s.root.empty() != true {
		t.Fatal("empty nodes not pruned")
	}
}

func TestCacheIsBounded(t *testing.T) {
	s := NewSublist[int]()
	_ = s.Insert(">", "", 1)
	for i := 0; i < 3*cacheSize; i++ {
		s.Match([]byte(fmt.Sprintf("s.%d", i)))
	}
	if s.CacheLen() > cacheSize {
		t.Fatalf("cache holds %d > %d", s.CacheLen(), cacheSize)
	}
}

// TestSublistAgreesWithMatches compares the trie with brute force under random
// inserts, removes and matches.
func TestSublistAgreesWithMatches(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		tok := func(wild bool) string {
			if wild {
				switch rng.Intn(6) {
				case 0:
					return "*"
				}
			}
			return string(rune('a' + rng.Intn(3)))
		}
		gen := func(wild bool) string {
			n := 1 + rng.Intn(4)
			parts := make([]string, n)
			for i := range parts {
				parts[i] = tok(wild)
			}
			if wild && rng.Intn(5) == 0 {
				parts[n-1] = ">"
			}
			return strings.Join(parts, ".")
		}
		type entry struct {
			filter string
			item   int
		}
		s := NewSublist[int]()
		var live []entry
		for step := 0; step < 2000; step++ {
			switch op := rng.Intn(10); {
			case op < 4:
				e := entry{gen(true), step}
				if err := s.Insert(e.filter, "", e.item); err != nil {
					t.Fatal(err)
				}
				live = append(live, e)
			case op < 6 && len(live) > 0:
				i := rng.Intn(len(live))
				if err := s.Remove(live[i].filter, "", live[i].item); err != nil {
					t.Fatalf("seed %d: remove %v: %v", seed, live[i], err)
				}
				live = append(live[:i], live[i+1:]...)
			default:
				subj := gen(false)
				var want []int
				for _, e := range live {
					if Matches(e.filter, subj) {
						want = append(want, e.item)
					}
				}
				got := append([]int{}, s.Match([]byte(subj)).Plain...)
				sort.Ints(got)
				sort.Ints(want)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("seed %d step %d: Match(%q) = %v, want %v", seed, step, subj, got, want)
				}
			}
		}
	}
}

func TestConcurrentMatchInsertRemove(t *testing.T) {
	s := NewSublist[int]()
	_ = s.Insert("load.>", "", -1)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				r := s.Match([]byte(fmt.Sprintf("load.%d", i%50)))
				found := false
				for _, it := range r.Plain {
					found = found || it == -1
				}
				if !found {
					t.Error("stable subscription missing from a match")
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			f := fmt.Sprintf("load.%d", i%50)
			_ = s.Insert(f, "q", i)
			_ = s.Remove(f, "q", i)
		}
	}()
	wg.Wait()
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"a", "a.b.c", "a.*", "a.>", ">", "a..b", "a b", "", "*.*.>", "a.>.b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pubErr := ValidatePublish([]byte(s))
		filtErr := ValidateFilter([]byte(s))
		if pubErr == nil {
			if filtErr != nil {
				t.Fatalf("%q valid to publish but not as a filter: %v", s, filtErr)
			}
			if !Matches(s, s) || !Matches(">", s) {
				t.Fatalf("%q does not match itself or >", s)
			}
		}
	})
}

func FuzzSublist(f *testing.F) {
	f.Add("a.*", "a.b", "a.>")
	f.Add(">", "x", "*")
	f.Add("a.b.c", "a.b.c", "a.*.c")
	f.Fuzz(func(t *testing.T, f1, subj, f2 string) {
		s := NewSublist[int]()
		_ = s.Insert(f1, "", 1)
		_ = s.Insert(f2, "g", 2)
		if ValidatePublish([]byte(subj)) != nil {
			return
		}
		r := s.Match([]byte(subj))
		want1 := ValidateFilter([]byte(f1)) == nil && Matches(f1, subj)
		if got1 := len(r.Plain) == 1; got1 != want1 {
			t.Fatalf("plain %q on %q: got %v want %v", f1, subj, got1, want1)
		}
		want2 := ValidateFilter([]byte(f2)) == nil && Matches(f2, subj)
		if got2 := len(r.Groups) == 1; got2 != want2 {
			t.Fatalf("group %q on %q: got %v want %v", f2, subj, got2, want2)
		}
	})
}

func BenchmarkMatchCached(b *testing.B) {
	s := NewSublist[int]()
	_ = s.Insert("sensors.*.temp", "", 1)
	_ = s.Insert("sensors.>", "g", 2)
	subj := []byte("sensors.k1.temp")
	s.Match(subj)
	b.ReportAllocs()
	for b.Loop() {
		s.Match(subj)
	}
}

func BenchmarkValidatePublish(b *testing.B) {
	subj := []byte("sensors.k1.temp.celsius")
	b.ReportAllocs()
	for b.Loop() {
		_ = ValidatePublish(subj)
	}
}
