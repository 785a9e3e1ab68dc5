package session

import (
	"fmt"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// Ready is what a Session wants done after the events given to it since the last
// Ready: packets for its client, messages for the broker, broker subscriptions to
// add and remove, records to write, and the connection or the session to end. The
// driver applies it in the order documented in the package comment and gives it back
// with Release.
type Ready struct {
	// Packets go to the session's current connection, in order.
	Packets []Packet
	// Publish lists messages the session publishes into the broker (wills).
	Publish []Message
	// Subs lists broker subscriptions to make (Add) and to remove (Remove).
	Subs []SubChange
	// Persist lists records to write or delete, in order (see OpKind).
	Persist []Op
	// Retained lists subscriptions just made that want the retained messages they
	// match; the driver hands each to DeliverRetained once Packets are written.
	Retained []*Sub
	// Kick: the connection the session had before a Connect must be closed with
	// reason 0x8E (session taken over); Packets are for the new one.
	Kick bool
	// Close, when set, ends the current connection once Packets are written: the
	// client broke the protocol or its keepalive passed. Packets then end with the
	// DISCONNECT that tells a v5 client why.
	Close *Error
	// Ended: the session is over; the driver forgets it.
	Ended bool
	// Deadline is when Tick must next run, zero for never (see Session.Deadline).
	Deadline time.Time

	connack packet.Connack // the CONNACK Packets points to: a connect allocates none
}

// Packet describes one packet for the client; the driver encodes it for the
// connection's protocol version.
type Packet struct {
	Type   packet.Type // TypeConnack, TypePublish, an acknowledgement, TypeSuback, ...
	PID    uint16
	Reason packet.ReasonCode
	// Msg is the message of a PUBLISH; Dup marks a resend. ExpiryLeft is its
	// remaining message expiry in seconds when Msg.ExpireAt is set.
	Msg        *OutMsg
	Dup        bool
	ExpiryLeft uint32
	// Reasons are a SUBACK's or UNSUBACK's.
	Reasons []packet.ReasonCode
	// Connack is the CONNACK, with its MQTT 5 properties.
	Connack *packet.Connack
	// Text is a DISCONNECT's reason string, "" when the client did not ask for
	// problem information.
	Text string
}

// Message is a message a session publishes into the broker.
type Message struct {
	Subject []byte
	Payload []byte
	Header  []byte
	Reply   []byte
	QoS     byte
	Retain  bool
}

// Will is a connection's last will: published when the connection ends without a
// DISCONNECT, after Delay unless the client comes back first, or when the session
// ends if that is sooner.
type Will struct {
	Msg   Message // owns its bytes
	Delay time.Duration
}

// SubChange is one broker subscription change. Add and Remove are both set when a
// SUBSCRIBE replaces an existing subscription of the same filter, and both are the
// same Sub when Recheck has it made again.
type SubChange struct {
	Add, Remove *Sub
}

// OpKind says what a persist Op writes.
type OpKind uint8

// Records a persistent session keeps. The driver chooses keys and encodings; the
// session only says what changed.
const (
	OpSaveSession   OpKind = iota + 1 // the session record: Session.Expiry and Session.Subs
	OpDeleteSession                   // the session record
	OpSaveMsg                         // Msg, under Msg.MID (written again when it changes)
	OpDeleteMsg                       // the message stored under MID
	OpSaveQoS2                        // PID: a QoS 2 publish received and not released
	OpDeleteQoS2                      // PID released
)

var opNames = [...]string{"", "save-session", "delete-session", "save-msg", "delete-msg", "save-qos2", "delete-qos2"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && k != 0 {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one change to a session's stored state. Msg is the session's own message:
// encode it when the Op is applied, under the session's lock.
type Op struct {
	Kind OpKind
	MID  uint64
	PID  uint16
	Msg  *OutMsg
}

// Error is a protocol violation by the client, or its keepalive passing: the
// connection ends with Reason.
type Error struct {
	Reason packet.ReasonCode
	Text   string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%s)", e.Text, e.Reason) }

// Readies are pooled: most events make one, and the sessions of idle clients should
// not each keep theirs.
var readyPool = sync.Pool{New: func() any { return new(Ready) }}

// Release gives rd back once the driver has applied it; rd must not be used after.
func Release(rd *Ready) {
	if rd == nil {
		return
	}
	clear(rd.Packets)
	clear(rd.Publish)
	clear(rd.Subs)
	clear(rd.Persist)
	clear(rd.Retained)
	*rd = Ready{Packets: rd.Packets[:0], Publish: rd.Publish[:0], Subs: rd.Subs[:0], Persist: rd.Persist[:0], Retained: rd.Retained[:0]}
	readyPool.Put(rd)
}

// Empty reports whether rd asks for nothing.
func (rd *Ready) Empty() bool {
	return len(rd.Packets) == 0 && len(rd.Publish) == 0 && len(rd.Subs) == 0 && len(rd.Persist) == 0 &&
		len(rd.Retained) == 0 && !rd.Kick && rd.Close == nil && !rd.Ended
}
