package session

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// TestScenarios runs the stories in testdata: each command is an event given to a
// Session at a virtual time, and the expected output is the Ready it produced,
// applied by a driver that keeps the stored records in a map (so that "restart"
// rebuilds the session from them, as a server restart does).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, h.run)
	})
}

var epoch = time.Unix(1_700_000_000, 0)

type harness struct {
	cfg   Config
	s     *Session
	now   time.Time
	store storeModel
	out   strings.Builder
	// routed is the driver's own record of the live subscriptions, kept from
	// Ready.Subs alone, as a driver that routes without the session's lock does
	// (RouteLive).
	routed map[*Sub]bool
}

// storeModel is what a driver would have written to its key-value store.
type storeModel struct {
	session bool
	expiry  time.Duration
	subs    []Sub
	msgs    map[uint64]OutMsg
	qos2    map[uint16]bool
}

func newHarness() *harness {
	h := &harness{now: epoch, cfg: Config{
		MaxInflight: 1024, MaxQueued: 100, ReceiveMaximum: 10, MaxPacketSize: 1 << 20,
		TopicAliasMaximum: 4, OutboundTopicAliases: 0, Persist: true,
	}}
	h.store.msgs = map[uint64]OutMsg{}
	h.store.qos2 = map[uint16]bool{}
	h.s = New(&h.cfg)
	h.routed = map[*Sub]bool{}
	return h
}

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(&h.out, format+"\n", args...) }

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	var err error
	switch d.Cmd {
	case "config":
		err = h.config(d)
	case "connect":
		err = h.connect(d)
	case "drop":
		h.s.Disconnected(h.now)
	case "recv":
		err = h.recv(d)
	case "deliver":
		err = h.deliver(d)
	case "retained":
		err = h.retained(d)
	case "tick":
		err = h.advance(d)
		if err == nil {
			err = h.s.Tick(h.now)
		}
	case "end":
		h.s.End(h.now)
	case "restart":
		h.restart()
	case "prune":
		// prune keep=a/+,b: a reload of the users file leaves these filters
		// allowed.
		keep := map[string]bool{}
		for _, a := range d.CmdArgs {
			for _, f := range a.Vals {
				keep[f] = true
			}
		}
		h.s.Prune(func(e *Sub) bool { return keep[e.Filter] })
	case "state":
		h.state()
		return h.out.String()
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if err != nil {
		h.printf("error: %v", err)
	}
	h.apply(h.s.Ready())
	return h.out.String()
}

func (h *harness) config(d *datadriven.TestData) error {
	for _, a := range d.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		n, _ := strconv.Atoi(v)
		dur, _ := time.ParseDuration(v)
		switch a.Key {
		case "max-inflight":
			h.cfg.MaxInflight = n
		case "max-queued":
			h.cfg.MaxQueued = n
		case "drop-old":
			h.cfg.DropOld = true
		case "receive-max":
			h.cfg.ReceiveMaximum = n
		case "alias-max":
			h.cfg.TopicAliasMaximum = n
		case "out-aliases":
			h.cfg.OutboundTopicAliases = n
		case "max-expiry":
			h.cfg.MaxSessionExpiry = dur
		case "max-keepalive":
			h.cfg.MaxKeepAlive = dur
		case "memory":
			h.cfg.Persist = false
		default:
			return fmt.Errorf("config: unknown %q", a.Key)
		}
	}
	h.s = New(&h.cfg)
	return nil
}

// args reads key=value arguments; a bare key is "true".
func args(d *datadriven.TestData) map[string]string {
	m := map[string]string{}
	for _, a := range d.CmdArgs {
		switch {
		case len(a.Vals) > 0:
			m[a.Key] = a.Vals[0]
		default:
			m[a.Key] = "true"
		}
	}
	return m
}

func num(m map[string]string, k string, def int) int {
	if v, ok := m[k]; ok {
		n, err := strconv.ParseInt(v, 0, 64)
		if err == nil {
			return int(n)
		}
	}
	return def
}

