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
	TERN_KILL9_SEEDS=20 TERN_STORE_SEEDS=200 go test -count=1 -timeout 60m -run 'TestKill9|RandomOps|CompactModel' ./internal/stream/ ./internal/store/
	TERN_CLUSTER_SEEDS=10 go test -count=1 -timeout 30m -run 'TestKill9UnderLoad|TestPartitions' ./internal/cluster/clustertest/

# The nemesis (TestNemesis, needs root): seeded rounds on 3 and 5 nodes, each in a
# network namespace of its own, under an idempotent producer, an acking consumer and
# catalogue clients on every node, while nodes are killed (-9) and restarted, paused
# (SIGSTOP) and cut off (a minority, one link, one way, a 2|3 split, and faults
# combined). TestKafkaNemesis does the same to franz-go's idempotent producer and a
# consumer group, TestMQTTNemesis to paho-mqtt publishers and a subscriber with
# persistent sessions. The suite runs four rounds of four faults, and two of each twin.
nemesis:
	TERN_CLUSTER_SEEDS=10 TERN_NEMESIS_FAULTS=12 go test -count=1 -timeout 120m -run '^(TestNemesis|TestKafkaNemesis|TestMQTTNemesis)$$' ./internal/cluster/clustertest/

# A local cluster of N nodes (default 3) in the background: ports, logs and stores in
# scripts/cluster.sh and docs/cluster.md. make cluster N=5 for five.
N ?= 3
cluster:
	scripts/cluster.sh start $(N)

cluster-status:
	scripts/cluster.sh status

cluster-stop:
	scripts/cluster.sh stop
