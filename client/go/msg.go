package tern

import (
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// Header holds message headers. A key may have several values; keys are
// case-sensitive and order between keys is not kept.
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Add appends a value to key.
func (h Header) Add(key, value string) { h[key] = append(h[key], value) }

// Values returns every value of key.
func (h Header) Values(key string) []string { return h[key] }

// Del removes key.
func (h Header) Del(key string) { delete(h, key) }

// encode appends the header block; empty keys, which the protocol does not allow,
// are left out.
func (h Header) encode(dst []byte) []byte {
	for k, vs := range h {
		if k == "" {
			continue
		}
		for _, v := range vs {
			dst = wire.AppendHeader(dst, k, v)
		}
	}
	return dst
}

func decodeHeader(b wire.Header) Header {
	h := Header{}
	b.Each(func(k, v []byte) bool {
		h[string(k)] = append(h[string(k)], string(v))
		return true
	})
	return h
}

// Msg is a message received or to publish.
//
// A received message owns its Subject, Reply, Header and Data: they stay valid after
// the handler returns and the handler may modify Data.
type Msg struct {
	Subject string
	Reply   string // subject to send an answer to, or ""
	Header  Header // nil when the message has no headers
	Data    []byte
	Sub     *Subscription // the subscription that received it; nil for messages to publish
	next    *Msg          // pending queue link

	// apiTimeout bounds AckSync when its context has none: the APITimeout of the
	// Streams that fetched the message.
	apiTimeout time.Duration
}

// Respond publishes data to the message's reply subject.
func (m *Msg) Respond(data []byte) error {
	if m.Sub == nil {
		return ErrMsgNotBound
	}
	if m.Reply == "" {
		return ErrMsgNoReply
	}
	return m.Sub.conn.Publish(m.Reply, data)
}

// RespondMsg publishes r (headers included) to the message's reply subject; it sets
// r.Subject.
func (m *Msg) RespondMsg(r *Msg) error {
	if m.Sub == nil {
		return ErrMsgNotBound
	}
	if m.Reply == "" {
		return ErrMsgNoReply
	}
	if r == nil {
		return ErrInvalidMsg
	}
	r.Subject = m.Reply
	return m.Sub.conn.PublishMsg(r)
}
