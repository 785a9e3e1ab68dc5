package kafka

import (
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce requests in flight. A Kafka producer keeps several produce requests
// in flight on one connection (max.in.flight.requests.per.connection, 5 by
// default) and takes their answers in order. The connection's reader publishes
// each request's records as soon as it has read it and hands the wait for the
// stream's acks to the connection's answerer goroutine, which answers in
// order: the stream commits one request's records while the acks of the one
// before are on their way, instead of one request per round trip through the
// stream. Every other request waits until the produce requests before it are
// answered, so that answers keep the order of requests, as the protocol wants.
//
// An idempotent producer's batch published behind one still in flight names
// that one's last record as the last one stored (Tern-Expected-Last-Msg-Id): if
// the first fails, the stream refuses the second, which is answered
// OUT_OF_ORDER_SEQUENCE_NUMBER and sent again by the producer, so a failure never
// leaves a gap in what is stored.

// maxProduceInFlight is the most produce requests of a connection published and
// not yet answered; the reader waits for the oldest answer beyond it.
const maxProduceInFlight = 8

// inflightProduce is one produce request between its publishing and its answer,
// with the scratch space it was decoded in.
type inflightProduce struct {
	ps   produceScratch
	corr int32
	req  *kmsg.ProduceRequest
	resp *kmsg.ProduceResponse
	w    *ackWait // nil: resp is the answer already
}

// producePipe is a connection's produce requests in flight; made by its first
// produce that is answered.
type producePipe struct {
	slots int                   // inflightProduces made, up to maxProduceInFlight
	free  chan *inflightProduce // the ones not in flight
	queue chan *inflightProduce // in flight, in request order, to the answerer
	stop  chan struct{}         // closed when the connection ends: answer no more
	done  chan struct{}         // closed when the answerer has returned
}

// takeSlot returns an inflightProduce to decode a produce request into, waiting
// for the oldest answer when maxProduceInFlight are in flight.
func (c *conn) takeSlot() *inflightProduce {
	p := &c.pipe
	if p.free == nil {
		p.free = make(chan *inflightProduce, maxProduceInFlight)
		p.queue = make(chan *inflightProduce, maxProduceInFlight)
		p.stop = make(chan struct{})
		p.done = make(chan struct{})
		go c.answerProduces()
	}
	select {
	case s := <-p.free:
		return s
	default:
	}
	if p.slots < maxProduceInFlight {
		p.slots++
		return &inflightProduce{}
	}
	return <-p.free
}

// produceRequest publishes a produce request's records and queues its answer
// behind the answers of the produce requests before it.
func (c *conn) produceRequest(corr int32, req *kmsg.ProduceRequest) error {
	s := c.takeSlot()
	resp, w, err := c.produce(&s.ps, req)
	if resp == nil {
		c.pipe.release(s) // acks=0: nothing to answer
		return err
	}
	s.corr, s.req, s.resp, s.w = corr, req, resp, w
	if !c.answerInline(s) {
		c.pipe.queue <- s
	}
	return err
}

// answerInline answers a produce request from the reader when its acks are all
// in already (the stream committed it in this goroutine, as a stream this node
// leads does when it is not busy) and no answer before it is still to be queued:
// the answer then needs no hand-over to the answerer goroutine, whose wake-up
// costs more than the rest of a small request's answer. It is flushed at once,
// as the answerer would: held until the reader has worked through the requests
// behind it, it would keep a producer's window of requests in flight shut.
func (c *conn) answerInline(s *inflightProduce) bool {
	p := &c.pipe
	if len(p.free) != p.slots-1 { // an earlier answer is in the answerer's hands
		return false
	}
	if s.w != nil {
		select {
		case <-s.w.done:
		default:
			return false
		}
	}
	c.queueAnswer(s)
	c.q.Flush()
	p.release(s)
	return true
}

// queueAnswer fills the answer to s's request from its acks (all in, or the
// wait given up; no ackWait: the answer is given already, a refusal) and queues
// it.
func (c *conn) queueAnswer(s *inflightProduce) {
	if s.w != nil {
		c.s.acks.cancel(s.w)
		c.answerProduce(&s.ps, s.req, s.resp, s.w)
	}
	c.send(s.corr, s.resp)
}

// release gives back a slot whose request is answered (or needs no answer).
func (p *producePipe) release(s *inflightProduce) {
	s.ps.trim()
	s.req, s.resp, s.w = nil, nil, nil
	p.free <- s
}

// drainProduce waits until every produce request read so far is answered.
func (c *conn) drainProduce() {
	p := &c.pipe
	if p.free == nil || len(p.free) == p.slots {
		return
	}
	var held [maxProduceInFlight]*inflightProduce
	for i := 0; i < p.slots; i++ {
		held[i] = <-p.free
	}
	for i := 0; i < p.slots; i++ {
		p.free <- held[i]
	}
}

// endPipe stops the answerer, when there is one, without waiting for acks still
// to come: the connection is closing.
func (c *conn) endPipe() {
	p := &c.pipe
	if p.free == nil {
		return
	}
	close(p.stop)
	close(p.queue)
	<-p.done
}

// answerProduces answers the produce requests in flight, in order.
func (c *conn) answerProduces() {
	p := &c.pipe
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for s := range p.queue {
		if s.w != nil {
			c.waitAcks(s.req, s.w, timer, p.stop)
		}
		c.queueAnswer(s)
		if len(p.queue) == 0 {
			c.q.Flush() // once per wake-up: answers ready together share a write
		}
		p.release(s)
	}
}

// trim lets go of buffers a big request grew.
func (ps *produceScratch) trim() {
	for i, b := range ps.bufs {
		if cap(b) > keepBody {
			ps.bufs[i] = nil
		}
	}
	if cap(ps.hdr) > keepBody {
		ps.hdr = nil
	}
	if cap(ps.results) > keepBody/int(unsafe.Sizeof(ackResult{})) {
		ps.results = nil
	}
}
