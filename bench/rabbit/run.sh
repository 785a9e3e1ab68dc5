#!/usr/bin/env bash
# RabbitMQ durable work-queue benchmark, the RabbitMQ column of bench/streams.sh.
#
# Installs rabbitmq-server (Debian) if missing, starts a private node on loopback on
# non-default ports with all its state in a temporary directory, fetches RabbitMQ
# PerfTest (com.rabbitmq:perf-test from Maven Central, cached in $OUT/perftest) if
# missing, runs a durable work queue with publisher confirms and consumer acks at
# 16 B and 1 KiB, writes a JSON and Markdown summary to $OUT/rabbit/, and stops exactly
# the processes it started (by pid, on EXIT, INT and TERM, also on failure).
#
# Usage: bench/rabbit/run.sh [--runs N] [--time SECONDS] [--sizes "16 1024"]
#                            [--queue-types "quorum classic"] [--install-only]
# Environment (defaults in brackets):
#   OUT [bench/out]                   results go to $OUT/rabbit, PerfTest to $OUT/perftest
#   RABBIT_AMQP_PORT [35672]          AMQP listener (127.0.0.1)
#   RABBIT_DIST_PORT [35682]          Erlang distribution port of the node
#   RABBIT_EPMD_PORT [35369]          private epmd (port mapper) started by this script
#   RABBIT_CTL_PORT [35692]           distribution port of rabbitmqctl (used once)
#   RABBIT_RUNS [3]  RABBIT_TIME [10] runs per row, seconds per run
#   RABBIT_SIZES ["16 1024"]          message sizes in bytes
#   RABBIT_QUEUE_TYPES ["quorum classic"]  quorum: replicated log, fsync before confirm;
#                                     classic: durable classic queue, persistent messages
#   RABBIT_PRODUCERS [1] RABBIT_CONSUMERS [4]
#   RABBIT_CONFIRM [4096]             max unconfirmed publishes per producer (the window)
#   RABBIT_PREFETCH [256]             consumer prefetch (basic.qos), like the pull batch
#   RABBIT_MULTI_ACK [64]             ack every N messages with multiple=true (0: ack each)
#   PERFTEST_VERSION [2.22.1]
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:-bench/out}
AMQP_PORT=${RABBIT_AMQP_PORT:-35672}
DIST_PORT=${RABBIT_DIST_PORT:-35682}
EPMD_PORT=${RABBIT_EPMD_PORT:-35369}
CTL_PORT=${RABBIT_CTL_PORT:-35692}
RUNS=${RABBIT_RUNS:-3}
TIME=${RABBIT_TIME:-10}
SIZES=${RABBIT_SIZES:-16 1024}
QUEUE_TYPES=${RABBIT_QUEUE_TYPES:-quorum classic}
PRODUCERS=${RABBIT_PRODUCERS:-1}
CONSUMERS=${RABBIT_CONSUMERS:-4}
CONFIRM=${RABBIT_CONFIRM:-4096}
PREFETCH=${RABBIT_PREFETCH:-256}
MULTI_ACK=${RABBIT_MULTI_ACK:-64}
PERFTEST_VERSION=${PERFTEST_VERSION:-2.22.1}
INSTALL_ONLY=

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS=$2; shift 2 ;;
	--time) TIME=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--queue-types) QUEUE_TYPES=$2; shift 2 ;;
	--install-only) INSTALL_ONLY=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "rabbit/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for t in $QUEUE_TYPES; do
	case "$t" in quorum | classic) ;; *) echo "rabbit/run.sh: queue type $t: want quorum or classic" >&2; exit 2 ;; esac
done

RES=$OUT/rabbit
PT_DIR=$OUT/perftest/$PERFTEST_VERSION
mkdir -p "$RES" "$PT_DIR"
OUT_ABS=$(cd "$OUT" && pwd)
PT_DIR_ABS=$OUT_ABS/perftest/$PERFTEST_VERSION

# --- installation (only what is missing; apt-get update at most once) ---------------------
BENCH=rabbit/run.sh BENCH_LOGS=$RES
. bench/lib.sh
RABBIT_BIN=/usr/lib/rabbitmq/bin
if [ ! -x "$RABBIT_BIN/rabbitmq-server" ]; then
	echo "== installing rabbitmq-server (Debian package; a few minutes)"
	apt_install rabbitmq-server
