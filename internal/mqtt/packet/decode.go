package packet

import "fmt"

// decodeHeader reads a fixed header from b: type, flags, remaining length and the
// header's size. ok is false when b does not yet hold the whole header.
func decodeHeader(b []byte) (t Type, flags byte, remaining, hdrLen int, ok bool, err error) {
	if len(b) < 2 {
		return 0, 0, 0, 0, false, nil
	}
	t, flags = Type(b[0]>>4), b[0]&0x0f
	var v uint32
	for i := 0; i < 4; i++ {
		if 1+i >= len(b) {
			return 0, 0, 0, 0, false, nil
		}
		c := b[1+i]
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return t, flags, int(v), 2 + i, true, nil
		}
	}
	return 0, 0, 0, 0, false, malformed("remaining length longer than 4 bytes")
}

// Decode decodes one whole packet from the start of b and returns it with the bytes
// it used. version is the connection's protocol level; 0 means no CONNECT yet, when
// only CONNECT is accepted. Strings are copied; byte slices (payload, correlation
// data, passwords) alias b. Decode reports an incomplete packet as a malformed one.
func Decode(b []byte, version byte) (Packet, int, error) {
	t, flags, remaining, hdr, ok, err := decodeHeader(b)
	if err != nil {
		return nil, 0, err
	}
	if !ok || len(b) < hdr+remaining {
		return nil, 0, malformed("packet ends early")
	}
	p, err := decodeBody(t, flags, b[hdr:hdr+remaining], version, nil)
	if err != nil {
		return nil, 0, err
	}
	return p, hdr + remaining, nil
}

// decodeBody decodes a packet body; pub, when not nil, is reused for PUBLISH.
func decodeBody(t Type, flags byte, body []byte, version byte, pub *Publish) (Packet, error) {
	if version == 0 && t != TypeConnect {
		return nil, protoErr("first packet is %s, want CONNECT", t)
	}
	if version != 0 && version != V31 && version != V311 && version != V5 {
		return nil, fmt.Errorf("packet: unknown protocol version %d", version)
	}
	if t != TypePublish {
		want := byte(0)
		if t == TypePubrel || t == TypeSubscribe || t == TypeUnsubscribe {
			want = 2
		}
		if flags != want {
			return nil, malformed("%s: fixed header flags %04b, want %04b", t, flags, want)
		}
	}
	d := &decoder{b: body}
	var p Packet
	var err error
	switch t {
	case TypeConnect:
		if version != 0 {
			return nil, protoErr("second CONNECT")
		}
		p, err = decodeConnect(d)
	case TypeConnack:
		p, err = decodeConnack(d, version)
	case TypePublish:
		if pub == nil {
			pub = &Publish{}
		}
		err = decodePublish(d, flags, version, pub)
		p = pub
	case TypePuback, TypePubrec, TypePubrel, TypePubcomp:
		p, err = decodeAck(d, t, version)
	case TypeSubscribe:
		p, err = decodeSubscribe(d, version)
	case TypeSuback:
		p, err = decodeSuback(d, version)
	case TypeUnsubscribe:
		p, err = decodeUnsubscribe(d, version)
	case TypeUnsuback:
		p, err = decodeUnsuback(d, version)
	case TypePingreq:
		p = &Pingreq{}
	case TypePingresp:
		p = &Pingresp{}
	case TypeDisconnect:
		p, err = decodeDisconnect(d, version)
	case TypeAuth:
		if version != V5 {
			return nil, malformed("AUTH before MQTT 5")
		}
		p, err = decodeAuth(d)
	default:
		return nil, malformed("reserved packet type 0")
	}
	if err != nil {
		return nil, err
	}
	if d.left() != 0 {
		return nil, malformed("%s: %d bytes after the end of its content", t, d.left())
	}
	return p, nil
}

