#!/usr/bin/env bash
# Installs what the test suite needs and the machine may lack. Idempotent: each step
# checks first, so a second run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "deps: Go toolchain not found (need go $(sed -n 's/^go //p' go.mod))" >&2; exit 1; }
# Go modules are fetched by the go command itself; download once so test timing is honest.
go mod download

# nats-server: the reference broker the benchmark harness's own tests run against.
if ! command -v nats-server >/dev/null; then
	if command -v apt-get >/dev/null; then
		echo "deps: installing nats-server (Debian)"
		sudo_cmd=""
		[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
		$sudo_cmd apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq nats-server >/dev/null
	else
		echo "deps: nats-server missing and no apt-get; install it to run bench/internal/natsbus tests" >&2
		exit 1
	fi
fi
