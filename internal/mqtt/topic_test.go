package mqtt

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestTopicSubjectMapping(t *testing.T) {
	cases := []struct{ topic, subject string }{
		{"sensors/k1/temp", "sensors.k1.temp"},
		{"a", "a"},
		{"/a", "%.a"},
		{"a/", "a.%"},
		{"a//b", "a.%.b"},
		{"/", "%.%"},
		{"v1.2/a b", "v1%2E2.a%20b"},
		{"100%/x", "100%25.x"},
		{"*/>/a*b", "%2A.%3E.a%2Ab"},
		{"$SYS/broker/uptime", "$SYS.broker.uptime"},
		{"ünï/cödé", "ünï.cödé"},
		{"tab\there", "tab%09here"},
	}
	for _, c := range cases {
		got, err := AppendSubject(nil, c.topic)
		if err != nil || string(got) != c.subject {
			t.Errorf("AppendSubject(%q) = %q, %v; want %q", c.topic, got, err, c.subject)
			continue
		}
		if back := AppendTopic(nil, got); string(back) != c.topic {
			t.Errorf("AppendTopic(%q) = %q, want %q", got, back, c.topic)
		}
	}
}

func TestTopicFromNativeSubject(t *testing.T) {
	for subj, topic := range map[string]string{
		"orders.eu.new": "orders/eu/new",
		"50%.off":       "50%/off",
		"a%zz.b":        "a%zz/b",
		"a%4":           "a%4",
		"x%41y":         "xAy",
		"_INBOX.abc.1":  "_INBOX/abc/1",
	} {
		if got := AppendTopic(nil, []byte(subj)); string(got) != topic {
			t.Errorf("AppendTopic(%q) = %q, want %q", subj, got, topic)
		}
	}
}

func TestTopicRejects(t *testing.T) {
	for _, topic := range []string{"", "a/+", "a/#", "a+/b", "#"} {
		if _, err := AppendSubject(nil, topic); !errors.Is(err, ErrTopic) {
			t.Errorf("AppendSubject(%q) err = %v, want ErrTopic", topic, err)
		}
	}
	long := make([]byte, 0, 600)
	for range 300 {
		long = append(long, "a/"...)
	}
	if _, err := AppendSubject(nil, string(long[:len(long)-1])); !errors.Is(err, ErrTopic) {
		t.Errorf("300 levels: err = %v, want ErrTopic", err)
	}
}

func TestFilterSubjects(t *testing.T) {
	cases := []struct {
		filter string
		want   []string
	}{
		{"a/b", []string{"a.b"}},
		{"a/+/c", []string{"a.*.c"}},
		{"+", []string{"*"}},
		{"#", []string{">"}},
		{"a/#", []string{"a", "a.>"}},
		{"+/#", []string{"*", "*.>"}},
		{"/+", []string{"%.*"}},
		{"a.b/#", []string{"a%2Eb", "a%2Eb.>"}},
	}
	for _, c := range cases {
		got, err := FilterSubjects(c.filter)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("FilterSubjects(%q) = %q, %v; want %q", c.filter, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "a/#/b", "a+", "a/b#", "##"} {
		if _, err := FilterSubjects(bad); !errors.Is(err, ErrTopic) {
			t.Errorf("FilterSubjects(%q) err = %v, want ErrTopic", bad, err)
		}
	}
}

func FuzzTopicRoundTrip(f *testing.F) {
	for _, s := range []string{"a/b", "/", "a.b/%/*", "x y/\x01", "ü/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		subj, err := AppendSubject(nil, topic)
		if err != nil {
			return
		}
		if back := AppendTopic(nil, subj); string(back) != topic {
			t.Fatalf("round trip %q -> %q -> %q", topic, subj, back)
		}
		if _, err := FilterSubjects(topic); err != nil {
			t.Fatalf("topic %q maps to a subject but not to a filter: %v", topic, err)
		}
	})
}

// mqttMatch is the MQTT matching rule, written plainly, for checking filtersOverlap.
func mqttMatch(filter, topic string) bool {
	f, tp := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, l := range f {
		if l == "#" {
			return true
		}
		if i >= len(tp) || l != "+" && l != tp[i] {
			return false
		}
	}
	return len(f) == len(tp)
}

// TestFiltersOverlap: filtersOverlap says yes exactly when some topic matches both
// filters, checked against every topic of up to four levels over the filters' words.
func TestFiltersOverlap(t *testing.T) {
	filters := []string{"#", "+", "a", "b", "a/b", "a/+", "+/b", "a/#", "+/#", "a/b/c", "a/+/#", "+/+", "a/b/#", "/a", "+/a", "a/", "a//b", "+/+/+/+"}
	words := []string{"a", "b", "c", "", "z"}
	var topics []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		if depth == 4 {
			return
		}
		for _, w := range words {
			tp := w
			if depth > 0 {
				tp = prefix + "/" + w
			}
			topics = append(topics, tp)
			grow(tp, depth+1)
		}
	}
	grow("", 0)
	for _, a := range filters {
		for _, b := range filters {
			want := slices.ContainsFunc(topics, func(tp string) bool { return mqttMatch(a, tp) && mqttMatch(b, tp) })
			if got := filtersOverlap(a, b); got != want {
				t.Errorf("filtersOverlap(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}
