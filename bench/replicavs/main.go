// Command replicavs measures two things about replicated streams (Raft groups of 3)
// on running 3-node clusters, Tern and NATS JetStream alike: what a publisher sees
// when the node leading its stream is killed (failover), and what a thousand idle
// groups cost the nodes (idle). bench/failover.sh and bench/idlegroups.sh start the
// clusters and run these.
//
//	replicavs wait-tern  wait until every Tern node's meta group has formed
//	replicavs failover   one failover run; appends a JSON line
//	replicavs idle       one idle-groups run; appends a JSON line
//	replicavs report     medians of the recorded runs, as Markdown (and JSON)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
	"github.com/tern-mq/tern/bench/internal/monitoring"
	"github.com/tern-mq/tern/bench/internal/records"
)

func main() { harness.Main("replicavs", run) }

const usageText = `Usage: replicavs wait-tern|failover|idle|report [options]

  wait-tern  wait until every node of a Tern cluster that replicates shows its meta
             group formed, with one leader and every node a voter (/cluster)
  failover   make a stream of 3 replicas, publish at a steady rate with message ids
             (retrying failed publishes with the same id), kill -9 the stream's
             leader part-way, then read the stream back from the surviving nodes;
             appends one JSON line to --out
  idle       the nodes' CPU and memory with no stream, then after making --streams
             streams of 3 replicas and waiting until each is led, over --window of
             idleness (/proc/<pid>/stat, /proc/<pid>/status); appends one JSON line
  report     failover|idle: the recorded runs as Markdown tables (median, min–max)

"replicavs COMMAND --help" lists a command's options.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return harness.Dispatch(ctx, args, stdout, stderr, usageText, map[string]harness.Func{
		"wait-tern": cmdWaitTern,
		"failover":  cmdFailover,
		"idle":      cmdIdle,
		"report":    cmdReport,
	})
}

// nodes are the options naming a running cluster's nodes.
type nodes struct {
	system, urls, names, pids *string
	quietWait                 *time.Duration
}

func addNodes(fs *flag.FlagSet) *nodes {
	return &nodes{
		system:    fs.String("system", "", "tern or js"),
		urls:      fs.String("urls", "", "client URLs, one per node in node order, comma-separated"),
		names:     fs.String("names", "", "the nodes' server names (as a stream's group names its leader), node order, comma-separated"),
		pids:      fs.String("pids", "", "the nodes' process ids, node order, comma-separated"),
		quietWait: fs.Duration("quiet-wait", 30*time.Second, "first wait up to this long until less than a quarter of the CPUs is busy (0 = do not wait)"),
	}
}

func (n *nodes) parse() (system, []string, []string, []int, error) {
	sys, err := systemOf(*n.system)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	urls, names := harness.SplitList(*n.urls), harness.SplitList(*n.names)
	pids, err := harness.ParsePIDs(*n.pids)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if len(urls) < 2 || len(names) != len(urls) || len(pids) != len(urls) {
		return nil, nil, nil, nil, fmt.Errorf("--urls, --names and --pids want one entry per node, at least two (got %d, %d, %d)", len(urls), len(names), len(pids))
	}
	return sys, urls, names, pids, nil
}

// waitQuiet waits for a quiet machine and says whether it was still busy.
func (n *nodes) waitQuiet(ctx context.Context, stderr io.Writer) bool {
	return host.WaitQuietOrNote(ctx, *n.quietWait, 0.25, stderr)
}

func cmdFailover(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicavs failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nd := addNodes(fs)
	out := fs.String("out", "", "append the run's result as one JSON line to this file (required)")
	runN := fs.Int("run", 1, "run number (in the message ids and the stream's subject)")
	rate := fs.Int("rate", 2000, "messages published per second")
	duration := fs.Duration("duration", 20*time.Second, "how long the publisher publishes")
	killAt := fs.Duration("kill-at", 10*time.Second, "when, after the first publish, the stream's leader is killed")
	size := fs.Int("size", 64, "payload bytes (at least 8)")
	clientOn := fs.String("client-on", "follower", "where the publisher connects: follower (a node that survives) or leader (the node killed)")
	retryWait := fs.Duration("retry-wait", 50*time.Millisecond, "first wait before a failed publish is sent again with the same id (doubling per attempt)")
	retryMax := fs.Duration("retry-max-wait", time.Second, "longest wait between attempts")
	retryFor := fs.Duration("retry-for", 30*time.Second, "retry a message this long after its first attempt; after that it counts as an error the client saw")
	readyTimeout := fs.Duration("ready-timeout", 60*time.Second, "bound on making the stream and waiting until every replica is current")
	readTimeout := fs.Duration("read-timeout", 120*time.Second, "bound on reading the stream back")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: replicavs failover [options]\n\nOne failover run against a running cluster (see replicavs --help).\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	sys, urls, names, pids, err := nd.parse()
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		return errors.New("--out is required")
	case *rate <= 0 || *duration <= 0 || *killAt <= 0 || *killAt >= *duration:
		return errors.New("--rate and --duration must be positive and --kill-at within --duration")
	case *clientOn != "follower" && *clientOn != "leader":
		return fmt.Errorf("--client-on %q: want follower or leader", *clientOn)
	case *retryWait <= 0 || *retryMax < *retryWait || *retryFor <= 0:
		return errors.New("--retry-wait, --retry-max-wait and --retry-for must be positive, the max at least the first wait")
	}
	busy := nd.waitQuiet(ctx, stderr)
	res := runFailover(ctx, failoverConfig{
		System: sys, URLs: urls, Names: names, PIDs: pids, Run: *runN, Stream: "FAILOVER", Replicas: 3,
		Rate: *rate, Duration: *duration, KillAt: *killAt, Size: *size, ClientOn: *clientOn,
		RetryWait: *retryWait, RetryMaxWait: *retryMax, RetryFor: *retryFor,
		ReadyTimeout: *readyTimeout, ReadTimeout: *readTimeout,
		Kill: func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) },
		Log:  stderr,
	})
	res.Busy = busy
	if res.Error != "" {
		fmt.Fprintf(stderr, "%s run %d: error: %s\n", res.System, res.Run, res.Error)
	} else {
		fmt.Fprintf(stderr, "%s run %d: first ack %.0f ms after the kill, longest gap %.0f ms, in-flight done %.0f ms; %d acked, %d errors retried, %d failed, %d lost, %d duplicated; new leader %s\n",
			res.System, res.Run, res.FirstAckMs, res.LongestGapMs, res.InFlightDoneMs, res.Acked, sumCounts(res.Errors), res.Failed, res.Lost, res.Duplicated, res.NewLeader)
	}
	return records.Append(*out, res)
}

func cmdIdle(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicavs idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nd := addNodes(fs)
	out := fs.String("out", "", "append the run's result as one JSON line to this file (required)")
	runN := fs.Int("run", 1, "run number")
	streams := fs.Int("streams", 1000, "streams to make")
	replicas := fs.Int("replicas", 3, "replicas of each stream")
	conc := fs.Int("concurrency", 16, "create (and info) requests in flight at once, each on its own connection")
	createTimeout := fs.Duration("create-timeout", 10*time.Minute, "bound on making every stream")
	ledTimeout := fs.Duration("led-timeout", 5*time.Minute, "bound on waiting, after making them, until every stream is led with every replica current")
	baseline := fs.Duration("baseline", 30*time.Second, "window measured before any stream is made (0 = none)")
	settle := fs.Duration("settle", 15*time.Second, "wait after every stream is led before measuring")
	window := fs.Duration("window", 60*time.Second, "the idle window measured")
	slice := fs.Duration("slice", 10*time.Second, "sub-windows whose CPU use is also reported (min, max)")
	clk := fs.Int("clk-tck", 100, "clock ticks per second of /proc/<pid>/stat (getconf CLK_TCK)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: replicavs idle [options]\n\nOne idle-groups run against a running cluster (see replicavs --help).\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	sys, urls, names, pids, err := nd.parse()
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		return errors.New("--out is required")
	case *streams <= 0 || *conc <= 0 || *window <= 0 || *clk <= 0:
		return errors.New("--streams, --concurrency, --window and --clk-tck must be positive")
	}
	nd.waitQuiet(ctx, stderr)
	res := runIdle(ctx, idleConfig{
		System: sys, URLs: urls, Names: names, PIDs: pids, Run: *runN, Streams: *streams, Replicas: *replicas,
		Concurrency: *conc, CreateTimeout: *createTimeout, LedTimeout: *ledTimeout,
		Baseline: *baseline, Settle: *settle, Window: *window, Slice: *slice, ClkTck: *clk, Log: stderr,
	})
	if res.Error != "" {
		fmt.Fprintf(stderr, "%s idle run %d: error: %s\n", res.System, res.Run, res.Error)
	} else {
		fmt.Fprintf(stderr, "%s idle run %d: %d streams made in %.1f s, led after %.1f s; idle: %.2f %% of a core, %.0f MiB RSS in all (other processes %.2f %%)\n",
			res.System, res.Run, res.Streams, res.CreateS, res.LedS, res.Idle.TotalCPUPct, res.Idle.TotalRSSMiB, res.Idle.OtherCPUPct)
	}
	if err := records.Append(*out, res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}

func cmdWaitTern(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicavs wait-tern", flag.ContinueOnError)
	fs.SetOutput(stderr)
	monitors := fs.String("monitors", "", "monitoring base URLs of every node (http://127.0.0.1:25313,...), comma-separated")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bases := harness.SplitList(*monitors)
	if len(bases) == 0 {
		return errors.New("wait-tern: --monitors is required")
	}
	start := time.Now()
	leader, err := monitoring.WaitTernMeta(ctx, bases, *timeout)
	if err != nil {
		return fmt.Errorf("wait-tern: %w", err)
	}
	fmt.Fprintf(stdout, "tern: meta group of %d formed, leader %s, after %s\n", len(bases), leader, time.Since(start).Round(time.Millisecond))
	return nil
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
