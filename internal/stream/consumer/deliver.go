package consumer

import (
	"container/heap"
	"slices"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Next picks the next delivery: a taker (the push subscribers, or the first waiting
// pull request that can be served) and a message for it (redeliveries first, then
// the last-per-subject backlog, then new messages, visiting partitions
// round-robin), and records it as delivered. ok is false when nothing can be
// delivered now: no taker, max ack pending reached, or no message.
func (m *Machine) Next(now time.Time, src Source) (d Delivery, ok bool) {
	explicit := m.cfg.AckPolicy != streamapi.AckNone
	defer func() {
		if !ok {
			m.clearDry()
		}
	}()
	for {
		if m.closed || m.cfg.Push && !m.interest {
			return d, false
		}
		if explicit && len(m.pending) >= m.cfg.MaxAckPending {
			m.endNoWait("max ack pending reached")
			return d, false
		}
		var req *pullRequest
		member, any := "", true
		if !m.cfg.Push {
			if req = m.nextRequest(); req == nil {
				m.endNoWait("no partitions assigned")
				return d, false
			}
			member, any = req.member, req.member == ""
		}
		key, msg, redelivery, found := m.take(member, any, src)
		if !found {
			if req == nil {
				return d, false
			}
			if req.noWait {
				m.dropRequest(req, streamapi.StatusNoMessages, "no messages")
				continue
			}
			// Requests behind this one may be served from other partitions.
			m.markDry(req.member)
			continue
		}
		if req != nil && req.maxBytes > 0 && req.sent > 0 && req.sentBytes+len(msg.Payload) > req.maxBytes {
			// Does not fit: hand the message back and end this request.
			m.unread(key, redelivery)
			m.dropRequest(req, streamapi.StatusTimeout, "max bytes reached")
			continue
		}
		d = Delivery{Key: key, Msg: msg, Deliveries: 1, Redelivery: redelivery, req: req}
		if explicit {
			pm := m.pending[key]
			if pm == nil {
				pm = &pendingMsg{key: key, idx: -1}
				m.pending[key] = pm
			}
			pm.deliveries++
			d.Deliveries = pm.deliveries
			pm.deadline = now.UnixNano() + int64(m.ackWaitFor(pm.deliveries))
			if pm.idx >= 0 {
				heap.Fix(&m.timers, pm.idx)
			} else {
				heap.Push(&m.timers, pm)
			}
			m.record(RecDelivered, uint64(key.Part), key.Seq, pm.deliveries)
		} else {
			m.retired = append(m.retired, key)
		}
		if redelivery {
			m.redelivered++
		}
		m.cseq++
		d.ConsumerSeq = m.cseq
		if req != nil {
			d.Reply = req.reply
			req.sent++
			req.sentBytes += len(msg.Payload)
			if req.sent >= req.batch {
				m.dropRequest(req, "", "")
			}
		}
		return d, true
	}
}

// NotTaken tells the machine nobody took delivery d (the puller went away, or the
// push subscribers did): the message is due again and the request ends.
func (m *Machine) NotTaken(d Delivery) {
	if pm := m.pending[d.Key]; pm != nil {
		m.queueRedelivery(pm)
	} else if n := len(m.retired); n > 0 && m.retired[n-1] == d.Key {
		m.retired = m.retired[:n-1]
	}
	if d.req != nil {
		m.dropRequest(d.req, "", "")
	}
	m.clearDry()
}

// take finds the next message for a taker.
func (m *Machine) take(member string, any bool, src Source) (key Key, msg Msg, redelivery, ok bool) {
	n := len(m.parts)
	for k := 0; k < n; k++ {
		i := (m.rr + k) % n
		p := &m.parts[i]
		if !any && p.owner != member {
			continue
		}
		for len(p.redeliver) > 0 {
			seq := p.redeliver[0]
			p.redeliver = p.redeliver[1:]
			msg, ok := src.Read(i, seq)
			if !ok {
				delete(m.pending, Key{i, seq}) // gone from the stream
				continue
			}
			m.rr = i + 1
			return Key{i, seq}, msg, true, true
		}
		for len(p.backlog) > 0 {
			seq := p.backlog[0]
			p.backlog = p.backlog[1:]
			if msg, ok := src.Read(i, seq); ok {
				m.rr = i + 1
				return Key{i, seq}, msg, false, true
			}
		}
		msg, resume, ok := src.Next(i, p.next)
		if ok {
			p.next = msg.Seq + 1
			p.nextDirty = true
			m.rr = i + 1
			return Key{i, msg.Seq}, msg, false, true
		}
		if resume > p.next {
			p.next = resume
			p.nextDirty = true
		}
	}
	return key, msg, false, false
}

// unread hands back a message take returned but that was not delivered.
func (m *Machine) unread(key Key, redelivery bool) {
	p := &m.parts[key.Part]
	if redelivery {
		p.redeliver = slices.Insert(p.redeliver, 0, key.Seq)
		return
	}
	if key.Seq < p.next {
		p.next = key.Seq
		p.nextDirty = true
	}
}
