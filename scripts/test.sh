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
# Test binaries run side by side (go test's default, one per CPU): the tests wait
# for the conditions they check, not for a machine with nothing else to do, and
# tests that share machine-wide state (network namespaces) lock it themselves
# (internal/netns). internal/mqtt runs on its own after the others: a few of its
# end-to-end tests with real clients measure how promptly the server reads a
# connection (TestPahoSubscribeRightAfterConnect publishes 0.2 ms after a
# SUBSCRIBE on another connection), which a machine busy with other test binaries
# cannot show.
module=$(go list -m)
go test -race -count=1 -timeout 12m $(go list ./... | grep -vx -e "$module/internal/mqtt")
go test -race -count=1 -timeout 12m ./internal/mqtt
echo "== go test -race (bench module)"
(cd bench && go test -race -count=1 -timeout 6m ./...)
