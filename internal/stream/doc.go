// Package stream owns durable streams and their consumers: which subjects a stream
// captures, how a captured message becomes a record in the stream's partitions
// (internal/store), duplicate detection, retention (limits, work queue, interest), and
// every consumer's position, pending acknowledgements, redelivery, dead-lettering,
// push delivery and long-poll pull delivery, plus consumer groups over partitions.
//
// The engine attaches to the broker core like any client: it subscribes to the
// subjects its streams capture, to the management API ("$TERN.API.>") and to acks
// ("$TERN.ACK.>"), and it answers and delivers by publishing through the broker. So
// a message that enters through any protocol can be stored, and a consumer can be
// served over any protocol. It never imports a protocol adapter. The request and
// response types and the data-path text forms are in internal/streamapi.
//
// Goroutines: each stream has one writer, the only caller of its logs' append side,
// which group-commits what publishers queued and answers their acks after the commit;
// each consumer has one delivery goroutine. Acks and pull requests are applied on the
// publishing connection's goroutine under the consumer's lock, without I/O.
//
// On disk, under Config.Dir:
//
//	streams/<stream>/stream.json                 definition
//	streams/<stream>/p<N>/                       partition N's log (internal/store)
//	streams/<stream>/consumers/<name>/consumer.json  durable consumer definition
//	streams/<stream>/consumers/<name>/state.json     position snapshot
//	streams/<stream>/consumers/<name>/journal        acks and deliveries since the snapshot
package stream
