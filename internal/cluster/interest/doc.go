// Package interest holds what a cluster node knows of who wants which subjects:
// Local, the node's own subscriptions counted per subject and queue group (what it
// advertises to the other nodes), and Table, the interest one other node advertised
// (what its route subscribes in the local broker on that node's behalf).
//
// Interest travels as absolute counts — (subject, queue, weight), weight 0 when gone
// — so that sending an entry twice changes nothing, and a full refresh under a
// generation number replaces whatever drifted: the receiver drops the entries a
// refresh did not repeat. A node whose refreshes stop for longer than the lease is
// forgotten altogether (source 001's TTL leases).
//
// Table is a pure state machine: frames in, changes to apply out; it does no I/O and
// reads no clock. Local is the broker's InterestObserver and tells its listeners
// (the routes) of every change in the order it happened.
package interest
