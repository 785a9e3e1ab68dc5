//go:build linux

// Command udpvs measures Tern's native protocol over reliable UDP beside the same
// protocol over TCP, between two network namespaces it creates (a veth pair; loss from
// the iptables statistic match): coordination packets per 1000 messages of a steady
// 16-byte stream, and throughput at 0, 1 and 5 % random loss. Run it as root:
// bench/udp.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

const (
	nsA, nsB     = "ternbench-a", "ternbench-b"
	addrA, addrB = "10.198.0.1", "10.198.0.2"
	port         = 17470
)

func sh(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func setup() error {
	_ = exec.Command("ip", "netns", "del", nsA).Run()
	_ = exec.Command("ip", "netns", "del", nsB).Run()
	steps := [][]string{
		{"ip", "netns", "add", nsA}, {"ip", "netns", "add", nsB},
		{"ip", "link", "add", "tbva", "type", "veth", "peer", "name", "tbvb"},
		{"ip", "link", "set", "tbva", "netns", nsA}, {"ip", "link", "set", "tbvb", "netns", nsB},
		{"ip", "netns", "exec", nsA, "ip", "addr", "add", addrA + "/24", "dev", "tbva"},
		{"ip", "netns", "exec", nsB, "ip", "addr", "add", addrB + "/24", "dev", "tbvb"},
		{"ip", "netns", "exec", nsA, "ip", "link", "set", "tbva", "up"},
		{"ip", "netns", "exec", nsB, "ip", "link", "set", "tbvb", "up"},
		{"ip", "netns", "exec", nsA, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", nsB, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := sh(s...); err != nil {
			return err
		}
	}
	return nil
}

func teardown() {
	_ = exec.Command("ip", "netns", "del", nsA).Run()
	_ = exec.Command("ip", "netns", "del", nsB).Run()
}

// in runs fn on a thread inside namespace ns; sockets made there stay there.
func in(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setLoss drops a random share of everything entering either namespace and resets
// the counting rules for header-only TCP segments.
func setLoss(p float64) error {
	for _, ns := range []string{nsA, nsB} {
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			if err := sh("ip", "netns", "exec", ns, "iptables", "-F", chain); err != nil {
				return err
			}
		}
		// Coordination packets, counted as they leave: TCP segments of at most 60
		// bytes (IP and TCP headers with options, no payload) and UDP datagrams of at
		// most 52 (IP, UDP, session header and an acknowledgement without NAKs, or a
		// ping; a datagram with a 16-byte message is 68 or more).
		if err := sh("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-p", "tcp", "-m", "length", "--length", "0:60", "-j", "ACCEPT"); err != nil {
			return err
		}
		if err := sh("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-p", "udp", "-m", "length", "--length", "0:52", "-j", "ACCEPT"); err != nil {
			return err
		}
		if p > 0 {
			if err := sh("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-m", "statistic", "--mode", "random",
				"--probability", fmt.Sprint(p), "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	return nil
}

// coordPackets reads the counting rules: TCP and UDP packets without payload sent
// by both namespaces since setLoss.
func coordPackets() (tcp, udp uint64, err error) {
	for _, ns := range []string{nsA, nsB} {
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
	err = in(nsA, func() error {
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
func stream(url string, n, size int, rate float64, limit time.Duration) (int, time.Duration, error) {
	pub, sub, err := pair(url)
	if err != nil {
		return 0, 0, err
	}
	defer pub.Close()
	defer sub.Close()
	var got atomic.Int64
	done := make(chan struct{})
	if _, err := sub.Subscribe("bench.udp", func(*tern.Msg) {
		if got.Add(1) == int64(n) {
			close(done)
		}
	}); err != nil {
		return 0, 0, err
	}
	if err := sub.Flush(); err != nil {
		return 0, 0, err
	}
	payload := make([]byte, size)
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		if err := pub.Publish("bench.udp", payload); err != nil {
			return int(got.Load()), time.Since(start), err
		}
	}
	_ = pub.Flush()
	select {
	case <-done:
	case <-time.After(limit):
	}
	return int(got.Load()), time.Since(start), nil
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
	flag.Parse()
	if err := setup(); err != nil {
		return err
	}
	defer teardown()

	var srv *server.Server
	if err := in(nsB, func() error {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.StoreDir = addrB, port, "", -1, ""
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
	tcpURL := fmt.Sprintf("tern://%s:%d", addrB, port)
	udpURL := fmt.Sprintf("udp://%s:%d", addrB, port)

	fmt.Fprintf(out, "## Native protocol over reliable UDP vs TCP, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "Two network namespaces joined by a veth pair; server in one, publisher and subscriber in the other.\n\n")

	// Coordination packets for a steady stream.
	fmt.Fprintf(out, "Coordination packets, steady stream of %d × 16 B at %.0f msgs/s (publisher and subscriber both in the client namespace):\n\n", *coordMsgs, *coordRate)
	fmt.Fprintln(out, "| transport | delivered | coordination packets | per 1000 messages |")
	fmt.Fprintln(out, "|---|---|---|---|")
	if err := setLoss(0); err != nil {
		return err
	}
	got, _, err := stream(tcpURL, *coordMsgs, 16, *coordRate, 10*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	tcpCoord, _, err := coordPackets()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| TCP | %d | %d (segments without payload, both ways) | %.1f |\n", got, tcpCoord, 1000*float64(tcpCoord)/float64(*coordMsgs))
	if err := setLoss(0); err != nil { // reset the counters
		return err
	}
	got, _, err = stream(udpURL, *coordMsgs, 16, *coordRate, 10*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	_, udpCoord, err := coordPackets()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| UDP | %d | %d (acknowledgements, probes, pings, both ways) | %.1f |\n\n", got, udpCoord, 1000*float64(udpCoord)/float64(*coordMsgs))

	fmt.Fprintf(out, "Throughput, %d messages as fast as the publisher goes:\n\n", *tputMsgs)
	fmt.Fprintln(out, "| loss | size | TCP msgs/s | UDP msgs/s | UDP/TCP |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, loss := range []float64{0, 0.01, 0.05} {
		if err := setLoss(loss); err != nil {
			return err
		}
		for _, size := range []int{16, 1024} {
			rates := map[string]float64{}
			for _, tr := range []struct{ name, url string }{{"tcp", tcpURL}, {"udp", udpURL}} {
				got, took, err := stream(tr.url, *tputMsgs, size, 0, 60*time.Second)
				if err != nil {
					return err
				}
				rates[tr.name] = float64(got) / took.Seconds()
				fmt.Fprintf(os.Stderr, "loss %.0f%% %d B %s: %d of %d in %v\n", loss*100, size, tr.name, got, *tputMsgs, took.Round(time.Millisecond))
			}
			fmt.Fprintf(out, "| %.0f%% | %d B | %.0f | %.0f | %.2f× |\n", loss*100, size, rates["tcp"], rates["udp"], rates["udp"]/rates["tcp"])
		}
	}
	return nil
}
