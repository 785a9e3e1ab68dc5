#!/usr/bin/env bash
# A local cluster for trying Tern out: N nodes (default 3, at most 8) on 127.0.0.1,
# each a background `tern server` built once into bin/tern.
#
#   scripts/cluster.sh start [N]   start the nodes not running yet, wait for a full
#                                  mesh of routes, list the members
#   scripts/cluster.sh status      each node's pid and ports, then the members
#   scripts/cluster.sh stop        stop exactly the processes this script started
#
# Node i (1..N) listens on PORT_BASE + 10*(i-1) + 0 (native TCP and UDP), + 1
# (cluster routes), + 2 (gossip), PORT_BASE + 80 + 10*(i-1) (monitoring HTTP) and
# MQTT_BASE + i - 1 (MQTT) and KAFKA_BASE + i - 1 (the Kafka API); MQTT over
# WebSocket is off. With the defaults n1 is on 7400, 7401, 7402, HTTP 7480, MQTT
# 1883, Kafka 9092; n2 on 7410, ..., HTTP 7490, MQTT 1884, Kafka 9093.
# Eight nodes at most, so that no node's native port lands on n1's HTTP port.
#
# State lives in $TERN_CLUSTER_DIR (default ./.cluster): per node nI.pid, nI.log and
# nI/ (its store_dir). Running start twice starts only what is missing; stop removes
# the pid files but keeps logs and stores, so a restart finds its streams again.
# Remove the directory for a fresh cluster.
#
# Environment: TERN_CLUSTER_DIR, TERN_CLUSTER_NAME (default local),
# TERN_CLUSTER_PORT_BASE (7400), TERN_CLUSTER_MQTT_BASE (1883), TERN_CLUSTER_KAFKA_BASE (9092),
# TERN_CLUSTER_ARGS (more `tern server` options for every node).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${TERN_CLUSTER_DIR:-.cluster}
name=${TERN_CLUSTER_NAME:-local}
base=${TERN_CLUSTER_PORT_BASE:-7400}
mqtt_base=${TERN_CLUSTER_MQTT_BASE:-1883}
kafka_base=${TERN_CLUSTER_KAFKA_BASE:-9092}
bin=bin/tern
max_nodes=8

die() { echo "cluster.sh: $*" >&2; exit 1; }

native_port() { echo $((base + 10 * ($1 - 1))); }
route_port() { echo $((base + 10 * ($1 - 1) + 1)); }
http_port() { echo $((base + 80 + 10 * ($1 - 1))); }
mqtt_port() { echo $((mqtt_base + $1 - 1)); }
kafka_port() { echo $((kafka_base + $1 - 1)); }
monitor_url() { echo "http://127.0.0.1:$(http_port "$1")"; }

# ours PID: the process is alive and is one of the nodes this script started (a pid
# file outliving its process must not make us signal whatever reused the number).
ours() {
	local args
	args=$(ps -p "$1" -o args= 2>/dev/null) || return 1
	[[ $args == *"$bin server"* && $args == *"--store-dir $dir/"* ]]
}

# node_pid I: the pid of node I if it runs, else nothing (a stale pid file goes).
node_pid() {
	local f="$dir/n$1.pid" pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	if [ -n "$pid" ] && ours "$pid"; then
		echo "$pid"
	else
		rm -f "$f"
	fi
}

