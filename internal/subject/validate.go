package subject

import (
	"errors"
	"fmt"
	"iter"
	"strings"
)

// Limits on subjects, filters and queue group names.
const (
	MaxLen      = 4096 // bytes in a subject or filter
	MaxTokens   = 256  // tokens in a subject or filter
	MaxQueueLen = 255  // bytes in a queue group name
)

// Sentinel errors. Validation errors wrap one of these with the offending subject;
// callers branch with errors.Is.
var (
	ErrEmpty             = errors.New("empty subject")
	ErrEmptyToken        = errors.New("empty token")
	ErrWildcardInPublish = errors.New("wildcard in a publish subject")
	ErrBadWildcard       = errors.New("wildcard must be a whole token and '>' must be the last token")
	ErrInvalidChar       = errors.New("whitespace, control byte or DEL")
	ErrTooLong           = errors.New("subject longer than 4096 bytes")
	ErrTooManyTokens     = errors.New("subject has more than 256 tokens")
	ErrBadQueue          = errors.New("invalid queue group name")
	ErrNotFound          = errors.New("subscription not found")
)

// errEmpty is returned for an empty subject; prebuilt so that it costs nothing.
var errEmpty = fmt.Errorf("subject \"\": %w", ErrEmpty)

// quoteMax is how many bytes of a subject an error message quotes.
const quoteMax = 64

// invalid wraps err with (a prefix of) the subject s. It copies what it quotes so
// that s does not escape.
func invalid[S ~string | ~[]byte](s S, err error) error {
	if len(s) > quoteMax {
		return fmt.Errorf("subject %q... (%d bytes): %w", string(s[:quoteMax]), len(s), err)
	}
	return fmt.Errorf("subject %q: %w", string(s), err)
}

// Byte classes used by the validators.
const (
	clOK    = iota // ordinary token byte
	clBad          // < 0x21 or 0x7f
	clDot          // '.'
	clStar         // '*'
	clFull         // '>'
	clCount        // number of classes
)

// class maps every byte to its class.
var class = func() (t [256]uint8) {
	for c := range 0x21 {
		t[c] = clBad
	}
	t[0x7f] = clBad
	t['.'] = clDot
	t['*'] = clStar
	t['>'] = clFull
	return t
}()

// ValidatePublish checks a subject a message is published to: 1..MaxLen bytes,
// 1..MaxTokens non-empty tokens, no wildcards, no whitespace, control bytes or DEL.
// It makes a single pass and allocates nothing when s is valid.
func ValidatePublish(s []byte) error { return validate(s, false) }

// ValidateFilter checks a subscription filter: as ValidatePublish, but a token may be
// '*' and the last token may be '>'. It allocates nothing when s is valid.
func ValidateFilter(s []byte) error { return validate(s, true) }

// validate checks s in one pass. A wildcard byte makes a token "wild"; the token is
// judged when it ends (at a '.' or at the end of s).
func validate[S ~string | ~[]byte](s S, filter bool) error {
	n := len(s)
	if n == 0 {
		return errEmpty
	}
	if n > MaxLen {
		return invalid(s, ErrTooLong)
	}
	dots := 0
	start := 0     // first byte of the current token
	var wild uint8 // class of the last wildcard byte in the current token, or clOK
	for i := 0; i < n; i++ {
		c := class[s[i]]
		if c == clOK {
			continue
		}
		switch c {
		case clBad:
			return invalid(s, ErrInvalidChar)
		case clStar, clFull:
			if !filter {
				return invalid(s, ErrWildcardInPublish)
			}
			if i != start {
				return invalid(s, ErrBadWildcard) // "a*"
			}
			wild = c
		case clDot:
			if i == start {
				return invalid(s, ErrEmptyToken)
			}
			if wild != clOK {
				// The token began with a wildcard: it must be exactly that byte, and
				// '>' may not be followed by anything.
				if i-start != 1 || wild == clFull {
					return invalid(s, ErrBadWildcard)
				}
				wild = clOK
			}
			if dots++; dots >= MaxTokens {
				return invalid(s, ErrTooManyTokens)
			}
			start = i + 1
		}
	}
	if start == n {
		return invalid(s, ErrEmptyToken) // trailing '.'
	}
	if wild != clOK && n-start != 1 {
		return invalid(s, ErrBadWildcard) // "*b", ">x"
	}
	return nil
}

// ValidateQueue checks a queue group name: 1..MaxQueueLen bytes, none of them
// whitespace, a control byte, DEL, '.', '*' or '>'. It allocates nothing when name is
// valid. Errors wrap ErrBadQueue.
func ValidateQueue(name []byte) error { return validateQueue(name) }

func validateQueue[S ~string | ~[]byte](name S) error {
	if len(name) == 0 {
		return fmt.Errorf("queue \"\": %w: empty", ErrBadQueue)
	}
	if len(name) > MaxQueueLen {
		return fmt.Errorf("queue %q... (%d bytes): %w: longer than %d bytes",
			string(name[:quoteMax]), len(name), ErrBadQueue, MaxQueueLen)
	}
	for i := 0; i < len(name); i++ {
		if class[name[i]] != clOK {
			return fmt.Errorf("queue %q: %w: byte %q not allowed", string(name), ErrBadQueue, name[i])
		}
	}
	return nil
}

// Tokens yields the '.'-separated tokens of s in order without allocating. It does not
// validate: like strings.Split, it yields one empty token for an empty s and empty
// tokens for adjacent, leading or trailing dots.
func Tokens(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for {
			i := strings.IndexByte(s, '.')
			if i < 0 {
				yield(s)
				return
			}
			if !yield(s[:i]) {
				return
			}
			s = s[i+1:]
		}
	}
}

// IsLiteral reports whether s has no wildcard token ('*' or '>' as a whole token).
func IsLiteral(s string) bool {
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if i-start == 1 && (s[start] == '*' || s[start] == '>') {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// Matches reports whether filter matches the literal subject: '*' matches exactly one
// token, '>' one or more remaining tokens, and any other token only itself. Both are
// assumed valid (see ValidateFilter and ValidatePublish); on other input it returns
// some answer without panicking.
func Matches(filter, subject string) bool {
	f, s := 0, 0 // start of the current token in filter and in subject
	for {
		switch {
		case f < len(filter) && filter[f] == '>' && (f+1 == len(filter) || filter[f+1] == '.'):
			return true
		case f < len(filter) && filter[f] == '*' && (f+1 == len(filter) || filter[f+1] == '.'):
			for s < len(subject) && subject[s] != '.' {
				s++
			}
			f++
		default:
			for ; f < len(filter) && filter[f] != '.'; f, s = f+1, s+1 {
				if s == len(subject) || subject[s] != filter[f] {
					return false
				}
			}
			if s < len(subject) && subject[s] != '.' {
				return false // the subject's token is longer
			}
		}
		// Both are at the end of a token: at the end of the string or at a '.'.
		fmore, smore := f < len(filter), s < len(subject)
		if !fmore || !smore {
			return fmore == smore
		}
		f, s = f+1, s+1
	}
}

// cut splits s at its first '.'; more reports whether there was one.
func cut(s string) (tok, rest string, more bool) {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}
