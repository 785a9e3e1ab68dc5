package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/outbound"
)

// conn is one MQTT network connection. Its reader goroutine decodes packets and acts
// on them; its writer goroutine sends what the reader and the session queue on out.
// Idle devices are many, so the fields are ordered to pack and what only some
// connections need lives behind pointers made on first use.
type conn struct {
	srv    *Server
	id     uint64
	nc     net.Conn                // set under mu; nil while dormant (see fd)
	sessp  atomic.Pointer[session] // see sess
	rd     *reader                 // owned by the reader, while one runs
	rare   *connRare               // owned by the reader; nil for most clients
	readAt atomic.Int64            // unix nanoseconds of the latest bytes from the client

	// q is the outbound queue; its writer runs only while there is something to
	// send, and an idle connection lets its buffers go (Release).
	q   outbound.Queue
	enc *encoder   // delivery scratch, guarded by q's lock; made on first delivery
	mu  sync.Mutex // guards nc and the poller's view of the socket

	inMsgs, inBytes atomic.Uint64

	// Set during CONNECT, read-only afterwards.
	keepAliveMS uint32 // see keepAlive
	maxPacket   uint32 // the client's maximum packet size, 0 = protocol limit
	attached    atomic.Bool
	startS      uint32 // seconds since the server started
	slot        int32  // in Server.conns, guarded by the server's lock

	// Parking (idle_linux.go): parked is set while no goroutine reads; fd and the
	// flags are guarded by the poller's lock. A dormant connection is parked with
	// nc nil and fd a descriptor of its own.
	parked                       atomic.Bool
	fd                           int32
	pollAdded, pollGone, dormant bool

	receiveMax  uint16 // the client's receive maximum
	version     byte
	problemInfo bool // the client accepts reason strings
	normalExit  bool // DISCONNECT without will (reader)
	ownFlush    bool // acknowledgements queued since the last flushBatch (reader)
	ws          bool // MQTT over WebSocket
	aliasOut    bool // the server sends this client topic aliases (rare.out); set during CONNECT
}

// connRare is what few connections need: a will, topic aliases.
type connRare struct {
	will    *will
	aliases map[uint16]string // set by the client (reader only)
	// out is the table of aliases the server sends, made during CONNECT for a v5
	// client that allows them (aliasOut) and never replaced; its contents are
	// guarded by the outbound queue's lock, like enc. It lives as long as the
	// network connection: a client that reconnects starts with no aliases.
	out *outAliases
}

func newConn(s *Server, id uint64, nc net.Conn) *conn {
	c := &conn{srv: s, id: id, nc: nc, startS: uint32(time.Since(s.start) / time.Second), fd: -1}
	_, c.ws = nc.(*wsConn)
	c.q.Init(s.groups[c.transport()], c)
	return c
}

// rareFields returns the connection's connRare, made on first use. Reader only.
func (c *conn) rareFields() *connRare {
	if c.rare == nil {
		c.rare = &connRare{}
	}
	return c.rare
}

// sess is the connection's session once its CONNECT is accepted, else nil.
func (c *conn) sess() *session { return c.sessp.Load() }

// remote is the client's address, asked of the socket rather than kept: idle
// connections are many.
func (c *conn) remote() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		return c.nc.RemoteAddr().String()
	}
	return c.srv.poll.peerName(c)
}

// logger is built when something is logged, so that idle connections do not each
// hold a logger of their own.
func (c *conn) logger() *slog.Logger {
	l := c.srv.log.With("cid", c.id, "remote", c.remote())
	if c.attached.Load() {
		l = l.With("client_id", c.sess().id)
	}
	return l
}

func (c *conn) run() {
	if err := c.readLoop(); !errors.Is(err, errParked) {
		c.finish(err)
	}
}

// resume reads again after the connection was parked.
func (c *conn) resume() {
	c.mu.Lock()
	err := c.socketLocked()
	c.mu.Unlock()
	if err == nil && c.q.Closed() {
		err = net.ErrClosed // closed while dormant: no read deadline was set to end a read
	}
	if err == nil {
		c.newReader()
		err = c.serve()
	}
	if !errors.Is(err, errParked) {
		c.finish(err)
	}
}

// socketLocked gives a dormant connection its net.Conn again. Called with mu held.
func (c *conn) socketLocked() error {
	if c.nc != nil {
		return nil
	}
	return c.srv.poll.rehydrate(c)
}

func (c *conn) finish(err error) {
	c.srv.poll.forget(c) // before the socket is closed
	c.close(err)
	c.q.Finish()
	c.cleanup()
	c.srv.wg.Done()
}

// inbound is what a connection needs to hand its client's messages to the broker:
// made on the first PUBLISH and let go while the connection is parked, so that
// subscribers and idle connections do without.
type inbound struct {
	batch            broker.Batch
	pub              broker.Message
	subj, hdr, reply []byte
}

