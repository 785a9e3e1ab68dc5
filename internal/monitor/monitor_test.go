package monitor

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var (
	testStart = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	testNow   = testStart.Add(1*time.Hour + 2*time.Minute + 3*time.Second)
)

// fakeSource stands in for the broker with fixed numbers.
type fakeSource struct {
	mu          sync.Mutex
	status      Status
	conns       []ConnInfo
	statusCalls atomic.Int64
	// block, if set, makes Status wait until it is closed; entered is signalled first.
	block   chan struct{}
	entered chan struct{}
}

func newFakeSource() *fakeSource {
	return &fakeSource{
		status: Status{
			ServerID:         "SRV1",
			ServerName:       "alpha",
			Version:          "0.1.0-test",
			Start:            testStart,
			Now:              testNow,
			Connections:      3,
			TotalConnections: 17,
			Subscriptions:    42,
			InMsgs:           1234,
			OutMsgs:          5678,
			InBytes:          91011,
			OutBytes:         121314,
			SlowConsumers:    5,
			DroppedMsgs:      99,
			MaxConnections:   65536,
			MaxPayload:       1 << 20,
			MaxPending:       64 << 20,
			Listeners:        map[string]string{"native": "127.0.0.1:7400"},
		},
		conns: []ConnInfo{
			{ID: 30, Name: "c30", Remote: "10.0.0.3:5000", Protocol: "native", Start: testStart, Subscriptions: 1},
			{ID: 10, Name: "c10", Remote: "10.0.0.1:5000", Protocol: "native", Transport: "udp", Start: testStart, Subscriptions: 2,
				InMsgs: 11, OutMsgs: 12, InBytes: 13, OutBytes: 14, PendingBytes: 15, Dropped: 16},
			{ID: 20, Name: "c20", Remote: "10.0.0.2:5000", Protocol: "native", Start: testStart, Subscriptions: 3},
		},
	}
}

func (f *fakeSource) Status() Status {
	f.statusCalls.Add(1)
	if f.block != nil {
		f.entered <- struct{}{}
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	if st.Listeners != nil {
		m := make(map[string]string, len(st.Listeners))
		for k, v := range st.Listeners {
			m[k] = v
		}
		st.Listeners = m
	}
	return st
}

func (f *fakeSource) Connections() []ConnInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ConnInfo(nil), f.conns...)
}

func (f *fakeSource) setConns(c []ConnInfo) {
	f.mu.Lock()
	f.conns = c
	f.mu.Unlock()
}

// startServer runs a monitor for src on a free loopback port and returns it with its
// base URL; it is closed when the test ends.
func startServer(t *testing.T, src Source) (*Server, string) {
	t.Helper()
	s := New("127.0.0.1:0", src, nil)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := closeWithin(s, 10*time.Second); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, "http://" + s.Addr().String()
}

// closeWithin calls s.Close and fails if it does not return within d.
func closeWithin(s *Server, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("did not return within %v", d)
	}
}

func do(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, body
}

func get(t *testing.T, url string, wantCode int) (*http.Response, []byte) {
	t.Helper()
	resp, body := do(t, http.MethodGet, url)
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s: status %d, want %d; body %q", url, resp.StatusCode, wantCode, body)
	}
	return resp, body
}

func wantContentType(t *testing.T, resp *http.Response, prefix string) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, prefix) {
		t.Errorf("%s: Content-Type %q, want prefix %q", resp.Request.URL.Path, ct, prefix)
	}
}

func TestHealthz(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	resp, body := get(t, base+"/healthz", http.StatusOK)
	wantContentType(t, resp, "application/json")
	var got map[string]string
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("healthz body %q: %v", body, err)
	}
	if len(got) != 1 || got["status"] != "ok" {
		t.Errorf("healthz = %v, want {status: ok}", got)
	}
}

func TestIndex(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	resp, body := get(t, base+"/", http.StatusOK)
	wantContentType(t, resp, "text/plain")
	for _, p := range []string{"/healthz", "/status", "/connections", "/metrics"} {
		if !strings.Contains(string(body), p) {
			t.Errorf("index does not list %s:\n%s", p, body)
		}
	}
}

