package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
  pub      publishers only, no subscribers (publish throughput)
  pubsub   every subscriber gets every message (fan-out); msgs/s counts deliveries
  queue    subscribers share one queue group; each message goes to one member
  reqrep   requesters send requests one at a time; responders in a queue group echo

Examples:
  tern bench --mode pubsub --subs 4 --size 16 --msgs 1000000
  tern bench --mode reqrep --duration 10s --json reqrep.json

Options:
`

// benchFlags parses the options of tern bench into a loadgen configuration.
func benchFlags(args []string, out io.Writer) (server, jsonPath string, cfg loadgen.Config, err error) {
	fs := flag.NewFlagSet("tern bench", flag.ContinueOnError)
	fs.SetOutput(out)
	defServer := os.Getenv("TERN_URL")
	if defServer == "" {
		defServer = tern.DefaultURL
	}
	fs.StringVar(&server, "server", defServer, "server URL (env TERN_URL)")
	fs.StringVar(&cfg.Mode, "mode", loadgen.ModePubSub, "workload: pub, pubsub, queue or reqrep")
	fs.StringVar(&cfg.Subject, "subject", "", "subject to publish to (default: a fresh random subject per run)")
	fs.IntVar(&cfg.Pubs, "pubs", 1, "publishers (requesters in reqrep), one connection each")
	fs.IntVar(&cfg.Subs, "subs", 1, "subscribers (queue members in queue, responders in reqrep), one connection each; ignored in pub mode")
	fs.IntVar(&cfg.Size, "size", 128, "payload size in bytes (8 or more to measure latency)")
	fs.IntVar(&cfg.Msgs, "msgs", 100_000, "messages (requests) per publisher; 0 with --duration for a timed run")
	fs.DurationVar(&cfg.Duration, "duration", 0, "publish for this long (e.g. 10s); with --msgs, stop at whichever comes first")
	fs.IntVar(&cfg.Rate, "rate", 0, "messages per second per publisher (0 = as fast as possible)")
	fs.StringVar(&cfg.Queue, "queue", "", "queue group name in queue and reqrep modes (default \"loadgen\")")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "hard limit on the whole run (default: duration + 30s, or an allowance per message + 30s)")
	fs.StringVar(&jsonPath, "json", "", "also write the result as JSON to this file (- for standard output)")
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
	server, jsonPath, cfg, err := benchFlags(args, stderr)
	if err != nil {
		return err
	}
	bound := fmt.Sprintf("%d msgs per publisher", cfg.Msgs)
	switch {
	case cfg.Msgs == 0:
		bound = cfg.Duration.String()
	case cfg.Duration > 0:
		bound += " or " + cfg.Duration.String()
	}
	fmt.Fprintf(stderr, "tern bench: %s against %s (%s)\n", cfg.Mode, server, bound)
	start := time.Now()
	res, runErr := loadgen.Run(ctx, dialer(server), cfg)
	if runErr != nil && res.Sent == 0 && !errors.Is(runErr, loadgen.ErrIncomplete) {
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
