// Command natsvs runs the same workloads against NATS and Tern on this machine and
// prints a Markdown table comparing them. Both brokers must already be running (see
// bench/run.sh, which starts them and calls this program); each is driven through
// internal/loadgen with its own client adapter, so the workload code is identical.
//
// Every row runs --runs times per broker, alternating which broker goes first, and the
// table shows the median with the spread (min–max) across runs.
//
// With --cluster it runs the cluster matrix instead: --nats and --tern then list one
// URL per node of a running cluster, and each row places its publishers, subscribers,
// requesters and responders on given nodes (bench/cluster.sh starts both clusters and
// calls this program).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/records"
	"github.com/tern-mq/tern/bench/internal/tablefmt"

	"github.com/nats-io/nats.go"

	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/natsbus"
	"github.com/tern-mq/tern/bench/internal/stats"
	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
)

// row is one line of the matrix.
type row struct {
	Key      string // short name for --only
	Workload string // as shown in the table
	Cfg      loadgen.Config
	// Place puts the connections of each role (loadgen.RolePub, ...) on cluster nodes,
	// 0 being the first URL: the i-th connection of a role goes to node
	// Place[role][i % len(Place[role])]. Roles it does not list go to node 0.
	Place map[string][]int
}

const kib = 1024

// matrix is the benchmark: each workload at 16 B and 1 KiB, with counts sized so one
// run takes about 1–3 s on a small machine. scale multiplies every count.
func matrix(scale float64) []row {
	n := func(v int) int { return max(1, int(float64(v)*scale)) }
	var rows []row
	add := func(key, workload string, cfg loadgen.Config, small, large int) {
		c := cfg
		c.Size, c.Msgs = 16, n(small)
		rows = append(rows, row{Key: key + "-16", Workload: workload, Cfg: c})
		c.Size, c.Msgs = kib, n(large)
		rows = append(rows, row{Key: key + "-1k", Workload: workload, Cfg: c})
	}
	add("pub", "publish only (1 pub)", loadgen.Config{Mode: loadgen.ModePub, Pubs: 1}, 5_000_000, 1_500_000)
	add("pubsub1", "1 pub → 1 sub", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 1}, 2_000_000, 600_000)
	add("pubsub4", "1 pub → 4 subs", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 4}, 1_000_000, 250_000)
	add("queue4", "queue group of 4 (1 pub)", loadgen.Config{Mode: loadgen.ModeQueue, Pubs: 1, Subs: 4}, 2_000_000, 600_000)
	// The same point-to-point path well below saturation: latency without queueing.
	add("paced", "1 pub → 1 sub, paced at 20k msgs/s", loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 1, Rate: 20_000}, 40_000, 40_000)
	add("reqrep", "request/reply (1 requester, 1 responder)", loadgen.Config{Mode: loadgen.ModeReqRep, Pubs: 1, Subs: 1}, 10_000, 10_000)
	return rows
}

