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
	subID    uint32
	expireAt int64 // Unix nanoseconds, 0 = never

	pid    uint16
	pubrec bool   // PUBREC received: only PUBREL/PUBCOMP remain
	mid    uint64 // id of its stored copy (persistent sessions), 0 if none
}

// flight is the client-bound side of a session's QoS 1/2 exchange: packet-id
// allocation, the in-flight window (the client's receive maximum), the queue behind it
// and the order in which in-flight messages are resent. It is a plain data structure
// driven by the session under its lock; it does no I/O.
type flight struct {
	window   int // at most this many in flight
	maxQueue int // queued beyond the window, or while offline
	dropOld  bool

	nextPID  uint16
	inflight map[uint16]*outMsg
	order    []uint16 // in-flight packet ids, oldest first
	queue    []*outMsg

	// drop is told of every queued message that is evicted or expires.
	drop func(*outMsg)
}

// newFlight makes a flight; its table is made on first use, so that a session that
// never sends QoS 1 or 2 does without.
func newFlight(window, maxQueue int, dropOld bool) flight {
	return flight{window: window, maxQueue: maxQueue, dropOld: dropOld}
}

func (f *flight) put(m *outMsg) {
	if f.inflight == nil {
		f.inflight = make(map[uint16]*outMsg)
	}
	f.inflight[m.pid] = m
	f.order = append(f.order, m.pid)
}

// canSend reports whether a new message may go in flight now.
func (f *flight) canSend() bool { return len(f.inflight) < f.window && len(f.queue) == 0 }

// start puts m in flight with a fresh packet id and returns it.
func (f *flight) start(m *outMsg) uint16 {
	for {
		f.nextPID++
		if f.nextPID == 0 {
			f.nextPID = 1
		}
		if _, used := f.inflight[f.nextPID]; !used {
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
func (f *flight) enqueue(m *outMsg) bool {
	if len(f.queue) >= f.maxQueue {
		if !f.dropOld || len(f.queue) == 0 {
			return false
		}
		if f.drop != nil {
			f.drop(f.queue[0])
		}
		f.queue[0] = nil
		f.queue = f.queue[1:]
	}
	f.queue = append(f.queue, m)
	return true
}

// ack ends the exchange of pid for PUBACK (QoS 1) and PUBCOMP (QoS 2). It returns
// the message, nil if pid was not in flight.
func (f *flight) ack(pid uint16) *outMsg {
	m, ok := f.inflight[pid]
	if !ok {
		return nil
	}
	delete(f.inflight, pid)
	for i, p := range f.order {
		if p == pid {
			f.order = append(f.order[:i], f.order[i+1:]...)
			break
		}
	}
	return m
}

// received records a PUBREC for pid and returns the message, nil if pid is not a
// QoS 2 message in flight.
func (f *flight) received(pid uint16) *outMsg {
	m, ok := f.inflight[pid]
	if !ok || m.qos != 2 {
		return nil
	}
	m.pubrec = true
	return m
}

// next takes the next queued message that has not expired, if the window has room.
func (f *flight) next(now time.Time) *outMsg {
	for len(f.inflight) < f.window && len(f.queue) > 0 {
		m := f.queue[0]
		f.queue[0] = nil
		f.queue = f.queue[1:]
		if m.expireAt != 0 && now.UnixNano() >= m.expireAt {
			if f.drop != nil {
				f.drop(m)
			}
			continue
		}
		return m
	}
	return nil
}

// resend lists the in-flight messages, oldest first, for a reconnecting client.
func (f *flight) resend() []*outMsg {
	out := make([]*outMsg, 0, len(f.order))
	for _, pid := range f.order {
		out = append(out, f.inflight[pid])
	}
	return out
}

// restore puts back a message read from storage: in flight if it had a packet id,
// else at the end of the queue. Messages must come in their original order.
func (f *flight) restore(m *outMsg) {
	if m.pid == 0 {
		f.queue = append(f.queue, m)
		return
	}
	if _, dup := f.inflight[m.pid]; dup {
		m.pid, m.pubrec = 0, false
		f.queue = append(f.queue, m)
		return
	}
	f.put(m)
	f.nextPID = max(f.nextPID, m.pid)
}

// all lists every message in flight and queued.
func (f *flight) all() []*outMsg { return append(f.resend(), f.queue...) }
