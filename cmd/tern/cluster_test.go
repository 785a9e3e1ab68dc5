package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// monitorOf is the monitoring URL of an in-process server.
func monitorOf(s *server.Server) string { return "http://" + s.HTTPAddr().String() }

func TestClusterCommands(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	nodes := servertest.StartCluster(t, 3, func(_ int, c *server.Config) { c.HTTPAddr = "127.0.0.1:0" })
	n1 := monitorOf(nodes[0])

	// Interest on n2, and one message to it from n1.
	c2, err := tern.Connect(nodes[1].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sub, err := c2.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	ready := `^  n2 .*s +1\n  n3 .*s +0$` // interest, and round trips measured
	if out := settledOutput(t, []string{ready}, "cluster", "ls", "--monitor", n1); !regexp.MustCompile(`(?m)` + ready).MatchString(out) {
		t.Fatalf("n1 never saw n2's interest and both round trips:\n%s", out)
	}
	c1, err := tern.Connect(nodes[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := c1.Publish("orders.eu", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	out := ternOK(t, "cluster", "ls", "--monitor", n1)
	name := "test-" + t.Name()
	for _, re := range []string{
		`^Cluster ` + regexp.QuoteMeta(name) + `: 3 members, 2 routes, as node n1 sees it$`,
		`^  NAME +STATE +ROUTE ADDRESS +VERSION +RTT +INTEREST$`,
		`^\* n1 +alive +127\.0\.0\.1:\d+ +\S+ +- +0$`, // n1's own interest: none
		`^  n2 +alive +127\.0\.0\.1:\d+ +\S+ +\d[\d.]*[µm]?s +1$`,
		`^  n3 +alive +127\.0\.0\.1:\d+ +\S+ +\d[\d.]*[µm]?s +0$`,
	} {
		wantLine(t, out, re)
	}
	wantAligned(t, out, "STATE", "alive")

	statusLines := []string{
		`^Cluster ` + regexp.QuoteMeta(name) + `, node n1 \(id \w+\)$`,
		`^  route address: +127\.0\.0\.1:\d+$`,
		`^  gossip address: +127\.0\.0\.1:\d+$`,
		`^  members: +3$`,
		`^  routes: +2 up$`,
		`^  local interest: +0 entries$`,
		`^NODE +STATE +DIR +REMOTE +UP FOR +RTT +MSGS IN +BYTES IN +MSGS OUT +BYTES OUT +DROPPED +PENDING +UNACKED +INTEREST$`,
		`^n2 +up +(in|out) +127\.0\.0\.1:\d+ +\d+s +\S+ +0 +0 B +1 +5 B +0 +0 B +0 +1$`,
		`^n3 +up +(in|out) +127\.0\.0\.1:\d+ +\d+s +\S+ +0 +0 B +0 +0 B +0 +0 B +0 +0$`,
	}
	out = settledOutput(t, statusLines, "cluster", "status", "--monitor", strings.TrimPrefix(n1, "http://"))
	for _, re := range statusLines {
		wantLine(t, out, re)
	}
	wantAligned(t, out, "MSGS OUT", "1")

	n2Lines := []string{
		`^n1 +up +(in|out) +127\.0\.0\.1:\d+ +\d+s +\S+ +1 +5 B +0 +0 B +0 +0 B +0 +0$`,
		`^  local interest: +1 entry$`,
	}
	out = settledOutput(t, n2Lines, "cluster", "status", "--monitor", monitorOf(nodes[1]))
	for _, re := range n2Lines {
		wantLine(t, out, re)
	}

	// --json is the /cluster document as served.
	var st cluster.Status
	if err := json.Unmarshal([]byte(ternOK(t, "cluster", "ls", "--monitor", n1, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "n1" || len(st.Members) != 3 || len(st.Routes) != 2 || st.Routes[0].Node != "n2" || st.Routes[0].OutMsgs != 1 {
		t.Fatalf("--json: %+v", st)
	}

	// Where the endpoint comes from: a context, the environment, --monitor first.
	ternOK(t, "context", "add", "two", "--server", nodes[1].URL(), "--monitor", monitorOf(nodes[1]))
	wantLine(t, ternOK(t, "cluster", "status", "--context", "two"), `^Cluster .*, node n2 `)
	t.Setenv("TERN_MONITOR_URL", monitorOf(nodes[2]))
	wantLine(t, ternOK(t, "cluster", "status", "--context", "two"), `^Cluster .*, node n3 `)
	wantLine(t, ternOK(t, "cluster", "status", "--context", "two", "--monitor", n1), `^Cluster .*, node n1 `)
	wantLine(t, ternOK(t, "context", "show", "two"), `^  monitor: +`+regexp.QuoteMeta(monitorOf(nodes[1]))+`$`)
}

// wantAligned fails unless the column headed head starts where its first value
// below does.
func wantAligned(t *testing.T, out, head, value string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		col := strings.Index(l, " "+head+" ")
		if col < 0 || i+1 >= len(lines) {
			continue
		}
		col = utf8.RuneCountInString(l[:col]) // columns count characters (µs)
		if next := []rune(lines[i+1]); len(next) <= col+1 || !strings.HasPrefix(string(next[col+1:]), value) {
			t.Errorf("column %s (at %d) not aligned with %q below:\n%s", head, col+1, value, out)
		}
		return
	}
	t.Errorf("no column %s:\n%s", head, out)
}

func TestClusterCommandErrors(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	alone := servertest.Start(t, func(c *server.Config) { c.HTTPAddr = "127.0.0.1:0" })
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"cluster", "ls", "--monitor", monitorOf(alone)}, 1,
			`^tern cluster ls: GET http://127\.0\.0\.1:\d+/cluster: 404 Not Found: this server is not a cluster node \(cluster_port, join\)\n$`},
		{[]string{"cluster", "status", "--monitor", "127.0.0.1:1"}, 1,
			`^tern cluster status: GET http://127\.0\.0\.1:1/cluster: .*connection refused \(is the server's monitoring endpoint there\? see --monitor\)\n$`},
		{[]string{"cluster", "ls", "--monitor", "ftp://x"}, 2, `^tern cluster ls: monitoring endpoint "ftp://x": want http://HOST:PORT or HOST\[:PORT\]\n`},
		{[]string{"cluster", "ls", "--context", "nope"}, 1, `^tern cluster ls: context "nope": no such context`},
		{[]string{"cluster", "ls", "extra"}, 2, `^tern cluster ls: unexpected argument "extra"\n`},
		{[]string{"cluster", "lss"}, 2, `^tern cluster: unknown command "lss" \(did you mean ls\?\)\n`},
	} {
		code, stdout, stderr := runExit(t, c.args...)
		if code != c.code || stdout != "" || !regexp.MustCompile(c.stderr).MatchString(stderr) {
			t.Errorf("tern %v: exit %d, stdout %q, stderr %q; want exit %d, stderr like %q", c.args, code, stdout, stderr, c.code, c.stderr)
		}
	}
}

func TestMonitorURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"127.0.0.1:7490", "http://127.0.0.1:7490"},
		{"broker-1", "http://broker-1:7480"},
		{"http://broker-1:9090/", "http://broker-1:9090"},
		{"https://tern.example/", "https://tern.example:7480"},
		{"[::1]:7480", "http://[::1]:7480"},
	} {
		if got, err := normalizeMonitorURL(c.in); err != nil || got != c.want {
			t.Errorf("normalizeMonitorURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"tern://a.example:7400,tern://b.example:7400", "http://a.example:7480"},
		{"udp://10.0.0.5:7400", "http://10.0.0.5:7480"},
		{"127.0.0.1:17400", "http://127.0.0.1:7480"},
		{"tern://[::1]:7400", "http://[::1]:7480"},
		{"", defaultMonitorURL},
	} {
		if got := monitorURLFor(c.in); got != c.want {
			t.Errorf("monitorURLFor(%q) = %q, want %q", c.in, got, c.want)
		}
	}

	// With nothing given: the host of $TERN_URL, else of the context's server.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	resolved := func(args ...string) string {
		t.Helper()
		var mf monitorFlags
		cmd := &cobra.Command{}
		mf.register(cmd)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := mf.resolve(); err != nil {
			t.Fatal(err)
		}
		return mf.url
	}
	if got := resolved(); got != defaultMonitorURL {
		t.Errorf("nothing set: %q", got)
	}
	ternOK(t, "context", "add", "prod", "--server", "tern://b.example:7400", "--select")
	if got := resolved(); got != "http://b.example:7480" {
		t.Errorf("from the selected context's server: %q", got)
	}
	t.Setenv("TERN_URL", "tern://a.example:7400")
	if got := resolved(); got != "http://a.example:7480" {
		t.Errorf("from $TERN_URL: %q", got)
	}
	ternOK(t, "context", "add", "prod", "--monitor", "c.example:9090")
	if got := resolved(); got != "http://c.example:9090" {
		t.Errorf("the context's monitor: %q", got)
	}
	if got := resolved("--monitor", "d.example"); got != "http://d.example:7480" {
		t.Errorf("--monitor: %q", got)
	}
}

// TestClusterShowsExclusion: a route excluded for being behind shows in both views,
// and what the node missed counts both drops.
func TestClusterShowsExclusion(t *testing.T) {
	st := &cluster.Status{Cluster: "c", Node: "n1", Interest: 2,
		Members: []cluster.MemberInfo{{Name: "n1", State: "alive", RouteAddr: "10.0.0.1:7401", Version: "1.0.0"},
			{Name: "n2", State: "alive", RouteAddr: "10.0.0.2:7401", Version: "1.0.0"},
			{Name: "n3", State: "alive", RouteAddr: "10.0.0.3:7401", Version: "1.0.0"}},
		Routes: []route.Info{{Node: "n2", Addr: "10.0.0.2:7401", Dialed: true, Since: time.Now().Add(-time.Minute),
			RTT: 1234567 * time.Nanosecond, Interest: 4, Dropped: 2, ExcludedDrops: 5, PendingOut: 6 << 20, Excluded: true},
			{Node: "n4", Addr: "10.0.0.4:50000", PeerVersion: "1.0.0"}},
	}
	var b strings.Builder
	if err := printMembers(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, re := range []string{
		`^Cluster c: 3 members, 2 routes, as node n1 sees it$`,
		`^\* n1 +alive +10\.0\.0\.1:7401 +1\.0\.0 +- +2$`,
		`^  n2 +alive, excluded +10\.0\.0\.2:7401 +1\.0\.0 +1\.23ms +4$`,
		`^  n3 +alive, no route +10\.0\.0\.3:7401 +1\.0\.0 +- +-$`,
		`^  n4 +route only +10\.0\.0\.4:50000 +1\.0\.0 +- +0$`,
	} {
		wantLine(t, out, re)
	}
	b.Reset()
	if err := printClusterStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	wantLine(t, b.String(), `^n2 +excluded +out +10\.0\.0\.2:7401 +1m0s +1\.23ms +0 +0 B +0 +0 B +7 +6\.0 MiB +0 +4$`)
	wantLine(t, b.String(), `^n4 +up +in +10\.0\.0\.4:50000 +- +- `)
}

// settledOutput runs the tern command args until its output has a line matching
// each of res, for at most 5 s, and returns the last output: interest and round
// trips take a moment to reach a node's view, and a route's PENDING column counts
// a ping or an interest refresh for the moment it waits for the socket.
func settledOutput(t *testing.T, res []string, args ...string) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out := ternOK(t, args...)
		all := true
		for _, re := range res {
			if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
				all = false
				break
			}
		}
		if all || time.Now().After(deadline) {
			return out
		}
	}
}
