#!/usr/bin/env bash
# Runs the whole test suite: formatting, vet, and every Go test with the race detector,
# in both modules: the product (the repository root) and the benchmarks (bench/, its
# own module so that the reference systems' clients stay out of the product's go.mod).
# Installs anything the tests need first (idempotent, quick when already present).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

echo "== gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...
(cd bench && go vet ./...)

echo "== go test -race"
# One package at a time: several test binaries at once on two CPUs starve the
# timing-sensitive ones (flow control, keepalives, loss recovery) of CPU.
go test -race -count=1 -p 1 -timeout 12m ./...
echo "== go test -race (bench module)"
(cd bench && go test -race -count=1 -p 1 -timeout 6m ./...)