func TestStatus(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	resp, body := get(t, base+"/status", http.StatusOK)
	wantContentType(t, resp, "application/json")
	if !strings.Contains(string(body), "\n  \"server_id\": \"SRV1\"") {
		t.Errorf("status is not indented JSON:\n%s", body)
	}

	var got Status
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("status body: %v\n%s", err, body)
	}
	want := newFakeSource().status
	want.Uptime = "1h2m3s"
	if !got.Start.Equal(want.Start) || !got.Now.Equal(want.Now) {
		t.Errorf("start/now = %v/%v, want %v/%v", got.Start, got.Now, want.Start, want.Now)
	}
	got.Start, got.Now, want.Start, want.Now = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("status =\n%+v\nwant\n%+v", got, want)
	}

	// The wire names are part of the contract.
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	wantNum := map[string]float64{
		"connections": 3, "total_connections": 17, "subscriptions": 42,
		"in_msgs": 1234, "out_msgs": 5678, "in_bytes": 91011, "out_bytes": 121314,
		"slow_consumers": 5, "dropped_msgs": 99, "max_connections": 65536,
		"max_payload": 1 << 20, "max_pending": 64 << 20,
	}
	for k, v := range wantNum {
		if raw[k] != v {
			t.Errorf("status[%q] = %v, want %v", k, raw[k], v)
		}
	}
	wantStr := map[string]string{
		"server_id": "SRV1", "server_name": "alpha", "version": "0.1.0-test", "uptime": "1h2m3s",
		"start": "2025-03-01T10:00:00Z", "now": "2025-03-01T11:02:03Z",
	}
	for k, v := range wantStr {
		if raw[k] != v {
			t.Errorf("status[%q] = %v, want %q", k, raw[k], v)
		}
	}
	if l, ok := raw["listeners"].(map[string]any); !ok || l["native"] != "127.0.0.1:7400" {
		t.Errorf("status listeners = %v", raw["listeners"])
	}
}

func TestStatusDefaults(t *testing.T) {
	src := newFakeSource()
	src.status.Listeners = nil
	src.status.Now = time.Time{}
	src.status.Start = time.Now().Add(-90 * time.Second)
	_, base := startServer(t, src)
	_, body := get(t, base+"/status", http.StatusOK)
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if l, ok := raw["listeners"].(map[string]any); !ok || len(l) != 0 {
		t.Errorf("listeners = %#v, want {}", raw["listeners"])
	}
	if raw["now"] == "0001-01-01T00:00:00Z" {
		t.Errorf("now was not filled in")
	}
	if u := raw["uptime"]; u != "1m30s" && u != "1m31s" {
		t.Errorf("uptime = %v, want about 1m30s", u)
	}
}

func getConns(t *testing.T, url string) ConnectionsPage {
	t.Helper()
	resp, body := get(t, url, http.StatusOK)
	wantContentType(t, resp, "application/json")
	var p ConnectionsPage
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("connections body: %v\n%s", err, body)
	}
	return p
}

func ids(cs []ConnInfo) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestConnections(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	before := time.Now().Add(-time.Second)
	resp, body := get(t, base+"/connections", http.StatusOK)
	wantContentType(t, resp, "application/json")

	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"now", "total", "offset", "limit", "connections"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("connections response has no %q: %s", k, body)
		}
	}
	var conns []map[string]any
	if err := json.Unmarshal(raw["connections"], &conns); err != nil {
		t.Fatal(err)
	}
	if len(conns) != 3 {
		t.Fatalf("got %d connections, want 3", len(conns))
	}
	wantFirst := map[string]any{
		"id": 10.0, "name": "c10", "remote": "10.0.0.1:5000", "protocol": "native",
		"start": "2025-03-01T10:00:00Z", "subscriptions": 2.0, "in_msgs": 11.0, "out_msgs": 12.0,
		"in_bytes": 13.0, "out_bytes": 14.0, "pending_bytes": 15.0, "dropped": 16.0,
		"transport": "udp", "slow_consumer": false,
	}
	for k, v := range wantFirst {
		if conns[0][k] != v {
			t.Errorf("connections[0][%q] = %v, want %v", k, conns[0][k], v)
		}
	}
	if len(conns[0]) != len(wantFirst) {
		t.Errorf("connection fields = %v, want exactly %v", conns[0], wantFirst)
	}

	var p ConnectionsPage
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(p.Connections)); got != "[10 20 30]" {
		t.Errorf("ids = %s, want [10 20 30] (sorted by ID)", got)
	}
	if p.Total != 3 || p.Offset != 0 || p.Limit != DefaultConnectionsLimit {
		t.Errorf("total/offset/limit = %d/%d/%d, want 3/0/%d", p.Total, p.Offset, p.Limit, DefaultConnectionsLimit)
	}
	if p.Now.Before(before) || p.Now.After(time.Now().Add(time.Second)) {
		t.Errorf("now = %v, not the current time", p.Now)
	}
}

