#!/usr/bin/env bash
# Tern's Kafka API beside Apache Kafka 4.4.0, with the same Kafka clients against
# both, one system at a time, in one run: a single node (one KRaft broker, topics of
# replication factor 1; `tern server`) and three nodes (3 KRaft brokers, replication
# factor 3, min.insync.replicas 2; 3 Tern nodes with --cluster-size 3, topics of 3
# replicas). Topics are made through the Kafka admin API (CreateTopics from
# franz-go's kadm), the same request to both. (Not TopicCommand: Java's AdminClient
# fails on Tern's CreateTopics answer, whose per-topic configs are null.)
#
# Rows (bench/replicatedvs kafkaapi; `bench/kafkaapi.sh --list`): Kafka's
# ProducerPerformance at 100 B and 1 KiB with acks=1 and acks=all, unthrottled;
# ConsumerPerformance (one consumer group member reading a pre-filled topic from the
# start); end-to-end latency at fixed rates with a franz-go producer and consumer in
# one process; each run's peak RSS (VmHWM) of the servers, summed over a cluster,
# and the CPU time per record of the servers (utime+stime of their pids, summed)
# and of the client (the harness process for the franz-go rows, the tool's JVM,
# start-up included, for ProducerPerformance and ConsumerPerformance), over the same
# measured phase.
#
# Installs what is missing (Kafka's jars from Maven Central, bench/kafka.sh), builds
# tern and the harness, checks that every port it uses is free, starts each system
# on loopback, measures, and stops exactly the processes it started, by pid, on EXIT,
# INT and TERM; the stores live in a temporary directory that is deleted.
#
# Usage: bench/kafkaapi.sh [--scale F] [--runs N] [--partitions P] [--nodes 1,3]
#                          [--only KEYS] [--e2e-rates R1,R2] [--quiet-wait D]
#                          [--no-interleave] [--list]
#   --scale F        multiplies every row's record count (default 1; 0.1 for a quick
#                    check that everything works, not a measurement)
#   --runs N         runs of each row per system (default 3): median (min–max)
#   --partitions P   partitions of every topic, both systems (default 1)
#   --nodes LIST     which setups: 1 (single node), 3 (clusters); default 1,3
#   --only KEYS      comma-separated row keys (see --list)
#   --e2e-rates R    records/s of the end-to-end latency rows (default 1000,10000)
#   --quiet-wait D   before each run, wait up to D for other processes' CPU use to
#                    settle (default 30s; 0: not at all)
#   --no-interleave  all runs of one system, then all of the other (one start of
#                    each per setup). By default, with both systems and more than
#                    one run, the runs go in rounds: each round starts each system
#                    afresh and runs every row once, the systems taking turns (the
#                    first of a round alternates), so that a machine whose speed
#                    drifts over minutes weighs on both alike
#   --list           the rows
# Environment:
#   KAFKA_BASE (29400)   Kafka node i: client KAFKA_BASE+10i, controller quorum +1
#   KAFKA_HEAP ("-Xmx1G -Xms1G")  each broker's heap (Kafka's own start script's)
#   TERN_BASE (29600)    Tern node i: client TERN_BASE+10i, route +1, gossip +2,
#                        monitoring +3, Kafka API +5 (the single node is node 1)
#   TERN_ARGS            more `tern server` options for every Tern node
#   SYSTEMS (kafka,tern) which systems to run
#   TERN_CPUPROFILE=DIR  run Tern under bench/ternserve, writing a CPU profile per
#                        node into DIR (tern.prof single node, tern1..3.prof cluster)
#   OUT (bench/out)      results in $OUT/kafkaapi
# Outputs in $OUT/kafkaapi: results.md (the tables: records/s, p99, peak RSS, server
# and client CPU µs/rec), kafka-1.json, tern-1.json, kafka-3.json, tern-3.json (every
# run, with its CPU seconds and µs per record), tools.log (every Kafka tool's output), the
# servers' configs and logs.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

