.PHONY: run test build bench fuzz

# Run the broker with the default configuration (native 7400, HTTP 7480).
run:
	go run ./cmd/tern server

# The whole test suite (what CI runs).
test:
	scripts/test.sh

build:
	go build -o bin/tern ./cmd/tern

# Side-by-side benchmarks against the reference systems (installs them if missing).
bench:
	bench/run.sh

# A short run of every fuzz target.
fuzz:
	scripts/fuzz.sh
