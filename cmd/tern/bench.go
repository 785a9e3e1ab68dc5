package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
)

func init() {
	register(command{name: "bench", summary: "measure throughput and latency against a server", run: runBench})
}

const benchUsage = `Usage: tern bench [options]

Runs a workload against a Tern server and prints throughput and latency.
Every publisher and subscriber has its own connection. Payloads of 8 bytes or
more carry their send time, so subscribers measure latency under load; reqrep
measures the round trip of one outstanding request per requester.

Modes:
  pub            publishers only, no subscribers (publish throughput)
  pubsub         every subscriber gets every message (fan-out); msgs/s counts deliveries
  queue          subscribers share one queue group; each message goes to one member
  reqrep         requesters send requests one at a time; responders in a queue group echo
  streampub      publishers publish into a stream asynchronously, up to --window
                 unacknowledged each; msgs/s counts acknowledged messages, latency is
                 publish to acknowledgement
  streamconsume  the stream is filled with --msgs messages (not timed), then one pull
                 consumer fetches them in batches of --batch, acknowledging each

The stream modes create a stream with a unique name (or --stream) capturing the
subject and delete it afterwards unless --keep.

Examples:
  tern bench --mode pubsub --subs 4 --size 16 --msgs 1000000
  tern bench --mode reqrep --duration 10s --json reqrep.json
  tern bench --mode streampub --msgs 200000 --window 4096
  tern bench --mode streamconsume --msgs 200000 --batch 256

Options:
`

// benchFlags parses the options of tern bench into a loadgen configuration.
func benchFlags(args []string, out io.Writer) (server, jsonPath string, cfg loadgen.Config, err error) {
	o, err := benchOptions(args, out)
	return o.server, o.jsonPath, o.cfg, err
}

// benchOpts are the parsed options of tern bench.
type benchOpts struct {
	server, jsonPath string
	cfg              loadgen.Config
	// Stream modes only.
	stream        string
	keep          bool
	window, batch int
	partitions    int
}

// benchOptions parses every option of tern bench, the stream modes' included.
func benchOptions(args []string, out io.Writer) (o benchOpts, err error) {
	server, jsonPath, cfg := &o.server, &o.jsonPath, &o.cfg
	fs := flag.NewFlagSet("tern bench", flag.ContinueOnError)
	fs.SetOutput(out)
	defServer := os.Getenv("TERN_URL")
	if defServer == "" {
		defServer = tern.DefaultURL
	}
	fs.StringVar(server, "server", defServer, "server URL (env TERN_URL)")
	fs.StringVar(&cfg.Mode, "mode", loadgen.ModePubSub, "workload: pub, pubsub, queue, reqrep, streampub or streamconsume")
	fs.StringVar(&cfg.Subject, "subject", "", "subject to publish to (default: a fresh random subject per run)")
	fs.IntVar(&cfg.Pubs, "pubs", 1, "publishers (requesters in reqrep), one connection each")
	fs.IntVar(&cfg.Subs, "subs", 1, "subscribers (queue members in queue, responders in reqrep), one connection each; ignored in pub mode")
	fs.IntVar(&cfg.Size, "size", 128, "payload size in bytes (8 or more to measure latency)")
	fs.IntVar(&cfg.Msgs, "msgs", 100_000, "messages (requests) per publisher; 0 with --duration for a timed run")
	fs.DurationVar(&cfg.Duration, "duration", 0, "publish for this long (e.g. 10s); with --msgs, stop at whichever comes first")
	fs.IntVar(&cfg.Rate, "rate", 0, "messages per second per publisher (0 = as fast as possible)")
	fs.StringVar(&cfg.Queue, "queue", "", "queue group name in queue and reqrep modes (default \"loadgen\")")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "hard limit on the whole run (default: duration + 30s, or an allowance per message + 30s)")
	fs.StringVar(jsonPath, "json", "", "also write the result as JSON to this file (- for standard output)")
	fs.StringVar(&o.stream, "stream", "", "stream modes: stream name (default: a fresh unique name per run)")
	fs.BoolVar(&o.keep, "keep", false, "stream modes: keep the stream after the run instead of deleting it")
	fs.IntVar(&o.window, "window", 4096, "streampub: unacknowledged async publishes per publisher")
	fs.IntVar(&o.batch, "batch", 256, "streamconsume: messages per fetch")
	fs.IntVar(&o.partitions, "partitions", 1, "stream modes: partitions of the stream (messages get distinct keys when more than 1)")
	fs.Usage = func() {
		fmt.Fprint(out, benchUsage)
		fs.PrintDefaults()
	}
	if err = fs.Parse(args); err != nil {
		return
	}
	if fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
		return
	}
	msgsSet := false
	fs.Visit(func(f *flag.Flag) { msgsSet = msgsSet || f.Name == "msgs" })
	if cfg.Duration > 0 && !msgsSet {
		cfg.Msgs = 0 // a timed run unless a count was asked for too
	}
	return
}

