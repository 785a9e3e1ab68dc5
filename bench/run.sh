#!/usr/bin/env bash
# Tern vs NATS on this machine: installs the nats-server release pinned in bench/lib.sh
# (NATS_SERVER_VERSION) into bench/.tools/bin with go install if it is missing, builds
# tern, starts both servers on loopback on non-default ports, runs the same workload
# matrix against each (bench/natsvs), prints a Markdown table, and stops exactly the
# servers it started.
#
# Usage: bench/run.sh [natsvs options]      e.g. bench/run.sh --runs 5
#                                                 bench/run.sh --only reqrep --scale 0.2
# Environment:
#   NATS_PORT (14222), TERN_PORT (17400)  ports the two servers listen on (127.0.0.1)
#   OUT (bench/out)                       where logs, results.md and results.json go
#   TERN_CPUPROFILE=FILE                  run the Tern server under a CPU profile
#                                         (bench/ternserve), written to FILE on exit
# Outputs: $OUT/results.md (the table), $OUT/results.json (every run), server logs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Listing the rows or asking for help needs no servers.
for a in "$@"; do
	case "$a" in
	--list | -list | -h | -help | --help) exec go -C bench run ./natsvs "$@" ;;
	esac
done

NATS_PORT=${NATS_PORT:-14222}
TERN_PORT=${TERN_PORT:-17400}
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
BENCH=run.sh BENCH_LOGS=$OUT
. bench/lib.sh

# --- nats-server (the pinned release, built by go install; run by its path) -----------
NATS_SERVER=$(go_tool nats-server)

require_free_ports "NATS_PORT / TERN_PORT" "$NATS_PORT" "$TERN_PORT"

# --- build ------------------------------------------------------------------------------
echo "== building tern"
go build -o "$OUT/tern" ./cmd/tern
bench_build "$OUT/natsvs" ./natsvs
if [ -n "${TERN_CPUPROFILE:-}" ]; then
	bench_build "$OUT/ternserve" ./ternserve
fi

# --- start both servers; stop exactly these pids on exit -------------------------------
PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$NATS_SERVER" -a 127.0.0.1 -p "$NATS_PORT" >"$OUT/nats-server.log" 2>&1 &
PIDS+=($!)
wait_port "$NATS_PORT" "${PIDS[-1]}" nats-server

if [ -n "${TERN_CPUPROFILE:-}" ]; then
	"$OUT/ternserve" --cpuprofile "$TERN_CPUPROFILE" --host 127.0.0.1 --port "$TERN_PORT" --http "" --store-dir "$OUT/tern-store" >"$OUT/tern-server.log" 2>&1 &
else
	"$OUT/tern" server --host 127.0.0.1 --port "$TERN_PORT" --mqtt-port -1 --kafka-port -1 --udp-port -1 --http "" --store-dir "$OUT/tern-store" >"$OUT/tern-server.log" 2>&1 &
fi
PIDS+=($!)
wait_port "$TERN_PORT" "${PIDS[-1]}" "tern server"

# --- machine -----------------------------------------------------------------------------
nats_version=$("$NATS_SERVER" --version 2>&1 | sed -n 's/^nats-server: *//p')
tern_version=$("$OUT/tern" version | sed -n 's/^tern *//p')
echo "== machine"
echo "nproc:        $(nproc)"
echo "CPU:          $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)"
echo "memory:       $(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "kernel:       $(uname -sr)"
echo "go:           $(go version | awk '{print $3, $4}')"
echo "nats-server:  $nats_version (pid ${PIDS[0]}, 127.0.0.1:$NATS_PORT)"
echo "tern:         $tern_version (pid ${PIDS[1]}, 127.0.0.1:$TERN_PORT)"
echo "GOMAXPROCS:   ${GOMAXPROCS:-unset (Go uses every CPU)}; brokers and load generator share the machine"
echo

# --- run ---------------------------------------------------------------------------------
echo "== running the matrix (progress on stderr, table on stdout)"
"$OUT/natsvs" --nats "nats://127.0.0.1:$NATS_PORT" --tern "tern://127.0.0.1:$TERN_PORT" \
	--nats-version "$nats_version" --tern-version "$tern_version" \
	--json "$OUT/results.json" "$@" | tee "$OUT/results.md"
echo
echo "== written: $OUT/results.md, $OUT/results.json"
