#!/usr/bin/env bash
# Tern clusters vs NATS clusters on this machine. Installs the nats-server release
# pinned in bench/lib.sh into bench/.tools/bin if it is missing, builds tern and the
# harnesses, starts a nats-server cluster (config files with cluster { name, listen,
# routes }) and a Tern cluster (--cluster-port, --join) side by side on loopback on
# non-default ports, waits until both are fully meshed, measures, and stops exactly
# the processes it started, by pid.
#
# Usage: bench/cluster.sh [MODE] [--runs N] [--scale F] [natsvs options]
#   matrix    (default) workloads across the nodes of two 3-node clusters, the same
#             harness against both (bench/natsvs --cluster): fan-out from node 1 to
#             subscribers on nodes 2 and 3, queue groups spread over the nodes,
#             request/reply from node 1 to node 3, latency node 1 -> node 2 at a
#             fixed rate. Other options go to natsvs (--only, --pause, ...;
#             bench/cluster.sh --list shows the rows).
#   recovery  3-node clusters; per run: a subscriber on node 3 (given all three
#             URLs), a publisher on node 1 at RECOVERY_RATE msgs/s, kill -9 of node
#             3: time until the subscriber receives again through another node, and
#             until the surviving nodes notice (bench/clustervs recovery); node 3 is
#             restarted and the mesh awaited before the next run.
#   interest  fresh INTEREST_NODES-node clusters per run: INTEREST_SUBS distinct
#             subscriptions on node 1, time until every other node holds them all,
#             and the servers' RSS growth per entry (bench/clustervs interest).
#   all       matrix, recovery, interest.
#   --runs N   runs per row / measurement per broker (default 3), alternating which
#              broker goes first; --scale F multiplies the matrix's message counts
#              and INTEREST_SUBS (0.05 for a quick check that everything works);
#              --quiet-wait D (default 30s) is how long each run first waits for the
#              machine's other CPU use to settle (0: not at all).
# Environment:
#   NATS_BASE (14300)  node i (1..9) of NATS: client NATS_BASE+10i, route +1, monitoring +2
#   TERN_BASE (17500)  node i of Tern: client TERN_BASE+10i, route +1, gossip +2 (TCP
#                      and UDP), monitoring +3
#   OUT (bench/out/cluster)  logs and reports
#   RECOVERY_RATE (2000)  msgs/s the recovery publisher sends
#   INTEREST_SUBS (100000), INTEREST_NODES (5)
# Outputs in $OUT: results.md/.json (matrix), recovery.md/.json, interest.md/.json
# (with the runs' raw lines in recovery.jsonl, interest.jsonl), every server's log.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

MODE=matrix
case "${1:-}" in
matrix | recovery | interest | all) MODE=$1; shift ;;
esac
RUNS=3
SCALE=1
QUIET=()
NATSVS_ARGS=()
while [ $# -gt 0 ]; do
	case "$1" in
	-h | -help | --help) usage; exit 0 ;;
	--list | -list) exec go -C bench run ./natsvs --cluster --list ;;
	--runs | -runs) RUNS=$2; NATSVS_ARGS+=("$1" "$2"); shift 2 ;;
	--runs=* | -runs=*) RUNS=${1#*=}; NATSVS_ARGS+=("$1"); shift ;;
	--scale | -scale) SCALE=$2; NATSVS_ARGS+=("$1" "$2"); shift 2 ;;
	--scale=* | -scale=*) SCALE=${1#*=}; NATSVS_ARGS+=("$1"); shift ;;
	--quiet-wait | -quiet-wait) QUIET=(--quiet-wait "$2"); NATSVS_ARGS+=("$1" "$2"); shift 2 ;;
	--quiet-wait=* | -quiet-wait=*) QUIET=("$1"); NATSVS_ARGS+=("$1"); shift ;;
	*) NATSVS_ARGS+=("$1"); shift ;;
	esac
done
case "$RUNS" in '' | *[!0-9]* | 0) echo "cluster.sh: --runs wants a positive number" >&2; exit 2 ;; esac

NATS_BASE=${NATS_BASE:-14300}
TERN_BASE=${TERN_BASE:-17500}
OUT=${OUT:-bench/out/cluster}
RECOVERY_RATE=${RECOVERY_RATE:-2000}
INTEREST_SUBS=${INTEREST_SUBS:-100000}
INTEREST_NODES=${INTEREST_NODES:-5}
case "$INTEREST_NODES" in [2-9]) ;; *) echo "cluster.sh: INTEREST_NODES must be 2 to 9" >&2; exit 2 ;; esac
mkdir -p "$OUT"
BENCH=cluster.sh BENCH_LOGS=$OUT
. bench/lib.sh

