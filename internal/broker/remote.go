package broker

import "errors"

// Remote is implemented by sinks that stand for another cluster node (a route). The
// broker treats their subscriptions — the interest the node advertised — in three
// ways of their own:
//   - a message that came from another node (Message.FromRoute) is never given to
//     a Remote: forwarding is one hop;
//   - a node gets a message once however many of its subscriptions match, with
//     the queue groups it was chosen for;
//   - a queue group delivers to a member on another node only when no local member
//     is eligible, spreading messages over nodes by Subscription.Weight.
//
// Filters and no-echo apply on the node where the subscriber is, so a Remote's
// subscriptions carry none.
type Remote interface {
	Sink
	// DeliverRemote queues m for the node. queues names the groups for which the
	// node was chosen to deliver to one of its members (plain subscribers there get
	// m in any case unless m.Group is set). It must copy what it keeps of m and
	// must not block.
	DeliverRemote(m *Message, queues []string) bool
	// Excluded reports that the node is behind or stalled and takes no traffic
	// for now: a queue group then picks a member elsewhere.
	Excluded() bool
}

// remoteTarget is a node a message goes to, with the groups it was chosen for.
type remoteTarget struct {
	sink   Remote
	queues []string
}

// toRemote adds a node (with group, unless "") to the message's targets and reports
// whether the node is new to them.
func (p *Batch) toRemote(r Remote, group string) bool {
	for i := range p.remotes {
		t := &p.remotes[i]
		if t.sink == r {
			if group != "" {
				t.queues = append(t.queues, group)
			}
			return false
		}
	}
	var queues []string
	if n := len(p.remotes); n < cap(p.remotes) {
		queues = p.remotes[:n+1][n].queues[:0] // reuse the slot's backing array
	}
	if group != "" {
		queues = append(queues, group)
	}
	p.remotes = append(p.remotes, remoteTarget{sink: r, queues: queues})
	return true
}

// deliverRemotes hands m to each target node once.
func (p *Batch) deliverRemotes(m *Message) {
	for i := range p.remotes {
		t := &p.remotes[i]
		if t.sink.DeliverRemote(m, t.queues) {
			p.Add(t.sink)
		}
		t.sink = nil
		t.queues = t.queues[:0]
	}
	p.remotes = p.remotes[:0]
}

// pickRemote chooses a live remote member of a queue group, on a node that is not
// excluded, in proportion to the members each node has, turning with the group's
// cursor.
func pickRemote(members []*Subscription, cursor uint32) Remote {
	var total uint64
	for _, sub := range members {
		if sub.remote != nil && !sub.closed.Load() && !sub.remote.Excluded() {
			total += uint64(max(sub.Weight, 1))
		}
	}
	if total == 0 {
		return nil
	}
	x := uint64(cursor) % total
	for _, sub := range members {
		if sub.remote == nil || sub.closed.Load() || sub.remote.Excluded() {
			continue
		}
		w := uint64(max(sub.Weight, 1))
		if x < w {
			return sub.remote
		}
		x -= w
	}
	return nil
}

// InterestObserver learns how the local interest changes: the subscriptions of sinks
// that are not Remote, which a cluster node advertises to the others.
type InterestObserver interface {
	// Interest is called after a local subscription to subject (in queue, "" for a
	// plain one) was added (delta 1) or removed (delta -1). It is called on the
	// subscribing goroutine, must not block, and must not call the broker.
	Interest(subject, queue string, delta int)
}

// ErrObserverLate is returned by SetObserver once subscriptions exist: an observer
// must see every local subscription from the first.
var ErrObserverLate = errors.New("broker: interest observer set after subscriptions were made")

// SetObserver installs the interest observer; it must come before the first
// subscription.
func (b *Broker) SetObserver(o InterestObserver) error {
	if b.subs.Count() > 0 {
		return ErrObserverLate
	}
	b.observer.Store(&o)
	return nil
}

func (b *Broker) interest(sub *Subscription, delta int) {
	if sub.remote != nil || sub.NodeLocal {
		return
	}
	if o := b.observer.Load(); o != nil {
		(*o).Interest(sub.Subject, sub.Queue, delta)
	}
}
