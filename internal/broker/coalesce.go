package broker

// coalescer is a Batch's scratch for the plain subscriptions marked with SetCoalesce
// that one message matched. Publish gathers them in subs; deliverCoalesced groups them
// by sink so that each sink gets them in one DeliverMatched call. It is reused message
// after message, so the steady state allocates nothing.
type coalescer struct {
	subs  []*Subscription // eligible, in match order
	next  []int32         // next[i]: index of the next of subs[i]'s sink, 0 for none
	group []*Subscription // one sink's, handed to DeliverMatched
	lims  []limit         // the group's delivery numbers (take)
	last  map[Sink]int32  // index of each sink's latest in subs, for long lists
}

type limit struct{ n, max uint64 }

// coalesceScan is how many subscriptions are grouped by comparing each with those
// before it; beyond, comparisons would grow with the square of the count (a topic
// that thousands of clients with overlapping filters subscribe to), so a map finds
// each sink's previous one.
const coalesceScan = 8

// deliverCoalesced delivers m to the subscriptions gathered in p.co.subs: one call
// per sink, DeliverMatched for a sink that several of them belong to.
func (b *Broker) deliverCoalesced(p *Batch, m *Message) {
	c := &p.co
	subs := c.subs
	// A marked subscription whose sibling does not match this subject: no grouping.
	if len(subs) == 1 {
		sub := subs[0]
		subs[0] = nil
		c.subs = subs[:0]
		b.deliver(p, sub, m)
		return
	}
	if cap(c.next) < len(subs) {
		c.next = make([]int32, len(subs), cap(subs))
	} else {
		c.next = c.next[:len(subs)]
		clear(c.next)
	}
	next := c.next
	useMap := len(subs) > coalesceScan
	if useMap {
		if c.last == nil {
			c.last = make(map[Sink]int32)
		}
		for i, sub := range subs {
			if j, ok := c.last[sub.Sink]; ok {
				next[j] = int32(i)
			}
			c.last[sub.Sink] = int32(i)
		}
	} else {
		for i := 1; i < len(subs); i++ {
			for j := i - 1; j >= 0; j-- {
				if subs[j].Sink == subs[i].Sink {
					next[j] = int32(i)
					break
				}
			}
		}
	}
	// Each subscription not taken by an earlier one's group heads its sink's group.
	// Every slot is cleared on the way, so the scratch keeps no subscription alive.
	for i, sub := range subs {
		if sub == nil {
			continue
		}
		subs[i] = nil
		if useMap {
			delete(c.last, sub.Sink)
		}
		if next[i] == 0 {
			b.deliver(p, sub, m)
			continue
		}
		group := append(c.group[:0], sub)
		for j := next[i]; j != 0; j = next[j] {
			group = append(group, subs[j])
			subs[j] = nil
		}
		b.deliverGroup(p, group, m)
		clear(group)
		c.group = group[:0]
	}
	c.subs = subs[:0]
}

// deliverGroup hands m to the sink of group, several subscriptions of one sink, in one
// call, and enforces each subscription's message limit.
func (b *Broker) deliverGroup(p *Batch, group []*Subscription, m *Message) {
	ms, ok := group[0].Sink.(MultiSink)
	if !ok {
		for _, sub := range group {
			b.deliver(p, sub, m)
		}
		return
	}
	c := &p.co
	lims := c.lims[:0]
	kept := group[:0]
	for _, sub := range group {
		n, max, ok := take(sub)
		if !ok {
			continue
		}
		kept = append(kept, sub)
		lims = append(lims, limit{n, max})
	}
	c.lims = lims
	switch len(kept) {
	case 0:
		return
	case 1:
		if !ms.Deliver(kept[0], m) {
			untake(kept[0])
			return
		}
	default:
		if !ms.DeliverMatched(kept, m) {
			for _, sub := range kept {
				untake(sub)
			}
			return
		}
	}
	p.Add(ms)
	for i, sub := range kept {
		if l := lims[i]; l.max != 0 && l.n == l.max {
			b.reachedLimit(sub)
		}
	}
}
