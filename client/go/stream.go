package tern

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/wire"
)

// Stream API types, shared with the server (their JSON forms are in
// docs/protocol.md).
type (
	StreamConfig   = streamapi.StreamConfig
	StreamInfo     = streamapi.StreamInfo
	StreamState    = streamapi.StreamState
	StreamCluster  = streamapi.StreamCluster
	StreamReplica  = streamapi.StreamReplica
	ConsumerConfig = streamapi.ConsumerConfig
	ConsumerInfo   = streamapi.ConsumerInfo
	PartitionState = streamapi.PartitionState
	PurgeRequest   = streamapi.PurgeRequest
	StoredMsg      = streamapi.StoredMsg
	PubAck         = streamapi.PubAck
	APIError       = streamapi.APIError
	Duration       = streamapi.Duration
	Retention      = streamapi.Retention
	Compaction     = streamapi.Compaction
	DeliverPolicy  = streamapi.DeliverPolicy
	AckPolicy      = streamapi.AckPolicy
)

// Retention, deliver and ack policies.
const (
	RetainLimits          = streamapi.RetainLimits
	RetainWorkQueue       = streamapi.RetainWorkQueue
	RetainInterest        = streamapi.RetainInterest
	DeliverAll            = streamapi.DeliverAll
	DeliverNew            = streamapi.DeliverNew
	DeliverLast           = streamapi.DeliverLast
	DeliverLastPerSubject = streamapi.DeliverLastPerSubject
	DeliverByStartSeq     = streamapi.DeliverByStartSeq
	DeliverByStartTime    = streamapi.DeliverByStartTime
	AckNone               = streamapi.AckNone
	AckExplicit           = streamapi.AckExplicit
	AckAll                = streamapi.AckAll
)

// DefaultMaxLag is how old a compacted stream's head segment grows before it
// is sealed when neither Compaction.MaxLag nor StreamConfig.SegmentAge says.
const DefaultMaxLag = streamapi.DefaultMaxLag

// Header keys of the stream engine.
const (
	MsgIDHeader = streamapi.HeaderMsgID // duplicate detection
	KeyHeader   = streamapi.HeaderKey   // partition choice, a compacted stream's key
	NullHeader  = streamapi.HeaderNullValue
)

// Stream errors; API failures also carry an *APIError with the server's code.
var (
	ErrStreamNotFound   = errors.New("tern: stream not found")
	ErrConsumerNotFound = errors.New("tern: consumer not found")
	// ErrStreamUnavailable: the server has streams disabled or did not answer the API.
	ErrStreamUnavailable = errors.New("tern: stream API unavailable")
	// ErrTooManyPending: PublishAsync waited StallWait for room in its window.
	ErrTooManyPending = errors.New("tern: too many unacknowledged async publishes")
	// ErrNotStreamMsg: an ack method on a message that did not come from a consumer.
	ErrNotStreamMsg = errors.New("tern: not a stream message")
)

// Streams is the stream API of a connection: management, publish with
// acknowledgement, and consumers. Get it with Conn.Streams; it is safe for concurrent
// use.
type Streams struct {
	c         *Conn
	timeout   time.Duration
	window    int
	stallWait time.Duration
	retryFor  time.Duration // 0: publishes are not retried
	ackWait   time.Duration // one attempt's wait for its ack, with a message id and retries left

	mu       sync.Mutex
	ackSub   *Subscription
	prefix   string
	nextID   uint64
	futures  map[string]*PubAckFuture
	room     chan struct{} // signalled when a future resolves while the window was full
	idle     chan struct{} // closed when no async publish is outstanding
	sweeping bool
}

// StreamsOpt changes one setting of Conn.Streams.
type StreamsOpt func(*Streams)

// defaultAPITimeout bounds a stream API request whose context has no deadline.
const defaultAPITimeout = 5 * time.Second

// APITimeout bounds each management request, synchronous publish and AckSync
// (default 5 s) whose context has no deadline of its own.
func APITimeout(d time.Duration) StreamsOpt { return func(s *Streams) { s.timeout = d } }

