// Command mqttclustervs measures MQTT on running 3-node clusters, Tern (with
// cluster_size, so persistent sessions and QoS 1/2 publishes go through its
// replicated MQTT group) and NATS (MQTT on JetStream, streams of 3 replicas) alike,
// with the bench module's one MQTT 3.1.1 load client (bench/internal/mqttload):
// QoS 1 throughput and latency from node 1 to a subscriber on node 2, and what a
// persistent subscriber sees when its node is killed and it resumes on node 3.
// bench/mqttcluster.sh starts the clusters and runs these.
//
//	mqttclustervs ready       wait until every node serves MQTT persistent sessions
//	mqttclustervs throughput  the throughput rows; one JSON line per run
//	mqttclustervs resume      one resume-after-node-loss run; one JSON line
//	mqttclustervs report      medians of the recorded runs, as Markdown (and JSON)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
)

func main() { harness.Main("mqttclustervs", run) }

const usageText = `Usage: mqttclustervs ready|throughput|resume|report [options]

  ready       wait until every node of a running cluster serves a persistent MQTT
              session (CONNECT with clean session off, a QoS 1 SUBSCRIBE), and for
              Tern until every node's /cluster shows the MQTT group led
  throughput  QoS 1 and QoS 2 throughput rows against a running cluster: publishers
              on node 1, one subscriber on node 2 (persistent or clean session);
              appends one JSON line per run to --out
  resume      a persistent QoS 1 subscriber on node 2, a publisher on node 1 at a
              fixed rate; kill -9 of node 2; the subscriber resumes its session on
              node 3; appends one JSON line to --out
  report      the recorded runs (--throughput, --resume) as Markdown tables

"mqttclustervs COMMAND --help" lists a command's options.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return harness.Dispatch(ctx, args, stdout, stderr, usageText, map[string]harness.Func{
		"ready":      cmdReady,
		"throughput": cmdThroughput,
		"resume":     cmdResume,
		"report":     cmdReport,
	})
}

// clusterFlags name a running cluster's nodes, in node order.
type clusterFlags struct {
	system, mqtt, monitors, pids, names *string
	quietWait                           *time.Duration
}

func addCluster(fs *flag.FlagSet) *clusterFlags {
	return &clusterFlags{
		system:    fs.String("system", "", "tern or js (NATS)"),
		mqtt:      fs.String("mqtt", "", "the nodes' MQTT addresses host:port, node order, comma-separated"),
		monitors:  fs.String("monitors", "", "the nodes' monitoring base URLs (http://127.0.0.1:26313,...), node order"),
		pids:      fs.String("pids", "", "the nodes' process ids, node order (resume kills node 2's)"),
		names:     fs.String("names", "", "the nodes' server names (as leaders are reported), node order"),
		quietWait: fs.Duration("quiet-wait", 30*time.Second, "first wait up to this long until less than a quarter of the CPUs is busy (0 = do not wait)"),
	}
}

// cluster is a running cluster as the flags name it.
type cluster struct {
	System   string // "tern" or "js" (NATS)
	MQTT     []string
	Monitors []string
	PIDs     []int
	Names    []string
}

func (f *clusterFlags) parse(needPIDs bool) (cluster, error) {
	c := cluster{System: *f.system, MQTT: harness.SplitList(*f.mqtt), Monitors: harness.SplitList(*f.monitors), Names: harness.SplitList(*f.names)}
	if c.System != "tern" && c.System != "js" {
		return c, fmt.Errorf("--system %q: want tern or js", c.System)
	}
	if len(c.MQTT) != 3 || len(c.Monitors) != 3 {
		return c, fmt.Errorf("--mqtt and --monitors want three entries each, node order (got %d, %d)", len(c.MQTT), len(c.Monitors))
	}
	pids, err := harness.ParsePIDs(*f.pids)
	if err != nil {
		return c, fmt.Errorf("--pids: %w", err)
	}
	c.PIDs = pids
	if len(c.Names) != 0 && len(c.Names) != 3 {
		return c, fmt.Errorf("--names wants three entries, node order (got %d)", len(c.Names))
	}
	if needPIDs && len(c.PIDs) != 3 {
		return c, fmt.Errorf("--pids wants three entries, node order (got %d)", len(c.PIDs))
	}
	return c, nil
}

// waitQuiet waits for a quiet machine and says whether it was still busy.
func (f *clusterFlags) waitQuiet(ctx context.Context, stderr io.Writer) bool {
	return host.WaitQuietOrNote(ctx, *f.quietWait, 0.25, stderr)
}

// msSince is b − a in milliseconds, both Unix nanoseconds.
func msSince(a, b int64) float64 { return float64(b-a) / 1e6 }
