#!/usr/bin/env bash
# Failover of a replicated stream's leader, Tern beside NATS JetStream, on this
# machine. Per run and system: a fresh 3-node cluster (Tern: tern server with
# --cluster-size 3, built from this tree; JetStream: nats-server pinned in
# bench/lib.sh), a stream of 3 replicas, a publisher (the system's own Go client)
# publishing with acknowledgements at a steady rate, each message with its own
# message id and every failed publish sent again with the same id; part-way the
# stream's leader node gets kill -9; afterwards the stream is read back from the two
# surviving nodes and every acknowledged id checked (bench/replicavs failover).
#
# Installs nats-server if missing, builds tern and the harnesses, starts each
# cluster on loopback on non-default ports, stops exactly the processes it started,
# by pid, on EXIT, INT and TERM; the stores live in a temporary directory that is
# deleted.
#
# Usage: bench/failover.sh [options]
#   --runs N             runs per system and placement (default 5); median (min–max)
#   --rate R             messages/s (default 2000)
#   --duration D         publishing time per run (default 20s)
#   --kill-at D          when the leader is killed, from the first publish (default 10s)
#   --client-on P        follower, leader or both (default both): the publisher's
#                        node is one that survives, or the leader that is killed
#   --retry-for D        how long a message is retried before it counts as an
#                        error the client saw (default 30s)
#   --quiet-wait D       before each run, wait up to D for other processes' CPU use to
#                        settle (default 30s; 0: not at all)
# Environment:
#   TERN_BASE (25300)    Tern node i: client TERN_BASE+10i, route +1, gossip +2, monitoring +3
#   JS_BASE (25100)      JetStream node i: client JS_BASE+10i, route +1, monitoring +2
#   SYSTEMS (tern,js)    which clusters to run
#   TERN_ARGS            more tern server options for every Tern node (e.g. "--sync never")
#   OUT (bench/out)      results in $OUT/failover
# Outputs in $OUT/failover: results.md (the tables), runs.jsonl (every run, one JSON
# object a line), summary.json, every node's log
# (<system>-<placement>-r<run>-n<i>.log).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

RUNS=5
RATE=2000
DURATION=20s
KILL_AT=10s
CLIENT_ON=both
RETRY_FOR=30s
QUIET=30s
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--runs) RUNS=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--kill-at) KILL_AT=$2; shift 2 ;;
	--client-on) CLIENT_ON=$2; shift 2 ;;
	--retry-for) RETRY_FOR=$2; shift 2 ;;
	--quiet-wait) QUIET=$2; shift 2 ;;
	--*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
	*) echo "failover.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$RUNS" in '' | *[!0-9]* | 0) echo "failover.sh: --runs wants a positive number" >&2; exit 2 ;; esac
case "$RATE" in '' | *[!0-9]* | 0) echo "failover.sh: --rate wants a positive number" >&2; exit 2 ;; esac
case "$CLIENT_ON" in follower) PLACES=(follower) ;; leader) PLACES=(leader) ;; both) PLACES=(follower leader) ;;
*) echo "failover.sh: --client-on wants follower, leader or both" >&2; exit 2 ;; esac

TERN_BASE=${TERN_BASE:-25300}
JS_BASE=${JS_BASE:-25100}
SYSTEMS=${SYSTEMS:-tern,js}
OUT=${OUT:-bench/out}
ROUT=$OUT/failover

mkdir -p "$ROUT"
BENCH=failover.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/r3clusters.sh
r3_systems "$SYSTEMS"

# --- install, check ports, build; processes started here are stopped by pid -----------------
r3_setup sbench-failover

# --- machine ---------------------------------------------------------------------------------
machine_head
machine_go
machine_tern "$TERN_BIN"
machine_nats
machine_load
echo

RUNS_FILE=$ROUT/runs.jsonl
rm -f "$RUNS_FILE"
echo "== $RUNS run(s) per system and placement: ${RATE} msgs/s for $DURATION, kill -9 of the stream's leader at $KILL_AT"
for r in $(seq 1 "$RUNS"); do
	for place in "${PLACES[@]}"; do
		for s in $(run_order "$r" "${SYS_LIST[@]}"); do
			r3_start "$s" "$s-$place-r$r"
			run_job "$REPLICAVS" failover --system "$s" --urls "$(r3_list urls)" --names "$(r3_list names)" \
				--pids "$(r3_list pids)" --run "$r" --rate "$RATE" --duration "$DURATION" --kill-at "$KILL_AT" \
				--client-on "$place" --retry-for "$RETRY_FOR" --quiet-wait "$QUIET" --out "$RUNS_FILE"
			r3_stop
		done
	done
done

# --- report --------------------------------------------------------------------------------------
"$REPLICAVS" report failover --in "$RUNS_FILE" --json "$ROUT/summary.json" >"$ROUT/results.md"
echo
cat "$ROUT/results.md"
echo "== written: $ROUT/results.md, $ROUT/summary.json, $RUNS_FILE"
