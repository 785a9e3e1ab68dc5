package packet

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// maxHeader is the longest fixed header: the type byte and four length bytes.
const maxHeader = 5

// decodeHeader reads a fixed header from b: type, flags, remaining length and the
// header's size. ok is false when b does not yet hold the whole header.
func decodeHeader(b []byte) (t Type, flags byte, remaining, hdrLen int, ok bool, err error) {
	if len(b) < 2 {
		return 0, 0, 0, 0, false, nil
	}
	t, flags = Type(b[0]>>4), b[0]&0x0f
	var v int
	for i := 0; i < 4; i++ {
		if 1+i >= len(b) {
			return 0, 0, 0, 0, false, nil
		}
		c := b[1+i]
		v |= int(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return t, flags, v, 2 + i, true, nil
		}
	}
	return 0, 0, 0, 0, false, malformed("remaining length longer than 4 bytes")
}

// checkHeader checks what the fixed header alone decides, so that Reader refuses a
// bad packet before waiting for (or buffering) its body.
func checkHeader(t Type, flags, version byte) error {
	switch {
	case t == 0:
		return malformed("reserved packet type 0")
	case t == TypeAuth && version != V5 && version != 0:
		// 3.1.1 reserves type 15. Before CONNECT the next rule applies instead.
		return malformed("AUTH is an MQTT 5 packet")
	case version == 0 && t != TypeConnect:
		return protoErr("first packet is %s, want CONNECT", t)
	case version != 0 && t == TypeConnect:
		return protoErr("second CONNECT")
	}
	if t == TypePublish {
		qos := flags >> 1 & 3
		if qos == 3 {
			return malformed("PUBLISH with QoS 3")
		}
		if qos == 0 && flags&8 != 0 {
			return violation(version, "PUBLISH QoS 0 with DUP set")
		}
		return nil
	}
	want := byte(0)
	if t == TypePubrel || t == TypeSubscribe || t == TypeUnsubscribe {
		want = 2
	}
	if flags != want {
		return malformed("%s: fixed header flags %04b, want %04b", t, flags, want)
	}
	return nil
}

// Decode decodes one packet from the start of b and returns it with the number of
// bytes it used. version is the connection's protocol level, or 0 before CONNECT,
// when only CONNECT is accepted (and says the level itself). A b that holds less
// than one whole packet gives io.ErrUnexpectedEOF; a bad packet an *Error. Strings
// are copied; byte slices (payload, correlation and authentication data, password)
// alias b.
func Decode(b []byte, version byte) (Packet, int, error) {
	if err := checkVersion(version); err != nil {
		return nil, 0, err
	}
	t, flags, remaining, hdr, ok, err := decodeHeader(b)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, io.ErrUnexpectedEOF
	}
	if err := checkHeader(t, flags, version); err != nil {
		return nil, 0, err
	}
	if len(b)-hdr < remaining {
		return nil, 0, io.ErrUnexpectedEOF
	}
	p, err := decodeBody(t, flags, b[hdr:hdr+remaining], version, nil)
	if err != nil {
		return nil, 0, err
	}
	return p, hdr + remaining, nil
}

// decodeBody decodes the body of a packet whose header passed checkHeader; pub, when
// not nil, is reused for PUBLISH.
func decodeBody(t Type, flags byte, body []byte, version byte, pub *Publish) (Packet, error) {
	d := decoder{b: body}
	var p Packet
	var err error
	switch t {
	case TypeConnect:
		p, err = decodeConnect(&d)
	case TypeConnack:
		p, err = decodeConnack(&d, version)
	case TypePublish:
		if pub == nil {
			pub = &Publish{}
		}
		err = decodePublish(&d, flags, version, pub)
		p = pub
	case TypePuback, TypePubrec, TypePubrel, TypePubcomp:
		p, err = decodeAck(&d, t, version)
	case TypeSubscribe:
		p, err = decodeSubscribe(&d, version)
	case TypeSuback:
		p, err = decodeSuback(&d, version)
	case TypeUnsubscribe:
		p, err = decodeUnsubscribe(&d, version)
	case TypeUnsuback:
		p, err = decodeUnsuback(&d, version)
	case TypePingreq:
		p = &Pingreq{}
	case TypePingresp:
		p = &Pingresp{}
	case TypeDisconnect:
		p, err = decodeDisconnect(&d, version)
	case TypeAuth:
		p, err = decodeAuth(&d)
	default:
		return nil, malformed("packet type %d", t)
	}
	if err != nil {
		return nil, err
	}
	// The remaining length must match the content exactly.
	if d.left() != 0 {
		return nil, malformed("%s: %d bytes after the end of its content", t, d.left())
	}
	return p, nil
}

