package mqtt

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tern-mq/tern/internal/subject"
)

// MQTT topics and Tern subjects name the same thing: a topic level is a subject token,
// '/' is '.', '+' is '*', and a trailing '#' is '>' (plus the parent level, which '#'
// also matches in MQTT). Bytes a subject token cannot hold are escaped as %XX (two
// upper-case hex digits): '.', '%', '*', '>', space, control bytes and DEL. An empty
// level (as in "/a" or "a//b") is the token "%", which no escape produces. So the
// MQTT topic "sensors/k1/temp" is the subject "sensors.k1.temp", and "v1.2/a b" is
// "v1%2E2.a%20b". A native subject whose tokens hold a '%' not followed by two hex
// digits reaches MQTT unchanged.

// ErrTopic reports a topic or filter that cannot be mapped to a subject.
var ErrTopic = errors.New("mqtt: invalid topic")

func mustEscape(c byte) bool {
	return c < 0x21 || c == 0x7f || c == '.' || c == '%' || c == '*' || c == '>'
}

const hexDigits = "0123456789ABCDEF"

// appendLevel appends one MQTT topic level as a subject token.
func appendLevel(dst []byte, level string) []byte {
	if level == "" {
		return append(dst, '%')
	}
	for i := 0; i < len(level); i++ {
		c := level[i]
		if mustEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// AppendSubject appends the subject of an MQTT topic name (no wildcards) to dst.
func AppendSubject(dst []byte, topic string) ([]byte, error) {
	if topic == "" {
		return dst, fmt.Errorf("%w: empty topic", ErrTopic)
	}
	start := len(dst)
	for {
		i := strings.IndexByte(topic, '/')
		level := topic
		if i >= 0 {
			level = topic[:i]
		}
		if strings.ContainsAny(level, "+#") {
			return dst[:start], fmt.Errorf("%w: wildcard in topic name %q", ErrTopic, topic)
		}
		dst = appendLevel(dst, level)
		if i < 0 {
			break
		}
		dst = append(dst, '.')
		topic = topic[i+1:]
	}
	if err := subject.ValidatePublish(dst[start:]); err != nil {
		return dst[:start], fmt.Errorf("%w: %w", ErrTopic, err)
	}
	return dst, nil
}

// FilterSubjects maps an MQTT topic filter to the subject filters that together
// match what it matches: one, or two for a filter ending in "/#" (the parent level
// and everything below it).
func FilterSubjects(filter string) ([]string, error) {
	if filter == "" {
		return nil, fmt.Errorf("%w: empty filter", ErrTopic)
	}
	var b []byte
	levels := strings.Split(filter, "/")
	for i, level := range levels {
		if i > 0 {
			b = append(b, '.')
		}
		switch {
		case level == "+":
			b = append(b, '*')
		case level == "#":
			if i != len(levels)-1 {
				return nil, fmt.Errorf("%w: '#' not last in %q", ErrTopic, filter)
			}
			if i == 0 {
				return []string{">"}, nil
			}
			parent := string(b[:len(b)-1])
			b = append(b, '>')
			if err := subject.ValidateFilter(b); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrTopic, err)
			}
			return []string{parent, string(b)}, nil
		case strings.ContainsAny(level, "+#"):
			return nil, fmt.Errorf("%w: wildcard inside a level of %q", ErrTopic, filter)
		default:
			b = appendLevel(b, level)
		}
	}
	if err := subject.ValidateFilter(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTopic, err)
	}
	return []string{string(b)}, nil
}

// filtersOverlap reports whether some topic matches both MQTT filters (without a
// $share prefix). It may say so of filters that only a '$' topic, which a leading
// wildcard does not match, would match both: that costs grouping, never a copy.
func filtersOverlap(a, b string) bool {
	for {
		la, ra, moreA := strings.Cut(a, "/")
		lb, rb, moreB := strings.Cut(b, "/")
		switch {
		case la == "#" || lb == "#":
			return true
		case la != lb && la != "+" && lb != "+":
			return false
		case moreA && moreB:
			a, b = ra, rb
		case moreA:
			return ra == "#" // "x/#" matches "x"
		case moreB:
			return rb == "#"
		default:
			return true
		}
	}
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// AppendTopic appends the MQTT topic name of a subject to dst.
func AppendTopic(dst []byte, subj []byte) []byte {
	tokStart := true
	for i := 0; i < len(subj); i++ {
		c := subj[i]
		switch {
		case c == '.':
			dst = append(dst, '/')
			tokStart = true
			continue
		case c == '%' && tokStart && (i+1 == len(subj) || subj[i+1] == '.'):
			// The empty level.
		case c == '%' && i+2 < len(subj):
			hi, ok1 := unhex(subj[i+1])
			lo, ok2 := unhex(subj[i+2])
			if ok1 && ok2 {
				dst = append(dst, hi<<4|lo)
				i += 2
			} else {
				dst = append(dst, c)
			}
		default:
			dst = append(dst, c)
		}
		tokStart = false
	}
	return dst
}

// IsDollar reports whether a subject belongs to the server's reserved '$' space, which
// MQTT filters starting with a wildcard do not match.
func IsDollar(subj []byte) bool { return len(subj) > 0 && subj[0] == '$' }
