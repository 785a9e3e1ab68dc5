/*
Package arq implements Tern's reliable, ordered message delivery over a datagram
path that loses, duplicates, reorders and delays what it carries: an automatic
repeat request (ARQ) protocol. An Endpoint is one side of a session. It turns the
messages given to Send into datagrams and the datagrams given to Receive back into
the peer's messages, each delivered once and in order.

The package is a pure state machine. It opens no sockets, starts no goroutines,
sets no timers and never reads the clock: every method that depends on time takes
the current time as an argument, and everything the Endpoint wants done comes back
from Output. That is what lets a test drive two Endpoints through a simulated
network with seeded loss, reordering and blackouts and replay any run exactly.

# Usage

Make an Endpoint for each side of a session with New; the zero Config takes the
defaults:

	ep := arq.New(arq.Config{MTU: 1200})

The caller owns everything outside the protocol:

  - The socket. It reads datagrams from the peer and passes each to Receive, and
    writes to the peer every datagram Output returns. A datagram that Receive
    refuses (ErrMalformed) changed nothing and is simply dropped. The caller puts
    any session framing, addressing or encryption around the datagrams; MTU is
    the room left for the ARQ datagram itself.
  - The clock. It passes the current time to Send, Receive, Tick, SetUnread and
    RecentLoss. The time only needs to be monotonic; a simulator may pass a
    virtual one.
  - The timer. Deadline says when Tick must next run (zero when no timer is
    set); the caller arranges to call Tick then. Calling it early is harmless.
  - The application's buffer. Delivered messages are copied out of Output, and
    SetUnread reports how many delivered bytes the application has not consumed,
    which closes the receive window when the reader falls behind.
  - Serialisation. An Endpoint is not safe for concurrent use; the caller holds
    one lock around each call and the Output that follows it.

Datagrams and messages returned by Output stay valid only until the next call of
any Endpoint method, so the caller sends and copies them first.

The caller's loop then looks like this, with write sending datagrams to the peer
and unread counting the bytes delivered but not yet consumed:

	for {
		select {
		case b := <-fromSocket:
			_ = ep.Receive(now(), b) // a malformed datagram is dropped; nothing changed
		case msg := <-fromApp:
			if err := ep.Send(now(), msg); errors.Is(err, arq.ErrQueueFull) {
				// hold msg until acknowledgements drain the queue
			}
		case n := <-consumed: // the application read n bytes
			unread -= n
			ep.SetUnread(now(), unread) // may reopen the window
		case <-timer.C:
			ep.Tick(now())
		}
		datagrams, delivered := ep.Output()
		write(datagrams)
		for _, m := range delivered {
			deliver(m) // copies m
			unread += len(m)
		}
		if len(delivered) > 0 && ep.SetUnread(now(), unread) {
			datagrams, _ = ep.Output() // the window reopened: send the update
			write(datagrams)
		}
		if d := ep.Deadline(); !d.IsZero() {
			timer.Reset(d.Sub(now()))
		}
	}

Idle reports when nothing is queued, in flight or owed to the peer, for a caller
that sends keepalives or waits for a graceful close; Stats reports the counters.

# Protocol

Reliability is selective repeat driven by the receiver: gaps are reported at once
as NAK ranges, cumulative acknowledgements go out every AckEvery packets or
AckDelay (piggybacked on data when there is any), a tail-loss probe asks for an
acknowledgement after a burst, and a retransmission timer per RFC 6298 covers the
rest. Small messages are bundled into one datagram; large ones are fragmented.
Congestion control (a window with slow start, a delay signal and pacing) and flow
control (the receive window) keep the sender from overrunning the path or the
reader. The datagram layout is described in wire.go.
*/
package arq
