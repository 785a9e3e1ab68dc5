package replica

import (
	"errors"
	"fmt"
)

// Errors returned by Host and Core methods; callers branch on them with errors.Is.
var (
	// ErrNotLeader: the request needs the group's leader and this node is not it.
	// The error is a *NotLeaderError naming the leader, if one is known, so that
	// the caller can forward the request.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrGroupUnknown: no group with that id on this node.
	ErrGroupUnknown = errors.New("replica: group unknown")
	// ErrGroupExists: AddGroup with an id already in use.
	ErrGroupExists = errors.New("replica: group exists")
	// ErrStopped: the host stopped (or the group was removed) before the
	// request completed; whether a proposal was committed is unknown.
	ErrStopped = errors.New("replica: stopped")
	// ErrProposalDropped: the entry was not committed and never will be (raft
	// refused it — a leader transfer in progress, too much uncommitted data — or
	// another leader's entry took its place in the log). Safe to retry.
	ErrProposalDropped = errors.New("replica: proposal dropped")
	// ErrOutcomeUnknown: the replica learned the log past the proposal from a
	// snapshot, so it cannot tell whether the entry was the one committed.
	ErrOutcomeUnknown = errors.New("replica: proposal outcome unknown")
	// ErrConfChangeRefused: raft refused a membership change (another one is
	// still being applied, or it does not fit the current configuration).
	ErrConfChangeRefused = errors.New("replica: membership change refused")
	// ErrTransferFailed: leadership did not move to the target within an
	// election timeout.
	ErrTransferFailed = errors.New("replica: leadership transfer failed")
	// ErrReadDropped: a read-index request got no answer within an election
	// timeout (leader change, partition). Safe to retry.
	ErrReadDropped = errors.New("replica: read index dropped")
	// ErrGroupFailed: the group's storage or state machine returned an error;
	// the group no longer takes part in raft on this node.
	ErrGroupFailed = errors.New("replica: group failed")
	// ErrEmptyProposal: Propose with no data (raft reserves empty entries).
	ErrEmptyProposal = errors.New("replica: empty proposal")
)

// NotLeaderError is the error a request gets from a replica that is not its
// group's leader. errors.Is(err, ErrNotLeader) holds.
type NotLeaderError struct {
	Group uint64
	// Leader is the node the replica believes leads the group, 0 if none.
	Leader uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("replica: group %d: not the leader (no leader known)", e.Group)
	}
	return fmt.Sprintf("replica: group %d: not the leader (leader is node %d)", e.Group, e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