// errParked ends a reader that handed its connection to the poller.
var errParked = errors.New("parked")

// park hands an idle connection to the poller; the reader ends if it reports true.
func (c *conn) park() bool {
	if c.srv.poll == nil {
		return false
	}
	rd := c.rd
	rd.pr.Release()
	c.rd = nil // nothing buffered, publishes flushed; made again by the next reader
	if !c.srv.poll.park(c) {
		c.rd = rd
		return false
	}
	if !c.q.WriterRunning() {
		c.srv.poll.dehydrate(c) // else its writer does when it ends
	}
	// A close between this reader's last look and park found no reader to wake.
	if c.q.Closed() {
		c.unpark()
	}
	return true
}

// unpark starts a reader for a parked connection; only the first caller does.
func (c *conn) unpark() {
	if c.parked.CompareAndSwap(true, false) {
		go c.resume()
	}
}

// keepAlive is the keepalive the client and the server agreed on, 0 for none.
func (c *conn) keepAlive() time.Duration { return time.Duration(c.keepAliveMS) * time.Millisecond }

// keepAliveDeadline is when the client's silence exceeds 1.5 times its keepalive.
func (c *conn) keepAliveDeadline() time.Time {
	return time.Unix(0, c.readAt.Load()).Add(c.keepAlive() * 3 / 2)
}

// idleTimeout reports whether a read error is the reader's own idle deadline, not a
// keepalive expiry nor a close.
func (c *conn) idleTimeout(err error) bool {
	var ne net.Error
	if c.srv.poll == nil || !errors.As(err, &ne) || !ne.Timeout() || !c.attached.Load() {
		return false
	}
	if c.keepAlive() > 0 && !time.Now().Before(c.keepAliveDeadline()) {
		return false
	}
	return !c.q.Closed()
}

// reader is what a connection's reader goroutine holds while it runs; a parked
// connection lets it go. Its Read refreshes the read deadline before every read:
// the connect timeout until CONNECT, then 1.5 times the keepalive after the latest
// bytes, and, at a packet boundary, the idle time after which the connection is
// parked.
type reader struct {
	c  *conn
	pr *packet.Reader
	in *inbound // nil until the first PUBLISH

	// Until CONNECT.
	connectBy time.Time
	head      [16]byte // the first bytes read, to answer a CONNECT that does not decode
	headN     uint8
	// fresh: connected, and nothing read since the CONNECT.
	fresh bool
}

// freshIdleAfter is how long a client that has just connected may stay silent before
// its connection parks: long enough for the SUBSCRIBE or PUBLISH a client sends on
// receiving its CONNACK, even over a slow link, to find its reader running; short
// enough that a storm of devices connecting and going quiet does not hold a
// goroutine each (idle-connection memory is measured after such a storm).
const freshIdleAfter = 10 * time.Millisecond

func (c *conn) newReader() {
	c.rd = &reader{c: c}
	c.rd.pr = packet.NewReader(c.rd, c.srv.cfg.MaxPacketSize)
	c.rd.pr.SetVersion(c.version)
}

