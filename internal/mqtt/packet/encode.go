package packet

import "fmt"

// appendFixed appends a fixed header.
func appendFixed(dst []byte, first byte, remaining int) []byte {
	return appendVarint(append(dst, first), uint32(remaining))
}

func strLen[S ~string | ~[]byte](s S) int { return 2 + len(s) }

// bodyLen is the remaining length of p and, for MQTT 5, the length of each
// property block it holds (main, then will).
func bodyLen(p Packet, version byte) (n, props, willProps int) {
	v5 := version == V5
	withProps := func(pp *Properties) int {
		if !v5 {
			return 0
		}
		props = propsLen(pp)
		return varintLen(uint32(props)) + props
	}
	switch p := p.(type) {
	case *Connect:
		n = strLen(p.ProtocolName) + 1 + 1 + 2 + withProps(&p.Props) + strLen(p.ClientID)
		if p.WillFlag {
			if v5 {
				willProps = propsLen(&p.WillProps)
				n += varintLen(uint32(willProps)) + willProps
			}
			n += strLen(p.WillTopic) + strLen(p.WillPayload)
		}
		if p.HasUsername {
			n += strLen(p.Username)
		}
		if p.HasPassword {
			n += strLen(p.Password)
		}
	case *Connack:
		n = 2 + withProps(&p.Props)
	case *Publish:
		n = strLen(p.Topic) + withProps(&p.Props) + len(p.Payload)
		if p.QoS > 0 {
			n += 2
		}
	case *Ack:
		n = 2
		if v5 {
			props = propsLen(&p.Props)
			switch {
			case props > 0:
				n += 1 + varintLen(uint32(props)) + props
			case p.Reason != Success:
				n++
			}
		}
	case *Subscribe:
		n = 2 + withProps(&p.Props)
		for _, s := range p.Subs {
			n += strLen(s.Filter) + 1
		}
	case *Suback:
		n = 2 + withProps(&p.Props) + len(p.Reasons)
	case *Unsubscribe:
		n = 2 + withProps(&p.Props)
		for _, f := range p.Filters {
			n += strLen(f)
		}
	case *Unsuback:
		n = 2
		if v5 {
			n += withProps(&p.Props) + len(p.Reasons)
		}
	case *Pingreq, *Pingresp:
	case *Disconnect:
		if v5 {
			props = propsLen(&p.Props)
			switch {
			case props > 0:
				n = 1 + varintLen(uint32(props)) + props
			case p.Reason != Success:
				n = 1
			}
		}
	case *Auth:
		props = propsLen(&p.Props)
		switch {
		case props > 0:
			n = 1 + varintLen(uint32(props)) + props
		case p.Reason != Success:
			n = 1
		}
	}
	return n, props, willProps
}

// Size is the encoded size of p, fixed header included.
func Size(p Packet, version byte) int {
	n, _, _ := bodyLen(p, version)
	return 1 + varintLen(uint32(n)) + n
}

