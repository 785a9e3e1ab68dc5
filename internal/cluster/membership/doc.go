// Package membership owns cluster membership and failure detection: which Tern
// nodes are in the cluster, how to reach each one's route listener, and when one
// joins, leaves or dies. It wraps github.com/hashicorp/memberlist (SWIM gossip with
// the Lifeguard extensions) and adds Tern's rules on top: node identity, cluster
// and version checks, join retries, and an event stream for the layers above.
//
// It knows nothing of routes, the broker or the server: the route layer consumes
// its events and must not reach into memberlist itself; this package must not
// import anything above it.
//
// # Use
//
//	m, err := membership.Start(membership.Config{
//		NodeName:    "tern-1",                 // --server-name
//		ClusterName: "prod",                   // --cluster-name
//		GossipPort:  7401 + membership.GossipPortOffset,
//		Join:        []string{"tern-headless:7401"}, // --join: route addresses
//		RouteAddr:   "10.0.0.5:7401",
//		Version:     version,
//		Tags:        map[string]string{"zone": "eu-1a"},
//		Logger:      log.With("component", "membership"),
//	})
//	if err != nil {
//		return err
//	}
//	go func() {
//		for ev := range m.Events() { // closed by Shutdown
//			switch ev.Kind {
//			case membership.NodeJoined:
//				routes.Connect(ev.Node.Name, ev.Node.ID, ev.Node.RouteAddr)
//			case membership.NodeUpdated:
//				routes.Update(ev.Node)
//			case membership.NodeLeft, membership.NodeFailed:
//				routes.Drop(ev.Node.Name, ev.Node.ID)
//			}
//		}
//	}()
//
//	sig := make(chan os.Signal, 1)
//	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
//	<-sig
//	if err := m.Leave(2 * time.Second); err != nil { // peers see NodeLeft, not NodeFailed
//		log.Warn("leave", "err", err)
//	}
//	m.Shutdown()
//
// Every other node is reported by a NodeJoined event when first seen, so a reader
// that consumes Events from Start on needs no Members snapshot. Events never
// include this node. A node restarted under the same name has a new ID; when the
// restart is seen before the old process was declared dead, the old one is
// reported NodeFailed just before the new one's NodeJoined, so state the layers
// above keep per process can be keyed by (Name, ID).
//
// # Joining
//
// Join entries are route addresses, as typed after --join; gossip is tried at the
// same host on the route port + GossipPortOffset (JoinGossip makes them gossip
// addresses as is). A host name is resolved on every attempt and every address it
// gives is joined, so a Kubernetes headless service naming all pods works, and the
// list may name this node too (its own addresses are skipped), so every node can
// run the same command line. While the node knows no other member it retries
// every RejoinInterval, doubling to MaxRejoinInterval: the first node of a cluster
// simply waits for the others. Once another member is known memberlist's gossip
// carries the membership and retries stop; they start again if every other member
// leaves or dies, which is how a node cut off from all others finds them again.
//
// # Refusals
//
// Clusters are kept apart by ClusterName, which memberlist prefixes to every
// packet and stream (packets of another cluster are dropped unread) and which the
// metadata repeats. A node whose metadata names another cluster, another major
// version or is malformed is refused: memberlist never counts it as a peer. A join
// that would give one name to two live processes at different addresses is
// refused on both sides, with an error logged on each: the cluster keeps the node
// it had, and the newcomer stays alone, retrying, until the name is free (the
// holder left or was declared dead), which is also how a node restarted at a new
// address gets its name back.
//
// # Encryption
//
// With Config.SecretKey (derived from the cluster secret, internal/cluster/secret)
// every gossip packet and stream is sealed with AES-GCM by memberlist's keyring,
// the cluster name authenticated with it, and gossip that is not sealed with the
// same key is dropped whichever way it goes (GossipVerifyIncoming and
// GossipVerifyOutgoing): a node without the key, or with another, never becomes a
// member, and nothing it learns from the cluster's answers is readable. Both sides
// log why, a warning per peer and kind every 30 s (logwriter.go), and the joining
// node keeps retrying. memberlist's keyring could hold several keys for a rolling
// change of key; Tern installs one, so changing the secret means restarting every
// node with the new one.
//
// # Metadata
//
// Each node gossips a small versioned binary record (see encodeMeta): cluster
// name, node ID, route address, version, tags, the node's Raft id (format 2) and
// a leaving flag; a decoder accepts older formats and ignores what newer ones
// append. memberlist limits it to MaxMetaSize (512) bytes; Start and UpdateTags
// refuse tags that do not fit with ErrMetaTooLarge rather than let memberlist
// panic. The decoder reads
// other nodes' bytes and treats anything malformed as an error (FuzzDecodeMeta).
//
// memberlist's leave message only says a node is dead; a leaving node first sends
// its metadata with the leaving flag set, which is how its peers tell NodeLeft
// from NodeFailed. If that update is lost and only the leave arrives, the peer
// reports NodeFailed.
//
// # Failure detection timing
//
// A node that vanishes without leaving is declared dead after about
//
//	T ≈ probe wait + ProbeInterval + SuspicionMult × max(1, log10 N) × ProbeInterval + gossip
//
// where the probe wait is how long until some member probes it (each member
// probes one other per ProbeInterval, going round the member list, so with N−1
// probers usually within one interval, at worst N−1), the failed probe takes one
// interval (ProbeTimeout for a direct ack, then indirect probes through other
// members and a TCP ping until the interval ends), the suspicion lasts
// SuspicionMult × max(1, log10 N) × ProbeInterval unless the suspect refutes it,
// and the verdict spreads by gossip every GossipInterval. From four nodes on,
// Lifeguard starts the suspicion at six times that and shortens it to the base as
// other members confirm it independently, which at this probe rate takes a few
// intervals.
//
// memberlist's LAN defaults (1 s probe interval, 500 ms timeout, multiplier 4)
// take 6 to 7 s for three nodes. Tern picks ProbeInterval 200 ms, ProbeTimeout
// 100 ms, SuspicionMult 4 and GossipInterval 100 ms: for N = 3 that is at most
// 400 + 200 + 800 + 100 ms ≈ 1.5 s at worst, within the 2 s Tern aims for
// (measured on loopback: about 1.1 s for three nodes, 1.1 to 1.3 s for five and
// eight), and for N up to 10 the base suspicion stays 800 ms. The cost is
// five probes a second per node, a hundred-odd bytes each, and gossip only when
// there is news: nothing on a LAN. The risk is false suspicion: a live node is
// declared dead only if it answers no probe, direct, indirect or TCP, and cannot
// refute for 800 ms, that is a stall (GC pause, starved CPU, frozen VM) that long.
// Lifeguard slows a node's own probing when it notices it is the slow one, which
// keeps an overloaded node from accusing healthy ones. On a WAN or on hosts that
// stall, raise ProbeInterval (1 s) and ProbeTimeout (500 ms) and keep
// SuspicionMult at 4 to 6. A route that is merely slow is the route layer's to
// stop using at once; membership only answers whether the node is gone.
//
// A node declared dead while it was cut off refutes the verdict once it hears of
// it. Cut off for less than its own suspicion of the others lasts (from four
// nodes on, a suspicion few others confirm lasts longest, and a node alone has no
// one to confirm it, two of five only each other), it still
// believes the others alive when the network heals, gossip of the verdict went
// out while it could not hear it, and a dead node is not probed: it hears of it
// at its next full state exchange (push/pull) with a live member. Each node has
// one every 2 s (pushPullInterval; memberlist's LAN default, 30 s, kept such a
// node out for up to a minute), so it is back a second or two after the heal.
package membership
