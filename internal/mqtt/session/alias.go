package session

import "strings"

// OutAliases holds the topic aliases the server has set on PUBLISH packets to one
// MQTT 5 client (§3.3.2.3.4): aliases 1..max, max being the lower of the client's
// Topic Alias Maximum and Config.OutboundTopicAliases. The first delivery on a topic
// sends the topic with a new alias; later ones send the alias with an empty topic.
// When every alias is taken, the least recently used one (the alias whose topic has
// gone longest without a delivery) is given to the new topic, sent in full again, so
// topics that keep being delivered keep their aliases.
//
// The table belongs to one network connection (a client that reconnects starts with
// no aliases) and lives in the session's link, but the session never looks at it:
// the driver's encoder consults it while it encodes a PUBLISH and records an alias
// once the packet is committed to the connection's output, both under whatever
// serialises that output (QoS 0 deliveries may be encoded without the session's
// lock), so that aliases are decided in the order the client reads them: the client
// learns an alias from the PUBLISH that carries it with its topic. Lookups cost a map access; reassigning an alias is
// O(1) through a list of aliases in order of use kept in ents.
type OutAliases struct {
	max     uint16
	byTopic map[string]uint16
	// ents[a] is alias a for a >= 1; ents[0] is the head of the circular list of
	// aliases in order of use: ents[0].next the most recent, ents[0].prev the least.
	ents []aliasEnt
}

// NewOutAliases returns an empty table of aliases 1..max.
func NewOutAliases(max uint16) *OutAliases { return &OutAliases{max: max} }

type aliasEnt struct {
	topic      string
	prev, next uint16
}

// Lookup returns topic's alias and true if the client knows it; otherwise the alias
// to assign it (a free one, else the least recently used) and false. It changes
// nothing: Used records the alias once its PUBLISH is queued.
func (t *OutAliases) Lookup(topic string) (uint16, bool) {
	if a, ok := t.byTopic[topic]; ok {
		return a, true
	}
	if n := len(t.ents); n == 0 {
		return 1, false
	} else if n <= int(t.max) {
		return uint16(n), false
	}
	return t.ents[0].prev, false
}

// Used records that alias a went to the client for topic: with the topic when
// known is false (a new or reassigned alias), alone otherwise.
func (t *OutAliases) Used(a uint16, topic string, known bool) {
	if t.ents == nil {
		t.ents = make([]aliasEnt, 1, min(int(t.max), 16)+1)
		t.byTopic = make(map[string]uint16, min(int(t.max), 16))
	}
	switch {
	case known:
		t.unlink(a)
	case int(a) == len(t.ents):
		t.ents = append(t.ents, aliasEnt{})
		t.add(a, topic)
	default:
		delete(t.byTopic, t.ents[a].topic)
		t.unlink(a)
		t.add(a, topic)
	}
	// Link a as the most recently used.
	head := &t.ents[0]
	t.ents[a].prev, t.ents[a].next = 0, head.next
	t.ents[head.next].prev = a
	head.next = a
}

// add binds alias a to topic, copied: deliveries pass topics in scratch buffers.
func (t *OutAliases) add(a uint16, topic string) {
	topic = strings.Clone(topic)
	t.ents[a].topic = topic
	t.byTopic[topic] = a
}

func (t *OutAliases) unlink(a uint16) {
	e := &t.ents[a]
	t.ents[e.prev].next = e.next
	t.ents[e.next].prev = e.prev
}
