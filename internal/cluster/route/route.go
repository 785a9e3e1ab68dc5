package route

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/wire"
)

// Errors that end a route; the Manager logs them and, while the node is wanted,
// dials again.
var (
	ErrHandshake = errors.New("route: handshake")
	ErrProtocol  = errors.New("route: protocol error")
	// ErrRefusedByPeer: the peer sent ERR, refusing the route (its text says why).
	ErrRefusedByPeer = errors.New("route: refused by the peer")
)

const (
	readBufSize = 64 << 10
	maxBody     = 8<<20 + 64<<10 // a forwarded message: the largest payload plus headers
)

// Route is one connection to another node.
type Route struct {
	m        *Manager
	nc       net.Conn
	q        outbound.Queue
	dialed   bool
	peer     wire.RouteHello
	id       uint64
	started  time.Time
	rttNanos atomic.Int64
	pingSent atomic.Int64
	heard    atomic.Int64 // when the peer last sent anything (Unix ns)
	// raftRead (reader goroutine only) is the Raft receiver's afterRead once a
	// batch of the current read went to it.
	raftRead func()
	// Over TLS (Config.TLS): the peer's certificate and the version agreed on,
	// set by the handshake.
	peerCert   *x509.Certificate
	tlsVersion uint16

	// The peer's interest, held as broker subscriptions. Guarded by imu; the
	// reader goroutine and the Manager's lease checks change it.
	imu    sync.Mutex
	table  *interest.Table
	subs   map[interest.Key]*broker.Subscription
	closed bool

	// Owned by the reader goroutine.
	batch  broker.Batch
	msg    broker.Message
	queues []string
	names  map[string]string // interned queue names

	inMsgs, inBytes atomic.Uint64
	// excluded: the peer is behind or stalled, so it gets no traffic until it
	// drains (fast exclusion, before membership would call it dead).
	excluded atomic.Bool
	// stalled: excluded for making no progress at all (not just for a backlog):
	// then Raft traffic is dropped too (Raft sends it again).
	stalled       atomic.Bool
	interestDirty atomic.Bool // interest frames queued and not flushed yet
	exclusions    atomic.Uint64
	excludedDrops atomic.Uint64
	// Owned by the Manager's health check.
	stall     stallClock
	out       *outSession // what we forwarded with sequence numbers, per peer name
	in        *inSession  // what we received so, per peer process
	ackedUpTo uint64      // reader goroutine: the last RACK sent
}

// Info describes a route for monitoring.
type Info struct {
	Node       string        `json:"node"`
	NodeID     string        `json:"node_id"`
	Addr       string        `json:"addr"`
	Dialed     bool          `json:"dialed"`
	Since      time.Time     `json:"since"`
	RTT        time.Duration `json:"rtt_ns"`
	Interest   int           `json:"interest"`
	InMsgs     uint64        `json:"in_msgs"`
	InBytes    uint64        `json:"in_bytes"`
	OutMsgs    uint64        `json:"out_msgs"`
	OutBytes   uint64        `json:"out_bytes"`
	Dropped    uint64        `json:"dropped"`
	PendingOut int           `json:"pending_bytes"`
	Unacked    int           `json:"unacked"`
	Excluded   bool          `json:"excluded"`
	Exclusions uint64        `json:"exclusions"`
	// ExcludedDrops counts QoS 0 messages not forwarded while excluded.
	ExcludedDrops uint64   `json:"excluded_drops"`
	ClientURLs    []string `json:"client_urls,omitempty"`
	PeerVersion   string   `json:"version"`
	// TLS is the TLS version of a route over TLS ("TLS 1.3"), empty for a
	// plaintext route; PeerCertSubject, PeerCertSerial (hexadecimal) and
	// PeerCertNotAfter describe the certificate the peer presented.
	TLS              string     `json:"tls,omitempty"`
	PeerCertSubject  string     `json:"peer_cert_subject,omitempty"`
	PeerCertSerial   string     `json:"peer_cert_serial,omitempty"`
	PeerCertNotAfter *time.Time `json:"peer_cert_not_after,omitempty"`
}

