package tern

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/wire"
)

// ErrNoMessages: a no-wait fetch found nothing to deliver.
var ErrNoMessages = errors.New("tern: no messages")

// MsgMetadata is what a message delivered by a consumer says about itself.
type MsgMetadata = streamapi.AckMeta

// Metadata parses the stream, sequence and delivery count of a consumer's message.
func (m *Msg) Metadata() (*MsgMetadata, error) {
	ref, err := streamapi.ParseAckSubject([]byte(m.Reply))
	if err != nil {
		return nil, ErrNotStreamMsg
	}
	meta := ref.Meta()
	return &meta, nil
}

func (m *Msg) sendAck(body string) error {
	if m.Sub == nil {
		return ErrMsgNotBound
	}
	if !strings.HasPrefix(m.Reply, streamapi.AckPrefix) {
		return ErrNotStreamMsg
	}
	var data []byte
	if body != "" {
		data = []byte(body)
	}
	return m.Sub.conn.Publish(m.Reply, data)
}

// Ack acknowledges a message delivered by a consumer.
func (m *Msg) Ack() error { return m.sendAck("") }

// AckSync acknowledges and waits until the server has applied the ack and written
// it to the consumer's journal. Without a deadline in ctx it waits at most the
// APITimeout of the Streams that fetched the message (5 s for a push consumer's).
// If the server could not write it (disk full), it returns an *APIError with code
// 503: the ack holds until a restart, and calling AckSync again retries the write.
func (m *Msg) AckSync(ctx context.Context) error {
	if m.Sub == nil {
		return ErrMsgNotBound
	}
	if !strings.HasPrefix(m.Reply, streamapi.AckPrefix) {
		return ErrNotStreamMsg
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(m.apiTimeout, defaultAPITimeout))
		defer cancel()
	}
	r, err := m.Sub.conn.Request(ctx, m.Reply, []byte(streamapi.AckBody))
	if err != nil {
		return err
	}
	if len(r.Data) == 0 {
		return nil
	}
	// The server applied the ack but could not store it: a restart would deliver
	// the message again. Acking again retries the write.
	var resp streamapi.Response[struct{}]
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return fmt.Errorf("ack %s: bad confirmation: %w", m.Reply, err)
	}
	if resp.Error != nil {
		return apiErr(resp.Error)
	}
	return nil
}

// Nak asks for the message to be delivered again at once.
func (m *Msg) Nak() error { return m.sendAck(streamapi.NakBody) }

// NakWithDelay asks for the message to be delivered again after d.
func (m *Msg) NakWithDelay(d time.Duration) error {
	return m.sendAck(streamapi.NakBody + " " + d.String())
}

// InProgress restarts the message's ack wait: the work is still going on.
func (m *Msg) InProgress() error { return m.sendAck(streamapi.InProgressBody) }

// Term stops redelivery of the message; the server sends it to the consumer's
// dead-letter subject with the reason.
func (m *Msg) Term(reason string) error {
	if reason == "" {
		return m.sendAck(streamapi.TermBody)
	}
	return m.sendAck(streamapi.TermBody + " " + reason)
}

// Pull fetches messages from a pull consumer.
type Pull struct {
	s                        *Streams
	stream, consumer, member string

	mu       sync.Mutex // one Fetch at a time
	sub      *Subscription
	inbox    string // the subscription is inbox + ".*"; each fetch replies to inbox.<n>
	fetches  uint64
	assigned []int
}

// PullOpt changes one setting of a Pull.
type PullOpt func(*Pull)

// Member makes the puller a member of the consumer's group: the server assigns it a
// share of the stream's partitions and serves its fetches only from those.
func Member(id string) PullOpt { return func(p *Pull) { p.member = id } }

// Pull returns a handle to fetch from a pull consumer; it makes no round trip.
func (s *Streams) Pull(stream, consumer string, opts ...PullOpt) *Pull {
	p := &Pull{s: s, stream: stream, consumer: consumer}
	for _, o := range opts {
		o(p)
	}
	return p
}

// FetchOpt changes one setting of a Fetch.
type FetchOpt func(*streamapi.PullRequest, *time.Duration)

// FetchMaxWait bounds how long Fetch waits for its batch to fill (default: the
// context's deadline, else 5 s).
func FetchMaxWait(d time.Duration) FetchOpt {
	return func(_ *streamapi.PullRequest, w *time.Duration) { *w = d }
}

// FetchNoWait returns at once with whatever is ready (ErrNoMessages if nothing).
func FetchNoWait() FetchOpt {
	return func(r *streamapi.PullRequest, _ *time.Duration) { r.NoWait = true }
}

