#!/usr/bin/env bash
# MQTT on 3-node clusters, Tern beside NATS, on this machine: Tern with
# --cluster-size 3 (persistent sessions and QoS 1/2 publishes committed through its
# replicated MQTT group), NATS (nats-server pinned in bench/lib.sh) with JetStream
# and MQTT, its MQTT streams of 3 replicas (stream_replicas 3). One load client for
# both (bench/mqttclustervs, on the bench module's MQTT 3.1.1 client):
#   throughput  QoS 1, publishers on node 1, one subscriber on node 2 with a
#               persistent or a clean session; 1→1 and 10→1, 32 B and 1 KiB;
#               then the persistent rows at QoS 2 both ways (q2p1-32 ...);
#               msgs/s received and publish → receipt latency p50/p99
#   resume      a persistent QoS 1 subscriber on node 2, a publisher on node 1 at a
#               fixed rate; kill -9 of node 2; the subscriber reconnects at once to
#               node 3 (same client id): time to its first message there, to the
#               backlog received, acknowledged messages never received, duplicates
#
# Installs nats-server if missing, builds tern and the harnesses, starts each
# cluster on loopback on non-default ports (bench/r3clusters.sh with R3_MQTT=1),
# stops exactly the processes it started, by pid, on EXIT, INT and TERM; the stores
# live in a temporary directory that is deleted. Throughput rows run on one fresh
# cluster per system; every resume run on a fresh cluster of its own.
#
# Usage: bench/mqttcluster.sh [options]
#   --only W             throughput or resume (default both)
#   --runs N             resume runs per system and placement (default 5); median (min–max)
#   --placement LIST     resume: node2 (the nodes as numbered), leader (renumbered so
#                        that the killed node 2 leads Tern's MQTT group or NATS's
#                        $MQTT_msgs stream) or both, comma-separated (default node2,leader)
#   --tp-runs N          runs per throughput row and system (default 5)
#   --scale F            multiplies the throughput rows' message counts (default 1:
#                        200,000 of 32 B, 50,000 of 1 KiB)
#   --rows LIST          throughput rows (keys or prefixes: p1-32, p10, c, ...;
#                        default all; mqttclustervs throughput --list shows them)
#   --window N           QoS 1 or 2 messages a publisher keeps unacknowledged (default 256)
#   --rate R             resume: messages/s (default 1000)
#   --duration D         resume: publishing time per run (default 12s)
#   --kill-at D          resume: when node 2 is killed, from the first publish (default 4s)
#   --quiet-wait D       before each run, wait up to D for other processes' CPU use to
#                        settle (default 30s; 0: not at all)
# Environment:
#   TERN_BASE (26300)    Tern node i: client TERN_BASE+10i, route +1, gossip +2,
#                        monitoring +3, MQTT +4
#   JS_BASE (26100)      NATS node i: client JS_BASE+10i, route +1, monitoring +2, MQTT +3
#   SYSTEMS (tern,js)    which clusters to run
#   TERN_ARGS            more tern server options for every Tern node; the script
#                        adds --mqtt-max-queued 1000000 first (as bench/mqtt.sh)
#   TERN_CPUPROFILE=DIR  run Tern under bench/ternserve, a CPU profile per node
#                        (DIR/tern<i>.prof, the last cluster's when several run)
#   OUT (bench/out)      results in $OUT/mqttcluster
# Outputs in $OUT/mqttcluster: results.md (the tables), throughput.jsonl and
# resume.jsonl (every run, one JSON object a line), summary.json, every node's log
# (<system>-tp-n<i>.log, <system>-resume-<placement>-r<run>-n<i>.log).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

ONLY=both
RUNS=5
TP_RUNS=5
SCALE=1
ROWS=
WINDOW=256
RATE=1000
DURATION=12s
KILL_AT=4s
PLACEMENTS=node2,leader
QUIET=30s
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--only) ONLY=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--tp-runs) TP_RUNS=$2; shift 2 ;;
	--scale) SCALE=$2; shift 2 ;;
	--rows) ROWS=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--kill-at) KILL_AT=$2; shift 2 ;;
	--placement) PLACEMENTS=$2; shift 2 ;;
	--quiet-wait) QUIET=$2; shift 2 ;;
	--*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
	*) echo "mqttcluster.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$ONLY" in both | throughput | resume) ;; *) echo "mqttcluster.sh: --only wants throughput or resume" >&2; exit 2 ;; esac
