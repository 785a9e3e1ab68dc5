# Shell helpers of bench/failover.sh and bench/idlegroups.sh (sourced after
# bench/lib.sh): start a fresh 3-node cluster of Tern (cluster_size 3) or of NATS
# JetStream on loopback, wait until it can make streams of 3 replicas, and stop it,
# by pid. One cluster runs at a time.
#
# The sourcing script sets:
#   ROUT          where configs and node logs go
#   RUN_DIR       a temporary directory for the stores
#   TERN_BIN      tern built from this tree
#   NATS_SERVER   the pinned nats-server (go_tool nats-server)
#   REPLICAVS, REPLICATEDVS   the harnesses (readiness waits)
#   TERN_BASE, JS_BASE        node i: client BASE+10i, route +1, then Tern: gossip +2,
#                             monitoring +3; JetStream: monitoring +2
# and may set TERN_ARGS: more `tern server` options for every Tern node (split on
# spaces), e.g. "--sync never", and R3_MQTT=1: MQTT on every node (Tern: MQTT port
# BASE+10i+4; JetStream: an mqtt block on BASE+10i+3 with stream_replicas 3, so its
# MQTT sessions and QoS 1 messages live in streams of 3 replicas), and R3_KAFKA=1:
# Tern's Kafka API on every Tern node, on BASE+10i+5 (each node its own port).

R3_PIDS=() # the running cluster's nodes, node order
R3_SYS=    # tern or js
R3_TAG=    # its stores and logs: $RUN_DIR/$R3_TAG-n<i>, $ROUT/$R3_TAG-n<i>.log

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
r3_list() { # what (urls|names|pids|monitors|mqtt|kafka): of the running cluster, comma-separated
	local i out=""
	for i in 1 2 3; do
		case "$1" in
		urls) if [ "$R3_SYS" = tern ]; then out+="tern://127.0.0.1:$(r3_port tern "$i"),"; else out+="nats://127.0.0.1:$(r3_port js "$i"),"; fi ;;
		names) out+="$R3_SYS$i," ;;
		pids) out+="${R3_PIDS[$((i - 1))]}," ;;
		monitors) out+="http://127.0.0.1:$(r3_monitor_port "$R3_SYS" "$i")," ;;
		mqtt) out+="127.0.0.1:$(r3_mqtt_port "$R3_SYS" "$i")," ;;
		kafka) out+="127.0.0.1:$(r3_kafka_port "$i")," ;;
		esac
	done
	echo "${out%,}"
}

r3_start() { # sys tag: start a fresh cluster and wait until it is ready
	local sys=$1 i j join="" routes="" conf extra=() mqtt_port mqtt_conf kafka_port
	R3_SYS=$sys R3_TAG=$2 R3_PIDS=()
	# shellcheck disable=SC2206 # split on spaces, as documented
	[ -z "${TERN_ARGS:-}" ] || extra=($TERN_ARGS)
	case "$sys" in
	tern)
		for i in 1 2 3; do join+="127.0.0.1:$(($(r3_port tern "$i") + 1)),"; done
		for i in 1 2 3; do
			mqtt_port=-1
			[ "${R3_MQTT:-0}" != 1 ] || mqtt_port=$(r3_mqtt_port tern "$i")
			kafka_port=-1
			[ "${R3_KAFKA:-0}" != 1 ] || kafka_port=$(r3_kafka_port "$i")
			# Defaults otherwise: fsync every 100 ms (sync interval), as replicated.sh.
			"$TERN_BIN" server --server-name "tern$i" --host 127.0.0.1 --port "$(r3_port tern "$i")" \
				--http "127.0.0.1:$(r3_monitor_port tern "$i")" --cluster-name r3 --cluster-port "$(($(r3_port tern "$i") + 1))" \
				--join "${join%,}" --cluster-size 3 --mqtt-port "$mqtt_port" --mqtt-ws-port -1 --kafka-port "$kafka_port" --udp-port -1 \
				--store-dir "$RUN_DIR/$R3_TAG-n$i" "${extra[@]}" >"$ROUT/$R3_TAG-n$i.log" 2>&1 &
			R3_PIDS+=($!)
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
				  store_dir: "$RUN_DIR/$R3_TAG-n$i"
				}
				cluster {
				  name: r3
				  listen: 127.0.0.1:$(($(r3_port js "$i") + 1))
				  routes: [${routes%, }]
				}
				$mqtt_conf
			EOF
			"$NATS_SERVER" -c "$conf" >"$ROUT/$R3_TAG-n$i.log" 2>&1 &
			R3_PIDS+=($!)
		done
		;;
	esac
	for i in 1 2 3; do
		wait_port "$(r3_port "$sys" "$i")" "${R3_PIDS[$((i - 1))]}" "$sys node $i" 30
		wait_port "$(r3_monitor_port "$sys" "$i")" "${R3_PIDS[$((i - 1))]}" "$sys node $i (monitoring)" 30
	done
	case "$sys" in
	tern) "$REPLICAVS" wait-tern --monitors "$(r3_list monitors)" --timeout 60s >&2 ;;
	js) "$REPLICATEDVS" wait-js --monitors "$(r3_list monitors)" --timeout 60s ;;
	esac
}

r3_stop() { # stop the running cluster's nodes (a node killed by the harness is gone already), remove its stores
	local pid i
	for pid in "${R3_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${R3_PIDS[@]}"; do stop_pid "$pid" "$R3_SYS node" 30; done
	R3_PIDS=()
	if [ -n "$R3_TAG" ]; then
		for i in 1 2 3; do rm -rf "${RUN_DIR:?}/$R3_TAG-n$i"; done
	fi
	R3_TAG=
}
