#!/usr/bin/env bash
# Installs what the test suite needs and the machine may lack. Idempotent: each step
# checks first, so a second run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "deps: Go toolchain not found (need go $(sed -n 's/^go //p' go.mod))" >&2; exit 1; }
# Go modules are fetched by the go command itself; download once so test timing is honest.
go mod download
