#!/usr/bin/env bash
# Replicated streams on this machine, in one run: a 3-node NATS JetStream cluster
# with R3 streams (bench/streamvs --replicas 3), then a 3-broker Apache Kafka cluster
# with replication factor 3 (Kafka's ProducerPerformance and ConsumerPerformance),
# one after the other, and one report; Tern R3 (a 3-node cluster with cluster_size 3)
# runs beside JetStream R3 in the same streamvs run.
#
# Installs what is missing (nats-server, pinned in bench/lib.sh, with go install;
# Kafka's jars from Maven Central, bench/kafka.sh), builds the harnesses, starts each
# cluster on loopback on non-default ports, waits until it is ready, measures, and
# stops exactly the processes it started, by pid, on EXIT, INT and TERM; the stores
# live in a temporary directory that is deleted.
#
# Usage: bench/replicated.sh [--scale F] [--runs N] [--replay-bytes SIZE] [--quiet-wait D]
#   --scale F          multiplies every row's message count (default 1; 0.1 for a quick
#                      check that everything works, not a measurement)
#   --runs N           runs of each row (default 3); the tables show median (min–max)
#   --replay-bytes S   bytes the replay rows pre-fill and read, 1 KiB messages
#                      (default: 1GiB times the scale)
#   --quiet-wait D     before each run, wait up to D for other processes' CPU use to
#                      settle (default 30s; 0: not at all)
#   --list             the rows of both sides
# Environment:
#   JS_BASE (24500)     JetStream node i: client JS_BASE+10i, route +1, monitoring +2
#   KAFKA_BASE (29100)  Kafka node i: client KAFKA_BASE+10i, controller quorum +1
#   KAFKA_HEAP ("-Xmx1G -Xms1G")  each broker's heap
#   KAFKA_PARTITIONS (1)          partitions of every topic
#   KAFKA_ALT_PROPS (linger.ms=0) producer properties of the extra 16 B Kafka row
#                                 (empty: no such row)
#   KAFKA_PACED_RATE (1000)       records/s of the paced Kafka latency row (0: none)
#   STREAM_ROWS (pubasync16,pubasync1k,pubsync,workqueue,workqueue1k,replay1g)
#                                 streamvs rows run against JetStream R3
#   STREAM_PAYLOADS (zeros)       random: streamvs payloads of random bytes (--random-payloads)
#   JS_LEADER (any)               local: move each JetStream stream's leader to the node the
#                                 clients connect to (streamvs --js-leader), as Tern's is
#   SYSTEMS (js,kafka)            which clusters to run
#   TERN_R3 (1)                   0: no Tern R3 cluster
#   TERN_BASE (24700)             Tern node i: client TERN_BASE+10i, route +1, gossip +2, monitoring +3
#   TERN_ARGS                     more arguments for every Tern node (e.g. "--sync always")
#   TERN_CPUPROFILE=DIR           run Tern under bench/ternserve, a CPU profile per node
#                                 in DIR (tern1.prof .. tern3.prof)
#   OUT (bench/out)               results in $OUT/replicated
# Outputs in $OUT/replicated: results.md and results.json (both systems, one table
# format), streams.json and streamvs.md (streamvs's own), kafka.json, kafka-tools.log
# (every Kafka tool's output), the servers' configs and logs.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

SCALE=1
RUNS=3
REPLAY_BYTES=
QUIET=30s
LIST=
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--list | -list) LIST=1; shift ;;
	--scale | -scale) SCALE=$2; shift 2 ;;
	--scale=* | -scale=*) SCALE=${1#*=}; shift ;;
	--runs | -runs) RUNS=$2; shift 2 ;;
	--runs=* | -runs=*) RUNS=${1#*=}; shift ;;
	--replay-bytes | -replay-bytes) REPLAY_BYTES=$2; shift 2 ;;
	--replay-bytes=* | -replay-bytes=*) REPLAY_BYTES=${1#*=}; shift ;;
	--quiet-wait | -quiet-wait) QUIET=$2; shift 2 ;;
	--quiet-wait=* | -quiet-wait=*) QUIET=${1#*=}; shift ;;
	*) echo "replicated.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$RUNS" in '' | *[!0-9]* | 0) echo "replicated.sh: --runs wants a positive number" >&2; exit 2 ;; esac
