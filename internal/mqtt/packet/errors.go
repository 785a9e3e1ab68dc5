package packet

import "fmt"

// Error is a malformed or protocol-violating packet. Reason is what an MQTT 5 server
// tells the client in CONNACK or DISCONNECT before closing: MalformedPacket,
// ProtocolError, PacketTooLarge, UnsupportedProtocolVersion, TopicNameInvalid,
// TopicAliasInvalid or PayloadFormatInvalid.
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

// violation is for the rules 3.1.1 calls malformed and MQTT 5 a protocol error:
// either way the connection closes, but a v5 peer is told which.
func violation(version byte, format string, args ...any) *Error {
	if version == V5 {
		return protoErr(format, args...)
	}
	return malformed(format, args...)
}

// checkVersion rejects a protocol level the caller made up; 0 means "before CONNECT".
func checkVersion(version byte) error {
	switch version {
	case 0, V31, V311, V5:
		return nil
	}
	return fmt.Errorf("mqtt: unsupported protocol version %d (want 0, %d, %d or %d)", version, V31, V311, V5)
}