// clusterMatrix is the benchmark across the nodes of a 3-node cluster (--cluster).
// Node 1 in the names is Place's node 0. Every row probes (loadgen.Config.Probe):
// it starts once the subscriptions have reached the publishers' node.
func clusterMatrix(scale float64) []row {
	n := func(v int) int { return max(1, int(float64(v)*scale)) }
	var rows []row
	one := func(key, workload string, cfg loadgen.Config, place map[string][]int, size, msgs int) {
		cfg.Size, cfg.Msgs, cfg.Probe = size, n(msgs), true
		rows = append(rows, row{Key: key, Workload: workload, Cfg: cfg, Place: place})
	}
	add := func(key, workload string, cfg loadgen.Config, place map[string][]int, small, large int) {
		one(key+"-16", workload, cfg, place, 16, small)
		one(key+"-1k", workload, cfg, place, kib, large)
	}
	pub1 := []int{0}
	add("fanout", "fan-out: pub on node 1 → subs on nodes 2, 3",
		loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 2},
		map[string][]int{loadgen.RolePub: pub1, loadgen.RoleSub: {1, 2}}, 1_000_000, 300_000)
	add("queue3", "queue group of 3, a member on each node; pub on node 1",
		loadgen.Config{Mode: loadgen.ModeQueue, Pubs: 1, Subs: 3},
		map[string][]int{loadgen.RolePub: pub1, loadgen.RoleSub: {0, 1, 2}}, 1_000_000, 300_000)
	add("queue4r", "queue group of 4 on nodes 2, 3 (2 each); pub on node 1",
		loadgen.Config{Mode: loadgen.ModeQueue, Pubs: 1, Subs: 4},
		map[string][]int{loadgen.RolePub: pub1, loadgen.RoleSub: {1, 2}}, 1_000_000, 300_000)
	add("reqrep", "request/reply: requester on node 1, responder on node 3",
		loadgen.Config{Mode: loadgen.ModeReqRep, Pubs: 1, Subs: 1},
		map[string][]int{loadgen.RoleReq: pub1, loadgen.RoleResponder: {2}}, 10_000, 10_000)
	one("paced-16", "latency: pub on node 1 → sub on node 2, paced at 10k msgs/s",
		loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 1, Rate: 10_000},
		map[string][]int{loadgen.RolePub: pub1, loadgen.RoleSub: {1}}, 16, 30_000)
	return rows
}

// nodesNeeded is how many cluster nodes rows place connections on.
func nodesNeeded(rows []row) int {
	n := 1
	for _, r := range rows {
		for _, nodes := range r.Place {
			for _, i := range nodes {
				n = max(n, i+1)
			}
		}
	}
	return n
}

// placed is a Dialer that puts each connection of a run on the node its role's
// placement names (see row.Place); dials[i] connects to node i.
func placed(dials []loadgen.Dialer, place map[string][]int) loadgen.Dialer {
	return func(name string) (loadgen.Bus, error) {
		node := 0
		if role, i, ok := loadgen.ConnRole(name); ok {
			if nodes := place[role]; len(nodes) > 0 {
				node = nodes[i%len(nodes)]
			}
		}
		if node >= len(dials) {
			return nil, fmt.Errorf("connection %s is placed on node %d of %d", name, node+1, len(dials))
		}
		return dials[node](name)
	}
}

// system is one broker under test: one server, or with --cluster one URL per node.
type system struct {
	Key     string           `json:"-"`
	Name    string           `json:"name"`
	URL     string           `json:"url"`
	Version string           `json:"version"`
	dials   []loadgen.Dialer // one per node
}

// spread is the median, min and max of one figure across runs.
type spread = stats.Spread

// outcome is one system's runs of one row.
type outcome struct {
	Results    []loadgen.Result `json:"results"`
	Failures   []string         `json:"failures,omitempty"`
	MsgsPerSec spread           `json:"msgs_per_sec"`
	P50        spread           `json:"p50_us"`
	P99        spread           `json:"p99_us"`
	P999       spread           `json:"p999_us"`
}

func (o *outcome) summarize() {
	var rate, p50, p99, p999 []float64
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for _, r := range o.Results {
		rate = append(rate, r.MsgsPerSec)
		if r.Latency.Samples > 0 {
			p50 = append(p50, us(r.Latency.P50))
			p99 = append(p99, us(r.Latency.P99))
			p999 = append(p999, us(r.Latency.P999))
		}
	}
	o.MsgsPerSec, o.P50, o.P99, o.P999 = stats.SpreadOf(rate), stats.SpreadOf(p50), stats.SpreadOf(p99), stats.SpreadOf(p999)
}

type rowReport struct {
	Key      string              `json:"key"`
	Workload string              `json:"workload"`
	Mode     string              `json:"mode"`
	Size     int                 `json:"size"`
	Pubs     int                 `json:"pubs"`
	Subs     int                 `json:"subs"`
	Msgs     int                 `json:"msgs"`
	Systems  map[string]*outcome `json:"systems"`
	// RatioRate is Tern's median msgs/s over NATS's (above 1: Tern is faster);
	// RatioP99 is Tern's median p99 over NATS's (below 1: Tern's tail is lower).
	RatioRate float64 `json:"ratio_msgs_per_sec,omitempty"`
	RatioP99  float64 `json:"ratio_p99,omitempty"`
}