fi
command -v java >/dev/null 2>&1 || { echo "== installing a Java runtime for PerfTest"; apt_install default-jre-headless; }

# PerfTest and its dependencies, resolved by Maven from Maven Central into $PT_DIR/lib
# (the perf-test jar on Maven Central is not self-contained). Maven's own cache goes
# to $PT_DIR/m2, not ~/.m2.
if ! ls "$PT_DIR/lib/perf-test-$PERFTEST_VERSION.jar" >/dev/null 2>&1; then
	command -v mvn >/dev/null 2>&1 || { echo "== installing maven (to fetch PerfTest)"; apt_install maven; }
	echo "== fetching RabbitMQ PerfTest $PERFTEST_VERSION (com.rabbitmq:perf-test) from Maven Central"
	cat >"$PT_DIR/pom.xml" <<-EOF
		<project xmlns="http://maven.apache.org/POM/4.0.0">
		  <modelVersion>4.0.0</modelVersion>
		  <groupId>local.bench</groupId>
		  <artifactId>perftest-fetch</artifactId>
		  <version>1</version>
		  <packaging>pom</packaging>
		  <dependencies>
		    <dependency>
		      <groupId>com.rabbitmq</groupId>
		      <artifactId>perf-test</artifactId>
		      <version>$PERFTEST_VERSION</version>
		    </dependency>
		  </dependencies>
		</project>
	EOF
	rm -rf "$PT_DIR/lib.tmp"
	mvn -B -q -f "$PT_DIR/pom.xml" -Dmaven.repo.local="$PT_DIR_ABS/m2" \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PT_DIR_ABS/lib.tmp"
	rm -rf "$PT_DIR/lib"
	mv "$PT_DIR/lib.tmp" "$PT_DIR/lib"
fi
[ -n "$INSTALL_ONLY" ] && exit 0

# --- processes this script starts, stopped by pid on exit ----------------------------------
require_free_ports "RABBIT_AMQP_PORT / RABBIT_DIST_PORT / RABBIT_EPMD_PORT / RABBIT_CTL_PORT" \
	"$AMQP_PORT" "$DIST_PORT" "$EPMD_PORT" "$CTL_PORT"

RUN_DIR=$(mktemp -d /tmp/sbench-rabbit.XXXXXX)
EPMD_PID= SERVER_PID= BEAM_PID= PT_PID=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_pid "$PT_PID" PerfTest 5
	# The rabbitmq-server script stops its Erlang VM on TERM; the VM's pid is stopped on
	# its own should the script be gone first.
	stop_pid "$SERVER_PID" rabbitmq-server 60
	stop_pid "$BEAM_PID" "rabbitmq-server's Erlang VM" 10
	stop_pid "$EPMD_PID" epmd 5
	if [ -d "$RUN_DIR" ]; then
		cp "$RUN_DIR/log/$RABBITMQ_NODENAME.log" "$RES/rabbitmq-server.log" 2>/dev/null || true
		cp "$RUN_DIR/server.out" "$RES/rabbitmq-server.out" 2>/dev/null || true
		rm -rf "$RUN_DIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- a private node: own epmd, ports, node name, cookie, config and data ----------------
mkdir -p "$RUN_DIR/log" "$RUN_DIR/mnesia"
echo "[]." >"$RUN_DIR/enabled_plugins"
: >"$RUN_DIR/rabbitmq.conf"
: >"$RUN_DIR/rabbitmq-env.conf"
export HOME=$RUN_DIR # the Erlang cookie is created here, not in the real home
export RABBITMQ_NODENAME=sbench$$@localhost
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$AMQP_PORT
export RABBITMQ_DIST_PORT=$DIST_PORT
export RABBITMQ_CTL_DIST_PORT_MIN=$CTL_PORT RABBITMQ_CTL_DIST_PORT_MAX=$CTL_PORT
export ERL_EPMD_PORT=$EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_MNESIA_BASE=$RUN_DIR/mnesia
export RABBITMQ_LOG_BASE=$RUN_DIR/log
export RABBITMQ_CONFIG_FILE=$RUN_DIR/rabbitmq.conf
export RABBITMQ_ADVANCED_CONFIG_FILE=$RUN_DIR/advanced.config
export RABBITMQ_ENABLED_PLUGINS_FILE=$RUN_DIR/enabled_plugins
export RABBITMQ_CONF_ENV_FILE=$RUN_DIR/rabbitmq-env.conf
export RABBITMQ_PID_FILE=$RUN_DIR/rabbitmq.pid
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-start_epmd false"