SCALE=1
RUNS=3
PARTS=1
NODES=1,3
ONLY=
RATES=1000,10000
QUIET=30s
LIST=
INTERLEAVE=1
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--list | -list) LIST=1; shift ;;
	--no-interleave | -no-interleave) INTERLEAVE=; shift ;;
	--scale | -scale) SCALE=$2; shift 2 ;;
	--scale=*) SCALE=${1#*=}; shift ;;
	--runs | -runs) RUNS=$2; shift 2 ;;
	--runs=*) RUNS=${1#*=}; shift ;;
	--partitions | -partitions) PARTS=$2; shift 2 ;;
	--partitions=*) PARTS=${1#*=}; shift ;;
	--nodes | -nodes) NODES=$2; shift 2 ;;
	--nodes=*) NODES=${1#*=}; shift ;;
	--only | -only) ONLY=$2; shift 2 ;;
	--only=*) ONLY=${1#*=}; shift ;;
	--e2e-rates | -e2e-rates) RATES=$2; shift 2 ;;
	--e2e-rates=*) RATES=${1#*=}; shift ;;
	--quiet-wait | -quiet-wait) QUIET=$2; shift 2 ;;
	--quiet-wait=*) QUIET=${1#*=}; shift ;;
	*) echo "kafkaapi.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$RUNS" in '' | *[!0-9]* | 0) echo "kafkaapi.sh: --runs wants a positive number" >&2; exit 2 ;; esac
case "$PARTS" in '' | *[!0-9]* | 0) echo "kafkaapi.sh: --partitions wants a positive number" >&2; exit 2 ;; esac
awk -v s="$SCALE" 'BEGIN { exit !(s + 0 > 0) }' || { echo "kafkaapi.sh: --scale wants a positive number" >&2; exit 2; }
for n in ${NODES//,/ }; do
	case "$n" in 1 | 3) ;; *) echo "kafkaapi.sh: --nodes takes 1 and/or 3" >&2; exit 2 ;; esac
done

KAFKA_BASE=${KAFKA_BASE:-29400}
TERN_BASE=${TERN_BASE:-29600}
JS_BASE=${JS_BASE:-0} # r3clusters.sh's JetStream side is not used here
R3_KAFKA=1            # r3clusters.sh: Tern's Kafka API on every node (TERN_BASE+10i+5)
SYSTEMS=${SYSTEMS:-kafka,tern}
OUT=${OUT:-bench/out}
ROUT=$OUT/kafkaapi
has() { case ",$SYSTEMS," in *,"$1",*) return 0 ;; esac; return 1; }

mkdir -p "$ROUT"
BENCH=kafkaapi.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/kafka.sh
. bench/r3clusters.sh

HARNESS_ROWS=(--scale "$SCALE" --e2e-rates "$RATES")
[ -z "$ONLY" ] || HARNESS_ROWS+=(--only "$ONLY")
if [ -n "$LIST" ]; then
	go -C bench run ./replicatedvs kafkaapi --list "${HARNESS_ROWS[@]}"
	exit 0
fi

# --- install, check ports, build -------------------------------------------------------------
# Kafka's jars whatever SYSTEMS says: its tools are the clients of both systems.
kafka_install
ports=()
if has kafka; then
	# shellcheck disable=SC2207 # numbers
	ports+=($(KAFKA_NODES=3 kafka_ports))
fi
if has tern; then
	# shellcheck disable=SC2207 # numbers
	ports+=($(r3_all_ports tern))
fi
require_free_ports "KAFKA_BASE / TERN_BASE" "${ports[@]}"
echo "== building tern, bench/replicatedvs and bench/replicavs into ${ROUT#"$PWD"/}"
r3_build
TERN_BIN=$(tern_server_bin "$ROUT/tern" "$ROUT")
tern_version=$("$ROUT/tern" version | sed -n 's/^tern *//p')

# --- processes started here; stopped by pid ---------------------------------------------------
RUN_DIR=$(mktemp -d /tmp/sbench-kafkaapi.XXXXXX)
TERN1_PID=
stop_tern1() {
	stop_pid "$TERN1_PID" "tern server" 30
	TERN1_PID=
}
bench_stop_on_exit kafka_stop_cluster stop_tern1 r3_stop

