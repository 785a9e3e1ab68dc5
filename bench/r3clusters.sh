# Shell helpers of the drivers that measure 3-node clusters (bench/failover.sh,
# bench/idlegroups.sh, bench/mqttcluster.sh, bench/kafkaapi.sh, bench/replicated.sh;
# sourced after bench/lib.sh): check their ports, start a fresh 3-node cluster of Tern
# (cluster_size 3) or of NATS JetStream on loopback, wait until it can make streams
# of 3 replicas, and stop it, by pid. A Tern and a JetStream cluster may run at the
# same time (replicated.sh measures both in one streamvs run); one cluster of each.
#
# The sourcing script sets:
#   ROUT          where configs and node logs go
#   RUN_DIR       a temporary directory for the stores
#   TERN_BIN      tern built from this tree (or tern_server_bin's wrapper of it)
#   NATS_SERVER   the pinned nats-server (go_tool nats-server)
#   REPLICAVS, REPLICATEDVS   the harnesses (readiness waits)
# (r3_build builds the last three into ROUT and sets them)
#   TERN_BASE, JS_BASE        node i: client BASE+10i, route +1, then Tern: gossip +2,
#                             monitoring +3; JetStream: monitoring +2
# and may set TERN_ARGS: more `tern server` options for every Tern node (split on
# spaces), e.g. "--sync never", and R3_MQTT=1: MQTT on every node (Tern: MQTT port
# BASE+10i+4; JetStream: an mqtt block on BASE+10i+3 with stream_replicas 3, so its
# MQTT sessions and QoS 1 messages live in streams of 3 replicas), and R3_KAFKA=1:
# Tern's Kafka API on every Tern node, on BASE+10i+5 (each node its own port).

declare -A R3_PIDS=() # "<sys><i>" -> pid of node i of that system's running cluster
declare -A R3_TAGS=() # sys -> its running cluster's stores and logs: $RUN_DIR/<tag>-n<i>, $ROUT/<tag>-n<i>.log
R3_SYS=               # the system started last: what r3_list and r3_pid read by default

r3_port() { # sys node: client port
	case "$1" in tern) echo $((TERN_BASE + 10 * $2)) ;; js) echo $((JS_BASE + 10 * $2)) ;; esac
}
r3_monitor_port() {
	case "$1" in tern) echo $((TERN_BASE + 10 * $2 + 3)) ;; js) echo $((JS_BASE + 10 * $2 + 2)) ;; esac
}
r3_mqtt_port() { # sys node: MQTT port (with R3_MQTT=1)
	case "$1" in tern) echo $((TERN_BASE + 10 * $2 + 4)) ;; js) echo $((JS_BASE + 10 * $2 + 3)) ;; esac
}
r3_kafka_port() { # node: Tern's Kafka API port (with R3_KAFKA=1)
	echo $((TERN_BASE + 10 * $1 + 5))
}
r3_all_ports() { # sys: every port its nodes use
	local i
	for i in 1 2 3; do
		case "$1" in
		tern) echo $((TERN_BASE + 10 * i)) $((TERN_BASE + 10 * i + 1)) $((TERN_BASE + 10 * i + 2)) $((TERN_BASE + 10 * i + 3)) ;;
		js) echo $((JS_BASE + 10 * i)) $((JS_BASE + 10 * i + 1)) $((JS_BASE + 10 * i + 2)) ;;
		esac
		[ "${R3_MQTT:-0}" != 1 ] || r3_mqtt_port "$1" "$i"
		[ "${R3_KAFKA:-0}" != 1 ] || [ "$1" != tern ] || r3_kafka_port "$i"
	done
}
r3_build() { # tern and the harnesses whose readiness waits r3_start runs, into ROUT
	TERN_BIN=$ROUT/tern
	REPLICAVS=$ROUT/replicavs
	REPLICATEDVS=$ROUT/replicatedvs
	go build -o "$TERN_BIN" ./cmd/tern
	bench_build "$REPLICAVS" ./replicavs
	bench_build "$REPLICATEDVS" ./replicatedvs
}
r3_setup() { # run-dir-prefix: what a driver of SYS_LIST's clusters does before its first
	# run: install nats-server, check the clusters' ports, build (r3_build), make
	# RUN_DIR (/tmp/<prefix>.XXXXXX) and stop everything on EXIT, INT and TERM
	NATS_SERVER=$(go_tool nats-server)
	r3_require_free_ports "${SYS_LIST[@]}"
	echo "== building tern, bench/replicavs and bench/replicatedvs"
	r3_build
	RUN_DIR=$(mktemp -d "/tmp/$1.XXXXXX")
	bench_stop_on_exit r3_stop
}
r3_require_free_ports() { # sys...: exit if a port of their clusters is taken
	local sys ports=()
	for sys in "$@"; do
		# shellcheck disable=SC2207 # numbers
		ports+=($(r3_all_ports "$sys"))
	done
	require_free_ports "TERN_BASE / JS_BASE" "${ports[@]}"
}
r3_systems() { # list: SYS_LIST from a comma-separated list of tern and js (SYSTEMS)
	local s
	SYS_LIST=()
	for s in ${1//,/ }; do
		case "$s" in tern | js) SYS_LIST+=("$s") ;; *) echo "$BENCH: SYSTEMS: unknown system $s (tern, js)" >&2; exit 2 ;; esac
	done
}
r3_pid() { # [sys] node: pid of that node of the running cluster (default: the one started last)
	if [ $# -eq 1 ]; then set -- "$R3_SYS" "$1"; fi
	echo "${R3_PIDS[$1$2]}"
}
r3_list() { # what (urls|names|pids|monitors|mqtt|kafka) [sys]: of the running cluster, comma-separated
	local sys=${2:-$R3_SYS} i out=""
	for i in 1 2 3; do
		case "$1" in
		urls) if [ "$sys" = tern ]; then out+="tern://127.0.0.1:$(r3_port tern "$i"),"; else out+="nats://127.0.0.1:$(r3_port js "$i"),"; fi ;;
		names) out+="$sys$i," ;;
		pids) out+="${R3_PIDS[$sys$i]}," ;;
		monitors) out+="http://127.0.0.1:$(r3_monitor_port "$sys" "$i")," ;;
		mqtt) out+="127.0.0.1:$(r3_mqtt_port "$sys" "$i")," ;;
		kafka) out+="127.0.0.1:$(r3_kafka_port "$i")," ;;
		esac
	done
	echo "${out%,}"
}