func (d *reader) Read(p []byte) (int, error) {
	c := d.c
	switch {
	case !c.attached.Load():
		_ = c.nc.SetReadDeadline(d.connectBy)
	case c.srv.poll != nil && d.pr.Buffered() == 0:
		idle := c.srv.cfg.IdleAfter
		if d.fresh {
			idle = min(idle, freshIdleAfter)
		}
		dl := time.Now().Add(idle)
		if c.keepAlive() > 0 {
			dl = minTime(dl, c.keepAliveDeadline())
		}
		_ = c.nc.SetReadDeadline(dl)
	case c.keepAlive() > 0:
		_ = c.nc.SetReadDeadline(c.keepAliveDeadline())
	default:
		// Keepalive 0: no deadline once connected.
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	n, err := c.nc.Read(p)
	if n > 0 {
		c.readAt.Store(time.Now().UnixNano())
		d.fresh = d.fresh && !c.attached.Load()
	}
	if !c.attached.Load() && int(d.headN) < len(d.head) {
		d.headN += uint8(copy(d.head[d.headN:], p[:n]))
	}
	return n, err
}

// connectLevel returns the protocol level a CONNECT's first bytes announce, 0 if they
// do not say: the answer to a CONNECT that fails to decode depends on it.
func connectLevel(b []byte) byte {
	if len(b) < 2 || b[0] != 0x10 {
		return 0
	}
	i := 1
	for ; i < len(b) && i < 5 && b[i]&0x80 != 0; i++ {
	}
	i++ // past the last byte of the remaining length
	if i+2 > len(b) {
		return 0
	}
	n := int(b[i])<<8 | int(b[i+1])
	i += 2
	if i+n >= len(b) || string(b[i:i+n]) != "MQTT" {
		return 0
	}
	return b[i+n]
}

// errClosedByServer marks a close the server decided; the client was told why when
// its protocol version allows.
var errClosedByServer = errors.New("closed by server")

func (c *conn) readLoop() error {
	c.newReader()
	c.rd.connectBy = time.Now().Add(c.srv.cfg.ConnectTimeout)
	p, err := c.rd.pr.ReadPacket()
	if err != nil {
		return c.readError(err)
	}
	cp, ok := p.(*packet.Connect)
	if !ok {
		return fmt.Errorf("%w: first packet is %T, want CONNECT", errClosedByServer, p)
	}
	err = c.handleConnect(cp)
	packet.ReleaseConnect(cp)
	if err != nil {
		return err
	}
	c.ownFlush = false
	c.Flush() // the CONNACK, written by this reader itself (outbound.Queue.Flush)
	// Not parked yet: a client usually subscribes or publishes right after its
	// CONNACK, and a parked connection's first packet costs an epoll wake-up and a
	// new reader. It parks once it has been silent for freshIdleAfter, later for
	// IdleAfter as any connection.
	c.rd.fresh = true
	return c.serve()
}

// serve reads and handles packets until the connection ends or is parked.
func (c *conn) serve() error {
	for {
		p, err := c.rd.pr.ReadPacket()
		if err != nil {
			c.flushBatch()
			if c.idleTimeout(err) {
				if c.rd.pr.Buffered() == 0 && c.park() {
					return errParked
				}
				continue // mid-packet, or cannot park: read on
			}
			return c.readError(err)
		}
		if err := c.handle(p); err != nil {
			c.flushBatch()
			return err
		}
		// One wake-up per subscriber and one for our own acknowledgements per
		// read, not per packet.
		if !c.rd.pr.Ready() {
			c.flushBatch()
			if c.rd.in != nil {
				c.rd.in.batch.WaitStalled(outbound.MaxStall)
			}
		}
	}
}

// flushBatch wakes the writers of everything the packets read so far queued.
func (c *conn) flushBatch() {
	if c.rd.in != nil {
		c.rd.in.batch.Flush()
	}
	if c.ownFlush {
		c.ownFlush = false
		c.Flush()
	}
}

// readError turns a read failure into the close it causes, telling a v5 client why.
func (c *conn) readError(err error) error {
	var perr *packet.Error
	if errors.As(err, &perr) {
		if !c.attached.Load() {
			if c.version == 0 && connectLevel(c.rd.head[:c.rd.headN]) == packet.V5 {
				c.version = packet.V5 // a v5 client gets the reason code in CONNACK
			}
			if c.version == packet.V5 || perr.Reason == packet.UnsupportedProtocolVersion {
				c.connack(false, perr.Reason, nil)
			}
		} else {
			c.disconnect(perr.Reason, perr.Msg)
		}
		return fmt.Errorf("%w: %v", errClosedByServer, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if c.attached.Load() {
			c.disconnect(packet.KeepAliveTimeout, "keep alive timeout")
			return fmt.Errorf("%w: keepalive %v passed without a packet", errClosedByServer, c.keepAlive())
		}
		return fmt.Errorf("%w: no CONNECT within %v", errClosedByServer, c.srv.cfg.ConnectTimeout)
	}
	return err
}

func (c *conn) handleConnect(p *packet.Connect) error {
	c.version = p.ProtocolLevel
	c.rd.pr.SetVersion(c.version)
	v5 := c.version == packet.V5
	c.receiveMax = 65535
	c.problemInfo = true
	if v5 {
		if p.Props.HasReceiveMaximum {
			c.receiveMax = p.Props.ReceiveMaximum
		}
		if p.Props.HasMaximumPacketSize {
			c.maxPacket = p.Props.MaximumPacketSize
		}
		if p.Props.HasRequestProblemInfo {
			c.problemInfo = p.Props.RequestProblemInfo == 1
		}
		if n := min(int(p.Props.TopicAliasMaximum), c.srv.cfg.OutboundTopicAliases); p.Props.HasTopicAliasMaximum && n > 0 {
			c.rareFields().out = &outAliases{max: uint16(n)}
			c.aliasOut = true
		}
		if p.Props.AuthMethod != "" {
			c.connack(false, packet.BadAuthenticationMethod, nil)
			return fmt.Errorf("%w: enhanced authentication %q not supported", errClosedByServer, p.Props.AuthMethod)
		}
	}
	if c.srv.connected() >= c.srv.cfg.MaxConnections {
		c.connack(false, packet.ServerBusy, nil)
		return fmt.Errorf("%w: %d connections, the maximum", errClosedByServer, c.srv.cfg.MaxConnections)
	}
	clientID := p.ClientID // a copy (the decoder's)
	assigned := ""
	if clientID == "" {
		if c.version == packet.V31 || (c.version == packet.V311 && !p.CleanStart) {
			c.connack(false, packet.ClientIdentifierNotValid, nil)
			return fmt.Errorf("%w: empty client id", errClosedByServer)
		}
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		clientID = "tern-" + hex.EncodeToString(b)
		assigned = clientID
	}
	// Session expiry: v5 says; v3 clean sessions end at once and others never.
	var expiry time.Duration
	switch {
	case v5 && p.Props.HasSessionExpiry && p.Props.SessionExpiry == 0xFFFFFFFF:
		expiry = -1
	case v5 && p.Props.HasSessionExpiry:
		expiry = time.Duration(p.Props.SessionExpiry) * time.Second
	case !v5 && !p.CleanStart:
		expiry = -1
	}
	capped := false
	if max := c.srv.cfg.MaxSessionExpiry; max > 0 && (expiry < 0 || expiry > max) {
		expiry, capped = max, true
	}
	keepAlive := time.Duration(p.KeepAlive) * time.Second
	serverKeepAlive := false
	if max := c.srv.cfg.MaxKeepAlive; v5 && max > 0 && (keepAlive == 0 || keepAlive > max) {
		keepAlive, serverKeepAlive = max, true
	}
	c.keepAliveMS = uint32(keepAlive / time.Millisecond)
	if p.WillFlag {
		w, err := c.makeWill(p)
		if err != nil {
			c.connack(false, packet.TopicNameInvalid, nil)
			return fmt.Errorf("%w: will: %v", errClosedByServer, err)
		}
		c.rareFields().will = w
	}
	sess, err := c.srv.attach(c, clientID, p.CleanStart, expiry, func(present bool) {
		var props packet.Properties
		if v5 {
			props.ReceiveMaximum, props.HasReceiveMaximum = uint16(c.srv.cfg.ReceiveMaximum), true
			props.MaximumPacketSize, props.HasMaximumPacketSize = uint32(c.srv.cfg.MaxPacketSize), true
			if c.srv.cfg.TopicAliasMaximum > 0 {
				props.TopicAliasMaximum, props.HasTopicAliasMaximum = uint16(c.srv.cfg.TopicAliasMaximum), true
			}
			props.AssignedClientID = assigned
			if serverKeepAlive {
				props.ServerKeepAlive, props.HasServerKeepAlive = uint16(c.keepAlive()/time.Second), true
			}
			if capped {
				props.SessionExpiry, props.HasSessionExpiry = uint32(expiry/time.Second), true
			}
		}
		// Counted as connected before the client can see its CONNACK, so that a
		// connection it opens next meets the connection limit with this one in it.
		c.readAt.Store(time.Now().UnixNano())
		c.attached.Store(true)
		c.connack(present, packet.Success, &props)
	})
	if err != nil {
		c.connack(false, packet.ServerUnavailable, nil)
		return fmt.Errorf("%w: %v", errClosedByServer, err)
	}
	c.sessp.Store(sess)
	if c.srv.log.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug("mqtt client connected", "version", c.version, "clean", p.CleanStart, "keepalive", c.keepAlive())
	}
	sess.resume(time.Now())
	return nil
}

func (c *conn) makeWill(p *packet.Connect) (*will, error) {
	subj, err := AppendSubject(nil, p.WillTopic)
	if err != nil {
		return nil, err
	}
	w := &will{}
	w.msg.Subject = subj
	w.msg.Payload = append([]byte(nil), p.WillPayload...)
	w.msg.QoS = p.WillQoS
	w.msg.Retain = p.WillRetain
	if c.version == packet.V5 {
		w.msg.Header = appendPropsHeader(nil, &p.WillProps, time.Now())
		if p.WillProps.ResponseTopic != "" {
			if w.msg.Reply, err = AppendSubject(nil, p.WillProps.ResponseTopic); err != nil {
				return nil, err
			}
		}
		if p.WillProps.HasWillDelay {
			w.delay = time.Duration(p.WillProps.WillDelay) * time.Second
		}
	}
	return w, nil
}

// protocolError tells a v5 client why it is being disconnected and ends the read loop.
func (c *conn) protocolError(reason packet.ReasonCode, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	c.disconnect(reason, msg)
	return fmt.Errorf("%w: %s (%s)", errClosedByServer, msg, reason)
}

func (c *conn) handle(p packet.Packet) error {
	switch p := p.(type) {
	case *packet.Publish:
		return c.handlePublish(p)
	case *packet.Ack:
		return c.handleAck(p)
	case *packet.Subscribe:
		return c.handleSubscribe(p)
	case *packet.Unsubscribe:
		return c.handleUnsubscribe(p)
	case *packet.Pingreq:
		c.send(&packet.Pingresp{})
		return nil
	case *packet.Disconnect:
		return c.handleDisconnect(p)
	case *packet.Connect:
		return c.protocolError(packet.ProtocolError, "second CONNECT")
	case *packet.Auth:
		return c.protocolError(packet.ProtocolError, "AUTH without enhanced authentication")
	default:
		return c.protocolError(packet.ProtocolError, "unexpected %T from a client", p)
	}
}

func (c *conn) handlePublish(p *packet.Publish) error {
	c.inMsgs.Add(1)
	c.inBytes.Add(uint64(len(p.Payload)))
	topic := p.Topic
	if c.version == packet.V5 && p.Props.HasTopicAlias {
		a := p.Props.TopicAlias
		if a == 0 || int(a) > c.srv.cfg.TopicAliasMaximum {
			return c.protocolError(packet.TopicAliasInvalid, "topic alias %d out of 1..%d", a, c.srv.cfg.TopicAliasMaximum)
		}
		if topic != "" {
			r := c.rareFields()
			if r.aliases == nil {
				r.aliases = make(map[uint16]string)
			}
			r.aliases[a] = strings.Clone(topic)
		} else if c.rare != nil {
			topic = c.rare.aliases[a]
		}
		if topic == "" {
			return c.protocolError(packet.ProtocolError, "topic alias %d not set", a)
		}
	}
	if p.QoS == 2 {
		isNew, full := c.sess().receivedQoS2(p.PacketID, c.srv.cfg.ReceiveMaximum)
		if full {
			return c.protocolError(packet.ReceiveMaximumExceeded, "more than %d QoS 2 publishes unreleased", c.srv.cfg.ReceiveMaximum)
		}
		if !isNew {
			// A resend of a message already published: acknowledge, do not publish again.
			c.writeAck(packet.TypePubrec, p.PacketID, packet.Success)
			return nil
		}
	}
	reason := packet.Success
	if isReserved(topic) {
		reason = packet.NotAuthorized
	} else if err := c.publish(topic, p); err != nil {
		if c.version != packet.V5 {
			return fmt.Errorf("%w: publish to %q: %v", errClosedByServer, topic, err)
		}
		reason = packet.TopicNameInvalid
		if p.QoS == 0 {
			return c.protocolError(reason, "%v", err)
		}
	}
	switch p.QoS {
	case 1:
		c.writeAck(packet.TypePuback, p.PacketID, reason)
	case 2:
		if reason >= 0x80 {
			c.sess().released(p.PacketID) // a failed QoS 2 exchange ends at PUBREC
		}
		c.writeAck(packet.TypePubrec, p.PacketID, reason)
	}
	return nil
}

// publish hands a client's message to the broker (and the retained store).
func (c *conn) publish(topic string, p *packet.Publish) error {
	if c.rd.in == nil {
		c.rd.in = &inbound{}
		c.rd.in.pub.Origin = c.sess()
	}
	in := c.rd.in
	var err error
	if in.subj, err = AppendSubject(in.subj[:0], topic); err != nil {
		return err
	}
	m := &in.pub
	m.Subject = in.subj
	m.Payload = p.Payload
	m.QoS = p.QoS
	m.Retain = p.Retain
	m.Header = nil
	m.Reply = nil
	if c.version == packet.V5 {
		in.hdr = appendPropsHeader(in.hdr[:0], &p.Props, time.Now())
		if len(in.hdr) > 0 {
			m.Header = in.hdr
		}
		if p.Props.ResponseTopic != "" {
			if in.reply, err = AppendSubject(in.reply[:0], p.Props.ResponseTopic); err != nil {
				return fmt.Errorf("response topic: %w", err)
			}
			m.Reply = in.reply
		}
	}
	if p.Retain {
		c.srv.retained.set(m)
	}
	c.srv.broker.Publish(&in.batch, m)
	return nil
}

func (c *conn) handleAck(p *packet.Ack) error {
	now := time.Now()
	switch p.Type {
	case packet.TypePuback, packet.TypePubcomp:
		c.sess().acked(p.PacketID, now)
	case packet.TypePubrec:
		if !c.sess().pubrec(p.PacketID, p.Reason >= 0x80, now) && p.Reason < 0x80 {
			c.writeAck(packet.TypePubrel, p.PacketID, packet.PacketIdentifierNotFound)
			return nil
		}
		if p.Reason < 0x80 {
			c.writeAck(packet.TypePubrel, p.PacketID, packet.Success)
		}
	case packet.TypePubrel:
		reason := packet.Success
		if !c.sess().released(p.PacketID) {
			reason = packet.PacketIdentifierNotFound
		}
		c.writeAck(packet.TypePubcomp, p.PacketID, reason)
	}
	return nil
}

func (c *conn) handleSubscribe(p *packet.Subscribe) error {
	v5 := c.version == packet.V5
	var subID uint32
	if len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	reasons := make([]packet.ReasonCode, len(p.Subs))
	type retainWanted struct {
		e        *subEntry
		subjects []string
	}
	var wanted []retainWanted
	for i, s := range p.Subs {
		reasons[i] = packet.ReasonCode(min(s.QoS, 2))
		if v5 && s.NoLocal && strings.HasPrefix(s.Filter, "$share/") {
			return c.protocolError(packet.ProtocolError, "no local on shared subscription %q", s.Filter)
		}
		e, subjects, queue, err := newSubEntry(strings.Clone(s.Filter), s.QoS, s.NoLocal, s.RetainAsPublished, subID)
		if err != nil {
			reasons[i] = packet.TopicFilterInvalid
			if !v5 {
				reasons[i] = 0x80
			}
			continue
		}
		existed, err := c.sess().subscribe(e, subjects, queue)
		if err != nil {
			reasons[i] = packet.UnspecifiedError
			if !v5 {
				reasons[i] = 0x80
			}
			c.logger().Warn("subscribe failed", "filter", e.filter, "err", err)
			continue
		}
		if !e.shared && (s.RetainHandling == 0 || s.RetainHandling == 1 && !existed) {
			wanted = append(wanted, retainWanted{e, subjects})
		}
	}
	c.send(&packet.Suback{PacketID: p.PacketID, Reasons: reasons})
	now := time.Now()
	for _, w := range wanted {
		c.srv.retained.match(w.subjects, w.e.dollarGuard, now, func(rm *retainedMsg) {
			c.sess().deliverRetained(w.e, rm)
		})
	}
	c.Flush()
	return nil
}

func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) error {
	reasons := make([]packet.ReasonCode, len(p.Filters))
	for i, f := range p.Filters {
		if !c.sess().unsubscribe(f) {
			reasons[i] = packet.NoSubscriptionExisted
		}
	}
	c.send(&packet.Unsuback{PacketID: p.PacketID, Reasons: reasons})
	return nil
}

