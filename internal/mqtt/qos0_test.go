package mqtt_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// qos0Racer is the subscriber of TestQoS0DeliveryRacesSessionChanges: it reads its
// connection and checks every PUBLISH.
type qos0Racer struct {
	t       *testing.T
	c       *rawClient
	aliases map[uint16]string
	last    map[string]int // per publisher, the latest sequence number on this connection
	// gone: the churn subscription's UNSUBACK has been read and no SUBSCRIBE sent
	// since; a churn message now is one delivered for a removed subscription.
	gone        bool
	live, churn int
}

// next reads the next packet, checking a PUBLISH: its topic (resolving topic
// aliases) is the one its publisher sent it to, its subscription identifier is that
// of the subscription of its topic, it comes after its publisher's earlier messages,
// and it is not for the churn subscription while that is gone.
func (r *qos0Racer) next() packet.Packet {
	r.t.Helper()
	p := r.c.must(10 * time.Second)
	pub, ok := p.(*packet.Publish)
	if !ok {
		return p
	}
	if pub.QoS != 0 {
		r.t.Fatalf("PUBLISH at QoS %d", pub.QoS)
	}
	topic := pub.Topic
	if pub.Props.HasTopicAlias {
		a := pub.Props.TopicAlias
		if topic != "" {
			r.aliases[a] = topic
		} else if topic = r.aliases[a]; topic == "" {
			r.t.Fatalf("alias %d never set", a)
		}
	}
	f := strings.Fields(string(pub.Payload)) // publisher, sequence, topic
	if len(f) != 3 {
		r.t.Fatalf("payload %q", pub.Payload)
	}
	if topic != f[2] {
		r.t.Fatalf("message %q arrived on topic %q (alias %d)", pub.Payload, topic, pub.Props.TopicAlias)
	}
	seq, _ := strconv.Atoi(f[1])
	if last, ok := r.last[f[0]]; ok && seq <= last {
		r.t.Errorf("publisher %s: message %d after %d", f[0], seq, last)
	}
	r.last[f[0]] = seq
	wantID := uint32(1)
	if topic == qos0Churn {
		wantID = 2
		r.churn++
		if r.gone {
			r.t.Errorf("message %q of a removed subscription after its UNSUBACK", pub.Payload)
		}
	} else {
		r.live++
	}
	if !slices.Equal(pub.Props.SubscriptionIDs, []uint32{wantID}) {
		r.t.Errorf("message %q: subscription identifiers %v, want [%d]", pub.Payload, pub.Props.SubscriptionIDs, wantID)
	}
	return pub
}

// until reads until done says so of a packet.
func (r *qos0Racer) until(done func(packet.Packet) bool) {
	r.t.Helper()
	for !done(r.next()) {
	}
}

// liveMessages reads until n more messages of the live subscription arrived.
func (r *qos0Racer) liveMessages(n int) {
	r.t.Helper()
	want := r.live + n
	r.until(func(packet.Packet) bool { return r.live >= want })
}

const qos0Churn = "race/churn"

// TestQoS0DeliveryRacesSessionChanges: QoS 0 messages, which reach a subscriber
// without its session's lock, race with its SUBSCRIBE, UNSUBSCRIBE, leaving,
// coming back and being taken over. Publishers keep publishing to three topics of a
// live subscription (with two topic aliases towards the subscriber, so that they are
// reassigned all along) and to a topic the subscriber subscribes to and unsubscribes
// from over and over. The subscriber gets messages of a subscription once its
// SUBACK is read, none of a removed one after its UNSUBACK, each publisher's
// messages in order, and topics right however aliases race; run under -race, no
// data race.
func TestQoS0DeliveryRacesSessionChanges(t *testing.T) {
	_, port := startTern(t, nil)
	live := []string{"race/live/0", "race/live/1", "race/live/2"}
	props := &packet.Properties{SessionExpiry: 60, HasSessionExpiry: true, TopicAliasMaximum: 2, HasTopicAliasMaximum: true}
	attach := func(clean bool) *qos0Racer {
		t.Helper()
		c := dialRaw(t, port, packet.V5)
		if ca := c.connect("qos0-racer", clean, 0, props); ca.Reason != packet.Success || ca.SessionPresent == clean {
			t.Fatalf("CONNACK %v, session present %v", ca.Reason, ca.SessionPresent)
		}
		return &qos0Racer{t: t, c: c, aliases: map[uint16]string{}, last: map[string]int{}}
	}
	r := attach(true)
	r.c.send(&packet.Subscribe{PacketID: 1, Props: packet.Properties{SubscriptionIDs: []uint32{1}}, Subs: []packet.Subscription{{Filter: "race/live/+"}}})
	r.until(func(p packet.Packet) bool { _, ok := p.(*packet.Suback); return ok })

	const publishers = 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range publishers {
		pc := dialRaw(t, port, packet.V311)
		pc.connect(fmt.Sprintf("qos0-pub-%d", i), true, 0, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b []byte
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				topic := qos0Churn
				if seq%2 == 0 {
					topic = live[seq/2%len(live)]
				}
				b, _ = packet.Append(b[:0], &packet.Publish{Topic: topic, Payload: fmt.Appendf(nil, "p%d %d %s", i, seq, topic)}, packet.V311)
				if _, err := pc.nc.Write(b); err != nil {
					t.Errorf("publisher %d: %v", i, err)
					return
				}
				if seq%8 == 7 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	r.liveMessages(50)
	const rounds = 30
	pid := uint16(1)
	for round := range rounds {
		switch round % 10 {
		case 4: // another connection takes the session over
			r = attach(false)
			r.liveMessages(20)
		case 9: // the client leaves without a word and comes back
			_ = r.c.nc.Close()
			r = attach(false)
			r.liveMessages(20)
		}
		pid++
		r.gone = false
		r.c.send(&packet.Subscribe{PacketID: pid, Props: packet.Properties{SubscriptionIDs: []uint32{2}}, Subs: []packet.Subscription{{Filter: qos0Churn}}})
		sub := pid
		r.until(func(p packet.Packet) bool { sa, ok := p.(*packet.Suback); return ok && sa.PacketID == sub })
		churn := r.churn
		r.until(func(packet.Packet) bool { return r.churn > churn }) // the new subscription delivers

		pid++
		r.c.send(&packet.Unsubscribe{PacketID: pid, Filters: []string{qos0Churn}})
		unsub := pid
		r.until(func(p packet.Packet) bool { ua, ok := p.(*packet.Unsuback); return ok && ua.PacketID == unsub })
		r.gone = true
		r.liveMessages(30) // the live subscription delivers; the removed one must not
	}
	// Reconnects and takeovers in quick succession while messages flow: the first
	// packet of each connection is its CONNACK (attach checks), then messages.
	for i := range 40 {
		if i%2 == 0 {
			_ = r.c.nc.Close()
		}
		r = attach(false)
		r.liveMessages(1)
	}
}
