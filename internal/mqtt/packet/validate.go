package packet

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadTopic reports a topic name or filter that breaks the MQTT rules.
var ErrBadTopic = errors.New("mqtt: invalid topic")

func validTopic(t string) bool {
	return t != "" && len(t) <= 65535 && !strings.ContainsAny(t, "+#\x00")
}

// ValidTopic checks a topic name: non-empty, no wildcards, no U+0000.
func ValidTopic(t string) error {
	if !validTopic(t) {
		return fmt.Errorf("%w: topic name %q", ErrBadTopic, t)
	}
	return nil
}

// ValidFilter checks a topic filter: non-empty, '+' only as a whole level, '#' only
// as the whole last level.
func ValidFilter(f string) error {
	if f == "" || strings.IndexByte(f, 0) >= 0 {
		return fmt.Errorf("%w: filter %q", ErrBadTopic, f)
	}
	for i := 0; i < len(f); i++ {
		switch f[i] {
		case '+':
			if (i > 0 && f[i-1] != '/') || (i+1 < len(f) && f[i+1] != '/') {
				return fmt.Errorf("%w: '+' not a whole level in %q", ErrBadTopic, f)
			}
		case '#':
			if (i > 0 && f[i-1] != '/') || i != len(f)-1 {
				return fmt.Errorf("%w: '#' not the whole last level in %q", ErrBadTopic, f)
			}
		}
	}
	return nil
}

// ParseShared splits a shared subscription "$share/{group}/{filter}". ok is false
// for an ordinary filter. The group must be non-empty without '/', '+' or '#', and
// the filter non-empty. (MQTT 5 forbids no-local on a shared subscription; the
// caller checks that.)
func ParseShared(filter string) (group, inner string, ok bool, err error) {
	rest, found := strings.CutPrefix(filter, "$share/")
	if !found {
		return "", filter, false, nil
	}
	group, inner, found = strings.Cut(rest, "/")
	if !found || group == "" || inner == "" || strings.ContainsAny(group, "+#") {
		return "", "", true, fmt.Errorf("%w: shared subscription %q: want $share/{group}/{filter}", ErrBadTopic, filter)
	}
	return group, inner, true, nil
}
