package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cliflags"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
)

const benchLong = `Runs a workload against a Tern server and prints throughput and latency.
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
subject and delete it afterwards unless --keep.`

const benchExample = `  tern bench --mode pubsub --subs 4 --size 16 --msgs 1000000
  tern bench --mode reqrep --duration 10s --json reqrep.json
  tern bench --mode streampub --msgs 200000 --window 4096
  tern bench --mode streamconsume --msgs 200000 --batch 256`

// benchOpts are the options of tern bench.
type benchOpts struct {
	cf       clientFlags // --server and --context
	jsonPath string
	cfg      loadgen.Config
	// Stream modes only.
	stream        string
	keep          bool
	window, batch int
	partitions    int
}

// newBenchCmd makes tern bench, its options parsed into o (a new one when nil).
func newBenchCmd(o *benchOpts) *cobra.Command {
	if o == nil {
		o = &benchOpts{}
	}
	cmd := &cobra.Command{
		Use:     "bench [options]",
		Short:   "Measure throughput and latency against a server",
		Long:    benchLong,
		Example: benchExample,
		Args:    argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.finish(cmd); err != nil {
				return err
			}
			return bench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr(), ternbus.Dialer)
		},
	}
	o.cf.registerServer(cmd)
	cfg, fs := &o.cfg, cmd.Flags()
	cfg.Mode = loadgen.ModePubSub
	fs.Var(cliflags.NewEnum(&cfg.Mode, append(append([]string(nil), loadgen.Modes...), loadgen.StreamModes...)...), "mode", "workload (see Modes above)")
	_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(append(append([]string(nil), loadgen.Modes...), loadgen.StreamModes...), cobra.ShellCompDirectiveNoFileComp))
	fs.StringVar(&cfg.Subject, "subject", "", "subject to publish to")
	_ = fs.SetAnnotation("subject", defaultAnnotation, []string{"a fresh random subject per run"})
	fs.IntVar(&cfg.Pubs, "pubs", 1, "publishers (requesters in reqrep), one connection each")
	fs.IntVar(&cfg.Subs, "subs", 1, "subscribers (queue members in queue, responders in reqrep), one connection each; ignored in pub mode")
	fs.IntVar(&cfg.Size, "size", 128, "payload size in bytes (8 or more to measure latency)")
	fs.IntVar(&cfg.Msgs, "msgs", 100_000, "messages (requests) per publisher; 0 with --duration for a timed run")
	fs.DurationVar(&cfg.Duration, "duration", 0, "publish for this long (e.g. 10s); with --msgs, stop at whichever comes first")
	fs.IntVar(&cfg.Rate, "rate", 0, "messages per second per publisher (0 = as fast as possible)")
	fs.StringVar(&cfg.Queue, "queue", "", "queue group name in queue and reqrep modes")
	_ = fs.SetAnnotation("queue", defaultAnnotation, []string{`"loadgen"`})
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "hard limit on the whole run")
	_ = fs.SetAnnotation("timeout", defaultAnnotation, []string{"duration + 30s, or an allowance per message + 30s"})
	fs.StringVar(&o.jsonPath, "json", "", "also write the result as JSON to this `file` (- for standard output)")
	fs.StringVar(&o.stream, "stream", "", "stream modes: stream `name`")
	_ = fs.SetAnnotation("stream", defaultAnnotation, []string{"a fresh unique name per run"})
	fs.BoolVar(&o.keep, "keep", false, "stream modes: keep the stream after the run instead of deleting it")
	fs.IntVar(&o.window, "window", 4096, "streampub: unacknowledged async publishes per publisher")
	fs.IntVar(&o.batch, "batch", 256, "streamconsume: messages per fetch")
	fs.IntVar(&o.partitions, "partitions", 1, "stream modes: partitions of the stream (messages get distinct keys when more than 1)")
	return cmd
}

// finish completes the options once parsed: the server from the environment or
// a context, and a timed run when only --duration bounds it.
func (o *benchOpts) finish(cmd *cobra.Command) error {
	if err := o.cf.resolve(); err != nil {
		return err
	}
	if o.cfg.Duration > 0 && !cmd.Flags().Changed("msgs") {
		o.cfg.Msgs = 0 // a timed run unless a count was asked for too
	}
	return nil
}

func bench(ctx context.Context, o *benchOpts, stdout, stderr io.Writer, dialer func(url string) loadgen.Dialer) error {
	server, jsonPath, cfg := o.cf.server, o.jsonPath, o.cfg
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