epmd -port "$EPMD_PORT" -address 127.0.0.1 >"$RUN_DIR/epmd.log" 2>&1 &
EPMD_PID=$!
for _ in $(seq 1 50); do port_busy "$EPMD_PORT" && break; sleep 0.1; done
port_busy "$EPMD_PORT" || { echo "rabbit/run.sh: epmd did not listen on $EPMD_PORT" >&2; exit 1; }

echo "== starting rabbitmq-server (node $RABBITMQ_NODENAME, amqp://127.0.0.1:$AMQP_PORT, state in $RUN_DIR)"
(cd "$RUN_DIR" && exec "$RABBIT_BIN/rabbitmq-server") >"$RUN_DIR/server.out" 2>&1 &
SERVER_PID=$!
up=
for _ in $(seq 1 1200); do # up to 120 s: the first boot of a node takes a while
	[ -z "$BEAM_PID" ] && BEAM_PID=$(pgrep -P "$SERVER_PID" -x beam.smp 2>/dev/null | head -1 || true)
	if port_busy "$AMQP_PORT"; then up=1; break; fi
	kill -0 "$SERVER_PID" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$up" ]; then
	echo "rabbit/run.sh: rabbitmq-server did not come up; its output:" >&2
	tail -30 "$RUN_DIR/server.out" >&2 || true
	exit 1
fi
[ -z "$BEAM_PID" ] && BEAM_PID=$(pgrep -P "$SERVER_PID" -x beam.smp 2>/dev/null | head -1 || true)
rabbit_version=$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo unknown)
erlang_version=$(sed -n 's/^ *Erlang: *\([^ ]*\).*/\1/p' "$RUN_DIR/server.out" | head -1)
echo "rabbitmq-server $rabbit_version, Erlang $erlang_version (script pid $SERVER_PID, VM pid ${BEAM_PID:-?})"

# --- runs -----------------------------------------------------------------------------------
vm_kb() { # field: VmRSS or VmHWM of the Erlang VM in KiB
	[ -n "$BEAM_PID" ] && awk -v f="$1:" '$1 == f {print $2}' "/proc/$BEAM_PID/status" 2>/dev/null || echo 0
}
rss_start=$(vm_kb VmRSS)
rm -f "$RES"/perftest-*.log "$RES"/sbench*@localhost*.log
RUNS_JSONL=$RES/runs.jsonl
: >"$RUNS_JSONL"
AMQP_URI=amqp://guest:guest@127.0.0.1:$AMQP_PORT
run_no=0
for qtype in $QUEUE_TYPES; do
	for size in $SIZES; do
		for run in $(seq 1 "$RUNS"); do
			run_no=$((run_no + 1))
			queue=sbench-$qtype-$size-$run
			qargs=(-f persistent --auto-delete false)
			[ "$qtype" = quorum ] && qargs+=(--quorum-queue)
			log=$RES/perftest-$qtype-$size-$run.log
			echo "-- $qtype queue, $size B, run $run/$RUNS: ${TIME}s, $PRODUCERS producer(s), $CONSUMERS consumers, confirm window $CONFIRM, prefetch $PREFETCH, multi-ack every $MULTI_ACK"
			java -cp "$PT_DIR/lib/*" com.rabbitmq.perf.PerfTest -h "$AMQP_URI" -u "$queue" "${qargs[@]}" \
				-x "$PRODUCERS" -y "$CONSUMERS" -c "$CONFIRM" -q "$PREFETCH" -A "$MULTI_ACK" -s "$size" \
				-z "$TIME" --id "$queue" -mf compact >"$log" 2>&1 &
			PT_PID=$!
			pt_rc=0
			wait "$PT_PID" || pt_rc=$?
			PT_PID=
			# PerfTest's summary: "sending rate avg: N msg/s", "receiving rate avg: ...",
			# "consumer latency min/median/75th/95th/99th a/b/c/d/e µs", "confirm latency ...".
			awk -v qtype="$qtype" -v size="$size" -v run="$run" -v rc="$pt_rc" -v rss="$(vm_kb VmRSS)" '
				/^sending rate avg:/   { sent = $4 }
				/^receiving rate avg:/ { recv = $4 }
				/^consumer latency /   { split($4, c, "/") }
				/^confirm latency /    { split($4, f, "/") }
				/ msg\/s / && $1 ~ /^[0-9.]+s$/ { confirmed += $4; nacked += $6; intervals++ }
				END {
					ok = (rc == 0 && sent != "" && recv != "") ? "true" : "false"
					printf "{\"queue_type\":\"%s\",\"size\":%d,\"run\":%d,\"ok\":%s,\"exit_code\":%d,", qtype, size, run, ok, rc
					printf "\"published_per_sec\":%s,\"consumed_per_sec\":%s,", (sent == "" ? 0 : sent), (recv == "" ? 0 : recv)
					printf "\"confirmed_per_sec\":%.0f,\"nacked_per_sec\":%.0f,", (intervals ? confirmed / intervals : 0), (intervals ? nacked / intervals : 0)
					printf "\"consumer_latency_us\":{\"min\":%d,\"p50\":%d,\"p75\":%d,\"p95\":%d,\"p99\":%d},", c[1], c[2], c[3], c[4], c[5]
					printf "\"confirm_latency_us\":{\"min\":%d,\"p50\":%d,\"p75\":%d,\"p95\":%d,\"p99\":%d},", f[1], f[2], f[3], f[4], f[5]
					printf "\"server_rss_kb\":%d}\n", rss
				}' "$log" >>"$RUNS_JSONL"
			tail -1 "$RUNS_JSONL" | sed 's/^/   /'
			[ "$pt_rc" -eq 0 ] || echo "rabbit/run.sh: PerfTest exited with $pt_rc; see $log" >&2
		done
	done
