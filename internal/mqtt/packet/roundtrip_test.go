package packet

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRoundTrip: every packet type at every version encodes to Size bytes, decodes
// to what it was, and encodes again to the same bytes.
func TestRoundTrip(t *testing.T) {
	for _, v := range versions {
		for i, p := range samples(v) {
			name := fmt.Sprintf("v%d/%d-%s", v, i, p.PacketType())
			t.Run(name, func(t *testing.T) {
				b, err := Append(nil, p, v)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) != Size(p, v) {
					t.Errorf("Size %d, encoded %d", Size(p, v), len(b))
				}
				got, n, err := Decode(b, decodeVersion(p, v))
				if err != nil {
					t.Fatalf("decoding % x: %v", b, err)
				}
				if n != len(b) {
					t.Errorf("used %d of %d bytes", n, len(b))
				}
				if !reflect.DeepEqual(normalize(got), normalize(p)) {
					t.Errorf("\n got %+v\nwant %+v", got, p)
				}
				again, err := Append(nil, got, v)
				if err != nil || !bytes.Equal(again, b) {
					t.Errorf("re-encoded % x, %v\n        want % x", again, err, b)
				}
			})
		}
	}
}

// TestEveryPropertyExercised guards the round trip above: every field of
// Properties is set in some MQTT 5 sample and survives decoding.
func TestEveryPropertyExercised(t *testing.T) {
	seen := map[string]bool{}
	mark := func(pp *Properties) {
		v := reflect.ValueOf(pp).Elem()
		for i := 0; i < v.NumField(); i++ {
			if !v.Field(i).IsZero() {
				seen[v.Type().Field(i).Name] = true
			}
		}
	}
	for _, p := range samples(V5) {
		b, err := Append(nil, p, V5)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := Decode(b, decodeVersion(p, V5))
		if err != nil {
			t.Fatal(err)
		}
		switch got := got.(type) {
		case *Connect:
			mark(&got.Props)
			mark(&got.WillProps)
		case *Connack:
			mark(&got.Props)
		case *Publish:
			mark(&got.Props)
		case *Ack:
			mark(&got.Props)
		case *Subscribe:
			mark(&got.Props)
		case *Suback:
			mark(&got.Props)
		case *Unsubscribe:
			mark(&got.Props)
		case *Unsuback:
			mark(&got.Props)
		case *Disconnect:
			mark(&got.Props)
		case *Auth:
			mark(&got.Props)
		}
	}
	typ := reflect.TypeOf(Properties{})
	for i := 0; i < typ.NumField(); i++ {
		if !seen[typ.Field(i).Name] {
			t.Errorf("no MQTT 5 sample carries %s through a round trip", typ.Field(i).Name)
		}
	}
}

