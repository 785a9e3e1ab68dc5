package packet

import (
	"errors"
	"testing"
)

type badCase struct {
	name   string
	b      []byte
	v      byte
	reason ReasonCode
}

// Bodies of hand-made CONNECTs: protocol name and level, then flags onward.
const (
	mqtt4 = "0004 4d515454 04 "
	mqtt5 = "0004 4d515454 05 "
	mqis3 = "0006 4d5149736470 03 "
)

// badCases are packets a receiver must refuse, with the reason an MQTT 5 server
// gives. They double as fuzzing seeds.
func badCases() []badCase {
	const (
		mal = MalformedPacket
		pe  = ProtocolError
	)
	return []badCase{
		// Fixed header.
		{"reserved type 0", hx("00 00"), V311, mal},
		{"reserved type 0 first", hx("00 00"), 0, mal},
		{"first packet not CONNECT", hx("c0 00"), 0, pe},
		{"AUTH as first packet", hx("f0 00"), 0, pe},
		{"second CONNECT", pkt(0x10, mqtt4+"02 003c 0001 61"), V311, pe},
		{"AUTH in 3.1.1", hx("f0 00"), V311, mal},
		{"AUTH in 3.1", hx("f0 00"), V31, mal},
		{"PINGREQ flags", hx("c1 00"), V311, mal},
		{"CONNECT flags", pkt(0x12, mqtt4+"02 003c 0001 61"), 0, mal},
		{"SUBSCRIBE flags 0000", pkt(0x80, "0001 0001 61 00"), V311, mal},
		{"SUBSCRIBE flags 0011", pkt(0x83, "0001 0001 61 00"), V5, mal},
		{"UNSUBSCRIBE flags 0000", pkt(0xa0, "0001 0001 61"), V311, mal},
		{"PUBREL flags 0000", pkt(0x60, "0001"), V311, mal},
		{"PUBACK flags 0010", pkt(0x42, "0001"), V5, mal},
		{"DISCONNECT flags", pkt(0xe8, ""), V5, mal},
		{"PUBLISH QoS 3", pkt(0x36, "0001 61 0001"), V311, mal},
		{"PUBLISH QoS 3 v5", pkt(0x36, "0001 61 0001 00"), V5, mal},
		{"PUBLISH QoS 0 with DUP 3.1.1", pkt(0x38, "0001 61"), V311, mal},
		{"PUBLISH QoS 0 with DUP v5", pkt(0x38, "0001 61 00"), V5, pe},
		{"remaining length of 5 bytes", hx("30 ff ff ff ff 7f"), V311, mal},
		{"remaining length of 5 bytes, zeros", hx("c0 80 80 80 80 00"), V311, mal},
		{"byte after PINGREQ", hx("c0 01 00"), V311, mal},
		{"byte after PINGRESP", hx("d0 01 00"), V5, mal},
		{"byte after 3.1.1 PUBACK", pkt(0x40, "0001 00"), V311, mal},
		{"byte after 3.1.1 DISCONNECT", hx("e0 01 00"), V311, mal},
		{"byte after 3.1.1 UNSUBACK", pkt(0xb0, "0001 00"), V311, mal},
		{"byte after v5 CONNACK properties", pkt(0x20, "00 00 00 ff"), V5, mal},

		// CONNECT.
		{"MQTT level 6", pkt(0x10, "0004 4d515454 06 02 003c 0001 61"), 0, UnsupportedProtocolVersion},
		{"MQTT level 3", pkt(0x10, "0004 4d515454 03 02 003c 0001 61"), 0, UnsupportedProtocolVersion},
		{"MQIsdp level 4", pkt(0x10, "0006 4d5149736470 04 02 003c 0001 61"), 0, UnsupportedProtocolVersion},
		{"unknown protocol name", pkt(0x10, "0004 4d515458 04 02 003c 0001 61"), 0, UnsupportedProtocolVersion},
		{"lowercase protocol name", pkt(0x10, "0004 6d717474 04 02 003c 0001 61"), 0, UnsupportedProtocolVersion},
		{"reserved connect flag", pkt(0x10, mqtt4+"03 003c 0001 61"), 0, mal},
		{"will QoS without will", pkt(0x10, mqtt4+"0a 003c 0001 61"), 0, mal},
		{"will retain without will", pkt(0x10, mqtt4+"22 003c 0001 61"), 0, mal},
		{"will QoS 3", pkt(0x10, mqtt4+"1e 003c 0001 61 0001 77 0000"), 0, mal},
		{"password without user name 3.1.1", pkt(0x10, mqtt4+"42 003c 0001 61 0001 70"), 0, mal},
		{"password without user name 3.1", pkt(0x10, mqis3+"42 003c 0001 61 0001 70"), 0, mal},
		{"client id not UTF-8", pkt(0x10, mqtt4+"02 003c 0001 ff"), 0, mal},
		{"client id with U+0000", pkt(0x10, mqtt4+"02 003c 0002 6100"), 0, mal},
		{"client id with a surrogate", pkt(0x10, mqtt4+"02 003c 0003 eda080"), 0, mal},
		{"client id with an overlong NUL", pkt(0x10, mqtt4+"02 003c 0002 c080"), 0, mal},
		{"client id past the end", pkt(0x10, mqtt4+"02 003c 0005 61"), 0, mal},
		{"client id missing", pkt(0x10, mqtt4+"02 003c"), 0, mal},
		{"keep alive cut short", pkt(0x10, mqtt4+"02 00"), 0, mal},
		{"will topic with a wildcard", pkt(0x10, mqtt4+"06 003c 0001 61 0003 612f23 0000"), 0, TopicNameInvalid},
		{"empty will topic", pkt(0x10, mqtt4+"06 003c 0001 61 0000 0000"), 0, TopicNameInvalid},
		{"will payload missing", pkt(0x10, mqtt4+"06 003c 0001 61 0001 77"), 0, mal},
		{"user name missing", pkt(0x10, mqtt4+"82 003c 0001 61"), 0, mal},
		{"user name not UTF-8", pkt(0x10, mqtt4+"82 003c 0001 61 0001 80"), 0, mal},
		{"password missing", pkt(0x10, mqtt4+"c2 003c 0001 61 0001 75"), 0, mal},
		{"v5 properties missing", pkt(0x10, mqtt5+"02 003c"), 0, mal},
		{"v5 property not allowed in CONNECT", pkt(0x10, mqtt5+"02 003c 03 23 0001 0001 61"), 0, mal},
		{"v5 session expiry twice", pkt(0x10, mqtt5+"02 003c 0a 11 00000001 11 00000002 0001 61"), 0, pe},
		{"v5 receive maximum 0", pkt(0x10, mqtt5+"02 003c 03 21 0000 0001 61"), 0, pe},
		{"v5 maximum packet size 0", pkt(0x10, mqtt5+"02 003c 05 27 00000000 0001 61"), 0, pe},
		{"v5 request problem information 2", pkt(0x10, mqtt5+"02 003c 02 17 02 0001 61"), 0, pe},
		{"v5 request response information 2", pkt(0x10, mqtt5+"02 003c 02 19 02 0001 61"), 0, pe},
		{"v5 authentication data without method", pkt(0x10, mqtt5+"02 003c 04 16 0001 78 0001 61"), 0, pe},
		{"v5 authentication method twice", pkt(0x10, mqtt5+"02 003c 08 15 0001 61 15 0001 62 0001 61"), 0, pe},
		{"v5 property length past the end", pkt(0x10, mqtt5+"02 003c 09 11 0000 0001 61"), 0, mal},
		{"v5 property overruns its block", pkt(0x10, mqtt5+"02 003c 02 11 00 0000 0001 61"), 0, mal},
		{"v5 property 0x00", pkt(0x10, mqtt5+"02 003c 02 00 00 0001 61"), 0, mal},
		{"v5 property 0x81", pkt(0x10, mqtt5+"02 003c 02 81 01 0001 61"), 0, mal},
		{"v5 property length of 5 bytes", pkt(0x10, mqtt5+"02 003c 80 80 80 80 00 0001 61"), 0, mal},
		{"v5 user property not UTF-8", pkt(0x10, mqtt5+"02 003c 07 26 0001 ff 0001 61 0001 61"), 0, mal},
		{"v5 user property value missing", pkt(0x10, mqtt5+"02 003c 04 26 0001 61 0001 61"), 0, mal},
		{"v5 session expiry in will properties", pkt(0x10, mqtt5+"06 003c 00 0001 61 05 11 00000001 0001 77 0000"), 0, mal},
		{"v5 will delay twice", pkt(0x10, mqtt5+"06 003c 00 0001 61 0a 18 00000001 18 00000001 0001 77 0000"), 0, pe},
		{"v5 will payload not UTF-8 as declared", pkt(0x10, mqtt5+"06 003c 00 0001 61 02 01 01 0001 77 0001 ff"), 0, PayloadFormatInvalid},
		{"v5 will response topic with a wildcard", pkt(0x10, mqtt5+"06 003c 00 0001 61 04 08 0001 2b 0001 77 0000"), 0, pe},

		// CONNACK.
		{"CONNACK reserved flags", pkt(0x20, "02 00"), V311, mal},
		{"CONNACK return code 6", pkt(0x20, "00 06"), V311, mal},
		{"CONNACK refusing with session present 3.1.1", pkt(0x20, "01 05"), V311, mal},
		{"CONNACK refusing with session present v5", pkt(0x20, "01 87 00"), V5, pe},
		{"CONNACK cut short", pkt(0x20, "00"), V311, mal},
		{"CONNACK v5 reason 0x10", pkt(0x20, "00 10 00"), V5, pe},
		{"CONNACK v5 topic alias", pkt(0x20, "00 00 03 23 0001"), V5, mal},
		{"CONNACK v5 maximum QoS 2", pkt(0x20, "00 00 02 24 02"), V5, pe},
		{"CONNACK v5 retain available 2", pkt(0x20, "00 00 02 25 02"), V5, pe},
		{"CONNACK v5 wildcard subscription available 2", pkt(0x20, "00 00 02 28 02"), V5, pe},
		{"CONNACK v5 subscription identifier available 2", pkt(0x20, "00 00 02 29 02"), V5, pe},
		{"CONNACK v5 shared subscription available 2", pkt(0x20, "00 00 02 2a 02"), V5, pe},
		{"CONNACK v5 assigned client id twice", pkt(0x20, "00 00 08 12 0001 61 12 0001 62"), V5, pe},
		{"CONNACK v5 receive maximum 0", pkt(0x20, "00 00 03 21 0000"), V5, pe},

		// PUBLISH.
		{"topic with +", pkt(0x30, "0003 612f2b"), V311, TopicNameInvalid},
		{"topic with #", pkt(0x30, "0001 23"), V311, TopicNameInvalid},
		{"topic with # v5", pkt(0x30, "0001 23 00"), V5, TopicNameInvalid},
		{"topic not UTF-8", pkt(0x30, "0001 ff"), V311, mal},
		{"topic with U+0000", pkt(0x30, "0002 6100"), V311, mal},
		{"topic past the end", pkt(0x30, "0005 61"), V311, mal},
		{"topic length cut short", pkt(0x30, "00"), V311, mal},
		{"empty topic 3.1.1", pkt(0x30, "0000"), V311, TopicNameInvalid},
		{"empty topic without alias v5", pkt(0x30, "0000 00"), V5, pe},
		{"packet id 0 at QoS 1 3.1.1", pkt(0x32, "0001 61 0000"), V311, mal},
		{"packet id 0 at QoS 2 v5", pkt(0x34, "0001 61 0000 00"), V5, pe},
		{"packet id cut short", pkt(0x32, "0001 61 00"), V311, mal},
		{"v5 properties missing", pkt(0x30, "0001 61"), V5, mal},
		{"v5 property length past the end", pkt(0x30, "0001 61 09 01"), V5, mal},
		{"v5 topic alias 0", pkt(0x30, "0001 61 03 23 0000"), V5, TopicAliasInvalid},
		{"v5 topic alias twice", pkt(0x30, "0001 61 06 23 0001 23 0002"), V5, pe},
		{"v5 payload format 2", pkt(0x30, "0001 61 02 01 02"), V5, pe},
		{"v5 payload not UTF-8 as declared", pkt(0x30, "0001 61 02 01 01 ff"), V5, PayloadFormatInvalid},
		{"v5 payload with a surrogate as UTF-8", pkt(0x30, "0001 61 02 01 01 eda080"), V5, PayloadFormatInvalid},
		{"v5 session expiry in PUBLISH", pkt(0x30, "0001 61 05 11 00000000"), V5, mal},
		{"v5 message expiry twice", pkt(0x30, "0001 61 0a 02 00000001 02 00000002"), V5, pe},
		{"v5 subscription id 0", pkt(0x30, "0001 61 02 0b 00"), V5, pe},
		{"v5 subscription id of 5 bytes", pkt(0x30, "0001 61 06 0b ff ff ff ff 7f"), V5, mal},
		{"v5 response topic with a wildcard", pkt(0x30, "0001 61 06 08 0003 612f23"), V5, pe},
		{"v5 empty response topic", pkt(0x30, "0001 61 03 08 0000"), V5, pe},
		{"v5 correlation data past its block", pkt(0x30, "0001 61 03 09 0005 6162636465"), V5, mal},
		{"v5 content type not UTF-8", pkt(0x30, "0001 61 04 03 0001 ff"), V5, mal},

		// PUBACK, PUBREC, PUBREL, PUBCOMP.
		{"PUBACK packet id 0 3.1.1", pkt(0x40, "0000"), V311, mal},
		{"PUBREC packet id 0 v5", pkt(0x50, "0000"), V5, pe},
		{"PUBACK cut short", pkt(0x40, "00"), V311, mal},
		{"PUBACK v5 reason 0x92", pkt(0x40, "0001 92"), V5, pe},
		{"PUBREL v5 reason 0x10", pkt(0x62, "0001 10"), V5, pe},
		{"PUBCOMP v5 session expiry", pkt(0x70, "0001 00 05 11 00000000"), V5, mal},
		{"PUBACK v5 properties past the end", pkt(0x40, "0001 00 05 1f"), V5, mal},
		{"PUBACK v5 reason string twice", pkt(0x40, "0001 00 08 1f 0001 61 1f 0001 62"), V5, pe},

		// SUBSCRIBE.
		{"SUBSCRIBE without filters 3.1.1", pkt(0x82, "0001"), V311, pe},
		{"SUBSCRIBE without filters v5", pkt(0x82, "0001 00"), V5, pe},
		{"SUBSCRIBE packet id 0 3.1.1", pkt(0x82, "0000 0001 61 00"), V311, mal},
		{"SUBSCRIBE packet id 0 v5", pkt(0x82, "0000 00 0001 61 00"), V5, pe},
		{"subscription options reserved bit 3.1.1", pkt(0x82, "0001 0001 61 04"), V311, mal},
		{"subscription options reserved bit v5", pkt(0x82, "0001 00 0001 61 40"), V5, mal},
		{"subscription options reserved bit 7 v5", pkt(0x82, "0001 00 0001 61 80"), V5, mal},
		{"subscription QoS 3 3.1.1", pkt(0x82, "0001 0001 61 03"), V311, mal},
		{"subscription QoS 3 3.1", pkt(0x82, "0001 0001 61 03"), V31, mal},
		{"subscription QoS 3 v5", pkt(0x82, "0001 00 0001 61 03"), V5, pe},
		{"retain handling 3", pkt(0x82, "0001 00 0001 61 30"), V5, pe},
		{"subscription options missing", pkt(0x82, "0001 0001 61"), V311, mal},
		{"second subscription cut short", pkt(0x82, "0001 0001 61 00 0001"), V311, mal},
		{"filter not UTF-8", pkt(0x82, "0001 0001 ff 00"), V311, mal},
		{"filter with U+0000", pkt(0x82, "0001 0001 00 00"), V311, mal},
		{"two subscription ids", pkt(0x82, "0001 04 0b 01 0b 02 0001 61 00"), V5, pe},
		{"subscription id 0 in SUBSCRIBE", pkt(0x82, "0001 02 0b 00 0001 61 00"), V5, pe},
		{"payload format in SUBSCRIBE", pkt(0x82, "0001 02 01 00 0001 61 00"), V5, mal},

		// SUBACK.
		{"SUBACK without reasons 3.1.1", pkt(0x90, "0001"), V311, pe},
		{"SUBACK without reasons v5", pkt(0x90, "0001 00"), V5, pe},
		{"SUBACK return code 3", pkt(0x90, "0001 03"), V311, mal},
		{"SUBACK v5 reason 0x10", pkt(0x90, "0001 00 10"), V5, pe},
		{"SUBACK packet id 0", pkt(0x90, "0000 00"), V311, mal},
		{"SUBACK v5 properties missing", pkt(0x90, "0001"), V5, mal},

		// UNSUBSCRIBE and UNSUBACK.
		{"UNSUBSCRIBE without filters 3.1.1", pkt(0xa2, "0001"), V311, pe},
		{"UNSUBSCRIBE without filters v5", pkt(0xa2, "0001 00"), V5, pe},
		{"UNSUBSCRIBE packet id 0", pkt(0xa2, "0000 0001 61"), V311, mal},
		{"UNSUBSCRIBE filter past the end", pkt(0xa2, "0001 0004 61"), V311, mal},
		{"UNSUBSCRIBE subscription id", pkt(0xa2, "0001 02 0b 01 0001 61"), V5, mal},
		{"UNSUBACK v5 without reasons", pkt(0xb0, "0001 00"), V5, pe},
		{"UNSUBACK v5 reason 0x01", pkt(0xb0, "0001 00 01"), V5, pe},
		{"UNSUBACK v5 properties missing", pkt(0xb0, "0001"), V5, mal},
		{"UNSUBACK packet id 0 v5", pkt(0xb0, "0000 00 00"), V5, pe},

		// DISCONNECT and AUTH.
		{"DISCONNECT v5 reason 0x18", pkt(0xe0, "18"), V5, pe},
		{"DISCONNECT v5 will delay", pkt(0xe0, "00 05 18 00000000"), V5, mal},
		{"DISCONNECT v5 properties past the end", pkt(0xe0, "00 05 11"), V5, mal},
		{"DISCONNECT v5 server reference twice", pkt(0xe0, "00 08 1c 0001 61 1c 0001 62"), V5, pe},
		{"AUTH reason 0x01", pkt(0xf0, "01"), V5, pe},
		{"AUTH data without method", pkt(0xf0, "18 04 16 0001 78"), V5, pe},
		{"AUTH session expiry", pkt(0xf0, "18 05 11 00000000"), V5, mal},
		{"AUTH method twice", pkt(0xf0, "18 08 15 0001 61 15 0001 62"), V5, pe},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range badCases() {
		p, _, err := Decode(c.b, c.v)
		var perr *Error
		if !errors.As(err, &perr) || perr.Reason != c.reason {
			t.Errorf("%s (% x): got %+v, %v; want reason %s", c.name, c.b, p, err, c.reason)
			continue
		}
		if perr.Msg == "" {
			t.Errorf("%s: error without a message", c.name)
		}
	}
}

// TestDecodeVersion: a version Decode does not know is the caller's mistake, not the
// peer's.
func TestDecodeVersion(t *testing.T) {
	for _, v := range []byte{1, 2, 6, 255} {
		_, _, err := Decode(hx("c0 00"), v)
		var perr *Error
		if err == nil || errors.As(err, &perr) {
			t.Errorf("version %d: %v, want a plain error", v, err)
		}
	}
}
