package native

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/auth"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/filter"
	"github.com/tern-mq/tern/internal/outbound"
	"github.com/tern-mq/tern/internal/subject"
	"github.com/tern-mq/tern/internal/wire"
)

const (
	readBufSize = 32 << 10
	// busyReadBuf is what the read buffer grows to when reads fill it: a busy
	// publisher then takes half the read calls (1→1 at 1 KiB: 610k → 780k msgs/s
	// on loopback), while most connections keep 32 KiB.
	busyReadBuf   = 64 << 10
	maxIdleBuffer = outbound.MaxIdleBuffer // a read buffer grown above this is released once drained
)

// Conn is one client connection speaking the native protocol, over TCP or a UDP
// session. Its outbound side is an outbound.Queue; Flush, Stall and Stuck make it a
// broker.Sink and broker.Staller.
type Conn struct {
	outbound.Queue

	srv       *Server
	id        uint64
	nc        net.Conn
	remote    string
	transport string // "tcp" or "udp"
	start     time.Time
	log       *slog.Logger

	// Set by the reader during the handshake (name under subsMu, for monitoring).
	name   string
	noEcho bool
	noResp bool
	// user is who the client authenticated as (nil without authentication), as
	// the users file in force defines it; perms checks its permissions (nil
	// without authentication), and follows user's when a reload changes them.
	// Both are set at CONNECT.
	user  atomic.Pointer[auth.User]
	perms *auth.Checker
	// authMu orders the reader's subscriptions with the checks a reload of the
	// users file makes (recheckLogin), so that no subscription escapes them;
	// login is what the client logged in with, under authMu.
	authMu sync.Mutex
	login  *auth.Login
	// acct is the client's account when it is not the global one: its subjects
	// are prefixed inside the server (auth.Account), in subjBuf and replyBuf. It
	// is the account at login, for its prefix: a reload that moves the user to
	// another account closes the connection. The account's imports and services
	// are read from user's, as the users file in force defines them.
	acct                       *auth.Account
	subjBuf, replyBuf, callBuf []byte
	// imports holds, by sid, the subscriptions to other accounts' exported
	// subjects that a subscription of acct's client reaches (under subsMu).
	imports map[uint64][]*broker.Subscription

	// Under srv.urlMu: the client asked for INFO updates (set once, by the reader,
	// at CONNECT), and the connect_urls generation it was last sent.
	infoUpdates bool
	urlGen      uint64

	// Owned by the reader goroutine.
	batch broker.Batch
	pub   broker.Message

	subsMu sync.Mutex
	subs   map[uint64]*broker.Subscription

	pingsOut atomic.Int32
	// connected is set once CONNECT is handled (INFO queued): only then is the
	// connection pinged, so that INFO is always the first frame it gets.
	connected atomic.Bool

	inMsgs, inBytes atomic.Uint64
}

func newConn(s *Server, id uint64, nc net.Conn, transport string) *Conn {
	c := &Conn{
		srv:       s,
		id:        id,
		nc:        nc,
		remote:    nc.RemoteAddr().String(),
		transport: transport,
		start:     time.Now(),
		subs:      make(map[uint64]*broker.Subscription),
	}
	c.log = s.log.With("cid", id, "remote", c.remote)
	c.pub.Origin = c
	c.Init(s.groups[transport], c)
	return c
}

// Socket implements outbound.Endpoint.
func (c *Conn) Socket() (net.Conn, error) { return c.nc, nil }

// StopReading implements outbound.Endpoint: a read deadline in the past ends the
// reader's Read.
func (c *Conn) StopReading() { _ = c.nc.SetReadDeadline(time.Now()) }

// AppendSlowGoodbye implements outbound.Endpoint.
func (c *Conn) AppendSlowGoodbye(b []byte, pending, limit int64) []byte {
	return wire.AppendErr(b, wire.CodeSlowConsumer, 0, fmt.Sprintf("pending bytes %d over the %d byte limit", pending, limit))
}

// run serves the connection until it closes. It returns after both goroutines end.
func (c *Conn) run() {
	err := c.readLoop()
	c.Close(err)
	c.Finish()
	c.cleanup()
}

// ---------------------------------------------------------------------------------
// Reading