func dur(m map[string]string, k string) (time.Duration, bool) {
	v, ok := m[k]
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, false
	}
	return d, true
}

func (h *harness) advance(d *datadriven.TestData) error {
	if len(d.CmdArgs) == 0 {
		return nil
	}
	v := strings.TrimPrefix(d.CmdArgs[0].Key, "+")
	step, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("tick: %w", err)
	}
	h.now = h.now.Add(step)
	return nil
}

func (h *harness) connect(d *datadriven.TestData) error {
	a := args(d)
	p := &packet.Connect{ProtocolLevel: byte(num(a, "v", 5)), CleanStart: a["clean"] == "true", KeepAlive: uint16(num(a, "keepalive", 0))}
	if p.ProtocolLevel == 3 {
		p.ProtocolLevel = packet.V311
	}
	if e, ok := a["expiry"]; ok {
		p.Props.HasSessionExpiry = true
		if e == "never" {
			p.Props.SessionExpiry = 0xFFFFFFFF
		} else if dd, ok := dur(a, "expiry"); ok {
			p.Props.SessionExpiry = uint32(dd / time.Second)
		}
	}
	if _, ok := a["receive-max"]; ok {
		p.Props.ReceiveMaximum, p.Props.HasReceiveMaximum = uint16(num(a, "receive-max", 0)), true
	}
	if _, ok := a["alias-max"]; ok {
		p.Props.TopicAliasMaximum, p.Props.HasTopicAliasMaximum = uint16(num(a, "alias-max", 0)), true
	}
	var o ConnectOpts
	if w, ok := a["will"]; ok {
		o.Will = &Will{Msg: Message{Subject: []byte(w), Payload: []byte("gone"), QoS: byte(num(a, "will-qos", 0))}}
		o.Will.Delay, _ = dur(a, "will-delay")
	}
	l := h.s.Connect(h.now, p, o)
	if l.KeepAlive != 0 {
		h.printf("keepalive %v", l.KeepAlive)
	}
	return nil
}

func (h *harness) recv(d *datadriven.TestData) error {
	if len(d.CmdArgs) == 0 {
		return fmt.Errorf("recv: which packet?")
	}
	kind := d.CmdArgs[0].Key
	d.CmdArgs = d.CmdArgs[1:]
	pid := uint16(0)
	if len(d.CmdArgs) > 0 && len(d.CmdArgs[0].Vals) == 0 {
		if n, err := strconv.Atoi(d.CmdArgs[0].Key); err == nil {
			pid = uint16(n)
			d.CmdArgs = d.CmdArgs[1:]
		}
	}
	a := args(d)
	reason := packet.ReasonCode(num(a, "reason", 0))
	switch kind {
	case "publish":
		p := &packet.Publish{Topic: a["topic"], QoS: byte(num(a, "qos", 0)), PacketID: pid}
		if _, ok := a["alias"]; ok {
			p.Props.TopicAlias, p.Props.HasTopicAlias = uint16(num(a, "alias", 0)), true
		}
		topic, publish, err := h.s.Publish(h.now, p)
		if err != nil {
			return err
		}
		if publish {
			h.printf("broker <- %s qos=%d", topic, p.QoS)
			h.s.Published(p, reason)
		}
	case "puback", "pubrec", "pubrel", "pubcomp":
		t := map[string]packet.Type{"puback": packet.TypePuback, "pubrec": packet.TypePubrec, "pubrel": packet.TypePubrel, "pubcomp": packet.TypePubcomp}[kind]
		h.s.Ack(h.now, &packet.Ack{Type: t, PacketID: pid, Reason: reason})
	case "pingreq":
		h.s.Ping(h.now)
	case "subscribe":
		f := a["filter"]
		sp := packet.Subscription{Filter: f, QoS: byte(num(a, "qos", 0)), NoLocal: a["nl"] == "true",
			RetainAsPublished: a["rap"] == "true", RetainHandling: byte(num(a, "rh", 0))}
		var e *Sub
		if a["invalid"] != "true" {
			e = &Sub{Filter: f, QoS: sp.QoS, NoLocal: sp.NoLocal, RAP: sp.RetainAsPublished, SubID: uint32(num(a, "id", 0)),
				Shared: strings.HasPrefix(f, "$share/"), DollarGuard: f != "" && (f[0] == '+' || f[0] == '#')}
		}
		return h.s.Subscribe(h.now, &packet.Subscribe{PacketID: pid, Subs: []packet.Subscription{sp}}, []*Sub{e})
	case "unsubscribe":
		h.s.Unsubscribe(h.now, &packet.Unsubscribe{PacketID: pid, Filters: []string{a["filter"]}})
	case "disconnect":
		p := &packet.Disconnect{Reason: reason}
		if e, ok := a["expiry"]; ok {
			p.Props.HasSessionExpiry = true
			dd, _ := dur(a, "expiry")
			if e == "never" {
				p.Props.SessionExpiry = 0xFFFFFFFF
			} else {
				p.Props.SessionExpiry = uint32(dd / time.Second)
			}
		}
		if err := h.s.ClientDisconnect(h.now, p); err != nil {
			return err
		}
		if rd := h.s.Ready(); rd != nil {
			h.apply(rd)
		}
		h.printf("(connection closed)")
		h.s.Disconnected(h.now)
	default:
		return fmt.Errorf("recv: unknown packet %q", kind)
	}
	return nil
}

