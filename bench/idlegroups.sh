#!/usr/bin/env bash
# What many idle replicated streams cost, Tern beside NATS JetStream, on this
# machine. Per run and system: a fresh 3-node cluster (Tern: tern server with
# --cluster-size 3, built from this tree; JetStream: nats-server pinned in
# bench/lib.sh); its nodes' CPU and memory with no stream (the baseline), then
# --streams streams of 3 replicas made through the stream API (--concurrency
# requests at a time), a wait until every one has a leader and all its replicas
# current, --settle, and each node's CPU use (utime+stime of /proc/<pid>/stat, in %
# of one core) over --window of idleness and its RSS (/proc/<pid>/status) at the end
# (bench/replicavs idle).
#
# Installs nats-server if missing, builds tern and the harnesses, starts each
# cluster on loopback on non-default ports, stops exactly the processes it started,
# by pid, on EXIT, INT and TERM; the stores live in a temporary directory that is
# deleted.
#
# Usage: bench/idlegroups.sh [options]
#   --streams N          streams of 3 replicas (default 1000)
#   --window D           idle window measured (default 60s)
#   --baseline D         window measured before any stream exists (default 30s; 0: none)
#   --settle D           wait after every stream is led, before the window (default 15s)
#   --runs N             runs per system (default 1)
#   --concurrency N      create requests in flight (default 16)
#   --create-timeout D   bound on making the streams (default 10m)
#   --quiet-wait D       before each run, wait up to D for other processes' CPU use to
#                        settle (default 30s; 0: not at all)
# Environment:
#   TERN_BASE (25700)    Tern node i: client TERN_BASE+10i, route +1, gossip +2, monitoring +3
#   JS_BASE (25500)      JetStream node i: client JS_BASE+10i, route +1, monitoring +2
#   SYSTEMS (tern,js)    which clusters to run
#   TERN_ARGS            more tern server options for every Tern node (e.g. "--sync never")
#   OUT (bench/out)      results in $OUT/idlegroups
# Outputs in $OUT/idlegroups: results.md (the tables), runs.jsonl (every run, one
# JSON object a line), summary.json, every node's log (<system>-r<run>-n<i>.log).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

STREAMS=1000
WINDOW=60s
BASELINE=30s
SETTLE=15s
RUNS=1
CONC=16
CREATE_TIMEOUT=10m
QUIET=30s
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--streams) STREAMS=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--baseline) BASELINE=$2; shift 2 ;;
	--settle) SETTLE=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--concurrency) CONC=$2; shift 2 ;;
	--create-timeout) CREATE_TIMEOUT=$2; shift 2 ;;
	--quiet-wait) QUIET=$2; shift 2 ;;
	--*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
	*) echo "idlegroups.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$RUNS" in '' | *[!0-9]* | 0) echo "idlegroups.sh: --runs wants a positive number" >&2; exit 2 ;; esac
case "$STREAMS" in '' | *[!0-9]* | 0) echo "idlegroups.sh: --streams wants a positive number" >&2; exit 2 ;; esac

TERN_BASE=${TERN_BASE:-25700}
JS_BASE=${JS_BASE:-25500}
SYSTEMS=${SYSTEMS:-tern,js}
OUT=${OUT:-bench/out}
ROUT=$OUT/idlegroups

mkdir -p "$ROUT"
BENCH=idlegroups.sh BENCH_LOGS=$ROUT
. bench/lib.sh
. bench/r3clusters.sh
r3_systems "$SYSTEMS"

# --- install, check ports, build; processes started here are stopped by pid -----------------
r3_setup sbench-idlegroups

# --- machine ---------------------------------------------------------------------------------
machine_head
machine_disk "$RUN_DIR"
machine_go
machine_tern "$TERN_BIN"
machine_nats
machine_load
echo

RUNS_FILE=$ROUT/runs.jsonl
rm -f "$RUNS_FILE"
failed=
echo "== $RUNS run(s) per system: $STREAMS streams of 3 replicas, ${WINDOW} idle window"
for r in $(seq 1 "$RUNS"); do
	for s in $(run_order "$r" "${SYS_LIST[@]}"); do
		r3_start "$s" "$s-r$r"
		run_job "$REPLICAVS" idle --system "$s" --urls "$(r3_list urls)" --names "$(r3_list names)" \
			--pids "$(r3_list pids)" --run "$r" --streams "$STREAMS" --concurrency "$CONC" \
			--create-timeout "$CREATE_TIMEOUT" --baseline "$BASELINE" --settle "$SETTLE" --window "$WINDOW" \
			--clk-tck "$(getconf CLK_TCK)" --quiet-wait "$QUIET" --out "$RUNS_FILE" || failed=1
		r3_stop
	done
done

# --- report --------------------------------------------------------------------------------------
"$REPLICAVS" report idle --in "$RUNS_FILE" --json "$ROUT/summary.json" >"$ROUT/results.md"
echo
cat "$ROUT/results.md"
echo "== written: $ROUT/results.md, $ROUT/summary.json, $RUNS_FILE"
[ -z "$failed" ]
