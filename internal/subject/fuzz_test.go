package subject

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// violations lists every rule s breaks, checked the slow, obvious way. An error from
// the one-pass validators must wrap one of them, and they must accept s exactly when
// the list is empty.
func violations(s string, filter bool) []error {
	if s == "" {
		return []error{ErrEmpty}
	}
	var v []error
	if len(s) > MaxLen {
		v = append(v, ErrTooLong)
	}
	toks := strings.Split(s, ".")
	if len(toks) > MaxTokens {
		v = append(v, ErrTooManyTokens)
	}
	for i, tok := range toks {
		if tok == "" {
			v = append(v, ErrEmptyToken)
		}
		for _, c := range []byte(tok) {
			if c < 0x21 || c == 0x7f {
				v = append(v, ErrInvalidChar)
			}
		}
		if strings.ContainsAny(tok, "*>") {
			switch {
			case !filter:
				v = append(v, ErrWildcardInPublish)
			case tok != "*" && !(tok == ">" && i == len(toks)-1):
				v = append(v, ErrBadWildcard)
			}
		}
	}
	return v
}

func checkAgainstViolations(t *testing.T, name, s string, err error, v []error) {
	t.Helper()
	if (err == nil) != (len(v) == 0) {
		t.Fatalf("%s(%q) = %v, but the rules it breaks are %v", name, s, err, v)
	}
	if err != nil && !slices.ContainsFunc(v, func(want error) bool { return errors.Is(err, want) }) {
		t.Fatalf("%s(%q) = %v, not one of the rules it breaks: %v", name, s, err, v)
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		"a", "a.b.c", "sensors.k1.temp", "a.*", "*.b", "a.>", ">", "*", "*.*.>",
		"", ".", "a.", ".a", "a..b", "a b", "a\tb", "a\r\n", "\x00", "a\x7f", "\xff",
		"a*", "*b", "a>", ">a", "a.>.b", ">.>", "**", "a.*.",
		strings.Repeat("a", MaxLen), strings.Repeat("a", MaxLen+1),
		repeatTokens("a", MaxTokens), repeatTokens("a", MaxTokens+1), repeatTokens("*", MaxTokens) + ".>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		pubErr := ValidatePublish(b)
		filtErr := ValidateFilter(b)
		checkAgainstViolations(t, "ValidatePublish", s, pubErr, violations(s, false))
		checkAgainstViolations(t, "ValidateFilter", s, filtErr, violations(s, true))
		if string(b) != s {
			t.Fatal("validation modified its input")
		}
		if got := strings.Join(slices.Collect(Tokens(s)), "."); got != s {
			t.Fatalf("joined tokens of %q give %q", s, got)
		}
		if filtErr == nil && IsLiteral(s) != (pubErr == nil) {
			t.Fatalf("valid filter %q: IsLiteral %v but ValidatePublish %v", s, IsLiteral(s), pubErr)
		}
		if pubErr == nil {
			if !Matches(s, s) || !Matches(">", s) {
				t.Fatalf("%q does not match itself or >", s)
			}
			if n := strings.Count(s, ".") + 1; !Matches(repeatTokens("*", n), s) || Matches(repeatTokens("*", n+1), s) {
				t.Fatalf("%q: '*' per token does not match exactly", s)
			}
		}
		queueErr := ValidateQueue(b)
		queueOK := len(s) >= 1 && len(s) <= MaxQueueLen && !strings.ContainsFunc(s, func(r rune) bool {
			return r < 0x21 || r == 0x7f || r == '.' || r == '*' || r == '>'
		})
		if (queueErr == nil) != queueOK || (queueErr != nil && !errors.Is(queueErr, ErrBadQueue)) {
			t.Fatalf("ValidateQueue(%q) = %v, want ok=%v", s, queueErr, queueOK)
		}
	})
}

