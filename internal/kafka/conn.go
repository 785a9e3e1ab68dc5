package kafka

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/outbound"
)

// keepBody is the largest request buffer a connection keeps between requests; a
// larger one (a big produce) is let go once handled.
const keepBody = 1 << 20

// conn is one Kafka client connection. Its goroutine reads a request, handles it
// and queues the answer; requests are answered in the order they came, one at a
// time, as a Kafka broker does.
type conn struct {
	s      *Server
	id     uint64
	nc     net.Conn
	remote string
	start  time.Time
	tls    bool // came through a TLS listener (ServeTLS)
	q      outbound.Queue
	br     *bufio.Reader

	cid              atomic.Pointer[string]
	inMsgs, inBytes  atomic.Uint64
	outMsgs, outByte atomic.Uint64

	// Authentication (sasl.go): authed once the connection may make requests
	// other than SASL's; user is who it is (nil without an Authenticator), perms
	// checks its permissions (nil when unrestricted), rights caches its
	// permission decisions per topic (authz.go).
	authed bool
	sasl   *saslState
	user   *auth.User
	perms  *auth.Checker
	rights map[string]*topicRights
	// authLogin is what the client logged in with, for the checks after each reload
	// of the users file (recheckLogin), under authMu; reloaded is the user as a
	// reload redefined it, taken by the connection's goroutine before its next
	// request (applyReload).
	authMu    sync.Mutex
	authLogin *auth.Login
	reloaded  atomic.Pointer[auth.User]
	// acct is the user's account, "" for the global one (and without an
	// Authenticator); prefix is its subject prefix inside the server
	// ("$A.<account>.", "" for the global account). The connection sees the
	// account's topics and groups only. counted is the account whose connection
	// count this connection holds, released when it closes.
	acct, prefix string
	counted      *auth.Account

	body  []byte // the request being handled
	batch broker.Batch
	pipe  producePipe // produce requests in flight (pipeline.go)
	fetch fetchScratch
}

func newConn(s *Server, id uint64, nc net.Conn, secure bool) *conn {
	c := &conn{s: s, id: id, nc: nc, remote: nc.RemoteAddr().String(), start: time.Now(), tls: secure}
	c.q.Init(s.tgroups[c.transport()], c)
	return c
}

// transport is "tls" for a connection of a TLS listener, else "tcp".
func (c *conn) transport() string {
	if c.tls {
		return "tls"
	}
	return "tcp"
}

// tlsIndex is 1 for a TLS connection, else 0.
func (c *conn) tlsIndex() int {
	if c.tls {
		return 1
	}
	return 0
}

func (c *conn) clientID() string {
	if p := c.cid.Load(); p != nil {
		return *p
	}
	return ""
}

// Socket, StopReading and AppendSlowGoodbye make conn the queue's endpoint.
func (c *conn) Socket() (net.Conn, error) { return c.nc, nil }
func (c *conn) StopReading()              { _ = c.nc.SetReadDeadline(time.Now()) }
func (c *conn) AppendSlowGoodbye(b []byte, _, _ int64) []byte {
	return b // Kafka has no goodbye: the connection just closes
}

func (c *conn) run() {
	c.br = bufio.NewReaderSize(c.nc, 64<<10)
	defer func() {
		c.endPipe()
		c.q.Close(net.ErrClosed)
		c.q.Finish()
		c.s.remove(c)
		if c.counted != nil {
			c.counted.ReleaseConnection()
		}
	}()
	for {
		frame, err := c.readFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !c.q.Closed() {
				c.s.log.Debug("connection closed", "remote", c.remote, "client_id", c.clientID(), "err", err)
			}
			return
		}
		if err := c.handle(frame); err != nil {
			c.s.log.Info("closing connection", "remote", c.remote, "client_id", c.clientID(), "err", err)
			c.drainProduce() // the answers to the requests before this one go first
			c.q.Flush()
			return
		}
		c.trim()
		if c.br.Buffered() == 0 {
			c.q.Flush() // once per read: pipelined requests share a write
			c.readAhead()
		}
		if !c.waitWritten() {
			return
		}
	}
}

// trim lets go of buffers a big request or answer grew; the answer is queued by
// now.
func (c *conn) trim() {
	if cap(c.body) > keepBody {
		c.body = nil
	}
	if cap(c.fetch.buf) > 8*keepBody {
		c.fetch.buf = nil
	}
	if cap(c.fetch.ahead.buf) > 8*keepBody && !c.fetch.ahead.present {
		c.fetch.ahead.buf = nil
	}
}

