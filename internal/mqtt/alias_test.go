package mqtt_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server"
)

// aliasOf describes a received PUBLISH as "topic payload" plus " @alias" when it
// carries a topic alias; an alias-only PUBLISH has an empty topic.
func aliasOf(p *packet.Publish) string {
	s := fmt.Sprintf("%q %s", p.Topic, p.Payload)
	if p.Props.HasTopicAlias {
		s += fmt.Sprintf(" @%d", p.Props.TopicAlias)
	}
	return s
}

// TestRawOutboundTopicAlias: a v5 client with Topic Alias Maximum 2 gets each topic
// once in full with a new alias and then the alias alone; a third topic takes the
// least recently used alias, sent with its topic again. A v3.1.1 client and a v5
// client with Topic Alias Maximum 0 get full topics and no alias.
func TestRawOutboundTopicAlias(t *testing.T) {
	s, port := startTern(t, nil)
	v5 := dialRaw(t, port, packet.V5)
	v5.connect("tam2", true, 0, &packet.Properties{TopicAliasMaximum: 2, HasTopicAliasMaximum: true})
	v5.subscribe(1, "a/#", 0)
	v3 := dialRaw(t, port, packet.V311)
	v3.connect("v3", true, 0, nil)
	v3.subscribe(1, "a/#", 0)
	none := dialRaw(t, port, packet.V5)
	none.connect("tam0", true, 0, &packet.Properties{TopicAliasMaximum: 0, HasTopicAliasMaximum: true})
	none.subscribe(1, "a/#", 0)
	waitSubs(t, s, 6)

	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	topics := []string{"a/1", "a/1", "a/2", "a/3", "a/1", "a/3", "a/1", "a/2"}
	for i, tp := range topics {
		pub.send(&packet.Publish{Topic: tp, Payload: fmt.Appendf(nil, "m%d", i)})
	}
	want := []string{
		`"a/1" m0 @1`, // new alias 1
		`"" m1 @1`,    // known
		`"a/2" m2 @2`, // new alias 2; the table is full
		`"a/3" m3 @1`, // alias 1 (a/1, used before a/2) reassigned
		`"a/1" m4 @2`, // alias 2 (a/2) is now the least recently used
		`"" m5 @1`,    // a/3 keeps alias 1
		`"" m6 @2`,
		`"a/2" m7 @1`, // a/3 (alias 1) was used before a/1 (alias 2)
	}
	for i, w := range want {
		if got := aliasOf(v5.must(5 * time.Second).(*packet.Publish)); got != w {
			t.Errorf("v5 TAM 2, message %d: got %s, want %s", i, got, w)
		}
	}
	for name, c := range map[string]*rawClient{"v3.1.1": v3, "v5 TAM 0": none} {
		for i, tp := range topics {
			if got, w := aliasOf(c.must(5*time.Second).(*packet.Publish)), fmt.Sprintf("%q m%d", tp, i); got != w {
				t.Errorf("%s, message %d: got %s, want %s", name, i, got, w)
			}
		}
	}
}

// TestRawOutboundTopicAliasReconnect: aliases belong to the network connection: a
// QoS 1 message resent after a reconnect carries its topic (with an alias of the new
// connection), even when it first went out as an alias alone.
func TestRawOutboundTopicAliasReconnect(t *testing.T) {
	s, port := startTern(t, nil)
	props := &packet.Properties{TopicAliasMaximum: 4, HasTopicAliasMaximum: true, SessionExpiry: 60, HasSessionExpiry: true}
	sub := dialRaw(t, port, packet.V5)
	sub.connect("again", true, 0, props)
	sub.subscribe(1, "b/#", 1)
	waitSubs(t, s, 2)
	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "b/x", Payload: []byte("one")})
	pub.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: "b/x", Payload: []byte("two")})
	first := sub.must(5 * time.Second).(*packet.Publish)
	second := sub.must(5 * time.Second).(*packet.Publish)
	if got := aliasOf(first) + ", " + aliasOf(second); got != `"b/x" one @1, "" two @1` {
		t.Fatalf("first connection got %s", got)
	}
	sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: first.PacketID})
	// A PINGRESP after the PUBACK: the server has handled the PUBACK, which a
	// takeover by the next connection could otherwise overtake.
	sub.send(&packet.Pingreq{})
	if _, ok := sub.must(5 * time.Second).(*packet.Pingresp); !ok {
		t.Fatal("no PINGRESP")
	}
	_ = sub.nc.Close() // the second unacknowledged

	sub = dialRaw(t, port, packet.V5)
	if ca := sub.connect("again", false, 0, props); !ca.SessionPresent {
		t.Fatal("session not resumed")
	}
	again := sub.must(5 * time.Second).(*packet.Publish)
	if got := aliasOf(again); !again.Dup || again.PacketID != second.PacketID || got != `"b/x" two @1` {
		t.Fatalf("resent after reconnect: %s (dup %v), want the full topic with alias 1", got, again.Dup)
	}
	sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: again.PacketID})
	pub.send(&packet.Publish{QoS: 1, PacketID: 3, Topic: "b/x", Payload: []byte("three")})
	if got := aliasOf(sub.must(5 * time.Second).(*packet.Publish)); got != `"" three @1` {
		t.Fatalf("next message: %s, want the alias alone", got)
	}
}

