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
//	replicatedvs compaction  a compacted topic's produce rate, disk bytes before
//	                       and after compaction, and what a reader finds, against
//	                       one running system (bench/compaction.sh)
package main

import (
	"context"
	"io"

	"github.com/tern-mq/tern/bench/internal/harness"
)

func main() { harness.Main("replicatedvs", run) }

const usage = `Usage: replicatedvs wait-js|kafka|report|kafkaapi|kafkaapi-report|compaction [options]

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
  compaction  produce keyed records to a compacted topic, watch its partition's
            directory shrink, and read it back: one Markdown row, JSON out

"replicatedvs COMMAND --help" lists a command's options. bench/replicated.sh and
bench/kafkaapi.sh start the systems and run these.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return harness.Dispatch(ctx, args, stdout, stderr, usage, map[string]harness.Func{
		"wait-js":         cmdWaitJS,
		"kafka":           cmdKafka,
		"report":          cmdReport,
		"kafkaapi":        cmdKafkaAPI,
		"kafkaapi-report": cmdKafkaAPIReport,
		"compaction":      cmdCompaction,
	})
}
