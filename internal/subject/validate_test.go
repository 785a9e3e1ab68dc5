package subject

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// repeatTokens joins n copies of tok with '.'.
func repeatTokens(tok string, n int) string {
	return strings.TrimSuffix(strings.Repeat(tok+".", n), ".")
}

func TestValidate(t *testing.T) {
	maxLen := strings.Repeat("a", MaxLen)
	cases := []struct {
		s         string
		pub, filt error // nil: valid
	}{
		// Valid everywhere.
		{"a", nil, nil},
		{"sensors.k1.temp", nil, nil},
		{"a-b_c:d/e+f#g$h", nil, nil},
		{"!.~", nil, nil},
		{"\u00fc.\u00df.\xff\x80", nil, nil}, // bytes >= 0x80 are allowed
		{maxLen, nil, nil},
		{maxLen[:MaxLen-2] + ".a", nil, nil},
		{repeatTokens("a", MaxTokens), nil, nil},

		// Wildcards: fine in filters only.
		{"*", ErrWildcardInPublish, nil},
		{">", ErrWildcardInPublish, nil},
		{"a.*", ErrWildcardInPublish, nil},
		{"*.b", ErrWildcardInPublish, nil},
		{"a.>", ErrWildcardInPublish, nil},
		{"*.*.>", ErrWildcardInPublish, nil},
		{"*.>", ErrWildcardInPublish, nil},
		{"a.*.c.>", ErrWildcardInPublish, nil},
		{maxLen[:MaxLen-2] + ".>", ErrWildcardInPublish, nil},
		{repeatTokens("*", MaxTokens), ErrWildcardInPublish, nil},

		// Wildcards that are not whole tokens, or '>' not last.
		{"a*", ErrWildcardInPublish, ErrBadWildcard},
		{"*b", ErrWildcardInPublish, ErrBadWildcard},
		{"a>", ErrWildcardInPublish, ErrBadWildcard},
		{">a", ErrWildcardInPublish, ErrBadWildcard},
		{"**", ErrWildcardInPublish, ErrBadWildcard},
		{">>", ErrWildcardInPublish, ErrBadWildcard},
		{"*>", ErrWildcardInPublish, ErrBadWildcard},
		{">*", ErrWildcardInPublish, ErrBadWildcard},
		{"a.b*.c", ErrWildcardInPublish, ErrBadWildcard},
		{"a.b>", ErrWildcardInPublish, ErrBadWildcard},
		{"a.>.b", ErrWildcardInPublish, ErrBadWildcard},
		{">.a", ErrWildcardInPublish, ErrBadWildcard},
		{">.>", ErrWildcardInPublish, ErrBadWildcard},

		// Empty subject and empty tokens.
		{"", ErrEmpty, ErrEmpty},
		{".", ErrEmptyToken, ErrEmptyToken},
		{"..", ErrEmptyToken, ErrEmptyToken},
		{".a", ErrEmptyToken, ErrEmptyToken},
		{"a.", ErrEmptyToken, ErrEmptyToken},
		{"a..b", ErrEmptyToken, ErrEmptyToken},
		{".>", ErrEmptyToken, ErrEmptyToken},
		{"a.*.", ErrWildcardInPublish, ErrEmptyToken},

		// Whitespace, control bytes and DEL.
		{" ", ErrInvalidChar, ErrInvalidChar},
		{"a b", ErrInvalidChar, ErrInvalidChar},
		{"a\tb", ErrInvalidChar, ErrInvalidChar},
		{"a\rb", ErrInvalidChar, ErrInvalidChar},
		{"a\nb", ErrInvalidChar, ErrInvalidChar},
		{"a\r\n", ErrInvalidChar, ErrInvalidChar},
		{"\x00", ErrInvalidChar, ErrInvalidChar},
		{"a.\x01", ErrInvalidChar, ErrInvalidChar},
		{"a\x1f", ErrInvalidChar, ErrInvalidChar},
		{"a\x7f", ErrInvalidChar, ErrInvalidChar},
		{"a.b c", ErrInvalidChar, ErrInvalidChar},
		{"a.* b", ErrWildcardInPublish, ErrInvalidChar},

		// Limits; the length check comes before any other.
		{maxLen + "a", ErrTooLong, ErrTooLong},
		{maxLen[:MaxLen-1] + ".>", ErrTooLong, ErrTooLong},
		{strings.Repeat("a b", MaxLen), ErrTooLong, ErrTooLong},
		{repeatTokens("a", MaxTokens+1), ErrTooManyTokens, ErrTooManyTokens},
		{repeatTokens("*", MaxTokens+1), ErrWildcardInPublish, ErrTooManyTokens},
		{repeatTokens("a", MaxTokens) + ".>", ErrTooManyTokens, ErrTooManyTokens},
	}
	sentinels := []error{ErrEmpty, ErrEmptyToken, ErrWildcardInPublish, ErrBadWildcard, ErrInvalidChar, ErrTooLong, ErrTooManyTokens}
	check := func(name string, s string, err, want error) {
		t.Helper()
		if want == nil {
			if err != nil {
				t.Errorf("%s(%.40q) = %v, want nil", name, s, err)
			}
			return
		}
		if !errors.Is(err, want) {
			t.Errorf("%s(%.40q) = %v, want %v", name, s, err, want)
			return
		}
		for _, other := range sentinels {
			if other != want && errors.Is(err, other) {
				t.Errorf("%s(%.40q) = %v, also matches %v", name, s, err, other)
			}
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "subject \"") {
			t.Errorf("%s(%.40q): message %q does not quote the subject", name, s, msg)
		}
		if len(msg) > 200 {
			t.Errorf("%s(%.40q): message of %d bytes, long subjects must be truncated", name, s, len(msg))
		}
	}
	for _, c := range cases {
		check("ValidatePublish", c.s, ValidatePublish([]byte(c.s)), c.pub)
		check("ValidateFilter", c.s, ValidateFilter([]byte(c.s)), c.filt)
		check("validate[string]", c.s, validate(c.s, true), c.filt)
	}
}

