// Package kafka is Tern's Kafka API front end: it accepts Kafka clients on a TCP
// listener and serves them from Tern's streams, so that existing producers, consumers
// and tools work unchanged beside native, MQTT and UDP clients (docs/kafka.md).
//
// What it owns: the Kafka framing (size-prefixed requests, one at a time per
// connection, answered in order), the mapping of Kafka's APIs onto the core (a topic
// is a stream, a Kafka partition a stream partition, offset = sequence - 1), record
// batches (CRC-32C, compression, the v2 format on both ways) and idempotent
// producers' sequence checks. Every Kafka message is decoded and encoded with
// franz-go's kmsg package; nothing here hand-writes a Kafka codec.
//
// How it reaches the core: Produce publishes each record through the broker on the
// stream's subject with a reply subject, exactly as a native stream publisher does,
// so subscribers of the subject over any protocol get it too, and the stream's
// writer acknowledges it there after its commit (the package's inbox, acks.go).
// Fetch and ListOffsets read the stream's partition logs by position
// (stream.Stream.PartitionReader); a fetch waiting for data sleeps on the channel
// the stream's commit wakes (stream.Stream.WatchAppends), never polling. Topic
// administration calls the stream engine (stream.Manager).
//
// Consumer groups: the coordinator's logic of each group is the pure state
// machine of package group, driven here (coordinator.go) by the group requests
// and one timer per group; which node coordinates a group is the Coordinators
// interface's choice (this node alone, by default). A group's committed offsets
// are the positions of a durable stream consumer named after it (offsets.go),
// read and set through the stream API over the broker (CONSUMER.INFO,
// CONSUMER.SEEK), as any client would, so that any node can.
//
// Who may do what: a connection logs in with SASL (sasl.go) or stays anonymous as
// the server's anonymous policy allows, and its user's permissions of package auth
// decide each request on a topic (authz.go), cached per topic for the connection.
//
// What it must not touch: the broker's routing, the stream engine's writer and
// logs' append side, and the cluster. The core never imports this package.
//
// Goroutines: one per connection, reading a request, handling it and queueing the
// answer on the connection's outbound queue (internal/outbound), which writes it.
// A JoinGroup or SyncGroup holds its connection's goroutine until the group
// machine answers it (bounded by the rebalance or session timeout), as a Kafka
// broker holds the connection; each group's timer runs on its own.
package kafka