func (c *Conn) readLoop() error {
	cfg := &c.srv.cfg
	maxBody := cfg.MaxPayload + 64<<10
	buf := make([]byte, readBufSize)
	filled := 0
	connected := false
	c.SetReaderDeadline(c.nc, time.Now().Add(cfg.ConnectTimeout))
	var f wire.Frame
	for {
		n, err := c.nc.Read(buf[filled:])
		full := filled+n == len(buf)
		filled += n
		off := 0
		for off < filled {
			k, derr := f.Decode(buf[off:filled], maxBody)
			if derr != nil {
				if errors.Is(derr, wire.ErrIncomplete) {
					break
				}
				code := wire.CodeProtocol
				if errors.Is(derr, wire.ErrTooLarge) {
					code = wire.CodeTooLarge
				}
				return c.fatal(code, derr.Error())
			}
			off += k
			if !connected {
				if f.Type != wire.TypeConnect {
					return c.fatal(wire.CodeConnectFirst, fmt.Sprintf("first frame is %s, want CONNECT", f.Type))
				}
				if ferr := c.handleConnect(&f); ferr != nil {
					return ferr
				}
				connected = true
				c.connected.Store(true)
				c.SetReaderDeadline(c.nc, time.Time{})
				continue
			}
			if ferr := c.handle(&f); ferr != nil {
				c.batch.Flush()
				return ferr
			}
		}
		c.batch.Flush()
		c.batch.WaitStalled(outbound.MaxStall)
		// Keep the unread tail at the front; grow for a frame bigger than the buffer.
		var grew bool
		buf, filled, grew = wire.KeepTail(buf, off, filled)
		switch {
		case grew:
		case full && len(buf) < busyReadBuf:
			buf = append(make([]byte, 0, busyReadBuf), buf[:filled]...)[:busyReadBuf]
		case len(buf) > maxIdleBuffer && filled < readBufSize:
			buf = append(make([]byte, 0, readBufSize), buf[:filled]...)[:readBufSize]
		}
		if err != nil {
			if !connected && isTimeout(err) {
				return c.fatal(wire.CodeConnectFirst, "no CONNECT within the connect timeout")
			}
			return err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errClosedByProtocol marks a close the server itself decided (an ERR was sent).
var errClosedByProtocol = errors.New("closed after fatal error")

// fatal queues an ERR and closes the connection; the ERR is sent before the socket
// closes, and the client gets time to read it (outbound.Queue.Finish).
func (c *Conn) fatal(code wire.Code, text string) error {
	c.log.Debug("closing connection", "code", code, "reason", text)
	c.Append(func(b []byte) []byte { return wire.AppendErr(b, code, 0, text) })
	err := fmt.Errorf("%w: %s: %s", errClosedByProtocol, code, text)
	c.CloseAfterGoodbye(err)
	return err
}

// enqueue queues a control frame (OK, ERR, PONG, INFO) and wakes the writer.
func (c *Conn) enqueue(appendFrame func([]byte) []byte) {
	if c.Append(appendFrame) {
		c.Flush()
	}
}

func (c *Conn) sendErr(code wire.Code, id uint64, text string) {
	c.enqueue(func(b []byte) []byte { return wire.AppendErr(b, code, id, text) })
}

func (c *Conn) ok(id uint64) {
	if id == 0 {
		return
	}
	if b, ok := c.Begin(); ok {
		c.End(wire.AppendOK(b, id))
		c.batch.Add(c)
	}
}

func (c *Conn) handleConnect(f *wire.Frame) error {
	cn, err := wire.ParseConnect(f.Payload)
	if err != nil {
		return c.fatal(wire.CodeProtocol, err.Error())
	}
	if cn.Version != wire.Version {
		return c.fatal(wire.CodeVersion, fmt.Sprintf("protocol version %d not supported (server speaks %d)", cn.Version, wire.Version))
	}
	if a := c.srv.cfg.Auth; a != nil {
		req := credentials(cn.Credentials)
		req.Protocol, req.Remote, req.Cert = "native", c.nc.RemoteAddr(), auth.PeerCert(c.nc)
		if c.transport == "udp" {
			req.Protocol = "udp"
		}
		l, aerr := a.Login(req)
		if aerr != nil {
			return c.fatal(wire.CodeAuth, aerr.Error())
		}
		u := l.User()
		if !u.Account.AcquireConnection() {
			return c.fatal(wire.CodeMaxConnections, fmt.Sprintf("account %q has the maximum of %d connections", u.Account.Name, u.Account.Limits.MaxConnections))
		}
		c.authMu.Lock()
		c.login = l
		c.user.Store(u)
		c.perms = u.Perms.NewChecker()
		if !u.Account.Global() {
			c.acct = u.Account
		}
		c.authMu.Unlock()
		// A reload between the login and now found no login to check here.
		if err := c.recheckLogin(a); err != nil {
			return err
		}
	}
	c.subsMu.Lock()
	c.name = cn.Name
	c.subsMu.Unlock()
	c.noEcho = cn.Flags&wire.ConnectNoEcho != 0
	c.noResp = cn.Flags&wire.ConnectNoResponders != 0
	s := c.srv
	s.urlMu.Lock()
	if s.cfg.ConnectURLs != nil && s.urlGen == 0 {
		s.readURLsLocked()
	}
	c.infoUpdates = cn.Flags&wire.ConnectInfoUpdates != 0
	c.sendInfoLocked()
	s.urlMu.Unlock()
	c.log.Debug("client connected", "name", c.name, "lang", cn.Lang, "version", cn.ClientVersion)
	return nil
}

// sendInfoLocked queues an INFO with the current connect_urls. srv.urlMu is held.
func (c *Conn) sendInfoLocked() {
	info := c.srv.info
	info.ClientID = c.id
	info.ConnectURLs = c.srv.urls
	c.urlGen = c.srv.urlGen
	c.enqueue(func(b []byte) []byte { return wire.AppendInfo(b, &info) })
}

func (c *Conn) handle(f *wire.Frame) error {
	switch f.Type {
	case wire.TypePub:
		c.handlePub(f)
	case wire.TypeSub:
		c.handleSub(f)
	case wire.TypeUnsub:
		c.handleUnsub(f)
	case wire.TypePing:
		if b, ok := c.Begin(); ok {
			c.End(wire.AppendPong(b))
			c.batch.Add(c)
		}
	case wire.TypePong:
		c.pingsOut.Store(0)
	case wire.TypeConnect:
		return c.fatal(wire.CodeConnectFirst, "second CONNECT on a connection")
	default:
		return c.fatal(wire.CodeProtocol, fmt.Sprintf("unexpected %s frame from a client", f.Type))
	}
	return nil
}

func (c *Conn) handlePub(f *wire.Frame) {
	if len(f.Payload) > c.srv.cfg.MaxPayload {
		c.sendErr(wire.CodeTooLarge, f.ID, fmt.Sprintf("payload of %d bytes exceeds the %d byte limit", len(f.Payload), c.srv.cfg.MaxPayload))
		return
	}
	if err := subject.ValidatePublish(f.Subject); err != nil {
		c.sendErr(wire.CodeBadSubject, f.ID, err.Error())
		return
	}
	if len(f.Reply) > 0 {
		if err := subject.ValidatePublish(f.Reply); err != nil {
			c.sendErr(wire.CodeBadSubject, f.ID, "reply: "+err.Error())
			return
		}
	}
	if len(f.Header) > 0 {
		if err := f.Header.Validate(); err != nil {
			c.sendErr(wire.CodeBadHeader, f.ID, err.Error())
			return
		}
	}
	if !c.mayPublish(f.Subject) {
		c.sendErr(wire.CodePermission, f.ID, fmt.Sprintf("publish to %q denied", f.Subject))
		return
	}
	u := c.user.Load()
	if u != nil && u.Account != nil && u.Account.Limits.MaxMsgRate > 0 {
		if d := u.Account.PublishDelay(time.Now()); d > 0 {
			time.Sleep(d) // the account's rate: this client's reads wait
		}
	}
	c.inMsgs.Add(1)
	c.inBytes.Add(uint64(len(f.Payload)))
	subj, reply := f.Subject, f.Reply
	var call bool // a request to another account's service
	if c.acct != nil {
		if sc, ok := u.Account.Service(subj); ok {
			call = true
			c.subjBuf = sc.AppendSubject(c.subjBuf[:0], subj)
			subj = c.subjBuf
			if len(reply) > 0 {
				// The exporter answers on a reply subject of its own, which the
				// router maps back to this client's.
				c.replyBuf = c.acct.AppendInternal(c.replyBuf[:0], reply)
				var err error
				if c.callBuf, err = c.srv.services.Call(c.callBuf[:0], sc, c.replyBuf, time.Now()); err != nil {
					c.sendErr(wire.CodeProtocol, f.ID, "service call: "+err.Error())
					return
				}
				reply = c.callBuf
			}
		} else {
			c.subjBuf = c.acct.AppendInternal(c.subjBuf[:0], subj)
			subj = c.subjBuf
			if len(reply) > 0 {
				c.replyBuf = c.acct.AppendInternal(c.replyBuf[:0], reply)
				reply = c.replyBuf
			}
		}
	}
	m := &c.pub
	m.Subject, m.Reply, m.Header, m.Payload = subj, reply, f.Header, f.Payload
	matched := c.srv.broker.Publish(&c.batch, m)
	if matched == 0 && len(reply) > 0 {
		if call {
			c.srv.services.Cancel(reply)
			reply = c.replyBuf // the no-responders status goes to the client's own reply subject
		}
		if c.noResp {
			c.srv.noResponders(&c.batch, reply)
		}
	}
	c.ok(f.ID)
}

// mayPublish checks the client's permissions; an unrestricted client is kept
// off the cluster's own subjects only (by its checker), a client without
// authentication off nothing.
func (c *Conn) mayPublish(subject []byte) bool {
	return c.perms == nil || c.perms.CanPublish(subject)
}

// credentials reads a CONNECT's credentials: "user:password", or a bearer token.
func credentials(b []byte) auth.Request {
	if len(b) == 0 {
		return auth.Request{}
	}
	if user, pw, ok := bytes.Cut(b, []byte(":")); ok {
		return auth.Request{Username: string(user), Password: pw}
	}
	return auth.Request{Token: b}
}

func (c *Conn) handleSub(f *wire.Frame) {
	cfg := &c.srv.cfg
	sub := &broker.Subscription{
		Sink:    c,
		SID:     f.SID,
		Subject: string(f.Subject),
		Queue:   string(f.Queue),
		NoEcho:  c.noEcho,
	}
	var imported []auth.ImportedSubscription
	if err := subject.ValidateFilter(f.Subject); err != nil {
		c.sendErr(wire.CodeBadSubject, f.ID, err.Error())
		return
	}
	// Decided and made under authMu: a reload's checks come before or after.
	c.authMu.Lock()
	defer c.authMu.Unlock()
	u := c.user.Load()
	if u != nil {
		ok, permit := c.subPermit(u, sub.Subject)
		if !ok {
			c.sendErr(wire.CodePermission, f.ID, fmt.Sprintf("subscription to %q denied", sub.Subject))
			return
		}
		sub.SetPermit(permit)
		if c.acct != nil {
			imported = u.Account.Imports(sub.Subject)
			sub.Subject = c.acct.Prefix() + sub.Subject
		}
	}
	if len(f.Filter) > 0 {
		flt, err := filter.Compile(string(f.Filter))
		if err != nil {
			c.sendErr(wire.CodeBadFilter, f.ID, err.Error())
			return
		}
		sub.Filter = flt
	}
	c.subsMu.Lock()
	if _, dup := c.subs[f.SID]; dup {
		c.subsMu.Unlock()
		c.sendErr(wire.CodeDuplicateSID, f.ID, fmt.Sprintf("subscription id %d is in use", f.SID))
		return
	}
	if cfg.MaxSubscriptions > 0 && len(c.subs) >= cfg.MaxSubscriptions {
		c.subsMu.Unlock()
		c.sendErr(wire.CodeMaxSubscriptions, f.ID, fmt.Sprintf("connection has the maximum of %d subscriptions", cfg.MaxSubscriptions))
		return
	}
	if u != nil && !u.Account.AcquireSubscriptions(1) {
		c.subsMu.Unlock()
		c.sendErr(wire.CodeMaxSubscriptions, f.ID, fmt.Sprintf("account %q has the maximum of %d subscriptions", u.Account.Name, u.Account.Limits.MaxSubscriptions))
		return
	}
	c.subs[f.SID] = sub
	c.subsMu.Unlock()
	if err := c.srv.broker.Subscribe(sub); err != nil {
		c.forget(f.SID, sub)
		code := wire.CodeBadSubject
		if errors.Is(err, broker.ErrBadQueue) {
			code = wire.CodeBadQueue
		}
		c.sendErr(code, f.ID, err.Error())
		return
	}
	if isubs := c.subscribeImports(sub, imported); len(isubs) > 0 {
		c.subsMu.Lock()
		if c.imports == nil {
			c.imports = make(map[uint64][]*broker.Subscription)
		}
		c.imports[f.SID] = isubs
		c.subsMu.Unlock()
	}
	c.ok(f.ID)
}

// subPermit decides a subscription of user u (the client's) to filter, in the
// client's terms: whether it is allowed, and the check (nil: none) each message
// it matches must pass.
func (c *Conn) subPermit(u *auth.User, filter string) (ok bool, permit func([]byte) bool) {
	ok, check := c.perms.CanSubscribe(filter)
	if !ok || !check {
		return ok, nil
	}
	checker, wildFirst := c.perms, auth.WildFirst(filter)
	if c.acct == nil {
		return true, func(s []byte) bool { return checker.MayReceive(s, wildFirst) }
	}
	if u.Perms.Unrestricted() {
		return true, nil // the account's own subjects: checked by the filter's prefix
	}
	prefix := c.acct.Prefix()
	return true, func(s []byte) bool {
		// A stream of the account delivers its messages under their subjects in
		// the account's terms already.
		if len(s) >= len(prefix) && string(s[:len(prefix)]) == prefix {
			s = s[len(prefix):]
		}
		return checker.MayReceive(s, wildFirst)
	}
}

// subscribeImports makes the subscriptions to other accounts' exported subjects
// that sub, a subscription of the client of an account, reaches.
func (c *Conn) subscribeImports(sub *broker.Subscription, imported []auth.ImportedSubscription) []*broker.Subscription {
	var out []*broker.Subscription
	for _, im := range imported {
		isub := &broker.Subscription{Sink: &importSink{c: c, im: im},
			SID: sub.SID, Subject: im.Filter, Queue: auth.ImportQueue(c.acct.Name, sub.Queue), Filter: sub.Filter}
		if err := c.srv.broker.Subscribe(isub); err != nil {
			c.log.Warn("import subscription", "filter", im.Filter, "err", err)
			continue
		}
		out = append(out, isub)
	}
	return out
}

// forget drops subscription sid (sub) and its imports from the connection's
// books and the account's count; it reports whether sub was still there.
func (c *Conn) forget(sid uint64, sub *broker.Subscription) (imports []*broker.Subscription, found bool) {
	c.subsMu.Lock()
	if c.subs[sid] == sub {
		delete(c.subs, sid)
		found = true
		imports = c.imports[sid]
		delete(c.imports, sid)
	}
	c.subsMu.Unlock()
	if u := c.user.Load(); found && u != nil {
		u.Account.ReleaseSubscriptions(1) // counted by name: the same across reloads
	}
	return imports, found
}

func (c *Conn) handleUnsub(f *wire.Frame) {
	c.subsMu.Lock()
	sub, found := c.subs[f.SID]
	c.subsMu.Unlock()
	if !found {
		c.sendErr(wire.CodeUnknownSID, f.ID, fmt.Sprintf("no subscription with id %d", f.SID))
		return
	}
	var err error
	if f.Max == 0 {
		imports, _ := c.forget(f.SID, sub)
		err = c.srv.broker.Unsubscribe(sub)
		for _, isub := range imports {
			_ = c.srv.broker.Unsubscribe(isub)
		}
	} else {
		err = c.srv.broker.AutoUnsubscribe(sub, sub.Delivered()+f.Max)
	}
	if err != nil {
		c.sendErr(wire.CodeInternal, f.ID, err.Error())
		return
	}
	c.ok(f.ID)
}

// ---------------------------------------------------------------------------------
// Delivering and writing

// Deliver implements broker.Sink: it appends a MSG frame to the outbound queue, which
// applies the slow-consumer policy when the pending bytes would exceed the limit.
func (c *Conn) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	subj, reply := m.Subject, m.Reply
	if c.acct != nil {
		subj, _ = c.acct.External(subj)
		reply, _ = c.acct.External(reply)
	}
	if c.perms != nil && len(reply) > 0 && c.perms.TracksRequests() {
		// In the client's names, as its answer will name it.
		c.perms.NoteRequest(reply, time.Now())
	}
	return c.deliver(sub.SID, subj, reply, m)
}

// deliver appends a MSG frame of m under subject and reply.
func (c *Conn) deliver(sid uint64, subject, reply []byte, m *broker.Message) bool {
	b, ok := c.Reserve(wire.MsgLen(sid, subject, reply, m.Header, m.Payload))
	if !ok {
		return false
	}
	c.Commit(wire.AppendMsg(b, sid, subject, reply, m.Header, m.Payload), len(m.Payload))
	return true
}

// importSink delivers another account's messages, on subjects the client's
// account imports, under the importer's names. Replies do not cross accounts.
type importSink struct {
	c  *Conn
	im auth.ImportedSubscription
}

func (s *importSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	var buf [256]byte
	return s.c.deliver(sub.SID, s.im.AppendLocal(buf[:0], m.Subject), nil, m)
}

func (s *importSink) Flush()                 { s.c.Flush() }
func (s *importSink) Stall() <-chan struct{} { return s.c.Stall() }
func (s *importSink) Stuck()                 { s.c.Stuck() }

// Removed implements broker.Remover: a subscription reached its UNSUB max.
func (c *Conn) Removed(sub *broker.Subscription) {
	imports, _ := c.forget(sub.SID, sub)
	for _, isub := range imports {
		_ = c.srv.broker.Unsubscribe(isub)
	}
}

// cleanup removes the connection's subscriptions after both loops have ended.
func (c *Conn) cleanup() {
	c.subsMu.Lock()
	subs, imports := c.subs, c.imports
	c.subs, c.imports = map[uint64]*broker.Subscription{}, nil
	c.subsMu.Unlock()
	for _, sub := range subs {
		_ = c.srv.broker.Unsubscribe(sub)
	}
	for _, isubs := range imports {
		for _, isub := range isubs {
			_ = c.srv.broker.Unsubscribe(isub)
		}
	}
	if u := c.user.Load(); u != nil {
		u.Account.ReleaseSubscriptions(len(subs))
		u.Account.ReleaseConnection()
	}
	c.srv.remove(c)
	reason := c.Reason()
	switch {
	case reason == nil, errors.Is(reason, io.EOF), errors.Is(reason, net.ErrClosed):
		c.log.Debug("client disconnected", "name", c.name)
	case errors.Is(reason, errClosedByProtocol):
		c.log.Info("client closed", "name", c.name, "reason", reason)
	default:
		c.log.Debug("client disconnected", "name", c.name, "reason", reason)
	}
}

// ping is called by the server's keepalive timer.
func (c *Conn) ping() {
	if !c.connected.Load() {
		return // connect_timeout bounds the wait for CONNECT
	}
	if n := c.pingsOut.Add(1); int(n) > c.srv.cfg.MaxPingsOut {
		c.sendErr(wire.CodeStale, 0, fmt.Sprintf("no answer to %d pings", n-1))
		c.CloseAfterGoodbye(errors.New("stale connection"))
		return
	}
	c.enqueue(wire.AppendPing)
}

// Info is a snapshot of the connection for monitoring.
type Info struct {
	ID                                 uint64
	Name, Remote, Transport            string
	Start                              time.Time
	Subscriptions                      int
	InMsgs, InBytes, OutMsgs, OutBytes uint64
	Pending                            int
	Dropped                            uint64
	SlowConsumer                       bool
}

// Snapshot returns the connection's counters.
func (c *Conn) Snapshot() Info {
	c.subsMu.Lock()
	nsubs, name := len(c.subs), c.name
	c.subsMu.Unlock()
	out := c.Counters()
	return Info{
		ID: c.id, Name: name, Remote: c.remote, Transport: c.transport, Start: c.start, Subscriptions: nsubs,
		InMsgs: c.inMsgs.Load(), InBytes: c.inBytes.Load(), OutMsgs: out.OutMsgs, OutBytes: out.OutBytes,
		Pending: c.Pending(), Dropped: out.Dropped, SlowConsumer: out.Slow,
	}
}
