package packet

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestGolden checks encodings worked out by hand from the specifications, both ways:
// Append produces exactly these bytes and Decode reads them back.
func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		p    Packet
		v    byte
		hex  string
	}{
		// 3.1.1 CONNECT: clean session, keep alive 60, client id "a". Remaining length
		// 13 = name (2+4) + level + flags + keep alive (2) + client id (2+1).
		{"CONNECT 3.1.1", &Connect{ProtocolName: "MQTT", ProtocolLevel: V311, CleanStart: true, KeepAlive: 60, ClientID: "a"}, V311,
			"10 0d 0004 4d515454 04 02 003c 0001 61"},
		// Every flag: user name 80, password 40, will retain 20, will QoS 1 08, will 04,
		// clean 02 = ee. Payload order: client id, will topic, will payload, user, password.
		{"CONNECT 3.1.1 with will and credentials", &Connect{ProtocolName: "MQTT", ProtocolLevel: V311, CleanStart: true, KeepAlive: 10,
			ClientID: "cid", WillFlag: true, WillQoS: 1, WillRetain: true, WillTopic: "w", WillPayload: []byte("bye"),
			Username: "u", HasUsername: true, Password: []byte("p"), HasPassword: true}, V311,
			"10 1d 0004 4d515454 04 ee 000a 0003 636964 0001 77 0003 627965 0001 75 0001 70"},
		{"CONNECT 3.1", &Connect{ProtocolName: "MQIsdp", ProtocolLevel: V31, CleanStart: true, KeepAlive: 60, ClientID: "a"}, V31,
			"10 0f 0006 4d5149736470 03 02 003c 0001 61"},
		// MQTT 5: properties after keep alive: session expiry (11) 120, receive maximum (21) 20.
		{"CONNECT 5", &Connect{ProtocolName: "MQTT", ProtocolLevel: V5, CleanStart: true, KeepAlive: 60, ClientID: "a",
			Props: Properties{SessionExpiry: 120, HasSessionExpiry: true, ReceiveMaximum: 20, HasReceiveMaximum: true}}, V5,
			"10 16 0004 4d515454 05 02 003c 08 11 00000078 21 0014 0001 61"},
		{"PINGREQ", &Pingreq{}, V311, "c0 00"},
		{"PINGRESP", &Pingresp{}, V5, "d0 00"},
		// QoS 1 (flags 0010) "hi" to "a/b", packet id 10.
		{"PUBLISH QoS 1", &Publish{QoS: 1, Topic: "a/b", PacketID: 10, Payload: []byte("hi")}, V311,
			"32 09 0003 612f62 000a 6869"},
		{"PUBLISH QoS 1 v5", &Publish{QoS: 1, Topic: "a/b", PacketID: 10, Payload: []byte("hi")}, V5,
			"32 0a 0003 612f62 000a 00 6869"},
		{"PUBLISH QoS 0 retained", &Publish{Retain: true, Topic: "t", Payload: []byte("hello")}, V311,
			"31 08 0001 74 68656c6c6f"},
		{"PUBLISH QoS 2 duplicate", &Publish{Dup: true, QoS: 2, Topic: "t", PacketID: 1, Payload: []byte("hi")}, V311,
			"3c 07 0001 74 0001 6869"},
		// Payload format 1, message expiry 30, topic alias 2, user property k=v.
		{"PUBLISH v5 with properties", &Publish{Topic: "t", Payload: []byte("x"), Props: Properties{
			PayloadFormat: 1, HasPayloadFormat: true, MessageExpiry: 30, HasMessageExpiry: true,
			TopicAlias: 2, HasTopicAlias: true, UserProperties: []UserProperty{{"k", "v"}}}}, V5,
			"30 16 0001 74 11 01 01 02 0000001e 23 0002 26 0001 6b 0001 76 78"},
		// Remaining length 203 needs two bytes: cb 01.
		{"PUBLISH with a two-byte remaining length", &Publish{Topic: "t", Payload: bytes.Repeat([]byte("a"), 200)}, V311,
			"30 cb 01 0001 74" + strings.Repeat("61", 200)},
		{"CONNACK v5", &Connack{SessionPresent: true, Props: Properties{ReceiveMaximum: 10, HasReceiveMaximum: true, AssignedClientID: "x"}}, V5,
			"20 0a 01 00 07 12 0001 78 21 000a"},
		{"CONNACK v5 capabilities", &Connack{Props: Properties{ServerKeepAlive: 30, HasServerKeepAlive: true,
			TopicAliasMaximum: 5, HasTopicAliasMaximum: true, MaximumQoS: 1, HasMaximumQoS: true,
			RetainAvailable: 0, HasRetainAvailable: true, MaximumPacketSize: 1 << 20, HasMaximumPacketSize: true,
			SharedSubAvailable: 0, HasSharedSubAvailable: true}}, V5,
			"20 14 00 00 11 13 001e 22 0005 24 01 25 00 27 00100000 2a 00"},
		{"CONNACK 3.1.1 refused", &Connack{Reason: ReasonCode(ConnRefusedIdentifier)}, V311, "20 02 00 02"},
		{"CONNACK 3.1.1 session present", &Connack{SessionPresent: true}, V311, "20 02 01 00"},
		// SUBSCRIBE flags 0010; "a/#" at QoS 1.
		{"SUBSCRIBE 3.1.1", &Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "a/#", QoS: 1}}}, V311,
			"82 08 0001 0003 612f23 01"},
		// Options: QoS 2 (02) | no local (04) | retain as published (08) | retain handling 1 (10) = 1e.
		{"SUBSCRIBE v5", &Subscribe{PacketID: 1, Props: Properties{SubscriptionIDs: []uint32{5}},
			Subs: []Subscription{{Filter: "a", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 1}}}, V5,
			"82 09 0001 02 0b 05 0001 61 1e"},
		{"SUBACK 3.1.1", &Suback{PacketID: 1, Reasons: []ReasonCode{GrantedQoS1, 0x80}}, V311, "90 04 0001 01 80"},
		{"SUBACK v5", &Suback{PacketID: 1, Props: Properties{ReasonString: "no"}, Reasons: []ReasonCode{GrantedQoS0, TopicFilterInvalid}}, V5,
			"90 0a 0001 05 1f 0002 6e6f 00 8f"},
		{"UNSUBSCRIBE 3.1.1", &Unsubscribe{PacketID: 2, Filters: []string{"a/b"}}, V311, "a2 07 0002 0003 612f62"},
		{"UNSUBACK 3.1.1", &Unsuback{PacketID: 2}, V311, "b0 02 0002"},
		{"UNSUBACK v5", &Unsuback{PacketID: 2, Reasons: []ReasonCode{Success, NoSubscriptionExisted}}, V5, "b0 05 0002 00 00 11"},
		{"PUBACK v5 short", &Ack{Type: TypePuback, PacketID: 5}, V5, "40 02 0005"},
		{"PUBACK v5 reason", &Ack{Type: TypePuback, PacketID: 5, Reason: NoMatchingSubscribers}, V5, "40 03 0005 10"},
		{"PUBACK v5 properties", &Ack{Type: TypePuback, PacketID: 5, Reason: NoMatchingSubscribers, Props: Properties{ReasonString: "x"}}, V5,
			"40 08 0005 10 04 1f 0001 78"},
		{"PUBACK v5 success with properties", &Ack{Type: TypePuback, PacketID: 5, Props: Properties{ReasonString: "x"}}, V5,
			"40 08 0005 00 04 1f 0001 78"},
		{"PUBREC 3.1.1", &Ack{Type: TypePubrec, PacketID: 5}, V311, "50 02 0005"},
		{"PUBREL 3.1.1", &Ack{Type: TypePubrel, PacketID: 5}, V311, "62 02 0005"},
		{"PUBCOMP 3.1.1", &Ack{Type: TypePubcomp, PacketID: 5}, V311, "70 02 0005"},
		{"DISCONNECT 3.1.1", &Disconnect{}, V311, "e0 00"},
		{"DISCONNECT v5 short", &Disconnect{}, V5, "e0 00"},
		{"DISCONNECT v5 reason", &Disconnect{Reason: SessionTakenOver}, V5, "e0 01 8e"},
		{"DISCONNECT v5 session expiry 0", &Disconnect{Props: Properties{HasSessionExpiry: true}}, V5, "e0 07 00 05 11 00000000"},
		{"AUTH", &Auth{Reason: ContinueAuthentication, Props: Properties{AuthMethod: "S", AuthData: []byte{1, 2}}}, V5,
			"f0 0b 18 09 15 0001 53 16 0002 0102"},
		{"AUTH short", &Auth{}, V5, "f0 00"},
		// AUTH allows only the empty short form: a reason comes with a property length.
		{"AUTH reason only", &Auth{Reason: ReAuthenticate}, V5, "f0 02 19 00"},
	}
	for _, c := range cases {
		want := hx(c.hex)
		got, err := Append(nil, c.p, c.v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: encoded % x, %v\n          want % x", c.name, got, err, want)
		}
		if n := Size(c.p, c.v); n != len(want) {
			t.Errorf("%s: Size %d, want %d", c.name, n, len(want))
		}
		dp, n, err := Decode(want, decodeVersion(c.p, c.v))
		if err != nil || n != len(want) || !reflect.DeepEqual(normalize(dp), normalize(c.p)) {
			t.Errorf("%s: decoded %+v (%d bytes), %v\n          want %+v", c.name, dp, n, err, c.p)
		}
	}
}

// TestRemainingLengthEncoding: the boundaries of table 1.5.5 / 2.4.
func TestRemainingLengthEncoding(t *testing.T) {
	for _, c := range []struct {
		v   uint32
		hex string
	}{
		{0, "00"}, {127, "7f"}, {128, "80 01"}, {16383, "ff 7f"}, {16384, "80 80 01"},
		{2097151, "ff ff 7f"}, {2097152, "80 80 80 01"}, {268435455, "ff ff ff 7f"},
	} {
		want := hx(c.hex)
		if got := appendVarint(nil, c.v); !bytes.Equal(got, want) || varintLen(c.v) != len(want) {
			t.Errorf("%d: % x (len %d), want % x", c.v, got, varintLen(c.v), want)
		}
		_, _, remaining, hdr, ok, err := decodeHeader(append([]byte{0x30}, want...))
		if !ok || err != nil || remaining != int(c.v) || hdr != 1+len(want) {
			t.Errorf("decoding %s: %d, %d, %v, %v", c.hex, remaining, hdr, ok, err)
		}
	}
}
