//go:build linux

// Command udpvs measures Tern's native protocol over reliable UDP beside the same
// protocol over TCP, between two network namespaces it creates (a veth pair; loss from
// the iptables statistic match): coordination packets per 1000 messages of a steady
// 16-byte stream, and throughput at 0, 1 and 5 % random loss. Run it as root:
// bench/udp.sh.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/netns"
	"github.com/tern-mq/tern/internal/server"
)

const port = 17470

var verbose *bool

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// spread prints the median with the range.
func spread(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	return fmt.Sprintf("%.0fk (%.0fk–%.0fk)", median(v)/1000, lo/1000, hi/1000)
}

// path is the pair of namespaces: the server in B, the clients in A.
var path *netns.Pair

// inServerNS and inClientNS run fn in the server's or the clients' namespace, or
// here with --loopback.
func inServerNS(fn func() error) error {
	if path == nil {
		return fn()
	}
	return netns.In(path.B, fn)
}

func inClientNS(fn func() error) error {
	if path == nil {
		return fn()
	}
	return netns.In(path.A, fn)
}

// setLoss drops a random share of everything entering either namespace and resets
// the counting rules for header-only TCP segments.
func setLoss(p float64) error {
	if path == nil {
		return nil
	}
	if err := path.SetLoss("", p); err != nil {
		return err
	}
	for _, ns := range []string{path.A, path.B} {
		if err := path.Exec(ns, "iptables", "-F", "OUTPUT"); err != nil {
			return err
		}
		// Coordination packets, counted as they leave: TCP segments of at most 60
		// bytes (IP and TCP headers with options, no payload) and UDP datagrams of at
		// most 52 (IP, UDP, session header and an acknowledgement without NAKs, or a
		// ping; a datagram with a 16-byte message is 68 or more).
		if err := path.Exec(ns, "iptables", "-A", "OUTPUT", "-p", "tcp", "-m", "length", "--length", "0:60", "-j", "ACCEPT"); err != nil {
			return err
		}
		if err := path.Exec(ns, "iptables", "-A", "OUTPUT", "-p", "udp", "-m", "length", "--length", "0:52", "-j", "ACCEPT"); err != nil {
			return err
		}
	}
	return nil
}

// coordPackets reads the counting rules: TCP and UDP packets without payload sent
// by both namespaces since setLoss.
func coordPackets() (tcp, udp uint64, err error) {
	for _, ns := range []string{path.A, path.B} {
		out, err := exec.Command("ip", "netns", "exec", ns, "iptables", "-L", "OUTPUT", "-v", "-x", "-n").CombinedOutput()
		if err != nil {
			return 0, 0, fmt.Errorf("iptables -L: %v: %s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && f[2] == "ACCEPT" {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				switch f[3] {
				case "tcp", "6":
					tcp += n
				case "udp", "17":
					udp += n
				}
			}
		}
	}
	return tcp, udp, nil
}

// pair connects a publisher and a subscriber in namespace A to the server in B.
func pair(url string) (pub, sub *tern.Conn, err error) {
	err = inClientNS(func() error {
		var err error
		if pub, err = tern.Connect(url, tern.Name("pub")); err != nil {
			return err
		}
		sub, err = tern.Connect(url, tern.Name("sub"))
		return err
	})
	return pub, sub, err
}

// stream publishes n messages of size bytes, at rate per second (0: as fast as
// possible), and returns how many arrived and how long it took.
// Payloads of 8 bytes or more carry their send time; lat gets each message's
// latency, in microseconds.
func stream(url string, n, size int, rate float64, limit time.Duration) (int, time.Duration, error) {
	got, took, _, err := streamLat(url, n, size, rate, limit)
	return got, took, err
}

