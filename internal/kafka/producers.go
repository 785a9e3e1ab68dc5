package kafka

import (
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Idempotent producers. InitProducerID hands out a producer id; each batch a
// producer sends carries that id, an epoch and the sequence of its first record,
// counted per partition. Kafka's rules, as its brokers apply them:
//
//   - a batch equal to one of the last five of its partition (same epoch, first and
//     last sequence) is a retry: it is answered with the first one's offset and not
//     stored again (Kafka answers success, not DUPLICATE_SEQUENCE_NUMBER);
//   - otherwise its first sequence must follow the last one stored, or be 0 for a new
//     epoch: else OUT_OF_ORDER_SEQUENCE_NUMBER;
//   - an epoch older than the producer's latest is INVALID_PRODUCER_EPOCH;
//   - a producer or partition of which nothing is known (the server restarted, or
//     the producer was forgotten) is taken at any sequence, as Kafka takes one whose
//     state retention removed.
//
// That state lives in memory, on the node the producer talks to. What holds across
// restarts, and across nodes when a cluster's partition leader moves, is in the
// stream: every record of an idempotent producer is published with the message id
// "kafka:<producer id>:<epoch>:<partition>#<sequence>" (the Tern-Msg-Id header), a
// sequence (streamapi.SequenceMark). The stream's duplicate window (2 minutes by
// default) drops a record that comes again, stores a batch's records only right
// after one another, and takes a batch's first record only after the sequence
// before it, which it names (Tern-Expected-Last-Msg-Id: strictly behind a batch in
// flight, else "~", if the stream still knows the producer). So a batch is stored
// whole or not at all, and in order, however late a copy of it arrives.

const (
	keepBatches  = 5 // as Kafka's max.in.flight for idempotence
	producerIdle = 24 * time.Hour
)

type producers struct {
	mu   sync.Mutex
	next int64
	byID map[int64]*producer
}

type producer struct {
	epoch int16
	used  time.Time
	parts map[partKey]*seqState
}

type partKey struct {
	topic string
	part  int32
}

// seqState is what is known of one producer's batches to one partition.
type seqState struct {
	epoch   int16
	lastSeq int32
	batches [keepBatches]batchMeta
	n       int // batches recorded, up to keepBatches
	at      int // where the next one goes
	// Batches published and not answered yet (requests in flight), and the
	// epoch and last sequence of the latest of them.
	pending      int
	pendingEpoch int16
	pendingLast  int32
}

type batchMeta struct {
	epoch       int16
	first, last int32
	base        int64
}

func newProducers() *producers {
	// Ids that no earlier run of this server handed out, so that message ids made
	// from them are new within the streams' duplicate windows.
	return &producers{next: time.Now().UnixMicro(), byID: make(map[int64]*producer)}
}

// onNode makes the ids handed out from now on carry the broker id of this node (17
// bits of it) above a 46-bit count, so that nodes of a cluster never hand out the
// same id: a producer's message ids must be its own on every node.
func (p *producers) onNode(broker int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	const countBits = 46
	p.next = int64(broker&(1<<17-1))<<countBits | time.Now().UnixMicro()&(1<<countBits-1)
}

// init hands out a new producer id with epoch 0.
func (p *producers) init(now time.Time) (int64, int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, pr := range p.byID {
		if now.Sub(pr.used) > producerIdle {
			delete(p.byID, id)
		}
	}
	p.next++
	p.byID[p.next] = &producer{used: now, parts: make(map[partKey]*seqState)}
	return p.next, 0
}

// check applies the sequence rules to a batch of records first..last. A duplicate
// returns its first offset (dup true); an error code refuses the batch. A batch
// that follows one still in flight (published, not yet answered: the producer's
// requests are pipelined) returns that one's last sequence as after: it must
// be stored only if that one was (streamapi.HeaderExpectedLastMsgID).
func (p *producers) check(id int64, epoch int16, k partKey, first, last int32) (base int64, dup bool, after int32, hasAfter bool, code int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.byID[id]
	if pr == nil {
		return 0, false, 0, false, 0
	}
	if epoch < pr.epoch {
		return 0, false, 0, false, kerr.InvalidProducerEpoch.Code
	}
	st := pr.parts[k]
	if st == nil {
		return 0, false, 0, false, 0
	}
	for i := 0; i < st.n; i++ {
		if b := st.batches[i]; b.epoch == epoch && b.first == first && b.last == last {
			return b.base, true, 0, false, 0
		}
	}
	if st.pending > 0 && epoch == st.pendingEpoch {
		if first != nextSeq(st.pendingLast, 1) {
			return 0, false, 0, false, kerr.OutOfOrderSequenceNumber.Code
		}
		return 0, false, st.pendingLast, true, 0
	}
	if st.n == 0 {
		return 0, false, 0, false, 0 // only batches that failed: nothing is known
	}
	if epoch != st.epoch {
		if first != 0 {
			return 0, false, 0, false, kerr.OutOfOrderSequenceNumber.Code
		}
		return 0, false, 0, false, 0
	}
	if first != nextSeq(st.lastSeq, 1) {
		return 0, false, 0, false, kerr.OutOfOrderSequenceNumber.Code
	}
	return 0, false, 0, false, 0
}

// begin records a batch check accepted as in flight: published, its answer to
// come (finish).
func (p *producers) begin(id int64, epoch int16, k partKey, last int32, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stateLocked(id, epoch, k, now)
	st.pending++
	st.pendingEpoch, st.pendingLast = epoch, last
}

// abort takes back a batch begun but never published.
func (p *producers) abort(id int64, epoch int16, k partKey, now time.Time) {
	p.finish(id, epoch, k, 0, 0, 0, false, now)
}

// finish records the outcome of a batch begun: stored (ok) with its first record
// at offset base, or not. After one that failed, the next one expected is the
// one after the last stored again: the batches in flight behind it fail in the
// stream (they name it as the last one stored), and the producer sends them
// again.
func (p *producers) finish(id int64, epoch int16, k partKey, first, last int32, base int64, ok bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stateLocked(id, epoch, k, now)
	if st.pending > 0 {
		st.pending--
	}
	if !ok {
		st.pendingEpoch, st.pendingLast = st.epoch, st.lastSeq
		return
	}
	if epoch != st.epoch {
		st.n, st.at = 0, 0
	}
	st.epoch, st.lastSeq = epoch, last
	st.batches[st.at] = batchMeta{epoch: epoch, first: first, last: last, base: base}
	st.at = (st.at + 1) % keepBatches
	st.n = min(st.n+1, keepBatches)
}

// stateLocked returns what is known of producer id's batches to k, made if none.
func (p *producers) stateLocked(id int64, epoch int16, k partKey, now time.Time) *seqState {
	pr := p.byID[id]
	if pr == nil {
		// Not handed out by this run: remember it from now on.
		pr = &producer{epoch: epoch, parts: make(map[partKey]*seqState)}
		p.byID[id] = pr
	}
	pr.used = now
	pr.epoch = max(pr.epoch, epoch)
	st := pr.parts[k]
	if st == nil {
		st = &seqState{epoch: epoch, lastSeq: -1}
		pr.parts[k] = st
	}
	return st
}

// nextSeq is seq advanced by n, wrapping past the largest int32 to 0 as Kafka's
// sequences do.
func nextSeq(seq int32, n int64) int32 {
	return int32((int64(seq) + n) % (math.MaxInt32 + 1))
}

func (c *conn) initProducerID(req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.Version = req.Version
	if req.TransactionalID != nil {
		// Transactions come later: a transactional producer learns now that this
		// server does not serve them.
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = c.s.prods.init(time.Now())
	return resp
}