// PublishAsyncMaxPending bounds unacknowledged async publishes (default 4000).
func PublishAsyncMaxPending(n int) StreamsOpt { return func(s *Streams) { s.window = n } }

// PublishAsyncStallWait is how long PublishAsync waits for room (default 5 s).
func PublishAsyncStallWait(d time.Duration) StreamsOpt {
	return func(s *Streams) { s.stallWait = d }
}

// Defaults of the publish retries, and their schedule: the first retry 25 ms after
// a failure, each wait then doubling up to 500 ms.
const (
	defaultRetryFor = 2 * time.Second
	defaultAckWait  = time.Second
	retryFirstWait  = 25 * time.Millisecond
	retryMaxWait    = 500 * time.Millisecond
)

// PublishRetryFor is how long after its first attempt a stream publish (sync or
// async) is sent again when it fails in a way a retry can mend (default 2 s; 0:
// never), 25 ms after each failure, the wait doubling up to 500 ms, the last one
// at PublishRetryFor; the last failure is what the caller gets. A leader election
// of a replicated stream (half a second or so) then costs its publishers time,
// not errors. Retried are:
//
//   - a publish that no stream's leader answered (ErrNoResponders: nothing was
//     stored; also what a stream that does not exist gives, after the retries),
//     or that the client could not buffer while reconnecting;
//   - for a message with a MsgID, which the stream stores once however often it
//     comes within its duplicate window, also an answer that the stream could not
//     replicate or store it (code 503), a connection lost before the
//     acknowledgement came, and an acknowledgement that has not come within
//     PublishAckWait.
//
// A message without an id is not sent again after an outcome the client cannot
// know (it might be stored twice).
func PublishRetryFor(d time.Duration) StreamsOpt { return func(s *Streams) { s.retryFor = max(d, 0) } }

// PublishAckWait bounds how long one attempt of a publish with a MsgID waits for
// its acknowledgement while PublishRetryFor leaves time for another (default 1 s):
// the publishes a node forwarded to a leader that died are never answered, and
// are sent again after this wait instead of failing after APITimeout.
func PublishAckWait(d time.Duration) StreamsOpt {
	return func(s *Streams) {
		if d > 0 {
			s.ackWait = d
		}
	}
}

// Streams returns the stream API over this connection.
func (c *Conn) Streams(opts ...StreamsOpt) *Streams {
	s := &Streams{c: c, timeout: defaultAPITimeout, window: 4000, stallWait: 5 * time.Second,
		retryFor: defaultRetryFor, ackWait: defaultAckWait,
		futures: make(map[string]*PubAckFuture), room: make(chan struct{}, 1)}
	for _, o := range opts {
		o(s)
	}
	if s.window <= 0 {
		s.window = 1
	}
	return s
}

// request sends a management request and decodes the answer into out.
func request[T any](ctx context.Context, s *Streams, subject string, body any) (*T, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	msg, err := s.c.Request(ctx, subject, data)
	if err != nil {
		if errors.Is(err, ErrNoResponders) {
			return nil, fmt.Errorf("%s: %w", subject, ErrStreamUnavailable)
		}
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	var resp streamapi.Response[T]
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%s: bad response: %w", subject, err)
	}
	if resp.Error != nil {
		return nil, apiErr(resp.Error)
	}
	if resp.Value == nil {
		return nil, fmt.Errorf("%s: empty response", subject)
	}
	return resp.Value, nil
}

// apiErr wraps a server error with the sentinel callers branch on.
func apiErr(e *streamapi.APIError) error {
	switch e.Code {
	case streamapi.CodeStreamNotFound:
		return fmt.Errorf("%w: %w", ErrStreamNotFound, e)
	case streamapi.CodeConsumerMissing:
		return fmt.Errorf("%w: %w", ErrConsumerNotFound, e)
	}
	return e
}

// AddStream creates a stream (or confirms an identical one exists).
func (s *Streams) AddStream(ctx context.Context, cfg StreamConfig) (*StreamInfo, error) {
	if err := streamapi.ValidName("stream", cfg.Name); err != nil {
		return nil, err
	}
	return request[StreamInfo](ctx, s, streamapi.StreamCreateSubject(cfg.Name), cfg)
}

