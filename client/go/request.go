package tern

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"time"

	"github.com/tern-mq/tern/internal/wire"
)

// InboxPrefix starts every reply subject the client makes.
const InboxPrefix = "_INBOX."

var inboxEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewInbox returns a unique subject to receive replies on.
func NewInbox() string { return InboxPrefix + randomToken() }

func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return inboxEncoding.EncodeToString(b[:])
}

// Request publishes data to subject and waits for the first reply, until ctx ends
// (ErrTimeout at its deadline, the context's error if cancelled). It returns
// ErrNoResponders as soon as the server reports that nothing is subscribed to subject.
//
// All requests of a connection share one subscription, "_INBOX.<random>.*", made on
// first use; each request waits on its own token. A request survives a reconnect: it
// fails only when its context ends or the connection closes.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) (*Msg, error) {
	return c.RequestMsg(ctx, &Msg{Subject: subject, Data: data})
}

// RequestTimeout is Request with a time limit.
func (c *Conn) RequestTimeout(subject string, data []byte, d time.Duration) (*Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Request(ctx, subject, data)
}

// RequestMsg is Request with headers: m's Subject, Header and Data are sent, its
// Reply is replaced by the connection's inbox.
func (c *Conn) RequestMsg(ctx context.Context, m *Msg) (*Msg, error) {
	if c == nil {
		return nil, ErrInvalidConnection
	}
	if m == nil {
		return nil, ErrInvalidMsg
	}
	token, ch, err := c.newResponse()
	if err != nil {
		return nil, err
	}
	defer c.dropResponse(token)
	if err := c.publish(m.Subject, c.respPrefix+token, m.Header, m.Data); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if len(r.Data) == 0 && r.Header.Get(wire.HeaderStatus) == wire.StatusNoResponders {
			return nil, ErrNoResponders
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctxErr(ctx)
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
		prefix := NewInbox() + "."
		if _, err := c.subscribe(prefix+"*", internalSub, c.routeResponse, nil, nil); err != nil {
			return "", nil, err
		}
		c.respPrefix = prefix
		c.respMap = make(map[string]chan *Msg)
	}
	c.respToken++
	token := strconv.FormatUint(c.respToken, 36)
	ch := make(chan *Msg, 1)
	c.respMap[token] = ch
	return token, ch, nil
}

func (c *Conn) dropResponse(token string) {
	c.respMu.Lock()
	delete(c.respMap, token)
	c.respMu.Unlock()
}

// routeResponse runs in the reader for every message on the inbox: it hands the first
// answer of a request to its waiter and drops the rest.
func (c *Conn) routeResponse(m *Msg) {
	c.respMu.Lock()
	ch := c.respMap[m.Subject[len(c.respPrefix):]]
	delete(c.respMap, m.Subject[len(c.respPrefix):])
	c.respMu.Unlock()
	if ch != nil {
		ch <- m
	}
}