// TestPropertyTable checks, for every property identifier in every packet that
// carries properties, that Decode accepts exactly what table 2-4 of the MQTT 5
// specification allows (the table is written out here again, independently of the
// package's) and that what it accepts encodes back to the same bytes.
func TestPropertyTable(t *testing.T) {
	all := []string{"CONNECT", "will", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
		"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT", "AUTH"}
	spec := map[byte][]string{
		0x01: {"PUBLISH", "will"}, 0x02: {"PUBLISH", "will"}, 0x03: {"PUBLISH", "will"},
		0x08: {"PUBLISH", "will"}, 0x09: {"PUBLISH", "will"}, 0x0B: {"PUBLISH", "SUBSCRIBE"},
		0x11: {"CONNECT", "CONNACK", "DISCONNECT"}, 0x12: {"CONNACK"}, 0x13: {"CONNACK"},
		0x15: {"CONNECT", "CONNACK", "AUTH"}, 0x16: {"CONNECT", "CONNACK", "AUTH"},
		0x17: {"CONNECT"}, 0x18: {"will"}, 0x19: {"CONNECT"}, 0x1A: {"CONNACK"},
		0x1C: {"CONNACK", "DISCONNECT"},
		0x1F: {"CONNACK", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBACK", "UNSUBACK", "DISCONNECT", "AUTH"},
		0x21: {"CONNECT", "CONNACK"}, 0x22: {"CONNECT", "CONNACK"}, 0x23: {"PUBLISH"},
		0x24: {"CONNACK"}, 0x25: {"CONNACK"}, 0x26: all, 0x27: {"CONNECT", "CONNACK"},
		0x28: {"CONNACK"}, 0x29: {"CONNACK"}, 0x2A: {"CONNACK"},
	}
	// A valid value for each identifier.
	value := map[byte]string{
		0x01: "01", 0x02: "00000010", 0x03: "0001 61", 0x08: "0001 61", 0x09: "0001 01", 0x0B: "05",
		0x11: "0000000a", 0x12: "0001 61", 0x13: "000a", 0x15: "0001 61", 0x16: "0001 01", 0x17: "01",
		0x18: "00000005", 0x19: "01", 0x1A: "0001 61", 0x1C: "0001 61", 0x1F: "0001 61", 0x21: "000a",
		0x22: "000a", 0x23: "0001", 0x24: "01", 0x25: "01", 0x26: "0001 6b 0001 76", 0x27: "00001000",
		0x28: "01", 0x29: "01", 0x2A: "01",
	}
	// wrap puts a property block (length included) into a whole MQTT 5 packet.
	wrap := map[string]func(props string) []byte{
		"CONNECT":     func(p string) []byte { return pkt(0x10, "0004 4d515454 05 02 003c"+p+"0001 61") },
		"will":        func(p string) []byte { return pkt(0x10, "0004 4d515454 05 06 003c 00 0001 61"+p+"0001 77 0001 68") },
		"CONNACK":     func(p string) []byte { return pkt(0x20, "00 00"+p) },
		"PUBLISH":     func(p string) []byte { return pkt(0x30, "0001 74"+p+"68") },
		"PUBACK":      func(p string) []byte { return pkt(0x40, "0001 00"+p) },
		"PUBREC":      func(p string) []byte { return pkt(0x50, "0001 00"+p) },
		"PUBREL":      func(p string) []byte { return pkt(0x62, "0001 00"+p) },
		"PUBCOMP":     func(p string) []byte { return pkt(0x70, "0001 00"+p) },
		"SUBSCRIBE":   func(p string) []byte { return pkt(0x82, "0001"+p+"0001 61 00") },
		"SUBACK":      func(p string) []byte { return pkt(0x90, "0001"+p+"00") },
		"UNSUBSCRIBE": func(p string) []byte { return pkt(0xa2, "0001"+p+"0001 61") },
		"UNSUBACK":    func(p string) []byte { return pkt(0xb0, "0001"+p+"00") },
		"DISCONNECT":  func(p string) []byte { return pkt(0xe0, "00"+p) },
		"AUTH":        func(p string) []byte { return pkt(0xf0, "18"+p) },
	}
	block := func(props string) string {
		return fmt.Sprintf(" %02x %s ", len(hx(props)), props)
	}
	for id := 0; id < 0x80; id++ {
		where, known := spec[byte(id)]
		for _, kind := range all {
			ok := known && strings.Contains(" "+strings.Join(where, " ")+" ", " "+kind+" ")
			props := fmt.Sprintf("%02x %s", id, value[byte(id)])
			if id == 0x16 && ok {
				props = "15 0001 61 " + props // authentication data needs a method
			}
			b := wrap[kind](block(props))
			v := V5
			if kind == "CONNECT" || kind == "will" {
				v = 0
			}
			p, _, err := Decode(b, v)
			if ok {
				if err != nil {
					t.Errorf("property 0x%02X in %s: %v", id, kind, err)
					continue
				}
				if again, err := Append(nil, p, V5); err != nil || !bytes.Equal(again, b) {
					t.Errorf("property 0x%02X in %s: re-encoded % x, %v; want % x", id, kind, again, err, b)
				}
				continue
			}
			if e, isErr := err.(*Error); !isErr || e.Reason != MalformedPacket {
				t.Errorf("property 0x%02X in %s: err %v, want a malformed packet", id, kind, err)
			}
		}
	}
}

// TestReasonTables checks the reason codes each MQTT 5 packet may carry against the
// specification's tables, written out again here.
func TestReasonTables(t *testing.T) {
	tables := map[string]struct {
		allowed string
		packet  func(r byte) []byte
	}{
		"CONNACK": {"00 80 81 82 83 84 85 86 87 88 89 8a 8c 90 95 97 99 9a 9b 9c 9d 9f",
			func(r byte) []byte { return pkt(0x20, fmt.Sprintf("00 %02x 00", r)) }},
		"PUBACK":  {"00 10 80 83 87 90 91 97 99", func(r byte) []byte { return pkt(0x40, fmt.Sprintf("0001 %02x", r)) }},
		"PUBREC":  {"00 10 80 83 87 90 91 97 99", func(r byte) []byte { return pkt(0x50, fmt.Sprintf("0001 %02x", r)) }},
		"PUBREL":  {"00 92", func(r byte) []byte { return pkt(0x62, fmt.Sprintf("0001 %02x", r)) }},
		"PUBCOMP": {"00 92", func(r byte) []byte { return pkt(0x70, fmt.Sprintf("0001 %02x", r)) }},
		"SUBACK": {"00 01 02 80 83 87 8f 91 97 9e a1 a2",
			func(r byte) []byte { return pkt(0x90, fmt.Sprintf("0001 00 00 %02x", r)) }},
		"UNSUBACK": {"00 11 80 83 87 8f 91", func(r byte) []byte { return pkt(0xb0, fmt.Sprintf("0001 00 %02x", r)) }},
		"DISCONNECT": {"00 04 80 81 82 83 87 89 8b 8d 8e 8f 90 93 94 95 96 97 98 99 9a 9b 9c 9d 9e 9f a0 a1 a2",
			func(r byte) []byte { return pkt(0xe0, fmt.Sprintf("%02x 00", r)) }},
		"AUTH": {"00 18 19", func(r byte) []byte { return pkt(0xf0, fmt.Sprintf("%02x 00", r)) }},
	}
	for name, tab := range tables {
		ok := map[byte]bool{}
		for _, c := range hx(tab.allowed) {
			ok[c] = true
		}
		for r := 0; r < 256; r++ {
			_, _, err := Decode(tab.packet(byte(r)), V5)
			if ok[byte(r)] && err != nil {
				t.Errorf("%s reason 0x%02X: %v", name, r, err)
			}
			if e, isErr := err.(*Error); !ok[byte(r)] && (!isErr || e.Reason != ProtocolError) {
				t.Errorf("%s reason 0x%02X: err %v, want a protocol error", name, r, err)
			}
		}
	}
	// 3.x: SUBACK 0, 1, 2 or 0x80; CONNACK 0 to 5.
	for r := 0; r < 256; r++ {
		_, _, err := Decode(pkt(0x90, fmt.Sprintf("0001 %02x", r)), V311)
		if want := r <= 2 || r == 0x80; (err == nil) != want {
			t.Errorf("3.1.1 SUBACK return code 0x%02X: %v", r, err)
		}
		_, _, err = Decode(pkt(0x20, fmt.Sprintf("00 %02x", r)), V311)
		if want := r <= 5; (err == nil) != want {
			t.Errorf("3.1.1 CONNACK return code 0x%02X: %v", r, err)
		}
	}
}

// TestAccepted: things that look odd but are valid.
func TestAccepted(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		v    byte
		want Packet
	}{
		{"v5 empty topic with a topic alias", pkt(0x30, "0000 03 23 0007 6869"), V5,
			&Publish{Props: Properties{TopicAlias: 7, HasTopicAlias: true}, Payload: []byte("hi")}},
		{"v5 password without user name", pkt(0x10, "0004 4d515454 05 40 0000 00 0001 61 0002 7077"), 0,
			&Connect{ProtocolName: "MQTT", ProtocolLevel: V5, ClientID: "a", Password: []byte("pw"), HasPassword: true}},
		{"3.1.1 empty client identifier", pkt(0x10, "0004 4d515454 04 02 0000 0000"), 0,
			&Connect{ProtocolName: "MQTT", ProtocolLevel: V311, CleanStart: true}},
		{"syntactically bad filter is the caller's to judge", pkt(0x82, "0001 0005 612f232f62 00"), V311,
			&Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "a/#/b"}}}},
		{"empty filter too", pkt(0xa2, "0001 0000"), V311, &Unsubscribe{PacketID: 1, Filters: []string{""}}},
		{"AUTH with a reason and no property length", pkt(0xf0, "18"), V5, &Auth{Reason: ContinueAuthentication}},
		{"DISCONNECT with a reason and no property length", pkt(0xe0, "04"), V5, &Disconnect{Reason: DisconnectWithWill}},
		{"v5 CONNACK without a property length", pkt(0x20, "00 84"), V5, &Connack{Reason: UnsupportedProtocolVersion}},
		{"3.1 CONNACK ignores its first byte", pkt(0x20, "01 00"), V31, &Connack{}},
		{"PUBACK short form", pkt(0x40, "0001"), V5, &Ack{Type: TypePuback, PacketID: 1}},
		{"PUBREL reason without properties", pkt(0x62, "0001 92"), V5, &Ack{Type: TypePubrel, PacketID: 1, Reason: PacketIdentifierNotFound}},
		{"remaining length in more bytes than needed", hx("c0 80 00"), V311, &Pingreq{}},
		{"several subscription identifiers in PUBLISH", pkt(0x30, "0001 61 05 0b 01 0b 80 01"), V5,
			&Publish{Topic: "a", Props: Properties{SubscriptionIDs: []uint32{1, 128}}}},
		{"repeated user property names keep their order", pkt(0x40, "0001 00 0e 26 0001 6b 0001 32 26 0001 6b 0001 31"), V5,
			&Ack{Type: TypePuback, PacketID: 1, Props: Properties{UserProperties: []UserProperty{{"k", "2"}, {"k", "1"}}}}},
		{"empty string property", pkt(0x40, "0001 00 03 1f 0000"), V5, &Ack{Type: TypePuback, PacketID: 1}},
		{"UTF-8 payload that is valid", pkt(0x30, "0001 61 02 01 01 c3bc"), V5,
			&Publish{Topic: "a", Props: Properties{PayloadFormat: 1, HasPayloadFormat: true}, Payload: []byte("ü")}},
		{"UTF-8 payload may hold U+0000, unlike a UTF-8 string", pkt(0x30, "0001 61 02 01 01 00"), V5,
			&Publish{Topic: "a", Props: Properties{PayloadFormat: 1, HasPayloadFormat: true}, Payload: []byte{0}}},
		{"binary payload with NUL is fine", pkt(0x30, "0001 61 0000"), V311, &Publish{Topic: "a", Payload: []byte{0, 0}}},
	}
	for _, c := range cases {
		p, n, err := Decode(c.b, c.v)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if n != len(c.b) {
			t.Errorf("%s: used %d of %d bytes", c.name, n, len(c.b))
		}
		if !reflect.DeepEqual(normalize(p), normalize(c.want)) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, p, c.want)
		}
	}
	if err := ValidFilter("a/#/b"); err == nil {
		t.Error(`ValidFilter("a/#/b") accepted`)
	}
}

