package consumer

import (
	"slices"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Pull queues a pull request answered on reply (the machine keeps reply). A
// request naming a group member joins that member to the group, which rebalances
// the partitions when the member is new.
func (m *Machine) Pull(now time.Time, reply []byte, req streamapi.PullRequest) {
	if m.closed {
		return
	}
	nowNs := now.UnixNano()
	r := &pullRequest{reply: reply, batch: max(req.Batch, 1), maxBytes: req.MaxBytes, noWait: req.NoWait, member: req.Member}
	exp := time.Duration(req.Expires)
	if exp <= 0 {
		exp = DefaultPullExpires
	}
	r.expires = nowNs + int64(exp)
	if m.cfg.Push {
		m.status(r, streamapi.StatusConflict, "push consumer: pull not allowed")
		return
	}
	m.lastActive = nowNs
	if r.member != "" {
		_, known := m.members[r.member]
		m.members[r.member] = nowNs
		if !known {
			m.rebalance()
		}
	}
	if len(m.waiting) >= m.cfg.MaxWaiting {
		// The oldest gives way.
		m.status(m.waiting[0], streamapi.StatusConflict, "too many waiting pull requests")
		m.waiting = slices.Delete(m.waiting, 0, 1)
	}
	m.waiting = append(m.waiting, r)
}

// rebalance assigns partitions to consumer-group members: partition i goes to the
// (i mod n)-th member in name order. A partition that changes hands has its pending
// messages redelivered to the new owner at once.
func (m *Machine) rebalance() {
	names := m.Members()
	for i := range m.parts {
		owner := ""
		if len(names) > 0 {
			owner = names[i%len(names)]
		}
		p := &m.parts[i]
		if p.owner == owner {
			continue
		}
		p.owner = owner
		var due []uint64
		for k, pm := range m.pending {
			if k.Part == i && pm.idx >= 0 {
				due = append(due, k.Seq)
			}
		}
		slices.Sort(due)
		for _, seq := range due {
			m.queueRedelivery(m.pending[Key{i, seq}])
		}
	}
	m.membersMoved = true
}

// endNoWait answers the waiting no-wait requests when nothing can be delivered now.
func (m *Machine) endNoWait(why string) {
	for i := 0; i < len(m.waiting); {
		if r := m.waiting[i]; r.noWait {
			m.dropRequest(r, streamapi.StatusNoMessages, why)
			continue
		}
		i++
	}
}

// nextRequest picks the first waiting request that can be served: its member owns
// partitions, and they were not found empty during this round of deliveries. A
// no-wait request whose partitions are empty is answered on the way.
func (m *Machine) nextRequest() *pullRequest {
	for i := 0; i < len(m.waiting); {
		r := m.waiting[i]
		switch {
		case r.member != "" && !m.ownsAny(r.member):
		case m.isDry(r.member):
			if r.noWait {
				m.dropRequest(r, streamapi.StatusNoMessages, "no messages")
				continue
			}
		default:
			return r
		}
		i++
	}
	return nil
}

// markDry notes that member's partitions ("": every partition) have nothing to
// deliver in this round: Next returning false, Tick and NotTaken start a new one.
func (m *Machine) markDry(member string) {
	if member == "" {
		m.allDry = true
		return
	}
	m.dry = append(m.dry, member)
}

func (m *Machine) isDry(member string) bool {
	return m.allDry || member != "" && slices.Contains(m.dry, member)
}

func (m *Machine) clearDry() {
	m.allDry = false
	m.dry = m.dry[:0]
}

func (m *Machine) ownsAny(member string) bool {
	for i := range m.parts {
		if m.parts[i].owner == member {
			return true
		}
	}
	return false
}

// dropRequest ends a request; with a code, its client is told why.
func (m *Machine) dropRequest(r *pullRequest, code, desc string) {
	if i := slices.Index(m.waiting, r); i >= 0 {
		m.waiting = slices.Delete(m.waiting, i, i+1)
	}
	if code != "" {
		m.status(r, code, desc)
	}
}