func checkStrs(p Packet) error {
	long := func(what string, n int) error {
		if n > 65535 {
			return fmt.Errorf("packet: %s of %d bytes over 65535", what, n)
		}
		return nil
	}
	switch p := p.(type) {
	case *Connect:
		for _, e := range []error{long("client id", len(p.ClientID)), long("will topic", len(p.WillTopic)),
			long("will payload", len(p.WillPayload)), long("user name", len(p.Username)), long("password", len(p.Password))} {
			if e != nil {
				return e
			}
		}
	case *Publish:
		return long("topic", len(p.Topic))
	case *Subscribe:
		for _, s := range p.Subs {
			if err := long("filter", len(s.Filter)); err != nil {
				return err
			}
		}
	case *Unsubscribe:
		for _, f := range p.Filters {
			if err := long("filter", len(f)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Append encodes p for protocol level version onto dst. Properties are written only
// for MQTT 5. It fails only for values no packet can carry (strings over 64 KiB, a
// remaining length over MaxRemainingLength).
func Append(dst []byte, p Packet, version byte) ([]byte, error) {
	n, props, willProps := bodyLen(p, version)
	if n > MaxRemainingLength {
		return dst, fmt.Errorf("packet: %s remaining length %d over %d", p.PacketType(), n, MaxRemainingLength)
	}
	if err := checkStrs(p); err != nil {
		return dst, err
	}
	v5 := version == V5
	switch p := p.(type) {
	case *Connect:
		dst = appendFixed(dst, byte(TypeConnect)<<4, n)
		dst = appendStr(dst, p.ProtocolName)
		dst = append(dst, p.ProtocolLevel)
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
		if v5 {
			dst = appendProps(dst, &p.Props, props)
		}
		dst = appendStr(dst, p.ClientID)
		if p.WillFlag {
			if v5 {
				dst = appendProps(dst, &p.WillProps, willProps)
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
		dst = appendFixed(dst, byte(TypeConnack)<<4, n)
		var flags byte
		if p.SessionPresent {
			flags = 1
		}
		dst = append(dst, flags, byte(p.Reason))
		if v5 {
			dst = appendProps(dst, &p.Props, props)
		}
	case *Publish:
		return appendPublish(dst, p, version, n, props), nil
	case *Ack:
		first := byte(p.Type) << 4
		if p.Type == TypePubrel {
			first |= 2
		}
		dst = appendU16(appendFixed(dst, first, n), p.PacketID)
		if n > 2 {
			dst = append(dst, byte(p.Reason))
		}
		if n > 3 {
			dst = appendProps(dst, &p.Props, props)
		}
	case *Subscribe:
		dst = appendU16(appendFixed(dst, byte(TypeSubscribe)<<4|2, n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, props)
		}
		for _, s := range p.Subs {
			opts := s.QoS & 3
			if v5 {
				if s.NoLocal {
					opts |= 4
				}
				if s.RetainAsPublished {
					opts |= 8
				}
				opts |= (s.RetainHandling & 3) << 4
			}
			dst = append(appendStr(dst, s.Filter), opts)
		}
	case *Suback:
		dst = appendU16(appendFixed(dst, byte(TypeSuback)<<4, n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, props)
		}
		for _, r := range p.Reasons {
			dst = append(dst, byte(r))
		}
	case *Unsubscribe:
		dst = appendU16(appendFixed(dst, byte(TypeUnsubscribe)<<4|2, n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, props)
		}
		for _, f := range p.Filters {
			dst = appendStr(dst, f)
		}
	case *Unsuback:
		dst = appendU16(appendFixed(dst, byte(TypeUnsuback)<<4, n), p.PacketID)
		if v5 {
			dst = appendProps(dst, &p.Props, props)
			for _, r := range p.Reasons {
				dst = append(dst, byte(r))
			}
		}
	case *Pingreq:
		dst = append(dst, byte(TypePingreq)<<4, 0)
	case *Pingresp:
		dst = append(dst, byte(TypePingresp)<<4, 0)
	case *Disconnect:
		dst = appendFixed(dst, byte(TypeDisconnect)<<4, n)
		if n > 0 {
			dst = append(dst, byte(p.Reason))
		}
		if n > 1 {
			dst = appendProps(dst, &p.Props, props)
		}
	case *Auth:
		dst = appendFixed(dst, byte(TypeAuth)<<4, n)
		if n > 0 {
			dst = append(dst, byte(p.Reason))
		}
		if n > 1 {
			dst = appendProps(dst, &p.Props, props)
		}
	default:
		return dst, fmt.Errorf("packet: cannot encode %T", p)
	}
	return dst, nil
}

// AppendPublish encodes a PUBLISH without going through the Packet interface; it
// allocates nothing when dst has room. The caller keeps the topic under 64 KiB and the
// packet under MaxRemainingLength.
func AppendPublish(dst []byte, p *Publish, version byte) []byte {
	n := strLen(p.Topic) + len(p.Payload)
	if p.QoS > 0 {
		n += 2
	}
	props := 0
	if version == V5 {
		props = propsLen(&p.Props)
		n += varintLen(uint32(props)) + props
	}
	return appendPublish(dst, p, version, n, props)
}

func appendPublish(dst []byte, p *Publish, version byte, n, props int) []byte {
	first := byte(TypePublish)<<4 | (p.QoS&3)<<1
	if p.Dup {
		first |= 8
	}
	if p.Retain {
		first |= 1
	}
	dst = appendStr(appendFixed(dst, first, n), p.Topic)
	if p.QoS > 0 {
		dst = appendU16(dst, p.PacketID)
	}
	if version == V5 {
		dst = appendProps(dst, &p.Props, props)
	}
	return append(dst, p.Payload...)
}
