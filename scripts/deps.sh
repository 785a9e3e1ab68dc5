#!/usr/bin/env bash
# Installs what the test suite needs and the machine may lack. Idempotent: each step
# checks first, so a second run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "deps: Go toolchain not found (need go $(sed -n 's/^go //p' go.mod))" >&2; exit 1; }
# Go modules are fetched by the go command itself; download once so test timing is honest.
# Both modules: the product's and the benchmarks' (bench/, with the reference clients).
go mod download
(cd bench && go mod download)

# The installing helpers the bench scripts use (apt_install, go_tool).
BENCH=deps
. bench/lib.sh
# apt_pkg PKG: installs Debian package PKG (apt-get update once per run).
apt_pkg() {
	echo "deps: installing $1 (Debian)"
	apt_install "$1"
}
# need CMD PKG: installs Debian package PKG unless command CMD already exists.
need() { command -v "$1" >/dev/null || apt_pkg "$2"; }

# nats-server: the reference broker the benchmark module's own tests run against, the
# release the benchmarks use (NATS_SERVER_VERSION in bench/lib.sh), built into
# bench/.tools/bin, where the tests look for it (bench/internal/refserver).
go_tool nats-server >/dev/null
# iptables (statistic match) for the reliable-UDP tests between network namespaces.
need iptables iptables
# MQTT clients Tern did not write, for the MQTT interoperability tests.
need mosquitto_pub mosquitto-clients
# kcat (librdkafka inside), a Kafka client Tern did not write, for the Kafka API tests.
need kcat kcat
# openssl s_client, a TLS client Tern did not write, for the TLS version and cipher tests.
need openssl openssl
need python3 python3
# Python clients from PyPI in the project's own virtual environment (.venv, not
# committed), each installed unless that version is there: paho-mqtt for the MQTT
# tests, kafka-python and confluent-kafka (librdkafka inside its wheel) for the Kafka
# tests, which run .venv/bin/python.
if ! .venv/bin/python -c 'import sys' 2>/dev/null; then
	if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
		apt_pkg "python$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
	fi
	rm -rf .venv
	python3 -m venv .venv
fi
# pypi DIST VERSION: installs DIST==VERSION into .venv unless it is there.
pypi() {
	if [ "$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null)" != "$2" ]; then
		echo "deps: installing $1 $2 into .venv"
		.venv/bin/python -m pip install -q --disable-pip-version-check "$1==$2"
	fi
}
pypi paho-mqtt 2.1.0
pypi kafka-python 3.0.12
pypi confluent-kafka 2.16.1

# MQTT.js from npm, the MQTT client of browser applications, for the MQTT-over-WebSocket
# test (run by node, with .node/node_modules as its module path; not committed).
mqttjs_version=5.16.0
if [ "$(node -p "require('./.node/node_modules/mqtt/package.json').version" 2>/dev/null)" != "$mqttjs_version" ]; then
	need node nodejs
	need npm npm
	echo "deps: installing MQTT.js $mqttjs_version into .node"
	npm install --silent --no-audit --no-fund --prefix .node "mqtt@$mqttjs_version" >/dev/null
fi

# Kafka clients Tern did not write, for the Kafka API tests (internal/kafka): Kafka's own
# Java tools (kafka-tools 4.4.0's console producer and consumer, topic admin and perf
# tools) and Kafka Streams, with the jars and Java 17 JDK the benchmarks use
# (bench/kafka.sh's kafka_install: into bench/.tools/kafka-4.4.0/libs, a no-op when
# there); and kafkajs
# from npm at the version internal/kafka/testdata/js/package-lock.json pins, into that
# directory's node_modules (not committed), reinstalled when the lock file changes.
. bench/kafka.sh
kafka_install
kafkajs_dir=internal/kafka/testdata/js
if ! cmp -s "$kafkajs_dir/package-lock.json" "$kafkajs_dir/node_modules/.installed-lock.json"; then
	need node nodejs
	need npm npm
	echo "deps: installing kafkajs into $kafkajs_dir/node_modules (npm ci)"
	(cd "$kafkajs_dir" && npm ci --silent --no-audit --no-fund >/dev/null)
	cp "$kafkajs_dir/package-lock.json" "$kafkajs_dir/node_modules/.installed-lock.json"
fi
