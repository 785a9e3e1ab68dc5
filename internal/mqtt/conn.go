package mqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
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

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
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
	readAt atomic.Int64            // unix nanoseconds of the latest bytes from the client
	// link is what CONNECT negotiated, kept here for the session machine
	// (sm.ConnectOpts.Link), which writes it under the session's lock during
	// CONNECT. Afterwards the connection reads its settings (QoS 0 deliveries do
	// so without the session's lock: they reach the connection through a session
	// view stored after CONNECT); its table of topic aliases towards the client is
	// used under q's lock, where PUBLISH packets are encoded.
	link sm.Link

	// q is the outbound queue; its writer runs only while there is something to
	// send, and an idle connection lets its buffers go (Release).
	q   outbound.Queue
	enc *encoder   // delivery scratch, guarded by q's lock; made on first delivery
	mu  sync.Mutex // guards nc and the poller's view of the socket

	inMsgs, inBytes atomic.Uint64

	attached atomic.Bool // CONNECT accepted
	startS   uint32      // seconds since the server started
	slot     int32       // in Server.conns, guarded by the server's lock

	// Parking (idle_linux.go): parked is set while no goroutine reads; fd and the
	// flags are guarded by the poller's lock. A dormant connection is parked with
	// nc nil and fd a descriptor of its own.
	parked                       atomic.Bool
	fd                           int32
	pollAdded, pollGone, dormant bool
	// willRecorded: the connection's will is a record of the MQTT group
	// (wills.go), deleted when the connection ends. Set and read by its reader.
	willRecorded bool

	version  byte
	ownFlush bool // packets queued since the last flushBatch (reader)
	// counted: the connection counts against its session's account (the
	// session's sessionExtra.acct), until cleanup.
	counted bool
	ws      bool // MQTT over WebSocket
	tls     bool // over TLS (of the socket, or under the WebSocket)
}

func newConn(s *Server, id uint64, nc net.Conn) *conn {
	c := &conn{srv: s, id: id, nc: nc, startS: uint32(time.Since(s.start) / time.Second), fd: -1}
	if w, ok := nc.(*wsConn); ok {
		c.ws, c.tls = true, w.secure
	} else {
		_, c.tls = nc.(interface{ ConnectionState() tls.ConnectionState })
	}
	c.q.Init(s.groups[c.transport()], c)
	return c
}

// sess is the connection's session once its CONNECT is accepted, else nil.
func (c *conn) sess() *session { return c.sessp.Load() }

// remote is the client's address, asked of the socket rather than kept: idle
// connections are many.
func (c *conn) remote() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		// A dormant connection given its socket back after its peer went (reset,
		// or shut down by a close) has no remote address.
		if a := c.nc.RemoteAddr(); a != nil {
			return a.String()
		}
		return ""
	}
	return c.srv.poll.peerName(c)
}

