/*
Package session implements the MQTT session of one client id as a pure,
deterministic state machine: what CONNECT negotiates, subscriptions, the QoS 1 and 2
exchanges in both directions, the in-flight window and the queue behind it, topic
aliases, keepalive, the will and its delay, session expiry and message expiry.

The package opens no sockets, starts no goroutines, sets no timers and never reads
the clock: every event comes in through a method that takes the current time, and
everything the session wants done comes back from Ready. That is what lets the
scenarios in testdata replay a session's life — reconnects in every state of a QoS 2
exchange, takeovers, wills, expiry — in virtual time, in milliseconds.

# Usage

A Session is made with New (or Init, for a driver that embeds it) from a Config
shared by the server's sessions. The caller — the MQTT front end, package mqtt —
owns everything outside the protocol:

  - The connection. It decodes packets and hands each to the matching method
    (Connect, Publish, Ack, Subscribe, Unsubscribe, Ping, ClientDisconnect), calls
    Disconnected when the connection ends, and encodes the Packets of each Ready
    onto the connection's outbound queue. It also validates what needs the broker's
    view of topics: a SUBSCRIBE's filters are parsed into Subs (with their broker
    subjects) before Subscribe, a will is parsed into a Message before Connect.
  - The broker. It routes what the session's subscriptions match through Route,
    sends QoS 0 straight away (its fast path: Route allocates nothing and changes
    nothing) and gives QoS 1 and 2 messages to Enqueue; it publishes the client's
    PUBLISH packets when Publish says so and reports the outcome with Published;
    it applies Ready.Subs and publishes Ready.Publish (wills). A driver that routes
    without the session's lock keeps its own copy of the live subscriptions (those
    Ready.Subs adds and has not removed) and of Presence, replaced after each event
    that changes them, and routes with RouteLive, Route's rule as a pure function;
    QoS 1 and 2 still go to Enqueue under the lock.
  - Storage. Ready.Persist lists, in order, the records of a persistent session to
    write or delete; the caller picks keys and encodings, and rebuilds a session
    after a restart with Restore, RestoreSub, RestoreMsg, RestoreQoS2 and Restored.
  - The clock and one timer. Ready.Deadline (and Deadline) says when Tick must next
    run. While the client is connected that is its keepalive, which a driver may
    enforce with its socket's read deadline instead (calling Heard and Tick when it
    fires); while the client is away it is the earliest of the delayed will, the
    session's end and a queued message's expiry. Calling Tick early is harmless.
  - Serialisation. A Session is not safe for concurrent use: the caller holds one
    lock around each event and the taking of the Ready that follows.

The caller's loop, for each event (a packet, a delivery, a timer, a closed
connection), looks like this:

	mu.Lock()
	err := s.Publish(now, p) // or any other event
	rd := s.Ready()
	if rd != nil {
		persist(rd.Persist)    // in order, under the lock: records follow the state
		encode(rd.Packets)     // onto the outbound queue, in order
	}
	mu.Unlock()
	if rd != nil {
		subscribe(rd.Subs)     // broker calls, outside the lock: the broker may deliver
		publish(rd.Publish)    // to this very session
		for _, sub := range rd.Retained {
			// match retained messages; each goes to DeliverRetained
		}
		if rd.Kick { closeOldConnection(0x8E) }
		if rd.Close != nil { closeConnection(rd.Close) }
		if rd.Ended { forgetSession() }
		timer.Reset(rd.Deadline.Sub(now))
		session.Release(rd)
	}

Packets must reach the client in the order the session produced them, so a driver
that writes them after unlocking must keep Readies in order. A PUBLISH the driver
cannot send (larger than the client's maximum packet size) is reported with
Discard, which ends its exchange as if acknowledged and may produce another Ready.

Packet.Msg, Op.Msg and the Subs in a Ready belong to the session: the caller reads
them while it applies the Ready and keeps nothing. A Ready is valid until Release.
*/
package session
