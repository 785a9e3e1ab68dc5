package packet

import (
	"encoding/hex"
	"fmt"
	"strings"
)

var versions = []byte{V31, V311, V5}

// hx decodes hex written with spaces for readability.
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(fmt.Sprintf("bad hex %q: %v", s, err))
	}
	return b
}

// pkt builds a whole packet from its first byte and body, working out the remaining
// length, so hand-written test packets only get the body right.
func pkt(first byte, body string) []byte {
	b := hx(body)
	return append(appendVarint([]byte{first}, uint32(len(b))), b...)
}

// fullProps sets every property to a value other than zero, for round trips that
// must not lose one.
func fullProps() Properties {
	return Properties{
		PayloadFormat: 1, HasPayloadFormat: true, MessageExpiry: 3600, HasMessageExpiry: true,
		ContentType: "application/json", ResponseTopic: "reply/here", CorrelationData: []byte{1, 2, 3},
		SubscriptionIDs: []uint32{1, 268435455}, SessionExpiry: 0xFFFFFFFF, HasSessionExpiry: true,
		AssignedClientID: "assigned", ServerKeepAlive: 30, HasServerKeepAlive: true,
		AuthMethod: "SCRAM-SHA-256", AuthData: []byte("data"), RequestProblemInfo: 1, HasRequestProblemInfo: true,
		WillDelay: 5, HasWillDelay: true, RequestResponseInfo: 1, HasRequestResponseInfo: true,
		ResponseInfo: "resp", ServerReference: "other:1883", ReasonString: "because",
		ReceiveMaximum: 10, HasReceiveMaximum: true, TopicAliasMaximum: 20, HasTopicAliasMaximum: true,
		TopicAlias: 3, HasTopicAlias: true, MaximumQoS: 1, HasMaximumQoS: true, RetainAvailable: 1, HasRetainAvailable: true,
		UserProperties:    []UserProperty{{"a", "1"}, {"a", "2"}, {"ü", ""}, {"", "x"}},
		MaximumPacketSize: 1 << 20, HasMaximumPacketSize: true,
		WildcardSubAvailable: 1, HasWildcardSubAvail: true, SubIDAvailable: 1, HasSubIDAvailable: true,
		SharedSubAvailable: 1, HasSharedSubAvailable: true,
	}
}

