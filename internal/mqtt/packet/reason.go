package packet

import "fmt"

// ReasonCode is an MQTT 5 reason code. Values below 0x80 report success.
type ReasonCode byte

// MQTT 5 reason codes. 0x00 is Success, "normal disconnection" and "granted QoS 0"
// alike.
const (
	Success                             ReasonCode = 0x00
	GrantedQoS0                         ReasonCode = 0x00
	GrantedQoS1                         ReasonCode = 0x01
	GrantedQoS2                         ReasonCode = 0x02
	DisconnectWithWill                  ReasonCode = 0x04
	NoMatchingSubscribers               ReasonCode = 0x10
	NoSubscriptionExisted               ReasonCode = 0x11
	ContinueAuthentication              ReasonCode = 0x18
	ReAuthenticate                      ReasonCode = 0x19
	UnspecifiedError                    ReasonCode = 0x80
	MalformedPacket                     ReasonCode = 0x81
	ProtocolError                       ReasonCode = 0x82
	ImplementationSpecificError         ReasonCode = 0x83
	UnsupportedProtocolVersion          ReasonCode = 0x84
	ClientIdentifierNotValid            ReasonCode = 0x85
	BadUserNameOrPassword               ReasonCode = 0x86
	NotAuthorized                       ReasonCode = 0x87
	ServerUnavailable                   ReasonCode = 0x88
	ServerBusy                          ReasonCode = 0x89
	Banned                              ReasonCode = 0x8A
	ServerShuttingDown                  ReasonCode = 0x8B
	BadAuthenticationMethod             ReasonCode = 0x8C
	KeepAliveTimeout                    ReasonCode = 0x8D
	SessionTakenOver                    ReasonCode = 0x8E
	TopicFilterInvalid                  ReasonCode = 0x8F
	TopicNameInvalid                    ReasonCode = 0x90
	PacketIdentifierInUse               ReasonCode = 0x91
	PacketIdentifierNotFound            ReasonCode = 0x92
	ReceiveMaximumExceeded              ReasonCode = 0x93
	TopicAliasInvalid                   ReasonCode = 0x94
	PacketTooLarge                      ReasonCode = 0x95
	MessageRateTooHigh                  ReasonCode = 0x96
	QuotaExceeded                       ReasonCode = 0x97
	AdministrativeAction                ReasonCode = 0x98
	PayloadFormatInvalid                ReasonCode = 0x99
	RetainNotSupported                  ReasonCode = 0x9A
	QoSNotSupported                     ReasonCode = 0x9B
	UseAnotherServer                    ReasonCode = 0x9C
	ServerMoved                         ReasonCode = 0x9D
	SharedSubscriptionsNotSupported     ReasonCode = 0x9E
	ConnectionRateExceeded              ReasonCode = 0x9F
	MaximumConnectTime                  ReasonCode = 0xA0
	SubscriptionIdentifiersNotSupported ReasonCode = 0xA1
	WildcardSubscriptionsNotSupported   ReasonCode = 0xA2
)

var reasonNames = [256]string{
	Success: "success", GrantedQoS1: "granted QoS 1", GrantedQoS2: "granted QoS 2",
	DisconnectWithWill: "disconnect with will message", NoMatchingSubscribers: "no matching subscribers",
	NoSubscriptionExisted: "no subscription existed", ContinueAuthentication: "continue authentication",
	ReAuthenticate: "re-authenticate", UnspecifiedError: "unspecified error", MalformedPacket: "malformed packet",
	ProtocolError: "protocol error", ImplementationSpecificError: "implementation specific error",
	UnsupportedProtocolVersion: "unsupported protocol version", ClientIdentifierNotValid: "client identifier not valid",
	BadUserNameOrPassword: "bad user name or password", NotAuthorized: "not authorized",
	ServerUnavailable: "server unavailable", ServerBusy: "server busy", Banned: "banned",
	ServerShuttingDown: "server shutting down", BadAuthenticationMethod: "bad authentication method",
	KeepAliveTimeout: "keep alive timeout", SessionTakenOver: "session taken over",
	TopicFilterInvalid: "topic filter invalid", TopicNameInvalid: "topic name invalid",
	PacketIdentifierInUse: "packet identifier in use", PacketIdentifierNotFound: "packet identifier not found",
	ReceiveMaximumExceeded: "receive maximum exceeded", TopicAliasInvalid: "topic alias invalid",
	PacketTooLarge: "packet too large", MessageRateTooHigh: "message rate too high", QuotaExceeded: "quota exceeded",
	AdministrativeAction: "administrative action", PayloadFormatInvalid: "payload format invalid",
	RetainNotSupported: "retain not supported", QoSNotSupported: "QoS not supported",
	UseAnotherServer: "use another server", ServerMoved: "server moved",
	SharedSubscriptionsNotSupported: "shared subscriptions not supported",
	ConnectionRateExceeded:          "connection rate exceeded", MaximumConnectTime: "maximum connect time",
	SubscriptionIdentifiersNotSupported: "subscription identifiers not supported",
	WildcardSubscriptionsNotSupported:   "wildcard subscriptions not supported",
}

