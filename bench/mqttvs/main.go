// Command mqttvs drives MQTT brokers with one load client (the bench module's own,
// bench/internal/mqttload, built on Tern's MQTT codec and speaking plain MQTT 3.1.1
// so every broker gets the same bytes) and prints their throughput, latency and
// idle-connection memory side by side: bench/mqtt.sh runs it against Mosquitto, Mochi and Tern.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tern-mq/tern/bench/internal/mqttload"
)

type broker struct {
	name, addr string
	pid        int         // for memory readings; 0 = unknown
	tls        *tls.Config // connections over TLS (--tls-ca); nil: plain TCP
}

// dial connects to b with a clean session, over TLS when b has a TLS configuration.
func dial(b broker, id string, local net.Addr) (*mqttload.Client, error) {
	return mqttload.DialWith(b.addr, mqttload.DialOptions{ClientID: id, Local: local, TLS: b.tls})
}

// tlsConfig is a client configuration trusting only the CA certificates in caFile.
func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// row is one throughput workload.
type row struct {
	key        string
	qos        byte
	size       int
	pubs, subs int
	fanIn      bool // subscribers take every publisher's topic ("bench/#")
	msgs       int  // messages published in all
}

func (r row) expected() int {
	switch {
	case r.fanIn:
		return r.msgs * r.subs
	case r.pubs == r.subs:
		return r.msgs // publisher i → subscriber i
	default:
		return r.msgs * r.subs // one topic, every subscriber
	}
}

func (r row) shape() string {
	return fmt.Sprintf("%d→%d", r.pubs, r.subs)
}

func matrix(scale float64) []row {
	var rows []row
	for _, qos := range []byte{0, 1} {
		for _, size := range []int{32, 1024} {
			base := 400000
			if size > 100 {
				base = 200000
			}
			if qos == 1 {
				base /= 2
			}
			n := func(f float64) int { return max(1000, int(float64(base)*f*scale)) }
			sz := "32"
			if size == 1024 {
				sz = "1k"
			}
			q := strconv.Itoa(int(qos))
			rows = append(rows,
				row{key: "q" + q + "-1to1-" + sz, qos: qos, size: size, pubs: 1, subs: 1, msgs: n(1)},
				row{key: "q" + q + "-10to10-" + sz, qos: qos, size: size, pubs: 10, subs: 10, msgs: n(1)},
				row{key: "q" + q + "-100to1-" + sz, qos: qos, size: size, pubs: 100, subs: 1, fanIn: true, msgs: n(1)},
				row{key: "q" + q + "-1to100-" + sz, qos: qos, size: size, pubs: 1, subs: 100, msgs: n(0.02)},
			)
		}
	}
	return rows
}

// result of one run of a row against one broker.
type result struct {
	rate     float64 // messages received per second
	received int
	took     time.Duration
	err      error
}

var runSeq atomic.Int64

// maxUnacked bounds the QoS 1 messages all publishers of a row keep unacknowledged.
const maxUnacked = 5000