NATS_SERVER=$(go_tool nats-server)

MAX_NODES=3
case "$MODE" in interest | all) MAX_NODES=$((INTEREST_NODES > 3 ? INTEREST_NODES : 3)) ;; esac
ports=()
for i in $(seq 1 "$MAX_NODES"); do
	ports+=($((NATS_BASE + 10 * i)) $((NATS_BASE + 10 * i + 1)) $((NATS_BASE + 10 * i + 2)))
	ports+=($((TERN_BASE + 10 * i)) $((TERN_BASE + 10 * i + 1)) $((TERN_BASE + 10 * i + 2)) $((TERN_BASE + 10 * i + 3)))
done
require_free_ports "NATS_BASE / TERN_BASE" "${ports[@]}"

# --- build ------------------------------------------------------------------------------
echo "== building tern and the harnesses"
go build -o "$OUT/tern" ./cmd/tern
bench_build "$OUT/natsvs" ./natsvs
bench_build "$OUT/clustervs" ./clustervs
nats_version=$("$NATS_SERVER" --version 2>&1 | sed -n 's/^nats-server: *//p')
tern_version=$("$OUT/tern" version | sed -n 's/^tern *//p')

# --- the nodes: started here, stopped by pid --------------------------------------------
declare -A PID=() # "nats2", "tern3" -> pid of that node's server
cleanup() {
	local k
	for k in "${!PID[@]}"; do
		kill -TERM "${PID[$k]}" 2>/dev/null || true
	done
	for k in "${!PID[@]}"; do
		wait "${PID[$k]}" 2>/dev/null || true
	done
	PID=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

client_port() { # system node
	case "$1" in nats) echo $((NATS_BASE + 10 * $2)) ;; tern) echo $((TERN_BASE + 10 * $2)) ;; esac
}
monitor_port() {
	case "$1" in nats) echo $((NATS_BASE + 10 * $2 + 2)) ;; tern) echo $((TERN_BASE + 10 * $2 + 3)) ;; esac
}
route_port() {
	case "$1" in nats) echo $((NATS_BASE + 10 * $2 + 1)) ;; tern) echo $((TERN_BASE + 10 * $2 + 1)) ;; esac
}
list() { # system nodes kind(url|monitor|pid): comma-separated, node order
	local sys=$1 n=$2 kind=$3 i out=""
	for i in $(seq 1 "$n"); do
		case "$kind" in
		url) out+="$sys://127.0.0.1:$(client_port "$sys" "$i")," ;;
		monitor) out+="http://127.0.0.1:$(monitor_port "$sys" "$i")," ;;
		pid) out+="${PID[$sys$i]},"
		esac
	done
	echo "${out%,}"
}

start_node() { # system node nodes
	local sys=$1 i=$2 n=$3 j routes="" join="" conf
	case "$sys" in
	nats)
		for j in $(seq 1 "$n"); do routes+="nats-route://127.0.0.1:$(route_port nats "$j"), "; done
		conf=$OUT/nats-n$i.conf
		cat >"$conf" <<-EOF
			server_name: nats$i
			listen: 127.0.0.1:$(client_port nats "$i")
			http: 127.0.0.1:$(monitor_port nats "$i")
			cluster {
			  name: bench
			  listen: 127.0.0.1:$(route_port nats "$i")
			  routes: [${routes%, }]
			}
		EOF
		"$NATS_SERVER" -c "$conf" >>"$OUT/nats-n$i.log" 2>&1 &
		;;
	tern)
		for j in $(seq 1 "$n"); do join+="127.0.0.1:$(route_port tern "$j"),"; done
		"$OUT/tern" server --server-name "tern$i" --host 127.0.0.1 --port "$(client_port tern "$i")" \
			--http "127.0.0.1:$(monitor_port tern "$i")" --cluster-name bench --cluster-port "$(route_port tern "$i")" \
			--join "${join%,}" --mqtt-port -1 --mqtt-ws-port -1 --kafka-port -1 --udp-port -1 --store-dir "$OUT/tern-store/n$i" \
			>>"$OUT/tern-n$i.log" 2>&1 &
		;;
	esac
	PID[$sys$i]=$!
}

wait_node() { # system node
	wait_port "$(client_port "$1" "$2")" "${PID[$1$2]}" "$1 node $2"
	wait_port "$(monitor_port "$1" "$2")" "${PID[$1$2]}" "$1 node $2 (monitoring)"
}

stop_node() { # system node
	stop_pid "${PID[$1$2]}" "$1 node $2"
	unset "PID[$1$2]"
}

