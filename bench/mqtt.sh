#!/usr/bin/env bash
# MQTT on this machine: Mosquitto, Mochi and Tern driven by one load client
# (bench/mqttvs): QoS 0 and 1 throughput for 1→1, 10→10, 100→1 and 1→100 at 32 B and
# 1 KiB, end-to-end latency at a fixed rate, and the memory of idle connections. The
# throughput table has Tern's ratio over each of the two others.
#
# Installs mosquitto (Debian) if missing and the mochi-mqtt release pinned in
# bench/lib.sh (MOCHI_VERSION; go install, into bench/.tools/bin) if missing, builds
# tern and the harness into $OUT/mqtt, starts
#   mosquitto -c <conf>   listener 127.0.0.1:$MOSQ_PORT, no persistence,
#                         max_inflight_messages 1024, max_queued_messages 1000000
#   mochi-mqtt -tcp 127.0.0.1:$MOCHI_PORT -ws 127.0.0.1:$MOCHI_WS_PORT
#              -info 127.0.0.1:$MOCHI_INFO_PORT
#                         (its command has no options beyond the listeners, which it
#                         always opens: WebSocket and HTTP stats go to unused ports;
#                         its defaults otherwise, e.g. 8192 pending writes per client)
#   tern server --host 127.0.0.1 --port $TERN_NATIVE_PORT --mqtt-port $TERN_PORT
#               --mqtt-ws-port -1 --http "" --store-dir <tmp> --mqtt-max-queued 1000000
# (the same in-flight window and per-client queue on Mosquitto and Tern), runs the
# matrix and the latency rows, restarts all three fresh for the idle-connection row,
# and stops exactly the processes it started, by pid, on EXIT, INT and TERM.
#
# With TLS=1 every MQTT connection is over TLS: a throwaway CA and a certificate for
# 127.0.0.1 are made into $OUT/certs (openssl, bench/lib.sh make_test_certs; kept while
# valid); Mosquitto's listener gets cafile/certfile/keyfile, Mochi
# -tls-cert-file/-tls-key-file (its TCP listener is then TLS-only), Tern
# --mqtt-port -1 --mqtt-tls-port $TERN_PORT --tls-cert-file --tls-key-file (no plaintext
# MQTT), and mqttvs --tls-ca trusts the CA. The ports stay the same; results go to
# $OUT/mqtt-tls.
#
# Usage: bench/mqtt.sh [mqttvs options]      e.g. bench/mqtt.sh --runs 5
#                                                 bench/mqtt.sh --only q1 --scale 0.3
#        TLS=1 bench/mqtt.sh                     every broker over TLS only
#        bench/mqtt.sh --list
# Environment:
#   MOSQ_PORT (21883), TERN_PORT (21884), TERN_NATIVE_PORT (27402),
#   MOCHI_PORT (21885), MOCHI_WS_PORT (21886), MOCHI_INFO_PORT (21887)
#   IDLE_CONNS (50000)   idle connections for the memory row; 0 skips it. Each process
#                        needs that many file descriptors: the script raises its limit
#                        if it may, else uses what the limit allows.
#   OUT (bench/out)      results in $OUT/mqtt/results.md ($OUT/mqtt-tls with TLS=1)
#   TLS=1                MQTT over TLS on every broker (above)
set -euo pipefail
cd "$(dirname "$0")/.."

for a in "$@"; do
	case "$a" in
	--list | -list | -h | -help | --help) exec go -C bench run ./mqttvs "$@" ;;
	esac
done

MOSQ_PORT=${MOSQ_PORT:-21883}
TERN_PORT=${TERN_PORT:-21884}
TERN_NATIVE_PORT=${TERN_NATIVE_PORT:-27402}
MOCHI_PORT=${MOCHI_PORT:-21885}
MOCHI_WS_PORT=${MOCHI_WS_PORT:-21886}
MOCHI_INFO_PORT=${MOCHI_INFO_PORT:-21887}
IDLE_CONNS=${IDLE_CONNS:-50000}
OUT=${OUT:-bench/out}
TLS=${TLS:-0}
case "$TLS" in 0 | 1) ;; *) echo "mqtt.sh: TLS=$TLS: want 0 or 1" >&2; exit 2 ;; esac
CERTS=$OUT/certs
MOUT=$OUT/mqtt
[ "$TLS" = 1 ] && MOUT=$OUT/mqtt-tls
mkdir -p "$MOUT"
BENCH=mqtt.sh BENCH_LOGS=$MOUT
. bench/lib.sh

if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
	echo "== installing mosquitto (Debian package)"
	apt_install mosquitto
fi
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)
MOCHI=$(go_tool mochi-mqtt)

# Each process (the load client, each server) holds one descriptor per idle connection.
if [ "$IDLE_CONNS" -gt 0 ]; then
	need=$((IDLE_CONNS + 1000))
	if [ "$(ulimit -n)" -lt "$need" ]; then
		ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	fi
	if [ "$(ulimit -n)" -lt "$need" ]; then
		echo "mqtt.sh: only $(ulimit -n) file descriptors per process (hard limit $(ulimit -Hn)); idle row with $(($(ulimit -n) - 1000)) connections" >&2
		IDLE_CONNS=$(($(ulimit -n) - 1000))
	fi
fi