func runRow(ctx context.Context, b broker, r row, window int) result {
	id := runSeq.Add(1)
	prefix := fmt.Sprintf("bench/%d", id)
	var got, last atomic.Int64
	subs := make([]*mqttload.Client, 0, r.subs)
	defer func() {
		for _, c := range subs {
			c.Close()
		}
	}()
	for i := range r.subs {
		c, err := dial(b, fmt.Sprintf("sub-%d-%d", id, i), nil)
		if err != nil {
			return result{err: err}
		}
		subs = append(subs, c)
		filter := prefix + "/t"
		switch {
		case r.fanIn:
			filter = prefix + "/#"
		case r.pubs == r.subs:
			filter = fmt.Sprintf("%s/t%d", prefix, i)
		}
		if err := c.Subscribe(filter, r.qos); err != nil {
			return result{err: err}
		}
		go func() { _ = c.Receive(&got, &last, nil) }()
	}
	pubs := make([]*mqttload.Client, 0, r.pubs)
	defer func() {
		for _, c := range pubs {
			c.Close()
		}
	}()
	for i := range r.pubs {
		c, err := dial(b, fmt.Sprintf("pub-%d-%d", id, i), nil)
		if err != nil {
			return result{err: err}
		}
		pubs = append(pubs, c)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, r.pubs)
	start := time.Now()
	for i, c := range pubs {
		topic := prefix + "/t"
		if r.fanIn {
			topic = fmt.Sprintf("%s/p%d", prefix, i)
		} else if r.pubs == r.subs {
			topic = fmt.Sprintf("%s/t%d", prefix, i)
		}
		n := r.msgs / r.pubs
		if i < r.msgs%r.pubs {
			n++
		}
		// All publishers together keep at most maxUnacked in flight, so a fan-in
		// stays inside every broker's per-subscriber queue (1,000,000 messages for
		// Mosquitto and Tern as bench/mqtt.sh sets them up, Mochi's default 8192
		// pending writes) instead of measuring its overflow.
		w := max(1, min(window, maxUnacked/r.pubs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Publish(topic, r.qos, n, r.size, w, 0, &stop); err != nil {
				errs <- err
			}
		}()
	}
	// Done when every expected message arrived, or nothing arrived for 3 s.
	want := int64(r.expected())
	lastProgress, lastCount := time.Now(), int64(0)
	for got.Load() < want {
		select {
		case <-ctx.Done():
			stop.Store(true)
			return result{err: ctx.Err()}
		case err := <-errs:
			stop.Store(true)
			return result{err: err}
		case <-time.After(20 * time.Millisecond):
		}
		if n := got.Load(); n != lastCount {
			lastProgress, lastCount = time.Now(), n
		} else if time.Since(lastProgress) > 3*time.Second {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	received := got.Load()
	end := time.Unix(0, last.Load())
	took := end.Sub(start)
	res := result{received: int(received), took: took}
	if took > 0 {
		res.rate = float64(received) / took.Seconds()
	}
	if received < want && r.qos > 0 {
		res.err = fmt.Errorf("%d of %d QoS 1 messages not delivered", want-received, want)
	}
	return res
}

// latencyRun publishes at a fixed rate from one client to one subscriber and returns
// the end-to-end latency histogram.
func latencyRun(b broker, qos byte, rate float64, d time.Duration) (*hdrhistogram.Histogram, int, error) {
	id := runSeq.Add(1)
	topic := fmt.Sprintf("lat/%d", id)
	sub, err := dial(b, fmt.Sprintf("lsub-%d", id), nil)
	if err != nil {
		return nil, 0, err
	}
	defer sub.Close()
	if err := sub.Subscribe(topic, qos); err != nil {
		return nil, 0, err
	}
	h := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	var mu sync.Mutex
	var got, last atomic.Int64
	go func() {
		_ = sub.Receive(&got, &last, func(l time.Duration) {
			mu.Lock()
			_ = h.RecordValue(max(1, l.Microseconds()))
			mu.Unlock()
		})
	}()
	pub, err := dial(b, fmt.Sprintf("lpub-%d", id), nil)
	if err != nil {
		return nil, 0, err
	}
	defer pub.Close()
	n := int(rate * d.Seconds())
	var stop atomic.Bool
	if err := pub.Publish(topic, qos, n, 32, 1024, rate, &stop); err != nil {
		return nil, 0, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return h, int(got.Load()), nil
}

// idleMemory opens n idle connections and returns the server's RSS growth per
// connection. Source addresses rotate over 127.0.0.1–127.0.0.8 so that n can exceed
// one address's ephemeral ports.
func idleMemory(b broker, n int) (perConn float64, before, after int64, err error) {
	if b.pid == 0 {
		return 0, 0, 0, fmt.Errorf("%s: no pid given (--pids)", b.name)
	}
	before, err = rss(b.pid)
	if err != nil {
		return 0, 0, 0, err
	}
	conns := make([]*mqttload.Client, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	id := runSeq.Add(1)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%8))}
				c, err := dial(b, fmt.Sprintf("idle-%d-%d", id, i), local)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, before, 0, firstErr
	}
	// Settle: Tern parks a connection after 2 s without input and its writer
	// ends 2 s after its last write (the CONNACK).
	time.Sleep(6 * time.Second)
	after, err = rss(b.pid)
	if err != nil {
		return 0, before, 0, err
	}
	return float64(after-before) / float64(n), before, after, nil
}

func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mqttvs:", err)
		os.Exit(1)
	}
}

func parseBrokers(spec, pids string) ([]broker, error) {
	pidOf := map[string]int{}
	for _, kv := range strings.Split(pids, ",") {
		if name, v, ok := strings.Cut(kv, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("--pids %q: %w", kv, err)
			}
			pidOf[name] = n
		}
	}
	var out []broker
	for _, kv := range strings.Split(spec, ",") {
		name, addr, ok := strings.Cut(kv, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--brokers %q: want name=host:port,...", spec)
		}
		out = append(out, broker{name: name, addr: addr, pid: pidOf[name]})
	}
	return out, nil
}

