package tern

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"strconv"
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// InboxPrefix starts every reply subject the client makes.
const InboxPrefix = "_INBOX."

// NewInbox returns a unique reply subject.
func NewInbox() string { return InboxPrefix + randomToken() }

func randomToken() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
}

// Request publishes data to subject and waits for the first reply. It returns
// ErrNoResponders at once when nothing is subscribed to subject.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) (*Msg, error) {
	return c.RequestMsg(ctx, &Msg{Subject: subject, Data: data})
}

// RequestTimeout is Request with a time limit.
func (c *Conn) RequestTimeout(subject string, data []byte, d time.Duration) (*Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Request(ctx, subject, data)
}

// RequestMsg is Request with headers.
func (c *Conn) RequestMsg(ctx context.Context, m *Msg) (*Msg, error) {
	token, ch, err := c.newResponse()
	if err != nil {
		return nil, err
	}
	defer func() {
		c.respMu.Lock()
		delete(c.respMap, token)
		c.respMu.Unlock()
	}()
	req := *m
	req.Reply = c.respPrefix + token
	if err := c.PublishMsg(&req); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if len(r.Data) == 0 && r.Header.Get(wire.HeaderStatus) == wire.StatusNoResponders {
			return nil, ErrNoResponders
		}
		return r, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ErrTimeout
		}
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrConnectionClosed
	}
}

// newResponse registers a token on the connection's wildcard inbox, subscribing it on
// first use.
func (c *Conn) newResponse() (string, chan *Msg, error) {
	c.respMu.Lock()
	defer c.respMu.Unlock()
	if c.respMap == nil {
		c.respPrefix = NewInbox() + "."
		c.respMap = make(map[string]chan *Msg)
		if _, err := c.subscribe(c.respPrefix+"*", internalSub, c.routeResponse, nil, nil); err != nil {
			c.respMap = nil
			return "", nil, err
		}
	}
	c.respToken++
	token := strconv.FormatUint(c.respToken, 36)
	ch := make(chan *Msg, 1)
	c.respMap[token] = ch
	return token, ch, nil
}

// routeResponse runs in the reader for every message on the inbox.
func (c *Conn) routeResponse(m *Msg) {
	token := m.Subject[len(c.respPrefix):]
	c.respMu.Lock()
	ch := c.respMap[token]
	delete(c.respMap, token)
	c.respMu.Unlock()
	if ch != nil {
		ch <- m
	}
}
