// Package services carries requests between accounts: a client of one account
// calls a service (request subjects whose responders answer on the request's
// reply subject) that another account exports. The request reaches the
// exporter with a reply subject of the exporter's own, "_R_.<node>.<id>" in its
// names, which the Router maps back to the requester's reply subject when the
// response comes: the exporter's responders never see, nor can publish into,
// the importer's subjects. The node part sends a response that a responder on
// another node of a cluster publishes back to the node that holds the mapping.
package services

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
)

// ResponsePrefix starts the reply subject a service's responders see.
const ResponsePrefix = "_R_."

// Router maps the reply subjects of cross-account requests and forwards the
// responses. Its subscriptions are made by the first call.
type Router struct {
	b    *broker.Broker
	node string // "<random>.": this node's part of every reply subject it hands out

	subOnce sync.Once
	subErr  error
	subs    []*broker.Subscription

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*pendingReply
	order   []uint64 // ids in the order they were handed out, for expiry
	head    int
	batch   broker.Batch // publishes the responses, under mu
}

type pendingReply struct {
	reply   []byte // the requester's reply subject, inside the server
	stream  bool
	expires int64 // unix ns
}

// New returns a router publishing through b.
func New(b *broker.Broker) *Router {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return &Router{b: b, node: hex.EncodeToString(r[:]) + ".", pending: map[uint64]*pendingReply{}}
}

// subscribe takes the responses to this node's calls, in the global account
// and every other.
func (r *Router) subscribe() error {
	r.subOnce.Do(func() {
		for _, f := range []string{ResponsePrefix + r.node + "*", auth.AccountPrefix + "*." + ResponsePrefix + r.node + "*"} {
			sub := &broker.Subscription{Sink: r, Subject: f}
			if r.subErr = r.b.Subscribe(sub); r.subErr != nil {
				return
			}
			r.subs = append(r.subs, sub)
		}
	})
	return r.subErr
}

// Close removes the router's subscriptions; calls made after it fail.
func (r *Router) Close() {
	r.subOnce.Do(func() { r.subErr = errClosed })
	for _, sub := range r.subs {
		_ = r.b.Unsubscribe(sub)
	}
}

var errClosed = errors.New("services: router closed")

// Call records a request of call whose requester waits on reply (the server's
// name of it) and appends to dst the reply subject the request goes to the
// exporter with.
func (r *Router) Call(dst []byte, call auth.ServiceCall, reply []byte, now time.Time) ([]byte, error) {
	if err := r.subscribe(); err != nil {
		return dst, err
	}
	r.mu.Lock()
	r.expire(now.UnixNano())
	r.next++
	id := r.next
	r.pending[id] = &pendingReply{reply: bytes.Clone(reply), stream: call.Response.Stream,
		expires: now.Add(call.Response.Threshold).UnixNano()}
	r.order = append(r.order, id)
	r.mu.Unlock()
	dst = append(append(append(dst, call.Exporter.Prefix()...), ResponsePrefix...), r.node...)
	return strconv.AppendUint(dst, id, 10), nil
}

// Cancel forgets the call whose exporter's reply subject is reply: its request
// reached no responder.
func (r *Router) Cancel(reply []byte) {
	id, ok := r.id(reply)
	if !ok {
		return
	}
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
}

// Pending is the number of calls whose replies are mapped.
func (r *Router) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// id reads the call id at the end of a reply subject this router handed out.
func (r *Router) id(subject []byte) (uint64, bool) {
	i := bytes.LastIndexByte(subject, '.')
	if i < 0 {
		return 0, false
	}
	id, err := strconv.ParseUint(string(subject[i+1:]), 10, 64)
	return id, err == nil
}

// expire forgets the calls past their threshold.
func (r *Router) expire(now int64) {
	for r.head < len(r.order) {
		id := r.order[r.head]
		if p := r.pending[id]; p != nil && p.expires > now {
			break
		}
		delete(r.pending, id)
		r.order[r.head] = 0
		r.head++
	}
	if r.head > 1024 && r.head*2 > len(r.order) {
		n := copy(r.order, r.order[r.head:])
		r.order, r.head = r.order[:n], 0
	}
}

// Deliver implements broker.Sink: a response, forwarded to its requester.
func (r *Router) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	id, ok := r.id(m.Subject)
	if !ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[id]
	if p == nil || p.expires <= time.Now().UnixNano() {
		return true // answered already, or too late
	}
	if !p.stream {
		delete(r.pending, id)
	}
	r.b.Publish(&r.batch, &broker.Message{Subject: p.reply, Header: m.Header, Payload: m.Payload})
	r.batch.Flush()
	return true
}

// Flush completes broker.Sink: each response is forwarded as it comes.
func (r *Router) Flush() {}