func run(ctx context.Context, args []string, out, progress io.Writer) error {
	fs := flag.NewFlagSet("mqttvs", flag.ContinueOnError)
	fs.SetOutput(progress)
	brokersFlag := fs.String("brokers", "", "name=host:port,... (the last is the broker measured: the table has its ratio over each of the others)")
	pids := fs.String("pids", "", "name=pid,... of the servers, for memory readings")
	runs := fs.Int("runs", 3, "runs per row per broker (median reported)")
	scale := fs.Float64("scale", 1, "multiplies every row's message count")
	only := fs.String("only", "", "comma-separated row keys or prefixes (q0, q1-100to1, ...); default all; none: no throughput rows")
	window := fs.Int("window", 256, "QoS 1 messages a publisher keeps unacknowledged")
	latRate := fs.Float64("latency-rate", 5000, "messages per second of the latency rows (0 skips them)")
	latTime := fs.Duration("latency-time", 5*time.Second, "length of each latency run")
	idle := fs.Int("idle-conns", 0, "idle connections for the memory row (0 skips it)")
	list := fs.Bool("list", false, "list the rows and exit")
	tlsCA := fs.String("tls-ca", "", "connect to every broker over TLS, trusting the CA certificates in this PEM file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rows := matrix(*scale)
	if *only != "" {
		var sel []row
		for _, r := range rows {
			for _, k := range strings.Split(*only, ",") {
				if k != "" && strings.HasPrefix(r.key, k) {
					sel = append(sel, r)
					break
				}
			}
		}
		if len(sel) == 0 && *only != "none" && (*latRate == 0 && *idle == 0) {
			return fmt.Errorf("--only %q matches no row", *only)
		}
		rows = sel
	}
	if *list {
		for _, r := range rows {
			fmt.Fprintf(out, "%-16s QoS %d, %d B, %s, %d messages published\n", r.key, r.qos, r.size, r.shape(), r.msgs)
		}
		return nil
	}
	brokers, err := parseBrokers(*brokersFlag, *pids)
	if err != nil {
		return err
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", *runs)
	}
	if *tlsCA != "" {
		cfg, err := tlsConfig(*tlsCA)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		for i := range brokers {
			brokers[i].tls = cfg
		}
	}

	fmt.Fprintf(out, "## MQTT: %s, %s\n\n", strings.Join(names(brokers), " vs "), time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "- load generator: bench/mqttvs (MQTT 3.1.1, one client for every broker), %d runs per row per broker, median (min–max); QoS 1 publishers keep %d unacknowledged (at most 5000 over all publishers of a row); subscribers acknowledge every message\n", *runs, *window)
	if *tlsCA != "" {
		fmt.Fprintln(out, "- TLS: every connection over TLS (Go crypto/tls client, TLS 1.2 or later, the brokers' certificate verified against a throwaway CA)")
	}
	fmt.Fprintln(out)
	if len(rows) > 0 {
		head := []string{"row", "QoS", "size", "pubs→subs", "delivered"}
		for _, b := range brokers {
			head = append(head, b.name+" msgs/s")
		}
		head = append(head, ratioHeads(brokers)...)
		tableRow(out, head...)
		fmt.Fprintln(out, "|"+strings.Repeat("---|", len(head)))
	}
	var notes []string
	for i, r := range rows {
		med := make([]float64, len(brokers))
		cells := make([]string, len(brokers))
		for bi, b := range brokers {
			var rates []float64
			failed := 0
			for k := range *runs {
				res := runRow(ctx, b, r, *window)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(progress, "[%d/%d] %-16s %-10s run %d/%d: %s msgs/s, %d of %d delivered in %v",
					i+1, len(rows), r.key, b.name, k+1, *runs, human(res.rate), res.received, r.expected(), res.took.Round(time.Millisecond))
				if res.err != nil {
					fmt.Fprintf(progress, "  FAILED: %v", res.err)
					notes = append(notes, fmt.Sprintf("%s %s run %d: %v", b.name, r.key, k+1, res.err))
					failed++
				} else {
					rates = append(rates, res.rate)
				}
				fmt.Fprintln(progress)
			}
			med[bi] = median(rates)
			if len(rates) > 0 {
				cells[bi] = fmt.Sprintf("%s (%s–%s)", human(med[bi]), human(slices.Min(rates)), human(slices.Max(rates)))
			} else {
				cells[bi] = "failed"
			}
			if failed > 0 && len(rates) > 0 {
				cells[bi] += fmt.Sprintf(" [%d failed]", failed)
			}
		}
		line := []string{r.key, strconv.Itoa(int(r.qos)), fmt.Sprintf("%d B", r.size), r.shape(), human(float64(r.expected()))}
		line = append(line, cells...)
		tableRow(out, append(line, ratioCells(med)...)...)
	}
	if len(rows) > 0 {
		fmt.Fprintln(out, "\nmsgs/s: messages received by all subscribers together, from the first publish to the last delivery. QoS 0 rows count what arrived; a broker may drop QoS 0 messages under overload (see notes).")
	}

	if *latRate > 0 {
		fmt.Fprintf(out, "\nEnd-to-end latency, 1→1, 32 B, %s msgs/s for %v (median of runs):\n\n", human(*latRate), *latTime)
		fmt.Fprintln(out, "| broker | QoS | p50 | p90 | p99 | p99.9 | max | received |")
		fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
		for _, qos := range []byte{0, 1} {
			for _, b := range brokers {
				var p50, p90, p99, p999, pmax []float64
				recv := 0
				for k := range *runs {
					h, n, err := latencyRun(b, qos, *latRate, *latTime)
					if err != nil {
						notes = append(notes, fmt.Sprintf("%s latency QoS %d run %d: %v", b.name, qos, k+1, err))
						continue
					}
					recv = n
					p50 = append(p50, float64(h.ValueAtQuantile(50)))
					p90 = append(p90, float64(h.ValueAtQuantile(90)))
					p99 = append(p99, float64(h.ValueAtQuantile(99)))
					p999 = append(p999, float64(h.ValueAtQuantile(99.9)))
					pmax = append(pmax, float64(h.Max()))
					fmt.Fprintf(progress, "latency %s QoS %d run %d: p50 %dµs p99 %dµs\n", b.name, qos, k+1, h.ValueAtQuantile(50), h.ValueAtQuantile(99))
				}
				us := func(v []float64) string { return fmt.Sprintf("%.0fµs", median(v)) }
				fmt.Fprintf(out, "| %s | %d | %s | %s | %s | %s | %s | %d |\n", b.name, qos, us(p50), us(p90), us(p99), us(p999), us(pmax), recv)
			}
		}
	}

	if *idle > 0 {
		fmt.Fprintf(out, "\nIdle connections: %d MQTT 3.1.1 connections (CONNECT, no subscriptions, keepalive off), server RSS before and after:\n\n", *idle)
		fmt.Fprintln(out, "| broker | RSS before | RSS after | per connection |")
		fmt.Fprintln(out, "|---|---|---|---|")
		for _, b := range brokers {
			per, before, after, err := idleMemory(b, *idle)
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s idle connections: %v", b.name, err))
				fmt.Fprintf(out, "| %s | failed | | |\n", b.name)
				continue
			}
			fmt.Fprintf(out, "| %s | %.1f MiB | %.1f MiB | %.2f KiB |\n", b.name, float64(before)/(1<<20), float64(after)/(1<<20), per/1024)
			fmt.Fprintf(progress, "idle %s: %.2f KiB per connection\n", b.name, per/1024)
			time.Sleep(2 * time.Second) // let the server close them before the next broker
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(out, "\nNotes:")
		for _, n := range notes {
			fmt.Fprintln(out, "-", n)
		}
	}
	return nil
}

// The last broker is the one measured: the throughput table has one ratio column for
// it over each of the others (with mosquitto, mochi, tern: tern/mosquitto and
// tern/mochi), above 1.00× where it is faster.
func ratioHeads(bs []broker) []string {
	var out []string
	for _, b := range bs[:max(0, len(bs)-1)] {
		out = append(out, bs[len(bs)-1].name+"/"+b.name)
	}
	return out
}

// ratioCells are the ratios of ratioHeads from each broker's median msgs/s; "–" where
// either median is missing (every run failed).
func ratioCells(med []float64) []string {
	var out []string
	for _, m := range med[:max(0, len(med)-1)] {
		if last := med[len(med)-1]; m > 0 && last > 0 {
			out = append(out, fmt.Sprintf("%.2f×", last/m))
		} else {
			out = append(out, "–")
		}
	}
	return out
}

// tableRow writes one row of a Markdown table.
func tableRow(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func names(bs []broker) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.name)
	}
	return out
}