type report struct {
	Date    string `json:"date"`
	Command string `json:"command"`
	// Nodes is the number of cluster nodes each broker ran with (--cluster); 0 for a
	// single server.
	Nodes   int                `json:"nodes,omitempty"`
	Machine host.Machine       `json:"machine"`
	Servers map[string]*system `json:"servers"`
	Runs    int                `json:"runs"`
	Scale   float64            `json:"scale"`
	Rows    []*rowReport       `json:"rows"`
	// BusyStarts counts runs that started while other processes kept the machine
	// busy (see --quiet-wait).
	BusyStarts int `json:"busy_starts"`
	// TLSCA is the CA file clients verified the servers against (--tls-ca): set when
	// the URLs are tls:// ones. User is the user the clients logged in as (--creds).
	TLSCA string `json:"tls_ca,omitempty"`
	User  string `json:"user,omitempty"`
}

// clientOptions are the connection options both brokers' clients get from --tls-ca
// and --creds (user:password): the CA that tls:// servers' certificates must chain
// to, and the user to log in as.
type clientOptions struct {
	tlsCA, user, password string
}

func (c clientOptions) nats() []nats.Option {
	var o []nats.Option
	if c.tlsCA != "" {
		o = append(o, nats.RootCAs(c.tlsCA))
	}
	if c.user != "" {
		o = append(o, nats.UserInfo(c.user, c.password))
	}
	return o
}

func (c clientOptions) tern() []tern.Option {
	var o []tern.Option
	if c.tlsCA != "" {
		o = append(o, tern.TLSCAFile(c.tlsCA))
	}
	if c.user != "" {
		o = append(o, tern.Credentials([]byte(c.user+":"+c.password)))
	}
	return o
}

// ternDial connects to a Tern server as ternbus.Dial does (no reconnection, the
// client-side pending limits lifted), with the options of --tls-ca and --creds.
func ternDial(url, name string, extra []tern.Option) (*ternbus.Bus, error) {
	if len(extra) == 0 {
		return ternbus.Dial(url, name)
	}
	opts := append([]tern.Option{tern.Name(name), tern.NoReconnect(), ternbus.Unlimited()}, extra...)
	nc, err := tern.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	return ternbus.New(nc), nil
}

func ternDialer(url string, extra []tern.Option) loadgen.Dialer {
	return func(name string) (loadgen.Bus, error) { return ternDial(url, name, extra) }
}

