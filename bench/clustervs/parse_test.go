package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Trimmed from a 3-node Tern cluster's /cluster.
const ternCluster = `{
  "cluster": "bench", "node": "t1", "node_id": "cfa33cd67b1cdbe8", "route_addr": "127.0.0.1:17511",
  "members": [
    {"name": "t1", "id": "LVC6", "gossip_addr": "127.0.0.1:17512", "route_addr": "127.0.0.1:17511", "version": "0.1.0-dev", "state": "alive"},
    {"name": "t2", "id": "7LMT", "gossip_addr": "127.0.0.1:17522", "route_addr": "127.0.0.1:17521", "version": "0.1.0-dev", "state": "alive"},
    {"name": "t3", "id": "J25V", "gossip_addr": "127.0.0.1:17532", "route_addr": "127.0.0.1:17531", "version": "0.1.0-dev", "state": "suspect"}
  ],
  "routes": [
    {"node": "t2", "node_id": "111d", "addr": "127.0.0.1:17521", "dialed": true, "interest": 5, "in_msgs": 0, "excluded": false},
    {"node": "t3", "node_id": "72f1", "addr": "127.0.0.1:17531", "dialed": true, "interest": 100000, "in_msgs": 0, "excluded": false}
  ],
  "local_interest": 0
}`

// Trimmed from a 3-node nats-server 2.15.2 cluster's /routez: three pooled routes
// to each peer and one pinned to the system account.
const natsRoutez = `{
  "server_id": "NBUP", "server_name": "nn1", "now": "2026-11-25T01:45:28.301559716Z", "num_routes": 8,
  "routes": [
    {"rid": 10, "remote_id": "NC64", "remote_name": "nn2", "did_solicit": true, "subscriptions": 0},
    {"rid": 11, "remote_id": "NC64", "remote_name": "nn2", "did_solicit": true, "subscriptions": 7},
    {"rid": 12, "remote_id": "NC64", "remote_name": "nn2", "did_solicit": true, "subscriptions": 0},
    {"rid": 13, "remote_id": "NDX2", "remote_name": "nn3", "did_solicit": true, "subscriptions": 0},
    {"rid": 14, "remote_id": "NDX2", "remote_name": "nn3", "did_solicit": true, "subscriptions": 0},
    {"rid": 15, "remote_id": "NDX2", "remote_name": "nn3", "did_solicit": true, "subscriptions": 0},
    {"rid": 16, "remote_id": "NC64", "remote_name": "nn2", "did_solicit": true, "subscriptions": 53},
    {"rid": 17, "remote_id": "NDX2", "remote_name": "nn3", "did_solicit": true, "subscriptions": 53}
  ]
}`

func TestParseViews(t *testing.T) {
	v, err := parseTernCluster([]byte(ternCluster))
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "t1" || v.Routes["t2"] != 5 || v.Routes["t3"] != 100000 || len(v.Routes) != 2 {
		t.Fatalf("tern view: %+v", v)
	}
	if v.Members["t3"] != "suspect" || len(v.Members) != 3 {
		t.Fatalf("tern members: %+v", v.Members)
	}
	if v.routeGone("t3") || !v.routeGone("t4") || v.memberGone("t3") || !v.memberGone("t4") {
		t.Fatal("gone")
	}
	v.Members["t3"] = "dead"
	if !v.memberGone("t3") {
		t.Fatal("a dead member is not gone")
	}

	n, err := parseNATSRoutez([]byte(natsRoutez))
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "nn1" || n.Routes["nn2"] != 60 || n.Routes["nn3"] != 53 || n.Members != nil {
		t.Fatalf("nats view: %+v", n)
	}

	for _, bad := range []string{`{`, `{"routes": []}`} {
		if _, err := parseTernCluster([]byte(bad)); err == nil {
			t.Errorf("tern %q: no error", bad)
		}
		if _, err := parseNATSRoutez([]byte(bad)); err == nil {
			t.Errorf("nats %q: no error", bad)
		}
	}
}