func decodeConnect(d *decoder) (*Connect, error) {
	c := &Connect{}
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
	c.WillQoS = (flags >> 3) & 3
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
		if e, ok := err.(*Error); ok && v5 {
			e.Reason = ClientIdentifierNotValid
		}
		return nil, err
	}
	if c.WillFlag {
		if v5 {
			if err := d.props(&c.WillProps, ctxWill, "will"); err != nil {
				return nil, err
			}
		}
		if c.WillTopic, err = d.str("will topic"); err != nil {
			return nil, err
		}
		if !validTopic(c.WillTopic) {
			return nil, &Error{Reason: TopicNameInvalid, Msg: fmt.Sprintf("will topic %q", c.WillTopic)}
		}
		if c.WillPayload, err = d.binary("will payload"); err != nil {
			return nil, err
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
	if flags&^1 != 0 {
		return nil, malformed("connack flags: reserved bits set")
	}
	c.SessionPresent = flags&1 != 0
	rc, err := d.byte1("connack reason")
	if err != nil {
		return nil, err
	}
	c.Reason = ReasonCode(rc)
	if version == V5 && d.left() > 0 {
		if err := d.props(&c.Props, ctxConnack, "CONNACK"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func decodePublish(d *decoder, flags, version byte, p *Publish) error {
	ups, sids := p.Props.UserProperties[:0], p.Props.SubscriptionIDs[:0]
	*p = Publish{Dup: flags&8 != 0, QoS: (flags >> 1) & 3, Retain: flags&1 != 0}
	p.Props.UserProperties, p.Props.SubscriptionIDs = ups, sids
	if p.QoS == 3 {
		return malformed("PUBLISH with QoS 3")
	}
	if p.QoS == 0 && p.Dup {
		if version == V5 {
			return protoErr("PUBLISH QoS 0 with DUP set")
		}
		return malformed("PUBLISH QoS 0 with DUP set")
	}
	topic, err := d.binary("topic name")
	if err != nil {
		return err
	}
	if err := checkUTF8(topic, "topic name"); err != nil {
		return err
	}
	for _, c := range topic {
		if c == '+' || c == '#' {
			return &Error{Reason: TopicNameInvalid, Msg: fmt.Sprintf("wildcard in topic name %q", topic)}
		}
	}
	p.Topic = string(topic)
	if p.QoS > 0 {
		if p.PacketID, err = d.u16("packet identifier"); err != nil {
			return err
		}
		if p.PacketID == 0 {
			return malformed("PUBLISH QoS %d with packet identifier 0", p.QoS)
		}
	}
	if version == V5 {
		if err := d.props(&p.Props, ctxPublish, "PUBLISH"); err != nil {
			return err
		}
		if p.Topic == "" && !p.Props.HasTopicAlias {
			return protoErr("PUBLISH with neither a topic nor a topic alias")
		}
	} else if p.Topic == "" {
		return &Error{Reason: TopicNameInvalid, Msg: "empty topic name"}
	}
	p.Payload = d.b[d.off:len(d.b):len(d.b)]
	d.off = len(d.b)
	if p.Props.HasPayloadFormat && p.Props.PayloadFormat == 1 {
		if err := checkUTF8(p.Payload, "payload"); err != nil {
			return &Error{Reason: PayloadFormatInvalid, Msg: err.(*Error).Msg}
		}
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
		return nil, malformed("%s with packet identifier 0", t)
	}
	if version != V5 {
		return a, nil
	}
	if d.left() > 0 {
		rc, _ := d.byte1("reason")
		a.Reason = ReasonCode(rc)
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
		return nil, malformed("SUBSCRIBE with packet identifier 0")
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
		if version == V5 {
			if opts&0xc0 != 0 {
				return nil, malformed("subscription options: reserved bits set")
			}
			sub.NoLocal = opts&4 != 0
			sub.RetainAsPublished = opts&8 != 0
			sub.RetainHandling = (opts >> 4) & 3
			if sub.RetainHandling == 3 {
				return nil, protoErr("retain handling 3")
			}
		} else if opts&0xfc != 0 {
			return nil, malformed("subscription options: reserved bits set")
		}
		sub.QoS = opts & 3
		if sub.QoS == 3 {
			return nil, malformed("subscription with QoS 3")
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
	if version == V5 {
		if err := d.props(&s.Props, ctxSuback, "SUBACK"); err != nil {
			return nil, err
		}
	}
	for d.left() > 0 {
		rc, _ := d.byte1("reason")
		s.Reasons = append(s.Reasons, ReasonCode(rc))
	}
	if len(s.Reasons) == 0 {
		return nil, protoErr("SUBACK without a reason code")
	}
	return s, nil
}

func decodeUnsubscribe(d *decoder, version byte) (*Unsubscribe, error) {
	u := &Unsubscribe{}
	var err error
	if u.PacketID, err = d.u16("packet identifier"); err != nil {
		return nil, err
	}
	if u.PacketID == 0 {
		return nil, malformed("UNSUBSCRIBE with packet identifier 0")
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
	if version != V5 {
		return u, nil
	}
	if err := d.props(&u.Props, ctxUnsuback, "UNSUBACK"); err != nil {
		return nil, err
	}
	for d.left() > 0 {
		rc, _ := d.byte1("reason")
		u.Reasons = append(u.Reasons, ReasonCode(rc))
	}
	return u, nil
}

func decodeDisconnect(d *decoder, version byte) (*Disconnect, error) {
	x := &Disconnect{}
	if version != V5 {
		return x, nil
	}
	if d.left() > 0 {
		rc, _ := d.byte1("reason")
		x.Reason = ReasonCode(rc)
	}
	if d.left() > 0 {
		if err := d.props(&x.Props, ctxDisconnect, "DISCONNECT"); err != nil {
			return nil, err
		}
	}
	return x, nil
}

func decodeAuth(d *decoder) (*Auth, error) {
	a := &Auth{}
	if d.left() > 0 {
		rc, _ := d.byte1("reason")
		a.Reason = ReasonCode(rc)
	}
	if d.left() > 0 {
		if err := d.props(&a.Props, ctxAuth, "AUTH"); err != nil {
			return nil, err
		}
	}
	return a, nil
}