awk -v s="$SCALE" 'BEGIN { exit !(s + 0 > 0) }' || { echo "replicated.sh: --scale wants a positive number" >&2; exit 2; }
# The replay rows read scale x 1 GiB unless told otherwise (at least 1 MiB).
[ -n "$REPLAY_BYTES" ] || REPLAY_BYTES=$(awk -v s="$SCALE" 'BEGIN { b = int(s * 1073741824); if (b < 1048576) b = 1048576; print b }')

JS_BASE=${JS_BASE:-24500}
TERN_BASE=${TERN_BASE:-24700}
KAFKA_PARTITIONS=${KAFKA_PARTITIONS:-1}
KAFKA_ALT_PROPS=${KAFKA_ALT_PROPS-linger.ms=0}
KAFKA_PACED_RATE=${KAFKA_PACED_RATE:-1000}
STREAM_ROWS=${STREAM_ROWS:-pubasync16,pubasync1k,pubsync,workqueue,workqueue1k,replay1g}
SYSTEMS=${SYSTEMS:-js,kafka}
TERN_R3=${TERN_R3:-1}
OUT=${OUT:-bench/out}
ROUT=$OUT/replicated
JS_NODES=3
has() { case ",$SYSTEMS," in *,"$1",*) return 0 ;; esac; return 1; }

mkdir -p "$ROUT"
BENCH=replicated.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/kafka.sh
. bench/r3clusters.sh

SV_COMMON=(--scale "$SCALE" --runs "$RUNS" --replay-bytes "$REPLAY_BYTES" --quiet-wait "$QUIET")
[ "${STREAM_PAYLOADS:-zeros}" = random ] && SV_COMMON+=(--random-payloads)
SV_COMMON+=(--js-leader "${JS_LEADER:-any}")
KAFKA_ROWS=(--scale "$SCALE" --replay-bytes "$REPLAY_BYTES" --alt-props "$KAFKA_ALT_PROPS" --paced-rate "$KAFKA_PACED_RATE")
if [ -n "$LIST" ]; then
	echo "JetStream R3 (bench/streamvs --replicas 3):"
	go -C bench run ./streamvs --list --only "$STREAM_ROWS" "${SV_COMMON[@]}" | sed 's/^/  /'
	echo "Kafka RF3 (ProducerPerformance, ConsumerPerformance):"
	go -C bench run ./replicatedvs kafka --list "${KAFKA_ROWS[@]}" | sed 's/^/  /'
	exit 0
fi

# --- install, check ports, build ----------------------------------------------------------
has js && NATS_SERVER=$(go_tool nats-server)
has kafka && kafka_install
ports=()
if has js; then
	# shellcheck disable=SC2207 # numbers
	ports+=($(r3_all_ports js))
fi
if has kafka; then
	# shellcheck disable=SC2207 # numbers
	ports+=($(kafka_ports))
fi
if [ "$TERN_R3" = 1 ]; then
	# shellcheck disable=SC2207 # numbers
	ports+=($(r3_all_ports tern))
fi
require_free_ports "JS_BASE / KAFKA_BASE / TERN_BASE" "${ports[@]}"
echo "== building bench/streamvs and bench/replicatedvs"
bench_build "$ROUT/streamvs" ./streamvs
bench_build "$ROUT/replicatedvs" ./replicatedvs
REPLICATEDVS=$ROUT/replicatedvs # its wait-js says when the JetStream cluster is ready

# --- processes started here; stopped by pid --------------------------------------------------
# Both clusters are r3clusters.sh's: JetStream R3 (tag nats: nats-n<i>.conf and .log)
# and Tern R3 (tag tern: tern-n<i>.log), stores in RUN_DIR.
RUN_DIR=$(mktemp -d /tmp/sbench-replicated.XXXXXX)
bench_stop_on_exit r3_stop kafka_stop_cluster