func TestMeshed(t *testing.T) {
	v := func(name string, routes ...string) view {
		x := view{Name: name, Routes: map[string]int{}}
		for _, r := range routes {
			x.Routes[r] = 0
		}
		return x
	}
	full := []view{v("a", "b", "c"), v("b", "a", "c"), v("c", "a", "b")}
	if ok, why := meshed(full); !ok {
		t.Fatalf("full mesh: %s", why)
	}
	part := []view{v("a", "b", "c"), v("b", "a"), v("c", "a", "b")}
	if ok, why := meshed(part); ok || why != "b has no route to c" {
		t.Fatalf("partial: %v %q", ok, why)
	}
	// With membership every other node must be alive too.
	for i := range full {
		full[i].Members = map[string]string{"a": "alive", "b": "alive", "c": "alive"}
	}
	if ok, _ := meshed(full); !ok {
		t.Fatal("alive members")
	}
	full[0].Members["c"] = "suspect"
	if ok, why := meshed(full); ok || why != "a does not see c alive" {
		t.Fatalf("suspect: %v %q", ok, why)
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tnats-server\nVmPeak:\t 1266200 kB\nVmRSS:\t   12345 kB\nRssAnon:\t    8000 kB\n"
	if v, err := parseVmRSS([]byte(status)); err != nil || v != 12345*1024 {
		t.Fatalf("parseVmRSS = %d, %v", v, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if v, err := readRSS(os.Getpid()); err != nil || v <= 0 {
		t.Fatalf("readRSS(self) = %d, %v", v, err)
	}
}

func TestFailoverOrder(t *testing.T) {
	for _, c := range []struct {
		nodes, victim int
		want          string
	}{{3, 2, "[2 1 0]"}, {5, 4, "[4 3 2 1 0]"}, {3, 1, "[1 2 0]"}, {2, 1, "[1 0]"}} {
		if got := fmt.Sprint(failoverOrder(c.nodes, c.victim)); got != c.want {
			t.Errorf("failoverOrder(%d, %d) = %s, want %s", c.nodes, c.victim, got, c.want)
		}
	}
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "recovery.jsonl")
	lines := []string{
		`{"system":"nats","version":"2.15.2","nodes":3,"rate":2000,"victim":"nn3","resumed_ms":10,"reconnected_ms":2,"disconnected_ms":0.5,"lost":20,"routes_gone_ms":1}`,
		`{"system":"tern","version":"0.1.0-dev","nodes":3,"rate":2000,"victim":"t3","resumed_ms":4,"reconnected_ms":1,"disconnected_ms":0.4,"lost":8,"routes_gone_ms":2,"member_gone_ms":1000}`,
		``,
		`{"system":"nats","version":"2.15.2","nodes":3,"rate":2000,"resumed_ms":30,"reconnected_ms":3,"disconnected_ms":0.5,"lost":60,"routes_gone_ms":3}`,
		`{"system":"tern","version":"0.1.0-dev","nodes":3,"rate":2000,"resumed_ms":6,"reconnected_ms":1,"disconnected_ms":0.4,"lost":12,"routes_gone_ms":2,"member_gone_ms":1200}`,
		`{"system":"tern","version":"0.1.0-dev","nodes":3,"rate":2000,"resumed_ms":9999,"error":"the subscriber received nothing"}`,
	}
	if err := os.WriteFile(rec, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(rec)
	if err != nil || len(recs) != 5 {
		t.Fatalf("readRecords: %d, %v", len(recs), err)
	}
	sec := summarize(recs, recoveryMetrics)
	n, tn := sec.Systems["nats"], sec.Systems["tern"]
	if n.Runs != 2 || tn.Runs != 3 || len(tn.Failed) != 1 || len(n.Failed) != 0 {
		t.Fatalf("runs: nats %d (%d failed), tern %d (%d failed)", n.Runs, len(n.Failed), tn.Runs, len(tn.Failed))
	}
	if got := n.Metrics["resumed_ms"]; got.Median != 20 || got.Min != 10 || got.Max != 30 {
		t.Fatalf("nats resumed: %+v", got)
	}
	if got := tn.Metrics["resumed_ms"]; got.Median != 5 || got.Max != 6 {
		t.Fatalf("tern resumed (the failed run left out): %+v", got)
	}
	if _, ok := n.Metrics["member_gone_ms"]; ok {
		t.Fatal("NATS has a membership figure")
	}
	if tn.Details["victim"] != "t3" || n.Version != "2.15.2" {
		t.Fatalf("details %v, version %q", tn.Details, n.Version)
	}
	if order := sec.order(); strings.Join(order, ",") != "nats,tern" {
		t.Fatalf("order %v", order)
	}

	var md bytes.Buffer
	writeReport(&md, &clusterReport{Date: "today", Recovery: sec})
	out := md.String()
	for _, want := range []string{
		"| measurement | NATS | Tern | ratio Tern/NATS |",
		"| subscriber receives again: first message published after the kill | 20.0 ms (10.0 ms–30.0 ms) | 5.00 ms (4.00 ms–6.00 ms) | 0.25× |",
		"| messages lost (published, never received) | 40 (20–60) | 10 (8–12) | 0.25× |",
		"| surviving nodes no longer list it as a member | — | 1100 ms (1000 ms–1200 ms) | — |",
		"- Tern: the subscriber received nothing",
		"- Tern 0.1.0-dev: 3 runs, 1 failed;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"system\":\"nats\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecords(bad); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("bad line: %v", err)
	}
	if err := os.WriteFile(bad, []byte("{\"resumed_ms\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecords(bad); err == nil {
		t.Fatal("a record without system: no error")
	}
}

func TestFormatValue(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{{1234.6, "ms", "1235 ms"}, {12.34, "ms", "12.3 ms"}, {1.234, "ms", "1.23 ms"}, {97.6, "B", "98 B"}, {3, "", "3"}, {2.5, "", "2.5"}} {
		if got := formatValue(c.v, c.unit); got != c.want {
			t.Errorf("formatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}