// only keeps the properties allowed in ctx.
func only(p Properties, ctx propCtx) Properties {
	var out Properties
	keep := func(id byte) bool { return allowed[id]&ctx != 0 }
	if keep(propPayloadFormat) {
		out.PayloadFormat, out.HasPayloadFormat = p.PayloadFormat, p.HasPayloadFormat
	}
	if keep(propMessageExpiry) {
		out.MessageExpiry, out.HasMessageExpiry = p.MessageExpiry, p.HasMessageExpiry
	}
	if keep(propContentType) {
		out.ContentType = p.ContentType
	}
	if keep(propResponseTopic) {
		out.ResponseTopic = p.ResponseTopic
	}
	if keep(propCorrelationData) {
		out.CorrelationData = p.CorrelationData
	}
	if keep(propSubscriptionID) {
		out.SubscriptionIDs = p.SubscriptionIDs
		if ctx == ctxSubscribe {
			out.SubscriptionIDs = p.SubscriptionIDs[:1]
		}
	}
	if keep(propSessionExpiry) {
		out.SessionExpiry, out.HasSessionExpiry = p.SessionExpiry, p.HasSessionExpiry
	}
	if keep(propAssignedClientID) {
		out.AssignedClientID = p.AssignedClientID
	}
	if keep(propServerKeepAlive) {
		out.ServerKeepAlive, out.HasServerKeepAlive = p.ServerKeepAlive, p.HasServerKeepAlive
	}
	if keep(propAuthMethod) {
		out.AuthMethod, out.AuthData = p.AuthMethod, p.AuthData
	}
	if keep(propRequestProblemInfo) {
		out.RequestProblemInfo, out.HasRequestProblemInfo = p.RequestProblemInfo, p.HasRequestProblemInfo
	}
	if keep(propWillDelay) {
		out.WillDelay, out.HasWillDelay = p.WillDelay, p.HasWillDelay
	}
	if keep(propRequestResponseInfo) {
		out.RequestResponseInfo, out.HasRequestResponseInfo = p.RequestResponseInfo, p.HasRequestResponseInfo
	}
	if keep(propResponseInfo) {
		out.ResponseInfo = p.ResponseInfo
	}
	if keep(propServerReference) {
		out.ServerReference = p.ServerReference
	}
	if keep(propReasonString) {
		out.ReasonString = p.ReasonString
	}
	if keep(propReceiveMaximum) {
		out.ReceiveMaximum, out.HasReceiveMaximum = p.ReceiveMaximum, p.HasReceiveMaximum
	}
	if keep(propTopicAliasMaximum) {
		out.TopicAliasMaximum, out.HasTopicAliasMaximum = p.TopicAliasMaximum, p.HasTopicAliasMaximum
	}
	if keep(propTopicAlias) {
		out.TopicAlias, out.HasTopicAlias = p.TopicAlias, p.HasTopicAlias
	}
	if keep(propMaximumQoS) {
		out.MaximumQoS, out.HasMaximumQoS = p.MaximumQoS, p.HasMaximumQoS
	}
	if keep(propRetainAvailable) {
		out.RetainAvailable, out.HasRetainAvailable = p.RetainAvailable, p.HasRetainAvailable
	}
	out.UserProperties = p.UserProperties
	if keep(propMaximumPacketSize) {
		out.MaximumPacketSize, out.HasMaximumPacketSize = p.MaximumPacketSize, p.HasMaximumPacketSize
	}
	if keep(propWildcardSubAvail) {
		out.WildcardSubAvailable, out.HasWildcardSubAvail = p.WildcardSubAvailable, p.HasWildcardSubAvail
	}
	if keep(propSubIDAvailable) {
		out.SubIDAvailable, out.HasSubIDAvailable = p.SubIDAvailable, p.HasSubIDAvailable
	}
	if keep(propSharedSubAvailable) {
		out.SharedSubAvailable, out.HasSharedSubAvailable = p.SharedSubAvailable, p.HasSharedSubAvailable
	}
	return out
}

