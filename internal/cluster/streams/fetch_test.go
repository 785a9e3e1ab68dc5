package streams

import "testing"

func TestParseFetch(t *testing.T) {
	for _, c := range []struct {
		body string
		part int
		from uint64
		ok   bool
	}{
		{"17", 0, 17, true},
		{"17 2", 2, 17, true},
		{"1 0", 0, 1, true},
		{"", 0, 0, false},
		{"x", 0, 0, false},
		{"17 -1", 0, 0, false},
		{"17 two", 0, 0, false},
		{"18446744073709551616", 0, 0, false},
	} {
		part, from, err := parseFetch([]byte(c.body))
		if (err == nil) != c.ok || c.ok && (part != c.part || from != c.from) {
			t.Errorf("%q: partition %d from %d, %v; want %d from %d, ok %v", c.body, part, from, err, c.part, c.from, c.ok)
		}
	}
}

// FuzzParseFetch: a fetch's body comes from another node; whatever it holds, parsing
// it answers a partition that can be looked up, or refuses.
func FuzzParseFetch(f *testing.F) {
	for _, seed := range []string{"1", "17 2", "", " ", "9 9 9", "-1"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		part, _, err := parseFetch(body)
		if err == nil && part < 0 {
			t.Fatalf("%q: partition %d", body, part)
		}
	})
}