// UpdateStream changes a stream's subjects and limits.
func (s *Streams) UpdateStream(ctx context.Context, cfg StreamConfig) (*StreamInfo, error) {
	if err := streamapi.ValidName("stream", cfg.Name); err != nil {
		return nil, err
	}
	return request[StreamInfo](ctx, s, streamapi.StreamUpdateSubject(cfg.Name), cfg)
}

// StreamInfo describes a stream.
func (s *Streams) StreamInfo(ctx context.Context, name string) (*StreamInfo, error) {
	return request[StreamInfo](ctx, s, streamapi.StreamInfoSubject(name), nil)
}

// DeleteStream removes a stream and its data.
func (s *Streams) DeleteStream(ctx context.Context, name string) error {
	_, err := request[streamapi.Deleted](ctx, s, streamapi.StreamDeleteSubject(name), nil)
	return err
}

// PurgeStream removes messages (all of them when req is nil) and says how many.
func (s *Streams) PurgeStream(ctx context.Context, name string, req *PurgeRequest) (uint64, error) {
	if req == nil {
		req = &PurgeRequest{}
	}
	r, err := request[streamapi.PurgeResponse](ctx, s, streamapi.StreamPurgeSubject(name), req)
	if err != nil {
		return 0, err
	}
	return r.Purged, nil
}

// ListStreams describes every stream.
func (s *Streams) ListStreams(ctx context.Context) ([]StreamInfo, error) {
	r, err := request[streamapi.StreamList](ctx, s, streamapi.StreamListSubject, nil)
	if err != nil {
		return nil, err
	}
	return r.Streams, nil
}

// GetMsg reads a stored message by partition and sequence.
func (s *Streams) GetMsg(ctx context.Context, stream string, partition int, seq uint64) (*StoredMsg, error) {
	return request[StoredMsg](ctx, s, streamapi.StreamMsgGetSubject(stream), streamapi.MsgGetRequest{Seq: seq, Partition: partition})
}

// GetLastMsg reads the last stored message of a subject in a partition.
func (s *Streams) GetLastMsg(ctx context.Context, stream string, partition int, subject string) (*StoredMsg, error) {
	return request[StoredMsg](ctx, s, streamapi.StreamMsgGetSubject(stream), streamapi.MsgGetRequest{LastBySubj: subject, Partition: partition})
}

// AddConsumer creates a consumer on a stream: durable when cfg.Durable is set, else
// ephemeral with a server-chosen name (in the returned info) unless cfg.Name is set.
func (s *Streams) AddConsumer(ctx context.Context, stream string, cfg ConsumerConfig) (*ConsumerInfo, error) {
	name := cfg.Durable
	if name == "" {
		name = cfg.Name
	}
	subj := streamapi.APIPrefix + "CONSUMER.CREATE." + stream
	if name != "" {
		subj = streamapi.ConsumerCreateSubject(stream, name)
	}
	return request[ConsumerInfo](ctx, s, subj, cfg)
}

// ConsumerInfo describes a consumer.
func (s *Streams) ConsumerInfo(ctx context.Context, stream, consumer string) (*ConsumerInfo, error) {
	return request[ConsumerInfo](ctx, s, streamapi.ConsumerInfoSubject(stream, consumer), nil)
}

// DeleteConsumer removes a consumer and its position.
func (s *Streams) DeleteConsumer(ctx context.Context, stream, consumer string) error {
	_, err := request[streamapi.Deleted](ctx, s, streamapi.ConsumerDeleteSubject(stream, consumer), nil)
	return err
}

// ListConsumers describes every consumer of a stream.
func (s *Streams) ListConsumers(ctx context.Context, stream string) ([]ConsumerInfo, error) {
	r, err := request[streamapi.ConsumerList](ctx, s, streamapi.ConsumerListSubject(stream), nil)
	if err != nil {
		return nil, err
	}
	return r.Consumers, nil
}

// ---------------------------------------------------------------------------------
// Publishing with acknowledgement

// PubOpt changes one setting of a stream publish.
type PubOpt func(*Msg)