// logger is built when something is logged, so that idle connections do not each
// hold a logger of their own.
func (c *conn) logger() *slog.Logger {
	l := c.srv.log.With("cid", c.id, "remote", c.remote())
	if c.attached.Load() {
		acct, id := splitKey(c.sess().id)
		l = l.With("client_id", id)
		if acct != "" {
			l = l.With("account", acct)
		}
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
func (c *conn) keepAlive() time.Duration { return c.link.KeepAlive }

// keepAliveDeadline is when the client's silence exceeds 1.5 times its keepalive.
func (c *conn) keepAliveDeadline() time.Time {
	return sm.KeepAliveDeadline(time.Unix(0, c.readAt.Load()), c.keepAlive())
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
	// readAt is when the last read returned bytes: the time of every event the
	// packets it brought feed the session (one clock read per read, not per packet).
	readAt time.Time
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
	var dl time.Time // zero: none (keepalive 0, once connected)
	switch {
	case !c.attached.Load():
		dl = d.connectBy
	// A WebSocket never parks, and its read deadline closes it when it passes
	// (websocket.NetConn): only the keepalive may set one. A TLS connection
	// parks as a plain one does: a read that times out has left nothing for its
	// reader in crypto/tls (which reads the socket only once it has handed over
	// every record it holds whole, and keeps the bytes of one begun so that the
	// rest, which wakes the poller, completes it) nor in the buffer under it
	// (tlsconf.BatchReads waits on the socket only once drained).
	case c.srv.poll != nil && !c.ws && d.pr.Buffered() == 0:
		idle := c.srv.cfg.IdleAfter
		if d.fresh {
			idle = min(idle, freshIdleAfter)
		}
		dl = time.Now().Add(idle)
		if c.keepAlive() > 0 {
			dl = minTime(dl, c.keepAliveDeadline())
		}
	case c.keepAlive() > 0:
		dl = c.keepAliveDeadline()
	}
	c.q.SetReaderDeadline(c.nc, dl)
	n, err := c.nc.Read(p)
	if n > 0 {
		d.readAt = time.Now()
		c.readAt.Store(d.readAt.UnixNano())
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
			return c.keepAliveExpired()
		}
		return fmt.Errorf("%w: no CONNECT within %v", errClosedByServer, c.srv.cfg.ConnectTimeout)
	}
	return err
}

func (c *conn) handleConnect(p *packet.Connect) error {
	c.version = p.ProtocolLevel
	c.rd.pr.SetVersion(c.version)
	v5 := c.version == packet.V5
	if v5 && p.Props.AuthMethod != "" {
		c.connack(false, packet.BadAuthenticationMethod, nil)
		return fmt.Errorf("%w: enhanced authentication %q not supported", errClosedByServer, p.Props.AuthMethod)
	}
	if c.srv.connected() >= c.srv.cfg.MaxConnections {
		c.connack(false, packet.ServerBusy, nil)
		return fmt.Errorf("%w: %d connections, the maximum", errClosedByServer, c.srv.cfg.MaxConnections)
	}
	clientID := p.ClientID // a copy (the decoder's)
	var opts sm.ConnectOpts
	if clientID == "" {
		if c.version == packet.V31 || (c.version == packet.V311 && !p.CleanStart) {
			c.connack(false, packet.ClientIdentifierNotValid, nil)
			return fmt.Errorf("%w: empty client id", errClosedByServer)
		}
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		clientID = "tern-" + hex.EncodeToString(b)
		opts.AssignedID = clientID
	}
	var acc *access
	var login *auth.Login
	key := clientID
	if c.srv.cfg.Auth != nil {
		l, err := c.authenticate(p)
		if err != nil {
			c.connack(false, refusal(err), nil)
			return fmt.Errorf("%w: %w", errClosedByServer, err)
		}
		login = l
		u := l.User()
		// The account's connections on this node: MQTT 5 says quota exceeded
		// (0x97), MQTT 3 server unavailable (3).
		if !u.Account.AcquireConnection() {
			c.connack(false, packet.QuotaExceeded, nil)
			return fmt.Errorf("%w: account %q has the maximum of %d connections", errClosedByServer, u.Account.Name, u.Account.Limits.MaxConnections)
		}
		counted := u.Account // the session's once it is bound, else released here
		defer func() { counted.ReleaseConnection() }()
		acc = newAccess(u, u.Name, c)
		if acc != nil {
			acc.login = l
		}
		key = sessionKey(u.Account, clientID)
		defer func() {
			if sess := c.sess(); sess != nil && counted != nil {
				c.counted = sess.countConnection(counted)
				if c.counted {
					counted = nil
				}
			}
		}()
	}
	if p.WillFlag {
		prefix := keyPrefix(key)
		w, err := c.makeWill(p, prefix)
		if err != nil {
			c.connack(false, packet.TopicNameInvalid, nil)
			return fmt.Errorf("%w: will: %w", errClosedByServer, err)
		}
		// A will the client could not publish itself is refused, as Mosquitto does.
		if !sm.MayPublish(p.WillTopic) || acc != nil && acc.restricted && !acc.perms.CanPublish(w.Msg.Subject[len(prefix):]) {
			c.connack(false, packet.NotAuthorized, nil)
			return fmt.Errorf("%w: will topic %q not allowed", errClosedByServer, p.WillTopic)
		}
		opts.Will = w
		if err := c.srv.recordWill(c, key, w, sessionExpiry(p)); err != nil {
			c.connack(false, packet.ServerUnavailable, nil)
			return fmt.Errorf("%w: %w", errClosedByServer, err)
		}
	}
	if err := c.srv.claimSession(key); err != nil {
		c.connack(false, packet.ServerUnavailable, nil)
		return fmt.Errorf("%w: %w", errClosedByServer, err)
	}
	sess, err := c.srv.attach(c, key, p, opts, acc)
	if err != nil {
		c.connack(false, packet.ServerUnavailable, nil)
		return fmt.Errorf("%w: %w", errClosedByServer, err)
	}
	c.sessp.Store(sess)
	if login != nil && c.srv.cfg.Auth.Stale(login) {
		// The users file was reloaded since the login: its checks found no
		// session bound to this connection.
		sess.recheckRights(c.srv.cfg.Auth)
	}
	if c.srv.log.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug("mqtt client connected", "version", c.version, "clean", p.CleanStart, "keepalive", c.keepAlive())
	}
	return nil
}