mesh() { # system nodes
	"$OUT/clustervs" mesh --system "$1" --monitor "$(list "$1" "$2" monitor)"
}

start_clusters() { # nodes: both systems, fresh
	local n=$1 sys i
	rm -rf "$OUT/tern-store"
	for sys in nats tern; do
		for i in $(seq 1 "$n"); do start_node "$sys" "$i" "$n"; done
	done
	for sys in nats tern; do
		for i in $(seq 1 "$n"); do wait_node "$sys" "$i"; done
	done
	mesh nats "$n"
	mesh tern "$n"
}

stop_clusters() {
	local k
	for k in "${!PID[@]}"; do
		stop_pid "${PID[$k]}" "$k"
	done
	PID=()
}

order() { # run number: both systems, the first one alternating
	if [ $(($1 % 2)) -eq 1 ]; then echo nats tern; else echo tern nats; fi
}

rm -f "$OUT"/nats-n*.log "$OUT"/tern-n*.log
machine_head
machine_go
echo "nats-server:  $nats_version (node i: 127.0.0.1:$NATS_BASE+10i)"
echo "tern:         $tern_version (node i: 127.0.0.1:$TERN_BASE+10i)"
echo "GOMAXPROCS:   ${GOMAXPROCS:-unset (Go uses every CPU)}; every node and the load generator share the machine"
echo

run_matrix() {
	echo "== matrix across 3-node clusters (progress on stderr, table on stdout)"
	"$OUT/natsvs" --cluster --nats "$(list nats 3 url)" --tern "$(list tern 3 url)" \
		--nats-version "$nats_version" --tern-version "$tern_version" \
		--json "$OUT/results.json" "${NATSVS_ARGS[@]}" | tee "$OUT/results.md"
	echo
}

run_recovery() {
	local r sys
	echo "== recovery: kill -9 of node 3 under a subscriber, $RUNS runs per broker"
	rm -f "$OUT/recovery.jsonl"
	for r in $(seq 1 "$RUNS"); do
		for sys in $(order "$r"); do
			mesh "$sys" 3 >/dev/null
			# The harness kills node 3, then it is reaped here. Bash reports a job
			# killed by a signal on its own stderr: that goes to /dev/null for this
			# group, the harness's stderr (fd 3) does not.
			{
				"$OUT/clustervs" recovery --system "$sys" --urls "$(list "$sys" 3 url)" --monitor "$(list "$sys" 3 monitor)" \
					--victim 3 --kill-pid "${PID[${sys}3]}" --rate "$RECOVERY_RATE" "${QUIET[@]}" --out "$OUT/recovery.jsonl" 2>&3
				wait "${PID[${sys}3]}" || true
			} 3>&2 2>/dev/null
			unset "PID[${sys}3]"
			# Start it again and wait for the mesh.
			start_node "$sys" 3 3
			wait_node "$sys" 3
			mesh "$sys" 3 >/dev/null
		done
	done
	"$OUT/clustervs" report --recovery "$OUT/recovery.jsonl" --json "$OUT/recovery.json" | tee "$OUT/recovery.md"
}

run_interest() {
	local r sys
	echo "== interest scale: $INTEREST_SUBS subscriptions (× $SCALE) on node 1 of $INTEREST_NODES, $RUNS runs per broker, fresh clusters each run"
	rm -f "$OUT/interest.jsonl"
	for r in $(seq 1 "$RUNS"); do
		start_clusters "$INTEREST_NODES"
		for sys in $(order "$r"); do
			"$OUT/clustervs" interest --system "$sys" --urls "$(list "$sys" "$INTEREST_NODES" url)" \
				--monitor "$(list "$sys" "$INTEREST_NODES" monitor)" --pids "$(list "$sys" "$INTEREST_NODES" pid)" \
				--subs "$INTEREST_SUBS" --scale "$SCALE" "${QUIET[@]}" --out "$OUT/interest.jsonl"
		done
		stop_clusters
	done
	"$OUT/clustervs" report --interest "$OUT/interest.jsonl" --json "$OUT/interest.json" | tee "$OUT/interest.md"
}

case "$MODE" in
matrix | recovery | all)
	echo "== starting two 3-node clusters"
	start_clusters 3
	[ "$MODE" = recovery ] || run_matrix
	[ "$MODE" = matrix ] || run_recovery
	stop_clusters
	;;
esac
case "$MODE" in
interest | all) run_interest ;;
esac
echo
echo "== written to $OUT: $(cd "$OUT" && ls -- *.md *.json 2>/dev/null | tr '\n' ' ')"
