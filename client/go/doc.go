// Package tern is the Go client of the Tern message broker.
//
// Connect, publish, subscribe:
//
//	nc, err := tern.Connect("tern://127.0.0.1:7400", tern.Name("orders"))
//	if err != nil { ... }
//	defer nc.Close()
//	sub, _ := nc.Subscribe("orders.*", func(m *tern.Msg) { fmt.Println(m.Subject, string(m.Data)) })
//	nc.Publish("orders.new", []byte("42"))
//	nc.Flush() // everything published so far has reached the server
//
// Work distribution: QueueSubscribe joins a queue group; each message goes to exactly
// one member. Receiver-side filters: Subscribe(subj, cb, tern.Filter(`hdr.sender ==
// "s1" && size <= 512`)) delivers only the messages the server's filter accepts.
// Request/reply: Request publishes with a reply subject on the connection's inbox and
// waits for the first answer, ErrNoResponders when nobody is subscribed, or the
// context's end.
//
// Publishing is asynchronous and buffered: Publish encodes into the connection's write
// buffer and wakes a flusher goroutine that sends everything buffered with one write.
// A publisher that gets a full buffer ahead of the socket waits for the flusher
// (backpressure). Flush is a round trip that proves delivery to the server.
//
// Each asynchronous subscription has one goroutine that runs its callback for each
// message in order; messages wait in a per-subscription queue bounded by
// PendingLimits, beyond which they are dropped and ErrSlowConsumer is reported to the
// ErrorHandler.
//
// When the connection breaks the client reconnects with exponential backoff and
// jitter, to the same or another server of the URL list, re-creates every
// subscription, then sends what was published during the outage (up to
// ReconnectBufSize). Frames written to the broken socket may be lost: publishing is
// at-most-once; use streams for durability.
package tern
