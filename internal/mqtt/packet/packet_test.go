package packet

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// fullProps sets every property, for round trips that must not lose one.
func fullProps() Properties {
	return Properties{
		PayloadFormat: 1, HasPayloadFormat: true, MessageExpiry: 3600, HasMessageExpiry: true,
		ContentType: "application/json", ResponseTopic: "reply/here", CorrelationData: []byte{1, 2, 3},
		SubscriptionIDs: []uint32{1, 268435455}, SessionExpiry: 0xFFFFFFFF, HasSessionExpiry: true,
		AssignedClientID: "assigned", ServerKeepAlive: 30, HasServerKeepAlive: true,
		AuthMethod: "SCRAM", AuthData: []byte("data"), RequestProblemInfo: 0, HasRequestProblemInfo: true,
		WillDelay: 5, HasWillDelay: true, RequestResponseInfo: 1, HasRequestResponseInfo: true,
		ResponseInfo: "resp", ServerReference: "other:1883", ReasonString: "because",
		ReceiveMaximum: 10, HasReceiveMaximum: true, TopicAliasMaximum: 20, HasTopicAliasMaximum: true,
		TopicAlias: 3, HasTopicAlias: true, MaximumQoS: 1, HasMaximumQoS: true, RetainAvailable: 0, HasRetainAvailable: true,
		UserProperties:    []UserProperty{{"a", "1"}, {"a", "2"}, {"ü", ""}},
		MaximumPacketSize: 1 << 20, HasMaximumPacketSize: true,
		WildcardSubAvailable: 1, HasWildcardSubAvail: true, SubIDAvailable: 1, HasSubIDAvailable: true,
		SharedSubAvailable: 0, HasSharedSubAvailable: true,
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

// samples are packets of every type, valid at version v.
func samples(v byte) []Packet {
	p := fullProps()
	props := func(ctx propCtx) Properties {
		if v != V5 {
			return Properties{}
		}
		return only(p, ctx)
	}
	name := "MQTT"
	if v == V31 {
		name = "MQIsdp"
	}
	connect := &Connect{ProtocolName: name, ProtocolLevel: v, CleanStart: true, KeepAlive: 60, Props: props(ctxConnect),
		ClientID: "client-1", WillFlag: true, WillQoS: 1, WillRetain: true, WillProps: props(ctxWill),
		WillTopic: "last/will", WillPayload: []byte("gone"), Username: "user", HasUsername: true,
		Password: []byte("secret"), HasPassword: true}
	ack := func(t Type) *Ack {
		a := &Ack{Type: t, PacketID: 7}
		if v == V5 {
			a.Reason, a.Props = NoMatchingSubscribers, props(ctxAck)
		}
		return a
	}
	reasons := []ReasonCode{GrantedQoS1, 0x80}
	var unsubReasons []ReasonCode
	if v == V5 {
		reasons = []ReasonCode{GrantedQoS1, TopicFilterInvalid}
		unsubReasons = []ReasonCode{Success, NoSubscriptionExisted}
	}
	sub := Subscription{Filter: "a/+/#", QoS: 2}
	if v == V5 {
		sub.NoLocal, sub.RetainAsPublished, sub.RetainHandling = true, true, 2
	}
	out := []Packet{
		connect,
		&Connack{SessionPresent: true, Props: props(ctxConnack)},
		&Publish{QoS: 0, Topic: "a/b", Props: props(ctxPublish), Payload: []byte("hello")},
		&Publish{Dup: true, QoS: 2, Retain: true, Topic: "a/b", PacketID: 65535, Props: props(ctxPublish), Payload: []byte{}},
		ack(TypePuback), ack(TypePubrec), ack(TypePubrel), ack(TypePubcomp),
		&Subscribe{PacketID: 9, Props: props(ctxSubscribe), Subs: []Subscription{sub, {Filter: "x", QoS: 0}}},
		&Suback{PacketID: 9, Props: props(ctxSuback), Reasons: reasons},
		&Unsubscribe{PacketID: 10, Props: props(ctxUnsubscribe), Filters: []string{"a/+/#", "x"}},
		&Unsuback{PacketID: 10, Props: props(ctxUnsuback), Reasons: unsubReasons},
		&Pingreq{}, &Pingresp{},
		&Disconnect{},
	}
	if v == V5 {
		out = append(out,
			&Disconnect{Reason: DisconnectWithWill, Props: props(ctxDisconnect)},
			&Auth{Reason: ContinueAuthentication, Props: props(ctxAuth)},
			&Ack{Type: TypePuback, PacketID: 1},                        // short form: reason omitted
			&Ack{Type: TypePubrec, PacketID: 2, Reason: QuotaExceeded}, // reason, no properties
		)
	}
	return out
}

func versionFor(p Packet, v byte) byte {
	if _, ok := p.(*Connect); ok {
		return 0
	}
	return v
}

func TestRoundTrip(t *testing.T) {
	for _, v := range []byte{V31, V311, V5} {
		for _, p := range samples(v) {
			b, err := Append(nil, p, v)
			if err != nil {
				t.Fatalf("v%d %T: %v", v, p, err)
			}
			if len(b) != Size(p, v) {
				t.Errorf("v%d %T: Size %d, encoded %d", v, p, Size(p, v), len(b))
			}
			got, n, err := Decode(b, versionFor(p, v))
			if err != nil {
				t.Fatalf("v%d %T: decode %x: %v", v, p, b, err)
			}
			if n != len(b) {
				t.Errorf("v%d %T: used %d of %d bytes", v, p, n, len(b))
			}
			if !reflect.DeepEqual(normalize(got), normalize(p)) {
				t.Errorf("v%d %T:\n got %+v\nwant %+v", v, p, got, p)
			}
		}
	}
}

// normalize makes nil and empty slices equal for comparison.
func normalize(p Packet) Packet {
	fix := func(pp *Properties) {
		if len(pp.CorrelationData) == 0 {
			pp.CorrelationData = nil
		}
		if len(pp.SubscriptionIDs) == 0 {
			pp.SubscriptionIDs = nil
		}
		if len(pp.UserProperties) == 0 {
			pp.UserProperties = nil
		}
		if len(pp.AuthData) == 0 {
			pp.AuthData = nil
		}
	}
	switch p := p.(type) {
	case *Connect:
		c := *p
		fix(&c.Props)
		fix(&c.WillProps)
		if len(c.WillPayload) == 0 {
			c.WillPayload = nil
		}
		if len(c.Password) == 0 {
			c.Password = nil
		}
		return &c
	case *Publish:
		c := *p
		fix(&c.Props)
		if len(c.Payload) == 0 {
			c.Payload = nil
		}
		return &c
	case *Connack:
		c := *p
		fix(&c.Props)
		return &c
	case *Ack:
		c := *p
		fix(&c.Props)
		return &c
	case *Subscribe:
		c := *p
		fix(&c.Props)
		return &c
	case *Suback:
		c := *p
		fix(&c.Props)
		return &c
	case *Unsubscribe:
		c := *p
		fix(&c.Props)
		return &c
	case *Unsuback:
		c := *p
		fix(&c.Props)
		if len(c.Reasons) == 0 {
			c.Reasons = nil
		}
		return &c
	case *Disconnect:
		c := *p
		fix(&c.Props)
		return &c
	case *Auth:
		c := *p
		fix(&c.Props)
		return &c
	}
	return p
}

// TestGoldenBytes checks encodings worked out by hand from the specifications.
func TestGoldenBytes(t *testing.T) {
	cases := []struct {
		name string
		p    Packet
		v    byte
		hex  string
	}{
		// 3.1.1 CONNECT, clean session, keepalive 60, client id "a".
		{"connect311", &Connect{ProtocolName: "MQTT", ProtocolLevel: V311, CleanStart: true, KeepAlive: 60, ClientID: "a"}, V311,
			"10 0d 0004 4d515454 04 02 003c 0001 61"},
		{"pingreq", &Pingreq{}, V311, "c0 00"},
		{"pingresp", &Pingresp{}, V5, "d0 00"},
		// QoS 1 PUBLISH of "hi" to "a/b", packet id 10.
		{"publish-qos1", &Publish{QoS: 1, Topic: "a/b", PacketID: 10, Payload: []byte("hi")}, V311,
			"32 09 0003 612f62 000a 6869"},
		// v5: same with an empty property block.
		{"publish-qos1-v5", &Publish{QoS: 1, Topic: "a/b", PacketID: 10, Payload: []byte("hi")}, V5,
			"32 0a 0003 612f62 000a 00 6869"},
		// v5 CONNACK, session present, success, receive maximum 10 and assigned id "x".
		{"connack-v5", &Connack{SessionPresent: true, Props: Properties{ReceiveMaximum: 10, HasReceiveMaximum: true, AssignedClientID: "x"}}, V5,
			"20 0a 01 00 07 12 0001 78 21 000a"},
		// 3.1.1 CONNACK refusing the identifier.
		{"connack-v3", &Connack{Reason: ReasonCode(ConnRefusedIdentifier)}, V311, "20 02 00 02"},
		// SUBSCRIBE "a/#" QoS 1 with packet id 1 (flags 0010).
		{"subscribe311", &Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "a/#", QoS: 1}}}, V311, "82 08 0001 0003 612f23 01"},
		// v5 PUBACK short form and with a reason.
		{"puback-v5-short", &Ack{Type: TypePuback, PacketID: 5}, V5, "40 02 0005"},
		{"puback-v5-reason", &Ack{Type: TypePuback, PacketID: 5, Reason: NoMatchingSubscribers}, V5, "40 03 0005 10"},
		{"pubrel311", &Ack{Type: TypePubrel, PacketID: 5}, V311, "62 02 0005"},
		{"disconnect-v5", &Disconnect{Reason: SessionTakenOver}, V5, "e0 01 8e"},
		{"disconnect311", &Disconnect{}, V311, "e0 00"},
	}
	for _, c := range cases {
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Append(nil, c.p, c.v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: encoded % x, %v; want % x", c.name, got, err, want)
		}
		dp, _, err := Decode(want, versionFor(c.p, c.v))
		if err != nil || !reflect.DeepEqual(normalize(dp), normalize(c.p)) {
			t.Errorf("%s: decoded %+v, %v; want %+v", c.name, dp, err, c.p)
		}
	}
}