# --- TERN R3 ---------------------------------------------------------------------------------
# A 3-node Tern cluster that replicates (--cluster-size 3) on 127.0.0.1, node i on
# TERN_BASE+10i (client), +1 (routes), +2 (gossip), +3 (monitoring); streamvs runs its
# rows against it and JetStream R3 alternately (--replicas 3: each stream a Raft group
# of 3). Tern's default fsync policy, as JetStream's and Kafka's own.
start_tern_r3() {
	r3_build # and replicavs, whose wait-tern says when the meta group has formed
	TERN_BIN=$(tern_server_bin "$ROUT/tern" "$ROUT")
	r3_start tern tern
	SV_DRIVERS=${SV_DRIVERS:+$SV_DRIVERS,}tern
	SV_ARGS+=(--tern-url "tern://127.0.0.1:$(r3_port tern 1)" --tern-pid "$(r3_pid tern 1)"
		--tern-version "$("$ROUT/tern" version | sed -n 's/^tern *//p')")
}

# --- machine ---------------------------------------------------------------------------------
machine_head
machine_disk "$RUN_DIR"
machine_go
machine_java
echo

rm -f "$ROUT/streams.json" "$ROUT/kafka.json" "$ROUT/kafka-tools.log"
report_args=()
failed=

# --- JetStream R3 (and Tern R3, once it exists) ------------------------------------------------
SV_DRIVERS=
SV_ARGS=()
if has js; then
	echo "== JetStream R3: $JS_NODES nats-server nodes on 127.0.0.1 (client ports $(r3_port js 1), $(r3_port js 2), $(r3_port js 3))"
	r3_start js nats
	nats_version=$("$NATS_SERVER" --version 2>&1 | sed -n 's/^nats-server: *v\{0,1\}//p')
	SV_DRIVERS=js
	SV_ARGS+=(--js-url "nats://127.0.0.1:$(r3_port js 1)" --js-version "$nats_version")
fi
if [ "$TERN_R3" = 1 ]; then
	start_tern_r3
fi
if [ -n "$SV_DRIVERS" ]; then
	echo "== streamvs --replicas 3 --drivers $SV_DRIVERS (progress on stderr)"
	if run_job "$ROUT/streamvs" --drivers "$SV_DRIVERS" "${SV_ARGS[@]}" --replicas 3 --only "$STREAM_ROWS" "${SV_COMMON[@]}" \
		--json "$ROUT/streams.json" >"$ROUT/streamvs.md"; then
		report_args+=(--streams "$ROUT/streams.json")
	else
		echo "replicated.sh: the streamvs run failed; the report has no JetStream R3 rows" >&2
		failed=1
	fi
	r3_stop
fi

# --- Kafka RF3 ---------------------------------------------------------------------------------
if has kafka; then
	echo
	echo "== Kafka RF3: $KAFKA_NODES brokers (KRaft, each also a controller) on 127.0.0.1 ($(kafka_bootstrap))"
	kafka_start_cluster "$RUN_DIR/kafka" "$ROUT"
	jvm=(--jvm-opt=-Xmx512M)
	for o in "${KAFKA_JVM_OPTS[@]}" "-Dlog4j2.configurationFile=$KAFKA_TOOLS_LOG4J"; do jvm+=("--jvm-opt=$o"); done
	if run_job "$ROUT/replicatedvs" kafka --java java --classpath "$KAFKA_LIBS/*" "${jvm[@]}" \
		--bootstrap "$(kafka_bootstrap)" --brokers "$KAFKA_NODES" --partitions "$KAFKA_PARTITIONS" --replication-factor 3 --min-insync 2 \
		--version "$KAFKA_VERSION" --broker-config "$ROUT/kafka-n1.properties" --runs "$RUNS" --quiet-wait "$QUIET" \
		"${KAFKA_ROWS[@]}" --json "$ROUT/kafka.json" --log "$ROUT/kafka-tools.log"; then
		report_args+=(--kafka "$ROUT/kafka.json")
	else
		echo "replicated.sh: the Kafka run failed; see $ROUT/kafka-tools.log and the brokers' logs" >&2
		failed=1
	fi
	kafka_stop_cluster
fi

# --- report --------------------------------------------------------------------------------------
if [ -f "$ROUT/streams.json" ] || [ -f "$ROUT/kafka.json" ]; then
	"$ROUT/replicatedvs" report --nodes "$JS_NODES" "${report_args[@]}" --md "$ROUT/results.md" --json "$ROUT/results.json"
	echo
	cat "$ROUT/results.md"
	echo
	echo "== written: $ROUT/results.md, $ROUT/results.json"
fi
[ -z "$failed" ]
