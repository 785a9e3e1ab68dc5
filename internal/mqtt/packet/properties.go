package packet

import (
	"encoding/binary"
	"unicode/utf8"
)

// Properties are the MQTT 5 properties of a packet. Single-valued properties whose
// zero value means something have a Has flag; strings and byte slices are absent when
// empty. Decoded strings and slices may alias the decoder's input.
type Properties struct {
	PayloadFormat          byte
	HasPayloadFormat       bool
	MessageExpiry          uint32
	HasMessageExpiry       bool
	ContentType            string
	ResponseTopic          string
	CorrelationData        []byte
	SubscriptionIDs        []uint32 // PUBLISH may carry several; SUBSCRIBE at most one
	SessionExpiry          uint32
	HasSessionExpiry       bool
	AssignedClientID       string
	ServerKeepAlive        uint16
	HasServerKeepAlive     bool
	AuthMethod             string
	AuthData               []byte
	RequestProblemInfo     byte
	HasRequestProblemInfo  bool
	WillDelay              uint32
	HasWillDelay           bool
	RequestResponseInfo    byte
	HasRequestResponseInfo bool
	ResponseInfo           string
	ServerReference        string
	ReasonString           string
	ReceiveMaximum         uint16
	HasReceiveMaximum      bool
	TopicAliasMaximum      uint16
	HasTopicAliasMaximum   bool
	TopicAlias             uint16
	HasTopicAlias          bool
	MaximumQoS             byte
	HasMaximumQoS          bool
	RetainAvailable        byte
	HasRetainAvailable     bool
	UserProperties         []UserProperty
	MaximumPacketSize      uint32
	HasMaximumPacketSize   bool
	WildcardSubAvailable   byte
	HasWildcardSubAvail    bool
	SubIDAvailable         byte
	HasSubIDAvailable      bool
	SharedSubAvailable     byte
	HasSharedSubAvailable  bool
}

// Property identifiers.
const (
	propPayloadFormat       = 0x01
	propMessageExpiry       = 0x02
	propContentType         = 0x03
	propResponseTopic       = 0x08
	propCorrelationData     = 0x09
	propSubscriptionID      = 0x0B
	propSessionExpiry       = 0x11
	propAssignedClientID    = 0x12
	propServerKeepAlive     = 0x13
	propAuthMethod          = 0x15
	propAuthData            = 0x16
	propRequestProblemInfo  = 0x17
	propWillDelay           = 0x18
	propRequestResponseInfo = 0x19
	propResponseInfo        = 0x1A
	propServerReference     = 0x1C
	propReasonString        = 0x1F
	propReceiveMaximum      = 0x21
	propTopicAliasMaximum   = 0x22
	propTopicAlias          = 0x23
	propMaximumQoS          = 0x24
	propRetainAvailable     = 0x25
	propUserProperty        = 0x26
	propMaximumPacketSize   = 0x27
	propWildcardSubAvail    = 0x28
	propSubIDAvailable      = 0x29
	propSharedSubAvailable  = 0x2A
)

// Where a property may appear.
type propCtx uint16

const (
	ctxConnect propCtx = 1 << iota
	ctxConnack
	ctxPublish
	ctxWill
	ctxAck // PUBACK, PUBREC, PUBREL, PUBCOMP
	ctxSubscribe
	ctxSuback
	ctxUnsubscribe
	ctxUnsuback
	ctxDisconnect
	ctxAuth
)