func TestMalformed(t *testing.T) {
	cases := []struct {
		name   string
		hex    string
		v      byte
		reason ReasonCode
	}{
		{"first not connect", "c0 00", 0, ProtocolError},
		{"second connect", "10 0d 0004 4d515454 04 02 003c 0001 61", V311, ProtocolError},
		{"bad protocol level", "10 0d 0004 4d515454 07 02 003c 0001 61", 0, UnsupportedProtocolVersion},
		{"bad protocol name", "10 0d 0004 4d515455 04 02 003c 0001 61", 0, UnsupportedProtocolVersion},
		{"connect reserved flag", "10 0d 0004 4d515454 04 03 003c 0001 61", 0, MalformedPacket},
		{"will qos without will", "10 0d 0004 4d515454 04 0a 003c 0001 61", 0, MalformedPacket},
		{"password without user 311", "10 0f 0004 4d515454 04 42 003c 0001 61 0000", 0, MalformedPacket},
		{"client id bad utf8", "10 0d 0004 4d515454 04 02 003c 0001 ff", 0, MalformedPacket},
		{"client id NUL", "10 0d 0004 4d515454 04 02 003c 0001 00", 0, MalformedPacket},
		{"trailing bytes", "c0 01 00", V311, MalformedPacket},
		{"pingreq flags", "c1 00", V311, MalformedPacket},
		{"subscribe flags", "80 08 0001 0003 612f23 01", V311, MalformedPacket},
		{"publish qos 3", "36 05 0001 61 0001", V311, MalformedPacket},
		{"publish dup qos0 311", "38 03 0001 61", V311, MalformedPacket},
		{"publish dup qos0 v5", "38 04 0001 61 00", V5, ProtocolError},
		{"publish wildcard", "30 03 0001 23", V311, TopicNameInvalid},
		{"publish empty topic 311", "30 02 0000", V311, TopicNameInvalid},
		{"publish empty topic no alias v5", "30 03 0000 00", V5, ProtocolError},
		{"publish pid 0", "32 05 0001 61 0000", V311, MalformedPacket},
		{"publish topic alias 0", "30 07 0001 61 03 23 0000", V5, TopicAliasInvalid},
		{"publish bad property", "30 06 0001 61 02 11 00", V5, ProtocolError},
		{"publish duplicate property", "30 08 0001 61 04 01 00 01 00", V5, ProtocolError},
		{"publish bad payload format", "30 06 0001 61 02 01 02", V5, ProtocolError},
		{"publish utf8 payload invalid", "30 07 0001 61 02 01 01 ff", V5, PayloadFormatInvalid},
		{"props past end", "30 05 0001 61 09 01", V5, MalformedPacket},
		{"subscribe no filters", "82 02 0001", V311, ProtocolError},
		{"subscribe qos 3", "82 06 0001 0001 61 03", V311, MalformedPacket},
		{"subscribe reserved option 311", "82 06 0001 0001 61 04", V311, MalformedPacket},
		{"subscribe retain handling 3", "82 07 0001 00 0001 61 30", V5, ProtocolError},
		{"subscribe sub id 0", "82 09 0001 02 0b 00 0001 61 00", V5, ProtocolError},
		{"unsubscribe none", "a2 02 0001", V311, ProtocolError},
		{"puback pid 0", "40 02 0000", V311, MalformedPacket},
		{"puback too long 311", "40 03 0001 00", V311, MalformedPacket},
		{"receive maximum 0", "10 11 0004 4d515454 05 02 003c 03 21 0000 0001 61", 0, ProtocolError},
		{"auth in 311", "f0 00", V311, MalformedPacket},
		{"varint 5 bytes", "30 ff ff ff ff 7f", V311, MalformedPacket},
	}
	for _, c := range cases {
		b, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		if err != nil {
			t.Fatal(c.name, err)
		}
		_, _, err = Decode(b, c.v)
		var perr *Error
		if !errors.As(err, &perr) || perr.Reason != c.reason {
			t.Errorf("%s: err = %v, want reason %s", c.name, err, c.reason)
		}
	}
}

