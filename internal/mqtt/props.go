package mqtt

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// MQTT 5 message properties travel through the broker as Tern headers, so native
// subscribers and streams see them and native publishers can set them. User
// properties are headers of the same key and value, in order; the others use these
// keys.
const (
	HeaderContentType   = "Content-Type"
	HeaderPayloadFormat = "Tern-Payload-Format" // "1": the payload is UTF-8 text
	HeaderCorrelation   = "Tern-Correlation"    // correlation data, raw bytes
	HeaderExpires       = "Tern-Expires"        // Unix time in milliseconds when the message expires
)

// appendPropsHeader appends the header block that carries a PUBLISH's properties.
func appendPropsHeader(dst []byte, p *packet.Properties, now time.Time) []byte {
	for _, up := range p.UserProperties {
		dst = header.Append(dst, up.Key, up.Value)
	}
	if p.ContentType != "" {
		dst = header.Append(dst, HeaderContentType, p.ContentType)
	}
	if p.HasPayloadFormat && p.PayloadFormat == 1 {
		dst = header.Append(dst, HeaderPayloadFormat, "1")
	}
	if len(p.CorrelationData) > 0 {
		dst = header.Append(dst, []byte(HeaderCorrelation), p.CorrelationData)
	}
	if p.HasMessageExpiry {
		at := now.Add(time.Duration(p.MessageExpiry) * time.Second).UnixMilli()
		dst = header.Append(dst, HeaderExpires, strconv.FormatInt(at, 10))
	}
	return dst
}

// expiryOf returns when a message with header block h expires, in Unix nanoseconds,
// or 0 if it does not.
func expiryOf(h []byte) int64 {
	if len(h) == 0 {
		return 0
	}
	v, ok := header.Block(h).Lookup(HeaderExpires)
	if !ok {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return ms * int64(time.Millisecond)
}

// bytesString views b as a string without copying; the string is valid only while b
// is unchanged, which holds for the duration of one encode.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// fillProps sets a PUBLISH's properties from the message header block (reusing p's
// user-property slice). The strings alias h.
func fillProps(p *packet.Properties, h []byte) {
	ups := p.UserProperties[:0]
	*p = packet.Properties{}
	header.Block(h).Each(func(k, v []byte) bool {
		switch bytesString(k) {
		case HeaderContentType:
			p.ContentType = bytesString(v)
		case HeaderPayloadFormat:
			p.PayloadFormat, p.HasPayloadFormat = 1, bytesString(v) == "1"
		case HeaderCorrelation:
			p.CorrelationData = v
		case HeaderExpires:
			// Turned into the remaining message expiry by the caller.
		default:
			ups = append(ups, packet.UserProperty{Key: bytesString(k), Value: bytesString(v)})
		}
		return true
	})
	p.UserProperties = ups
}
