package packet

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrBadTopic reports a topic name or filter that breaks the MQTT rules. ValidTopic,
// ValidFilter and ParseShared wrap it, so errors.Is tells their errors apart from
// others; the MQTT 5 reason is TopicNameInvalid or TopicFilterInvalid respectively.
var ErrBadTopic = errors.New("mqtt: invalid topic")

// validString is the UTF-8 string rule of section 1.5.4 for strings not read off the
// wire (where checkUTF8 already applied it).
func validString(s string) bool {
	return len(s) <= 65535 && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// ValidTopic checks a topic name: a non-empty UTF-8 string without wildcards.
func ValidTopic(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("%w: empty topic name", ErrBadTopic)
	case !validString(t):
		return fmt.Errorf("%w: topic name %q is not a valid UTF-8 string", ErrBadTopic, t)
	case strings.ContainsAny(t, "+#"):
		return fmt.Errorf("%w: wildcard in topic name %q", ErrBadTopic, t)
	}
	return nil
}

// ValidFilter checks a topic filter: a non-empty UTF-8 string where '+' is a whole
// level and '#' the whole last level. Decode does not call it, because an MQTT 5
// server answers a bad filter in its SUBACK slot (TopicFilterInvalid) rather than by
// disconnecting; the caller checks every subscription.
func ValidFilter(f string) error {
	if f == "" {
		return fmt.Errorf("%w: empty topic filter", ErrBadTopic)
	}
	if !validString(f) {
		return fmt.Errorf("%w: topic filter %q is not a valid UTF-8 string", ErrBadTopic, f)
	}
	for i := 0; i < len(f); i++ {
		switch f[i] {
		case '+':
			if (i > 0 && f[i-1] != '/') || (i+1 < len(f) && f[i+1] != '/') {
				return fmt.Errorf("%w: '+' is not a whole level in %q", ErrBadTopic, f)
			}
		case '#':
			if (i > 0 && f[i-1] != '/') || i != len(f)-1 {
				return fmt.Errorf("%w: '#' is not the whole last level in %q", ErrBadTopic, f)
			}
		}
	}
	return nil
}

// ParseShared splits an MQTT 5 shared subscription "$share/{group}/{filter}". ok is
// false for an ordinary filter, which comes back unchanged. For a shared one, err
// reports a group that is empty or holds '+', '#' or '/' (the first '/' ends it), or
// an inner filter that is empty or fails ValidFilter. No Local on a shared
// subscription is a protocol error; the caller checks that, since it is an option of
// the subscription and not of the filter.
func ParseShared(filter string) (group, inner string, ok bool, err error) {
	rest, found := strings.CutPrefix(filter, "$share/")
	if !found {
		return "", filter, false, nil
	}
	group, inner, found = strings.Cut(rest, "/")
	switch {
	case !found || group == "" || inner == "":
		return "", "", true, fmt.Errorf("%w: shared subscription %q: want $share/{group}/{filter}", ErrBadTopic, filter)
	case strings.ContainsAny(group, "+#"):
		return "", "", true, fmt.Errorf("%w: shared subscription %q: wildcard in group %q", ErrBadTopic, filter, group)
	}
	if err := ValidFilter(inner); err != nil {
		return "", "", true, fmt.Errorf("shared subscription %q: %w", filter, err)
	}
	return group, inner, true, nil
}
