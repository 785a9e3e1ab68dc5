package tern

import (
	"errors"

	"github.com/tern-mq/tern/internal/wire"
)

// Errors callers branch on with errors.Is. Errors returned by the client wrap these,
// sometimes together with a *ServerError, so test with errors.Is and errors.As rather
// than ==.
var (
	// ErrTimeout: a Flush, request, NextMsg or subscription acknowledgement did not
	// complete in time.
	ErrTimeout = errors.New("tern: timeout")
	// ErrNoResponders: a request found no subscriber on its subject.
	ErrNoResponders = errors.New("tern: no responders")
	// ErrConnectionClosed: the connection was closed by Close, Drain or by giving up
	// reconnecting.
	ErrConnectionClosed = errors.New("tern: connection closed")
	// ErrConnectionLost: the connection broke while an operation needed it (a Flush or
	// an acknowledgement in flight); the client is reconnecting.
	ErrConnectionLost = errors.New("tern: connection lost")
	// ErrConnectionDraining: Drain is under way; no new subscriptions.
	ErrConnectionDraining = errors.New("tern: connection draining")
	// ErrInvalidConnection: a method was called on a nil *Conn.
	ErrInvalidConnection = errors.New("tern: invalid connection")
	// ErrBadSubject: an empty subject, or a subject the server refused.
	ErrBadSubject = errors.New("tern: invalid subject")
	// ErrMaxPayload: the payload is larger than the server's limit (Conn.MaxPayload).
	ErrMaxPayload = errors.New("tern: payload exceeds the server's maximum")
	// ErrSlowConsumer: a subscription's pending limits were reached and messages were
	// dropped; reported to the ErrorHandler.
	ErrSlowConsumer = errors.New("tern: slow consumer, messages dropped")
	// ErrReconnectBufExceeded: a publish while disconnected would overflow
	// ReconnectBufSize.
	ErrReconnectBufExceeded = errors.New("tern: reconnect buffer full")
	// ErrBadSubscription: the subscription is not (or no longer) valid, or the server
	// refused it (then the error also wraps the *ServerError).
	ErrBadSubscription = errors.New("tern: invalid subscription")
	// ErrDrainTimeout: Drain did not finish within DrainTimeout.
	ErrDrainTimeout = errors.New("tern: drain timed out")
	// ErrNoServers: Connect could reach no server of the URL list.
	ErrNoServers = errors.New("tern: no server available")
	// ErrSyncSubRequired: NextMsg was called on a subscription that has a handler or
	// a channel.
	ErrSyncSubRequired = errors.New("tern: NextMsg needs a SubscribeSync subscription")
	// ErrMsgNoReply: Respond on a message without a reply subject.
	ErrMsgNoReply = errors.New("tern: message has no reply subject")
	// ErrMsgNotBound: Respond on a message that was not received by a subscription.
	ErrMsgNotBound = errors.New("tern: message not received by a subscription")
	// ErrInvalidMsg: PublishMsg or RequestMsg with a nil message.
	ErrInvalidMsg = errors.New("tern: invalid message")
	// ErrBadURL: a server address Connect cannot use.
	ErrBadURL = errors.New("tern: invalid server URL")
	// ErrBadOption: an option Connect cannot use (a UDP key that is not 32 bytes).
	ErrBadOption = errors.New("tern: invalid option")
)

// ServerError is an ERR frame from the server. Branch on Code (the wire.Code*
// constants, listed in docs/protocol.md); Code.Fatal reports whether the server closed
// the connection after it. errors.Is(err, &ServerError{Code: c}) matches by code.
type ServerError = wire.Error

// Error codes of ServerError, re-exported so that callers need not import the
// protocol package.
const (
	CodeBadSubject       = wire.CodeBadSubject
	CodeBadQueue         = wire.CodeBadQueue
	CodeBadFilter        = wire.CodeBadFilter
	CodePermission       = wire.CodePermission
	CodeAuth             = wire.CodeAuth
	CodeTooLarge         = wire.CodeTooLarge
	CodeMaxConnections   = wire.CodeMaxConnections
	CodeMaxSubscriptions = wire.CodeMaxSubscriptions
	CodeSlowConsumer     = wire.CodeSlowConsumer
	CodeBadHeader        = wire.CodeBadHeader
)
