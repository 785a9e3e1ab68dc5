// Package route owns the TCP routes between cluster nodes: one connection per node
// pair (the node whose name sorts first dials), the RHELLO handshake (with the
// cluster secret followed by RAUTH, each end's proof that it has the secret:
// auth.go), the interest each node advertises and the messages forwarded over them
// (frames of internal/wire; layout in docs/protocol.md, "Cluster routes").
//
// A Route is a broker.Remote: the interest its peer advertised is held in the local
// broker as subscriptions whose sink is the route, so the broker decides what to
// forward (once per node, one hop, local queue members first) and the route encodes
// it onto the shared outbound path (internal/outbound). Messages that arrive on a
// route are published into the local broker marked FromRoute, naming the queue
// groups the sending node chose this one for.
//
// Interest is sent as absolute weights (interest.Local tells every route of each
// change, in order), refreshed in full under a generation every Lease/3; a peer's
// interest is dropped when its route closes, when the Manager is told the node is
// gone, or when its refreshes stop for longer than Lease. A route closes when it has
// heard nothing from its peer, not even a PONG, for StaleAfter: membership may
// rightly keep both ends alive (a third node still reaches each) while the link
// between them carries nothing.
//
// The Manager is driven by membership: Want(name, addr) when a node joins, Drop(name)
// when it leaves or is declared dead. It knows nothing of how nodes are discovered.
package route