r3_start() { # sys tag: start a fresh cluster of sys and wait until it is ready
	local sys=$1 tag=$2 i j join="" routes="" conf extra=() mqtt_port mqtt_conf kafka_port
	R3_SYS=$sys
	R3_TAGS[$sys]=$tag
	# shellcheck disable=SC2206 # split on spaces, as documented
	[ -z "${TERN_ARGS:-}" ] || extra=($TERN_ARGS)
	case "$sys" in
	tern)
		for i in 1 2 3; do join+="127.0.0.1:$(($(r3_port tern "$i") + 1)),"; done
		for i in 1 2 3; do
			mqtt_port=-1
			[ "${R3_MQTT:-0}" != 1 ] || mqtt_port=$(r3_mqtt_port tern "$i")
			kafka_port=-1 kafka_opts=()
			if [ "${R3_KAFKA:-0}" = 1 ]; then
				kafka_port=$(r3_kafka_port "$i")
				# A new consumer group starts at once, as the Kafka brokers beside it
				# are set (group.initial.rebalance.delay.ms=0, kafka.sh).
				kafka_opts=(--kafka-group-initial-delay 0)
			fi
			# Defaults otherwise: fsync every 100 ms (sync interval), as replicated.sh.
			"$TERN_BIN" server --server-name "tern$i" --host 127.0.0.1 --port "$(r3_port tern "$i")" \
				--http "127.0.0.1:$(r3_monitor_port tern "$i")" --cluster-name r3 --cluster-port "$(($(r3_port tern "$i") + 1))" \
				--join "${join%,}" --cluster-size 3 --mqtt-port "$mqtt_port" --mqtt-ws-port -1 --kafka-port "$kafka_port" --udp-port -1 \
				--store-dir "$RUN_DIR/$tag-n$i" "${kafka_opts[@]}" "${extra[@]}" >"$ROUT/$tag-n$i.log" 2>&1 &
			R3_PIDS[tern$i]=$!
		done
		;;
	js)
		for j in 1 2 3; do routes+="nats-route://127.0.0.1:$(($(r3_port js "$j") + 1)), "; done
		for i in 1 2 3; do
			conf=$ROUT/nats-n$i.conf
			mqtt_conf=""
			if [ "${R3_MQTT:-0}" = 1 ]; then
				mqtt_conf="mqtt {
  listen: 127.0.0.1:$(r3_mqtt_port js "$i")
  stream_replicas: 3
}"
			fi
			# nats-server's defaults otherwise (sync_interval 2m, three pooled routes),
			# as replicated.sh.
			cat >"$conf" <<-EOF
				server_name: js$i
				listen: 127.0.0.1:$(r3_port js "$i")
				http: 127.0.0.1:$(r3_monitor_port js "$i")
				jetstream {
				  store_dir: "$RUN_DIR/$tag-n$i"
				}
				cluster {
				  name: r3
				  listen: 127.0.0.1:$(($(r3_port js "$i") + 1))
				  routes: [${routes%, }]
				}
				$mqtt_conf
			EOF
			"$NATS_SERVER" -c "$conf" >"$ROUT/$tag-n$i.log" 2>&1 &
			R3_PIDS[js$i]=$!
		done
		;;
	esac
	for i in 1 2 3; do
		wait_port "$(r3_port "$sys" "$i")" "${R3_PIDS[$sys$i]}" "$sys node $i" 30
		wait_port "$(r3_monitor_port "$sys" "$i")" "${R3_PIDS[$sys$i]}" "$sys node $i (monitoring)" 30
	done
	case "$sys" in
	tern) "$REPLICAVS" wait-tern --monitors "$(r3_list monitors tern)" --timeout 60s >&2 ;;
	js) "$REPLICATEDVS" wait-js --monitors "$(r3_list monitors js)" --timeout 60s ;;
	esac
}

r3_stop() { # [sys...]: stop those clusters' nodes (default: every running one; a node
	# the harness killed is gone already), all at once, and remove their stores
	local sys k i
	[ $# -gt 0 ] || set -- "${!R3_TAGS[@]}"
	for sys in "$@"; do
		for k in "${!R3_PIDS[@]}"; do
			[ "${k%[0-9]}" != "$sys" ] || kill -TERM "${R3_PIDS[$k]}" 2>/dev/null || true
		done
	done
	for sys in "$@"; do
		for k in "${!R3_PIDS[@]}"; do
			if [ "${k%[0-9]}" = "$sys" ]; then
				stop_pid "${R3_PIDS[$k]}" "$sys node" 30
				unset "R3_PIDS[$k]"
			fi
		done
		if [ -n "${R3_TAGS[$sys]:-}" ]; then
			for i in 1 2 3; do rm -rf "${RUN_DIR:?}/${R3_TAGS[$sys]}-n$i"; done
		fi
		unset "R3_TAGS[$sys]"
	done
}