// MsgID sets the message id the stream uses to drop duplicates within its window.
func MsgID(id string) PubOpt { return func(m *Msg) { setHeader(m, streamapi.HeaderMsgID, id) } }

// ExpectLastMsgID stores the message only if id ("<prefix><n>") is the highest
// numbered id the stream holds with its prefix within its duplicate window;
// otherwise the publish fails with code 10070 (streamapi.CodeWrongLastMsgID). A
// producer that numbers its messages and does not wait for each ack uses it so
// that nothing is stored after a message that failed.
func ExpectLastMsgID(id string) PubOpt {
	return func(m *Msg) { setHeader(m, streamapi.HeaderExpectedLastMsgID, id) }
}

// Key sets the partition key: messages with one key go to one partition, in order.
func Key(key string) PubOpt { return func(m *Msg) { setHeader(m, streamapi.HeaderKey, key) } }

// Tombstone marks the message as its key's deletion: a compacted stream
// (StreamConfig.Compact) removes the key's earlier messages and, after the
// tombstone retention, the tombstone itself. Kafka consumers read it as a
// record with a null value. Publish it with an empty payload.
func Tombstone() PubOpt { return func(m *Msg) { setHeader(m, streamapi.HeaderNullValue, "1") } }

// ToPartition puts the message in partition p (from 0) of a partitioned stream,
// whatever its key; a partition the stream does not have is ignored.
func ToPartition(p int) PubOpt {
	return func(m *Msg) { setHeader(m, streamapi.HeaderToPartition, strconv.Itoa(p)) }
}

func setHeader(m *Msg, k, v string) {
	if m.Header == nil {
		m.Header = Header{}
	}
	m.Header.Set(k, v)
}

// Publish stores data in the stream that captures subject and waits for its
// acknowledgement.
func (s *Streams) Publish(ctx context.Context, subject string, data []byte, opts ...PubOpt) (*PubAck, error) {
	m := &Msg{Subject: subject, Data: data}
	for _, o := range opts {
		o(m)
	}
	return s.PublishMsg(ctx, m)
}

// PublishMsg is Publish with headers. It is retried as PublishRetryFor says,
// within ctx (or APITimeout when ctx has no deadline).
func (s *Streams) PublishMsg(ctx context.Context, m *Msg) (*PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	withID := m.Header.Get(streamapi.HeaderMsgID) != ""
	first, wait := time.Now(), retryFirstWait
	for {
		attempt, cancel := ctx, context.CancelFunc(func() {})
		if s.boundedAttempt(withID, time.Since(first)) {
			attempt, cancel = context.WithTimeout(ctx, s.ackWait)
		}
		ack, err := s.publishOnce(attempt, m)
		cancel()
		if err == nil {
			return ack, nil
		}
		elapsed := time.Since(first)
		if !s.retries(withID, err) || elapsed >= s.retryFor {
			return nil, err
		}
		select {
		case <-time.After(min(wait, s.retryFor-elapsed)):
		case <-ctx.Done():
			return nil, err
		}
		wait = min(2*wait, retryMaxWait)
	}
}

// publishOnce sends m once and waits for its acknowledgement until ctx ends.
func (s *Streams) publishOnce(ctx context.Context, m *Msg) (*PubAck, error) {
	r, err := s.c.RequestMsg(ctx, m)
	if err != nil {
		if errors.Is(err, ErrNoResponders) {
			return nil, fmt.Errorf("publish to %q: no stream captures it: %w", m.Subject, ErrNoResponders)
		}
		return nil, fmt.Errorf("publish to %q: %w", m.Subject, err)
	}
	ack, err := streamapi.ParsePubAck(r.Data)
	if err != nil {
		return nil, fmt.Errorf("publish to %q: %w", m.Subject, err)
	}
	return &ack, nil
}

// retries reports whether a publish that failed with err is sent again (see
// PublishRetryFor); withID: the message has a MsgID.
func (s *Streams) retries(withID bool, err error) bool {
	if s.retryFor <= 0 {
		return false
	}
	if errors.Is(err, ErrNoResponders) || errors.Is(err, ErrReconnectBufExceeded) {
		return true // not stored: no leader took it, or it was never sent
	}
	if !withID {
		return false
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == streamapi.CodeUnavailable
	}
	return errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrTimeout)
}

