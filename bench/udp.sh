#!/usr/bin/env bash
# The native protocol over reliable UDP beside the same protocol over TCP, between two
# network namespaces (veth pair, iptables random loss): coordination packets per 1000
# messages of a steady 16 B stream, throughput at 0, 1 and 5 % loss, 16 B and 1 KiB,
# and latency at a fixed rate; then the same throughput and latency on loopback
# (127.0.0.1, no namespaces). Needs root (ip netns, iptables); installs iptables if missing. The namespaces
# it makes (ternbench-a, ternbench-b) are removed when it ends.
#
# Usage: bench/udp.sh [udpvs options]     e.g. bench/udp.sh --msgs 200000
# Output: $OUT/udp/results.md (OUT defaults to bench/out).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
mkdir -p "$OUT/udp"
if ! command -v iptables >/dev/null 2>&1; then
	sudo_cmd=""
	[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
	$sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq iptables >/dev/null
fi
go build -o "$OUT/udp/udpvs" ./bench/udpvs
"$OUT/udp/udpvs" "$@" | tee "$OUT/udp/results.md"
echo | tee -a "$OUT/udp/results.md"
"$OUT/udp/udpvs" --loopback "$@" | tee -a "$OUT/udp/results.md"
