package consumer

import (
	"container/heap"
	"slices"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Ack applies an acknowledgement of kind to message key: Ack retires it (with ack
// policy all, every pending message of its partition up to it), Nak makes it due
// again at once or after delay, InProgress restarts its ack wait, Term drops it as a
// dead letter with reason.
func (m *Machine) Ack(now time.Time, key Key, kind streamapi.AckKind, delay time.Duration, reason []byte) {
	if m.closed || key.Part < 0 || key.Part >= len(m.parts) {
		return
	}
	nowNs := now.UnixNano()
	m.lastActive = nowNs
	if m.cfg.AckPolicy == streamapi.AckAll && kind == streamapi.Ack {
		m.ackUpTo(key)
		return
	}
	pm := m.pending[key]
	if pm == nil {
		return
	}
	switch kind {
	case streamapi.Ack:
		m.removePending(pm)
		m.record(RecAcked, uint64(key.Part), key.Seq)
		m.retired = append(m.retired, key)
	case streamapi.Nak:
		if delay <= 0 {
			m.queueRedelivery(pm)
		} else {
			m.reschedule(pm, nowNs+int64(delay))
		}
	case streamapi.InProgress:
		m.reschedule(pm, nowNs+int64(m.ackWaitFor(pm.deliveries)))
	case streamapi.Term:
		m.removePending(pm)
		// Like an ack: never delivered again, even after a restart.
		m.record(RecAcked, uint64(key.Part), key.Seq)
		m.dead = append(m.dead, DeadLetter{Key: key, Deliveries: pm.deliveries, Reason: "terminated: " + string(reason)})
	}
}

func (m *Machine) ackUpTo(key Key) {
	var done []uint64
	for k := range m.pending {
		if k.Part == key.Part && k.Seq <= key.Seq {
			done = append(done, k.Seq)
		}
	}
	if len(done) == 0 {
		return
	}
	slices.Sort(done)
	for _, seq := range done {
		k := Key{key.Part, seq}
		m.removePending(m.pending[k])
		m.retired = append(m.retired, k)
	}
	m.record(RecAckedUpTo, uint64(key.Part), key.Seq)
}

func (m *Machine) removePending(pm *pendingMsg) {
	delete(m.pending, pm.key)
	if pm.idx >= 0 {
		heap.Remove(&m.timers, pm.idx)
		return
	}
	// Queued for redelivery: take it out of its partition's queue.
	p := &m.parts[pm.key.Part]
	if i := slices.Index(p.redeliver, pm.key.Seq); i >= 0 {
		p.redeliver = slices.Delete(p.redeliver, i, i+1)
	}
}

func (m *Machine) reschedule(pm *pendingMsg, deadline int64) {
	if pm.idx < 0 {
		return // already due
	}
	pm.deadline = deadline
	heap.Fix(&m.timers, pm.idx)
}

func (m *Machine) queueRedelivery(pm *pendingMsg) {
	if pm.idx < 0 {
		return
	}
	heap.Remove(&m.timers, pm.idx)
	m.parts[pm.key.Part].redeliver = append(m.parts[pm.key.Part].redeliver, pm.key.Seq)
}

// ackWaitFor is the ack wait of a message's n-th delivery: the backoff schedule's
// entry (its last repeating), else the ack wait.
func (m *Machine) ackWaitFor(deliveries uint64) time.Duration {
	if n := len(m.cfg.Backoff); n > 0 {
		i := min(int(deliveries)-1, n-1)
		return m.cfg.Backoff[max(i, 0)]
	}
	return m.cfg.AckWait
}