func (c *conn) handleDisconnect(p *packet.Disconnect) error {
	if c.version == packet.V5 && p.Props.HasSessionExpiry {
		c.sess().mu.Lock()
		was := c.sess().expiry
		c.sess().mu.Unlock()
		if was == 0 && p.Props.SessionExpiry != 0 {
			return c.protocolError(packet.ProtocolError, "session expiry set at DISCONNECT after 0 at CONNECT")
		}
		d := time.Duration(p.Props.SessionExpiry) * time.Second
		if p.Props.SessionExpiry == 0xFFFFFFFF {
			d = -1
		}
		if max := c.srv.cfg.MaxSessionExpiry; max > 0 && (d < 0 || d > max) {
			d = max
		}
		c.sess().setExpiry(d)
	}
	c.normalExit = p.Reason != packet.DisconnectWithWill
	return io.EOF
}

// ---------------------------------------------------------------------------------
// Writing: the connection's outbound.Queue buffers, writes, applies flow control and
// the slow-consumer policy; this part encodes MQTT packets into it.

// Socket implements outbound.Endpoint: a dormant connection gets its net.Conn back.
func (c *conn) Socket() (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.socketLocked(); err != nil {
		return nil, err
	}
	return c.nc, nil
}

// StopReading implements outbound.Endpoint: a read deadline in the past ends a
// reading reader, and a parked connection needs a reader to end.
func (c *conn) StopReading() {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc != nil {
		_ = nc.SetReadDeadline(time.Now())
	}
	c.unpark()
}