done
rss_end=$(vm_kb VmRSS)
hwm=$(vm_kb VmHWM)

# --- summary: median (min-max) over the runs of each row ----------------------------------
# Fields of runs.jsonl are flat enough for awk: pull "key":value pairs out of each line.
awk -v runs="$RUNS" -v time="$TIME" -v ver="$rabbit_version" -v erl="$erlang_version" -v date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	-v producers="$PRODUCERS" -v consumers="$CONSUMERS" -v confirm="$CONFIRM" -v prefetch="$PREFETCH" -v multiack="$MULTI_ACK" \
	-v rss0="$rss_start" -v rss1="$rss_end" -v hwm="$hwm" -v md="$RES/results.md" -v cpus="$(nproc)" \
	-v cpu="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)" '
	function num(line, key,   m) {
		if (match(line, "\"" key "\":[0-9.]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 }
		return 0
	}
	function str(line, key,   m) {
		if (match(line, "\"" key "\":\"[^\"]*\"")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*:"/, "", m); sub(/"$/, "", m); return m }
		return ""
	}
	function sortn(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
	function median(a, n) { sortn(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function spread(key, k,   a, n, i) {
		n = 0
		for (i = 1; i <= cnt[k]; i++) if (ok[k, i]) a[++n] = val[k, i, key]
		if (n == 0) return "{\"median\":0,\"min\":0,\"max\":0}"
		sortn(a, n)
		return sprintf("{\"median\":%.0f,\"min\":%.0f,\"max\":%.0f}", median(a, n), a[1], a[n])
	}
	function cell(key, k, unit,   a, n, i, s) {
		n = 0
		for (i = 1; i <= cnt[k]; i++) if (ok[k, i]) a[++n] = val[k, i, key]
		if (n == 0) return "FAILED"
		sortn(a, n)
		s = fmt(median(a, n), unit)
		if (n > 1) s = s " (" fmt(a[1], unit) "–" fmt(a[n], unit) ")"
		return s
	}
	function fmt(v, unit) {
		if (unit == "us") return v >= 1000 ? sprintf("%.1fms", v / 1000) : sprintf("%dµs", v)
		if (v >= 1e6) return sprintf("%.2fM", v / 1e6)
		if (v >= 1e3) return sprintf(v >= 1e5 ? "%.0fk" : v >= 1e4 ? "%.1fk" : "%.2fk", v / 1e3)
		return sprintf("%.0f", v)
	}
	{
		k = str($0, "queue_type") " " num($0, "size")
		if (!(k in cnt)) { order[++nk] = k; cnt[k] = 0 }
		i = ++cnt[k]
		ok[k, i] = ($0 ~ /"ok":true/)
		lines[k, i] = $0
		val[k, i, "pub"] = num($0, "published_per_sec")
		val[k, i, "cons"] = num($0, "consumed_per_sec")
		lat = $0; sub(/.*"consumer_latency_us":/, "", lat)
		val[k, i, "p50"] = num(lat, "p50"); val[k, i, "p99"] = num(lat, "p99")
		conf = $0; sub(/.*"confirm_latency_us":/, "", conf)
		val[k, i, "cp50"] = num(conf, "p50"); val[k, i, "cp99"] = num(conf, "p99")
	}
	END {
		printf "{\n  \"date\": \"%s\",\n  \"server\": {\"name\": \"RabbitMQ\", \"version\": \"%s\", \"erlang\": \"%s\", \"rss_kb_start\": %d, \"rss_kb_end\": %d, \"hwm_kb\": %d},\n", date, ver, erl, rss0, rss1, hwm
		printf "  \"workload\": {\"producers\": %d, \"consumers\": %d, \"confirm_window\": %d, \"prefetch\": %d, \"multi_ack_every\": %d, \"persistent\": true, \"seconds_per_run\": %d, \"runs\": %d},\n", producers, consumers, confirm, prefetch, multiack, time, runs
		printf "  \"rows\": [\n"
		for (r = 1; r <= nk; r++) {
			k = order[r]; split(k, kk, " ")
			nok = 0; for (i = 1; i <= cnt[k]; i++) nok += ok[k, i]
			printf "    {\"queue_type\": \"%s\", \"size\": %d, \"ok_runs\": %d, \"failed_runs\": %d,\n", kk[1], kk[2], nok, cnt[k] - nok
			printf "     \"published_per_sec\": %s, \"consumed_per_sec\": %s,\n", spread("pub", k), spread("cons", k)
			printf "     \"consumer_latency_p50_us\": %s, \"consumer_latency_p99_us\": %s,\n", spread("p50", k), spread("p99", k)
			printf "     \"confirm_latency_p50_us\": %s, \"confirm_latency_p99_us\": %s,\n", spread("cp50", k), spread("cp99", k)
			printf "     \"runs\": ["
			for (i = 1; i <= cnt[k]; i++) printf "%s%s", (i > 1 ? ", " : ""), lines[k, i]
			printf "]}%s\n", (r < nk ? "," : "")
		}
		printf "  ]\n}\n"

		printf "## RabbitMQ durable work queue, %s\n\n", date > md
		printf "- RabbitMQ %s (Erlang %s), private node on 127.0.0.1, %d CPUs (%s)\n", ver, erl, cpus, cpu > md
		printf "- PerfTest (Java client): %d producer, %d consumers, persistent messages, publisher confirms (at most %d unconfirmed), prefetch %d, %s; %ds per run, %d runs, median (min–max)\n", producers, consumers, confirm, prefetch, (multiack > 0 ? "multi-ack every " multiack " messages" : "each message acked"), time, runs > md
		printf "- server memory: RSS %.0f MiB at start, %.0f MiB at end, peak %.0f MiB\n\n", rss0 / 1024, rss1 / 1024, hwm / 1024 > md
		printf "| queue | size | published msgs/s | consumed msgs/s | consumer latency p50 | p99 | confirm latency p50 | p99 |\n" > md
		printf "|---|---|---|---|---|---|---|---|\n" > md
		for (r = 1; r <= nk; r++) {
			k = order[r]; split(k, kk, " ")
			printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", kk[1], (kk[2] >= 1024 && kk[2] % 1024 == 0 ? kk[2] / 1024 " KiB" : kk[2] " B"),
				cell("pub", k, ""), cell("cons", k, ""), cell("p50", k, "us"), cell("p99", k, "us"), cell("cp50", k, "us"), cell("cp99", k, "us") > md
		}
	}' "$RUNS_JSONL" >"$RES/results.json"
echo
cat "$RES/results.md"
echo
echo "== written: $RES/results.json, $RES/results.md, PerfTest logs in $RES/"