func TestValidFilterAndShared(t *testing.T) {
	for _, f := range []string{"a", "a/b", "+", "#", "a/+", "a/#", "+/+/#", "/", "a//b", "$SYS/#"} {
		if err := ValidFilter(f); err != nil {
			t.Errorf("ValidFilter(%q) = %v", f, err)
		}
	}
	for _, f := range []string{"", "a+", "a/b+", "#/a", "a#", "a/#/", "++", "a\x00"} {
		if err := ValidFilter(f); !errors.Is(err, ErrBadTopic) {
			t.Errorf("ValidFilter(%q) = %v, want ErrBadTopic", f, err)
		}
	}
	g, f, ok, err := ParseShared("$share/workers/jobs/#")
	if g != "workers" || f != "jobs/#" || !ok || err != nil {
		t.Errorf("ParseShared = %q %q %v %v", g, f, ok, err)
	}
	if _, f, ok, err := ParseShared("jobs/#"); ok || err != nil || f != "jobs/#" {
		t.Errorf("ParseShared(plain) = %q %v %v", f, ok, err)
	}
	for _, bad := range []string{"$share/", "$share/g", "$share//x", "$share/g/", "$share/g+/x", "$share/#/x"} {
		if _, _, ok, err := ParseShared(bad); !ok || !errors.Is(err, ErrBadTopic) {
			t.Errorf("ParseShared(%q) = %v %v, want a shared-subscription error", bad, ok, err)
		}
	}
}