// samples are packets of every type, valid at version v, the MQTT 5 ones carrying
// every property their type allows.
func samples(v byte) []Packet {
	full := fullProps()
	props := func(ctx propCtx) Properties {
		if v != V5 {
			return Properties{}
		}
		return only(full, ctx)
	}
	name := "MQTT"
	if v == V31 {
		name = "MQIsdp"
	}
	ack := func(t Type) *Ack {
		a := &Ack{Type: t, PacketID: 7}
		if v == V5 {
			a.Reason, a.Props = Success, props(ctxAck)
			if t == TypePuback || t == TypePubrec {
				a.Reason = NoMatchingSubscribers
			}
		}
		return a
	}
	subReasons := []ReasonCode{GrantedQoS0, GrantedQoS1, GrantedQoS2, 0x80}
	var unsubReasons []ReasonCode
	if v == V5 {
		subReasons = []ReasonCode{GrantedQoS1, TopicFilterInvalid, SharedSubscriptionsNotSupported}
		unsubReasons = []ReasonCode{Success, NoSubscriptionExisted}
	}
	sub := Subscription{Filter: "a/+/#", QoS: 2}
	if v == V5 {
		sub.NoLocal, sub.RetainAsPublished, sub.RetainHandling = true, true, 2
	}
	out := []Packet{
		&Connect{ProtocolName: name, ProtocolLevel: v, CleanStart: true, KeepAlive: 60, Props: props(ctxConnect),
			ClientID: "client-1", WillFlag: true, WillQoS: 1, WillRetain: true, WillProps: props(ctxWill),
			WillTopic: "last/will", WillPayload: []byte("gone"), Username: "user", HasUsername: true,
			Password: []byte("secret"), HasPassword: true},
		&Connect{ProtocolName: name, ProtocolLevel: v, KeepAlive: 0, ClientID: "", WillFlag: true, WillQoS: 2,
			WillTopic: "w", Username: "", HasUsername: true},
		&Connack{SessionPresent: v != V31, Props: props(ctxConnack)},
		&Connack{Reason: ReasonCode(ConnRefusedBadCredentials)},
		&Publish{QoS: 0, Topic: "a/b", Props: props(ctxPublish), Payload: []byte("hello")},
		&Publish{Dup: true, QoS: 2, Retain: true, Topic: "a/b", PacketID: 65535, Props: props(ctxPublish), Payload: []byte{}},
		&Publish{QoS: 1, Topic: "ünï/cödé", PacketID: 1, Payload: make([]byte, 300)},
		ack(TypePuback), ack(TypePubrec), ack(TypePubrel), ack(TypePubcomp),
		&Subscribe{PacketID: 9, Props: props(ctxSubscribe), Subs: []Subscription{sub, {Filter: "x", QoS: 0}, {Filter: "$share/g/y", QoS: 1}}},
		&Suback{PacketID: 9, Props: props(ctxSuback), Reasons: subReasons},
		&Unsubscribe{PacketID: 10, Props: props(ctxUnsubscribe), Filters: []string{"a/+/#", "x"}},
		&Unsuback{PacketID: 10, Props: props(ctxUnsuback), Reasons: unsubReasons},
		&Pingreq{}, &Pingresp{},
		&Disconnect{},
	}
	if v == V5 {
		out[3] = &Connack{Reason: BadUserNameOrPassword, Props: Properties{ReasonString: "no"}}
		out = append(out,
			&Connect{ProtocolName: name, ProtocolLevel: v, ClientID: "pw-only", Password: []byte{0, 1}, HasPassword: true},
			&Publish{Topic: "", Props: Properties{TopicAlias: 1, HasTopicAlias: true}, Payload: []byte("aliased")},
			&Disconnect{Reason: DisconnectWithWill, Props: props(ctxDisconnect)},
			&Disconnect{Reason: SessionTakenOver},
			&Auth{Reason: ContinueAuthentication, Props: props(ctxAuth)},
			&Auth{Reason: ReAuthenticate},
			&Auth{},
			&Ack{Type: TypePuback, PacketID: 1},                        // short form: reason omitted
			&Ack{Type: TypePubrec, PacketID: 2, Reason: QuotaExceeded}, // reason, no properties
			&Ack{Type: TypePubcomp, PacketID: 3, Reason: PacketIdentifierNotFound},
		)
	}
	return out
}

// decodeVersion is the version to decode p with: 0 for CONNECT, which says its own.
func decodeVersion(p Packet, v byte) byte {
	if _, ok := p.(*Connect); ok {
		return 0
	}
	return v
}

// normalize makes nil and empty slices equal and copies what may alias a buffer, so
// packets compare with reflect.DeepEqual.
func normalize(p Packet) Packet {
	bs := func(b []byte) []byte {
		if len(b) == 0 {
			return nil
		}
		return append([]byte(nil), b...)
	}
	fix := func(pp Properties) Properties {
		pp.CorrelationData, pp.AuthData = bs(pp.CorrelationData), bs(pp.AuthData)
		if len(pp.SubscriptionIDs) == 0 {
			pp.SubscriptionIDs = nil
		} else {
			pp.SubscriptionIDs = append([]uint32(nil), pp.SubscriptionIDs...)
		}
		if len(pp.UserProperties) == 0 {
			pp.UserProperties = nil
		} else {
			pp.UserProperties = append([]UserProperty(nil), pp.UserProperties...)
		}
		return pp
	}
	switch p := p.(type) {
	case *Connect:
		c := *p
		c.Props, c.WillProps = fix(c.Props), fix(c.WillProps)
		c.WillPayload, c.Password = bs(c.WillPayload), bs(c.Password)
		return &c
	case *Publish:
		c := *p
		c.Props, c.Payload = fix(c.Props), bs(c.Payload)
		return &c
	case *Connack:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Ack:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Subscribe:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Suback:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Unsubscribe:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Unsuback:
		c := *p
		c.Props = fix(c.Props)
		if len(c.Reasons) == 0 {
			c.Reasons = nil
		}
		return &c
	case *Disconnect:
		c := *p
		c.Props = fix(c.Props)
		return &c
	case *Auth:
		c := *p
		c.Props = fix(c.Props)
		return &c
	}
	return p
}