func (r ReasonCode) String() string {
	if n := reasonNames[r]; n != "" {
		return fmt.Sprintf("%s (0x%02X)", n, byte(r))
	}
	return fmt.Sprintf("reason 0x%02X", byte(r))
}

// MQTT 3.x CONNACK return codes. 6 to 255 are reserved.
const (
	ConnAccepted                 byte = 0
	ConnRefusedVersion           byte = 1
	ConnRefusedIdentifier        byte = 2
	ConnRefusedServerUnavailable byte = 3
	ConnRefusedBadCredentials    byte = 4
	ConnRefusedNotAuthorized     byte = 5
)

// V3ConnackCode maps an MQTT 5 CONNACK reason to the nearest 3.x return code; a
// failure 3.x has no word for becomes "server unavailable".
func V3ConnackCode(r ReasonCode) byte {
	switch r {
	case Success:
		return ConnAccepted
	case UnsupportedProtocolVersion:
		return ConnRefusedVersion
	case ClientIdentifierNotValid:
		return ConnRefusedIdentifier
	case BadUserNameOrPassword, BadAuthenticationMethod:
		return ConnRefusedBadCredentials
	case NotAuthorized, Banned:
		return ConnRefusedNotAuthorized
	default:
		return ConnRefusedServerUnavailable
	}
}

// reasonSet is a set of reason codes, one bit each.
type reasonSet [4]uint64

func makeReasonSet(codes ...ReasonCode) (s reasonSet) {
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

func (s *reasonSet) has(r ReasonCode) bool { return s[r>>6]&(1<<(r&63)) != 0 }

// The reason codes each MQTT 5 packet type may carry (the tables in sections 3.2.2.2,
// 3.4.2.1 to 3.7.2.1, 3.9.3, 3.11.3, 3.14.2.1 and 3.15.2.1). A sender must use one of
// them, so anything else is a protocol error.
var (
	connackReasons = makeReasonSet(Success, UnspecifiedError, MalformedPacket, ProtocolError,
		ImplementationSpecificError, UnsupportedProtocolVersion, ClientIdentifierNotValid,
		BadUserNameOrPassword, NotAuthorized, ServerUnavailable, ServerBusy, Banned,
		BadAuthenticationMethod, TopicNameInvalid, PacketTooLarge, QuotaExceeded,
		PayloadFormatInvalid, RetainNotSupported, QoSNotSupported, UseAnotherServer, ServerMoved,
		ConnectionRateExceeded)
	pubackReasons = makeReasonSet(Success, NoMatchingSubscribers, UnspecifiedError, // PUBACK and PUBREC
		ImplementationSpecificError, NotAuthorized, TopicNameInvalid, PacketIdentifierInUse,
		QuotaExceeded, PayloadFormatInvalid)
	pubrelReasons = makeReasonSet(Success, PacketIdentifierNotFound) // PUBREL and PUBCOMP
	subackReasons = makeReasonSet(GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse,
		QuotaExceeded, SharedSubscriptionsNotSupported, SubscriptionIdentifiersNotSupported,
		WildcardSubscriptionsNotSupported)
	unsubackReasons = makeReasonSet(Success, NoSubscriptionExisted, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse)
	disconnectReasons = makeReasonSet(Success, DisconnectWithWill, UnspecifiedError, MalformedPacket,
		ProtocolError, ImplementationSpecificError, NotAuthorized, ServerBusy, ServerShuttingDown,
		KeepAliveTimeout, SessionTakenOver, TopicFilterInvalid, TopicNameInvalid,
		ReceiveMaximumExceeded, TopicAliasInvalid, PacketTooLarge, MessageRateTooHigh, QuotaExceeded,
		AdministrativeAction, PayloadFormatInvalid, RetainNotSupported, QoSNotSupported,
		UseAnotherServer, ServerMoved, SharedSubscriptionsNotSupported, ConnectionRateExceeded,
		MaximumConnectTime, SubscriptionIdentifiersNotSupported, WildcardSubscriptionsNotSupported)
	authReasons = makeReasonSet(Success, ContinueAuthentication, ReAuthenticate)

	// 3.1.1 SUBACK return codes; 3.1 knows only the first three but 0x80 is what a
	// failure looks like to every 3.x client in practice.
	v3SubackReasons = makeReasonSet(0x00, 0x01, 0x02, 0x80)
)

// ValidReason reports whether an MQTT 5 packet of type t may carry reason r.
// Packets without a reason code (and 3.x packets) allow only Success.
func ValidReason(t Type, r ReasonCode) bool {
	switch t {
	case TypeConnack:
		return connackReasons.has(r)
	case TypePuback, TypePubrec:
		return pubackReasons.has(r)
	case TypePubrel, TypePubcomp:
		return pubrelReasons.has(r)
	case TypeSuback:
		return subackReasons.has(r)
	case TypeUnsuback:
		return unsubackReasons.has(r)
	case TypeDisconnect:
		return disconnectReasons.has(r)
	case TypeAuth:
		return authReasons.has(r)
	}
	return r == Success
}
