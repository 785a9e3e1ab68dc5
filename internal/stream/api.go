package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// apiRequest is a management request copied off the publisher's buffers.
type apiRequest struct {
	subject string // in the account's terms
	account string // "" for the global account
	reply   []byte
	body    []byte
}

// apiSink receives "$TERN.API.>" requests. Pull requests are applied at once on the
// publisher's goroutine (they only queue work for the consumer); everything else is
// handed to one goroutine, since it may touch the disk.
type apiSink struct {
	m     *Manager
	reqs  chan apiRequest
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
	batch broker.Batch
}

// maxAPIQueue bounds management requests waiting to be handled.
const maxAPIQueue = 1024

var (
	nextPrefix    = []byte(streamapi.APIPrefix + "CONSUMER.NEXT.")
	clusterPrefix = []byte(streamapi.ClusterPrefix)
)

func newAPISink(m *Manager) *apiSink {
	return &apiSink{m: m, reqs: make(chan apiRequest, maxAPIQueue), quit: make(chan struct{}), done: make(chan struct{})}
}

func (a *apiSink) Deliver(_ *broker.Subscription, msg *broker.Message) bool {
	if len(msg.Reply) == 0 {
		return true // nobody to answer
	}
	subj := msg.Subject
	prefix, account, own, inAccount := CutAccount(subj)
	if inAccount {
		if !a.m.AccountKnown(string(account)) {
			return true // no such account: nobody answers
		}
		subj = own
	} else if bytes.HasPrefix(subj, clusterPrefix) {
		return true // the server's to answer
	}
	if rest, ok := bytes.CutPrefix(subj, nextPrefix); ok && a.pull(prefix, rest, msg) {
		return true
	}
	return a.queue(apiRequest{subject: string(subj), account: string(account), reply: bytes.Clone(msg.Reply), body: bytes.Clone(msg.Payload)})
}

func (a *apiSink) queue(req apiRequest) bool {
	select {
	case a.reqs <- req:
		return true
	default:
		return false
	}
}

// pull applies a pull request directly; it returns false to let the API goroutine
// answer with an error. prefix is the account's ("" for the global account).
func (a *apiSink) pull(prefix, rest []byte, msg *broker.Message) bool {
	streamName, consumerName, ok := bytes.Cut(rest, []byte{'.'})
	if !ok {
		return false
	}
	var s *Stream
	if len(prefix) == 0 {
		s = a.m.streamBytes(streamName)
	} else {
		s = a.m.accountStreamBytes(prefix, streamName)
	}
	if s == nil {
		return false
	}
	c := s.consumerBytes(consumerName)
	if c == nil {
		return false
	}
	var req streamapi.PullRequest
	if len(bytes.TrimSpace(msg.Payload)) > 0 {
		if err := json.Unmarshal(msg.Payload, &req); err != nil {
			return false
		}
	}
	c.pull(bytes.Clone(msg.Reply), req)
	return true
}

func (a *apiSink) Flush() {}

func (a *apiSink) run() {
	defer close(a.done)
	for {
		select {
		case req := <-a.reqs:
			if resp := a.handle(req); resp != nil { // nil: answered later (seek)
				a.m.broker.Publish(&a.batch, &broker.Message{Subject: req.reply, Payload: resp})
			}
			if len(a.reqs) == 0 {
				a.batch.Flush()
			}
		case <-a.quit:
			a.batch.Flush()
			return
		}
	}
}

func (a *apiSink) stop() {
	a.once.Do(func() { close(a.quit) })
	<-a.done
}