// FetchMaxBytes bounds the payload bytes of one fetch.
func FetchMaxBytes(n int) FetchOpt {
	return func(r *streamapi.PullRequest, _ *time.Duration) { r.MaxBytes = n }
}

// Assigned reports the partitions the server assigned to this member at its last
// status message (consumer groups).
func (p *Pull) Assigned() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.assigned...)
}

func (p *Pull) ensureSub() error {
	if p.sub != nil {
		return nil
	}
	inbox := NewInbox()
	sub, err := p.s.c.SubscribeSync(inbox + ".*")
	if err != nil {
		return err
	}
	p.sub, p.inbox = sub, inbox
	return nil
}

// Fetch asks for up to batch messages and waits until they have arrived, the server
// says no more will come in time, or the wait ends. It returns what arrived; with
// none it returns ErrTimeout (or ErrNoMessages for FetchNoWait).
func (p *Pull) Fetch(ctx context.Context, batch int, opts ...FetchOpt) ([]*Msg, error) {
	out := make([]*Msg, 0, max(batch, 1))
	_, err := p.FetchEach(ctx, batch, func(m *Msg) { out = append(out, m) }, opts...)
	if len(out) > 0 {
		return out, nil
	}
	return nil, err
}

// FetchEach is Fetch that hands each message to fn as soon as it arrives, on the
// calling goroutine, instead of returning the batch at its end: a worker starts on the
// first message while the rest are still on their way. It returns how many messages
// fn was given and, when none was, the error Fetch would return.
func (p *Pull) FetchEach(ctx context.Context, batch int, fn func(*Msg), opts ...FetchOpt) (int, error) {
	if batch <= 0 {
		batch = 1
	}
	req := streamapi.PullRequest{Batch: batch, Member: p.member}
	wait := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	for _, o := range opts {
		o(&req, &wait)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ensureSub(); err != nil {
		return 0, err
	}
	n := 0
	// The server ends the request a little before the client gives up, so its status
	// message, not a timeout, normally ends the fetch.
	req.Expires = streamapi.Duration(max(wait-wait/10, time.Millisecond))
	body, _ := json.Marshal(req)
	// A reply subject of its own, so that the status ending an earlier request the
	// client stopped waiting for (its context ended) does not end this one. Messages
	// an earlier request still brings are taken: they await an ack all the same.
	p.fetches++
	reply := p.inbox + "." + strconv.FormatUint(p.fetches, 10)
	if err := p.s.c.PublishRequest(streamapi.ConsumerNextSubject(p.stream, p.consumer), reply, body); err != nil {
		return n, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for n < batch {
		m, err := p.sub.NextMsgContext(waitCtx)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return n, cerr // the caller's context, not the fetch wait, ended
			}
			if waitCtx.Err() != nil {
				break
			}
			return n, err
		}
		if status := statusOf(m); status != "" {
			if m.Subject != reply {
				continue // the end of an earlier request
			}
			if err := p.status(m, status); err != nil {
				return n, err
			}
			if status == streamapi.StatusNoMessages && n == 0 {
				return 0, ErrNoMessages
			}
			break
		}
		if err := pullError(m); err != nil {
			if m.Subject != reply {
				continue
			}
			return n, fmt.Errorf("fetch from %s/%s: %w", p.stream, p.consumer, err)
		}
		m.apiTimeout = p.s.timeout
		fn(m)
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("fetch from %s/%s: %w", p.stream, p.consumer, ErrTimeout)
	}
	return n, nil
}

// Next fetches one message.
func (p *Pull) Next(ctx context.Context, opts ...FetchOpt) (*Msg, error) {
	msgs, err := p.Fetch(ctx, 1, opts...)
	if err != nil {
		return nil, err
	}
	return msgs[0], nil
}

// pullError returns the API error a pull request was answered with (unknown stream
// or consumer, bad request), nil for a delivered message: deliveries always carry an
// ack subject as their reply.
func pullError(m *Msg) error {
	if strings.HasPrefix(m.Reply, streamapi.AckPrefix) || !bytes.HasPrefix(m.Data, []byte(`{"error"`)) {
		return nil
	}
	var r struct {
		Error *streamapi.APIError `json:"error"`
	}
	if json.Unmarshal(m.Data, &r) != nil || r.Error == nil {
		return nil
	}
	return apiErr(r.Error)
}

// statusOf returns the status code of a pull status message, "" for a real message.
func statusOf(m *Msg) string {
	if len(m.Data) != 0 || m.Header == nil || strings.HasPrefix(m.Reply, streamapi.AckPrefix) {
		return ""
	}
	return m.Header.Get(wire.HeaderStatus)
}

