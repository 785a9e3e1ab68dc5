// Package tern is the Go client of the Tern message broker.
//
// # Quick tour
//
// Connect, subscribe, publish:
//
//	nc, err := tern.Connect("tern://127.0.0.1:7400", tern.Name("orders"))
//	if err != nil { ... }
//	defer nc.Close()
//
//	sub, err := nc.Subscribe("orders.*", func(m *tern.Msg) {
//		fmt.Println(m.Subject, string(m.Data))
//	})
//	nc.Publish("orders.new", []byte("42"))
//	nc.Flush() // everything published so far has reached the server
//
// Subjects are dot-separated tokens; a subscription may use "*" for one token and ">"
// for the rest ("orders.>").
//
// Headers travel with PublishMsg:
//
//	nc.PublishMsg(&tern.Msg{Subject: "orders.new", Header: tern.Header{"sender": {"s1"}}, Data: data})
//
// Work distribution: QueueSubscribe joins a queue group; each message goes to exactly
// one member of the group.
//
// Receiver-side filters: the server delivers only the messages a filter expression
// accepts, before they cross the network:
//
//	nc.Subscribe("sensors.>", cb, tern.Filter(`hdr.sender == "s1" && size <= 512`))
//
// Request/reply:
//
//	reply, err := nc.Request(ctx, "svc.time", nil) // ErrNoResponders if nobody listens
//	// and on the other side
//	nc.Subscribe("svc.time", func(m *tern.Msg) { m.Respond([]byte(time.Now().String())) })
//
// Other ways to receive: ChanSubscribe delivers to a channel of yours, SubscribeSync
// to a queue read with NextMsg.
//
// # Publishing
//
// Publishing is asynchronous and buffered. Publish encodes the frame into the
// connection's write buffer and wakes a flusher goroutine, which sends everything
// buffered with one write; Publish does not allocate. A publisher that finds
// WriteBufferSize bytes waiting writes them itself, or waits for the write in
// progress: memory stays bounded and a fast publisher is held to the speed of the
// network (backpressure). Flush is a round trip: when it returns, the server has
// processed everything published before it. The server reports errors about a
// publish (an invalid subject, say) asynchronously, to the ErrorHandler.
//
// # Receiving
//
// Each asynchronous subscription has one goroutine that runs its handler for each
// message, in order. Messages wait in a per-subscription queue bounded by
// PendingLimits; beyond it they are dropped, counted in Subscription.Dropped, and
// ErrSlowConsumer is reported to the ErrorHandler. A received Msg owns its data.
//
// Subscribe waits for the server's acknowledgement, so an invalid subject, queue name
// or filter is reported by Subscribe itself.
//
// # Reconnecting
//
// When the link breaks (read or write error, server shutdown, unanswered pings) the
// client reconnects with exponential backoff and jitter, to the same or another server
// of the URL list, re-creates every subscription (AutoUnsubscribe budgets included),
// then sends what was published during the outage (up to ReconnectBufSize). Frames
// already handed to the broken socket may be lost: publishing is at-most-once.
// Requests in flight keep waiting until their context ends.
//
// The nodes of a cluster announce each other: the servers of the URL list are
// followed by the other nodes the server names in its INFO, kept up to date as nodes
// join and leave (Conn.Servers, Conn.DiscoveredServers), so a client given one node
// moves to another when that one goes. NoClusterDiscovery keeps to the URL list.
//
// # Closing
//
// Drain unsubscribes, lets the messages on their way and in the queues be handled,
// flushes and closes. Close closes at once, after one best-effort write of what is
// buffered.
//
// Connection events (connect, disconnect, reconnect, discovered servers, closed,
// asynchronous errors) go to handlers set with options; they run one at a time on a
// goroutine of their own.
package tern
