package route

import (
	"sync"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/wire"
)

// Limits of what a node keeps for one peer until acknowledged.
const (
	maxUnackedMsgs  = 100_000
	maxUnackedBytes = 64 << 20
)

// outSession is what this node has forwarded to one peer with a sequence number
// (MQTT QoS ≥ 1) and not yet seen acknowledged. It outlives the peer's routes: after
// a reconnect, everything unacknowledged is sent again, and the peer drops what it
// already had. Source 001's retransmission of publications a failed forward missed.
type outSession struct {
	mu      sync.Mutex
	next    uint64
	unacked []kept
	bytes   int
	dropped uint64 // let go over the limits, oldest first
	// held: some kept message was not queued (route excluded or full); re-admission
	// sends everything unacknowledged again, and the peer drops what it had.
	held bool
}

// kept is one forwarded message, as encoded on the route.
type kept struct {
	seq   uint64
	frame []byte
}

// forward encodes m with a new sequence number onto r's queue and keeps it; while
// r is excluded it is only kept, and sent when r is re-admitted. It holds the
// session's lock while queueing so that sequence numbers reach the route in order.
func (s *outSession) forward(r *Route, m *broker.Message, attrs uint8, queues []string) bool {
	q := &r.q
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	seq := s.next
	frame := wire.AppendRouteMsg(make([]byte, 0, wire.RouteMsgLen(seq, m.Subject, m.Route, m.Reply, queues, m.Header, m.Payload)),
		seq, attrs, m.Subject, m.Route, m.Reply, queues, m.Header, m.Payload)
	s.unacked = append(s.unacked, kept{seq: seq, frame: frame})
	s.bytes += len(frame)
	for len(s.unacked) > maxUnackedMsgs || s.bytes > maxUnackedBytes {
		s.bytes -= len(s.unacked[0].frame)
		s.unacked[0] = kept{}
		s.unacked = s.unacked[1:]
		s.dropped++
	}
	if r.excluded.Load() {
		s.held = true
		return true
	}
	b, ok := q.Reserve(len(frame))
	if !ok {
		s.held = true // kept: sent when the route recovers or comes back
		return true
	}
	q.Commit(append(b, frame...), len(m.Payload))
	return true
}

// acked forgets what the peer acknowledged (cumulatively up to seq).
func (s *outSession) acked(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.unacked) && s.unacked[i].seq <= seq {
		s.bytes -= len(s.unacked[i].frame)
		s.unacked[i] = kept{}
		i++
	}
	s.unacked = s.unacked[i:]
}

// resend queues everything unacknowledged on a new route, in order.
func (s *outSession) resend(q *outbound.Queue) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queueAllLocked(q)
	return len(s.unacked)
}

// queueAllLocked queues every unacknowledged message on q; s.mu is held.
func (s *outSession) queueAllLocked(q *outbound.Queue) {
	s.held = false
	for _, k := range s.unacked {
		q.Append(func(b []byte) []byte { return append(b, k.frame...) })
	}
}

// readmit ends r's exclusion, first sending what was held back, under the
// session's lock so that no newer message overtakes it.
func (s *outSession) readmit(r *Route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.queueAllLocked(&r.q)
	}
	r.excluded.Store(false)
	r.stalled.Store(false)
	r.q.Flush()
}

func (s *outSession) pending() (msgs int, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unacked), s.dropped
}

// inSession is what this node received with sequence numbers from one peer process
// (its node id): the highest sequence delivered, so that a re-sent message is
// delivered once.
type inSession struct {
	mu   sync.Mutex
	last uint64
}

// admit reports whether seq is new, and records it.
func (s *inSession) admit(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.last {
		return false
	}
	s.last = seq
	return true
}

func (s *inSession) highest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