func newRoute(m *Manager, nc net.Conn, dialed bool) *Route {
	r := &Route{m: m, nc: nc, dialed: dialed, id: outbound.NextConnID(), started: time.Now(),
		subs: make(map[interest.Key]*broker.Subscription), names: make(map[string]string)}
	r.q.Init(m.group, r)
	m.group.Opened(nc)
	return r
}

// handshake runs TLS's handshake on a route over TLS (tls.go), sends our RHELLO
// and reads the peer's; with the cluster secret, both ends then prove they have it
// (auth.go). A refused peer is told why with ERR before the connection closes.
func (r *Route) handshake(buf []byte) (rest []byte, err error) {
	_ = r.nc.SetDeadline(time.Now().Add(r.m.cfg.HandshakeTimeout))
	defer func() { _ = r.nc.SetDeadline(time.Time{}) }()
	if err := r.tlsHandshake(); err != nil {
		return nil, err
	}
	hello := r.m.cfg.Hello
	if r.m.cfg.AuthKey != nil {
		if hello.Nonce, err = newNonce(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
		}
	}
	ours := wire.AppendRouteHello(nil, &hello)
	if _, err := r.nc.Write(ours); err != nil {
		return nil, fmt.Errorf("%w: sending RHELLO: %w", ErrHandshake, err)
	}
	in := handshakeReader{nc: r.nc, buf: buf}
	f, err := in.next("RHELLO")
	if r.m.cfg.TLS == nil && looksLikeTLS(in.buf[:in.filled]) {
		// Not worth an ERR: the peer expects TLS records.
		return nil, fmt.Errorf("%w: the peer speaks TLS (cluster_tls is on there) and this node does not", ErrTLS)
	}
	if err != nil {
		return nil, err
	}
	if f.Type != wire.TypeRouteHello {
		return nil, r.refuse(fmt.Errorf("%w: first frame is %s, want RHELLO", ErrHandshake, f.Type))
	}
	theirs := append([]byte(nil), f.Payload...)
	h, perr := wire.ParseRouteHello(theirs)
	if perr != nil {
		return nil, r.refuse(fmt.Errorf("%w: %w", ErrHandshake, perr))
	}
	r.peer = h
	if err := r.m.accept(&h); err != nil {
		return nil, r.refuse(err)
	}
	if err := r.checkPeerName(&h); err != nil {
		return nil, r.refuse(err)
	}
	if err := authPolicy(r.m.cfg.AuthKey != nil, &h); err != nil {
		return nil, r.refuse(err)
	}
	if r.m.cfg.AuthKey != nil {
		a := newAuthExchange(r.m.cfg.AuthKey, r.dialed, helloBody(ours), theirs)
		if _, err := r.nc.Write(wire.AppendRouteAuth(nil, a.proof())); err != nil {
			return nil, fmt.Errorf("%w: sending RAUTH: %w", ErrHandshake, err)
		}
		f, err := in.next("RAUTH")
		if err != nil {
			return nil, err
		}
		if f.Type != wire.TypeRouteAuth {
			return nil, r.refuse(fmt.Errorf("%w: %s after RHELLO, want RAUTH", ErrUnauthenticated, f.Type))
		}
		if err := a.verify(f.Payload); err != nil {
			return nil, r.refuse(err)
		}
	}
	return in.rest(), nil
}

// helloBody is the body of the RHELLO frame hello.
func helloBody(hello []byte) []byte {
	var f wire.Frame
	if _, err := f.Decode(hello, 0); err != nil {
		panic(fmt.Sprintf("route: our own RHELLO does not decode: %v", err))
	}
	return f.Payload
}

// refuse tells the peer why its route is refused, with an ERR frame, and returns
// err. A route to this node itself is closed without a word. The text says only
// what the peer sent or could have known: never anything about the secret.
func (r *Route) refuse(err error) error {
	code := wire.CodeProtocol
	switch {
	case errors.Is(err, ErrSelf):
		return err
	case errors.Is(err, ErrVersion):
		code = wire.CodeVersion
	case errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrTLS):
		code = wire.CodeAuth
	}
	_, _ = r.nc.Write(wire.AppendErr(nil, code, 0, err.Error()))
	return err
}