// PubAckFuture is the pending acknowledgement of an async publish.
type PubAckFuture struct {
	msg      *Msg
	done     chan struct{}
	ack      PubAck
	err      error
	deadline time.Time // of the attempt in flight; zero while a retry waits to go

	// Retries (PublishRetryFor), guarded by Streams.mu.
	withID bool
	first  time.Time     // the first attempt
	wait   time.Duration // before the next retry
}

// Done is closed when the acknowledgement (or an error) has arrived.
func (f *PubAckFuture) Done() <-chan struct{} { return f.done }

// Result returns the acknowledgement once Done is closed.
func (f *PubAckFuture) Result() (*PubAck, error) {
	<-f.done
	if f.err != nil {
		return nil, f.err
	}
	return &f.ack, nil
}

// Wait waits for the acknowledgement until ctx ends.
func (f *PubAckFuture) Wait(ctx context.Context) (*PubAck, error) {
	select {
	case <-f.done:
		return f.Result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Msg is the message that was published.
func (f *PubAckFuture) Msg() *Msg { return f.msg }

// PublishAsync publishes without waiting; the acknowledgement arrives on the
// returned future. At most PublishAsyncMaxPending publishes are outstanding: beyond
// that PublishAsync waits for room up to PublishAsyncStallWait.
func (s *Streams) PublishAsync(subject string, data []byte, opts ...PubOpt) (*PubAckFuture, error) {
	m := &Msg{Subject: subject, Data: data}
	for _, o := range opts {
		o(m)
	}
	return s.PublishMsgAsync(m)
}

// PublishMsgAsync is PublishAsync with headers. The future is retried as
// PublishRetryFor says before it resolves with an error.
func (s *Streams) PublishMsgAsync(m *Msg) (*PubAckFuture, error) {
	if err := s.ensureAckSub(); err != nil {
		return nil, err
	}
	f := &PubAckFuture{msg: m, done: make(chan struct{}), withID: m.Header.Get(streamapi.HeaderMsgID) != "",
		wait: retryFirstWait}
	var stall *time.Timer
	s.mu.Lock()
	for len(s.futures) >= s.window {
		s.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(s.stallWait)
			defer stall.Stop()
		}
		select {
		case <-s.room:
		case <-stall.C:
			return nil, ErrTooManyPending
		}
		s.mu.Lock()
	}
	s.nextID++
	id := strconv.FormatUint(s.nextID, 36)
	f.first = time.Now()
	s.futures[id] = f
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	if err := s.sendLocked(id, f); err != nil {
		s.resolve(id, nil, err, false)
		return nil, err
	}
	return f, nil
}

// sendLocked sends an attempt of the future id, with the deadline of its ack and
// the sweep that enforces it. Called with s.mu held; it releases it.
func (s *Streams) sendLocked(id string, f *PubAckFuture) error {
	now := time.Now()
	f.deadline = now.Add(s.attemptWait(f, now))
	reply := s.prefix + id
	sweep := !s.sweeping
	s.sweeping = true
	s.mu.Unlock()
	if sweep {
		go s.sweep()
	}
	return s.c.publish(f.msg.Subject, reply, f.msg.Header, f.msg.Data)
}

// boundedAttempt reports whether an attempt made elapsed after a publish's first
// waits only PublishAckWait for its ack: it has a message id, and the retries
// have time for another attempt after this one.
func (s *Streams) boundedAttempt(withID bool, elapsed time.Duration) bool {
	return withID && s.retryFor > 0 && elapsed+s.ackWait < s.retryFor
}

// attemptWait is how long an attempt of f sent at now waits for its ack. Called
// with s.mu held.
func (s *Streams) attemptWait(f *PubAckFuture, now time.Time) time.Duration {
	if s.boundedAttempt(f.withID, now.Sub(f.first)) {
		return s.ackWait
	}
	return s.timeout
}

// resend sends the future id again, unless it has resolved meanwhile.
func (s *Streams) resend(id string) {
	s.mu.Lock()
	f := s.futures[id]
	if f == nil || !f.deadline.IsZero() {
		s.mu.Unlock()
		return
	}
	if err := s.sendLocked(id, f); err != nil {
		s.resolve(id, nil, err, true)
	}
}

// PublishAsyncPending reports how many async publishes await their acknowledgement.
func (s *Streams) PublishAsyncPending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.futures)
}