func streamLat(url string, n, size int, rate float64, limit time.Duration) (int, time.Duration, *hdrhistogram.Histogram, error) {
	lat := hdrhistogram.New(1, 60_000_000, 3)
	pub, sub, err := pair(url)
	if err != nil {
		return 0, 0, lat, err
	}
	defer pub.Close()
	defer sub.Close()
	var got atomic.Int64
	done := make(chan struct{})
	if _, err := sub.Subscribe("bench.udp", func(m *tern.Msg) {
		if len(m.Data) >= 8 {
			_ = lat.RecordValue(max(1, (time.Now().UnixNano()-int64(binary.BigEndian.Uint64(m.Data)))/1000))
		}
		if got.Add(1) == int64(n) {
			close(done)
		}
	}); err != nil {
		return 0, 0, lat, err
	}
	if err := sub.Flush(); err != nil {
		return 0, 0, lat, err
	}
	payload := make([]byte, size)
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		if size >= 8 {
			binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		}
		if err := pub.Publish("bench.udp", payload); err != nil {
			return int(got.Load()), time.Since(start), lat, err
		}
	}
	_ = pub.Flush()
	select {
	case <-done:
	case <-time.After(limit):
	}
	if *verbose {
		ps, _ := pub.TransportStats()
		ss, _ := sub.TransportStats()
		fmt.Fprintf(os.Stderr, "pub %+v\nsub %+v\n", ps, ss)
	}
	return int(got.Load()), time.Since(start), lat, nil
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "udpvs:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	coordMsgs := flag.Int("coord-msgs", 20000, "messages of the steady 16 B stream")
	coordRate := flag.Float64("coord-rate", 5000, "messages per second of the steady stream")
	tputMsgs := flag.Int("msgs", 100000, "messages per throughput run")
	latRate := flag.Float64("latency-rate", 2000, "messages per second of the latency runs (0 skips them)")
	latFor := flag.Duration("latency-for", 5*time.Second, "length of each latency run")
	verbose = flag.Bool("v", false, "print each run's transport counters (publisher and subscriber) to stderr")
	runs := flag.Int("runs", 3, "runs per throughput row; the table shows the median")
	only := flag.String("only", "", "run only this throughput row, e.g. 0.05/1024/udp (loss/size/transport), and skip the rest")
	loopback := flag.Bool("loopback", false, "server and clients on 127.0.0.1 in this namespace, no loss: throughput and latency rows only (no root needed)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run (server and clients) to this file")
	flag.Parse()
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
	host, losses := "127.0.0.1", []float64{0}
	if !*loopback {
		var err error
		if path, err = netns.NewPair("ternbench", 198); err != nil {
			return err
		}
		defer path.Close()
		host, losses = path.AddrB, []float64{0, 0.01, 0.05}
	}

	var srv *server.Server
	if err := inServerNS(func() error {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.StoreDir = host, port, "", -1, ""
		cfg.Anonymous = "all" // the client is in another network namespace
		var err error
		if srv, err = server.New(cfg, nil); err != nil {
			return err
		}
		return srv.Start()
	}); err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	tcpURL := fmt.Sprintf("tern://%s:%d", host, port)
	udpURL := fmt.Sprintf("udp://%s:%d", host, port)

	if *only != "" {
		var loss float64
		var size int
		var tr string
		if _, err := fmt.Sscanf(strings.ReplaceAll(*only, "/", " "), "%g %d %s", &loss, &size, &tr); err != nil {
			return fmt.Errorf("--only %q: want loss/size/transport, e.g. 0.05/1024/udp", *only)
		}
		if err := setLoss(loss); err != nil {
			return err
		}
		url := map[string]string{"tcp": tcpURL, "udp": udpURL}[tr]
		got, took, err := stream(url, *tputMsgs, size, 0, 60*time.Second)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "loss %.0f%% %d B %s: %d of %d in %v, %.0f msgs/s\n", loss*100, size, tr, got, *tputMsgs, took.Round(time.Millisecond), float64(got)/took.Seconds())
		return nil
	}
	fmt.Fprintf(out, "## Native protocol over reliable UDP vs TCP, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	if *loopback {
		fmt.Fprintf(out, "Loopback (127.0.0.1), server and clients in one process; no loss.\n\n")
	} else {
		fmt.Fprintf(out, "Two network namespaces joined by a veth pair (no segmentation offload: every packet at most the 1500-byte MTU, as on a real link); server in one, publisher and subscriber in the other; loss from the iptables statistic match on both namespaces' input.\n\n")
		if err := coordination(out, tcpURL, udpURL, *coordMsgs, *coordRate); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Throughput, %d messages as fast as the publisher goes, median of %d runs (min–max):\n\n", *tputMsgs, *runs)
	fmt.Fprintln(out, "| loss | size | TCP msgs/s | UDP msgs/s | UDP/TCP |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, loss := range losses {
		if err := setLoss(loss); err != nil {
			return err
		}
		for _, size := range []int{16, 1024} {
			rates := map[string][]float64{}
			for range *runs {
				for _, tr := range []struct{ name, url string }{{"tcp", tcpURL}, {"udp", udpURL}} {
					got, took, err := stream(tr.url, *tputMsgs, size, 0, 60*time.Second)
					if err != nil {
						return err
					}
					rates[tr.name] = append(rates[tr.name], float64(got)/took.Seconds())
					fmt.Fprintf(os.Stderr, "loss %.0f%% %d B %s: %d of %d in %v\n", loss*100, size, tr.name, got, *tputMsgs, took.Round(time.Millisecond))
				}
			}
			tcp, udp := median(rates["tcp"]), median(rates["udp"])
			fmt.Fprintf(out, "| %.0f%% | %d B | %s | %s | %.2f× |\n", loss*100, size, spread(rates["tcp"]), spread(rates["udp"]), udp/tcp)
		}
	}
	if *latRate <= 0 {
		return nil
	}
	n := int(*latRate * latFor.Seconds())
	fmt.Fprintf(out, "\nLatency, publish to delivery, 16 B at %.0f msgs/s for %v (%d messages):\n\n", *latRate, *latFor, n)
	fmt.Fprintln(out, "| loss | transport | p50 | p90 | p99 | p99.9 | max | delivered |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		if err := setLoss(loss); err != nil {
			return err
		}
		for _, tr := range []struct{ name, url string }{{"TCP", tcpURL}, {"UDP", udpURL}} {
			got, _, h, err := streamLat(tr.url, n, 16, *latRate, 30*time.Second)
			if err != nil {
				return err
			}
			us := func(q float64) string { return (time.Duration(h.ValueAtQuantile(q)) * time.Microsecond).String() }
			fmt.Fprintf(out, "| %.0f%% | %s | %s | %s | %s | %s | %s | %d |\n", loss*100, tr.name, us(50), us(90), us(99), us(99.9),
				(time.Duration(h.Max()) * time.Microsecond).String(), got)
		}
	}
	return nil
}

// coordination counts the packets without payload of a steady 16 B stream over
// each transport.
func coordination(out io.Writer, tcpURL, udpURL string, n int, rate float64) error {
	// Coordination packets for a steady stream.
	fmt.Fprintf(out, "Coordination packets, steady stream of %d × 16 B at %.0f msgs/s (publisher and subscriber both in the client namespace):\n\n", n, rate)
	fmt.Fprintln(out, "| transport | delivered | coordination packets | per 1000 messages |")
	fmt.Fprintln(out, "|---|---|---|---|")
	if err := setLoss(0); err != nil {
		return err
	}
	got, _, err := stream(tcpURL, n, 16, rate, 10*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	tcpCoord, _, err := coordPackets()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| TCP | %d | %d (segments without payload, both ways) | %.1f |\n", got, tcpCoord, 1000*float64(tcpCoord)/float64(n))
	if err := setLoss(0); err != nil { // reset the counters
		return err
	}
	got, _, err = stream(udpURL, n, 16, rate, 10*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	_, udpCoord, err := coordPackets()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| UDP | %d | %d (acknowledgements, probes, pings, both ways) | %.1f |\n\n", got, udpCoord, 1000*float64(udpCoord)/float64(n))

	return nil
}
