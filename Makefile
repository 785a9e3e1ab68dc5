.PHONY: run test build bench fuzz soak nemesis cluster cluster-status cluster-stop

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

# Longer seeded crash and model runs than the suite's (each test's seed count); the
# cluster's kill -9 rounds and rounds of partitions on one cluster.
soak:
	TERN_KILL9_SEEDS=20 TERN_STORE_SEEDS=200 go test -count=1 -timeout 60m -run 'TestKill9|RandomOps' ./internal/stream/ ./internal/store/
	TERN_CLUSTER_SEEDS=10 go test -count=1 -timeout 30m -run 'TestKill9UnderLoad|TestPartitions' ./internal/cluster/clustertest/

# Replicated streams under faults: seeded rounds of kill -9, restarts and SIGSTOP of
# random nodes under an idempotent producer and an acking consumer (the suite runs
# one round of 3 faults).
nemesis:
	TERN_CLUSTER_SEEDS=10 TERN_NEMESIS_FAULTS=12 go test -count=1 -timeout 60m -run 'TestNemesis' ./internal/cluster/clustertest/

# A local cluster of N nodes (default 3) in the background: ports, logs and stores in
# scripts/cluster.sh and docs/cluster.md. make cluster N=5 for five.
N ?= 3
cluster:
	scripts/cluster.sh start $(N)

cluster-status:
	scripts/cluster.sh status

cluster-stop:
	scripts/cluster.sh stop