// sessionExpiry is the session expiry a CONNECT asks for (<0: never), before the
// server's cap.
func sessionExpiry(p *packet.Connect) time.Duration {
	switch {
	case p.ProtocolLevel != packet.V5:
		if p.CleanStart {
			return 0
		}
		return -1
	case !p.Props.HasSessionExpiry:
		return 0
	case p.Props.SessionExpiry == 0xFFFFFFFF:
		return -1
	}
	return time.Duration(p.Props.SessionExpiry) * time.Second
}

// makeWill makes the will of a CONNECT; its subjects are the account's of prefix
// ("" for the global account).
func (c *conn) makeWill(p *packet.Connect, prefix string) (*sm.Will, error) {
	subj, err := AppendSubject([]byte(prefix), p.WillTopic)
	if err != nil {
		return nil, err
	}
	w := &sm.Will{}
	w.Msg.Subject = subj
	w.Msg.Payload = append([]byte(nil), p.WillPayload...)
	w.Msg.QoS = p.WillQoS
	w.Msg.Retain = p.WillRetain
	if c.version == packet.V5 {
		w.Msg.Header = appendPropsHeader(nil, &p.WillProps, time.Now())
		if p.WillProps.ResponseTopic != "" {
			if w.Msg.Reply, err = AppendSubject([]byte(prefix), p.WillProps.ResponseTopic); err != nil {
				return nil, err
			}
		}
		if p.WillProps.HasWillDelay {
			w.Delay = time.Duration(p.WillProps.WillDelay) * time.Second
		}
	}
	return w, nil
}

// keepAliveExpired ends a connection whose client went silent for 1.5 times its
// keepalive: the session machine decides and tells a v5 client why.
func (c *conn) keepAliveExpired() error {
	sess := c.sess()
	var err error
	_ = sess.step(func(now time.Time) error {
		if sess.conn.Load() == c {
			sess.m.Heard(time.Unix(0, c.readAt.Load()))
			err = sess.m.Tick(now)
		}
		return nil
	})
	if err == nil { // taken over meanwhile, or the clocks disagree: the socket's deadline passed
		c.disconnect(packet.KeepAliveTimeout, "keep alive timeout")
		err = fmt.Errorf("keepalive %v passed without a packet", c.keepAlive())
	}
	return fmt.Errorf("%w: %w", errClosedByServer, err)
}

// errTakenOver ends the reader of a connection whose session another connection
// has taken: what its client still sends is not the session's any more.
var errTakenOver = fmt.Errorf("%w: session taken over", errClosedByServer)

// step feeds an event from c's client to its session, unless a newer connection
// has the session (c is being closed): its acknowledgements must not reach the
// newer client.
func (c *conn) step(event func(now time.Time) error) error {
	sess := c.sess()
	wrote, err := sess.stepAt(c.rd.readAt, func(now time.Time) error {
		if sess.conn.Load() != c {
			return errTakenOver
		}
		return event(now)
	})
	if wrote {
		c.ownFlush = true
	}
	return err
}

// closedBy turns a protocol error of the session machine, whose DISCONNECT is
// queued already, into the end of the read loop.
func closedBy(err error) error {
	return fmt.Errorf("%w: %w", errClosedByServer, err)
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
		return c.handlePing()
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
	sess := c.sess()
	// QoS 0 and 1 without a topic alias ask nothing of the session (sm.MayPublish):
	// the hot paths take no session lock.
	if p.QoS == 1 && !p.Props.HasTopicAlias {
		return c.publishQoS1(topic, p)
	}
	if p.QoS > 0 || p.Props.HasTopicAlias {
		publish := false
		err := c.step(func(now time.Time) error {
			var err error
			topic, publish, err = sess.m.Publish(now, p)
			return err
		})
		c.ownFlush = true
		if err != nil {
			return closedBy(err)
		}
		if !publish {
			return nil
		}
	} else if isReserved(topic) {
		return nil // not for clients to publish to; QoS 0 has no acknowledgement to say so
	}
	reason := packet.Success
	if err := c.publish(topic, p); err == errDenied {
		// QoS 0 has no acknowledgement to say so; an MQTT 3 PUBACK or PUBREC says
		// nothing: the message is dropped (as Mosquitto does).
		c.debugDenied("publish", topic)
		if p.QoS == 0 {
			return nil
		}
		reason = packet.NotAuthorized
	} else if err != nil {
		if c.version != packet.V5 {
			return fmt.Errorf("%w: publish to %q: %w", errClosedByServer, topic, err)
		}
		reason = packet.TopicNameInvalid
		if p.QoS == 0 {
			return c.protocolError(reason, "%v", err)
		}
	}
	if p.QoS > 0 && c.srv.state != nil {
		// p is the reader's, reused for the next packet: the acknowledgement
		// keeps copies of what it needs.
		acked := &packet.Publish{QoS: p.QoS, PacketID: p.PacketID}
		c.afterCommit(p, reason, func() {
			_, _ = sess.stepAt(time.Now(), func(time.Time) error {
				if sess.conn.Load() != c {
					return errTakenOver
				}
				sess.m.Published(acked, reason)
				return nil
			})
		})
		return nil
	}
	if p.QoS > 0 {
		return c.step(func(time.Time) error {
			sess.m.Published(p, reason)
			return nil
		})
	}
	return nil
}

