package session

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// TestSimulatedReconnects drives a persistent session with a model client through
// random deliveries, lost packets, dropped connections, reconnects and server
// restarts (rebuilt from what the Readies asked to store), under seeds. Whatever
// happens, once the client stays connected and answers everything, each QoS 1
// message has reached its application at least once and each QoS 2 message exactly
// once.
func TestSimulatedReconnects(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	for seed := range uint64(seeds) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { simulate(t, seed) })
	}
}

// simClient is an MQTT client that keeps its session state across connections: the
// QoS 2 packet ids it has received and not seen released (so that a resent PUBLISH
// is not delivered twice).
type simClient struct {
	got     map[string]int // payload → times delivered to the application
	inQoS2  map[uint16]bool
	pending []Packet // sent by the server, not yet read by the client
}

func simulate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5e55))
	h := newHarness()
	h.cfg.MaxInflight = 1 + rng.IntN(4)
	h.cfg.MaxQueued = 1000
	h.s = New(&h.cfg)
	cl := &simClient{got: map[string]int{}, inQoS2: map[uint16]bool{}}
	qos := map[string]byte{}
	online := false

	// take applies a Ready as the driver does: records to the store model, packets to
	// the client's network buffer (lost if the connection is down).
	take := func() {
		rd := h.s.Ready()
		if rd == nil {
			return
		}
		defer Release(rd)
		for _, o := range rd.Persist {
			h.persistQuiet(o)
		}
		if online {
			for _, p := range rd.Packets {
				if p.Msg != nil {
					m := *p.Msg // the client's copy
					p.Msg = &m
				}
				cl.pending = append(cl.pending, p)
			}
		}
		if rd.Close != nil {
			t.Fatalf("seed %d: connection closed: %v", seed, rd.Close)
		}
	}
	connect := func() {
		h.s.Connect(h.now, &packet.Connect{ProtocolLevel: packet.V5, Props: packet.Properties{SessionExpiry: 3600, HasSessionExpiry: true}}, ConnectOpts{})
		online = true
		cl.pending = cl.pending[:0] // what was on its way went with the old connection
		take()
	}
	// read has the client handle its oldest packet; its answer may be lost.
	read := func(lossy bool) {
		if len(cl.pending) == 0 {
			return
		}
		p := cl.pending[0]
		cl.pending = cl.pending[1:]
		var answer *packet.Ack
		switch p.Type {
		case packet.TypePublish:
			m := p.Msg
			switch m.QoS {
			case 1:
				cl.got[string(m.Payload)]++
				answer = &packet.Ack{Type: packet.TypePuback, PacketID: p.PID}
			case 2:
				if !cl.inQoS2[p.PID] {
					cl.inQoS2[p.PID] = true
					cl.got[string(m.Payload)]++
				}
				answer = &packet.Ack{Type: packet.TypePubrec, PacketID: p.PID}
			}
		case packet.TypePubrel:
			delete(cl.inQoS2, p.PID)
			answer = &packet.Ack{Type: packet.TypePubcomp, PacketID: p.PID}
		}
		if answer == nil || lossy && rng.IntN(5) == 0 {
			return
		}
		h.s.Ack(h.now, answer)
		take()
	}

	connect()
	h.s.Subscribe(h.now, &packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: "t", QoS: 2}}},
		[]*Sub{{Filter: "t", QoS: 2}})
	take()
	sub := h.sub(map[string]string{"filter": "t"})
	next := 0
	for range 300 {
		h.now = h.now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		switch r := rng.IntN(100); {
		case r < 35: // the broker delivers
			next++
			payload := fmt.Sprintf("m%d", next)
			q := byte(1 + rng.IntN(2))
			qos[payload] = q
			v, outQoS, _, _ := h.s.Route(h.now, []*Sub{sub}, q, false, false, 0, nil)
			if v != Queue || outQoS != q {
				t.Fatalf("seed %d: route %v qos %d", seed, v, outQoS)
			}
			if !h.s.Enqueue(h.now, &OutMsg{Topic: "t", Payload: []byte(payload), QoS: q}) {
				t.Fatalf("seed %d: %s refused", seed, payload)
			}
			take()
		case r < 80:
			if online {
				read(true)
			}
		case r < 88:
			if online {
				h.s.Disconnected(h.now)
				online = false
				take()
			}
		case r < 96:
			if !online {
				connect()
			}
		default:
			if !online { // the server restarts while the client is away
				sub = nil
				h.out.Reset()
				h.restart()
				take()
				sub = h.sub(map[string]string{"filter": "t"})
				if sub == nil {
					t.Fatalf("seed %d: subscription lost in a restart", seed)
				}
			}
		}
	}
	// Calm: the client comes back and answers everything. MQTT resends only on a new
	// connection, so it reconnects to have what lost answers left in flight.
	if online {
		h.s.Disconnected(h.now)
		online = false
		take()
	}
	connect()
	for i := 0; len(cl.pending) > 0; i++ {
		if i > 100000 {
			t.Fatalf("seed %d: exchanges never end", seed)
		}
		read(false)
	}
	if n := h.s.Inflight() + h.s.Queued(); n != 0 {
		t.Fatalf("seed %d: %d messages still in flight or queued", seed, n)
	}
	var missing, twice []string
	for p, q := range qos {
		switch n := cl.got[p]; {
		case n == 0:
			missing = append(missing, p)
		case q == 2 && n > 1:
			twice = append(twice, p)
		}
	}
	slices.Sort(missing)
	slices.Sort(twice)
	if len(missing) > 0 || len(twice) > 0 {
		t.Fatalf("seed %d: %d messages; never delivered %v; QoS 2 delivered more than once %v", seed, len(qos), missing, twice)
	}
}

// persistQuiet applies an Op to the store model without printing it.
func (h *harness) persistQuiet(o Op) {
	st := &h.store
	switch o.Kind {
	case OpSaveSession:
		st.session, st.expiry, st.subs = true, h.s.Expiry(), nil
		h.s.Subs(func(e *Sub) { st.subs = append(st.subs, *e) })
	case OpDeleteSession:
		st.session, st.subs = false, nil
	case OpSaveMsg:
		st.msgs[o.MID] = *o.Msg
	case OpDeleteMsg:
		delete(st.msgs, o.MID)
	case OpSaveQoS2:
		st.qos2[o.PID] = true
	case OpDeleteQoS2:
		delete(st.qos2, o.PID)
	}
}