// TestRawOutboundTopicAliasDisabled: with mqtt_outbound_topic_aliases 0 the server
// sends no aliases even to a client that allows them.
func TestRawOutboundTopicAliasDisabled(t *testing.T) {
	s, port := startTern(t, func(c *server.Config) { c.MQTT.OutboundTopicAliases = 0 })
	sub := dialRaw(t, port, packet.V5)
	sub.connect("off", true, 0, &packet.Properties{TopicAliasMaximum: 10, HasTopicAliasMaximum: true})
	sub.subscribe(1, "c/#", 0)
	waitSubs(t, s, 2)
	pub := dialRaw(t, port, packet.V311)
	pub.connect("pub", true, 0, nil)
	for i := range 2 {
		pub.send(&packet.Publish{Topic: "c/x", Payload: fmt.Appendf(nil, "m%d", i)})
		if got, w := aliasOf(sub.must(5*time.Second).(*packet.Publish)), fmt.Sprintf(`"c/x" m%d`, i); got != w {
			t.Fatalf("got %s, want %s", got, w)
		}
	}
}

// TestPahoOutboundTopicAlias: a paho v5 client that allows 3 topic aliases receives
// 300 messages on 5 topics in order, most with the alias alone. paho-mqtt 2.1 hands
// the PUBLISH over as received (an aliased one with an empty topic), so the script
// keeps the alias table a client keeps and checks every alias it resolves.
func TestPahoOutboundTopicAlias(t *testing.T) {
	_, port := startTern(t, nil)
	out := runPaho(t, port, `
cp = Properties(PacketTypes.CONNECT); cp.TopicAliasMaximum = 3
r = client("alias-many", v5=True, props=cp)
r.subscribe("many/#", qos=1)
time.sleep(0.3)
p = client("alias-src", v5=True)
topics = ["many/a", "many/b", "many/c", "many/long/topic/name/d", "many/e"]
order = [0, 0, 1, 0, 1, 2, 3, 0, 4, 1]
for i in range(300):
    last = p.publish(topics[order[i % len(order)]], "m%d" % i, qos=1)
last.wait_for_publish(10)
table, got, alias_only, max_alias, bad = {}, [], 0, 0, []
for m in take(r, 300, timeout=30):
    a = getattr(m.properties, "TopicAlias", None)
    topic = m.topic
    if a is not None:
        max_alias = max(max_alias, a)
        if topic:
            table[a] = topic
        elif a in table:
            topic = table[a]
            alias_only += 1
        else:
            bad.append(m.payload.decode())
    got.append([topic, m.payload.decode()])
emit(got=got, alias_only=alias_only, max_alias=max_alias, bad=bad)
`, 60*time.Second)
	res := decode(t, out)
	if len(res) != 1 {
		t.Fatalf("script output: %v", res)
	}
	r := res[0]
	topics := []string{"many/a", "many/b", "many/c", "many/long/topic/name/d", "many/e"}
	order := []int{0, 0, 1, 0, 1, 2, 3, 0, 4, 1}
	got := r["got"].([]any)
	if len(got) != 300 {
		t.Fatalf("got %d messages, want 300", len(got))
	}
	for i, g := range got {
		if w := fmt.Sprintf(`["%s","m%d"]`, topics[order[i%len(order)]], i); jsonOf(g) != w {
			t.Fatalf("message %d: %s, want %s", i, jsonOf(g), w)
		}
	}
	if len(r["bad"].([]any)) != 0 || r["max_alias"] != float64(3) || r["alias_only"].(float64) < 100 {
		t.Fatalf("aliases: unknown alias on %v, highest alias %v (want 3), %v alias-only messages (want most)", r["bad"], r["max_alias"], r["alias_only"])
	}
}