// AppendSlowGoodbye implements outbound.Endpoint: a v5 client learns why it is cut
// off (quota exceeded); a v3 client has no way to be told.
func (c *conn) AppendSlowGoodbye(b []byte, pending, limit int64) []byte {
	if c.version != packet.V5 || !c.attached.Load() {
		return b
	}
	d := &packet.Disconnect{Reason: packet.QuotaExceeded}
	if c.problemInfo {
		d.Props.ReasonString = fmt.Sprintf("slow consumer: %d pending bytes over the %d byte limit", pending, limit)
	}
	b, _ = packet.Append(b, d, c.version)
	return b
}

// WriterStopped implements outbound.WriterStopper: a parked connection whose writer
// has stopped gives up its Go socket.
func (c *conn) WriterStopped() {
	if c.parked.Load() {
		c.srv.poll.dehydrate(c)
	}
}

// send queues a control packet and wakes the writer.
func (c *conn) send(p packet.Packet) {
	if b, ok := c.q.Begin(); ok {
		b, _ = packet.Append(b, p, c.version)
		c.q.End(b)
	}
	c.Flush()
}

func (c *conn) connack(present bool, reason packet.ReasonCode, props *packet.Properties) {
	ca := &packet.Connack{SessionPresent: present, Reason: reason} // AppendConnack keeps it on the stack
	if c.version != packet.V5 {
		ca.Reason = packet.ReasonCode(packet.V3ConnackCode(reason))
	} else if props != nil {
		ca.Props = *props
	}
	version := c.version
	if version == 0 {
		version = packet.V311
	}
	// Sent when the reader is done with the CONNECT (readLoop), or by Finish when
	// the connection closes.
	if b, ok := c.q.Begin(); ok {
		c.q.End(packet.AppendConnack(b, ca, version))
	}
}

