// Command replicatedvs is the part of the replicated-stream comparison
// (bench/replicated.sh) that bench/streamvs does not do: waiting for a JetStream
// cluster to be ready, running Apache Kafka's own load tools (ProducerPerformance,
// ConsumerPerformance) against a running Kafka cluster and parsing what they print,
// and writing one report from streamvs's results (JetStream R3, later Tern R3) and
// Kafka's.
//
//	replicatedvs wait-js   wait until every JetStream node agrees on a meta leader
//	replicatedvs kafka     the Kafka rows, against running brokers; JSON out
//	replicatedvs report    one Markdown and JSON report from streamvs's and kafka's JSON
//	replicatedvs kafkaapi  the Kafka API rows (bench/kafkaapi.sh) against one running
//	                       system, Kafka or Tern, with the same Kafka clients; JSON out
//	replicatedvs kafkaapi-report  Tern beside Kafka from kafkaapi's JSON files
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "replicatedvs:", err)
		os.Exit(1)
	}
}

const usage = `Usage: replicatedvs wait-js|kafka|report|kafkaapi|kafkaapi-report [options]

  wait-js   wait until every node of a JetStream cluster names the same meta
            leader and the leader sees every other node as current
  kafka     run the Kafka rows (ProducerPerformance, ConsumerPerformance) against
            running brokers, --runs times each, and write their results as JSON
  report    one Markdown report (stdout or --md) and JSON (--json) from
            streamvs's --json file and kafka's
  kafkaapi  the Kafka API rows (ProducerPerformance, ConsumerPerformance, a
            franz-go end-to-end latency harness) against one running system,
            Kafka or Tern, --runs times each, with each run's server peak RSS
  kafkaapi-report  Tern beside Kafka, one node and three, from kafkaapi's JSON

"replicatedvs COMMAND --help" lists a command's options. bench/replicated.sh and
bench/kafkaapi.sh start the systems and run these.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "wait-js":
		return cmdWaitJS(ctx, args[1:], stderr)
	case "kafka":
		return cmdKafka(ctx, args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "kafkaapi":
		return cmdKafkaAPI(ctx, args[1:], stdout, stderr)
	case "kafkaapi-report":
		return cmdKafkaAPIReport(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// parseBytes reads a size: 1073741824, 1GiB, 256MiB, 512KiB (also G, M, K, GB, MB,
// KB as powers of 1024), as streamvs's --replay-bytes does.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GiB, 256MiB, 4194304)", s)
	}
	return int64(v * float64(mult)), nil
}
