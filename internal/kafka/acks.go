package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"sync"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// inbox collects the stream's answers to the records Produce publishes. The records
// of one partition of a request are published with the reply subject
// "<prefix><wait>.<partition index>": the stream's writer publishes each record's
// ack there after the commit (streamapi.AppendPubAck or AppendPubErr), as it
// answers any stream publisher, in the order the records came, and the inbox hands
// them, in that order, to the records of the produce request waiting for them. One
// subject per partition rather than per record keeps the broker's subject cache
// of use: it matches each reply subject once per request, not once per record.
// A producer of an account other than the global one gets its acks in its
// account's subject space ("$A.<account>._INBOX.kafka-..."), as its native
// clients get their replies: a second subscription takes those.
type inbox struct {
	b       *broker.Broker
	prefix  []byte // "_INBOX.kafka-<random>."
	sub     *broker.Subscription
	acctSub *broker.Subscription // every account's "$A.*.<prefix>*.*"

	// The subscription is made by the first produce that waits for acks, so a
	// server no Kafka producer uses has none.
	subOnce sync.Once
	subErr  error

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*ackWait
}

// ackWait is one produce request's records waiting for their acks. A stream on
// this node answers it in process (broker.Acker, the tag being the partition
// index); a stream on another node answers on the reply subject.
type ackWait struct {
	in      *inbox
	id      uint64
	results []ackResult
	left    int
	done    chan struct{}
	// parts are the record ranges of the request's partitions; next, per
	// partition, the record the next ack is for.
	parts []ackRange
}

// ackRange is one partition's records in ackWait.results.
type ackRange struct{ first, n, next int }

// ackResult is what the stream answered for one record.
type ackResult struct {
	seq  uint64
	err  string
	code int // a streamapi error code; 0 when stored
	got  bool
	dup  bool
}

func newInbox(b *broker.Broker) (*inbox, error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	in := &inbox{b: b, prefix: []byte("_INBOX.kafka-" + hex.EncodeToString(r[:]) + "."), waiting: make(map[uint64]*ackWait)}
	in.sub = &broker.Subscription{Sink: in, Subject: string(in.prefix) + "*.*"}
	in.acctSub = &broker.Subscription{Sink: in, Subject: auth.AccountPrefix + "*." + string(in.prefix) + "*.*"}
	return in, nil
}

// subscribe makes the inbox's subscription once.
func (in *inbox) subscribe() error {
	in.subOnce.Do(func() {
		if in.subErr = in.b.Subscribe(in.sub); in.subErr == nil {
			if in.subErr = in.b.Subscribe(in.acctSub); in.subErr != nil {
				_ = in.b.Unsubscribe(in.sub)
			}
		}
	})
	return in.subErr
}

func (in *inbox) close() {
	in.subOnce.Do(func() { in.subErr = net.ErrClosed }) // none made after this
	if in.subErr == nil {
		_ = in.b.Unsubscribe(in.sub)
		_ = in.b.Unsubscribe(in.acctSub)
	}
}

// open starts waiting for the acks of n records, whose partitions (in the order of
// the reply subjects' partition indexes) hold the ranges given. The results go
// into results' array when it is large enough: a cancelled wait's results, which
// no ack writes any more.
func (in *inbox) open(n int, parts []ackRange, results []ackResult) *ackWait {
	if cap(results) < n {
		results = make([]ackResult, n)
	} else {
		results = results[:n]
		clear(results)
	}
	in.mu.Lock()
	in.next++
	w := &ackWait{in: in, id: in.next, results: results, left: n, done: make(chan struct{}), parts: parts}
	for i := range w.parts {
		w.parts[i].next = w.parts[i].first
	}
	if n == 0 {
		close(w.done)
	} else {
		in.waiting[w.id] = w
	}
	in.mu.Unlock()
	return w
}

// cancel stops waiting: acks still to come are dropped. The results already in
// may be read once cancel returns.
func (in *inbox) cancel(w *ackWait) {
	in.mu.Lock()
	delete(in.waiting, w.id)
	in.mu.Unlock()
}

// appendReply appends the reply subject of the records of partition part of w,
// in the account whose subject prefix is acct ("" for the global account).
func (in *inbox) appendReply(dst []byte, acct string, w *ackWait, part int) []byte {
	dst = append(append(dst, acct...), in.prefix...)
	dst = strconv.AppendUint(dst, w.id, 10)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, int64(part), 10)
}

// fail records an answer the stream will never give (record i was not published:
// the acks of its partition's other records pass it by). It is called before the
// partition's next record is published, so before any ack meant for a later one.
func (in *inbox) fail(w *ackWait, i, code int, err string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.settleLocked(w, i, ackResult{got: true, code: code, err: err})
}

// StreamAck takes the stream's answer to n records of partition index tag.
func (w *ackWait) StreamAck(tag uint64, _ int, seq uint64, n int, dup bool, code int, err string) {
	r := ackResult{got: true, seq: seq, dup: dup, code: code, err: err}
	w.in.settle(w.id, int(tag), r, n)
}

// settle hands an ack to the next n records of partition part of wait id: the
// ack of a range (n > 1) is the ack of each, at consecutive sequences.
func (in *inbox) settle(id uint64, part int, r ackResult, n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	w := in.waiting[id]
	if w == nil || part < 0 || part >= len(w.parts) {
		return
	}
	pr := &w.parts[part]
	for range n {
		for pr.next < pr.first+pr.n && w.results[pr.next].got {
			pr.next++
		}
		if pr.next >= pr.first+pr.n {
			return // more acks than records: not this request's
		}
		in.settleLocked(w, pr.next, r)
		if in.waiting[w.id] != w {
			return // all in
		}
		r.seq++
	}
}

func (in *inbox) settleLocked(w *ackWait, i int, r ackResult) {
	if in.waiting[w.id] != w || i < 0 || i >= len(w.results) || w.results[i].got {
		return
	}
	w.results[i] = r
	if w.left--; w.left == 0 {
		delete(in.waiting, w.id)
		close(w.done)
	}
}

// Deliver takes one ack.
func (in *inbox) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	subj := m.Subject
	if _, _, own, ok := stream.CutAccount(subj); ok {
		subj = own
	}
	rest, ok := bytes.CutPrefix(subj, in.prefix)
	if !ok {
		return true
	}
	ids, parts, ok := bytes.Cut(rest, []byte{'.'})
	if !ok {
		return true
	}
	id, err1 := strconv.ParseUint(string(ids), 10, 64)
	part, err2 := strconv.Atoi(string(parts))
	if err1 != nil || err2 != nil {
		return true
	}
	r := ackResult{got: true}
	_, seq, dup, err := streamapi.ScanPubAck(m.Payload)
	if err != nil {
		r.code, r.err = streamapi.CodeInternal, err.Error()
		if ae, ok := err.(*streamapi.APIError); ok {
			r.code, r.err = ae.Code, ae.Description
		}
	} else {
		r.seq, r.dup = seq, dup
	}
	in.settle(id, part, r, 1)
	return true
}

// Flush implements broker.Sink; Deliver did the work.
func (in *inbox) Flush() {}
