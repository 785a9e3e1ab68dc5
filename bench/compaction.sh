#!/usr/bin/env bash
# Compacted topics: Tern beside Apache Kafka 4.4.0, one node each, the same franz-go
# client. A producer writes RECORDS records of KEYS keys in turn (acks=all,
# idempotent, linger 5 ms) to a topic created with cleanup.policy=compact and 1 MiB
# segments; the topic partition's directory is then watched until compaction stops
# shrinking it (at most WATCH); a consumer reads the partition from its start and
# checks that every key's last value is there.
#
# Usage: bench/compaction.sh [--keys N] [--records N] [--size BYTES] [--watch D]
#
# Kafka runs with its defaults (its log cleaner: one thread, 15 s back-off,
# min.cleanable.dirty.ratio 0.5 as the topic also says); Tern with its defaults (a
# compacted stream compacts every second and rewrites its mostly removed segments
# one after another). The systems run one after the other, each on a fresh data
# directory, on the ports of bench/kafkaapi.sh (KAFKA_BASE 29400, TERN_BASE 29600).
# Outputs in $OUT/compaction (OUT: bench/out): results.md and each system's JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

KEYS=10000
RECORDS=1000000
SIZE=100
WATCH=3m
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--keys | -keys) KEYS=$2; shift 2 ;;
	--records | -records) RECORDS=$2; shift 2 ;;
	--size | -size) SIZE=$2; shift 2 ;;
	--watch | -watch) WATCH=$2; shift 2 ;;
	*) echo "compaction.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done

KAFKA_BASE=${KAFKA_BASE:-29400}
KAFKA_NODES=1
TERN_BASE=${TERN_BASE:-29600}
OUT=${OUT:-bench/out}
ROUT=$OUT/compaction
mkdir -p "$ROUT"
BENCH=compaction.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/kafka.sh

kafka_install
TERN_PORT=$((TERN_BASE + 10))
TERN_KAFKA=$((TERN_BASE + 15))
require_free_ports "KAFKA_BASE / TERN_BASE" $(kafka_ports) "$TERN_PORT" "$TERN_KAFKA"
echo "== building tern and bench/replicatedvs into ${ROUT#"$PWD"/}"
go build -o "$ROUT/tern" ./cmd/tern
bench_build "$ROUT/replicatedvs" ./replicatedvs

RUN_DIR=$(mktemp -d /tmp/sbench-compaction.XXXXXX)
TERN_PID=
stop_tern() {
	[ -z "$TERN_PID" ] || stop_pid "$TERN_PID" "tern server" 30
	TERN_PID=
}
bench_stop_on_exit kafka_stop_cluster stop_tern

machine_head
machine_disk "$RUN_DIR"
ARGS=(--keys "$KEYS" --records "$RECORDS" --size "$SIZE" --watch "$WATCH")
ROWS=()

echo "== Kafka $KAFKA_VERSION: one broker (KRaft) on 127.0.0.1 ($(kafka_bootstrap))"
kafka_start_cluster "$RUN_DIR/kafka" "$ROUT"
ROWS+=("$("$ROUT/replicatedvs" compaction --system "Kafka $KAFKA_VERSION" --bootstrap "$(kafka_bootstrap)" \
	--dir "$RUN_DIR/kafka/n1/compacted-0" --json "$ROUT/kafka.json" "${ARGS[@]}")")
kafka_stop_cluster

echo "== Tern: tern server on 127.0.0.1 (Kafka API on $TERN_KAFKA)"
"$ROUT/tern" server --host 127.0.0.1 --port "$TERN_PORT" --kafka-port "$TERN_KAFKA" --http "" \
	--mqtt-port -1 --mqtt-ws-port -1 --udp-port -1 --store-dir "$RUN_DIR/tern" >"$ROUT/tern.log" 2>&1 &
TERN_PID=$!
wait_port "$TERN_KAFKA" "$TERN_PID" "tern server" 30
ROWS+=("$("$ROUT/replicatedvs" compaction --system "Tern $("$ROUT/tern" version | sed -n 's/^tern *//p' | head -1)" \
	--bootstrap "127.0.0.1:$TERN_KAFKA" --dir "$RUN_DIR/tern/streams/compacted" --json "$ROUT/tern.json" "${ARGS[@]}")")
stop_tern

{
	echo "Compacted topic, one node: $RECORDS records of $KEYS keys, $SIZE-byte values, 1 MiB segments ($(date -u +%FT%TZ), $(git rev-parse --short HEAD))"
	echo
	echo "| system | produce records/s | partition after produce | after compaction | compacted within | records read | keys | keys without their last value |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
} | tee "$ROUT/results.md"