// sub finds the session's subscription of filter, by default the message's topic.
func (h *harness) sub(a map[string]string) *Sub {
	filter := a["filter"]
	if filter == "" {
		filter = a["topic"]
	}
	var found *Sub
	h.s.Subs(func(e *Sub) {
		if e.Filter == filter {
			found = e
		}
	})
	return found
}

func (h *harness) message(a map[string]string) *OutMsg {
	m := &OutMsg{Topic: a["topic"], Payload: []byte(a["payload"]), QoS: byte(num(a, "qos", 0)), Retain: a["retain"] == "true"}
	if e, ok := dur(a, "expire"); ok {
		m.ExpireAt = h.now.Add(e).UnixNano()
	}
	return m
}

func (h *harness) deliver(d *datadriven.TestData) error {
	a := args(d)
	var subs []*Sub
	for _, f := range d.CmdArgs {
		if f.Key != "filter" {
			continue
		}
		for _, v := range f.Vals { // filter=(a,b): several subscriptions matched
			e := h.sub(map[string]string{"filter": v})
			if e == nil {
				return fmt.Errorf("deliver: no subscription %q", v)
			}
			subs = append(subs, e)
		}
	}
	if len(subs) == 0 {
		e := h.sub(a)
		if e == nil {
			return fmt.Errorf("deliver: no subscription %q", a["topic"])
		}
		subs = append(subs, e)
	}
	m := h.message(a)
	v, qos, retain, ids := h.s.Route(h.now, subs, m.QoS, m.Retain, strings.HasPrefix(m.Topic, "$"), m.ExpireAt, nil)
	// A driver routing from its copy of the live subscriptions and the presence
	// comes to the same.
	var live []*Sub
	for _, e := range subs {
		if h.routed[e] != e.live {
			return fmt.Errorf("deliver: %s is live=%v, but Ready.Subs left it routed=%v", e.Filter, e.live, h.routed[e])
		}
		if h.routed[e] {
			live = append(live, e)
		}
	}
	lv, lqos, lretain, lids := RouteLive(h.s.Presence(), h.now, live, m.QoS, m.Retain, strings.HasPrefix(m.Topic, "$"), m.ExpireAt, nil)
	if lv != v || lqos != qos || lretain != retain || !slices.Equal(lids, ids) {
		return fmt.Errorf("deliver: RouteLive says %v qos=%d retain=%v ids=%v, Route %v qos=%d retain=%v ids=%v", lv, lqos, lretain, lids, v, qos, retain, ids)
	}
	switch v {
	case Refuse:
		h.printf("refused")
	case Expired:
		h.printf("expired")
	case Send:
		m.Retain, m.SubIDs = retain, ids
		h.packet(Packet{Type: packet.TypePublish, Msg: m})
	case Queue:
		m.QoS, m.Retain, m.SubIDs = qos, retain, ids
		if !h.s.Enqueue(h.now, m) {
			h.printf("queue full: dropped")
		}
	}
	return nil
}