for v in "$RUNS" "$TP_RUNS" "$WINDOW" "$RATE"; do
	case "$v" in '' | *[!0-9]* | 0) echo "mqttcluster.sh: --runs, --tp-runs, --window and --rate want positive numbers" >&2; exit 2 ;; esac
done

PLACE_LIST=()
for p in ${PLACEMENTS//,/ }; do
	case "$p" in node2 | leader) PLACE_LIST+=("$p") ;; *) echo "mqttcluster.sh: --placement: unknown placement $p (node2, leader)" >&2; exit 2 ;; esac
done
[ "${#PLACE_LIST[@]}" -gt 0 ] || { echo "mqttcluster.sh: --placement wants node2, leader or both" >&2; exit 2; }

TERN_BASE=${TERN_BASE:-26300}
JS_BASE=${JS_BASE:-26100}
SYSTEMS=${SYSTEMS:-tern,js}
OUT=${OUT:-bench/out}
ROUT=$OUT/mqttcluster
TERN_ARGS="--mqtt-max-queued 1000000${TERN_ARGS:+ $TERN_ARGS}"
R3_MQTT=1

mkdir -p "$ROUT"
BENCH=mqttcluster.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/r3clusters.sh
r3_systems "$SYSTEMS"

# --- install, check ports, build; processes started here are stopped by pid -----------------
r3_setup tern-mqttcluster
TERN_BIN=$(tern_server_bin "$TERN_BIN" "$ROUT")
echo "== building bench/mqttclustervs"
MQTTCLUSTERVS=$ROUT/mqttclustervs
bench_build "$MQTTCLUSTERVS" ./mqttclustervs
cluster_args() { # the running cluster, as mqttclustervs takes it
	echo --system "$R3_SYS" --mqtt "$(r3_list mqtt)" --monitors "$(r3_list monitors)" --names "$(r3_list names)" --pids "$(r3_list pids)"
}
start_cluster() { # sys tag: a fresh cluster with MQTT, ready for persistent sessions
	r3_start "$1" "$2"
	# shellcheck disable=SC2046 # words
	run_job "$MQTTCLUSTERVS" ready $(cluster_args) --timeout 60s
}

# --- machine ---------------------------------------------------------------------------------
{
	machine_head
	machine_go
	machine_tern "$ROUT/tern" "; options $TERN_ARGS"
	machine_nats
	machine_load
	echo "date:         $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$ROUT/machine.txt"
echo

TP_FILE=$ROUT/throughput.jsonl
RS_FILE=$ROUT/resume.jsonl
report_args=()
if [ "$ONLY" != resume ]; then
	rm -f "$TP_FILE"
	report_args+=(--throughput "$TP_FILE")
	echo "== throughput: $TP_RUNS run(s) per row and system, scale $SCALE, window $WINDOW"
	for s in "${SYS_LIST[@]}"; do
		start_cluster "$s" "$s-tp"
		# shellcheck disable=SC2046 # words
		run_job "$MQTTCLUSTERVS" throughput $(cluster_args) --runs "$TP_RUNS" --scale "$SCALE" ${ROWS:+--rows "$ROWS"} \
			--window "$WINDOW" --quiet-wait "$QUIET" --out "$TP_FILE"
		r3_stop
	done
fi
if [ "$ONLY" != throughput ]; then
	rm -f "$RS_FILE"
	report_args+=(--resume "$RS_FILE")
	echo "== resume: $RUNS run(s) per system and placement (${PLACE_LIST[*]}): ${RATE} msgs/s for $DURATION, kill -9 of the subscriber's node at $KILL_AT"
	for r in $(seq 1 "$RUNS"); do
		for place in "${PLACE_LIST[@]}"; do
			for s in $(run_order "$r" "${SYS_LIST[@]}"); do
				start_cluster "$s" "$s-resume-$place-r$r"
				# shellcheck disable=SC2046 # words
				run_job "$MQTTCLUSTERVS" resume $(cluster_args) --run "$r" --placement "$place" --rate "$RATE" \
					--duration "$DURATION" --kill-at "$KILL_AT" --window "$WINDOW" --quiet-wait "$QUIET" --out "$RS_FILE"
				r3_stop
			done
		done
	done
fi

# --- report --------------------------------------------------------------------------------------
{
	cat "$ROUT/machine.txt"
	echo
	"$MQTTCLUSTERVS" report "${report_args[@]}" --json "$ROUT/summary.json"
} >"$ROUT/results.md"
echo
cat "$ROUT/results.md"
echo "== written: $ROUT/results.md, $ROUT/summary.json and the runs (*.jsonl) beside them"
