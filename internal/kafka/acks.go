package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"sync"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/streamapi"
)

// inbox collects the stream's answers to the records Produce publishes. Each record
// is published with the reply subject "<prefix><wait>.<index>": the stream's writer
// publishes its ack there after the commit (streamapi.AppendPubAck or
// AppendPubErr), as it answers any stream publisher, and the inbox hands it to the
// produce request waiting for it.
type inbox struct {
	b      *broker.Broker
	prefix []byte // "_INBOX.kafka-<random>."
	sub    *broker.Subscription

	// The subscription is made by the first produce that waits for acks, so a
	// server no Kafka producer uses has none.
	subOnce sync.Once
	subErr  error

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*ackWait
}

// ackWait is one produce request's records waiting for their acks.
type ackWait struct {
	id      uint64
	results []ackResult
	left    int
	done    chan struct{}
}

// ackResult is what the stream answered for one record.
type ackResult struct {
	got  bool
	part int
	seq  uint64
	dup  bool
	code int // a streamapi error code; 0 when stored
	err  string
}

func newInbox(b *broker.Broker) (*inbox, error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	in := &inbox{b: b, prefix: []byte("_INBOX.kafka-" + hex.EncodeToString(r[:]) + "."), waiting: make(map[uint64]*ackWait)}
	in.sub = &broker.Subscription{Sink: in, Subject: string(in.prefix) + "*.*"}
	return in, nil
}

// subscribe makes the inbox's subscription once.
func (in *inbox) subscribe() error {
	in.subOnce.Do(func() { in.subErr = in.b.Subscribe(in.sub) })
	return in.subErr
}

func (in *inbox) close() {
	in.subOnce.Do(func() { in.subErr = net.ErrClosed }) // none made after this
	if in.subErr == nil {
		_ = in.b.Unsubscribe(in.sub)
	}
}

// open starts waiting for n acks.
func (in *inbox) open(n int) *ackWait {
	in.mu.Lock()
	in.next++
	w := &ackWait{id: in.next, results: make([]ackResult, n), left: n, done: make(chan struct{})}
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

// appendReply appends the reply subject of record i of w.
func (in *inbox) appendReply(dst []byte, w *ackWait, i int) []byte {
	dst = append(dst, in.prefix...)
	dst = strconv.AppendUint(dst, w.id, 10)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, int64(i), 10)
}

// fail records an answer the stream will never give (the record was not
// published).
func (in *inbox) fail(w *ackWait, i, code int, err string) {
	in.settle(w.id, i, ackResult{got: true, code: code, err: err})
}

func (in *inbox) settle(id uint64, i int, r ackResult) {
	in.mu.Lock()
	defer in.mu.Unlock()
	w := in.waiting[id]
	if w == nil || i < 0 || i >= len(w.results) || w.results[i].got {
		return
	}
	w.results[i] = r
	if w.left--; w.left == 0 {
		delete(in.waiting, id)
		close(w.done)
	}
}

// Deliver takes one ack.
func (in *inbox) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	rest, ok := bytes.CutPrefix(m.Subject, in.prefix)
	if !ok {
		return true
	}
	ids, idx, ok := bytes.Cut(rest, []byte{'.'})
	if !ok {
		return true
	}
	id, err1 := strconv.ParseUint(string(ids), 10, 64)
	i, err2 := strconv.Atoi(string(idx))
	if err1 != nil || err2 != nil {
		return true
	}
	r := ackResult{got: true}
	ack, err := streamapi.ParsePubAck(m.Payload)
	if err != nil {
		r.code, r.err = streamapi.CodeInternal, err.Error()
		if ae, ok := err.(*streamapi.APIError); ok {
			r.code, r.err = ae.Code, ae.Description
		}
	} else {
		r.part, r.seq, r.dup = ack.Partition, ack.Seq, ack.Duplicate
	}
	in.settle(id, i, r)
	return true
}

// Flush implements broker.Sink; Deliver did the work.
func (in *inbox) Flush() {}
