// Package broker is Tern's routing core: it holds the subscriptions of every client in
// a subject trie and hands each published message to the subscribers that should get
// it — every plain subscriber whose subject matches (broadcast), exactly one member of
// each matching queue group (load balancing, round-robin, skipping members that would
// drop the message), and only the subscribers whose receiver-side filter accepts it.
//
// The broker knows nothing of protocols, sockets or encodings. A client of any front end
// (native TCP or UDP, MQTT) implements Sink: the
// broker calls Sink.Deliver, which must queue the message on the client's outbound
// buffer without blocking, and later Sink.Flush once per publish batch so the client's
// writer sends everything queued in one write. A slow subscriber therefore never stalls
// a publisher or another subscriber: its Sink drops or disconnects by its own policy.
// A sink whose protocol sends one copy of a message for all of a client's matching
// subscriptions (MQTT 5) implements MultiSink and marks those subscriptions (SetCoalesce):
// it gets them in one DeliverMatched call per message. A route to another cluster node
// implements Remote, and its subscriptions are the interest that node advertised: it
// gets each message once (DeliverRemote, naming the queue groups it was chosen for),
// never one that itself came from a route, and queue groups prefer local members.
//
// Publish allocates nothing per message: matches come from the trie's cache, and the
// Batch that collects sinks to flush is owned and reused by the publishing connection.
package broker
