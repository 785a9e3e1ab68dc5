package packet

import "fmt"

// layout is what encoding a packet needs to know before writing: the remaining
// length and, for MQTT 5, the length of each property block (main, then will).
type layout struct {
	n, props, willProps int
}

// connectLevel is the level a CONNECT is encoded at: its own, when set.
func connectLevel(c *Connect, version byte) byte {
	if c.ProtocolLevel != 0 {
		return c.ProtocolLevel
	}
	return version
}

func connectName(c *Connect, level byte) string {
	switch {
	case c.ProtocolName != "":
		return c.ProtocolName
	case level == V31:
		return "MQIsdp"
	}
	return "MQTT"
}

// propBlock is the size of a property block with its length prefix.
func propBlock(n int) int { return varintLen(uint32(n)) + n }

// measure computes p's layout at version.
func measure(p Packet, version byte) layout {
	v5 := version == V5
	var l layout
	switch p := p.(type) {
	case *Connect:
		level := connectLevel(p, version)
		v5 = level == V5
		l.n = strLen(connectName(p, level)) + 1 + 1 + 2 + strLen(p.ClientID)
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
		if p.WillFlag {
			if v5 {
				l.willProps = propsLen(&p.WillProps)
				l.n += propBlock(l.willProps)
			}
			l.n += strLen(p.WillTopic) + strLen(p.WillPayload)
		}
		if p.HasUsername {
			l.n += strLen(p.Username)
		}
		if p.HasPassword {
			l.n += strLen(p.Password)
		}
	case *Connack:
		l.n = 2
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
	case *Publish:
		l.n = strLen(p.Topic) + len(p.Payload)
		if p.QoS > 0 {
			l.n += 2
		}
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
	case *Ack:
		l.n = 2
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += shortTail(p.Reason, l.props, false)
		}
	case *Subscribe:
		l.n = 2
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
		for _, s := range p.Subs {
			l.n += strLen(s.Filter) + 1
		}
	case *Suback:
		l.n = 2 + len(p.Reasons)
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
	case *Unsubscribe:
		l.n = 2
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props)
		}
		for _, f := range p.Filters {
			l.n += strLen(f)
		}
	case *Unsuback:
		l.n = 2
		if v5 {
			l.props = propsLen(&p.Props)
			l.n += propBlock(l.props) + len(p.Reasons)
		}
	case *Disconnect:
		if v5 {
			l.props = propsLen(&p.Props)
			l.n = shortTail(p.Reason, l.props, false)
		}
	case *Auth:
		l.props = propsLen(&p.Props)
		l.n = shortTail(p.Reason, l.props, true)
	}
	return l
}

// shortTail is the size of the reason-and-properties tail of an MQTT 5 ack,
// DISCONNECT or AUTH in its shortest form: nothing for Success without properties,
// then the reason alone, then both. AUTH's description allows only the first short
// form, so a reason there always comes with a property length.
func shortTail(r ReasonCode, props int, auth bool) int {
	switch {
	case props > 0:
		return 1 + propBlock(props)
	case r == Success:
		return 0
	case auth:
		return 2
	}
	return 1
}

// Size is the encoded size of p at version, fixed header included.
func Size(p Packet, version byte) int {
	l := measure(p, version)
	return 1 + varintLen(uint32(l.n)) + l.n
}