# --- machine -----------------------------------------------------------------------------------
machine_head
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_disk "$RUN_DIR"
machine_go
machine_java
echo "tern:         $tern_version ($(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', modified'))"
echo

# The tools' JVM options: Kafka's perf-test scripts' (-Xmx512M), quiet logging.
KAFKA_TOOLS_LOG4J=$RUN_DIR/log4j2-tools.properties
kafka_log4j "$KAFKA_TOOLS_LOG4J" WARN SYSTEM_ERR
JVM=(--jvm-opt=-Xmx512M)
for o in "${KAFKA_JVM_OPTS[@]}" "-Dlog4j2.configurationFile=$KAFKA_TOOLS_LOG4J"; do JVM+=("--jvm-opt=$o"); done
rm -f "$ROUT"/kafka-[13].json "$ROUT"/tern-[13].json "$ROUT"/kafka-[13].r*.json "$ROUT"/tern-[13].r*.json "$ROUT/tools.log" "$ROUT/results.md" \
	"$ROUT"/kafka-n[123]*.r[0-9]*.log "$ROUT"/tern-single.r[0-9]*.log "$ROUT"/tern3-n[123].r[0-9]*.log
failed=

# harness runs the rows ROUND_RUNS times into $ROUT/<system>-<nodes>$ROUND_SUFFIX.json.
ROUND_RUNS=$RUNS
ROUND_SUFFIX=
harness() { # system nodes bootstrap pids setup [config]: the rows against a running system
	local sys=$1 nodes=$2 rf=1 version extra=()
	[ "$nodes" = 1 ] || rf=3
	case "$sys" in kafka) version=$KAFKA_VERSION ;; tern) version=$tern_version ;; esac
	[ -z "${6:-}" ] || extra=(--config "$6")
	echo "== $sys, $nodes node(s): replicatedvs kafkaapi (progress on stderr)"
	if ! run_job "$REPLICATEDVS" kafkaapi --system "$sys" --version "$version" --setup "$5" --classpath "$KAFKA_LIBS/*" "${JVM[@]}" \
		--bootstrap "$3" --brokers "$nodes" --pids "$4" --partitions "$PARTS" --replication-factor "$rf" \
		--runs "$ROUND_RUNS" --quiet-wait "$QUIET" "${HARNESS_ROWS[@]}" "${extra[@]}" \
		--json "$ROUT/$sys-$nodes$ROUND_SUFFIX.json" --log "$ROUT/tools.log"; then
		echo "kafkaapi.sh: the $sys run on $nodes node(s) failed; see $ROUT/tools.log and the servers' logs" >&2
		failed=1
	fi
}

keep_round_logs() { # name...: a round's server logs get its suffix, so the next round's do not overwrite them
	local name
	[ -n "$ROUND_SUFFIX" ] || return 0
	for name in "$@"; do
		[ ! -f "$ROUT/$name.log" ] || mv -f "$ROUT/$name.log" "$ROUT/$name$ROUND_SUFFIX.log"
	done
}

run_kafka() { # nodes: start Kafka, the rows, stop
	local nodes=$1
	KAFKA_NODES=$nodes
	echo "== Kafka $KAFKA_VERSION: $nodes broker(s) (KRaft, each also a controller) on 127.0.0.1 ($(kafka_bootstrap))"
	rm -rf "$RUN_DIR/kafka"
	kafka_start_cluster "$RUN_DIR/kafka" "$ROUT"
	# kafka_start_cluster points the tools' log4j at its data directory; ours stays.
	KAFKA_TOOLS_LOG4J=$RUN_DIR/log4j2-tools.properties
	pids=$(IFS=,; echo "${KAFKA_PIDS[*]}")
	if [ "$nodes" = 1 ]; then
		setup="one broker, Kafka's defaults (no fsync per message), heap $KAFKA_HEAP"
	else
		setup="$nodes brokers, min.insync.replicas 2 (broker default), Kafka's defaults otherwise, heap $KAFKA_HEAP each"
	fi
	harness kafka "$nodes" "$(kafka_bootstrap)" "$pids" "$setup" "$ROUT/kafka-n1.properties"
	kafka_stop_cluster
	keep_round_logs kafka-n1 kafka-n2 kafka-n3 kafka-n1-format kafka-n2-format kafka-n3-format
	rm -rf "$RUN_DIR/kafka"
}