// writeAck queues PUBACK, PUBREC, PUBREL or PUBCOMP. Only the reader calls it; the
// writer is woken once the reader has handled what it read (flushBatch).
func (c *conn) writeAck(t packet.Type, pid uint16, reason packet.ReasonCode) {
	if b, ok := c.q.Begin(); ok {
		b, _ = packet.Append(b, &packet.Ack{Type: t, PacketID: pid, Reason: reason}, c.version)
		c.q.End(b)
	}
	c.ownFlush = true
}

// disconnect tells a v5 client why the server closes the connection, then closes it.
func (c *conn) disconnect(reason packet.ReasonCode, text string) {
	if c.version == packet.V5 && c.attached.Load() {
		d := &packet.Disconnect{Reason: reason}
		if c.problemInfo && text != "" {
			d.Props.ReasonString = text
		}
		c.send(d)
	}
	c.close(fmt.Errorf("%w: %s", errClosedByServer, reason))
}

// takenOver closes a connection whose client id connected again.
func (c *conn) takenOver() {
	c.disconnect(packet.SessionTakenOver, "another connection took over the session")
}

// deliverQoS0 writes a QoS 0 message straight to the outbound queue; it reports false
// when the message was not queued: the connection is closing, the client is too slow
// (the slow-consumer policy applied), or the message expired or is too large for it.
func (c *conn) deliverQoS0(m *broker.Message, retain bool, subIDs []uint32, expireAt int64) bool {
	b, ok := c.q.Reserve(len(m.Payload) + len(m.Subject) + len(m.Header) + len(m.Reply) + 16 + 5*len(subIDs))
	if !ok {
		return false
	}
	e := c.encoderLocked()
	e.topic = AppendTopic(e.topic[:0], m.Subject)
	reply := ""
	if len(m.Reply) > 0 {
		e.reply = AppendTopic(e.reply[:0], m.Reply)
		reply = bytesString(e.reply)
	}
	return c.appendPublishLocked(b, bytesString(e.topic), m.Payload, m.Header, reply, 0, retain, false, 0, subIDs, expireAt)
}