// check reports what p holds that the wire format cannot carry at version. It
// allocates only to report an error, so Append stays allocation-free.
func check(p Packet, version byte) error {
	if c, ok := p.(*Connect); ok {
		version = connectLevel(c, version)
		if version == 0 {
			return fmt.Errorf("mqtt: CONNECT without a protocol level")
		}
	} else if checkVersion(version) != nil || version == 0 {
		return fmt.Errorf("mqtt: cannot encode %s for protocol level %d", p.PacketType(), version)
	}
	t := p.PacketType()
	var props, willProps *Properties
	switch p := p.(type) {
	case *Connect:
		props = &p.Props
		if err := firstErr(tooLong(t, "protocol name", len(p.ProtocolName)),
			tooLong(t, "client identifier", len(p.ClientID)),
			tooLong(t, "user name", len(p.Username)),
			tooLong(t, "password", len(p.Password))); err != nil {
			return err
		}
		if p.WillFlag {
			willProps = &p.WillProps
			if err := firstErr(tooLong(t, "will topic", len(p.WillTopic)),
				tooLong(t, "will payload", len(p.WillPayload)), badQoS(t, p.WillQoS)); err != nil {
				return err
			}
		}
	case *Connack:
		props = &p.Props
	case *Publish:
		props = &p.Props
		if err := firstErr(tooLong(t, "topic name", len(p.Topic)), badQoS(t, p.QoS)); err != nil {
			return err
		}
	case *Ack:
		props = &p.Props
		if p.Type < TypePuback || p.Type > TypePubcomp {
			return fmt.Errorf("mqtt: Ack of type %s", p.Type)
		}
	case *Subscribe:
		props = &p.Props
		for _, s := range p.Subs {
			if err := firstErr(tooLong(t, "topic filter", len(s.Filter)), badQoS(t, s.QoS)); err != nil {
				return err
			}
			if s.RetainHandling > 2 {
				return fmt.Errorf("mqtt: SUBSCRIBE: retain handling %d", s.RetainHandling)
			}
		}
	case *Suback:
		props = &p.Props
	case *Unsubscribe:
		props = &p.Props
		for _, f := range p.Filters {
			if err := tooLong(t, "topic filter", len(f)); err != nil {
				return err
			}
		}
	case *Unsuback:
		props = &p.Props
	case *Pingreq, *Pingresp:
	case *Disconnect:
		props = &p.Props
	case *Auth:
		props = &p.Props
		if version != V5 {
			return fmt.Errorf("mqtt: AUTH is an MQTT 5 packet, not for level %d", version)
		}
	default:
		return fmt.Errorf("mqtt: cannot encode %T", p)
	}
	if version != V5 {
		return nil
	}
	if props != nil {
		if err := props.checkEncodable(t.String()); err != nil {
			return err
		}
	}
	if willProps != nil {
		return willProps.checkEncodable("will")
	}
	return nil
}

func tooLong(t Type, what string, n int) error {
	if n > 65535 {
		return fmt.Errorf("mqtt: %s: %s of %d bytes, over 65535", t, what, n)
	}
	return nil
}

