// Package packet encodes and decodes MQTT 3.1, 3.1.1 and 5.0 control packets.
//
// MQTT 3.1 is protocol name "MQIsdp" at level 3 and is otherwise handled like 3.1.1
// (level 4); MQTT 5.0 is level 5. One codec serves both ends of a connection: Decode
// and Reader check the structure of every packet type, whichever side sent it.
//
// # Validation
//
// Decode and Reader reject everything the specifications make a receiver reject from
// the bytes alone: reserved fixed-header flags, remaining lengths that disagree with
// the content, ill-formed UTF-8 or U+0000 in strings, missing or surplus fields,
// properties a packet type may not carry, repeated single-valued properties, values
// out of range and reason codes a packet type may not use. A violation is an *Error
// whose Reason is the MQTT 5 reason code a server sends in CONNACK or DISCONNECT
// before it closes; a 3.x peer is simply disconnected.
//
// Where 3.1.1 calls a violation malformed and 5.0 calls the same thing a protocol
// error (DUP on a QoS 0 PUBLISH, packet identifier 0, subscription QoS 3), the Reason
// follows the connection's version.
//
// Some rules need state or are answered per item rather than by disconnecting; they
// are left to the caller:
//   - each SUBSCRIBE filter with ValidFilter and ParseShared (MQTT 5 answers a bad
//     filter with 0x8F in its SUBACK slot); No Local on a shared subscription is a
//     protocol error the caller reports;
//   - UNSUBSCRIBE filters likewise;
//   - a Topic Alias above the negotiated maximum, an alias never set, a Subscription
//     Identifier in a PUBLISH sent by a client, a Session Expiry in DISCONNECT after
//     CONNECT said 0, the AUTH method matching the CONNECT's;
//   - a second CONNECT: the Reader only knows about it once SetVersion is called.
//
// # Memory
//
// Byte slices in decoded packets (payloads, correlation and authentication data,
// passwords) alias the input; strings are copied. Reader reuses its buffer and one
// *Publish, so what ReadPacket returns is valid only until its next call.
//
// # Properties
//
// Properties are written only for MQTT 5. String and binary properties are absent
// when empty; the others have a Has flag, since their zero value means something.
package packet

import "fmt"

// Type is a control packet type, the high nibble of the first byte.
type Type byte

// Control packet types. They carry a Type prefix because Connect, Publish and most
// others name the packet structs.
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

// MaxRemainingLength is the largest remaining length the 4-byte encoding can say;
// it is also the largest Variable Byte Integer (a Subscription Identifier, say).
const MaxRemainingLength = 268435455

// Packet is one of *Connect, *Connack, *Publish, *Ack, *Subscribe, *Suback,
// *Unsubscribe, *Unsuback, *Pingreq, *Pingresp, *Disconnect or *Auth.
type Packet interface{ PacketType() Type }

// Connect is a CONNECT packet.
type Connect struct {
	ProtocolName  string // "MQTT", or "MQIsdp" for 3.1; Append fills it in when empty
	ProtocolLevel byte   // V31, V311 or V5
	CleanStart    bool   // "clean session" in 3.x
	KeepAlive     uint16
	Props         Properties
	ClientID      string // may be empty; whether that is acceptable is the server's call
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

// Connack is a CONNACK packet. For 3.x, Reason holds the return code byte (see
// V3ConnackCode) and Props is not sent.
type Connack struct {
	SessionPresent bool // not on the wire in 3.1
	Reason         ReasonCode
	Props          Properties
}

// Publish is a PUBLISH packet.
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    string // may be empty in MQTT 5 when Props.HasTopicAlias
	PacketID uint16 // QoS 1 and 2 only
	Props    Properties
	Payload  []byte
}

// Ack is a PUBACK, PUBREC, PUBREL or PUBCOMP packet.
type Ack struct {
	Type     Type // TypePuback, TypePubrec, TypePubrel or TypePubcomp
	PacketID uint16
	Reason   ReasonCode // MQTT 5 only
	Props    Properties
}

// Subscription is one filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            string // not checked by Decode: call ValidFilter
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
