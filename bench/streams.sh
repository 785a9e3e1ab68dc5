#!/usr/bin/env bash
# Durable streams on this machine: NATS JetStream and Tern through bench/streamvs, then
# RabbitMQ's durable work queue through bench/rabbit/run.sh, and one combined Markdown
# report.
#
# Installs the nats-server release pinned in bench/lib.sh (NATS_SERVER_VERSION) into
# bench/.tools/bin with go install if it is missing, builds the harness, starts
#   nats-server -js -sd <tmp> -a 127.0.0.1 -p $JS_PORT
#   tern server --host 127.0.0.1 --port $TERN_PORT --mqtt-port -1 --udp-port -1 --http "" --store-dir <tmp>
# runs the stream matrix against them, stops them, runs the RabbitMQ script (which
# starts and stops its own private node), and stops exactly the processes it started,
# by pid, on EXIT, INT and TERM.
#
# Usage: bench/streams.sh [streamvs options]     e.g. bench/streams.sh --runs 5
#                                                     bench/streams.sh --scale 0.3 --replay-bytes 256MiB
#        bench/streams.sh --list                 the rows (bench/streams.sh --help: all options)
# Environment:
#   JS_PORT (24222), TERN_PORT (27400)   ports of the servers (127.0.0.1)
#   OUT (bench/out)                      results in $OUT/streams and $OUT/rabbit
#   RABBIT (1)                           0 skips RabbitMQ
#   TERN (1)                             0 skips Tern
#   TERN_ARGS ("")                       more `tern server` options, e.g. "--sync always"
#   MEM_LIMIT ("")                       e.g. 128M: each server runs in its own memory cgroup
#                                        with this limit, which covers its page cache too, so
#                                        a 1 GiB replay (--replay-bytes 1GiB) reads a stream
#                                        8x larger than the cache it may keep (needs root and
#                                        the cgroup v1 or v2 memory controller)
#   RABBIT_ARGS ("")                     options for bench/rabbit/run.sh, e.g. "--runs 1 --time 5"
#                                        (its RABBIT_* variables work too)
# Outputs: $OUT/streams/results.md (every table), $OUT/streams/results.json (every stream
# run), $OUT/streams/streamvs.md, server logs; $OUT/rabbit/results.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."

# Listing the rows or asking for help needs no servers.
for a in "$@"; do
	case "$a" in
	--list | -list | -h | -help | --help) exec go -C bench run ./streamvs "$@" ;;
	esac
done

JS_PORT=${JS_PORT:-24222}
TERN_PORT=${TERN_PORT:-27400}
OUT=${OUT:-bench/out}
RABBIT=${RABBIT:-1}
RABBIT_ARGS=${RABBIT_ARGS:-}
MEM_LIMIT=${MEM_LIMIT:-}
TERN_ARGS=${TERN_ARGS:-}
SOUT=$OUT/streams
mkdir -p "$SOUT"
BENCH=streams.sh BENCH_LOGS=$SOUT
. bench/lib.sh

# TERN=0 leaves Tern out (JetStream and RabbitMQ only).
TERN=${TERN:-1}
[ "$TERN" = 0 ] && TERN=

# --- nats-server (the pinned release, built by go install; run by its path) -----------
NATS_SERVER=$(go_tool nats-server)

ports=("$JS_PORT")
[ -n "$TERN" ] && ports+=("$TERN_PORT")
require_free_ports "JS_PORT / TERN_PORT" "${ports[@]}"

# --- build ------------------------------------------------------------------------------
echo "== building bench/streamvs${TERN:+ and tern}"
bench_build "$SOUT/streamvs" ./streamvs
[ -n "$TERN" ] && go build -o "$SOUT/tern" ./cmd/tern