// handshakeReader reads the frames of the handshake from a connection into buf.
type handshakeReader struct {
	nc          net.Conn
	buf         []byte
	off, filled int
}

// next returns the next frame; its slices point into the buffer until the next
// call. An ERR from the peer is its refusal of the route, returned as an error.
func (in *handshakeReader) next(what string) (wire.Frame, error) {
	var f wire.Frame
	for {
		k, derr := f.Decode(in.buf[in.off:in.filled], maxBody)
		if derr == nil {
			in.off += k
			if f.Type == wire.TypeErr {
				return f, fmt.Errorf("%w: %s: %q", ErrRefusedByPeer, f.Code, f.Payload)
			}
			return f, nil
		}
		if !errors.Is(derr, wire.ErrIncomplete) {
			return f, fmt.Errorf("%w: %w", ErrHandshake, derr)
		}
		if in.filled == len(in.buf) {
			if in.off == 0 {
				return f, fmt.Errorf("%w: %s larger than %d bytes", ErrHandshake, what, len(in.buf))
			}
			in.filled = copy(in.buf, in.buf[in.off:in.filled])
			in.off = 0
		}
		n, rerr := in.nc.Read(in.buf[in.filled:])
		in.filled += n
		if n == 0 && rerr != nil {
			return f, fmt.Errorf("%w: reading %s: %w", ErrHandshake, what, rerr)
		}
	}
}

// rest is what the peer sent after the handshake.
func (in *handshakeReader) rest() []byte { return in.buf[in.off:in.filled] }

// run reads the peer's frames until the route ends.
func (r *Route) run(buf []byte, filled int) error {
	var f wire.Frame
	for {
		off := 0
		for off < filled {
			k, derr := f.Decode(buf[off:filled], maxBody)
			if derr != nil {
				if errors.Is(derr, wire.ErrIncomplete) {
					break
				}
				return fmt.Errorf("%w: %w", ErrProtocol, derr)
			}
			off += k
			if err := r.handle(&f); err != nil {
				r.batch.Flush()
				return err
			}
		}
		r.batch.Flush()
		r.batch.WaitStalled(outbound.MaxStall)
		if last := r.in.highest(); last > r.ackedUpTo {
			r.ackedUpTo = last
			r.q.Append(func(b []byte) []byte { return wire.AppendRouteAck(b, last) })
		}
		r.q.Flush()
		if after := r.raftRead; after != nil {
			r.raftRead = nil
			after()
		}
		buf, filled, _ = wire.KeepTail(buf, off, filled)
		n, err := r.nc.Read(buf[filled:])
		filled += n
		if n > 0 {
			r.heard.Store(time.Now().UnixNano())
		}
		if err != nil && n == 0 {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("route to %s closed by the peer", r.peer.NodeName)
			}
			return err
		}
	}
}

func (r *Route) handle(f *wire.Frame) error {
	switch f.Type {
	case wire.TypeRouteMsg:
		r.deliverIn(f)
	case wire.TypeRouteInterest:
		k := interest.Key{Subject: string(f.Subject), Queue: string(f.Queue)}
		r.imu.Lock()
		r.applyLocked(r.table.Set(k, f.Weight))
		r.imu.Unlock()
	case wire.TypeRouteRefresh:
		r.imu.Lock()
		if f.Phase == wire.RefreshBegin {
			r.table.BeginRefresh(f.Generation)
		} else {
			r.applyLocked(r.table.EndRefresh(f.Generation, time.Now()))
		}
		r.imu.Unlock()
	case wire.TypeRouteAck:
		r.out.acked(f.Seq)
	case wire.TypeRouteRaft:
		if h := r.m.raft.Load(); h != nil {
			r.raftRead = h.afterRead
			if err := h.take(r.peer.NodeName, f.Payload); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrProtocol, f.Type, err)
			}
		}
	case wire.TypePing:
		r.q.Append(wire.AppendPong)
	case wire.TypePong:
		if sent := r.pingSent.Swap(0); sent != 0 {
			r.rttNanos.Store(time.Now().UnixNano() - sent)
		}
	case wire.TypeErr:
		return fmt.Errorf("%w: %s: %q", ErrRefusedByPeer, f.Code, f.Payload)
	default:
		return fmt.Errorf("%w: %s on a route", ErrProtocol, f.Type)
	}
	return nil
}

