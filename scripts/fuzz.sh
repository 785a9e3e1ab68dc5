#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME (default 20s) each.
# New crashers land in the package's testdata/fuzz/<Target>/ and then fail `make test`
# until fixed, which is the point.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20s}
# Shrinking a new interesting input may take up to a minute by default, which would
# use up a short run of a target whose every input does file I/O.
minimize=${FUZZMINIMIZETIME:-5s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r file; do
	pkg=./$(dirname "${file#./}")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== $pkg $target ($fuzztime)"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimize" "$pkg"
	done
done