run_tern() { # nodes: start Tern, the rows, stop
	local nodes=$1 extra
	# shellcheck disable=SC2206 # split on spaces, as documented
	extra=(${TERN_ARGS:-})
	if [ "$nodes" = 1 ]; then
		p=$(r3_port tern 1)
		kp=$(r3_kafka_port 1)
		echo "== Tern: one node, tern server on 127.0.0.1 (Kafka API on $kp)"
		"$TERN_BIN" server --server-name tern --host 127.0.0.1 --port "$p" --http "127.0.0.1:$(r3_monitor_port tern 1)" \
			--kafka-port "$kp" --kafka-group-initial-delay 0 --mqtt-port -1 --mqtt-ws-port -1 --udp-port -1 --store-dir "$RUN_DIR/tern" "${extra[@]}" \
			>"$ROUT/tern-single.log" 2>&1 &
		TERN1_PID=$!
		wait_port "$kp" "$TERN1_PID" "tern server" 30
		harness tern 1 "127.0.0.1:$kp" "$TERN1_PID" "tern server, defaults (sync every 100 ms), no initial group rebalance delay${TERN_ARGS:+, $TERN_ARGS}"
		stop_tern1
		keep_round_logs tern-single
		rm -rf "$RUN_DIR/tern"
	else
		echo "== Tern: 3 nodes, --cluster-size 3, on 127.0.0.1 (Kafka API on $(r3_kafka_port 1), +10, +20)"
		r3_start tern tern3
		for i in 1 2 3; do wait_port "$(r3_kafka_port "$i")" "$(r3_pid tern "$i")" "tern node $i (Kafka API)" 30; done
		harness tern 3 "$(r3_list kafka)" "$(r3_list pids)" "3 nodes, --cluster-size 3, defaults (sync every 100 ms), no initial group rebalance delay${TERN_ARGS:+, $TERN_ARGS}"
		r3_stop
		keep_round_logs tern3-n1 tern3-n2 tern3-n3
	fi
}

for nodes in ${NODES//,/ }; do
	if [ -n "$INTERLEAVE" ] && [ "$RUNS" -gt 1 ] && has kafka && has tern; then
		ROUND_RUNS=1
		for ((round = 1; round <= RUNS; round++)); do
			ROUND_SUFFIX=.r$round
			echo "== round $round of $RUNS ($nodes node(s))"
			if ((round % 2)); then
				run_kafka "$nodes"
				run_tern "$nodes"
			else
				run_tern "$nodes"
				run_kafka "$nodes"
			fi
		done
		ROUND_RUNS=$RUNS ROUND_SUFFIX=
	else
		! has kafka || run_kafka "$nodes"
		! has tern || run_tern "$nodes"
	fi
done

# --- report --------------------------------------------------------------------------------------
# Each system's rounds are merged into <system>-<nodes>.json.
jsons=()
for n in 1 3; do
	for sys in kafka tern; do
		for f in "$ROUT/$sys-$n.json" "$ROUT/$sys-$n".r[0-9]*.json; do
			[ ! -f "$f" ] || jsons+=("$f")
		done
	done
done
if [ "${#jsons[@]}" -gt 0 ]; then
	"$REPLICATEDVS" kafkaapi-report --md "$ROUT/results.md" --merged "$ROUT" "${jsons[@]}"
	echo
	cat "$ROUT/results.md"
	echo
	echo "== written: $ROUT/results.md and each system's runs in $ROUT/<system>-<nodes>.json (from ${jsons[*]})"
fi
[ -z "$failed" ]
