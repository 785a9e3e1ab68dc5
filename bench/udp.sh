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
BENCH=udp.sh BENCH_LOGS=$OUT/udp
. bench/lib.sh
command -v iptables >/dev/null 2>&1 || apt_install iptables
bench_build "$OUT/udp/udpvs" ./udpvs
"$OUT/udp/udpvs" "$@" | tee "$OUT/udp/results.md"
echo | tee -a "$OUT/udp/results.md"
"$OUT/udp/udpvs" --loopback "$@" | tee -a "$OUT/udp/results.md"
