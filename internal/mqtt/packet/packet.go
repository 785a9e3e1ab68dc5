// Package packet encodes and decodes MQTT 3.1, 3.1.1 and 5.0 control packets.
//
// Decode and Reader validate everything the specifications say a receiver must:
// fixed-header flags, remaining lengths that match their content, UTF-8 strings,
// which properties each packet may carry and their values. A violation is an *Error
// whose Reason is the MQTT 5 reason code a server sends before closing (for 3.x the
// caller just closes). Per-subscription checks (ValidFilter, ParseShared) are left to
// the caller because MQTT 5 answers them in the SUBACK rather than by disconnecting.
package packet

import "fmt"

// Type is a control packet type, the high nibble of the first byte.
type Type byte

// Control packet types.
const (
	TypeConnect     Type = 1
	TypeConnack     Type = 2
	TypePublish     Type = 3
	TypePuback      Type = 4
	TypePubrec      Type = 5
	TypePubrel      Type = 6
	TypePubcomp     Type = 7
	TypeSubscribe   Type = 8
	TypeSuback      Type = 9
	TypeUnsubscribe Type = 10
	TypeUnsuback    Type = 11
	TypePingreq     Type = 12
	TypePingresp    Type = 13
	TypeDisconnect  Type = 14
	TypeAuth        Type = 15
)

var typeNames = [...]string{"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", byte(t))
}

// Protocol levels.
const (
	V31  byte = 3 // MQTT 3.1, protocol name "MQIsdp"
	V311 byte = 4 // MQTT 3.1.1
	V5   byte = 5 // MQTT 5.0
)

// MaxRemainingLength is the largest remaining length the 4-byte encoding can say.
const MaxRemainingLength = 268435455

// Error is a malformed or protocol-violating packet. Reason is what an MQTT 5 server
// tells the client in CONNACK or DISCONNECT before closing.
type Error struct {
	Reason ReasonCode
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("mqtt: %s: %s", e.Reason, e.Msg) }

func malformed(format string, args ...any) *Error {
	return &Error{Reason: MalformedPacket, Msg: fmt.Sprintf(format, args...)}
}

func protoErr(format string, args ...any) *Error {
	return &Error{Reason: ProtocolError, Msg: fmt.Sprintf(format, args...)}
}

// Packet is one of *Connect, *Connack, *Publish, *Ack, *Subscribe, *Suback,
// *Unsubscribe, *Unsuback, *Pingreq, *Pingresp, *Disconnect or *Auth.
type Packet interface{ PacketType() Type }

// UserProperty is one MQTT 5 user property; keys may repeat and order is kept.
type UserProperty struct{ Key, Value string }

// Connect is a CONNECT packet.
type Connect struct {
	ProtocolName  string
	ProtocolLevel byte // V31, V311 or V5
	CleanStart    bool // "clean session" in 3.x
	KeepAlive     uint16
	Props         Properties
	ClientID      string
	WillFlag      bool
	WillQoS       byte
	WillRetain    bool
	WillProps     Properties
	WillTopic     string
	WillPayload   []byte
	Username      string
	HasUsername   bool
	Password      []byte
	HasPassword   bool
}

// Connack is a CONNACK packet. For 3.x, Reason holds the return code byte.
type Connack struct {
	SessionPresent bool
	Reason         ReasonCode
	Props          Properties
}

// Publish is a PUBLISH packet.
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    string
	PacketID uint16 // QoS 1 and 2 only
	Props    Properties
	Payload  []byte
}

// Ack is a PUBACK, PUBREC, PUBREL or PUBCOMP packet.
type Ack struct {
	Type     Type
	PacketID uint16
	Reason   ReasonCode // MQTT 5 only
	Props    Properties
}

// Subscription is one filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            string
	QoS               byte
	NoLocal           bool // MQTT 5
	RetainAsPublished bool // MQTT 5
	RetainHandling    byte // MQTT 5: 0 send retained, 1 only for new subscriptions, 2 never
}

// Subscribe is a SUBSCRIBE packet.
type Subscribe struct {
	PacketID uint16
	Props    Properties
	Subs     []Subscription
}

// Suback is a SUBACK packet; for 3.x the reasons are 0, 1, 2 or 0x80.
type Suback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Unsubscribe is an UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  []string
}

// Unsuback is an UNSUBACK packet; reasons exist on the wire only in MQTT 5.
type Unsuback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Pingreq is a PINGREQ packet.
type Pingreq struct{}

// Pingresp is a PINGRESP packet.
type Pingresp struct{}

// Disconnect is a DISCONNECT packet (reason and properties in MQTT 5 only).
type Disconnect struct {
	Reason ReasonCode
	Props  Properties
}

// Auth is an MQTT 5 AUTH packet.
type Auth struct {
	Reason ReasonCode
	Props  Properties
}

func (*Connect) PacketType() Type     { return TypeConnect }
func (*Connack) PacketType() Type     { return TypeConnack }
func (*Publish) PacketType() Type     { return TypePublish }
func (a *Ack) PacketType() Type       { return a.Type }
func (*Subscribe) PacketType() Type   { return TypeSubscribe }
func (*Suback) PacketType() Type      { return TypeSuback }
func (*Unsubscribe) PacketType() Type { return TypeUnsubscribe }
func (*Unsuback) PacketType() Type    { return TypeUnsuback }
func (*Pingreq) PacketType() Type     { return TypePingreq }
func (*Pingresp) PacketType() Type    { return TypePingresp }
func (*Disconnect) PacketType() Type  { return TypeDisconnect }
func (*Auth) PacketType() Type        { return TypeAuth }
