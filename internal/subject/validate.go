package subject

import (
	"errors"
	"fmt"
)

// Limits of a subject.
const (
	MaxLen      = 4096 // bytes
	MaxTokens   = 256
	MaxQueueLen = 255 // bytes of a queue group name
)

// Validation errors; callers branch with errors.Is.
var (
	ErrEmpty             = errors.New("empty subject")
	ErrEmptyToken        = errors.New("empty token")
	ErrWildcardInPublish = errors.New("wildcard in a publish subject")
	ErrBadWildcard       = errors.New("wildcard must be a whole token and '>' must be last")
	ErrInvalidChar       = errors.New("whitespace or control byte")
	ErrTooLong           = errors.New("subject too long")
	ErrTooManyTokens     = errors.New("too many tokens")
	ErrBadQueue          = errors.New("invalid queue group name")
	ErrNotFound          = errors.New("subscription not found")
)

func invalid(s []byte, err error) error {
	if len(s) > 64 {
		return fmt.Errorf("subject %q...: %w", s[:64], err)
	}
	return fmt.Errorf("subject %q: %w", s, err)
}

// ValidatePublish checks a subject a message is published to: literal tokens only.
func ValidatePublish(s []byte) error { return validate(s, false) }

// ValidateFilter checks a subscription filter: tokens, '*' and a final '>'.
func ValidateFilter(s []byte) error { return validate(s, true) }

func validate(s []byte, wildcards bool) error {
	if len(s) == 0 {
		return ErrEmpty
	}
	if len(s) > MaxLen {
		return invalid(s, ErrTooLong)
	}
	tokens := 1
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			c := s[i]
			if c <= ' ' || c == 0x7f {
				return invalid(s, ErrInvalidChar)
			}
			if c != '.' {
				continue
			}
		}
		tok := s[start:i]
		switch {
		case len(tok) == 0:
			return invalid(s, ErrEmptyToken)
		case len(tok) == 1 && (tok[0] == '*' || tok[0] == '>'):
			if !wildcards {
				return invalid(s, ErrWildcardInPublish)
			}
			if tok[0] == '>' && i != len(s) {
				return invalid(s, ErrBadWildcard)
			}
		default:
			for _, c := range tok {
				if c == '*' || c == '>' {
					if !wildcards {
						return invalid(s, ErrWildcardInPublish)
					}
					return invalid(s, ErrBadWildcard)
				}
			}
		}
		if i < len(s) {
			tokens++
			if tokens > MaxTokens {
				return invalid(s, ErrTooManyTokens)
			}
		}
		start = i + 1
	}
	return nil
}

// ValidateQueue checks a queue group name: non-empty, at most MaxQueueLen bytes, no
// whitespace, control bytes, '.', '*' or '>'.
func ValidateQueue(name []byte) error {
	if len(name) == 0 || len(name) > MaxQueueLen {
		return fmt.Errorf("queue %q: %w: length must be 1..%d", name, ErrBadQueue, MaxQueueLen)
	}
	for _, c := range name {
		if c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' {
			return fmt.Errorf("queue %q: %w: byte %q not allowed", name, ErrBadQueue, c)
		}
	}
	return nil
}

// IsLiteral reports whether s has no wildcard token.
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

// Matches reports whether the filter matches the literal subject. Both are assumed
// valid.
func Matches(filter, subject string) bool {
	for {
		ft, frest, fmore := cut(filter)
		st, srest, smore := cut(subject)
		switch ft {
		case ">":
			return true
		case "*":
		default:
			if ft != st {
				return false
			}
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

func cut(s string) (tok, rest string, more bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
