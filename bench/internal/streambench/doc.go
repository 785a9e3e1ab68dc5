// Package streambench is the workload engine for the durable-stream benchmarks in
// bench/streamvs: publish with acknowledgement, pull consumers, replay and work
// queues. Every workload is written once, against the small Driver interface, so
// NATS JetStream (bench/internal/jsbus), Tern (bench/internal/ternstream) and any other
// broker with a driver run identical code: the same connections per role, payloads,
// windows, batch sizes, counts and clocks.
//
// Workloads (Config.Workload):
//
//   - pubasync: one publisher publishes Msgs messages with PublishAsync, keeping at
//     most Window unacknowledged; throughput is acknowledged messages per second from
//     the first publish to the last acknowledgement. Failed publishes are counted.
//   - pubsync: one publisher publishes Msgs messages one at a time, each waiting for
//     its acknowledgement; throughput, and the publish round trip as HDR percentiles.
//   - fetch: the stream is pre-filled with Msgs messages (not timed); then one durable
//     pull consumer fetches them in batches of Batch, acknowledging every message (or,
//     with AckAll, only the last of each batch under a cumulative ack policy), until all
//     have arrived; throughput is consumed messages per second.
//   - replay: the stream is pre-filled with Msgs messages (not timed); then one
//     ephemeral ordered reader reads the whole stream from the first message, without
//     acknowledgements; throughput in messages and MB per second.
//   - workqueue: a stream with work-queue retention; one publisher (async, Window) and
//     Consumers pull consumers sharing one durable consumer, each acknowledging every
//     message. Throughput is from the first publish to the last acknowledgement, the
//     latency is publish to consumer, and every message must be consumed exactly once
//     (counted by the sequence number in its payload) with the stream empty at the end.
//
// Payloads carry their sequence number (1..Msgs, little endian) in the first 8 bytes,
// so every consuming workload checks that each message arrived exactly once (and, in
// replay, in order); workqueue payloads of 16 bytes or more also carry the publish time
// (time.Now().UnixNano()) in bytes 8–15 for the end-to-end latency.
//
// Each run creates its own stream with a fresh random name, captures one subject, and
// deletes the stream when it ends, whatever happened. Every role has its own
// connection. A run is bounded by its message count and always by a hard timeout and
// a stall detector (no acknowledgement or delivery for Config.Stall), so it cannot hang;
// a run that ends short returns its partial Result with an error wrapping
// ErrIncomplete, and one that saw duplicates, disorder or leftovers an error wrapping
// ErrViolation.
package streambench