// encoder is the scratch a connection encodes deliveries with.
type encoder struct {
	pub          packet.Publish
	subIDs       []uint32
	topic, reply []byte
}

// encoderLocked returns the connection's, made on first use. The queue is locked.
func (c *conn) encoderLocked() *encoder {
	if c.enc == nil {
		c.enc = new(encoder)
	}
	return c.enc
}

// writeOut writes a QoS 1/2 message (or a retained QoS 0 one). The session counts it
// in flight, so the slow-consumer policy does not refuse it.
func (c *conn) writeOut(om *outMsg, dup bool) {
	b, ok := c.q.Begin()
	if !ok {
		return
	}
	if !c.appendPublishLocked(b, om.topic, om.payload, om.header, om.reply, om.qos, om.retain, dup, om.pid, om.subIDs, om.expireAt) && om.qos > 0 {
		// Expired or too large for the client: it counts as delivered.
		go c.sess().acked(om.pid, time.Now())
	}
}

// appendPublishLocked encodes a PUBLISH onto b, the queue's buffer from Begin or
// Reserve, and hands it back, which unlocks the queue. It reports false for a message
// that expired or exceeds the client's maximum packet size.
func (c *conn) appendPublishLocked(b []byte, topic string, payload, hdr []byte, reply string, qos byte, retain, dup bool, pid uint16, subIDs []uint32, expireAt int64) bool {
	e := c.encoderLocked()
	p := &e.pub
	ups := p.Props.UserProperties
	*p = packet.Publish{Dup: dup, QoS: qos, Retain: retain, Topic: topic, PacketID: pid, Payload: payload}
	if c.version == packet.V5 {
		p.Props.UserProperties = ups
		fillProps(&p.Props, hdr)
		p.Props.ResponseTopic = reply
		if len(subIDs) > 0 {
			// Copied: the encoder outlives the call, and keeping the caller's
			// slice would move its stack scratch to the heap.
			e.subIDs = append(e.subIDs[:0], subIDs...)
			p.Props.SubscriptionIDs = e.subIDs
		}
		if expireAt != 0 {
			left := expireAt - time.Now().UnixNano()
			if left <= 0 {
				c.q.Cancel()
				return false
			}
			p.Props.MessageExpiry = uint32((left + int64(time.Second) - 1) / int64(time.Second))
			p.Props.HasMessageExpiry = true
		}
	} else {
		p.Props.UserProperties = ups[:0]
	}
	// A topic alias is decided here and recorded only once the packet is committed:
	// the client learns an alias from the PUBLISH that carries it with its topic.
	var alias uint16
	known := false
	if c.aliasOut && topic != "" {
		alias, known = c.rare.out.lookup(topic)
		p.Props.TopicAlias, p.Props.HasTopicAlias = alias, true
		if known {
			p.Topic = ""
		}
	}
	if max := int(c.maxPacket); max > 0 && len(payload)+len(topic)+len(hdr)+len(reply)+5*len(subIDs)+64 > max && packet.Size(p, c.version) > max {
		c.q.CountDropped()
		return false
	}
	c.q.Commit(packet.AppendPublish(b, p, c.version), len(payload))
	if alias != 0 {
		c.rare.out.used(alias, topic, known)
	}
	return true
}