# --- processes started here; stopped by pid -----------------------------------------------
RUN_DIR=$(mktemp -d /tmp/sbench-streams.XXXXXX)
# Memory cgroups made here (MEM_LIMIT), removed on exit once their process is gone.
CGROUPS=()
memcg_create() { # name: make the cgroup; its directory in $MEMCG
	local dir
	if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
		dir=/sys/fs/cgroup/memory/tern-streams-$$-$1
		mkdir "$dir" && echo "$MEM_LIMIT" >"$dir/memory.limit_in_bytes" || return 1
	elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		dir=/sys/fs/cgroup/tern-streams-$$-$1
		mkdir "$dir" && echo "$MEM_LIMIT" >"$dir/memory.max" || return 1
	else
		echo "streams.sh: MEM_LIMIT needs a writable cgroup memory controller" >&2
		return 1
	fi
	CGROUPS+=("$dir")
	MEMCG=$dir
}
memcg_peak() { # dir: the cgroup's peak usage (RSS and page cache), in MiB
	local f
	for f in "$1/memory.max_usage_in_bytes" "$1/memory.peak"; do
		[ -r "$f" ] && { echo "$(($(cat "$f") / 1048576)) MiB"; return; }
	done
	echo "unknown"
}
# start_server name cmd...: start cmd in the background (in its memory cgroup with
# MEM_LIMIT); the pid is left in $! of a wrapper that execs the server.
start_server() {
	local name=$1
	shift
	if [ -n "$MEM_LIMIT" ]; then
		memcg_create "$name" || exit 1
		sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$MEMCG" "$@" &
	else
		"$@" &
	fi
}
remove_cgroups() {
	local cg
	for cg in "${CGROUPS[@]}"; do rmdir "$cg" 2>/dev/null || true; done
}
# run_job's child is streamvs or rabbit/run.sh, which stops its own node on TERM.
bench_stop_on_exit stop_servers remove_cgroups

start_server js "$NATS_SERVER" -js -sd "$RUN_DIR/jetstream" -a 127.0.0.1 -p "$JS_PORT" >"$SOUT/nats-server.log" 2>&1
JS_PID=$!
PIDS+=("$JS_PID")
wait_port "$JS_PORT" "$JS_PID" nats-server
nats_version=$("$NATS_SERVER" --version 2>&1 | sed -n 's/^nats-server: *v\{0,1\}//p')
args=(--js-url "nats://127.0.0.1:$JS_PORT" --js-pid "$JS_PID" --js-version "$nats_version")
drivers=js

if [ -n "$TERN" ]; then
	start_server tern "$SOUT/tern" server --host 127.0.0.1 --port "$TERN_PORT" --mqtt-port -1 --kafka-port -1 --udp-port -1 --http "" --store-dir "$RUN_DIR/tern" $TERN_ARGS >"$SOUT/tern-server.log" 2>&1
	TERN_PID=$!
	PIDS+=("$TERN_PID")
	wait_port "$TERN_PORT" "$TERN_PID" "tern server"
	tern_version=$("$SOUT/tern" version | sed -n 's/^tern *//p')
	args+=(--tern-url "tern://127.0.0.1:$TERN_PORT" --tern-pid "$TERN_PID" --tern-version "$tern_version")
	drivers=js,tern
fi

# --- machine -----------------------------------------------------------------------------
machine_head
[ -n "$MEM_LIMIT" ] && echo "memory limit: $MEM_LIMIT per server (cgroup, page cache included)"
echo "disk:         $(df -h "$RUN_DIR" | awk 'NR==2 {print $1 ", " $4 " free"}') (stream stores in $RUN_DIR)"
machine_go
echo "nats-server:  $nats_version -js (pid $JS_PID, 127.0.0.1:$JS_PORT)"
if [ -n "$TERN" ]; then
	echo "tern:         $tern_version (pid $TERN_PID, 127.0.0.1:$TERN_PORT)"
else
	echo "tern:         not run (TERN=0)"
fi
echo

# --- streams -------------------------------------------------------------------------------
echo "== stream matrix (progress on stderr)"
run_job "$SOUT/streamvs" --drivers "$drivers" "${args[@]}" --json "$SOUT/results.json" "$@" >"$SOUT/streamvs.md"
if [ -n "$MEM_LIMIT" ]; then
	echo "== memory cgroups (limit $MEM_LIMIT each, page cache included): peak usage"
	for cg in "${CGROUPS[@]}"; do echo "${cg##*-}: $(memcg_peak "$cg")"; done | tee "$SOUT/memcg.txt"
fi
stop_servers # before RabbitMQ, so nothing else runs beside it

# --- RabbitMQ ------------------------------------------------------------------------------
rabbit_json=()
if [ "$RABBIT" != 0 ]; then
	echo
	echo "== RabbitMQ (bench/rabbit/run.sh $RABBIT_ARGS)"
	# shellcheck disable=SC2086 # RABBIT_ARGS is a list of options
	if run_job env OUT="$OUT" bench/rabbit/run.sh $RABBIT_ARGS; then
		rabbit_json=(--rabbit "$OUT/rabbit/results.json")
	else
		echo "streams.sh: the RabbitMQ run failed; the report has no RabbitMQ table" >&2
	fi
fi

# --- report --------------------------------------------------------------------------------
"$SOUT/streamvs" --report "$SOUT/results.json" "${rabbit_json[@]}" >"$SOUT/results.md"
echo
cat "$SOUT/results.md"
echo
echo "== written: $SOUT/results.md, $SOUT/results.json${rabbit_json:+, $OUT/rabbit/results.json}"
