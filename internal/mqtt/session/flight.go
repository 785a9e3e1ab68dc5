package session

import "time"

// OutMsg is a QoS 1 or 2 message on its way to a client (or a retained QoS 0 one
// being sent once): in flight (it has a packet id and was sent at least once) or
// queued behind the in-flight window. It owns copies of everything it needs to be
// sent again after a reconnect or a restart; the driver stores it as a record.
type OutMsg struct {
	Topic    string
	Payload  []byte
	Header   []byte // encoded header block (user properties and friends)
	Reply    string // response topic, "" for none
	QoS      byte
	Retain   bool
	SubIDs   []uint32 // of every subscription it matched that has one
	ExpireAt int64    // Unix nanoseconds, 0 = never

	PID    uint16
	Pubrec bool   // PUBREC received: only PUBREL/PUBCOMP remain
	MID    uint64 // id of its stored copy (persistent sessions), 0 if none
}

// expired reports whether m's message expiry has passed at now.
func (m *OutMsg) expired(now time.Time) bool {
	return m.ExpireAt != 0 && now.UnixNano() >= m.ExpireAt
}

// flight is the client-bound side of a session's QoS 1/2 exchange: packet-id
// allocation, the in-flight window (the client's receive maximum), the queue behind it
// and the order in which in-flight messages are resent. It is small until its first
// message (q), since most sessions of idle devices never have one.
type flight struct {
	q *flightQueues
}

type flightQueues struct {
	nextPID  uint16
	inflight map[uint16]*OutMsg
	order    []uint16 // in-flight packet ids, oldest first
	queue    []*OutMsg
}

func (f *flight) queues() *flightQueues {
	if f.q == nil {
		f.q = &flightQueues{inflight: make(map[uint16]*OutMsg)}
	}
	return f.q
}

func (f *flight) inflightLen() int {
	if f.q == nil {
		return 0
	}
	return len(f.q.inflight)
}

func (f *flight) queueLen() int {
	if f.q == nil {
		return 0
	}
	return len(f.q.queue)
}

func (f *flight) put(m *OutMsg) {
	q := f.queues()
	q.inflight[m.PID] = m
	q.order = append(q.order, m.PID)
}

// canSend reports whether a new message may go in flight now, window being the
// client's: a message may not overtake those already queued.
func (f *flight) canSend(window int) bool { return f.inflightLen() < window && f.queueLen() == 0 }

// start puts m in flight with a fresh packet id.
func (f *flight) start(m *OutMsg) {
	q := f.queues()
	for {
		q.nextPID++
		if q.nextPID == 0 {
			q.nextPID = 1
		}
		if _, used := q.inflight[q.nextPID]; !used {
			break
		}
	}
	m.PID = q.nextPID
	m.Pubrec = false
	f.put(m)
}

// enqueue queues m behind the window. A full queue refuses m (drop-new, it returns
// false) or evicts and returns its oldest message (drop-old).
func (f *flight) enqueue(m *OutMsg, maxQueue int, dropOld bool) (evicted *OutMsg, ok bool) {
	q := f.queues()
	if len(q.queue) >= maxQueue {
		if !dropOld || len(q.queue) == 0 {
			return nil, false
		}
		evicted = q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
	}
	q.queue = append(q.queue, m)
	return evicted, true
}

// ack ends the exchange of pid for PUBACK (QoS 1) and PUBCOMP (QoS 2). It returns
// the message, nil if pid was not in flight.
func (f *flight) ack(pid uint16) *OutMsg {
	if f.q == nil {
		return nil
	}
	q := f.q
	m, ok := q.inflight[pid]
	if !ok {
		return nil
	}
	delete(q.inflight, pid)
	for i, p := range q.order {
		if p == pid {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
	return m
}

// received records a PUBREC for pid and returns the message, nil if pid is not a
// QoS 2 message in flight.
func (f *flight) received(pid uint16) *OutMsg {
	if f.q == nil {
		return nil
	}
	m, ok := f.q.inflight[pid]
	if !ok || m.QoS != 2 {
		return nil
	}
	m.Pubrec = true
	return m
}

// next takes the next queued message that has not expired, if the client's window
// has room; expired ones are handed to drop.
func (f *flight) next(now time.Time, window int, drop func(*OutMsg)) *OutMsg {
	if f.q == nil {
		return nil
	}
	q := f.q
	for len(q.inflight) < window && len(q.queue) > 0 {
		m := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		if m.expired(now) {
			drop(m)
			continue
		}
		return m
	}
	return nil
}

// purge removes the queued messages that have expired at now, handing each to drop,
// and returns the earliest expiry of those left (0 for none).
func (f *flight) purge(now time.Time, drop func(*OutMsg)) int64 {
	if f.q == nil {
		return 0
	}
	var first int64
	kept := f.q.queue[:0]
	for _, m := range f.q.queue {
		if m.expired(now) {
			drop(m)
			continue
		}
		if m.ExpireAt != 0 && (first == 0 || m.ExpireAt < first) {
			first = m.ExpireAt
		}
		kept = append(kept, m)
	}
	clear(f.q.queue[len(kept):])
	f.q.queue = kept
	return first
}

// inflightOrder lists the in-flight messages, oldest first, for a reconnecting
// client.
func (f *flight) inflightOrder() []*OutMsg {
	if f.q == nil {
		return nil
	}
	out := make([]*OutMsg, 0, len(f.q.order))
	for _, pid := range f.q.order {
		out = append(out, f.q.inflight[pid])
	}
	return out
}

// restore puts back a message read from storage: in flight if it had a packet id,
// else at the end of the queue. Messages must come in their original order.
func (f *flight) restore(m *OutMsg) {
	q := f.queues()
	if m.PID == 0 {
		q.queue = append(q.queue, m)
		return
	}
	if _, dup := q.inflight[m.PID]; dup {
		m.PID, m.Pubrec = 0, false
		q.queue = append(q.queue, m)
		return
	}
	f.put(m)
	q.nextPID = max(q.nextPID, m.PID)
}

// all lists every message in flight and queued.
func (f *flight) all() []*OutMsg {
	if f.q == nil {
		return nil
	}
	return append(f.inflightOrder(), f.q.queue...)
}