func TestValidateErrorMessage(t *testing.T) {
	err := ValidatePublish([]byte("a..b"))
	if got, want := err.Error(), `subject "a..b": empty token`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	long := strings.Repeat("x", MaxLen+1)
	err = ValidateFilter([]byte(long))
	if got, want := err.Error(), `subject "`+long[:quoteMax]+`"... (4097 bytes): `+ErrTooLong.Error(); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func TestValidateQueue(t *testing.T) {
	valid := []string{"q", "workers", "w-1_x:y/z", "\u00fc", strings.Repeat("q", MaxQueueLen)}
	for _, q := range valid {
		if err := ValidateQueue([]byte(q)); err != nil {
			t.Errorf("ValidateQueue(%.20q) = %v", q, err)
		}
	}
	invalid := []string{"", "a b", " ", "a\tb", "a\n", "\x00", "a\x7f", "a.b", ".", "a*", "*", "a>", ">",
		strings.Repeat("q", MaxQueueLen+1)}
	for _, q := range invalid {
		err := ValidateQueue([]byte(q))
		if !errors.Is(err, ErrBadQueue) {
			t.Errorf("ValidateQueue(%.20q) = %v, want ErrBadQueue", q, err)
		} else if len(err.Error()) > 200 {
			t.Errorf("ValidateQueue(%.20q): message too long: %q", q, err)
		}
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	pub := []byte("sensors.k1.temp")
	filt := []byte("sensors.*.temp.>")
	queue := []byte("workers")
	for name, f := range map[string]func(){
		"ValidatePublish": func() { _ = ValidatePublish(pub) },
		"ValidateFilter":  func() { _ = ValidateFilter(filt) },
		"ValidateQueue":   func() { _ = ValidateQueue(queue) },
		"ValidateEmpty":   func() { _ = ValidatePublish(nil) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

func TestTokens(t *testing.T) {
	cases := []struct {
		s    string
		want []string
	}{
		{"a", []string{"a"}},
		{"sensors.k1.temp", []string{"sensors", "k1", "temp"}},
		{"a.*.>", []string{"a", "*", ">"}},
		{"", []string{""}},
		{"a..b", []string{"a", "", "b"}},
		{".a.", []string{"", "a", ""}},
	}
	for _, c := range cases {
		got := slices.Collect(Tokens(c.s))
		if !slices.Equal(got, c.want) {
			t.Errorf("Tokens(%q) = %q, want %q", c.s, got, c.want)
		}
		if split := strings.Split(c.s, "."); !slices.Equal(got, split) {
			t.Errorf("Tokens(%q) = %q, strings.Split gives %q", c.s, got, split)
		}
	}
	var first []string
	for tok := range Tokens("a.b.c") {
		first = append(first, tok)
		if tok == "b" {
			break
		}
	}
	if !slices.Equal(first, []string{"a", "b"}) {
		t.Errorf("early break yielded %q", first)
	}
}

func TestIsLiteral(t *testing.T) {
	cases := map[string]bool{
		"a": true, "a.b.c": true, "a*": true, "*a": true, "a.b>": true,
		"*": false, ">": false, "a.*": false, "*.a": false, "a.>": false, "a.*.c": false,
	}
	for s, want := range cases {
		if got := IsLiteral(s); got != want {
			t.Errorf("IsLiteral(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestMatches(t *testing.T) {
	cases := []struct {
		f, s string
		want bool
	}{
		{"a", "a", true},
		{"a", "b", false},
		{"a", "ab", false},
		{"ab", "a", false},
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.b", "a", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"*.b", "a.b", true},
		{"*.b", "a.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.>", "b.c", false},
		{"a.b.>", "a.b", false},
		{"*.>", "a", false},
		{"*.>", "a.b", true},
		{"*.*.>", "a.b", false},
		{"*.*.>", "a.b.c", true},
		{"*.*", "a.b", true},
		{"*.*", "a.b.c", false},
	}
	for _, c := range cases {
		if got := Matches(c.f, c.s); got != c.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", c.f, c.s, got, c.want)
		}
	}
}