// deliverIn publishes a forwarded message into the local broker.
func (r *Route) deliverIn(f *wire.Frame) {
	if f.Seq != 0 && !r.in.admit(f.Seq) {
		return // sent again after a reconnect; delivered the first time
	}
	r.inMsgs.Add(1)
	r.inBytes.Add(uint64(len(f.Payload)))
	m := &r.msg
	*m = broker.Message{Subject: f.Subject, Route: f.Route, Reply: f.Reply, Header: header.Block(f.Header), Payload: f.Payload,
		QoS: f.Attrs & wire.AttrQoS, Retain: f.Attrs&wire.AttrRetain != 0, FromRoute: true}
	r.queues = r.queues[:0]
	for name := range f.Queues.All() {
		q, ok := r.names[string(name)]
		if !ok {
			q = string(name)
			if len(r.names) < 4096 {
				r.names[q] = q
			}
		}
		r.queues = append(r.queues, q)
	}
	m.Queues = r.queues
	if f.Attrs&wire.AttrGroupOnly != 0 {
		// Only the named groups deliver it: one publish restricted to each.
		for _, q := range r.queues {
			m.Group, m.Queues = q, r.queues
			r.m.cfg.Broker.Publish(&r.batch, m)
		}
		return
	}
	r.m.cfg.Broker.Publish(&r.batch, m)
}

// applyLocked makes the broker hold the peer's interest as the table says.
func (r *Route) applyLocked(changes []interest.Change) {
	if r.closed {
		return
	}
	b := r.m.cfg.Broker
	for _, c := range changes {
		old := r.subs[c.Key]
		if c.Weight > 0 {
			// The new subscription goes in before the old one goes out: a message
			// routed meanwhile sees one of them, never neither.
			sub := &broker.Subscription{Sink: r, Subject: c.Key.Subject, Queue: c.Key.Queue, Weight: c.Weight}
			if err := b.Subscribe(sub); err != nil {
				r.m.log.Warn("route: peer interest refused", "node", r.peer.NodeName, "subject", c.Key.Subject, "queue", c.Key.Queue, "err", err)
				continue
			}
			r.subs[c.Key] = sub
		} else {
			delete(r.subs, c.Key)
		}
		if old != nil {
			_ = b.Unsubscribe(old)
		}
	}
}

// dropInterest removes everything the peer advertised.
func (r *Route) dropInterest(closing bool) {
	r.imu.Lock()
	defer r.imu.Unlock()
	r.applyLocked(r.table.Clear())
	if closing {
		r.closed = true
	}
}

// InterestChanged implements interest.Listener: our local interest changed.
// The frame is queued on the subscribing client's goroutine and flushed by the
// Manager's flusher: a client making thousands of subscriptions costs a write per
// batch, not one per subscription and route. Order is kept: a message forwarded
// after the subscription is queued behind its frame.
func (r *Route) InterestChanged(k interest.Key, weight uint32) {
	r.q.Append(func(b []byte) []byte { return wire.AppendRouteInterest(b, k.Subject, k.Queue, weight) })
	if !r.interestDirty.Swap(true) {
		r.m.kickFlusher()
	}
}

// refresh re-sends all our interest under generation gen. A change made while it
// runs arrives between the begin and the end too, so it counts as refreshed.
func (r *Route) refresh(gen uint64) {
	r.q.Append(func(b []byte) []byte { return wire.AppendRouteRefresh(b, wire.RefreshBegin, gen) })
	r.m.cfg.Local.Each(func(k interest.Key, n uint32) {
		r.q.Append(func(b []byte) []byte { return wire.AppendRouteInterest(b, k.Subject, k.Queue, n) })
	})
	r.q.Append(func(b []byte) []byte { return wire.AppendRouteRefresh(b, wire.RefreshEnd, gen) })
	r.q.Flush()
}