// afterCommit, in a cluster that replicates MQTT state, acknowledges a QoS 1 or 2
// PUBLISH once the MQTT group has committed it (ack queues the PUBACK or PUBREC):
// from then on it is stored on a quorum of nodes for every persistent session it
// matches. A QoS 2 publish of a persistent session is marked received in the same
// entry. Acknowledgements keep the order of their PUBLISH packets, whatever the
// outcome: one that is refused waits its turn in the same queue.
func (c *conn) afterCommit(p *packet.Publish, reason packet.ReasonCode, ack func()) {
	done := func(err error) {
		if err != nil {
			c.close(fmt.Errorf("%w: publish not replicated: %w", errClosedByServer, err))
			return
		}
		ack()
		c.Flush()
	}
	if reason != packet.Success {
		c.srv.kv.enqueue(kvOp{done: done})
		return
	}
	var pid uint16
	if p.QoS == 2 && c.sess().persistent() {
		pid = p.PacketID
	}
	c.srv.proposePublish(&c.rd.in.pub, c.sess().id, c.sess().claimEpoch(), pid, done)
}

// publishQoS1 publishes a QoS 1 PUBLISH and queues its PUBACK.
func (c *conn) publishQoS1(topic string, p *packet.Publish) error {
	if c.sess().conn.Load() != c {
		return errTakenOver // as step would: a taken-over connection feeds nothing
	}
	reason := packet.NotAuthorized
	if sm.MayPublish(topic) {
		reason = packet.Success
		if err := c.publish(topic, p); err == errDenied {
			// MQTT 3 has no word for it: the PUBACK says nothing, the message is
			// dropped (as Mosquitto does).
			reason = packet.NotAuthorized
			c.debugDenied("publish", topic)
		} else if err != nil {
			if c.version != packet.V5 {
				return fmt.Errorf("%w: publish to %q: %w", errClosedByServer, topic, err)
			}
			reason = packet.TopicNameInvalid
		}
	}
	if c.srv.state != nil {
		pid := p.PacketID
		c.afterCommit(p, reason, func() {
			c.queuePacket(&packet.Ack{Type: packet.TypePuback, PacketID: pid, Reason: reason})
		})
		return nil
	}
	c.queuePacket(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID, Reason: reason})
	c.ownFlush = true
	return nil
}