func TestConnectionsPaging(t *testing.T) {
	src := newFakeSource()
	var conns []ConnInfo
	for i := 10; i >= 1; i-- { // IDs 1..10, given in reverse
		conns = append(conns, ConnInfo{ID: uint64(i)})
	}
	src.setConns(conns)
	_, base := startServer(t, src)

	for _, tc := range []struct {
		query     string
		ids       string
		off, lim  int
		wantTotal int
	}{
		{"", "[1 2 3 4 5 6 7 8 9 10]", 0, DefaultConnectionsLimit, 10},
		{"?limit=3", "[1 2 3]", 0, 3, 10},
		{"?limit=3&offset=2", "[3 4 5]", 2, 3, 10},
		{"?offset=8", "[9 10]", 8, DefaultConnectionsLimit, 10},
		{"?limit=5&offset=8", "[9 10]", 8, 5, 10},
		{"?offset=10", "[]", 10, DefaultConnectionsLimit, 10},
		{"?offset=1000&limit=1", "[]", 1000, 1, 10},
		{"?limit=0", "[1 2 3 4 5 6 7 8 9 10]", 0, DefaultConnectionsLimit, 10},
	} {
		p := getConns(t, base+"/connections"+tc.query)
		if got := fmt.Sprint(ids(p.Connections)); got != tc.ids {
			t.Errorf("%q: ids %s, want %s", tc.query, got, tc.ids)
		}
		if p.Offset != tc.off || p.Limit != tc.lim || p.Total != tc.wantTotal {
			t.Errorf("%q: offset/limit/total %d/%d/%d, want %d/%d/%d",
				tc.query, p.Offset, p.Limit, p.Total, tc.off, tc.lim, tc.wantTotal)
		}
	}

	// An empty page is an empty array, not null.
	_, body := get(t, base+"/connections?offset=50", http.StatusOK)
	if !strings.Contains(string(body), `"connections": []`) {
		t.Errorf("empty page is not []: %s", body)
	}

	for _, q := range []string{"?limit=x", "?limit=-1", "?offset=-5", "?offset=1.5", "?limit=99999999999999999999"} {
		get(t, base+"/connections"+q, http.StatusBadRequest)
	}
}

func TestConnectionsDefaultLimit(t *testing.T) {
	src := newFakeSource()
	conns := make([]ConnInfo, 1500)
	for i := range conns {
		conns[i] = ConnInfo{ID: uint64(1500 - i)}
	}
	src.setConns(conns)
	_, base := startServer(t, src)
	p := getConns(t, base+"/connections")
	if len(p.Connections) != 1024 || p.Total != 1500 {
		t.Fatalf("got %d of %d connections, want 1024 of 1500", len(p.Connections), p.Total)
	}
	if p.Connections[0].ID != 1 || p.Connections[1023].ID != 1024 {
		t.Errorf("page spans IDs %d..%d, want 1..1024", p.Connections[0].ID, p.Connections[1023].ID)
	}
	p = getConns(t, base+"/connections?offset=1024")
	if len(p.Connections) != 476 || p.Connections[0].ID != 1025 {
		t.Errorf("second page: %d connections from ID %d, want 476 from 1025", len(p.Connections), p.Connections[0].ID)
	}
}

func TestConnectionsDoesNotReorderSource(t *testing.T) {
	shared := []ConnInfo{{ID: 3}, {ID: 1}, {ID: 2}}
	src := sliceSource(shared)
	_, base := startServer(t, src)
	getConns(t, base+"/connections")
	if got := fmt.Sprint(ids(shared)); got != "[3 1 2]" {
		t.Errorf("source slice reordered to %s", got)
	}
}

// sliceSource returns the same backing slice on every call.
type sliceSource []ConnInfo

func (s sliceSource) Status() Status          { return Status{} }
func (s sliceSource) Connections() []ConnInfo { return s }

func scrape(t *testing.T, base string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, body := get(t, base+"/metrics", http.StatusOK)
	wantContentType(t, resp, "text/plain")
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return mfs, string(body)
}

