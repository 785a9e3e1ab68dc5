#!/usr/bin/env bash
# Compacted topics: Tern beside Apache Kafka 4.4.0, the same franz-go client, on one
# node each or on three with the topic's replication factor 3. A producer writes
# RECORDS records of KEYS keys in turn (acks=all, idempotent, linger 5 ms) to a topic
# created with cleanup.policy=compact and 1 MiB segments; the topic partition's
# directories (every replica's) are then watched until compaction stops shrinking
# them (at most WATCH); a consumer reads the partition from its start and checks
# that every key's last value is there.
#
# Usage: bench/compaction.sh [--nodes 1|3] [--keys N] [--records N] [--size BYTES]
#                            [--watch D]
#
# Kafka runs with its defaults (its log cleaner: one thread, 15 s back-off,
# min.cleanable.dirty.ratio 0.5 as the topic also says; on three brokers
# min.insync.replicas 2); Tern with its defaults (a compacted stream compacts every
# second and rewrites its mostly removed segments one after another, each replica
# its own). The systems run one after the other, each on fresh data directories,
# on the ports of bench/kafkaapi.sh (KAFKA_BASE 29400, TERN_BASE 29600). Outputs in
# $OUT/compaction (OUT: bench/out): results-<nodes>.md and each system's JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

NODES=1
KEYS=10000
RECORDS=1000000
SIZE=100
WATCH=3m
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--nodes | -nodes) NODES=$2; shift 2 ;;
	--keys | -keys) KEYS=$2; shift 2 ;;
	--records | -records) RECORDS=$2; shift 2 ;;
	--size | -size) SIZE=$2; shift 2 ;;
	--watch | -watch) WATCH=$2; shift 2 ;;
	*) echo "compaction.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done

case "$NODES" in 1 | 3) ;; *) echo "compaction.sh: --nodes takes 1 or 3" >&2; exit 2 ;; esac

KAFKA_BASE=${KAFKA_BASE:-29400}
KAFKA_NODES=$NODES
TERN_BASE=${TERN_BASE:-29600}
JS_BASE=0 # r3clusters.sh's JetStream side is not used here
R3_KAFKA=1
OUT=${OUT:-bench/out}
ROUT=$OUT/compaction
mkdir -p "$ROUT"
BENCH=compaction.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/kafka.sh
. bench/r3clusters.sh

kafka_install
TERN_PORT=$((TERN_BASE + 10))
TERN_KAFKA=$((TERN_BASE + 15))
require_free_ports "KAFKA_BASE / TERN_BASE" $(kafka_ports) $(r3_all_ports tern)
echo "== building tern and bench/replicatedvs into ${ROUT#"$PWD"/}"
r3_build

RUN_DIR=$(mktemp -d /tmp/sbench-compaction.XXXXXX)
TERN_PID=
stop_tern() {
	[ -z "$TERN_PID" ] || stop_pid "$TERN_PID" "tern server" 30
	TERN_PID=
}
bench_stop_on_exit kafka_stop_cluster stop_tern r3_stop

machine_head
machine_disk "$RUN_DIR"
ARGS=(--keys "$KEYS" --records "$RECORDS" --size "$SIZE" --watch "$WATCH" --replication-factor "$NODES")
tern_version=$("$TERN_BIN" version | sed -n 's/^tern *//p' | head -1)
ROWS=()
dirs() { # prefix suffix: the comma-separated directories prefix<i>suffix of the nodes
	local i out=""
	for i in $(seq 1 "$NODES"); do out+="$1$i$2,"; done
	echo "${out%,}"
}

echo "== Kafka $KAFKA_VERSION: $NODES broker(s) (KRaft) on 127.0.0.1 ($(kafka_bootstrap))"
kafka_start_cluster "$RUN_DIR/kafka" "$ROUT"
ROWS+=("$("$REPLICATEDVS" compaction --system "Kafka $KAFKA_VERSION" --bootstrap "$(kafka_bootstrap)" \
	--dir "$(dirs "$RUN_DIR/kafka/n" /compacted-0)" --json "$ROUT/kafka-$NODES.json" "${ARGS[@]}")")
kafka_stop_cluster

if [ "$NODES" = 1 ]; then
	echo "== Tern: tern server on 127.0.0.1 (Kafka API on $TERN_KAFKA)"
	"$TERN_BIN" server --host 127.0.0.1 --port "$TERN_PORT" --kafka-port "$TERN_KAFKA" --http "" \
		--mqtt-port -1 --mqtt-ws-port -1 --udp-port -1 --store-dir "$RUN_DIR/tern" >"$ROUT/tern.log" 2>&1 &
	TERN_PID=$!
	wait_port "$TERN_KAFKA" "$TERN_PID" "tern server" 30
	bootstrap=127.0.0.1:$TERN_KAFKA
	tern_dirs=$RUN_DIR/tern/streams/compacted
else
	echo "== Tern: 3 nodes, --cluster-size 3, on 127.0.0.1 (Kafka API on $(r3_list kafka))"
	r3_start tern tern3
	for i in 1 2 3; do wait_port "$(r3_kafka_port "$i")" "$(r3_pid tern "$i")" "tern node $i (Kafka API)" 30; done
	bootstrap=$(r3_list kafka)
	tern_dirs=$(dirs "$RUN_DIR/tern3-n" /streams/compacted)
fi
ROWS+=("$("$REPLICATEDVS" compaction --system "Tern $tern_version" --bootstrap "$bootstrap" \
	--dir "$tern_dirs" --json "$ROUT/tern-$NODES.json" "${ARGS[@]}")")
stop_tern
r3_stop

{
	echo "Compacted topic, $NODES node(s), replication factor $NODES (disk space summed over the replicas): $RECORDS records of $KEYS keys, $SIZE-byte values, 1 MiB segments ($(date -u +%FT%TZ), $(git rev-parse --short HEAD))"
	echo
	echo "| system | produce records/s | partition after produce | after compaction | compacted within | segment files, after the produce → at the end | records read | keys | keys without their last value |"
	echo "|---|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
} | tee "$ROUT/results-$NODES.md"
