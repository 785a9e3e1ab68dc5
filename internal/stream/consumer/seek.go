package consumer

import "container/heap"

// Seek moves the consumer's position in partition part to next, forward or back:
// the next first delivery there is the first message at or after next, and the
// partition's messages awaiting an ack are forgotten (those below next count as
// done, those at or above it are delivered again as new). It is how a position
// set from outside (a Kafka group's committed offset) becomes the consumer's, and
// it is journaled as one Seek record, which replay applies exactly, so that a
// position moved back stays back after a restart. next 0 means 1.
func (m *Machine) Seek(part int, next uint64) {
	if part < 0 || part >= len(m.parts) {
		return
	}
	next = max(next, 1)
	p := &m.parts[part]
	for k, pm := range m.pending {
		if k.Part != part {
			continue
		}
		if pm.idx >= 0 {
			heap.Remove(&m.timers, pm.idx)
		}
		delete(m.pending, k)
	}
	p.redeliver = p.redeliver[:0]
	p.backlog = nil
	p.next = next
	p.nextDirty = false
	m.record(RecSeek, uint64(part), next)
}