func (h *harness) retained(d *datadriven.TestData) error {
	a := args(d)
	e := h.sub(a)
	if e == nil {
		return fmt.Errorf("retained: no subscription %q", a["filter"])
	}
	h.s.DeliverRetained(h.now, e, h.message(a))
	return nil
}

func (h *harness) at(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return "@" + t.Sub(epoch).String()
}

// apply prints rd and applies its persist ops to the store model.
func (h *harness) apply(rd *Ready) {
	if rd == nil {
		h.printf("(nothing to do)")
		return
	}
	defer Release(rd)
	for _, p := range rd.Packets {
		h.packet(p)
	}
	for _, m := range rd.Publish {
		h.printf("broker <- %s qos=%d (%s)", m.Subject, m.QoS, m.Payload)
	}
	for _, c := range rd.Subs {
		if c.Remove != nil {
			delete(h.routed, c.Remove)
		}
		if c.Add != nil {
			h.routed[c.Add] = true
		}
		switch {
		case c.Add != nil && c.Remove != nil:
			h.printf("subs: replace %s qos=%d", c.Add.Filter, c.Add.QoS)
		case c.Add != nil:
			h.printf("subs: add %s qos=%d", c.Add.Filter, c.Add.QoS)
		default:
			h.printf("subs: remove %s", c.Remove.Filter)
		}
	}
	for _, e := range rd.Retained {
		h.printf("retained wanted: %s", e.Filter)
	}
	for _, o := range rd.Persist {
		h.persist(o)
	}
	if rd.Kick {
		h.printf("kick: old connection closed (0x8E session taken over)")
	}
	if rd.Close != nil {
		h.printf("close: %v", rd.Close)
	}
	if rd.Ended {
		h.printf("session ended")
	}
	h.printf("deadline %s", h.at(rd.Deadline))
}

func (h *harness) packet(p Packet) {
	switch p.Type {
	case packet.TypeConnack:
		ca := p.Connack
		s := fmt.Sprintf("-> connack present=%v", ca.SessionPresent)
		if ca.Props.HasReceiveMaximum {
			s += fmt.Sprintf(" receive-max=%d", ca.Props.ReceiveMaximum)
		}
		if ca.Props.HasTopicAliasMaximum {
			s += fmt.Sprintf(" alias-max=%d", ca.Props.TopicAliasMaximum)
		}
		if ca.Props.HasServerKeepAlive {
			s += fmt.Sprintf(" server-keepalive=%ds", ca.Props.ServerKeepAlive)
		}
		if ca.Props.HasSessionExpiry {
			s += fmt.Sprintf(" session-expiry=%ds", ca.Props.SessionExpiry)
		}
		h.printf("%s", s)
	case packet.TypePublish:
		m := p.Msg
		s := fmt.Sprintf("-> publish %s qos=%d", m.Topic, m.QoS)
		if l := h.s.Link(); l != nil && l.Aliases != nil {
			// What the driver's encoder does: the alias, and the topic only when new.
			a, known := l.Aliases.Lookup(m.Topic)
			l.Aliases.Used(a, m.Topic, known)
			s = fmt.Sprintf("-> publish %s alias=%d qos=%d", map[bool]string{true: `""`, false: m.Topic}[known], a, m.QoS)
		}
		if p.PID != 0 {
			s += fmt.Sprintf(" pid=%d", p.PID)
		}
		if p.Dup {
			s += " dup"
		}
		if m.Retain {
			s += " retain"
		}
		for _, id := range m.SubIDs {
			s += fmt.Sprintf(" subid=%d", id)
		}
		if m.ExpireAt != 0 {
			s += fmt.Sprintf(" expiry-left=%ds", p.ExpiryLeft)
		}
		if len(m.Payload) > 0 {
			s += fmt.Sprintf(" (%s)", m.Payload)
		}
		h.printf("%s", s)
	case packet.TypeSuback, packet.TypeUnsuback:
		rs := make([]string, len(p.Reasons))
		for i, r := range p.Reasons {
			rs[i] = fmt.Sprintf("%#02x", byte(r))
		}
		h.printf("-> %s %d [%s]", strings.ToLower(p.Type.String()), p.PID, strings.Join(rs, " "))
	case packet.TypeDisconnect:
		h.printf("-> disconnect %#02x %q", byte(p.Reason), p.Text)
	case packet.TypePingresp:
		h.printf("-> pingresp")
	default:
		s := fmt.Sprintf("-> %s %d", strings.ToLower(p.Type.String()), p.PID)
		if p.Reason != 0 {
			s += fmt.Sprintf(" %#02x", byte(p.Reason))
		}
		h.printf("%s", s)
	}
}