func main() { harness.Main("natsvs", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("natsvs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:14222", "NATS server URL, with --cluster one URL per node, comma-separated (empty skips NATS)")
	ternURL := fs.String("tern", "tern://127.0.0.1:17400", "Tern server URL, with --cluster one URL per node, comma-separated (empty skips Tern)")
	cluster := fs.Bool("cluster", false, "run the cluster matrix: each row places its connections on the nodes --nats and --tern list")
	runs := fs.Int("runs", 3, "runs of each row per broker; the table shows the median and the min–max")
	jsonPath := fs.String("json", "", "also write every run's result and the summary as JSON to this file")
	only := fs.String("only", "", "comma-separated rows to run, by key (pub-16) or workload (reqrep: both sizes); default all, see --list")
	scale := fs.Float64("scale", 1, "multiply every row's message count (0.1 for a quick look)")
	pause := fs.Duration("pause", 300*time.Millisecond, "idle time before each run, so the previous one's work has drained")
	quietWait := fs.Duration("quiet-wait", 30*time.Second, "before each run, wait up to this long for the machine's other CPU use to drop below --quiet-busy (0 = do not wait)")
	quietBusy := fs.Float64("quiet-busy", 0.25, "share of all CPUs busy (0–1) below which the machine counts as quiet")
	natsVersion := fs.String("nats-version", "", "NATS server version to report (default: as the server announces it)")
	ternVersion := fs.String("tern-version", "", "Tern server version to report (default: as the server announces it)")
	list := fs.Bool("list", false, "list the rows and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this load generator (both brokers' clients) to this file")
	tlsCA := fs.String("tls-ca", "", "PEM file of the CA that the servers' certificates chain to, for tls:// URLs (both brokers' clients verify against it)")
	creds := fs.String("creds", "", "user:password both brokers' clients log in with (empty: anonymous)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: natsvs [options]\n\nRuns the same workloads against a running NATS server and a running Tern server\n(with --cluster: a NATS cluster and a Tern cluster) and prints a Markdown table\ncomparing them. bench/run.sh starts both servers and calls this program;\nbench/cluster.sh does the same with two 3-node clusters and --cluster.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *scale <= 0 {
		return errors.New("--runs must be at least 1 and --scale positive")
	}
	copts := clientOptions{tlsCA: *tlsCA}
	if *creds != "" {
		user, password, ok := strings.Cut(*creds, ":")
		if !ok || user == "" {
			return fmt.Errorf("--creds: want user:password")
		}
		copts.user, copts.password = user, password
	}
	all := matrix(*scale)
	if *cluster {
		all = clusterMatrix(*scale)
	}
	rows := selectRows(all, *only)
	if *list {
		for _, r := range rows {
			fmt.Fprintf(stdout, "%-12s %s, %s, %d msgs per publisher\n", r.Key, r.Workload, tablefmt.Size(r.Cfg.Size), r.Cfg.Msgs)
		}
		return nil
	}
	if len(rows) == 0 {
		return fmt.Errorf("--only %q matches no row (see --list)", *only)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	// nodeURLs is a flag's list of servers: one, or with --cluster one per node.
	nodeURLs := func(flagName, list string) ([]string, error) {
		urls := harness.SplitList(list)
		if !*cluster && len(urls) > 1 {
			return nil, fmt.Errorf("--%s lists %d URLs: one URL per node needs --cluster", flagName, len(urls))
		}
		if need := nodesNeeded(rows); len(urls) < need {
			return nil, fmt.Errorf("--%s lists %d URLs; the rows place connections on %d nodes", flagName, len(urls), need)
		}
		return urls, nil
	}
	var systems []*system
	if *natsURL != "" {
		urls, err := nodeURLs("nats", *natsURL)
		if err != nil {
			return err
		}
		s := &system{Key: "nats", Name: "NATS", URL: strings.Join(urls, ","), Version: *natsVersion}
		for _, u := range urls {
			s.dials = append(s.dials, natsbus.Dialer(u, copts.nats()...))
		}
		if s.Version == "" {
			b, err := natsbus.Dial(urls[0], "natsvs-probe", copts.nats()...)
			if err != nil {
				return fmt.Errorf("NATS at %s: %w", urls[0], err)
			}
			s.Version = b.ServerVersion()
			_ = b.Close()
		}
		systems = append(systems, s)
	}
	if *ternURL != "" {
		urls, err := nodeURLs("tern", *ternURL)
		if err != nil {
			return err
		}
		s := &system{Key: "tern", Name: "Tern", URL: strings.Join(urls, ","), Version: *ternVersion}
		for _, u := range urls {
			s.dials = append(s.dials, ternDialer(u, copts.tern()))
			b, err := ternDial(u, "natsvs-probe", copts.tern())
			if err != nil {
				return fmt.Errorf("tern server at %s: %w", u, err)
			}
			if s.Version == "" {
				s.Version = b.ServerVersion()
			}
			_ = b.Close()
		}
		systems = append(systems, s)
	}
	if len(systems) == 0 {
		return errors.New("nothing to run: both --nats and --tern are empty")
	}

	rep := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "natsvs " + strings.Join(maskCreds(args), " "),
		Machine: host.Info(),
		Servers: map[string]*system{},
		Runs:    *runs,
		Scale:   *scale,
		TLSCA:   *tlsCA,
		User:    copts.user,
	}
	for _, s := range systems {
		rep.Servers[s.Key] = s
		if *cluster {
			rep.Nodes = len(s.dials)
		}
	}

	// A short untimed run per broker first, so connection set-up, first allocations
	// and page faults are not in the first measured row; in a cluster it crosses from
	// node 1 to node 2.
	warm := row{Cfg: loadgen.Config{Mode: loadgen.ModePubSub, Subs: 1, Size: 64, Msgs: 50_000}}
	if *cluster {
		warm.Cfg.Probe = true
		warm.Place = map[string][]int{loadgen.RoleSub: {1}}
	}
	for _, s := range systems {
		_, _ = loadgen.Run(ctx, placed(s.dials, warm.Place), warm.Cfg)
	}

	start := time.Now()
	for i, r := range rows {
		rr := &rowReport{Key: r.Key, Workload: r.Workload, Mode: r.Cfg.Mode, Size: r.Cfg.Size, Pubs: r.Cfg.Pubs, Subs: r.Cfg.Subs,
			Msgs: r.Cfg.Msgs, Systems: map[string]*outcome{}}
		for _, s := range systems {
			rr.Systems[s.Key] = &outcome{}
		}
		for n := range *runs {
			for _, s := range harness.RunOrder(systems, n) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				runtime.GC()
				time.Sleep(*pause)
				if host.WaitQuietOrNote(ctx, *quietWait, *quietBusy, stderr) {
					rep.BusyStarts++
				}
				res, err := loadgen.Run(ctx, placed(s.dials, r.Place), r.Cfg)
				o := rr.Systems[s.Key]
				status := ""
				if err != nil {
					o.Failures = append(o.Failures, err.Error())
					status = "  FAILED: " + err.Error()
				} else {
					o.Results = append(o.Results, res)
				}
				fmt.Fprintf(stderr, "[%d/%d] %-12s %-4s run %d/%d: %s %s, p99 %s%s\n", i+1, len(rows), r.Key, s.Name, n+1, *runs,
					tablefmt.Rate(res.MsgsPerSec), unitOf(r.Cfg.Mode), latency(res.Latency.P99, res.Latency.Samples), status)
			}
		}
		for _, o := range rr.Systems {
			o.summarize()
		}
		if t, nt := rr.Systems["tern"], rr.Systems["nats"]; t != nil && nt != nil {
			if nt.MsgsPerSec.Median > 0 && len(t.Results) > 0 {
				rr.RatioRate = t.MsgsPerSec.Median / nt.MsgsPerSec.Median
			}
			if nt.P99.Median > 0 && t.P99.Median > 0 {
				rr.RatioP99 = t.P99.Median / nt.P99.Median
			}
		}
		rep.Rows = append(rep.Rows, rr)
	}
	fmt.Fprintf(stderr, "matrix done in %s\n", time.Since(start).Round(time.Second))

	writeMarkdown(stdout, rep, systems)
	if *jsonPath != "" {
		return records.WriteJSON(*jsonPath, rep)
	}
	return nil
}