func TestMetrics(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	mfs, text := scrape(t, base)

	for _, tc := range []struct {
		name string
		typ  dto.MetricType
		val  float64
	}{
		{"tern_connections", dto.MetricType_GAUGE, 3},
		{"tern_connections_total", dto.MetricType_COUNTER, 17},
		{"tern_subscriptions", dto.MetricType_GAUGE, 42},
		{"tern_in_messages_total", dto.MetricType_COUNTER, 1234},
		{"tern_out_messages_total", dto.MetricType_COUNTER, 5678},
		{"tern_in_bytes_total", dto.MetricType_COUNTER, 91011},
		{"tern_out_bytes_total", dto.MetricType_COUNTER, 121314},
		{"tern_slow_consumers_total", dto.MetricType_COUNTER, 5},
		{"tern_dropped_messages_total", dto.MetricType_COUNTER, 99},
		{"tern_uptime_seconds", dto.MetricType_GAUGE, 3723},
	} {
		mf := mfs[tc.name]
		if mf == nil {
			t.Errorf("%s missing from /metrics", tc.name)
			continue
		}
		if mf.GetType() != tc.typ {
			t.Errorf("%s type %v, want %v", tc.name, mf.GetType(), tc.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help text", tc.name)
		}
		if len(mf.Metric) != 1 {
			t.Errorf("%s has %d series, want 1", tc.name, len(mf.Metric))
			continue
		}
		m := mf.Metric[0]
		var got float64
		if tc.typ == dto.MetricType_COUNTER {
			got = m.GetCounter().GetValue()
		} else {
			got = m.GetGauge().GetValue()
		}
		if got != tc.val {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.val)
		}
		if len(m.Label) != 0 {
			t.Errorf("%s has labels %v, want none", tc.name, m.Label)
		}
	}

	info := mfs["tern_info"]
	if info == nil || info.GetType() != dto.MetricType_GAUGE || len(info.Metric) != 1 {
		t.Fatalf("tern_info = %v, want one gauge series", info)
	}
	if v := info.Metric[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("tern_info = %v, want 1", v)
	}
	labels := map[string]string{}
	for _, l := range info.Metric[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	if fmt.Sprint(labels) != fmt.Sprint(map[string]string{"server_id": "SRV1", "server_name": "alpha", "version": "0.1.0-test"}) {
		t.Errorf("tern_info labels = %v", labels)
	}

	// The exposition lines themselves, as a scraper sees them.
	for _, line := range []string{
		"# TYPE tern_connections gauge",
		"tern_connections 3",
		"# TYPE tern_connections_total counter",
		"tern_connections_total 17",
		"tern_subscriptions 42",
		"tern_in_messages_total 1234",
		"tern_out_messages_total 5678",
		"tern_in_bytes_total 91011",
		"tern_out_bytes_total 121314",
		"tern_slow_consumers_total 5",
		"tern_dropped_messages_total 99",
		`tern_info{server_id="SRV1",server_name="alpha",version="0.1.0-test"} 1`,
		"tern_uptime_seconds 3723",
	} {
		if !strings.Contains("\n"+text, "\n"+line+"\n") {
			t.Errorf("/metrics has no line %q", line)
		}
	}

	// The Go runtime and process collectors share the registry.
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_start_time_seconds"} {
		if mfs[name] == nil {
			t.Errorf("%s missing from /metrics", name)
		}
	}
}

func TestMetricsOneStatusPerScrape(t *testing.T) {
	src := newFakeSource()
	_, base := startServer(t, src)
	for i := 1; i <= 3; i++ {
		before := src.statusCalls.Load()
		scrape(t, base)
		if n := src.statusCalls.Load() - before; n != 1 {
			t.Fatalf("scrape %d called Status %d times, want 1", i, n)
		}
	}
}

func TestMetricsTrackSource(t *testing.T) {
	src := newFakeSource()
	_, base := startServer(t, src)
	scrape(t, base)
	src.mu.Lock()
	src.status.InMsgs = 2000
	src.status.Connections = 0
	src.mu.Unlock()
	_, text := scrape(t, base)
	for _, line := range []string{"tern_in_messages_total 2000", "tern_connections 0"} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("after update, /metrics has no line %q", line)
		}
	}
}

