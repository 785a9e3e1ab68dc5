package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
)

// replyPrefix starts the subjects a node's requests over the bus are answered on:
// "$TERN.SYS.REPLY.<node>.<n>". They are interest like any subscription, so an
// answer finds its way back from whichever node gives it.
const replyPrefix = "$TERN.SYS.REPLY."

// ErrNoResponders is Request's error when nothing subscribes to the subject.
var ErrNoResponders = errors.New("cluster: no responders")

// errRequestTimeout is Request's error when no answer came in time.
var errRequestTimeout = errors.New("cluster: request got no answer")

// requester sends the node's requests over the bus and hands each answer to its
// caller.
type requester struct {
	b     *broker.Broker
	inbox string // replyPrefix + node name + "."
	sub   *broker.Subscription

	mu    sync.Mutex
	seq   uint64
	calls map[string]chan []byte
}

func newRequester(b *broker.Broker, node string) (*requester, error) {
	r := &requester{b: b, inbox: replyPrefix + node + ".", calls: map[string]chan []byte{}}
	r.sub = &broker.Subscription{Sink: r, Subject: r.inbox + "*"}
	if err := b.Subscribe(r.sub); err != nil {
		return nil, fmt.Errorf("cluster: reply subscription: %w", err)
	}
	return r, nil
}

func (r *requester) close() { _ = r.b.Unsubscribe(r.sub) }

// Request publishes payload to subject and returns the first answer, waiting at
// most limit (or until ctx ends).
func (n *Node) Request(ctx context.Context, subject string, payload []byte, limit time.Duration) ([]byte, error) {
	if n.rpc == nil {
		return nil, ErrNoMetaGroup
	}
	return n.rpc.request(ctx, subject, payload, limit)
}

func (r *requester) request(ctx context.Context, subject string, payload []byte, limit time.Duration) ([]byte, error) {
	r.mu.Lock()
	r.seq++
	token := strconv.FormatUint(r.seq, 10)
	ch := make(chan []byte, 1)
	r.calls[token] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.calls, token)
		r.mu.Unlock()
	}()
	var p broker.Batch
	if r.b.Publish(&p, &broker.Message{Subject: []byte(subject), Reply: []byte(r.inbox + token), Payload: payload}) == 0 {
		p.Flush()
		return nil, fmt.Errorf("%w on %s", ErrNoResponders, subject)
	}
	p.Flush()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case b := <-ch:
		return b, nil
	case <-t.C:
		return nil, fmt.Errorf("%w on %s within %v", errRequestTimeout, subject, limit)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *requester) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	token := string(m.Subject[len(r.inbox):])
	r.mu.Lock()
	ch := r.calls[token]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- append([]byte(nil), m.Payload...):
		default:
		}
	}
	return true
}

func (*requester) Flush() {}