// PublishAsyncComplete returns a channel closed once no async publish is outstanding.
func (s *Streams) PublishAsyncComplete() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.futures) == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}

func (s *Streams) ensureAckSub() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ackSub != nil {
		return nil
	}
	s.prefix = NewInbox() + "."
	sub, err := s.c.subscribe(s.prefix+"*", internalSub, s.onAck, nil, nil)
	if err != nil {
		return err
	}
	s.ackSub = sub
	s.c.whenLost(func() { s.failPending(fmt.Errorf("publish acknowledgement: %w", ErrConnectionLost)) })
	return nil
}

// failPending fails every async publish awaiting its acknowledgement: the
// connection they went out on is gone, and their acknowledgements with it (a
// caller retrying with the same message id stores each message once).
func (s *Streams) failPending(err error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.futures))
	for id := range s.futures {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.resolve(id, nil, err, true)
	}
}

// onAck runs in the connection's reader for every publish acknowledgement.
func (s *Streams) onAck(m *Msg) {
	id := m.Subject[len(s.prefix):]
	if len(m.Data) == 0 && m.Header.Get(wire.HeaderStatus) == wire.StatusNoResponders {
		s.resolve(id, nil, ErrNoResponders, true)
		return
	}
	ack, err := streamapi.ParsePubAck(m.Data)
	if err != nil {
		s.resolve(id, nil, err, true)
		return
	}
	s.resolve(id, &ack, nil, false)
}

// resolve completes the future id with ack or err, or, when retry is set and err
// is one PublishRetryFor retries with time left, schedules the next attempt.
func (s *Streams) resolve(id string, ack *PubAck, err error, retry bool) {
	s.mu.Lock()
	f := s.futures[id]
	if f == nil {
		s.mu.Unlock()
		return
	}
	if err != nil && retry && f.deadline.IsZero() {
		// A retry is scheduled already: this is news of an attempt that failed
		// before it (or of the connection it went out on), and the retry decides.
		s.mu.Unlock()
		return
	}
	if elapsed := time.Since(f.first); err != nil && retry && s.retries(f.withID, err) && elapsed < s.retryFor {
		// Not resolved: the future keeps its place in the window until the retry
		// answers. A zero deadline marks the retry as scheduled: the sweep leaves
		// the future alone meanwhile.
		f.deadline = time.Time{}
		wait := min(f.wait, s.retryFor-elapsed)
		f.wait = min(2*f.wait, retryMaxWait)
		s.mu.Unlock()
		time.AfterFunc(wait, func() { s.resend(id) })
		return
	}
	full := len(s.futures) >= s.window
	delete(s.futures, id)
	if len(s.futures) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	if full {
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
	if ack != nil {
		f.ack = *ack
	}
	f.err = err
	close(f.done)
}

// sweep fails async publishes whose acknowledgement is overdue (lost with a broken
// connection, say); it runs while any are outstanding.
func (s *Streams) sweep() {
	t := time.NewTicker(max(s.timeout/20, 10*time.Millisecond))
	defer t.Stop()
	for range t.C {
		now := time.Now()
		var late []string
		s.mu.Lock()
		for id, f := range s.futures {
			if !f.deadline.IsZero() && now.After(f.deadline) {
				late = append(late, id)
			}
		}
		if len(s.futures) == len(late) {
			s.sweeping = false
		}
		stop := !s.sweeping
		s.mu.Unlock()
		for _, id := range late {
			s.resolve(id, nil, fmt.Errorf("publish acknowledgement: %w", ErrTimeout), true)
		}
		if stop {
			return
		}
	}
}