func (h *harness) persist(o Op) {
	st := &h.store
	switch o.Kind {
	case OpSaveSession:
		st.session, st.expiry, st.subs = true, h.s.Expiry(), nil
		var fs []string
		h.s.Subs(func(e *Sub) { st.subs = append(st.subs, *e); fs = append(fs, e.Filter) })
		sort.Strings(fs)
		h.printf("store: save session expiry=%v subs=[%s]", h.s.Expiry(), strings.Join(fs, " "))
		return
	case OpDeleteSession:
		st.session, st.subs = false, nil
		h.printf("store: delete session")
		return
	case OpSaveMsg:
		st.msgs[o.MID] = *o.Msg
		h.printf("store: save msg %d (%s pid=%d pubrec=%v)", o.MID, o.Msg.Topic, o.Msg.PID, o.Msg.Pubrec)
		return
	case OpDeleteMsg:
		delete(st.msgs, o.MID)
	case OpSaveQoS2:
		st.qos2[o.PID] = true
	case OpDeleteQoS2:
		delete(st.qos2, o.PID)
	}
	id := o.MID
	if o.Kind == OpSaveQoS2 || o.Kind == OpDeleteQoS2 {
		id = uint64(o.PID)
	}
	h.printf("store: %s %d", o.Kind, id)
}

// restart rebuilds the session from the store model, as a server restart does.
func (h *harness) restart() {
	st := &h.store
	h.s = New(&h.cfg)
	clear(h.routed)
	if !st.session {
		h.printf("(no stored session)")
		return
	}
	h.s.Restore(st.expiry)
	for i := range st.subs {
		e := st.subs[i]
		h.s.RestoreSub(&e)
	}
	mids := make([]uint64, 0, len(st.msgs))
	for mid := range st.msgs {
		mids = append(mids, mid)
	}
	slices.Sort(mids)
	for _, mid := range mids {
		m := st.msgs[mid]
		m.MID = mid
		h.s.RestoreMsg(&m)
	}
	for pid := range st.qos2 {
		h.s.RestoreQoS2(pid)
	}
	h.s.Restored(h.now)
}

func (h *harness) state() {
	s := h.s
	var fs []string
	s.Subs(func(e *Sub) { fs = append(fs, e.Filter) })
	sort.Strings(fs)
	h.printf("now %s online=%v ended=%v expiry=%v subs=[%s] inflight=%d queued=%d deadline %s",
		h.at(h.now), s.Online(), s.Ended(), s.Expiry(), strings.Join(fs, " "), s.Inflight(), s.Queued(), h.at(s.Deadline()))
	if s.x != nil && len(s.x.inQoS2) > 0 {
		var ids []int
		for pid := range s.x.inQoS2 {
			ids = append(ids, int(pid))
		}
		sort.Ints(ids)
		h.printf("awaiting pubrel %v", ids)
	}
}

