// Package group is the coordinator's logic of one Kafka consumer group under the
// classic group protocol, as a pure, deterministic state machine: members and
// their ids (KIP-394's MEMBER_ID_REQUIRED handshake), static members
// (group.instance.id, KIP-345), generations, the join and sync phases of a
// rebalance, rebalance and session timeouts, and the errors Kafka's coordinator
// answers with (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID ...). The broker only relays assignments: the leader member's
// assignor (range, round-robin, cooperative-sticky ...) computes them and hands
// them over in its SyncGroup.
//
// The package opens no sockets, starts no goroutines and reads no clock: every
// event comes in through a method that takes the current time, and what the
// machine wants done comes back from Ready. Offsets are not its business either:
// the caller checks a commit with CheckCommit and stores it where it likes.
//
// # The caller's loop
//
// The caller (package kafka) owns the connections, the clock and one timer per
// group, and holds one lock around each event and the Ready that follows:
//
//	mu.Lock()
//	g.Join(now, join)               // or Sync, Heartbeat, Leave, CheckCommit, Tick
//	rd := g.Ready()
//	mu.Unlock()
//	for _, r := range rd.Replies {  // answers to JoinGroup and SyncGroup requests,
//		answer(r.Token, r)          // now or later: a join waits for the others
//	}
//	timer.Reset(rd.Deadline)        // when Tick must run next (zero: no need)
//
// JoinGroup and SyncGroup requests are parked until the rebalance lets them go:
// each carries a Token the caller chose, and its answer comes back, in some
// Ready, with that Token. Every parked request is answered by the time the
// rebalance timeout (joins) or the session timeout (syncs) has passed, provided
// Tick runs at each Deadline. Heartbeat, Leave and CheckCommit answer at once.
package group