func TestRegistry(t *testing.T) {
	s, base := startServer(t, newFakeSource())
	if s.Registry() == prometheus.DefaultRegisterer {
		t.Fatal("Registry is the global default registry")
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tern_udp_test_packets_total", Help: "test"})
	s.Registry().MustRegister(c)
	c.Add(7)
	_, text := scrape(t, base)
	if !strings.Contains(text, "\ntern_udp_test_packets_total 7\n") {
		t.Errorf("collector registered via Registry not served:\n%s", text)
	}

	// Two servers in one process do not collide.
	s2 := New("127.0.0.1:0", newFakeSource(), nil)
	if s2.Registry() == s.Registry() {
		t.Error("servers share a registry")
	}
}

func TestNotFound(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	for _, p := range []string{"/nope", "/status/", "/healthz/x", "/metrics/extra", "/index.html", "/connections/1"} {
		get(t, base+p, http.StatusNotFound)
	}
	resp, _ := do(t, http.MethodPost, base+"/nope")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /nope: status %d, want 404", resp.StatusCode)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	_, base := startServer(t, newFakeSource())
	for _, p := range []string{"/", "/healthz", "/status", "/connections", "/metrics"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			resp, _ := do(t, m, base+p)
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: status %d, want 405", m, p, resp.StatusCode)
			}
			if allow := resp.Header.Get("Allow"); !strings.Contains(allow, "GET") {
				t.Errorf("%s %s: Allow %q does not name GET", m, p, allow)
			}
		}
		resp, _ := do(t, http.MethodHead, base+p)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: status %d, want 200", p, resp.StatusCode)
		}
	}
}