func runBench(ctx context.Context, args []string) error {
	return bench(ctx, args, os.Stdout, os.Stderr, ternbus.Dialer)
}

func bench(ctx context.Context, args []string, stdout, stderr io.Writer, dialer func(url string) loadgen.Dialer) error {
	o, err := benchOptions(args, stderr)
	if err != nil {
		return err
	}
	server, jsonPath, cfg := o.server, o.jsonPath, o.cfg
	bound := fmt.Sprintf("%d msgs per publisher", cfg.Msgs)
	switch {
	case cfg.Msgs == 0:
		bound = cfg.Duration.String()
	case cfg.Mode == loadgen.ModeStreamConsume:
		bound = fmt.Sprintf("%d msgs", cfg.Msgs)
	case cfg.Duration > 0:
		bound += " or " + cfg.Duration.String()
	}
	fmt.Fprintf(stderr, "tern bench: %s against %s (%s)\n", cfg.Mode, server, bound)
	start := time.Now()
	var (
		res    any
		sent   uint64
		runErr error
	)
	if loadgen.IsStreamMode(cfg.Mode) {
		var r loadgen.StreamResult
		r, runErr = loadgen.RunStream(ctx, loadgen.StreamConfig{Config: cfg, URL: server, Stream: o.stream, Keep: o.keep,
			Window: o.window, Batch: o.batch, Partitions: o.partitions})
		res, sent = r, r.Sent
	} else {
		d, transport := withTransportStats(dialer(server))
		var r loadgen.Result
		r, runErr = loadgen.Run(ctx, d, cfg)
		r.Transport = transport()
		res, sent = r, r.Sent
	}
	if runErr != nil && sent == 0 && !errors.Is(runErr, loadgen.ErrIncomplete) {
		return runErr // the run never started: bad options, or no server
	}
	fmt.Fprintln(stdout, res)
	if jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if jsonPath == "-" {
			_, err = stdout.Write(b)
		} else {
			err = os.WriteFile(jsonPath, b, 0o644)
		}
		if err != nil {
			return errors.Join(runErr, err)
		}
	}
	if runErr != nil {
		return fmt.Errorf("after %s: %w", time.Since(start).Round(time.Millisecond), runErr)
	}
	return nil
}

// withTransportStats wraps d to remember the connections it makes; the function it
// returns sums their reliable-UDP counters, nil when none ran over UDP.
func withTransportStats(d loadgen.Dialer) (loadgen.Dialer, func() *loadgen.TransportStats) {
	var (
		mu    sync.Mutex
		conns []*tern.Conn
	)
	wrapped := func(name string) (loadgen.Bus, error) {
		b, err := d(name)
		if c, ok := b.(interface{ Conn() *tern.Conn }); ok && err == nil {
			mu.Lock()
			conns = append(conns, c.Conn())
			mu.Unlock()
		}
		return b, err
	}
	sum := func() *loadgen.TransportStats {
		mu.Lock()
		defer mu.Unlock()
		var total *loadgen.TransportStats
		for _, c := range conns {
			st, ok := c.TransportStats()
			if !ok {
				continue
			}
			if total == nil {
				total = &loadgen.TransportStats{}
			}
			total.DataPackets += st.DataPackets
			total.CoordPackets += st.CoordPackets
			total.Retransmits += st.Retransmits
			total.NAKs += st.NAKs
			total.Duplicates += st.Duplicates
			total.MaxRTT = max(total.MaxRTT, st.RTT)
		}
		return total
	}
	return wrapped, sum
}
