package packet

import "fmt"

// Properties are the MQTT 5 properties of a packet. Single-valued properties whose
// zero value means something have a Has flag (flags rather than pointers, so decoding
// allocates nothing for them); strings and byte slices are absent when empty. Byte
// slices decoded from the wire alias the input.
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
	UserProperties         []UserProperty // order kept, keys may repeat
	MaximumPacketSize      uint32
	HasMaximumPacketSize   bool
	WildcardSubAvailable   byte
	HasWildcardSubAvail    bool
	SubIDAvailable         byte
	HasSubIDAvailable      bool
	SharedSubAvailable     byte
	HasSharedSubAvailable  bool
}

// UserProperty is one MQTT 5 user property.
type UserProperty struct{ Key, Value string }

// Property identifiers (section 2.2.2.2).
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

// propCtx is a set of places a property may appear.
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

// allowed is table 2-4: where each property may appear. An identifier with no entry
// is unknown.
var allowed = [...]propCtx{
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

var propNames = [len(allowed)]string{
	propPayloadFormat: "payload format indicator", propMessageExpiry: "message expiry interval",
	propContentType: "content type", propResponseTopic: "response topic", propCorrelationData: "correlation data",
	propSubscriptionID: "subscription identifier", propSessionExpiry: "session expiry interval",
	propAssignedClientID: "assigned client identifier", propServerKeepAlive: "server keep alive",
	propAuthMethod: "authentication method", propAuthData: "authentication data",
	propRequestProblemInfo: "request problem information", propWillDelay: "will delay interval",
	propRequestResponseInfo: "request response information", propResponseInfo: "response information",
	propServerReference: "server reference", propReasonString: "reason string",
	propReceiveMaximum: "receive maximum", propTopicAliasMaximum: "topic alias maximum",
	propTopicAlias: "topic alias", propMaximumQoS: "maximum QoS", propRetainAvailable: "retain available",
	propUserProperty: "user property", propMaximumPacketSize: "maximum packet size",
	propWildcardSubAvail: "wildcard subscription available", propSubIDAvailable: "subscription identifier available",
	propSharedSubAvailable: "shared subscription available",
}

// withContext prefixes an *Error's message with where it happened. Only error paths
// pay for the concatenation.
func withContext(what string, err error) error {
	if e, ok := err.(*Error); ok {
		e.Msg = what + ": " + e.Msg
	}
	return err
}

// props reads a property block (length and properties) allowed in ctx into p, which
// the caller has cleared. what names the block in errors.
func (d *decoder) props(p *Properties, ctx propCtx, what string) error {
	n, err := d.varint("property length")
	if err != nil {
		return withContext(what, err)
	}
	if uint32(d.left()) < n {
		return malformed("%s: property length %d past the end of the packet", what, n)
	}
	end := d.off + int(n)
	sub := decoder{b: d.b[:end], off: d.off}
	var seen uint64
	for sub.left() > 0 {
		// Identifiers are Variable Byte Integers, but all defined ones are below 0x80:
		// a byte with the top bit set starts no known identifier.
		id := sub.b[sub.off]
		sub.off++
		if int(id) >= len(allowed) || allowed[id]&ctx == 0 {
			// Section 2.2.2.2: an identifier not valid for the packet type is malformed.
			return malformed("%s: property 0x%02X not allowed here", what, id)
		}
		bit := uint64(1) << id
		if seen&bit != 0 && id != propUserProperty && !(id == propSubscriptionID && ctx == ctxPublish) {
			return protoErr("%s: %s given more than once", what, propNames[id])
		}
		seen |= bit
		if err := sub.prop(p, id); err != nil {
			return withContext(what, err)
		}
	}
	d.off = end
	if seen&(1<<propAuthData) != 0 && seen&(1<<propAuthMethod) == 0 {
		return protoErr("%s: authentication data without an authentication method", what)
	}
	return nil
}

// flag reads a property that must be 0 or 1.
func (d *decoder) flag(id byte) (byte, error) {
	v, err := d.byte1(propNames[id])
	if err == nil && v > 1 {
		return 0, protoErr("%s %d, want 0 or 1", propNames[id], v)
	}
	return v, err
}

func (d *decoder) prop(p *Properties, id byte) (err error) {
	name := propNames[id]
	switch id {
	case propPayloadFormat:
		p.PayloadFormat, err = d.flag(id)
		p.HasPayloadFormat = true
	case propMessageExpiry:
		p.MessageExpiry, err = d.u32(name)
		p.HasMessageExpiry = true
	case propContentType:
		p.ContentType, err = d.str(name)
	case propResponseTopic:
		var b []byte
		if b, err = d.binary(name); err != nil {
			return err
		}
		if err = checkUTF8(b, name); err != nil {
			return err
		}
		// A response topic is a topic name: some PUBLISH will be sent to it.
		if len(b) == 0 || checkTopicName(b, name) != nil {
			return protoErr("response topic %s is not a topic name", quote(b))
		}
		p.ResponseTopic = string(b)
	case propCorrelationData:
		p.CorrelationData, err = d.binary(name)
	case propSubscriptionID:
		var v uint32
		if v, err = d.varint(name); err == nil && v == 0 {
			err = protoErr("subscription identifier 0")
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, v)
	case propSessionExpiry:
		p.SessionExpiry, err = d.u32(name)
		p.HasSessionExpiry = true
	case propAssignedClientID:
		p.AssignedClientID, err = d.str(name)
	case propServerKeepAlive:
		p.ServerKeepAlive, err = d.u16(name)
		p.HasServerKeepAlive = true
	case propAuthMethod:
		p.AuthMethod, err = d.str(name)
	case propAuthData:
		p.AuthData, err = d.binary(name)
	case propRequestProblemInfo:
		p.RequestProblemInfo, err = d.flag(id)
		p.HasRequestProblemInfo = true
	case propWillDelay:
		p.WillDelay, err = d.u32(name)
		p.HasWillDelay = true
	case propRequestResponseInfo:
		p.RequestResponseInfo, err = d.flag(id)
		p.HasRequestResponseInfo = true
	case propResponseInfo:
		p.ResponseInfo, err = d.str(name)
	case propServerReference:
		p.ServerReference, err = d.str(name)
	case propReasonString:
		p.ReasonString, err = d.str(name)
	case propReceiveMaximum:
		if p.ReceiveMaximum, err = d.u16(name); err == nil && p.ReceiveMaximum == 0 {
			err = protoErr("receive maximum 0")
		}
		p.HasReceiveMaximum = true
	case propTopicAliasMaximum:
		p.TopicAliasMaximum, err = d.u16(name)
		p.HasTopicAliasMaximum = true
	case propTopicAlias:
		if p.TopicAlias, err = d.u16(name); err == nil && p.TopicAlias == 0 {
			err = &Error{Reason: TopicAliasInvalid, Msg: "topic alias 0"}
		}
		p.HasTopicAlias = true
	case propMaximumQoS:
		p.MaximumQoS, err = d.flag(id)
		p.HasMaximumQoS = true
	case propRetainAvailable:
		p.RetainAvailable, err = d.flag(id)
		p.HasRetainAvailable = true
	case propUserProperty:
		var k, v string
		if k, err = d.str("user property name"); err == nil {
			v, err = d.str("user property value")
		}
		p.UserProperties = append(p.UserProperties, UserProperty{k, v})
	case propMaximumPacketSize:
		if p.MaximumPacketSize, err = d.u32(name); err == nil && p.MaximumPacketSize == 0 {
			err = protoErr("maximum packet size 0")
		}
		p.HasMaximumPacketSize = true
	case propWildcardSubAvail:
		p.WildcardSubAvailable, err = d.flag(id)
		p.HasWildcardSubAvail = true
	case propSubIDAvailable:
		p.SubIDAvailable, err = d.flag(id)
		p.HasSubIDAvailable = true
	case propSharedSubAvailable:
		p.SharedSubAvailable, err = d.flag(id)
		p.HasSharedSubAvailable = true
	}
	return err
}

// propsLen is the encoded size of p's properties, without the length prefix.
func propsLen(p *Properties) int {
	n := 0
	if p.HasPayloadFormat {
		n += 2
	}
	if p.HasMessageExpiry {
		n += 5
	}
	n += strPropLen(p.ContentType) + strPropLen(p.ResponseTopic) + strPropLen(p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		n += 1 + varintLen(id)
	}
	if p.HasSessionExpiry {
		n += 5
	}
	n += strPropLen(p.AssignedClientID)
	if p.HasServerKeepAlive {
		n += 3
	}
	n += strPropLen(p.AuthMethod) + strPropLen(p.AuthData)
	if p.HasRequestProblemInfo {
		n += 2
	}
	if p.HasWillDelay {
		n += 5
	}
	if p.HasRequestResponseInfo {
		n += 2
	}
	n += strPropLen(p.ResponseInfo) + strPropLen(p.ServerReference) + strPropLen(p.ReasonString)
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

func strPropLen[S ~string | ~[]byte](s S) int {
	if len(s) == 0 {
		return 0
	}
	return 3 + len(s)
}

func appendStrProp[S ~string | ~[]byte](dst []byte, id byte, s S) []byte {
	if len(s) == 0 {
		return dst
	}
	return appendStr(append(dst, id), s)
}

// appendProps appends p's properties with their length prefix; n is propsLen(p).
// The order is that of the identifiers; receivers must accept any.
func appendProps(dst []byte, p *Properties, n int) []byte {
	dst = appendVarint(dst, uint32(n))
	if n == 0 {
		return dst
	}
	if p.HasPayloadFormat {
		dst = append(dst, propPayloadFormat, p.PayloadFormat)
	}
	if p.HasMessageExpiry {
		dst = appendU32(append(dst, propMessageExpiry), p.MessageExpiry)
	}
	dst = appendStrProp(dst, propContentType, p.ContentType)
	dst = appendStrProp(dst, propResponseTopic, p.ResponseTopic)
	dst = appendStrProp(dst, propCorrelationData, p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		dst = appendVarint(append(dst, propSubscriptionID), id)
	}
	if p.HasSessionExpiry {
		dst = appendU32(append(dst, propSessionExpiry), p.SessionExpiry)
	}
	dst = appendStrProp(dst, propAssignedClientID, p.AssignedClientID)
	if p.HasServerKeepAlive {
		dst = appendU16(append(dst, propServerKeepAlive), p.ServerKeepAlive)
	}
	dst = appendStrProp(dst, propAuthMethod, p.AuthMethod)
	dst = appendStrProp(dst, propAuthData, p.AuthData)
	if p.HasRequestProblemInfo {
		dst = append(dst, propRequestProblemInfo, p.RequestProblemInfo)
	}
	if p.HasWillDelay {
		dst = appendU32(append(dst, propWillDelay), p.WillDelay)
	}
	if p.HasRequestResponseInfo {
		dst = append(dst, propRequestResponseInfo, p.RequestResponseInfo)
	}
	dst = appendStrProp(dst, propResponseInfo, p.ResponseInfo)
	dst = appendStrProp(dst, propServerReference, p.ServerReference)
	dst = appendStrProp(dst, propReasonString, p.ReasonString)
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

// checkEncodable reports a property the wire format cannot carry: strings and
// binary data over 65535 bytes, subscription identifiers over MaxRemainingLength.
func (p *Properties) checkEncodable(what string) error {
	for _, s := range [...]struct {
		name string
		n    int
	}{
		{"content type", len(p.ContentType)}, {"response topic", len(p.ResponseTopic)},
		{"correlation data", len(p.CorrelationData)}, {"assigned client identifier", len(p.AssignedClientID)},
		{"authentication method", len(p.AuthMethod)}, {"authentication data", len(p.AuthData)},
		{"response information", len(p.ResponseInfo)}, {"server reference", len(p.ServerReference)},
		{"reason string", len(p.ReasonString)},
	} {
		if s.n > 65535 {
			return fmt.Errorf("mqtt: %s %s of %d bytes, over 65535", what, s.name, s.n)
		}
	}
	for _, up := range p.UserProperties {
		if len(up.Key) > 65535 || len(up.Value) > 65535 {
			return fmt.Errorf("mqtt: %s user property of %d+%d bytes, over 65535", what, len(up.Key), len(up.Value))
		}
	}
	for _, id := range p.SubscriptionIDs {
		if id > MaxRemainingLength {
			return fmt.Errorf("mqtt: %s subscription identifier %d over %d", what, id, MaxRemainingLength)
		}
	}
	return nil
}