// TestDecodeIncomplete: every proper prefix of a packet is io.ErrUnexpectedEOF, not
// a malformed packet, so Decode can frame a stream.
func TestDecodeIncomplete(t *testing.T) {
	for _, v := range versions {
		for _, p := range samples(v) {
			b, _ := Append(nil, p, v)
			for i := 0; i < len(b); i++ {
				if _, _, err := Decode(b[:i], decodeVersion(p, v)); err != io.ErrUnexpectedEOF {
					t.Fatalf("v%d %s cut at %d of %d: %v", v, p.PacketType(), i, len(b), err)
				}
			}
			// And trailing bytes belong to the next packet.
			if _, n, err := Decode(append(b, 0xc0, 0x00), decodeVersion(p, v)); err != nil || n != len(b) {
				t.Fatalf("v%d %s followed by more: used %d, %v", v, p.PacketType(), n, err)
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	long := strings.Repeat("x", 65536)
	cases := []struct {
		name string
		p    Packet
		v    byte
	}{
		{"topic over 65535", &Publish{Topic: long}, V311},
		{"QoS 3", &Publish{Topic: "a", QoS: 3}, V311},
		{"client id over 65535", &Connect{ProtocolLevel: V311, ClientID: long}, 0},
		{"will QoS 3", &Connect{ProtocolLevel: V311, WillFlag: true, WillQoS: 3, WillTopic: "w"}, 0},
		{"CONNECT without a level", &Connect{}, 0},
		{"filter over 65535", &Subscribe{PacketID: 1, Subs: []Subscription{{Filter: long}}}, V5},
		{"retain handling 3", &Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "a", RetainHandling: 3}}}, V5},
		{"user property over 65535", &Disconnect{Props: Properties{UserProperties: []UserProperty{{long, ""}}}}, V5},
		{"reason string over 65535", &Ack{Type: TypePuback, PacketID: 1, Props: Properties{ReasonString: long}}, V5},
		{"subscription id over the maximum", &Publish{Topic: "a", Props: Properties{SubscriptionIDs: []uint32{MaxRemainingLength + 1}}}, V5},
		// 4097 filters of 65535 bytes, sharing one string: just over the maximum.
		{"remaining length over the maximum", &Unsubscribe{PacketID: 1, Filters: slices.Repeat([]string{long[1:]}, 4097)}, V311},
		{"AUTH in 3.1.1", &Auth{}, V311},
		{"Ack of another type", &Ack{Type: TypePublish, PacketID: 1}, V311},
		{"version 0", &Pingreq{}, 0},
		{"version 6", &Pingreq{}, 6},
	}
	for _, c := range cases {
		dst := []byte("keep")
		out, err := Append(dst, c.p, c.v)
		if err == nil {
			t.Errorf("%s: no error", c.name)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to % x", c.name, out)
		}
	}
	// Over-long values in 3.x properties are not written, so they do not matter.
	if _, err := Append(nil, &Disconnect{Props: Properties{ReasonString: long}}, V311); err != nil {
		t.Errorf("3.1.1 ignores properties: %v", err)
	}
}