// matchesRef is Matches written the obvious way, for any strings.
func matchesRef(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range ft {
		if tok == ">" {
			return i < len(st)
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

func TestMatchesAgreesWithSplit(t *testing.T) {
	alphabet := []string{"a", "b", "ab", "*", ">", ".", "", "*a"}
	rng := rand.New(rand.NewPCG(7, 7))
	gen := func() string {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
			if rng.IntN(2) == 0 {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	for range 200000 {
		f, s := gen(), gen()
		if got, want := Matches(f, s), matchesRef(f, s); got != want {
			t.Fatalf("Matches(%q, %q) = %v, want %v", f, s, got, want)
		}
	}
}

// FuzzMatches checks Matches against matchesRef on any strings, valid or not.
func FuzzMatches(f *testing.F) {
	f.Add("a.*", "a.b")
	f.Add("a.>", "a")
	f.Add(">", "")
	f.Add("*.*", "a..")
	f.Add("ab", "a.b")
	f.Fuzz(func(t *testing.T, filter, subject string) {
		if got, want := Matches(filter, subject), matchesRef(filter, subject); got != want {
			t.Fatalf("Matches(%q, %q) = %v, want %v", filter, subject, got, want)
		}
	})
}

// FuzzSublist inserts fuzzed filters (as plain subscribers and as queue members),
// matches a fuzzed subject before and after each change, and checks every answer
// against Matches. Invalid filters must be rejected. Match on an invalid subject
// must not panic and still agree with Matches, so that cache updates (which use
// Matches) cannot leave such an entry stale.
func FuzzSublist(f *testing.F) {
	f.Add("a.*", "a.>", "a.b", "a.b")
	f.Add(">", "*", "x", "x")
	f.Add("a.b.c", "a.*.c", "*.*.*", "a.b.c")
	f.Add("a..b", "a b", "a.>.b", "a.b")
	f.Add("*.>", ">", "a", "")
	f.Add("a.*", "a.*", "a.*", "a.*")
	f.Fuzz(func(t *testing.T, f1, f2, f3, subj string) {
		s := newSublist[int](cacheShards) // tiny cache: eviction runs too
		type ins struct {
			filter, queue string
			item          int
		}
		var live []ins
		check := func(when string) {
			r := s.Match([]byte(subj))
			var want []ins
			for _, e := range live {
				if Matches(e.filter, subj) {
					want = append(want, e)
				}
			}
			got := 0
			for _, it := range r.Plain {
				if !slices.ContainsFunc(want, func(e ins) bool { return e.queue == "" && e.item == it }) {
					t.Fatalf("%s: Match(%q) has plain %d; want %v", when, subj, it, want)
				}
				got++
			}
			for _, g := range r.Groups {
				for _, it := range g.Members {
					if !slices.ContainsFunc(want, func(e ins) bool { return e.queue == g.Name && e.item == it }) {
						t.Fatalf("%s: Match(%q) has %s member %d; want %v", when, subj, g.Name, it, want)
					}
					got++
				}
			}
			if got != len(want) {
				t.Fatalf("%s: Match(%q) = %s, want %v", when, subj, describe(r), want)
			}
		}
		insert := func(filter, queue string, item int) {
			err := s.Insert(filter, queue, item)
			if valid := ValidateFilter([]byte(filter)) == nil; valid != (err == nil) {
				t.Fatalf("Insert(%q) = %v, filter valid %v", filter, err, valid)
			}
			if err == nil {
				live = append(live, ins{filter, queue, item})
			}
			check("after insert " + filter)
		}
		check("empty")
		insert(f1, "", 1)
		insert(f2, "g", 2)
		insert(f3, "", 3)
		insert(f1, "g", 4)
		insert(subj, "", 5)
		for len(live) > 0 {
			e := live[0]
			if err := s.Remove(e.filter, e.queue, e.item); err != nil {
				t.Fatalf("Remove(%+v): %v", e, err)
			}
			live = live[1:]
			check("after remove " + e.filter)
		}
		if s.Count() != 0 {
			t.Fatalf("Count() = %d after removing everything", s.Count())
		}
		if err := s.Remove(f1, "", 1); err == nil {
			t.Fatalf("second Remove(%q) succeeded", f1)
		}
	})
}
