package tern

import (
	"errors"

	"github.com/tern-mq/tern/internal/wire"
)

// Errors callers branch on with errors.Is.
var (
	ErrTimeout              = errors.New("tern: timeout")
	ErrNoResponders         = errors.New("tern: no responders")
	ErrConnectionClosed     = errors.New("tern: connection closed")
	ErrConnectionLost       = errors.New("tern: connection lost")
	ErrBadSubject           = errors.New("tern: invalid subject")
	ErrMaxPayload           = errors.New("tern: payload exceeds the server's maximum")
	ErrSlowConsumer         = errors.New("tern: slow consumer, messages dropped")
	ErrReconnectBufExceeded = errors.New("tern: reconnect buffer full")
	ErrBadSubscription      = errors.New("tern: invalid subscription")
	ErrDrainTimeout         = errors.New("tern: drain timed out")
	ErrNoServers            = errors.New("tern: no server available")
	ErrSyncSubRequired      = errors.New("tern: NextMsg needs a SubscribeSync subscription")
)

// ServerError is an ERR frame from the server; check Code to branch.
type ServerError = wire.Error
