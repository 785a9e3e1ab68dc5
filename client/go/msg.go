package tern

import (
	"github.com/tern-mq/tern/internal/wire"
)

// Header holds message headers; a key may have several values.
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Add appends a value to key.
func (h Header) Add(key, value string) { h[key] = append(h[key], value) }

// Values returns every value of key.
func (h Header) Values(key string) []string { return h[key] }

// Del removes key.
func (h Header) Del(key string) { delete(h, key) }

func (h Header) encode(dst []byte) []byte {
	for k, vs := range h {
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
type Msg struct {
	Subject string
	Reply   string
	Header  Header
	Data    []byte
	Sub     *Subscription // the subscription that received it; nil for messages to publish
	next    *Msg          // pending queue link
}

// Respond publishes data to the message's reply subject.
func (m *Msg) Respond(data []byte) error {
	if m.Sub == nil || m.Reply == "" {
		return ErrBadSubject
	}
	return m.Sub.conn.Publish(m.Reply, data)
}

// RespondMsg publishes r (headers included) to the message's reply subject.
func (m *Msg) RespondMsg(r *Msg) error {
	if m.Sub == nil || m.Reply == "" {
		return ErrBadSubject
	}
	r.Subject = m.Reply
	return m.Sub.conn.PublishMsg(r)
}