// connects recycles CONNECT packets (ReleaseConnect): they are large, and a server
// can take thousands a second.
var connects = sync.Pool{New: func() any { return new(Connect) }}

// ReleaseConnect hands back a CONNECT from ReadPacket that the caller is done with;
// it must keep nothing of it but its strings, which are copies.
func ReleaseConnect(c *Connect) {
	*c = Connect{}
	connects.Put(c)
}

func decodeConnect(d *decoder) (*Connect, error) {
	c := connects.Get().(*Connect)
	var err error
	if c.ProtocolName, err = d.str("protocol name"); err != nil {
		return nil, err
	}
	if c.ProtocolLevel, err = d.byte1("protocol level"); err != nil {
		return nil, err
	}
	switch {
	case c.ProtocolName == "MQTT" && (c.ProtocolLevel == V311 || c.ProtocolLevel == V5):
	case c.ProtocolName == "MQIsdp" && c.ProtocolLevel == V31:
	case c.ProtocolName == "MQTT" || c.ProtocolName == "MQIsdp":
		return nil, &Error{Reason: UnsupportedProtocolVersion, Msg: fmt.Sprintf("protocol %s level %d", c.ProtocolName, c.ProtocolLevel)}
	default:
		return nil, &Error{Reason: UnsupportedProtocolVersion, Msg: fmt.Sprintf("protocol name %q", c.ProtocolName)}
	}
	v5 := c.ProtocolLevel == V5
	flags, err := d.byte1("connect flags")
	if err != nil {
		return nil, err
	}
	if flags&1 != 0 {
		return nil, malformed("connect flags: reserved bit set")
	}
	c.CleanStart = flags&0x02 != 0
	c.WillFlag = flags&0x04 != 0
	c.WillQoS = flags >> 3 & 3
	c.WillRetain = flags&0x20 != 0
	c.HasPassword = flags&0x40 != 0
	c.HasUsername = flags&0x80 != 0
	if !c.WillFlag && (c.WillQoS != 0 || c.WillRetain) {
		return nil, malformed("connect flags: will QoS or retain without a will")
	}
	if c.WillQoS == 3 {
		return nil, malformed("connect flags: will QoS 3")
	}
	if !v5 && c.HasPassword && !c.HasUsername {
		return nil, malformed("connect flags: password without user name")
	}
	if c.KeepAlive, err = d.u16("keep alive"); err != nil {
		return nil, err
	}
	if v5 {
		if err := d.props(&c.Props, ctxConnect, "CONNECT"); err != nil {
			return nil, err
		}
	}
	if c.ClientID, err = d.str("client identifier"); err != nil {
		return nil, err
	}
	if c.WillFlag {
		if v5 {
			if err := d.props(&c.WillProps, ctxWill, "will"); err != nil {
				return nil, err
			}
		}
		topic, err := d.binary("will topic")
		if err != nil {
			return nil, err
		}
		if err := checkTopicName(topic, "will topic"); err != nil {
			return nil, err
		}
		if len(topic) == 0 {
			return nil, &Error{Reason: TopicNameInvalid, Msg: "empty will topic"}
		}
		c.WillTopic = string(topic)
		if c.WillPayload, err = d.binary("will payload"); err != nil {
			return nil, err
		}
		if c.WillProps.HasPayloadFormat && c.WillProps.PayloadFormat == 1 && !utf8.Valid(c.WillPayload) {
			return nil, &Error{Reason: PayloadFormatInvalid, Msg: "will payload: not valid UTF-8"}
		}
	}
	if c.HasUsername {
		if c.Username, err = d.str("user name"); err != nil {
			return nil, err
		}
	}
	if c.HasPassword {
		if c.Password, err = d.binary("password"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func decodeConnack(d *decoder, version byte) (*Connack, error) {
	c := &Connack{}
	flags, err := d.byte1("connack flags")
	if err != nil {
		return nil, err
	}
	// In 3.1 the byte is unused; 3.1.1 made bit 0 "session present".
	if version != V31 {
		if flags&^1 != 0 {
			return nil, malformed("connack flags %08b: reserved bits set", flags)
		}
		c.SessionPresent = flags&1 != 0
	}
	rc, err := d.byte1("connack reason")
	if err != nil {
		return nil, err
	}
	c.Reason = ReasonCode(rc)
	if version == V5 {
		if !connackReasons.has(c.Reason) {
			return nil, protoErr("CONNACK with reason %s", c.Reason)
		}
		// The property length is required, but a server that does not speak MQTT 5
		// answers a v5 CONNECT with a bare 3.1.1 CONNACK (return code 1); reading that
		// as "no properties" lets a client see why it was refused.
		if d.left() > 0 {
			if err := d.props(&c.Props, ctxConnack, "CONNACK"); err != nil {
				return nil, err
			}
		}
	} else if rc > ConnRefusedNotAuthorized {
		return nil, malformed("CONNACK with reserved return code %d", rc)
	}
	if c.SessionPresent && c.Reason != Success {
		return nil, violation(version, "CONNACK refusing with session present set")
	}
	return c, nil
}

func decodePublish(d *decoder, flags, version byte, p *Publish) error {
	// Reuse the slices a reused *Publish already has, and its topic string when the
	// topic is the same: a publisher usually sends runs to one topic, which then
	// cost no allocation.
	ups, sids, prevTopic := p.Props.UserProperties[:0], p.Props.SubscriptionIDs[:0], p.Topic
	*p = Publish{Dup: flags&8 != 0, QoS: flags >> 1 & 3, Retain: flags&1 != 0}
	p.Props.UserProperties, p.Props.SubscriptionIDs = ups, sids
	topic, err := d.binary("topic name")
	if err != nil {
		return err
	}
	if err := checkTopicName(topic, "topic name"); err != nil {
		return err
	}
	if p.QoS > 0 {
		if p.PacketID, err = d.u16("packet identifier"); err != nil {
			return err
		}
		if p.PacketID == 0 {
			return violation(version, "PUBLISH QoS %d with packet identifier 0", p.QoS)
		}
	}
	if version == V5 {
		if err := d.props(&p.Props, ctxPublish, "PUBLISH"); err != nil {
			return err
		}
		if len(topic) == 0 && !p.Props.HasTopicAlias {
			return protoErr("PUBLISH with neither a topic name nor a topic alias")
		}
	} else if len(topic) == 0 {
		return &Error{Reason: TopicNameInvalid, Msg: "empty topic name"}
	}
	if string(topic) == prevTopic {
		p.Topic = prevTopic
	} else {
		p.Topic = string(topic)
	}
	p.Payload = d.b[d.off:len(d.b):len(d.b)]
	d.off = len(d.b)
	// Checking the payload against its declared format is optional (3.3.2.3.2); it is
	// cheap next to delivering it, and the only place a broker can catch it. The
	// payload is Unicode text, not a UTF-8 Encoded String: U+0000 is allowed.
	if p.Props.HasPayloadFormat && p.Props.PayloadFormat == 1 && !utf8.Valid(p.Payload) {
		return &Error{Reason: PayloadFormatInvalid, Msg: "payload: not valid UTF-8"}
	}
	return nil
}

func decodeAck(d *decoder, t Type, version byte) (*Ack, error) {
	a := &Ack{Type: t}
	var err error
	if a.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if a.PacketID == 0 {
		return nil, violation(version, "%s with packet identifier 0", t)
	}
	if version != V5 {
		return a, nil
	}
	// Remaining length 2: Success and no properties; 3: a reason and no properties.
	if d.left() > 0 {
		a.Reason = ReasonCode(d.b[d.off])
		d.off++
		if !ValidReason(t, a.Reason) {
			return nil, protoErr("%s with reason %s", t, a.Reason)
		}
	}
	if d.left() > 0 {
		if err := d.props(&a.Props, ctxAck, t.String()); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func decodeSubscribe(d *decoder, version byte) (*Subscribe, error) {
	s := &Subscribe{}
	var err error
	if s.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if s.PacketID == 0 {
		return nil, violation(version, "SUBSCRIBE with packet identifier 0")
	}
	if version == V5 {
		if err := d.props(&s.Props, ctxSubscribe, "SUBSCRIBE"); err != nil {
			return nil, err
		}
	}
	for d.left() > 0 {
		var sub Subscription
		if sub.Filter, err = d.str("topic filter"); err != nil {
			return nil, err
		}
		opts, err := d.byte1("subscription options")
		if err != nil {
			return nil, err
		}
		sub.QoS = opts & 3
		if version == V5 {
			if opts&0xc0 != 0 {
				return nil, malformed("subscription options %08b: reserved bits set", opts)
			}
			sub.NoLocal = opts&4 != 0
			sub.RetainAsPublished = opts&8 != 0
			sub.RetainHandling = opts >> 4 & 3
			if sub.RetainHandling == 3 {
				return nil, protoErr("subscription with retain handling 3")
			}
		} else if opts&0xfc != 0 {
			return nil, malformed("subscription options %08b: reserved bits set", opts)
		}
		if sub.QoS == 3 {
			return nil, violation(version, "subscription with QoS 3")
		}
		s.Subs = append(s.Subs, sub)
	}
	if len(s.Subs) == 0 {
		return nil, protoErr("SUBSCRIBE without a topic filter")
	}
	return s, nil
}

func decodeSuback(d *decoder, version byte) (*Suback, error) {
	s := &Suback{}
	var err error
	if s.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if s.PacketID == 0 {
		return nil, violation(version, "SUBACK with packet identifier 0")
	}
	if version == V5 {
		if err := d.props(&s.Props, ctxSuback, "SUBACK"); err != nil {
			return nil, err
		}
	}
	if d.left() == 0 {
		return nil, protoErr("SUBACK without a reason code")
	}
	s.Reasons = make([]ReasonCode, d.left())
	for i, c := range d.b[d.off:] {
		r := ReasonCode(c)
		switch {
		case version == V5 && !subackReasons.has(r):
			return nil, protoErr("SUBACK with reason %s", r)
		case version != V5 && !v3SubackReasons.has(r):
			return nil, malformed("SUBACK with return code 0x%02X", c)
		}
		s.Reasons[i] = r
	}
	d.off = len(d.b)
	return s, nil
}

func decodeUnsubscribe(d *decoder, version byte) (*Unsubscribe, error) {
	u := &Unsubscribe{}
	var err error
	if u.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if u.PacketID == 0 {
		return nil, violation(version, "UNSUBSCRIBE with packet identifier 0")
	}
	if version == V5 {
		if err := d.props(&u.Props, ctxUnsubscribe, "UNSUBSCRIBE"); err != nil {
			return nil, err
		}
	}
	for d.left() > 0 {
		f, err := d.str("topic filter")
		if err != nil {
			return nil, err
		}
		u.Filters = append(u.Filters, f)
	}
	if len(u.Filters) == 0 {
		return nil, protoErr("UNSUBSCRIBE without a topic filter")
	}
	return u, nil
}

func decodeUnsuback(d *decoder, version byte) (*Unsuback, error) {
	u := &Unsuback{}
	var err error
	if u.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if u.PacketID == 0 {
		return nil, violation(version, "UNSUBACK with packet identifier 0")
	}
	if version != V5 {
		return u, nil
	}
	if err := d.props(&u.Props, ctxUnsuback, "UNSUBACK"); err != nil {
		return nil, err
	}
	if d.left() == 0 {
		return nil, protoErr("UNSUBACK without a reason code")
	}
	u.Reasons = make([]ReasonCode, d.left())
	for i, c := range d.b[d.off:] {
		if u.Reasons[i] = ReasonCode(c); !unsubackReasons.has(u.Reasons[i]) {
			return nil, protoErr("UNSUBACK with reason %s", u.Reasons[i])
		}
	}
	d.off = len(d.b)
	return u, nil
}

// decodeReasonAndProps reads the optional tail DISCONNECT and AUTH share: nothing
// (Success, no properties), a reason alone, or a reason and properties.
func decodeReasonAndProps(d *decoder, t Type, ctx propCtx, props *Properties) (ReasonCode, error) {
	if d.left() == 0 {
		return Success, nil
	}
	r := ReasonCode(d.b[d.off])
	d.off++
	if !ValidReason(t, r) {
		return 0, protoErr("%s with reason %s", t, r)
	}
	if d.left() > 0 {
		if err := d.props(props, ctx, t.String()); err != nil {
			return 0, err
		}
	}
	return r, nil
}

func decodeDisconnect(d *decoder, version byte) (*Disconnect, error) {
	x := &Disconnect{}
	if version != V5 {
		return x, nil
	}
	var err error
	if x.Reason, err = decodeReasonAndProps(d, TypeDisconnect, ctxDisconnect, &x.Props); err != nil {
		return nil, err
	}
	return x, nil
}

func decodeAuth(d *decoder) (*Auth, error) {
	a := &Auth{}
	var err error
	if a.Reason, err = decodeReasonAndProps(d, TypeAuth, ctxAuth, &a.Props); err != nil {
		return nil, err
	}
	return a, nil
}