// maskCreds is args with the password of --creds replaced by "***", for the report.
func maskCreds(args []string) []string {
	out := slices.Clone(args)
	mask := func(v string) string {
		if user, _, ok := strings.Cut(v, ":"); ok {
			return user + ":***"
		}
		return v
	}
	for i := 0; i < len(out); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		if !strings.HasPrefix(out[i], "-") || name != "creds" {
			continue
		}
		if hasVal {
			out[i] = out[i][:len(out[i])-len(val)] + mask(val)
		} else if i+1 < len(out) {
			i++
			out[i] = mask(out[i])
		}
	}
	return out
}

func selectRows(rows []row, only string) []row {
	if only == "" {
		return rows
	}
	var out []row
	for _, r := range rows {
		for _, k := range strings.Split(only, ",") {
			if k = strings.TrimSpace(k); k != "" && (r.Key == k || strings.HasPrefix(r.Key, k+"-")) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func unitOf(mode string) string {
	if mode == loadgen.ModeReqRep {
		return "req/s"
	}
	return "msgs/s"
}

func latency(d time.Duration, samples int64) string {
	if samples == 0 {
		return "—"
	}
	return loadgen.FormatDuration(d)
}

func usDur(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

// rateCell is "median (min–max)" for a throughput.
func rateCell(o *outcome, runs int) string {
	if o == nil {
		return "—"
	}
	return tablefmt.RateCell(o.MsgsPerSec, len(o.Results), len(o.Failures), runs)
}

// latCell is "median (min–max)" for a latency percentile across runs.
func latCell(o *outcome, sp func(*outcome) spread, runs int) string {
	if o == nil || len(o.Results) == 0 {
		return "—"
	}
	v := sp(o)
	if v.Median == 0 {
		return "—"
	}
	s := loadgen.FormatDuration(usDur(v.Median))
	if len(o.Results) > 1 {
		s += " (" + loadgen.FormatDuration(usDur(v.Min)) + "–" + loadgen.FormatDuration(usDur(v.Max)) + ")"
	}
	return s + tablefmt.FailNote(len(o.Failures), runs)
}

func ratio(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}

func writeMarkdown(w io.Writer, rep *report, systems []*system) {
	m := rep.Machine
	if rep.Nodes > 0 {
		fmt.Fprintf(w, "## Tern vs NATS, %d-node clusters, %s\n\n", rep.Nodes, rep.Date)
	} else {
		fmt.Fprintf(w, "## Tern vs NATS, %s\n\n", rep.Date)
	}
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s memory, %s, GOMAXPROCS %d\n", m.CPUs, m.CPUModel, m.Memory, m.OS, m.GOMAXPROCS)
	fmt.Fprintf(w, "- load generator: %s, %d runs per row per broker, median (min–max)\n", m.Go, rep.Runs)
	if rep.TLSCA != "" {
		fmt.Fprintln(w, "- TLS: every client connection over TLS, the servers' certificate verified against a throwaway CA")
	}
	if rep.User != "" {
		fmt.Fprintf(w, "- authentication: every client logs in as user %q, whose permissions each server checks on every publish and subscription\n", rep.User)
	}
	if rep.BusyStarts > 0 {
		fmt.Fprintf(w, "- %d runs started while other processes kept the machine busy: treat their rows with care\n", rep.BusyStarts)
	}
	for _, s := range systems {
		fmt.Fprintf(w, "- %s %s at %s\n", s.Name, s.Version, s.URL)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | size | NATS msgs/s | Tern msgs/s | ratio Tern/NATS | NATS p99 | Tern p99 | ratio Tern/NATS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		n, t := r.Systems["nats"], r.Systems["tern"]
		workload := r.Workload
		if r.Mode == loadgen.ModeReqRep {
			workload += " — req/s, round trip"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", workload, tablefmt.Size(r.Size),
			rateCell(n, rep.Runs), rateCell(t, rep.Runs), ratio(r.RatioRate),
			latCell(n, func(o *outcome) spread { return o.P99 }, rep.Runs),
			latCell(t, func(o *outcome) spread { return o.P99 }, rep.Runs), ratio(r.RatioP99))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Latency detail (median across runs):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | size | NATS p50 | Tern p50 | NATS p99.9 | Tern p99.9 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	med := func(o *outcome, sp func(*outcome) spread) string {
		if o == nil || len(o.Results) == 0 || sp(o).Median == 0 {
			return "—"
		}
		return loadgen.FormatDuration(usDur(sp(o).Median))
	}
	for _, r := range rep.Rows {
		if r.Mode == loadgen.ModePub {
			continue
		}
		n, t := r.Systems["nats"], r.Systems["tern"]
		p50 := func(o *outcome) spread { return o.P50 }
		p999 := func(o *outcome) spread { return o.P999 }
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Workload, tablefmt.Size(r.Size), med(n, p50), med(t, p50), med(n, p999), med(t, p999))
	}
	var failed []string
	for _, r := range rep.Rows {
		for k, o := range r.Systems {
			for _, f := range o.Failures {
				failed = append(failed, fmt.Sprintf("- %s %s %s: %s", rep.Servers[k].Name, r.Workload, tablefmt.Size(r.Size), f))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Failed runs (not in the medians):")
		fmt.Fprintln(w)
		slices.Sort(failed)
		for _, f := range failed {
			fmt.Fprintln(w, f)
		}
	}
}