// ping sends a PING to measure the round trip.
func (r *Route) ping() {
	r.pingSent.CompareAndSwap(0, time.Now().UnixNano())
	r.q.Append(wire.AppendPing)
	r.q.Flush()
}

// Deliver implements broker.Sink; the broker gives a Remote its messages through
// DeliverRemote.
func (r *Route) Deliver(*broker.Subscription, *broker.Message) bool { return false }

// Flush implements broker.Sink.
func (r *Route) Flush() { r.q.Flush() }

// DeliverRemote implements broker.Remote: it forwards m to the peer.
func (r *Route) DeliverRemote(m *broker.Message, queues []string) bool {
	attrs := min(m.QoS, 2) & wire.AttrQoS
	if m.Retain {
		attrs |= wire.AttrRetain
	}
	if m.Group != "" {
		attrs |= wire.AttrGroupOnly
	}
	if len(queues) > wire.MaxRouteQueues {
		queues = queues[:wire.MaxRouteQueues]
	}
	if m.QoS > 0 {
		return r.out.forward(r, m, attrs, queues)
	}
	if r.excluded.Load() {
		r.excludedDrops.Add(1)
		return false
	}
	b, ok := r.q.Reserve(wire.RouteMsgLen(0, m.Subject, m.Route, m.Reply, queues, wire.Header(m.Header), m.Payload))
	if !ok {
		return false
	}
	r.q.Commit(wire.AppendRouteMsg(b, 0, attrs, m.Subject, m.Route, m.Reply, queues, wire.Header(m.Header), m.Payload), len(m.Payload))
	return true
}

// Excluded implements broker.Remote.
func (r *Route) Excluded() bool { return r.excluded.Load() }

// Stall implements broker.Staller: publishers wait briefly for a route that is
// behind, never for one that is excluded.
func (r *Route) Stall() <-chan struct{} {
	if r.excluded.Load() {
		return nil
	}
	return r.q.Stall()
}

// Stuck implements broker.Staller.
func (r *Route) Stuck() { r.q.Stuck() }

// Socket implements outbound.Endpoint.
func (r *Route) Socket() (net.Conn, error) { return r.nc, nil }

// StopReading implements outbound.Endpoint.
func (r *Route) StopReading() { _ = r.nc.SetReadDeadline(time.Unix(1, 0)) }

// AppendSlowGoodbye implements outbound.Endpoint: a route has nobody to tell.
func (r *Route) AppendSlowGoodbye(b []byte, _, _ int64) []byte { return b }

func (r *Route) info() Info {
	c := r.q.Counters()
	unacked := 0
	if r.out != nil {
		unacked, _ = r.out.pending()
	}
	r.imu.Lock()
	n := r.table.Len()
	r.imu.Unlock()
	in := Info{Node: r.peer.NodeName, NodeID: r.peer.NodeID, Addr: r.nc.RemoteAddr().String(), Dialed: r.dialed,
		Since: r.started, RTT: time.Duration(r.rttNanos.Load()), Interest: n, InMsgs: r.inMsgs.Load(),
		InBytes: r.inBytes.Load(), OutMsgs: c.OutMsgs, OutBytes: c.OutBytes, Dropped: c.Dropped,
		PendingOut: r.q.Pending(), Unacked: unacked, Excluded: r.excluded.Load(), Exclusions: r.exclusions.Load(),
		ExcludedDrops: r.excludedDrops.Load(), ClientURLs: r.peer.ClientURLs, PeerVersion: r.peer.ServerVersion}
	if c := r.peerCert; c != nil {
		in.TLS, in.PeerCertSubject, in.PeerCertSerial = tls.VersionName(r.tlsVersion), c.Subject.String(), c.SerialNumber.Text(16)
		na := c.NotAfter
		in.PeerCertNotAfter = &na
	}
	return in
}