var allowed = map[byte]propCtx{
	propPayloadFormat:       ctxPublish | ctxWill,
	propMessageExpiry:       ctxPublish | ctxWill,
	propContentType:         ctxPublish | ctxWill,
	propResponseTopic:       ctxPublish | ctxWill,
	propCorrelationData:     ctxPublish | ctxWill,
	propSubscriptionID:      ctxPublish | ctxSubscribe,
	propSessionExpiry:       ctxConnect | ctxConnack | ctxDisconnect,
	propAssignedClientID:    ctxConnack,
	propServerKeepAlive:     ctxConnack,
	propAuthMethod:          ctxConnect | ctxConnack | ctxAuth,
	propAuthData:            ctxConnect | ctxConnack | ctxAuth,
	propRequestProblemInfo:  ctxConnect,
	propWillDelay:           ctxWill,
	propRequestResponseInfo: ctxConnect,
	propResponseInfo:        ctxConnack,
	propServerReference:     ctxConnack | ctxDisconnect,
	propReasonString:        ctxConnack | ctxAck | ctxSuback | ctxUnsuback | ctxDisconnect | ctxAuth,
	propReceiveMaximum:      ctxConnect | ctxConnack,
	propTopicAliasMaximum:   ctxConnect | ctxConnack,
	propTopicAlias:          ctxPublish,
	propMaximumQoS:          ctxConnack,
	propRetainAvailable:     ctxConnack,
	propUserProperty:        ctxConnect | ctxConnack | ctxPublish | ctxWill | ctxAck | ctxSubscribe | ctxSuback | ctxUnsubscribe | ctxUnsuback | ctxDisconnect | ctxAuth,
	propMaximumPacketSize:   ctxConnect | ctxConnack,
	propWildcardSubAvail:    ctxConnack,
	propSubIDAvailable:      ctxConnack,
	propSharedSubAvailable:  ctxConnack,
}

