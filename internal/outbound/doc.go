// Package outbound owns the one outbound path of every connection Tern has: client
// connections of every protocol (native over TCP and over UDP sessions, MQTT over TCP
// and WebSocket) and, later, the routes between cluster nodes. It knows nothing of any
// protocol's framing; a protocol appends its encoded frames to a Queue and the Queue
// gets them onto the socket.
//
// What a Queue does, the same way for everyone:
//
//   - Buffer: frames are appended under the queue's lock to one buffer; the writer
//     takes the whole buffer at each wake-up and appends go to a spare one (double
//     buffering), so producers never wait for the socket. A large frame built in
//     a buffer of the caller's can be handed over whole instead of copied while
//     nothing else is queued (Hand); the buffers then go round between the two.
//   - Writer: a goroutine that runs only while there is something to send and for
//     WriterIdle after, so idle connections cost no goroutine. It flushes once per
//     wake-up, in chunks of at most WriteChunk bytes so that waiting publishers see
//     progress often, each write bounded by the write timeout.
//   - Flow control: past a backlog of min(MaxPending/2, StallBacklog) bytes a queue
//     asks the publishers that fed it to wait (broker.Staller) for its writer's next
//     progress, up to MaxStall per read batch; a writer that makes no progress for
//     StuckAfter stops holding publishers back until it has drained.
//   - Slow consumers: a frame that would take the pending bytes over MaxPending is
//     not queued. Under PolicyDrop it is counted as dropped; under PolicyDisconnect
//     the protocol's goodbye frame is queued and the connection closed. Each
//     connection is counted once as a slow consumer and logged once.
//   - Counters: messages and payload bytes sent and messages dropped, per
//     connection, kept under the queue's lock (no contended server-wide atomics);
//     a Group keeps the totals of connections that have gone.
//   - Buffers: a buffer short of room for a delivery doubles; one grown past
//     MaxIdleBuffer is kept while frames keep coming and let go once the burst
//     is over; an idle queue can give up all its state (Release).
//   - Graceful close: Finish sends what is queued, then, when the server closed the
//     connection for a reason it told the client, shuts down the write side and
//     reads and discards input for up to Linger before closing, so that a client
//     still sending reads the reason instead of a connection reset.
//
// The caller's loop, for a connection whose reader decodes frames:
//
//	q.Init(group, endpoint)          // once, before any other call
//	for {                            // the reader goroutine
//		frame := decode(read())
//		b, ok := q.Begin()       // or q.Reserve(size) for a delivery
//		if ok {
//			b = appendReply(b, frame)
//			q.End(b)          // or q.Commit(b, payloadBytes) for a message
//		}
//		q.Flush()                // once per read, not per frame
//	}
//	if q.Close(err) { unblockReader() }
//	q.Finish()                       // in the reader goroutine, once it has stopped
package outbound
