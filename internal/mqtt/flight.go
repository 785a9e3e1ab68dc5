package mqtt

import "time"

// outMsg is a QoS 1 or 2 message on its way to a client: in flight (it has a packet
// id and was sent at least once) or queued behind the in-flight window. It owns copies
// of everything it needs to be sent again after a reconnect or a restart.
type outMsg struct {
	topic    string
	payload  []byte
	header   []byte // encoded header block (user properties and friends)
	reply    string // response topic, "" for none
	qos      byte
	retain   bool
	subIDs   []uint32 // of every subscription it matched that has one
	expireAt int64    // Unix nanoseconds, 0 = never

	pid    uint16
	pubrec bool   // PUBREC received: only PUBREL/PUBCOMP remain
	mid    uint64 // id of its stored copy (persistent sessions), 0 if none
}

// flight is the client-bound side of a session's QoS 1/2 exchange: packet-id
// allocation, the in-flight window (the client's receive maximum), the queue behind it
// and the order in which in-flight messages are resent. It is a plain data structure
// driven by the session under its lock; it does no I/O. It is small until its first
// message (q), since most sessions of idle devices never have one.
type flight struct {
	window  int32 // at most this many in flight
	nextPID uint16
	q       *flightQueues
}

type flightQueues struct {
	inflight map[uint16]*outMsg
	order    []uint16 // in-flight packet ids, oldest first
	queue    []*outMsg
}

// queuePolicy is what a flight may queue behind its window (or while offline), and
// whether a full queue evicts its oldest message (else it refuses the new one).
// drop is told of every queued message that is evicted or expires.
type queuePolicy struct {
	maxQueue int
	dropOld  bool
	drop     func(*outMsg)
}

func (f *flight) queues() *flightQueues {
	if f.q == nil {
		f.q = &flightQueues{inflight: make(map[uint16]*outMsg)}
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

func (f *flight) put(m *outMsg) {
	q := f.queues()
	q.inflight[m.pid] = m
	q.order = append(q.order, m.pid)
}

// canSend reports whether a new message may go in flight now.
func (f *flight) canSend() bool { return f.inflightLen() < int(f.window) && f.queueLen() == 0 }

// start puts m in flight with a fresh packet id and returns it.
func (f *flight) start(m *outMsg) uint16 {
	q := f.queues()
	for {
		f.nextPID++
		if f.nextPID == 0 {
			f.nextPID = 1
		}
		if _, used := q.inflight[f.nextPID]; !used {
			break
		}
	}
	m.pid = f.nextPID
	m.pubrec = false
	f.put(m)
	return m.pid
}

// enqueue queues m behind the window; it reports false when the queue is full and m
// was dropped (drop-new), or evicts the oldest queued message (drop-old).
func (f *flight) enqueue(m *outMsg, p queuePolicy) bool {
	q := f.queues()
	if len(q.queue) >= p.maxQueue {
		if !p.dropOld || len(q.queue) == 0 {
			return false
		}
		if p.drop != nil {
			p.drop(q.queue[0])
		}
		q.queue[0] = nil
		q.queue = q.queue[1:]
	}
	q.queue = append(q.queue, m)
	return true
}

// ack ends the exchange of pid for PUBACK (QoS 1) and PUBCOMP (QoS 2). It returns
// the message, nil if pid was not in flight.
func (f *flight) ack(pid uint16) *outMsg {
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
func (f *flight) received(pid uint16) *outMsg {
	if f.q == nil {
		return nil
	}
	m, ok := f.q.inflight[pid]
	if !ok || m.qos != 2 {
		return nil
	}
	m.pubrec = true
	return m
}

// next takes the next queued message that has not expired, if the window has room.
func (f *flight) next(now time.Time, drop func(*outMsg)) *outMsg {
	if f.q == nil {
		return nil
	}
	q := f.q
	for len(q.inflight) < int(f.window) && len(q.queue) > 0 {
		m := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		if m.expireAt != 0 && now.UnixNano() >= m.expireAt {
			if drop != nil {
				drop(m)
			}
			continue
		}
		return m
	}
	return nil
}

// resend lists the in-flight messages, oldest first, for a reconnecting client.
func (f *flight) resend() []*outMsg {
	if f.q == nil {
		return nil
	}
	out := make([]*outMsg, 0, len(f.q.order))
	for _, pid := range f.q.order {
		out = append(out, f.q.inflight[pid])
	}
	return out
}

// restore puts back a message read from storage: in flight if it had a packet id,
// else at the end of the queue. Messages must come in their original order.
func (f *flight) restore(m *outMsg) {
	q := f.queues()
	if m.pid == 0 {
		q.queue = append(q.queue, m)
		return
	}
	if _, dup := q.inflight[m.pid]; dup {
		m.pid, m.pubrec = 0, false
		q.queue = append(q.queue, m)
		return
	}
	f.put(m)
	f.nextPID = max(f.nextPID, m.pid)
}

// all lists every message in flight and queued.
func (f *flight) all() []*outMsg {
	if f.q == nil {
		return nil
	}
	return append(f.resend(), f.q.queue...)
}