// handle answers one management request with a JSON response.
func (a *apiSink) handle(req apiRequest) []byte {
	op := strings.TrimPrefix(req.subject, streamapi.APIPrefix)
	tok := strings.Split(op, ".")
	m := a.m
	acct := req.account
	arg := func(i int) string {
		if i < len(tok) {
			return tok[i]
		}
		return ""
	}
	stream := func(name string) (*Stream, error) { return m.AccountStream(acct, name) }
	switch {
	case acct != "" && strings.HasPrefix(req.subject, streamapi.ClusterPrefix):
		return Respond[struct{}](nil, &streamapi.APIError{Code: streamapi.CodeBadRequest,
			Description: "the cluster's requests are the global account's: " + op})
	case op == "STREAM.LIST":
		list := streamapi.StreamList{Streams: []streamapi.StreamInfo{}}
		for _, s := range m.AccountStreams(acct) {
			list.Streams = append(list.Streams, s.Info())
		}
		return Respond(&list, nil)
	case len(tok) == 3 && tok[0] == "STREAM":
		name := tok[2]
		switch tok[1] {
		case "CREATE", "UPDATE":
			var cfg streamapi.StreamConfig
			if err := DecodeRequest(req.body, &cfg); err != nil {
				return Respond[streamapi.StreamInfo](nil, err)
			}
			if cfg.Name == "" {
				cfg.Name = name
			}
			if cfg.Name != name {
				return Respond[streamapi.StreamInfo](nil, fmt.Errorf("%w: name %q in the body differs from %q in the subject", ErrBadConfig, cfg.Name, name))
			}
			var s *Stream
			var err error
			if tok[1] == "CREATE" {
				s, err = m.AddAccountStream(acct, cfg)
			} else {
				s, err = m.UpdateAccountStream(acct, cfg)
			}
			if err != nil {
				return Respond[streamapi.StreamInfo](nil, err)
			}
			info := s.Info()
			return Respond(&info, nil)
		case "INFO":
			s, err := stream(name)
			if err != nil {
				return Respond[streamapi.StreamInfo](nil, err)
			}
			info := s.Info()
			return Respond(&info, nil)
		case "DELETE":
			if err := m.DeleteStream(Key(acct, name)); err != nil {
				return Respond[streamapi.Deleted](nil, err)
			}
			return Respond(&streamapi.Deleted{Deleted: true}, nil)
		case "PURGE":
			var pr streamapi.PurgeRequest
			if err := DecodeRequest(req.body, &pr); err != nil {
				return Respond[streamapi.PurgeResponse](nil, err)
			}
			s, err := stream(name)
			if err != nil {
				return Respond[streamapi.PurgeResponse](nil, err)
			}
			n, err := s.Purge(pr)
			if err != nil {
				return Respond[streamapi.PurgeResponse](nil, err)
			}
			return Respond(&streamapi.PurgeResponse{Purged: n}, nil)
		}
	case len(tok) == 4 && tok[0] == "STREAM" && tok[1] == "MSG" && tok[2] == "GET":
		var gr streamapi.MsgGetRequest
		if err := DecodeRequest(req.body, &gr); err != nil {
			return Respond[streamapi.StoredMsg](nil, err)
		}
		s, err := stream(tok[3])
		if err != nil {
			return Respond[streamapi.StoredMsg](nil, err)
		}
		msg, err := s.GetMsg(gr)
		if err != nil {
			return Respond[streamapi.StoredMsg](nil, err)
		}
		return Respond(&msg, nil)
	case len(tok) >= 3 && tok[0] == "CONSUMER":
		s, err := stream(tok[2])
		if err != nil {
			return Respond[streamapi.ConsumerInfo](nil, err)
		}
		name := arg(3)
		switch {
		case tok[1] == "CREATE" && len(tok) <= 4:
			var cfg streamapi.ConsumerConfig
			if err := DecodeRequest(req.body, &cfg); err != nil {
				return Respond[streamapi.ConsumerInfo](nil, err)
			}
			c, err := s.AddConsumer(name, cfg)
			if err != nil {
				return Respond[streamapi.ConsumerInfo](nil, err)
			}
			info := c.Info()
			return Respond(&info, nil)
		case tok[1] == "INFO" && len(tok) == 4:
			c, err := s.Consumer(name)
			if err != nil {
				return Respond[streamapi.ConsumerInfo](nil, err)
			}
			info := c.Info()
			return Respond(&info, nil)
		case tok[1] == "DELETE" && len(tok) == 4:
			if err := s.DeleteConsumer(name); err != nil {
				return Respond[streamapi.Deleted](nil, err)
			}
			return Respond(&streamapi.Deleted{Deleted: true}, nil)
		case tok[1] == "LIST" && len(tok) == 3:
			list := streamapi.ConsumerList{Consumers: []streamapi.ConsumerInfo{}}
			for _, c := range s.Consumers() {
				list.Consumers = append(list.Consumers, c.Info())
			}
			return Respond(&list, nil)
		case tok[1] == "SEEK" && len(tok) == 4:
			return a.seekRequest(acct, tok[2], name, req.body, req.reply)
		case tok[1] == "NEXT" && len(tok) == 4:
			if _, err := s.Consumer(name); err != nil {
				return Respond[streamapi.ConsumerInfo](nil, err)
			}
			return Respond[streamapi.ConsumerInfo](nil, fmt.Errorf("%w: pull request body is not a valid JSON PullRequest", ErrBadConfig))
		}
	}
	return Respond[struct{}](nil, &streamapi.APIError{Code: streamapi.CodeBadRequest, Description: "unknown API request " + op})
}

