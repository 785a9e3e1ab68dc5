package server

import (
	"testing"
)

// FuzzUsageReport: a peer's account usage report never panics the decoder, and
// what it accepts has a node and no negative count.
func FuzzUsageReport(f *testing.F) {
	f.Add([]byte(`{"node":"n1","accounts":{"acme":{"conns":2,"subs":5}}}`))
	f.Add([]byte(`{"node":"n2","accounts":{}}`))
	f.Add([]byte(`{"node":"","accounts":{"a":{"conns":-1}}}`))
	f.Add([]byte(`{"accounts":null}`))
	f.Add([]byte(`[1,2`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseUsageReport(b)
		if err != nil {
			return
		}
		if r.Node == "" {
			t.Fatal("accepted a report without a node")
		}
		for name, u := range r.Accounts {
			if u.Conns < 0 || u.Subs < 0 {
				t.Fatalf("accepted negative counts for %q", name)
			}
		}
	})
}

func TestUsageReportRefusals(t *testing.T) {
	for _, bad := range []string{``, `{}`, `{"node":"n","accounts":{"a":{"conns":-2,"subs":0}}}`, `not json`} {
		if _, err := parseUsageReport([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := parseUsageReport(make([]byte, maxUsageReport+1)); err == nil {
		t.Error("an oversized report accepted")
	}
}
