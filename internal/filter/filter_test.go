package filter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// hdrs is a Headers backed by a map, enough to exercise the language.
type hdrs map[string]string

func (h hdrs) Lookup(k string) (string, bool) { v, ok := h[k]; return v, ok }

func msg(subject string, size int, h hdrs) *Message {
	m := &Message{Subject: []byte(subject), Size: size}
	if h != nil {
		m.Headers = h
	}
	return m
}

func TestMatch(t *testing.T) {
	cases := []struct {
		expr string
		m    *Message
		want bool
	}{
		{`hdr.sender == "s1" && size <= 512`, msg("a", 100, hdrs{"sender": "s1"}), true},
		{`hdr.sender == "s1" && size <= 512`, msg("a", 513, hdrs{"sender": "s1"}), false},
		{`hdr.sender == "s1" && size <= 512`, msg("a", 10, hdrs{"sender": "s2"}), false},
		{`hdr.sender == "s1"`, msg("a", 10, nil), false},
		{`hdr.sender == ""`, msg("a", 10, nil), true},
		{`hdr["x-trace-id"] == "t1"`, msg("a", 1, hdrs{"x-trace-id": "t1"}), true},
		{`"sender" in hdr`, msg("a", 1, hdrs{"sender": ""}), true},
		{`"sender" in hdr`, msg("a", 1, hdrs{"other": "x"}), false},
		{`not ("sender" in hdr)`, msg("a", 1, nil), true},
		{`hdr.sender in ["s1", "s2"]`, msg("a", 1, hdrs{"sender": "s2"}), true},
		{`subject startsWith "orders."`, msg("orders.new", 1, nil), true},
		{`subject matches "^a\\.b"`, msg("a.b.c", 1, nil), true},
		{`subject matches "^a\\.b"`, msg("a.c", 1, nil), false},
		{`size > 0 || hdr.force == "yes"`, msg("a", 0, hdrs{"force": "yes"}), true},
		{`int(hdr.n) > 3`, msg("a", 0, hdrs{"n": "5"}), true},
		{`int(hdr.n) > 3`, msg("a", 0, hdrs{"n": "five"}), false}, // runtime error counts as no match
	}
	for _, c := range cases {
		f, err := Compile(c.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", c.expr, err)
		}
		if got := f.Match(c.m); got != c.want {
			t.Errorf("%q on %s/%d/%v = %v, want %v", c.expr, c.m.Subject, c.m.Size, c.m.Headers, got, c.want)
		}
		if f.String() != c.expr {
			t.Errorf("String() = %q", f.String())
		}
	}
}

func TestCompileErrors(t *testing.T) {
	deep := strings.Repeat("size>0&&", 100) + "true"
	for _, c := range []struct {
		expr string
		want error
	}{
		{`size >`, ErrInvalid},
		{`size + 1`, ErrInvalid},     // not boolean
		{`unknown == 1`, ErrInvalid}, // unknown variable
		{`hdr`, ErrInvalid},          // bare map is not boolean
		{`hdr.a > 3`, ErrInvalid},    // string compared with int
		{deep, ErrInvalid},           // too many nodes
		{strings.Repeat(" ", MaxLen) + "true", ErrTooLong},
	} {
		if _, err := Compile(c.expr); !errors.Is(err, c.want) {
			t.Errorf("Compile(%.40q) = %v, want %v", c.expr, err, c.want)
		}
	}
}

func TestConcurrentMatch(t *testing.T) {
	f, err := Compile(`hdr.sender == "s1" && size <= 512`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				sender := fmt.Sprintf("s%d", (g+i)%3)
				want := sender == "s1" && i <= 512
				if got := f.Match(msg("a", i, hdrs{"sender": sender})); got != want {
					t.Errorf("sender %s size %d: %v", sender, i, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{`hdr.sender == "s1" && size <= 512`, `"a" in hdr`, `subject matches "x"`, `hdr["k"] != ""`, `size >`, `[1,2]`, `hdr.a.b == 1`, `let x = 1; x == 1`} {
		f.Add(s)
	}
	samples := []*Message{msg("a.b", 0, nil), msg("x", 100, hdrs{"sender": "s1", "a": "1"})}
	f.Fuzz(func(t *testing.T, src string) {
		flt, err := Compile(src)
		if err != nil {
			return
		}
		for _, m := range samples {
			flt.Match(m)
		}
	})
}

func BenchmarkMatchSenderSize(b *testing.B) {
	f, _ := Compile(`hdr.sender == "s1" && size <= 512`)
	m := msg("a", 100, hdrs{"sender": "s1"})
	b.ReportAllocs()
	for b.Loop() {
		f.Match(m)
	}
}
