package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/streamapi"
)

// apiClient makes stream API requests ("$TERN.API.>") through the broker, as any
// client does, and waits for their answers on an inbox of its own. Going through
// the broker rather than calling the stream engine is what lets any node of a
// cluster make them: the stream's leader answers.
type apiClient struct {
	b       *broker.Broker
	prefix  []byte // "_INBOX.kafka-api-<random>."
	sub     *broker.Subscription
	timeout time.Duration

	subOnce sync.Once
	subErr  error

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan []byte
}

// apiTimeout bounds one stream API request.
const apiTimeout = 10 * time.Second

// errNoResponders: nobody serves the stream API (streams are off, or closing).
var errNoResponders = errors.New("no stream API responder")

func newAPIClient(b *broker.Broker) *apiClient {
	var r [8]byte
	_, _ = rand.Read(r[:])
	a := &apiClient{b: b, prefix: []byte("_INBOX.kafka-api-" + hex.EncodeToString(r[:]) + "."), timeout: apiTimeout,
		waiting: make(map[uint64]chan []byte)}
	a.sub = &broker.Subscription{Sink: a, Subject: string(a.prefix) + "*"}
	return a
}

// seekDeadline is the NotAfter of a seek sent now: when this node stops waiting
// for its answer. A seek that reaches its consumer later is refused rather than
// applied after this node answered its commit with an error and the client
// committed again. Node clocks apart by d shift that by d: a consumer's node
// whose clock runs d ahead refuses seeks that took longer than the wait less d
// to get there, one d behind applies a seek up to d after this node gave up.
func (a *apiClient) seekDeadline() time.Time {
	return time.Now().Add(a.timeout)
}

func (a *apiClient) close() {
	a.subOnce.Do(func() { a.subErr = net.ErrClosed })
	if a.subErr == nil {
		_ = a.b.Unsubscribe(a.sub)
	}
}

// apiRequest sends body (JSON; nil for none) to subject and decodes the answer's
// value. An error answer is returned as *streamapi.APIError.
func apiRequest[T any](a *apiClient, subject string, body any) (*T, error) {
	return apiAnswer[T](a.send(subject, body))
}

// apiCall is a request sent and not yet answered: apiAnswer waits for it. Sending
// apart from waiting lets a caller send requests in an order it holds a lock for.
type apiCall struct {
	a       *apiClient
	subject string
	id      uint64
	ch      chan []byte
	err     error // not sent
}

// send publishes a request; its answer is apiAnswer's.
func (a *apiClient) send(subject string, body any) *apiCall {
	a.subOnce.Do(func() { a.subErr = a.b.Subscribe(a.sub) })
	if a.subErr != nil {
		return &apiCall{err: fmt.Errorf("stream api inbox: %w", a.subErr)}
	}
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return &apiCall{err: fmt.Errorf("%s: %w", subject, err)}
		}
	}
	call := &apiCall{a: a, subject: subject, ch: make(chan []byte, 1)}
	a.mu.Lock()
	a.next++
	call.id = a.next
	a.waiting[call.id] = call.ch
	a.mu.Unlock()
	reply := strconv.AppendUint(bytes.Clone(a.prefix), call.id, 10)
	var batch broker.Batch
	n := a.b.Publish(&batch, &broker.Message{Subject: []byte(subject), Reply: reply, Payload: data})
	batch.Flush()
	if n == 0 {
		call.forget()
		call.err = fmt.Errorf("%s: %w", subject, errNoResponders)
	}
	return call
}

func (c *apiCall) forget() {
	c.a.mu.Lock()
	delete(c.a.waiting, c.id)
	c.a.mu.Unlock()
}

// apiAnswer waits for a request's answer and decodes its value.
func apiAnswer[T any](c *apiCall) (*T, error) {
	if c.err != nil {
		return nil, c.err
	}
	defer c.forget()
	timer := time.NewTimer(c.a.timeout)
	defer timer.Stop()
	var answer []byte
	select {
	case answer = <-c.ch:
	case <-timer.C:
		return nil, fmt.Errorf("%s: no answer within %v", c.subject, c.a.timeout)
	}
	var resp streamapi.Response[T]
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("%s: bad answer: %w", c.subject, err)
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.Value == nil {
		return nil, fmt.Errorf("%s: empty answer", c.subject)
	}
	return resp.Value, nil
}

// Deliver takes one answer.
func (a *apiClient) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	rest, ok := bytes.CutPrefix(m.Subject, a.prefix)
	if !ok {
		return true
	}
	id, err := strconv.ParseUint(string(rest), 10, 64)
	if err != nil {
		return true
	}
	a.mu.Lock()
	ch := a.waiting[id]
	delete(a.waiting, id)
	a.mu.Unlock()
	if ch != nil {
		ch <- bytes.Clone(m.Payload)
	}
	return true
}

// Flush implements broker.Sink; Deliver did the work.
func (a *apiClient) Flush() {}

// apiCode is the stream API error code of err, 0 when it is not an API error.
func apiCode(err error) int {
	var ae *streamapi.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}