require_free_ports "MOSQ_PORT / MOCHI_PORT / MOCHI_WS_PORT / MOCHI_INFO_PORT / TERN_PORT / TERN_NATIVE_PORT" \
	"$MOSQ_PORT" "$MOCHI_PORT" "$MOCHI_WS_PORT" "$MOCHI_INFO_PORT" "$TERN_PORT" "$TERN_NATIVE_PORT"

echo "== building bench/mqttvs and tern"
bench_build "$MOUT/mqttvs" ./mqttvs
go build -o "$MOUT/tern" ./cmd/tern

RUN_DIR=$(mktemp -d /tmp/tern-mqtt-bench.XXXXXX)
MOSQ_TLS=
MOCHI_TLS=()
TERN_MQTT=(--mqtt-port "$TERN_PORT")
VS_TLS=()
if [ "$TLS" = 1 ]; then
	make_test_certs "$CERTS"
	CERTS=$(cd "$CERTS" && pwd)
	# Mosquitto started as root drops to its own user before it reads the key (0600,
	# ours): it stays the user that started it.
	MOSQ_TLS="cafile $CERTS/ca.pem
certfile $CERTS/server.pem
keyfile $CERTS/server-key.pem
user $(id -un)"
	MOCHI_TLS=(-tls-cert-file "$CERTS/server.pem" -tls-key-file "$CERTS/server-key.pem")
	TERN_MQTT=(--mqtt-port -1 --mqtt-tls-port "$TERN_PORT" --tls-cert-file "$CERTS/server.pem" --tls-key-file "$CERTS/server-key.pem")
	VS_TLS=(--tls-ca "$CERTS/ca.pem")
fi
cat >"$RUN_DIR/mosquitto.conf" <<EOF
listener $MOSQ_PORT 127.0.0.1
$MOSQ_TLS
allow_anonymous true
persistence false
max_inflight_messages 1024
max_queued_messages 1000000
log_dest stderr
log_type error
log_type warning
EOF
bench_stop_on_exit stop_servers
start_servers() {
	"$MOSQUITTO" -c "$RUN_DIR/mosquitto.conf" >>"$MOUT/mosquitto.log" 2>&1 &
	MOSQ_PID=$!
	PIDS+=("$MOSQ_PID")
	"$MOCHI" -tcp "127.0.0.1:$MOCHI_PORT" -ws "127.0.0.1:$MOCHI_WS_PORT" -info "127.0.0.1:$MOCHI_INFO_PORT" "${MOCHI_TLS[@]}" >>"$MOUT/mochi.log" 2>&1 &
	MOCHI_PID=$!
	PIDS+=("$MOCHI_PID")
	rm -rf "$RUN_DIR/tern"
	"$MOUT/tern" server --host 127.0.0.1 --port "$TERN_NATIVE_PORT" "${TERN_MQTT[@]}" --mqtt-ws-port -1 --kafka-port -1 --udp-port -1 \
		--http "" --store-dir "$RUN_DIR/tern" --mqtt-max-queued 1000000 >>"$MOUT/tern-server.log" 2>&1 &
	TERN_PID=$!
	PIDS+=("$TERN_PID")
	wait_port "$MOSQ_PORT" "$MOSQ_PID" mosquitto
	wait_port "$MOCHI_PORT" "$MOCHI_PID" mochi-mqtt
	wait_port "$TERN_PORT" "$TERN_PID" "tern server"
}

mosq_version=$({ "$MOSQUITTO" -h 2>&1 || true; } | sed -n 's/^mosquitto version \([^ ]*\).*/\1/p' | head -1)
{
	machine_head
	machine_go
	echo "mosquitto:    ${mosq_version:-unknown} (127.0.0.1:$MOSQ_PORT)"
	echo "mochi-mqtt:   $MOCHI_VERSION (127.0.0.1:$MOCHI_PORT)"
	echo "tern:         $("$MOUT/tern" version 2>/dev/null || echo 0.1.0-dev) (127.0.0.1:$TERN_PORT)"
	echo "open files:   $(ulimit -n)"
	echo "TLS:          $([ "$TLS" = 1 ] && echo "on, every broker TLS-only on its MQTT port, CA $CERTS/ca.pem" || echo off)"
	echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min, at the start)"
} | tee "$MOUT/machine.txt"

start_servers
# Tern last: the table has its ratio over each of the others.
brokers="mosquitto=127.0.0.1:$MOSQ_PORT,mochi=127.0.0.1:$MOCHI_PORT,tern=127.0.0.1:$TERN_PORT"
echo "== throughput and latency (progress on stderr)"
run_job "$MOUT/mqttvs" --brokers "$brokers" "${VS_TLS[@]}" "$@" >"$MOUT/throughput.md"
stop_servers

: >"$MOUT/idle.md"
if [ "$IDLE_CONNS" -gt 0 ]; then
	echo "== $IDLE_CONNS idle connections, fresh servers"
	start_servers
	run_job "$MOUT/mqttvs" --brokers "$brokers" "${VS_TLS[@]}" --pids "mosquitto=$MOSQ_PID,mochi=$MOCHI_PID,tern=$TERN_PID" --only none \
		--latency-rate 0 --idle-conns "$IDLE_CONNS" >"$MOUT/idle.md"
	stop_servers
fi
{
	cat "$MOUT/machine.txt"
	echo
	cat "$MOUT/throughput.md"
	grep -v '^## MQTT\|^- load generator\|^- TLS' "$MOUT/idle.md" || true
} >"$MOUT/results.md"
echo "== written: $MOUT/results.md"
cat "$MOUT/results.md"