func TestHandlerWithoutStart(t *testing.T) {
	s := New("127.0.0.1:0", newFakeSource(), nil)
	if s.Addr() != nil {
		t.Errorf("Addr before Start = %v, want nil", s.Addr())
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"uptime": "1h2m3s"`) {
		t.Errorf("Handler /status: %d %s", rec.Code, rec.Body)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	if err := s.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestDefaultAddr(t *testing.T) {
	if s := New("", newFakeSource(), nil); s.addr != ":7480" {
		t.Errorf("default addr %q, want :7480", s.addr)
	}
	if DefaultPort != 7480 {
		t.Errorf("DefaultPort = %d", DefaultPort)
	}
}

func TestStartErrors(t *testing.T) {
	s, _ := startServer(t, newFakeSource())
	if err := s.Start(); err == nil {
		t.Error("second Start succeeded")
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	s2 := New(busy.Addr().String(), newFakeSource(), nil)
	if err := s2.Start(); err == nil {
		s2.Close()
		t.Fatal("Start on a busy address succeeded")
	}
	if s2.Addr() != nil {
		t.Errorf("Addr after failed Start = %v, want nil", s2.Addr())
	}
}

func TestClose(t *testing.T) {
	s := New("127.0.0.1:0", newFakeSource(), nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	get(t, base+"/healthz", http.StatusOK)
	if err := closeWithin(s, 10*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if resp, err := client.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("request after Close succeeded: %s", resp.Status)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestCloseWaitsForInFlight(t *testing.T) {
	src := newFakeSource()
	src.block = make(chan struct{})
	src.entered = make(chan struct{}, 1)
	var release sync.Once
	unblock := func() { release.Do(func() { close(src.block) }) }
	defer unblock()
	s := New("127.0.0.1:0", src, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()

	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		client := &http.Client{Timeout: 10 * time.Second}
		resp, err := client.Get(base + "/status")
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{code: resp.StatusCode}
	}()
	<-src.entered // the request is inside the handler

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a request was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	if r := <-res; r.err != nil || r.code != http.StatusOK {
		t.Errorf("in-flight request: code %d err %v, want 200", r.code, r.err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the in-flight request finished")
	}
}

func TestConcurrentScrapes(t *testing.T) {
	src := newFakeSource()
	_, base := startServer(t, src)
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src.mu.Lock()
			src.status.InMsgs = i
			if len(src.conns) > 2000 {
				src.conns = src.conns[:3]
			}
			src.conns = append(src.conns, ConnInfo{ID: 100 + i})
			src.mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range []string{"/metrics", "/status", "/connections?limit=5"} {
				resp, err := http.Get(base + p)
				if err != nil {
					t.Errorf("GET %s: %v", p, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %s", p, resp.Status)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	writer.Wait()
	// Concurrent requests can make the transport dial a connection it then never
	// uses; the server would count it as new (not idle) during graceful shutdown.
	http.DefaultClient.CloseIdleConnections()
}

func TestFormatUptime(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{999 * time.Millisecond, "0s"},
		{45 * time.Second, "45s"},
		{3*time.Minute + 7*time.Second, "3m7s"},
		{2*time.Hour + 5*time.Second, "2h0m5s"},
		{28 * time.Hour, "1d4h0m0s"},
		{400*24*time.Hour + 59*time.Second, "400d0h0m59s"},
	} {
		if got := FormatUptime(tc.d); got != tc.want {
			t.Errorf("FormatUptime(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestUptimeEdgeCases(t *testing.T) {
	if d := uptime(Status{Now: testNow}); d != 0 {
		t.Errorf("uptime with no start = %v, want 0", d)
	}
	if d := uptime(Status{Start: testNow, Now: testStart}); d != 0 {
		t.Errorf("uptime with start after now = %v, want 0", d)
	}
	if d := uptime(Status{Start: testStart, Now: testNow}); d != time.Hour+2*time.Minute+3*time.Second {
		t.Errorf("uptime = %v", d)
	}
}

// clusterSource is a fakeSource that is a cluster node, or runs alone while stats is
// nil.
type clusterSource struct {
	*fakeSource
	detail any
	stats  *ClusterStats
}

func (c *clusterSource) Cluster() any                { return c.detail }
func (c *clusterSource) ClusterStats() *ClusterStats { return c.stats }

func TestClusterEndpoint(t *testing.T) {
	alone := &clusterSource{fakeSource: newFakeSource()}
	_, base := startServer(t, alone)
	_, body := get(t, base+"/cluster", http.StatusNotFound)
	if !strings.Contains(string(body), "not a cluster node") {
		t.Errorf("/cluster of a server alone: %q", body)
	}
	_, base = startServer(t, &clusterSource{fakeSource: newFakeSource(), detail: map[string]string{"node": "n1"}})
	resp, body := get(t, base+"/cluster", http.StatusOK)
	wantContentType(t, resp, "application/json")
	if strings.TrimSpace(string(body)) != "{\n  \"node\": \"n1\"\n}" {
		t.Errorf("/cluster = %q", body)
	}
}

func TestClusterMetrics(t *testing.T) {
	src := &clusterSource{fakeSource: newFakeSource()}
	_, base := startServer(t, src)
	if _, text := scrape(t, base); strings.Contains(text, "tern_cluster_") || strings.Contains(text, "tern_route_") {
		t.Errorf("a server alone reports cluster metrics:\n%s", text)
	}

	src.stats = &ClusterStats{Members: 3, LocalInterest: 7, RouteAuthFailures: 4, Routes: []RouteStats{
		{Node: "n2", RTT: 1500 * time.Microsecond, InMsgs: 10, InBytes: 100, OutMsgs: 20, OutBytes: 200,
			DroppedMsgs: 1, PendingBytes: 64, Unacked: 2, Interest: 5, Excluded: true, Exclusions: 3, ExcludedDrops: 7},
		{Node: "n3", InMsgs: 11}, // not measured yet: no round trip
	}}
	mfs, text := scrape(t, base)
	for _, line := range []string{
		"# TYPE tern_cluster_members gauge", "tern_cluster_members 3",
		"tern_cluster_routes 2",
		"tern_cluster_local_interest 7",
		"# TYPE tern_route_auth_failures_total counter", "tern_route_auth_failures_total 4",
		"# TYPE tern_route_in_msgs_total counter",
		`tern_route_in_msgs_total{node="n2"} 10`, `tern_route_in_msgs_total{node="n3"} 11`,
		`tern_route_in_bytes_total{node="n2"} 100`,
		"# TYPE tern_route_out_msgs_total counter", `tern_route_out_msgs_total{node="n2"} 20`,
		`tern_route_out_bytes_total{node="n2"} 200`,
		`tern_route_dropped_msgs_total{node="n2"} 1`,
		"# TYPE tern_route_rtt_seconds gauge", `tern_route_rtt_seconds{node="n2"} 0.0015`,
		`tern_route_pending_bytes{node="n2"} 64`,
		`tern_route_unacked_msgs{node="n2"} 2`,
		`tern_route_interest{node="n2"} 5`, `tern_route_interest{node="n3"} 0`,
		"# TYPE tern_route_excluded gauge", `tern_route_excluded{node="n2"} 1`, `tern_route_excluded{node="n3"} 0`,
		"# TYPE tern_route_exclusions_total counter", `tern_route_exclusions_total{node="n2"} 3`,
		`tern_route_excluded_drops_total{node="n2"} 7`,
	} {
		if !strings.Contains("\n"+text, "\n"+line+"\n") {
			t.Errorf("/metrics has no line %q", line)
		}
	}
	if rtt := mfs["tern_route_rtt_seconds"]; rtt == nil || len(rtt.Metric) != 1 {
		t.Errorf("tern_route_rtt_seconds = %v, want n2's series only", rtt)
	}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "tern_cluster_") || strings.HasPrefix(name, "tern_route_") {
			if mf.GetHelp() == "" {
				t.Errorf("%s has no help text", name)
			}
		}
	}
}