// DecodeRequest decodes a stream API request body; an empty body leaves v as it is.
func DecodeRequest(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %w", ErrBadConfig, err)
	}
	return nil
}

// Respond encodes a stream API response with either a value or an error.
func Respond[T any](v *T, err error) []byte {
	r := streamapi.Response[T]{Value: v}
	if err != nil {
		r.Value = nil
		r.Error = apiError(err)
	}
	b, merr := json.Marshal(r)
	if merr != nil {
		b, _ = json.Marshal(streamapi.Response[T]{Error: &streamapi.APIError{Code: streamapi.CodeInternal, Description: merr.Error()}})
	}
	return b
}

func apiError(err error) *streamapi.APIError {
	var ae *streamapi.APIError
	if errors.As(err, &ae) {
		return ae
	}
	code := streamapi.CodeInternal
	switch {
	case errors.Is(err, ErrStreamNotFound):
		code = streamapi.CodeStreamNotFound
	case errors.Is(err, ErrConsumerNotFound):
		code = streamapi.CodeConsumerMissing
	case errors.Is(err, ErrExists), errors.Is(err, ErrOverlap):
		code = streamapi.CodeConflict
	case errors.Is(err, ErrBadConfig):
		code = streamapi.CodeBadRequest
	case errors.Is(err, ErrLimit):
		code = streamapi.CodeLimits
	case errors.Is(err, store.ErrNoSpace), errors.Is(err, ErrNotLeader):
		code = streamapi.CodeUnavailable
	case errors.Is(err, store.ErrNotFound):
		code = streamapi.CodeNotFound
	case errors.Is(err, ErrExpired):
		code = streamapi.CodeExpired
	}
	return &streamapi.APIError{Code: code, Description: err.Error()}
}

// ackSink receives "$TERN.ACK.>" messages and applies them on the publisher's
// goroutine: an ack only changes the consumer's bookkeeping.
type ackSink struct{ m *Manager }

func (a *ackSink) Deliver(_ *broker.Subscription, msg *broker.Message) bool {
	prefix, _, subj, inAccount := CutAccount(msg.Subject)
	ref, err := streamapi.ParseAckSubject(subj)
	if err != nil {
		return true
	}
	var s *Stream
	if inAccount {
		s = a.m.accountStreamBytes(prefix, ref.Stream)
	} else {
		s = a.m.streamBytes(ref.Stream)
	}
	if s == nil {
		return true
	}
	c := s.consumerBytes(ref.Consumer)
	if c == nil || ref.Partition >= len(c.s.parts) {
		return true
	}
	kind, delay, reason, err := streamapi.ParseAckBody(msg.Payload)
	if err != nil {
		a.m.log.Debug("bad ack", "stream", s.name, "consumer", c.name, "err", err)
		return true
	}
	var confirm []byte
	if len(msg.Reply) > 0 {
		confirm = bytes.Clone(msg.Reply)
	}
	c.ack(&ref, kind, delay, reason, confirm)
	return true
}

func (a *ackSink) Flush() {}