// waitWritten holds the reader while the answers queued are more than the
// outbound limit allows, so that a client that does not read cannot make the
// server buffer without end. It reports false when the connection should close.
func (c *conn) waitWritten() bool {
	if c.q.Pending() <= int(c.s.cfg.MaxPending) {
		return true
	}
	c.q.Flush()
	deadline := time.NewTimer(c.s.cfg.WriteTimeout)
	defer deadline.Stop()
	for c.q.Pending() > int(c.s.cfg.MaxPending)/2 {
		ch := c.q.Stall()
		if ch == nil {
			return !c.q.Closed()
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
	return true
}

// errTooLarge and errBadFrame close the connection, as Kafka does.
var (
	errTooLarge = errors.New("request larger than the limit")
	errBadFrame = errors.New("malformed request")
)

// readFrame reads one size-prefixed request into c.body.
func (c *conn) readFrame() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		return nil, err
	}
	size := int(int32(binary.BigEndian.Uint32(hdr[:])))
	raw := c.sasl != nil && c.sasl.raw  // a bare SASL token (sasl.go)
	if size < 8 && (!raw || size < 0) { // api key, version, correlation id
		return nil, fmt.Errorf("%w: size %d", errBadFrame, size)
	}
	if size > c.s.cfg.MaxRequestSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, size, c.s.cfg.MaxRequestSize)
	}
	if raw && size > maxSASLToken {
		return nil, fmt.Errorf("%w: SASL token of %d bytes, limit %d", errTooLarge, size, maxSASLToken)
	}
	if size > maxOtherRequest {
		key, err := c.br.Peek(2)
		if err != nil {
			return nil, err
		}
		if k := int16(binary.BigEndian.Uint16(key)); k != 0 {
			return nil, fmt.Errorf("%w: %d bytes for %s, limit %d", errTooLarge, size, kmsg.NameForKey(k), maxOtherRequest)
		}
	}
	if cap(c.body) < size {
		c.body = make([]byte, size)
	}
	c.body = c.body[:size]
	if _, err := io.ReadFull(c.br, c.body); err != nil {
		return nil, err
	}
	return c.body, nil
}

// handle decodes and answers one request. An error closes the connection.
func (c *conn) handle(frame []byte) error {
	if c.sasl != nil && c.sasl.raw {
		c.drainProduce()
		return c.rawToken(frame)
	}
	r := kbin.Reader{Src: frame}
	key, version, corr := r.Int16(), r.Int16(), r.Int32()
	cid := r.NullableString()
	if !r.Ok() {
		return fmt.Errorf("%w: request header", errBadFrame)
	}
	if key != produceKey {
		c.drainProduce() // its answer goes after theirs
	}
	if c.reloaded.Load() != nil {
		c.applyReload()
	}
	if err := c.gate(key); err != nil {
		return err
	}
	if cid != nil && *cid != c.clientID() {
		c.cid.Store(cid)
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		// An API nobody knows: its answer's layout is unknown too, so it is just
		// the error code, which is how every v0 answer that has one starts.
		c.sendRaw(corr, kbin.AppendInt16(nil, kerr.UnsupportedVersion.Code))
		return nil
	}
	req.SetVersion(version)
	if !supported(key, version) {
		c.drainProduce()
		c.s.log.Debug("unsupported request", "api", kmsg.NameForKey(key), "version", version, "remote", c.remote)
		c.send(corr, unsupported(req))
		return nil
	}
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
		if !r.Ok() {
			return fmt.Errorf("%w: request header tags", errBadFrame)
		}
	}
	if err := decode(req, r.Src); err != nil {
		return fmt.Errorf("%w: %s v%d: %w", errBadFrame, kmsg.NameForKey(key), version, err)
	}
	if pr, ok := req.(*kmsg.ProduceRequest); ok {
		return c.produceRequest(corr, pr) // answered in order by the answerer
	}
	// An answer with an error is sent before the connection closes (a failed
	// login's).
	resp, err := c.dispatch(req)
	if fr, ok := resp.(*kmsg.FetchResponse); ok {
		c.sendFetch(corr, fr)
	} else if resp != nil {
		c.send(corr, resp)
	}
	return err
}

// decode reads a request's body. The decoder is generated code outside Tern: should
// some input make it panic, that input closes its connection and nothing else.
func decode(req kmsg.Request, body []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panic: %v", p)
		}
	}()
	return req.ReadFrom(body)
}

// send queues resp as the answer to request corr.
func (c *conn) send(corr int32, resp kmsg.Response) {
	b, ok := c.q.Begin()
	if !ok {
		return
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	// ApiVersions answers keep the v0 header whatever their version, so that a
	// client can read one to a version it sent in vain (KIP-511).
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		b = append(b, 0) // no tagged fields
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	c.q.End(b)
}

// sendRaw queues an answer whose body is given.
func (c *conn) sendRaw(corr int32, body []byte) {
	b, ok := c.q.Begin()
	if !ok {
		return
	}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = append(b, body...)
	c.q.End(b)
}

// unsupported is the answer to a request of an API or version this server does
// not serve: ApiVersions answers at v0 with the versions it does serve (KIP-511);
// any other gets its answer at the version asked (or kmsg's newest) with
// UNSUPPORTED_VERSION in its top-level error code, where it has one.
func unsupported(req kmsg.Request) kmsg.Response {
	if req.Key() == apiVersionsKey {
		resp := apiVersionsResponse(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	}
	resp := req.ResponseKind()
	resp.SetVersion(min(max(req.GetVersion(), 0), resp.MaxVersion()))
	// Off the data path, for any API: reflection finds the field.
	if f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode"); f.IsValid() && f.CanSet() && f.Kind() == reflect.Int16 {
		f.SetInt(int64(kerr.UnsupportedVersion.Code))
	}
	return resp
}