func encodeAll(t testing.TB, v byte, ps ...Packet) []byte {
	var b []byte
	for _, p := range ps {
		var err error
		if b, err = Append(b, p, v); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestReaderSplitReads feeds packets one byte at a time.
func TestReaderSplitReads(t *testing.T) {
	ps := samples(V5)
	stream := encodeAll(t, V5, ps...)
	r := NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 1<<20)
	for i, want := range ps {
		if i == 1 {
			r.SetVersion(V5)
		}
		got, err := r.ReadPacket()
		if err != nil {
			t.Fatalf("packet %d (%T): %v", i, want, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("packet %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if _, err := r.ReadPacket(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

func TestReaderLargePacketAndLimits(t *testing.T) {
	big := &Publish{QoS: 1, PacketID: 1, Topic: "t", Payload: bytes.Repeat([]byte("x"), 100<<10)}
	stream := encodeAll(t, V311, big, &Pingreq{})
	r := NewReader(bytes.NewReader(stream), 1<<20)
	r.SetVersion(V311)
	p, err := r.ReadPacket()
	if err != nil || !bytes.Equal(p.(*Publish).Payload, big.Payload) {
		t.Fatalf("big publish: %v", err)
	}
	if p, err := r.ReadPacket(); err != nil || p.PacketType() != TypePingreq {
		t.Fatalf("after big publish: %v %v", p, err)
	}

	r = NewReader(bytes.NewReader(stream), 64<<10)
	r.SetVersion(V311)
	var perr *Error
	if _, err := r.ReadPacket(); !errors.As(err, &perr) || perr.Reason != PacketTooLarge {
		t.Fatalf("over the limit: %v, want PacketTooLarge", err)
	}

	r = NewReader(bytes.NewReader(stream[:1000]), 1<<20)
	r.SetVersion(V311)
	if _, err := r.ReadPacket(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut packet: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestReaderReusesPublish(t *testing.T) {
	stream := encodeAll(t, V311, &Publish{Topic: "a", Payload: []byte("1")}, &Publish{Topic: "b", Payload: []byte("2")})
	r := NewReader(bytes.NewReader(stream), 1<<20)
	r.SetVersion(V311)
	p1, _ := r.ReadPacket()
	p2, err := r.ReadPacket()
	if err != nil || p1 != p2 || p2.(*Publish).Topic != "b" {
		t.Fatalf("second publish %+v, %v; want the same *Publish holding topic b", p2, err)
	}
}

func TestV3ConnackCode(t *testing.T) {
	for r, want := range map[ReasonCode]byte{Success: 0, UnsupportedProtocolVersion: 1, ClientIdentifierNotValid: 2,
		ServerBusy: 3, BadUserNameOrPassword: 4, NotAuthorized: 5} {
		if got := V3ConnackCode(r); got != want {
			t.Errorf("V3ConnackCode(%s) = %d, want %d", r, got, want)
		}
	}
}

func BenchmarkAppendPublish(b *testing.B) {
	p := &Publish{QoS: 1, PacketID: 1, Topic: "sensors/k1/temp", Payload: make([]byte, 32)}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendPublish(buf[:0], p, V5)
	}
}

func BenchmarkReadPublish(b *testing.B) {
	one := encodeAll(b, V311, &Publish{Topic: "sensors/k1/temp", Payload: make([]byte, 32)})
	stream := bytes.Repeat(one, 1024)
	rd := bytes.NewReader(stream)
	r := NewReader(rd, 1<<20)
	r.SetVersion(V311)
	b.ReportAllocs()
	b.SetBytes(int64(len(one)))
	for b.Loop() {
		if _, err := r.ReadPacket(); err != nil {
			rd.Reset(stream)
			if _, err := r.ReadPacket(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