// TestConnectEncodingLevel: a CONNECT is encoded at its own level, with the protocol
// name filled in, whatever version Append is given.
func TestConnectEncodingLevel(t *testing.T) {
	for _, v := range versions {
		c := &Connect{ProtocolLevel: v, ClientID: "a", Props: Properties{HasSessionExpiry: true, SessionExpiry: 1}}
		b, err := Append(nil, c, V311)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := Decode(b, 0)
		if err != nil {
			t.Fatalf("level %d: %v", v, err)
		}
		gc := got.(*Connect)
		wantName := map[byte]string{V31: "MQIsdp", V311: "MQTT", V5: "MQTT"}[v]
		if gc.ProtocolName != wantName || gc.ProtocolLevel != v || gc.Props.HasSessionExpiry != (v == V5) {
			t.Errorf("level %d: got %+v", v, gc)
		}
		if Size(c, V311) != len(b) {
			t.Errorf("level %d: Size %d, encoded %d", v, Size(c, V311), len(b))
		}
	}
}

// TestV3Encoding: what 3.x cannot carry is left out, not mangled.
func TestV3Encoding(t *testing.T) {
	cases := []struct {
		p    Packet
		v    byte
		want string
	}{
		{&Ack{Type: TypePuback, PacketID: 1, Reason: QuotaExceeded, Props: Properties{ReasonString: "x"}}, V311, "40 02 0001"},
		{&Disconnect{Reason: ServerShuttingDown}, V311, "e0 00"},
		{&Unsuback{PacketID: 1, Reasons: []ReasonCode{NoSubscriptionExisted}}, V311, "b0 02 0001"},
		{&Connack{SessionPresent: true}, V31, "20 02 00 00"},
		{&Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "a", QoS: 1, NoLocal: true, RetainHandling: 2}}}, V311, "82 06 0001 0001 61 01"},
	}
	for _, c := range cases {
		got, err := Append(nil, c.p, c.v)
		if err != nil || !bytes.Equal(got, hx(c.want)) {
			t.Errorf("%+v at level %d: % x, %v; want %s", c.p, c.v, got, err, c.want)
		}
	}
}

func TestV3ConnackCode(t *testing.T) {
	for r, want := range map[ReasonCode]byte{Success: 0, UnsupportedProtocolVersion: 1, ClientIdentifierNotValid: 2,
		ServerUnavailable: 3, ServerBusy: 3, UnspecifiedError: 3, BadUserNameOrPassword: 4, BadAuthenticationMethod: 4,
		NotAuthorized: 5, Banned: 5} {
		if got := V3ConnackCode(r); got != want {
			t.Errorf("V3ConnackCode(%s) = %d, want %d", r, got, want)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{TypeSubscribe.String(), "SUBSCRIBE"},
		{Type(16).String(), "Type(16)"},
		{TopicAliasInvalid.String(), "topic alias invalid (0x94)"},
		{ReasonCode(0x7f).String(), "reason 0x7F"},
		{(&Error{Reason: MalformedPacket, Msg: "x"}).Error(), "mqtt: malformed packet (0x81): x"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