func badQoS(t Type, q byte) error {
	if q > 2 {
		return fmt.Errorf("mqtt: %s: QoS %d", t, q)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Append encodes p for protocol level version onto dst; it allocates only if dst
// lacks room. A CONNECT is encoded at its own ProtocolLevel when set (it is the
// packet that says the version), with the protocol name filled in when empty.
// Properties are written only for MQTT 5. Append fails only for what no packet can
// carry: strings over 65535 bytes, a remaining length over MaxRemainingLength, QoS 3
// or more, AUTH before MQTT 5, an unknown version; dst is then returned unchanged.
func Append(dst []byte, p Packet, version byte) ([]byte, error) {
	if err := check(p, version); err != nil {
		return dst, err
	}
	l := measure(p, version)
	if l.n > MaxRemainingLength {
		return dst, fmt.Errorf("mqtt: %s: remaining length %d over %d", p.PacketType(), l.n, MaxRemainingLength)
	}
	v5 := version == V5
	switch p := p.(type) {
	case *Connect:
		level := connectLevel(p, version)
		dst = appendHeader(dst, byte(TypeConnect)<<4, l.n)
		dst = append(appendStr(dst, connectName(p, level)), level)
		var flags byte
		if p.CleanStart {
			flags |= 0x02
		}
		if p.WillFlag {
			flags |= 0x04 | p.WillQoS<<3
			if p.WillRetain {
				flags |= 0x20
			}
		}
		if p.HasPassword {
			flags |= 0x40
		}
		if p.HasUsername {
			flags |= 0x80
		}
		dst = appendU16(append(dst, flags), p.KeepAlive)
		if level == V5 {
			dst = appendProps(dst, &p.Props, l.props)
		}
		dst = appendStr(dst, p.ClientID)
		if p.WillFlag {
			if level == V5 {
				dst = appendProps(dst, &p.WillProps, l.willProps)
			}
			dst = appendStr(appendStr(dst, p.WillTopic), p.WillPayload)
		}
		if p.HasUsername {
			dst = appendStr(dst, p.Username)
		}
		if p.HasPassword {
			dst = appendStr(dst, p.Password)
		}
	case *Connack:
		var flags byte
		if p.SessionPresent && version != V31 {
			flags = 1
		}
		dst = append(appendHeader(dst, byte(TypeConnack)<<4, l.n), flags, byte(p.Reason))
		if v5 {
			dst = appendProps(dst, &p.Props, l.props)
		}
	case *Publish:
		dst = appendPublish(dst, p, version, l)
	case *Ack:
		first := byte(p.Type) << 4
		if p.Type == TypePubrel {
			first |= 2
		}
		dst = appendU16(appendHeader(dst, first, l.n), p.PacketID)
		dst = appendTail(dst, p.Reason, &p.Props, l.n-2, l.props)
	case *Subscribe:
		dst = appendU16(appendHeader(dst, byte(TypeSubscribe)<<4|2, l.n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, l.props)
		}
		for _, s := range p.Subs {
			opts := s.QoS
			if v5 {
				if s.NoLocal {
					opts |= 4
				}
				if s.RetainAsPublished {
					opts |= 8
				}
				opts |= s.RetainHandling << 4
			}
			dst = append(appendStr(dst, s.Filter), opts)
		}
	case *Suback:
		dst = appendU16(appendHeader(dst, byte(TypeSuback)<<4, l.n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, l.props)
		}
		for _, r := range p.Reasons {
			dst = append(dst, byte(r))
		}
	case *Unsubscribe:
		dst = appendU16(appendHeader(dst, byte(TypeUnsubscribe)<<4|2, l.n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, l.props)
		}
		for _, f := range p.Filters {
			dst = appendStr(dst, f)
		}
	case *Unsuback:
		dst = appendU16(appendHeader(dst, byte(TypeUnsuback)<<4, l.n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, l.props)
			for _, r := range p.Reasons {
				dst = append(dst, byte(r))
			}
		}
	case *Pingreq:
		dst = append(dst, byte(TypePingreq)<<4, 0)
	case *Pingresp:
		dst = append(dst, byte(TypePingresp)<<4, 0)
	case *Disconnect:
		dst = appendTail(appendHeader(dst, byte(TypeDisconnect)<<4, l.n), p.Reason, &p.Props, l.n, l.props)
	case *Auth:
		dst = appendTail(appendHeader(dst, byte(TypeAuth)<<4, l.n), p.Reason, &p.Props, l.n, l.props)
	}
	return dst, nil
}

func appendHeader(dst []byte, first byte, remaining int) []byte {
	return appendVarint(append(dst, first), uint32(remaining))
}

// appendTail writes the reason-and-properties tail measured by shortTail; n is its
// size.
func appendTail(dst []byte, r ReasonCode, p *Properties, n, props int) []byte {
	if n > 0 {
		dst = append(dst, byte(r))
	}
	if n > 1 {
		dst = appendProps(dst, p, props)
	}
	return dst
}

// AppendConnack encodes a CONNACK without going through the Packet interface, so
// that answering a storm of connections allocates nothing for it. The caller keeps
// its string properties under 64 KiB.
func AppendConnack(dst []byte, p *Connack, version byte) []byte {
	n, props := 2, 0
	if version == V5 {
		props = propsLen(&p.Props)
		n += propBlock(props)
	}
	var flags byte
	if p.SessionPresent && version != V31 {
		flags = 1
	}
	dst = append(appendHeader(dst, byte(TypeConnack)<<4, n), flags, byte(p.Reason))
	if version == V5 {
		dst = appendProps(dst, &p.Props, props)
	}
	return dst
}

// AppendPublish encodes a PUBLISH without going through the Packet interface and
// allocates nothing when dst has room. It is the delivery fast path and so checks
// nothing: the caller keeps QoS at 0 to 2, the topic and string properties under
// 64 KiB and the packet under MaxRemainingLength (Size tells).
func AppendPublish(dst []byte, p *Publish, version byte) []byte {
	var l layout
	l.n = strLen(p.Topic) + len(p.Payload)
	if p.QoS > 0 {
		l.n += 2
	}
	if version == V5 {
		l.props = propsLen(&p.Props)
		l.n += propBlock(l.props)
	}
	return appendPublish(dst, p, version, l)
}

func appendPublish(dst []byte, p *Publish, version byte, l layout) []byte {
	first := byte(TypePublish)<<4 | (p.QoS&3)<<1
	if p.Dup {
		first |= 8
	}
	if p.Retain {
		first |= 1
	}
	dst = appendStr(appendHeader(dst, first, l.n), p.Topic)
	if p.QoS > 0 {
		dst = appendU16(dst, p.PacketID)
	}
	if version == V5 {
		dst = appendProps(dst, &p.Props, l.props)
	}
	return append(dst, p.Payload...)
}