# recorded: the node numbers with a pid file, in order.
recorded() {
	local f
	for f in "$dir"/n*.pid; do
		[ -e "$f" ] || continue
		f=${f##*/n}
		echo "${f%.pid}"
	done | sort -n
}

routes_up() { # routes_up I: how many routes node I reports, empty if it does not answer
	"$bin" cluster status --monitor "$(monitor_url "$1")" --timeout 1s 2>/dev/null |
		sed -n 's/^ *routes: *\([0-9]*\) up$/\1/p'
}

start() {
	local n=${1:-3} i join="" pid
	[[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le $max_nodes ] || die "N must be 1 to $max_nodes, not '$n'"
	mkdir -p "$dir" bin
	echo "building $bin"
	go build -o "$bin" ./cmd/tern
	for ((i = 1; i <= n; i++)); do
		join+="${join:+,}127.0.0.1:$(route_port "$i")"
	done
	for ((i = 1; i <= n; i++)); do
		if pid=$(node_pid "$i") && [ -n "$pid" ]; then
			echo "n$i already running (pid $pid)"
			continue
		fi
		mkdir -p "$dir/n$i"
		# shellcheck disable=SC2086 # TERN_CLUSTER_ARGS is a list of options
		nohup "$bin" server --server-name "n$i" --host 127.0.0.1 \
			--port "$(native_port "$i")" --http "127.0.0.1:$(http_port "$i")" \
			--mqtt-port "$(mqtt_port "$i")" --mqtt-ws-port -1 --kafka-port "$(kafka_port "$i")" \
			--cluster-port "$(route_port "$i")" --cluster-name "$name" --join "$join" \
			--store-dir "$dir/n$i" ${TERN_CLUSTER_ARGS:-} >>"$dir/n$i.log" 2>&1 </dev/null &
		echo $! >"$dir/n$i.pid"
		echo "n$i started (pid $!): tern://127.0.0.1:$(native_port "$i"), $(monitor_url "$i"), log $dir/n$i.log"
	done
	# Every node up and routed to every other, or say which is not and where to look.
	local want=$((n - 1)) deadline=$((SECONDS + 30)) pending
	while :; do
		pending=""
		for ((i = 1; i <= n; i++)); do
			[ -n "$(node_pid "$i")" ] || die "n$i exited; see $dir/n$i.log"
			[ "$(routes_up "$i")" = "$want" ] || pending+=" n$i"
		done
		[ -z "$pending" ] && break
		[ $SECONDS -lt $deadline ] || die "no full mesh after 30s (waiting for:$pending); see $dir/n*.log"
		sleep 0.2
	done
	echo
	"$bin" cluster ls --monitor "$(monitor_url 1)"
}

status() {
	local i pid any=""
	for i in $(recorded); do
		any=1
		if pid=$(node_pid "$i") && [ -n "$pid" ]; then
			echo "n$i running (pid $pid): tern://127.0.0.1:$(native_port "$i"), $(monitor_url "$i"), mqtt 127.0.0.1:$(mqtt_port "$i"), kafka 127.0.0.1:$(kafka_port "$i")"
		else
			echo "n$i not running (see $dir/n$i.log)"
		fi
	done
	[ -n "$any" ] || { echo "no nodes started (scripts/cluster.sh start)"; return 0; }
	for i in $(recorded); do
		if [ -n "$(node_pid "$i")" ]; then
			echo
			"$bin" cluster ls --monitor "$(monitor_url "$i")"
			return 0
		fi
	done
}

stop() {
	local i pid pids=() nodes=()
	for i in $(recorded); do
		pid=$(node_pid "$i")
		if [ -n "$pid" ]; then
			kill -TERM "$pid"
			pids+=("$pid")
			nodes+=("$i")
		fi
	done
	# A node leaves the cluster and closes its clients, then exits: give it time.
	local deadline=$((SECONDS + 10)) k
	for k in "${!pids[@]}"; do
		while ours "${pids[$k]}" && [ $SECONDS -lt $deadline ]; do
			sleep 0.1
		done
		if ours "${pids[$k]}"; then
			echo "n${nodes[$k]} (pid ${pids[$k]}) did not stop in 10s: killing it"
			kill -KILL "${pids[$k]}" 2>/dev/null || true
		fi
		rm -f "$dir/n${nodes[$k]}.pid"
		echo "n${nodes[$k]} stopped (pid ${pids[$k]})"
	done
	[ ${#pids[@]} -gt 0 ] || echo "no nodes running"
}

case "${1:-}" in
start) start "${2:-3}" ;;
status) status ;;
stop) stop ;;
*)
	echo "usage: scripts/cluster.sh start [N] | status | stop" >&2
	exit 2
	;;
esac
