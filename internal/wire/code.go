package wire

import "fmt"

// Code is the numeric error code of an ERR frame. Values are stable on the wire.
type Code uint16

// Error codes. Fatal ones are followed by the server closing the connection.
const (
	CodeProtocol         Code = 1  // fatal: malformed or unexpected frame
	CodeTooLarge         Code = 2  // fatal: frame or payload over the limit
	CodeBadSubject       Code = 3  // invalid subject or reply subject
	CodeBadQueue         Code = 4  // invalid queue group name
	CodeBadFilter        Code = 5  // filter expression does not compile
	CodePermission       Code = 6  // not allowed to publish or subscribe there
	CodeAuth             Code = 7  // fatal: credentials refused
	CodeMaxConnections   Code = 8  // fatal: server connection limit reached
	CodeMaxSubscriptions Code = 9  // connection's subscription limit reached
	CodeSlowConsumer     Code = 10 // fatal under the disconnect policy: pending bytes over the limit
	CodeUnknownSID       Code = 11 // UNSUB of a subscription id that does not exist
	CodeVersion          Code = 12 // fatal: protocol version not supported
	CodeStale            Code = 13 // fatal: peer did not answer pings
	CodeConnectFirst     Code = 14 // fatal: first frame was not CONNECT, or a second CONNECT
	CodeDuplicateSID     Code = 15 // SUB with a subscription id already in use
	CodeShutdown         Code = 16 // fatal: server is shutting down
	CodeBadHeader        Code = 17 // malformed header block
	CodeInternal         Code = 18 // server fault; the request may be retried
)

var codeNames = map[Code]string{
	CodeProtocol:         "protocol error",
	CodeTooLarge:         "too large",
	CodeBadSubject:       "bad subject",
	CodeBadQueue:         "bad queue group",
	CodeBadFilter:        "bad filter",
	CodePermission:       "permission denied",
	CodeAuth:             "authentication failed",
	CodeMaxConnections:   "maximum connections exceeded",
	CodeMaxSubscriptions: "maximum subscriptions exceeded",
	CodeSlowConsumer:     "slow consumer",
	CodeUnknownSID:       "unknown subscription",
	CodeVersion:          "unsupported version",
	CodeStale:            "stale connection",
	CodeConnectFirst:     "connect required",
	CodeDuplicateSID:     "duplicate subscription id",
	CodeShutdown:         "server shutting down",
	CodeBadHeader:        "bad header",
	CodeInternal:         "internal error",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// Fatal reports whether the server closes the connection after sending this code.
func (c Code) Fatal() bool {
	switch c {
	case CodeProtocol, CodeTooLarge, CodeAuth, CodeMaxConnections, CodeVersion,
		CodeStale, CodeConnectFirst, CodeShutdown:
		return true
	}
	return false
}

// Error is an ERR frame as a Go error.
type Error struct {
	Code Code
	ID   uint64 // ack id the error answers, 0 if none
	Text string
}

func (e *Error) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("tern: %s (%d)", e.Code, uint16(e.Code))
	}
	return fmt.Sprintf("tern: %s (%d): %s", e.Code, uint16(e.Code), e.Text)
}

// Is lets errors.Is match an *Error against another *Error by code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Text == "" || t.Text == e.Text)
}