// dropScratch lets the delivery scratch go with the queue's buffers
// (outbound.Queue.Release); the queue's lock is held.
func (c *conn) dropScratch() { c.enc = nil }

// transport is what carries the connection: "tcp", or "ws" for MQTT over WebSocket.
func (c *conn) transport() string {
	if c.ws {
		return "ws"
	}
	return "tcp"
}

// InlineFlush implements outbound.InlineGate: a parked connection's output goes
// through a writer goroutine, whose end after an idle while is when the connection
// gives up its socket; written inline, each message would take the socket back and
// leave it held.
func (c *conn) InlineFlush() bool { return !c.parked.Load() }

// Flush wakes the writer, starting it if it is not running.
func (c *conn) Flush() { c.q.Flush() }

// close closes the connection's queue; its reader then ends and finish sends what is
// queued and closes the socket. A close the server decided lingers, so the client
// reads the reason it was given. Safe to call many times from any goroutine.
func (c *conn) close(reason error) {
	if errors.Is(reason, errClosedByServer) {
		c.q.CloseAfterGoodbye(reason)
	} else {
		c.q.Close(reason)
	}
}

// cleanup runs after both loops end: the will, and the session's fate.
func (c *conn) cleanup() {
	if sess := c.sess(); sess != nil {
		var w *will
		if !c.normalExit && c.rare != nil {
			w = c.rare.will
		}
		c.srv.detached(sess, c, w)
	}
	// Counted as connected until its session is detached, so that a connection
	// count of zero means every session is offline.
	c.srv.removeConn(c)
	reason := c.q.Reason()
	switch {
	case reason == nil, errors.Is(reason, io.EOF), errors.Is(reason, net.ErrClosed):
		if c.srv.log.Enabled(context.Background(), slog.LevelDebug) {
			c.logger().Debug("mqtt client disconnected")
		}
	case errors.Is(reason, errClosedByServer):
		c.logger().Info("mqtt client closed", "reason", reason)
	default:
		if c.srv.log.Enabled(context.Background(), slog.LevelDebug) {
			c.logger().Debug("mqtt client disconnected", "reason", reason)
		}
	}
}

// ConnInfo is a snapshot of one MQTT connection for monitoring.
type ConnInfo struct {
	ID                                 uint64
	ClientID, Remote                   string
	Version                            byte
	Start                              time.Time
	Subscriptions                      int
	InMsgs, InBytes, OutMsgs, OutBytes uint64
	Pending                            int    // bytes queued for the socket
	Dropped                            uint64 // QoS 0 deliveries refused as a slow consumer or too large
	SlowConsumer                       bool
	Inflight, Queued                   int // QoS 1/2 messages of its session
	Transport                          string
}

func (c *conn) snapshot() ConnInfo {
	out := c.q.Counters()
	ci := ConnInfo{ID: c.id, Remote: c.remote(), Start: c.srv.start.Add(time.Duration(c.startS) * time.Second),
		InMsgs: c.inMsgs.Load(), InBytes: c.inBytes.Load(), OutMsgs: out.OutMsgs, OutBytes: out.OutBytes,
		Dropped: out.Dropped, SlowConsumer: out.Slow, Transport: c.transport()}
	if s := c.sess(); s != nil {
		ci.ClientID, ci.Version = s.id, c.version
		s.mu.Lock()
		ci.Subscriptions, ci.Inflight, ci.Queued = len(s.subs), s.fl.inflightLen(), s.fl.queueLen()
		s.mu.Unlock()
	}
	ci.Pending = c.q.Pending()
	return ci
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
