// Package loadgen is the workload engine behind `tern bench` and the side-by-side
// benchmarks in bench/. Every workload is written once, against the small Bus
// interface, so Tern and any other broker with an adapter run identical code: the
// same connections per role, the same payloads, the same pacing, the same clocks.
//
// Workloads (Config.Mode):
//
//   - pub: Pubs publishers, no subscribers; throughput on the publish side.
//   - pubsub: Pubs publishers to Subs subscribers, each subscriber getting every
//     message; throughput counts every delivery.
//   - queue: Pubs publishers to Subs members of one queue group, each message
//     delivered to exactly one member.
//   - reqrep: Pubs requesters, each with one request outstanding at a time, served by
//     Subs responders in one queue group; latency is the true round trip.
//
// Every publisher, subscriber, requester and responder has its own connection, named
// after its role (ConnRole), so a Dialer may put the roles on different servers of a
// cluster; Config.Probe then holds the start until every subscription has reached the
// publishers' servers.
// Publishers write their send time (time.Now().UnixNano(), little endian) into the
// first 8 bytes of each payload when the payload has room; each subscriber records
// now-minus-stamp into its own HDR histogram (1µs to 60s, 3 significant digits), and
// the histograms are merged when the run ends, so receiving takes no shared lock. In
// the throughput workloads that latency is latency under load: the publishers send as
// fast as they can (or at Config.Rate), so it includes queueing.
//
// A run is bounded by a message count, a duration or both, and always by a hard
// timeout, so it cannot hang. Subscribers are registered and flushed before any
// publisher starts, and throughput is measured from the first publish to the last
// delivery.
package loadgen
