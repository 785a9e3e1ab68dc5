package monitoring

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestJetStreamMetaReady(t *testing.T) {
	page := func(s string) JetStreamPage {
		var p JetStreamPage
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f1 := page(`{"meta_cluster":{"leader":"js3","cluster_size":3,"replicas":[{"name":"js2","current":false},{"name":"js3","current":true}]}}`)
	f2 := page(`{"meta_cluster":{"leader":"js3","cluster_size":3,"replicas":[{"name":"js1","current":false},{"name":"js3","current":true}]}}`)
	l3 := page(`{"meta_cluster":{"leader":"js3","cluster_size":3,"replicas":[{"name":"js1","current":true},{"name":"js2","current":true}]}}`)
	l3behind := page(`{"meta_cluster":{"leader":"js3","cluster_size":3,"replicas":[{"name":"js1","current":true},{"name":"js2","current":false}]}}`)
	none := page(`{"meta_cluster":{"cluster_size":3}}`)
	other := page(`{"meta_cluster":{"leader":"js1","cluster_size":3,"replicas":[{"name":"js1","current":true},{"name":"js3","current":true}]}}`)
	if ok, why := JetStreamMetaReady([]JetStreamPage{f1, f2, l3}, 3); !ok {
		t.Errorf("formed: %s", why)
	}
	for name, pages := range map[string][]JetStreamPage{
		"a peer not current": {f1, f2, l3behind},
		"no leader":          {f1, none, l3},
		"disagreement":       {f1, other, l3},
		"a missing page":     {f1, l3},
	} {
		if ok, why := JetStreamMetaReady(pages, 3); ok || why == "" {
			t.Errorf("%s: ready %v (%q)", name, ok, why)
		}
	}
}

// ternNodes serves one /cluster page per node; formed says whether the pages show
// the meta group formed yet.
func ternNodes(t *testing.T, formed func() bool) []string {
	var bases []string
	for _, name := range []string{"tern1", "tern2", "tern3"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !formed() {
				_, _ = w.Write([]byte(`{"node":"` + name + `","meta":{"running":true}}`))
				return
			}
			_, _ = w.Write([]byte(`{"node":"` + name + `","meta":{"running":true,"leader":"tern2","voters":["tern1","tern2","tern3"]}}`))
		}))
		t.Cleanup(srv.Close)
		bases = append(bases, srv.URL)
	}
	return bases
}

func TestWaitTernMeta(t *testing.T) {
	start := time.Now()
	bases := ternNodes(t, func() bool { return time.Since(start) > 300*time.Millisecond })
	leader, err := WaitTernMeta(context.Background(), bases, 10*time.Second)
	if err != nil || leader != "tern2" {
		t.Fatalf("WaitTernMeta = %q, %v", leader, err)
	}
	bases = ternNodes(t, func() bool { return false })
	if _, err := WaitTernMeta(context.Background(), bases, 500*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not formed yet") {
		t.Errorf("never formed: %v", err)
	}
}