// status notes what a status message says; a conflict is an error.
func (p *Pull) status(m *Msg, status string) error {
	if a, ok := m.Header[streamapi.HeaderAssigned]; ok {
		p.assigned = p.assigned[:0]
		for _, f := range strings.Split(strings.Join(a, ","), ",") {
			if n, err := strconv.Atoi(f); err == nil {
				p.assigned = append(p.assigned, n)
			}
		}
	}
	if status == streamapi.StatusConflict {
		desc := m.Header.Get(wire.HeaderDescription)
		if strings.Contains(desc, "deleted") {
			return fmt.Errorf("fetch from %s/%s: %s: %w", p.stream, p.consumer, desc, ErrConsumerNotFound)
		}
		return fmt.Errorf("fetch from %s/%s: %s", p.stream, p.consumer, desc)
	}
	return nil
}

// Close drops the fetch subscription.
func (p *Pull) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sub == nil {
		return nil
	}
	err := p.sub.Unsubscribe()
	p.sub = nil
	return err
}

// Consumer is a running Consume loop.
type Consumer struct {
	p      *Pull
	sub    *Subscription
	batch  int
	expiry time.Duration

	mu    sync.Mutex
	inbox string // the subscription is inbox + ".*"; request n replies to inbox.<n>
	// Outstanding requests, oldest first. A message arrives under its own
	// subject and is counted against the oldest; a status names its request.
	requests []pendingPull
	sent     uint64 // requests sent, to number the next
	due      int
	err      error
	stopped  bool
}

// pendingPull is an outstanding request of a Consume loop.
type pendingPull struct {
	reply string
	left  int
}

// Consume keeps pull requests outstanding so that messages flow continuously to
// handler, which runs on one goroutine. batch is how many messages each request asks
// for; a new request goes out when less than half a batch is due.
func (p *Pull) Consume(batch int, handler MsgHandler) (*Consumer, error) {
	if batch <= 0 {
		batch = 256
	}
	cc := &Consumer{p: p, batch: batch, expiry: 30 * time.Second, inbox: NewInbox()}
	sub, err := p.s.c.Subscribe(cc.inbox+".*", func(m *Msg) {
		if status := statusOf(m); status != "" {
			cc.onStatus(m, status)
			return
		}
		if err := pullError(m); err != nil {
			// The server refused the pull (no such stream or consumer): an end
			// of the loop, not a message for the handler.
			cc.mu.Lock()
			cc.err, cc.stopped = fmt.Errorf("consume from %s/%s: %w", p.stream, p.consumer, err), true
			cc.mu.Unlock()
			return
		}
		cc.onMsg()
		m.apiTimeout = p.s.timeout
		handler(m)
	})
	if err != nil {
		return nil, err
	}
	cc.sub = sub
	cc.mu.Lock()
	err = cc.topUp()
	cc.mu.Unlock()
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return cc, nil
}

func (cc *Consumer) topUp() error {
	for !cc.stopped && cc.due < cc.batch/2+1 {
		req := streamapi.PullRequest{Batch: cc.batch, Expires: streamapi.Duration(cc.expiry), Member: cc.p.member}
		body, _ := json.Marshal(req)
		cc.sent++
		reply := cc.inbox + "." + strconv.FormatUint(cc.sent, 10)
		if err := cc.p.s.c.PublishRequest(streamapi.ConsumerNextSubject(cc.p.stream, cc.p.consumer), reply, body); err != nil {
			cc.err = err
			return err
		}
		cc.requests = append(cc.requests, pendingPull{reply, cc.batch})
		cc.due += cc.batch
	}
	return nil
}

// onMsg counts a message against the oldest outstanding request.
func (cc *Consumer) onMsg() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if len(cc.requests) > 0 {
		cc.due--
		if cc.requests[0].left--; cc.requests[0].left == 0 {
			cc.requests = cc.requests[1:]
		}
	}
	_ = cc.topUp()
}

// onStatus ends the request a status message answers: what it still owed is no
// longer due.
func (cc *Consumer) onStatus(m *Msg, status string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if err := cc.p.status(m, status); err != nil {
		cc.err = err
		cc.stopped = true
		return
	}
	if i := slices.IndexFunc(cc.requests, func(r pendingPull) bool { return r.reply == m.Subject }); i >= 0 {
		cc.due -= cc.requests[i].left
		cc.requests = slices.Delete(cc.requests, i, i+1)
	}
	_ = cc.topUp()
}

// Err reports what stopped the loop, if anything did.
func (cc *Consumer) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

// Stop ends the loop; messages already delivered but not acknowledged are delivered
// again after their ack wait.
func (cc *Consumer) Stop() error {
	cc.mu.Lock()
	cc.stopped = true
	cc.mu.Unlock()
	return cc.sub.Unsubscribe()
}