// publish hands a client's message to the broker (and the retained store).
func (c *conn) publish(topic string, p *packet.Publish) error {
	if c.rd.in == nil {
		c.rd.in = &inbound{}
		c.rd.in.pub.Origin = c.sess()
	}
	in := c.rd.in
	// The subject inside the server: the account's prefix ("" for the global
	// account), then the topic's subject, which permissions are about.
	x := c.sess().x.Load()
	var a *access
	prefix := ""
	if x != nil {
		a, prefix = x.access.Load(), x.prefix
	}
	var err error
	if in.subj, err = AppendSubject(append(in.subj[:0], prefix...), topic); err != nil {
		return err
	}
	if !c.mayPublish(x, a, in.subj[len(prefix):]) {
		return errDenied
	}
	if a != nil && a.rate != nil {
		if d := a.rate.PublishDelay(time.Now()); d > 0 {
			c.flushBatch()
			time.Sleep(d) // the account's message rate: this client's reads wait
		}
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
			if in.reply, err = AppendSubject(append(in.reply[:0], prefix...), p.Props.ResponseTopic); err != nil {
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
	sess := c.sess()
	return c.step(func(now time.Time) error {
		sess.m.Ack(now, p)
		return nil
	})
}

func (c *conn) handleSubscribe(p *packet.Subscribe) error {
	var subID uint32
	if len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	sess := c.sess()
	var acc *access
	if x := sess.x.Load(); x != nil {
		acc = x.access.Load()
	}
	subs := make([]*sm.Sub, len(p.Subs))
	for i, s := range p.Subs {
		subs[i], _ = newSub(strings.Clone(s.Filter), s.QoS, s.NoLocal, s.RetainAsPublished, subID) // nil: invalid
		if e := subs[i]; e != nil && !c.srv.mayKeep(acc, e) {
			e.Denied = true
			c.debugDenied("subscription", s.Filter)
		}
	}
	c.ownFlush = true
	err := c.step(func(now time.Time) error {
		if x := sess.x.Load(); x != nil && x.access.Load() != acc {
			// A reload of the users file changed the session's rights since
			// the subscriptions were decided: decide them again.
			acc = x.access.Load()
			for _, e := range subs {
				if e != nil {
					e.Denied = !c.srv.mayKeep(acc, e)
				}
			}
		}
		sess.reserveSubs(subs) // the account's maximum
		err := sess.m.Subscribe(now, p, subs)
		sess.countSubsLocked(sess.m.SubCount())
		return err
	})
	if err != nil {
		return closedBy(err)
	}
	return nil
}

func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) error {
	sess := c.sess()
	c.ownFlush = true
	return c.step(func(now time.Time) error {
		sess.m.Unsubscribe(now, p)
		return nil
	})
}

func (c *conn) handlePing() error {
	sess := c.sess()
	c.ownFlush = true
	return c.step(func(now time.Time) error {
		sess.m.Ping(now)
		return nil
	})
}

func (c *conn) handleDisconnect(p *packet.Disconnect) error {
	sess := c.sess()
	c.ownFlush = true
	if err := c.step(func(now time.Time) error { return sess.m.ClientDisconnect(now, p) }); err != nil {
		return closedBy(err)
	}
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
	if c.link.ProblemInfo {
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

// writePacket queues a packet the session machine asked for, under the session's
// lock; whoever fed the event wakes the writer. It reports false for a PUBLISH that
// exceeds the client's maximum packet size.
func (c *conn) writePacket(p *sm.Packet) bool {
	switch p.Type {
	case packet.TypeConnack:
		c.connack(p.Connack.SessionPresent, p.Connack.Reason, &p.Connack.Props)
	case packet.TypePublish:
		return c.writeOut(p)
	case packet.TypePuback, packet.TypePubrec, packet.TypePubrel, packet.TypePubcomp:
		c.queuePacket(&packet.Ack{Type: p.Type, PacketID: p.PID, Reason: p.Reason})
	case packet.TypeSuback:
		c.queuePacket(&packet.Suback{PacketID: p.PID, Reasons: p.Reasons})
	case packet.TypeUnsuback:
		c.queuePacket(&packet.Unsuback{PacketID: p.PID, Reasons: p.Reasons})
	case packet.TypePingresp:
		c.queuePacket(&packet.Pingresp{})
	case packet.TypeDisconnect:
		d := &packet.Disconnect{Reason: p.Reason}
		d.Props.ReasonString = p.Text
		c.queuePacket(d)
	}
	return true
}

// queuePacket queues a control packet without waking the writer.
func (c *conn) queuePacket(p packet.Packet) {
	if b, ok := c.q.Begin(); ok {
		b, _ = packet.Append(b, p, c.version)
		c.q.End(b)
	}
}

// disconnect tells a v5 client why the server closes the connection, then closes it.
func (c *conn) disconnect(reason packet.ReasonCode, text string) {
	if c.version == packet.V5 && c.attached.Load() {
		d := &packet.Disconnect{Reason: reason}
		if c.link.ProblemInfo && text != "" {
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

// deliverQoS0 writes a QoS 0 message straight to the outbound queue, without the
// session's lock; v is the view of x it was routed by. It reports whether the message
// was queued (not when the connection is closing, the client is too slow — the
// slow-consumer policy applied —, or the message expired or is too large for it),
// and whether v was still the session's view under the queue's lock. When it was
// not, nothing is queued and the caller routes again: the session changes its view
// before it writes an UNSUBACK (or anything else) to the connection, so a message
// routed by a subscription that has gone is never written after the UNSUBACK.
//
// prefix is that of the session's account, which m's subject and reply lose.
func (c *conn) deliverQoS0(m *broker.Message, prefix string, retain bool, subIDs []uint32, expireAt int64, now time.Time, x *sessionExtra, v *routeView) (ok, current bool) {
	var left uint32
	if expireAt != 0 {
		if left, ok = sm.ExpiryLeft(expireAt, now); !ok {
			return false, true
		}
	}
	b, ok := c.q.Reserve(len(m.Payload) + len(m.Subject) + len(m.Header) + len(m.Reply) + 16 + 5*len(subIDs))
	if !ok {
		return false, true
	}
	if x.view.Load() != v {
		c.q.Cancel()
		return false, false
	}
	e := c.encoderLocked()
	e.topic = AppendTopic(e.topic[:0], external(m.Subject, prefix))
	reply := ""
	if r := externalReply(m.Reply, prefix); len(r) > 0 {
		e.reply = AppendTopic(e.reply[:0], r)
		reply = bytesString(e.reply)
	}
	return c.appendPublishLocked(b, bytesString(e.topic), m.Payload, m.Header, reply, 0, retain, false, 0, subIDs, expireAt != 0, left), true
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

// writeOut writes a PUBLISH of the session machine. The session counts it in
// flight, so the slow-consumer policy does not refuse it. It reports false for a
// message too large for the client.
func (c *conn) writeOut(p *sm.Packet) bool {
	b, ok := c.q.Begin()
	if !ok {
		return true // closing: the message stays in flight for the next connection
	}
	m := p.Msg
	return c.appendPublishLocked(b, m.Topic, m.Payload, m.Header, m.Reply, m.QoS, m.Retain, p.Dup, p.PID, m.SubIDs, m.ExpireAt != 0, p.ExpiryLeft)
}

// appendPublishLocked encodes a PUBLISH onto b, the queue's buffer from Begin or
// Reserve, and hands it back, which unlocks the queue. It reports false for a message
// that exceeds the client's maximum packet size. The queue's lock, held throughout,
// is what guards the encoder and the topic aliases: QoS 0 deliveries come here
// without the session's lock, the session's own packets with it.
func (c *conn) appendPublishLocked(b []byte, topic string, payload, hdr []byte, reply string, qos byte, retain, dup bool, pid uint16, subIDs []uint32, hasExpiry bool, expiryLeft uint32) bool {
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
		if hasExpiry {
			p.Props.MessageExpiry, p.Props.HasMessageExpiry = expiryLeft, true
		}
	} else {
		p.Props.UserProperties = ups[:0]
	}
	// A topic alias is decided here and recorded only once the packet is committed:
	// the client learns an alias from the PUBLISH that carries it with its topic.
	var alias uint16
	known := false
	if c.link.Aliases != nil && topic != "" {
		alias, known = c.link.Aliases.Lookup(topic)
		p.Props.TopicAlias, p.Props.HasTopicAlias = alias, true
		if known {
			p.Topic = ""
		}
	}
	if max := int(c.link.MaxPacket); max > 0 && len(payload)+len(topic)+len(hdr)+len(reply)+5*len(subIDs)+64 > max && packet.Size(p, c.version) > max {
		c.q.CountDropped()
		return false
	}
	b = packet.AppendPublish(b, p, c.version)
	if alias != 0 {
		c.link.Aliases.Used(alias, topic, known) // before Commit unlocks: in the order of the stream
	}
	c.q.Commit(b, len(payload))
	return true
}

// dropScratch lets the delivery scratch go with the queue's buffers
// (outbound.Queue.Release); the queue's lock is held.
func (c *conn) dropScratch() { c.enc = nil }

// transport is what carries the connection: "tcp", "ws" for MQTT over WebSocket,
// "tls" and "wss" for either over TLS.
func (c *conn) transport() string {
	switch {
	case c.ws && c.tls:
		return "wss"
	case c.ws:
		return "ws"
	case c.tls:
		return "tls"
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

// cleanup runs after both loops end: the session machine decides the will and the
// session's fate.
func (c *conn) cleanup() {
	if sess := c.sess(); sess != nil {
		sess.disconnected(c)
		c.srv.forgetWill(c, sess.id)
	}
	if c.counted {
		c.sess().releaseConnection()
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
	Account                            string // "" for the global account
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
		ci.Version = c.version
		ci.Account, ci.ClientID = splitKey(s.id)
		s.mu.Lock()
		ci.Subscriptions, ci.Inflight, ci.Queued = s.m.SubCount(), s.m.Inflight(), s.m.Queued()
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
