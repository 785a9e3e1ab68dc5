package auth

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tern-mq/tern/internal/subject"
)

// pattern is a subject filter split into tokens: "*" matches one token, a final
// ">" one or more.
type pattern []string

func parsePattern(s string) (pattern, error) {
	if err := subject.ValidateFilter([]byte(s)); err != nil {
		return nil, fmt.Errorf("pattern %q: %w", s, err)
	}
	return strings.Split(s, "."), nil
}

func (p pattern) String() string { return strings.Join(p, ".") }

// wildFirst reports whether p's first token is a wildcard: such a pattern never
// matches the server's "$" subjects.
func (p pattern) wildFirst() bool { return p[0] == "*" || p[0] == ">" }

// matches reports whether the publish subject s (no wildcards) matches p.
func (p pattern) matches(s []byte) bool {
	if len(s) > 0 && s[0] == '$' && p.wildFirst() {
		return false
	}
	for i, tok := range p {
		if len(s) == 0 {
			return false
		}
		var t []byte
		if j := bytes.IndexByte(s, '.'); j >= 0 {
			t, s = s[:j], s[j+1:]
			if len(s) == 0 {
				return false // "a." is not a subject; never matched
			}
		} else {
			t, s = s, nil
		}
		switch tok {
		case ">":
			return i == len(p)-1
		case "*":
		default:
			if string(t) != tok {
				return false
			}
		}
	}
	return len(s) == 0
}

// covers reports whether every subject the filter f matches is matched by p.
func (p pattern) covers(f pattern) bool {
	if p.wildFirst() && f[0][0] == '$' {
		return false
	}
	for i, tok := range p {
		if i >= len(f) {
			return false
		}
		switch tok {
		case ">":
			return true
		case "*":
			if f[i] == ">" {
				return false
			}
		default:
			if f[i] != tok {
				return false
			}
		}
	}
	return len(f) == len(p)
}

// overlaps reports whether some subject matches both p and f.
func (p pattern) overlaps(f pattern) bool {
	if (p.wildFirst() && !f.wildFirst() && f[0][0] == '$') || (f.wildFirst() && !p.wildFirst() && p[0][0] == '$') {
		return false
	}
	for i := 0; ; i++ {
		switch {
		case i == len(p) && i == len(f):
			return true
		case i == len(p) || i == len(f):
			return false
		case p[i] == ">" || f[i] == ">":
			return true
		case p[i] == "*" || f[i] == "*" || p[i] == f[i]:
		default:
			return false
		}
	}
}