// decoder reads the body of one packet.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) byte1(what string) (byte, error) {
	if d.left() < 1 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := d.b[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16(what string) (uint16, error) {
	if d.left() < 2 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	if d.left() < 4 {
		return 0, malformed("%s: packet ends early", what)
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) varint(what string) (uint32, error) {
	var v uint32
	for i := 0; i < 4; i++ {
		if d.left() < 1 {
			return 0, malformed("%s: packet ends early", what)
		}
		c := d.b[d.off]
		d.off++
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, malformed("%s: variable byte integer longer than 4 bytes", what)
}

func (d *decoder) binary(what string) ([]byte, error) {
	n, err := d.u16(what)
	if err != nil {
		return nil, err
	}
	if d.left() < int(n) {
		return nil, malformed("%s: length %d past the end of the packet", what, n)
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v, nil
}

// str reads a UTF-8 string: valid UTF-8 with no U+0000.
func (d *decoder) str(what string) (string, error) {
	b, err := d.binary(what)
	if err != nil {
		return "", err
	}
	if err := checkUTF8(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

func checkUTF8(b []byte, what string) error {
	if !utf8.Valid(b) {
		return malformed("%s: not valid UTF-8", what)
	}
	for _, c := range b {
		if c == 0 {
			return malformed("%s: contains U+0000", what)
		}
	}
	return nil
}

// props reads a property block allowed in ctx into p.
func (d *decoder) props(p *Properties, ctx propCtx, what string) error {
	n, err := d.varint(what + " properties length")
	if err != nil {
		return err
	}
	if d.left() < int(n) {
		return malformed("%s: properties length %d past the end of the packet", what, n)
	}
	end := d.off + int(n)
	sub := decoder{b: d.b[:end], off: d.off}
	var seen [64]bool
	for sub.off < end {
		idv, err := sub.varint(what + " property id")
		if err != nil {
			return err
		}
		if idv > 0x7f || allowed[byte(idv)]&ctx == 0 {
			return protoErr("%s: property 0x%02X not allowed here", what, idv)
		}
		id := byte(idv)
		if id != propUserProperty && !(id == propSubscriptionID && ctx == ctxPublish) {
			if seen[id] {
				return protoErr("%s: property 0x%02X given twice", what, id)
			}
			seen[id] = true
		}
		if err := sub.prop(p, id, what); err != nil {
			return err
		}
	}
	if sub.off != end {
		return malformed("%s: property overruns its block", what)
	}
	d.off = end
	return nil
}

func (d *decoder) flag(what string) (byte, error) {
	v, err := d.byte1(what)
	if err == nil && v > 1 {
		return 0, protoErr("%s: value %d, want 0 or 1", what, v)
	}
	return v, err
}

func (d *decoder) prop(p *Properties, id byte, what string) (err error) {
	switch id {
	case propPayloadFormat:
		p.PayloadFormat, err = d.flag("payload format indicator")
		p.HasPayloadFormat = true
	case propMessageExpiry:
		p.MessageExpiry, err = d.u32("message expiry")
		p.HasMessageExpiry = true
	case propContentType:
		p.ContentType, err = d.str("content type")
	case propResponseTopic:
		p.ResponseTopic, err = d.str("response topic")
		if err == nil && !validTopic(p.ResponseTopic) {
			err = protoErr("response topic %q is not a topic name", p.ResponseTopic)
		}
	case propCorrelationData:
		p.CorrelationData, err = d.binary("correlation data")
	case propSubscriptionID:
		var v uint32
		if v, err = d.varint("subscription identifier"); err == nil && v == 0 {
			err = protoErr("subscription identifier 0")
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, v)
	case propSessionExpiry:
		p.SessionExpiry, err = d.u32("session expiry")
		p.HasSessionExpiry = true
	case propAssignedClientID:
		p.AssignedClientID, err = d.str("assigned client identifier")
	case propServerKeepAlive:
		p.ServerKeepAlive, err = d.u16("server keep alive")
		p.HasServerKeepAlive = true
	case propAuthMethod:
		p.AuthMethod, err = d.str("authentication method")
	case propAuthData:
		p.AuthData, err = d.binary("authentication data")
	case propRequestProblemInfo:
		p.RequestProblemInfo, err = d.flag("request problem information")
		p.HasRequestProblemInfo = true
	case propWillDelay:
		p.WillDelay, err = d.u32("will delay")
		p.HasWillDelay = true
	case propRequestResponseInfo:
		p.RequestResponseInfo, err = d.flag("request response information")
		p.HasRequestResponseInfo = true
	case propResponseInfo:
		p.ResponseInfo, err = d.str("response information")
	case propServerReference:
		p.ServerReference, err = d.str("server reference")
	case propReasonString:
		p.ReasonString, err = d.str("reason string")
	case propReceiveMaximum:
		if p.ReceiveMaximum, err = d.u16("receive maximum"); err == nil && p.ReceiveMaximum == 0 {
			err = protoErr("receive maximum 0")
		}
		p.HasReceiveMaximum = true
	case propTopicAliasMaximum:
		p.TopicAliasMaximum, err = d.u16("topic alias maximum")
		p.HasTopicAliasMaximum = true
	case propTopicAlias:
		if p.TopicAlias, err = d.u16("topic alias"); err == nil && p.TopicAlias == 0 {
			err = &Error{Reason: TopicAliasInvalid, Msg: "topic alias 0"}
		}
		p.HasTopicAlias = true
	case propMaximumQoS:
		p.MaximumQoS, err = d.flag("maximum QoS")
		p.HasMaximumQoS = true
	case propRetainAvailable:
		p.RetainAvailable, err = d.flag("retain available")
		p.HasRetainAvailable = true
	case propUserProperty:
		var k, v string
		if k, err = d.str("user property key"); err == nil {
			v, err = d.str("user property value")
		}
		p.UserProperties = append(p.UserProperties, UserProperty{k, v})
	case propMaximumPacketSize:
		if p.MaximumPacketSize, err = d.u32("maximum packet size"); err == nil && p.MaximumPacketSize == 0 {
			err = protoErr("maximum packet size 0")
		}
		p.HasMaximumPacketSize = true
	case propWildcardSubAvail:
		p.WildcardSubAvailable, err = d.flag("wildcard subscription available")
		p.HasWildcardSubAvail = true
	case propSubIDAvailable:
		p.SubIDAvailable, err = d.flag("subscription identifier available")
		p.HasSubIDAvailable = true
	case propSharedSubAvailable:
		p.SharedSubAvailable, err = d.flag("shared subscription available")
		p.HasSharedSubAvailable = true
	}
	return err
}

// ---------------------------------------------------------------------------------
// Encoding

func varintLen(v uint32) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	}
	return 4
}

func appendVarint(dst []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }
func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
func appendStr[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

// propsLen is the encoded size of p's properties, without the length prefix.
func propsLen(p *Properties) int {
	n := 0
	str := func(s string) {
		if s != "" {
			n += 3 + len(s)
		}
	}
	bin := func(b []byte) {
		if len(b) > 0 {
			n += 3 + len(b)
		}
	}
	if p.HasPayloadFormat {
		n += 2
	}
	if p.HasMessageExpiry {
		n += 5
	}
	str(p.ContentType)
	str(p.ResponseTopic)
	bin(p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		n += 1 + varintLen(id)
	}
	if p.HasSessionExpiry {
		n += 5
	}
	str(p.AssignedClientID)
	if p.HasServerKeepAlive {
		n += 3
	}
	str(p.AuthMethod)
	bin(p.AuthData)
	if p.HasRequestProblemInfo {
		n += 2
	}
	if p.HasWillDelay {
		n += 5
	}
	if p.HasRequestResponseInfo {
		n += 2
	}
	str(p.ResponseInfo)
	str(p.ServerReference)
	str(p.ReasonString)
	if p.HasReceiveMaximum {
		n += 3
	}
	if p.HasTopicAliasMaximum {
		n += 3
	}
	if p.HasTopicAlias {
		n += 3
	}
	if p.HasMaximumQoS {
		n += 2
	}
	if p.HasRetainAvailable {
		n += 2
	}
	for _, up := range p.UserProperties {
		n += 5 + len(up.Key) + len(up.Value)
	}
	if p.HasMaximumPacketSize {
		n += 5
	}
	if p.HasWildcardSubAvail {
		n += 2
	}
	if p.HasSubIDAvailable {
		n += 2
	}
	if p.HasSharedSubAvailable {
		n += 2
	}
	return n
}

// appendProps appends p's properties with their length prefix; n is propsLen(p).
func appendProps(dst []byte, p *Properties, n int) []byte {
	dst = appendVarint(dst, uint32(n))
	if n == 0 {
		return dst
	}
	str := func(id byte, s string) {
		if s != "" {
			dst = appendStr(append(dst, id), s)
		}
	}
	bin := func(id byte, b []byte) {
		if len(b) > 0 {
			dst = appendStr(append(dst, id), b)
		}
	}
	if p.HasPayloadFormat {
		dst = append(dst, propPayloadFormat, p.PayloadFormat)
	}
	if p.HasMessageExpiry {
		dst = appendU32(append(dst, propMessageExpiry), p.MessageExpiry)
	}
	str(propContentType, p.ContentType)
	str(propResponseTopic, p.ResponseTopic)
	bin(propCorrelationData, p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		dst = appendVarint(append(dst, propSubscriptionID), id)
	}
	if p.HasSessionExpiry {
		dst = appendU32(append(dst, propSessionExpiry), p.SessionExpiry)
	}
	str(propAssignedClientID, p.AssignedClientID)
	if p.HasServerKeepAlive {
		dst = appendU16(append(dst, propServerKeepAlive), p.ServerKeepAlive)
	}
	str(propAuthMethod, p.AuthMethod)
	bin(propAuthData, p.AuthData)
	if p.HasRequestProblemInfo {
		dst = append(dst, propRequestProblemInfo, p.RequestProblemInfo)
	}
	if p.HasWillDelay {
		dst = appendU32(append(dst, propWillDelay), p.WillDelay)
	}
	if p.HasRequestResponseInfo {
		dst = append(dst, propRequestResponseInfo, p.RequestResponseInfo)
	}
	str(propResponseInfo, p.ResponseInfo)
	str(propServerReference, p.ServerReference)
	str(propReasonString, p.ReasonString)
	if p.HasReceiveMaximum {
		dst = appendU16(append(dst, propReceiveMaximum), p.ReceiveMaximum)
	}
	if p.HasTopicAliasMaximum {
		dst = appendU16(append(dst, propTopicAliasMaximum), p.TopicAliasMaximum)
	}
	if p.HasTopicAlias {
		dst = appendU16(append(dst, propTopicAlias), p.TopicAlias)
	}
	if p.HasMaximumQoS {
		dst = append(dst, propMaximumQoS, p.MaximumQoS)
	}
	if p.HasRetainAvailable {
		dst = append(dst, propRetainAvailable, p.RetainAvailable)
	}
	for _, up := range p.UserProperties {
		dst = appendStr(appendStr(append(dst, propUserProperty), up.Key), up.Value)
	}
	if p.HasMaximumPacketSize {
		dst = appendU32(append(dst, propMaximumPacketSize), p.MaximumPacketSize)
	}
	if p.HasWildcardSubAvail {
		dst = append(dst, propWildcardSubAvail, p.WildcardSubAvailable)
	}
	if p.HasSubIDAvailable {
		dst = append(dst, propSubIDAvailable, p.SubIDAvailable)
	}
	if p.HasSharedSubAvailable {
		dst = append(dst, propSharedSubAvailable, p.SharedSubAvailable)
	}
	return dst
}