// TestRouteLive: Route's rule is RouteLive's, on the live subscriptions and the
// session's Presence, which follows connections and the session's end.
func TestRouteLive(t *testing.T) {
	cfg := Config{MaxInflight: 10, MaxQueued: 10, ReceiveMaximum: 10, MaxPacketSize: 1 << 20}
	s := New(&cfg)
	now := epoch
	if p := s.Presence(); p != (Presence{}) {
		t.Fatalf("new session: %+v", p)
	}
	s.Connect(now, &packet.Connect{ProtocolLevel: packet.V5, ClientID: "c", Props: packet.Properties{SessionExpiry: 60, HasSessionExpiry: true}}, ConnectOpts{})
	Release(s.Ready())
	if p := s.Presence(); p != (Presence{Online: true}) {
		t.Fatalf("connected: %+v", p)
	}
	sub := func(pid uint16, e *Sub) {
		t.Helper()
		if err := s.Subscribe(now, &packet.Subscribe{PacketID: pid, Subs: []packet.Subscription{{Filter: e.Filter, QoS: e.QoS}}}, []*Sub{e}); err != nil {
			t.Fatal(err)
		}
		Release(s.Ready())
	}
	q1 := &Sub{Filter: "a/+", QoS: 1, SubID: 1}
	sub(1, q1)
	q0 := &Sub{Filter: "a/+", QoS: 0, SubID: 2, RAP: true} // replaces q1
	sub(2, q0)
	wild := &Sub{Filter: "#", QoS: 2, SubID: 3, DollarGuard: true}
	sub(3, wild)

	type verdict struct {
		v      Verdict
		qos    byte
		retain bool
		ids    []uint32
	}
	check := func(name string, subs, live []*Sub, qos byte, dollar bool, want verdict) {
		t.Helper()
		v, q, r, ids := s.Route(now, subs, qos, true, dollar, 0, nil)
		got := verdict{v, q, r, ids}
		lv, lq, lr, lids := RouteLive(s.Presence(), now, live, qos, true, dollar, 0, nil)
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(verdict{lv, lq, lr, lids}) != fmt.Sprint(want) {
			t.Errorf("%s: Route %v, RouteLive %v, want %v", name, got, verdict{lv, lq, lr, lids}, want)
		}
	}
	check("replaced", []*Sub{q1}, nil, 1, false, verdict{Refuse, 0, false, nil})
	check("replacement", []*Sub{q1, q0}, []*Sub{q0}, 1, false, verdict{Send, 0, true, []uint32{2}})
	check("overlap", []*Sub{q0, wild}, []*Sub{q0, wild}, 2, false, verdict{Queue, 2, true, []uint32{2, 3}})
	check("dollar", []*Sub{q0, wild}, []*Sub{q0, wild}, 2, true, verdict{Send, 0, true, []uint32{2}})

	s.Disconnected(now)
	Release(s.Ready())
	if p := s.Presence(); p != (Presence{}) {
		t.Fatalf("disconnected: %+v", p)
	}
	check("offline QoS 0", []*Sub{q0}, []*Sub{q0}, 1, false, verdict{Refuse, 0, false, []uint32{2}})
	check("offline QoS 1", []*Sub{q0, wild}, []*Sub{q0, wild}, 1, false, verdict{Queue, 1, true, []uint32{2, 3}})

	s.End(now)
	Release(s.Ready())
	if p := s.Presence(); p != (Presence{Ended: true}) {
		t.Fatalf("ended: %+v", p)
	}
	check("ended", []*Sub{wild}, []*Sub{wild}, 1, false, verdict{Refuse, 0, false, nil})
}
