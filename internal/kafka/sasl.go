package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/auth"
)

// Authentication. A connection authenticates with SASL (SaslHandshake, then
// SaslAuthenticate, as Kafka brokers on SASL_PLAINTEXT and SASL_SSL listeners
// take it) with PLAIN or SCRAM-SHA-256/512, checked by the server's
// Authenticator; until it has, it may send only ApiVersions and those two, and
// anything else closes it. A connection that sends another request without
// having started SASL is anonymous: it is let in when the Authenticator accepts
// an anonymous client from its address (the anonymous policy), else closed. A
// failed login is answered SASL_AUTHENTICATION_FAILED and the connection closes
// after the answer, as Kafka's does. Sessions do not expire (no KIP-368
// re-authentication: session_lifetime_ms is 0).

const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
	mechPlain           = "PLAIN"
	// maxSASLToken bounds a bare SASL token (after a v0 handshake).
	maxSASLToken = 64 << 10
)

// saslMechanisms are the mechanisms SaslHandshake offers.
var saslMechanisms = append([]string{mechPlain}, auth.SCRAMMechanisms...)

// saslState is a connection's SASL exchange in progress.
type saslState struct {
	mech string
	// raw is set after a v0 handshake: the exchange's tokens follow as bare
	// size-prefixed frames, not in SaslAuthenticate requests.
	raw   bool
	scram *auth.SCRAMLogin
}

// errAuth closes a connection whose authentication failed or broke the rules.
var errAuth = errors.New("authentication")

// gate decides a request of API key before it is handled: it returns an error
// (closing the connection) when the request is not allowed before
// authentication, and lets an anonymous connection in at its first request that
// is not part of SASL.
func (c *conn) gate(key int16) error {
	if c.authed || key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey {
		return nil
	}
	if c.sasl != nil {
		return fmt.Errorf("%w: %s request during the SASL exchange", errAuth, kmsg.NameForKey(key))
	}
	a := c.s.cfg.Auth
	if a == nil {
		c.authed = true
		return nil
	}
	l, err := a.Login(auth.Request{Protocol: "kafka", Remote: c.nc.RemoteAddr(), Cert: auth.PeerCert(c.nc)})
	if err != nil {
		return fmt.Errorf("%w: %s request without SASL authentication: %w", errAuth, kmsg.NameForKey(key), err)
	}
	if err := c.login(l); err != nil {
		return fmt.Errorf("%w: %w", errAuth, err)
	}
	return nil
}

// login makes l's user the connection's user, in its account, and counts the
// connection against the account's max_connections. Past the maximum it refuses
// the login: a SASL client is answered SASL_AUTHENTICATION_FAILED with the
// reason, then the connection closes (Kafka has no other way to refuse a
// connection with a message); an anonymous or v0-SASL one is closed. A login
// that a reload of the users file made during the exchange no longer admits
// is refused so too.
func (c *conn) login(l *auth.Login) error {
	u := l.User()
	if !u.Account.AcquireConnection() {
		c.s.log.Warn("connection refused: account limit reached", "remote", c.remote, "user", u.Name,
			"account", u.Account.Name, "max_connections", u.Account.Limits.MaxConnections)
		return fmt.Errorf("account %q has the maximum of %d connections", u.Account.Name, u.Account.Limits.MaxConnections)
	}
	c.counted = u.Account
	c.authed, c.user, c.sasl = true, u, nil
	if !u.Perms.Unrestricted() {
		c.perms = u.Perms.NewChecker()
	}
	if !u.Account.Global() {
		c.acct, c.prefix = u.Account.Name, u.Account.Prefix()
	}
	if u.Name != "" {
		c.s.log.Debug("authenticated", "remote", c.remote, "user", u.Name, "account", acctAttr(c.acct))
	}
	c.authMu.Lock()
	c.authLogin = l
	c.authMu.Unlock()
	// A reload between the login and now found no login to check here.
	if a := c.s.cfg.Auth; a.Stale(l) {
		if err := c.recheckLogin(a); err != nil {
			return err
		}
		c.applyReload()
	}
	return nil
}

// usersReloaded checks every connection's login after a reload of the users
// file. A login that no longer holds (its user removed, its password or SCRAM
// credentials changed, its user moved to another account) closes the
// connection: Kafka has no way to tell a client why. Otherwise the user's new
// rights apply from the connection's next request (every request is decided
// by its user's permissions).
func (s *Server) usersReloaded() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if err := c.recheckLogin(s.cfg.Auth); err != nil {
			c.q.Close(fmt.Errorf("%w: %w", errAuth, err))
		}
	}
}

// recheckLogin checks the connection's login against the users file in force:
// it returns the error that closes the connection when the login no longer
// holds, and otherwise leaves the user as the file now defines it for
// applyReload. Nothing to do before a login, or when the file has not changed
// since the last check.
func (c *conn) recheckLogin(a *auth.Authenticator) error {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	l := c.authLogin
	if l == nil {
		return nil
	}
	nl, err := a.Recheck(l)
	if err != nil {
		c.authLogin = nil
		return err
	}
	if nl != l {
		c.authLogin = nl
		c.reloaded.Store(nl.User())
	}
	return nil
}

// applyReload gives the connection the rights of its user as a reload of the
// users file redefined it. Its account is the same (a reload that moves the
// user closes the connection). Called by the connection's goroutine.
func (c *conn) applyReload() {
	u := c.reloaded.Swap(nil)
	if u == nil {
		return
	}
	c.user, c.rights = u, nil
	switch {
	case u.Perms.Unrestricted():
		c.perms = nil
	case c.perms != nil:
		c.perms.Update(u.Perms)
	default:
		c.perms = u.Perms.NewChecker()
	}
}

func (c *conn) saslHandshake(req *kmsg.SASLHandshakeRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.Version = req.Version
	resp.SupportedMechanisms = saslMechanisms
	switch {
	case c.s.cfg.Auth == nil:
		resp.ErrorCode, resp.SupportedMechanisms = kerr.IllegalSaslState.Code, nil
		return resp, nil
	case c.authed:
		// Kafka answers a handshake after authentication so, and goes on.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp, nil
	case c.sasl != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp, fmt.Errorf("%w: a second SASL handshake", errAuth)
	}
	st := &saslState{mech: req.Mechanism, raw: req.Version == 0}
	switch req.Mechanism {
	case mechPlain:
	case auth.SCRAMSHA256, auth.SCRAMSHA512:
		l, err := c.s.cfg.Auth.NewSCRAMLogin(req.Mechanism, "kafka", c.nc.RemoteAddr())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errAuth, err)
		}
		st.scram = l
	default:
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp, fmt.Errorf("%w: SASL mechanism %q not supported", errAuth, req.Mechanism)
	}
	c.sasl = st
	return resp, nil
}

func (c *conn) saslAuthenticate(req *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = req.Version
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		c.sasl = nil
		return resp, fmt.Errorf("%w: %s", errAuth, msg)
	}
	switch {
	case c.s.cfg.Auth == nil:
		return fail(kerr.IllegalSaslState.Code, "SASL is not enabled")
	case c.authed:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "already authenticated"
		resp.ErrorMessage = &msg
		return resp, nil
	case c.sasl == nil || c.sasl.raw:
		return fail(kerr.IllegalSaslState.Code, "SaslAuthenticate without a SaslHandshake (v1) first")
	}
	out, err := c.saslStep(req.SASLAuthBytes)
	if err != nil {
		return fail(kerr.SaslAuthenticationFailed.Code, err.Error())
	}
	resp.SASLAuthBytes = out
	return resp, nil
}

// saslStep takes the client's next token and returns the answer's. An error is
// the authentication's failure, to tell the client before closing.
func (c *conn) saslStep(token []byte) ([]byte, error) {
	st := c.sasl
	mech := st.mech
	failed := func() error {
		return fmt.Errorf("authentication failed: invalid credentials with SASL mechanism %s", mech)
	}
	if st.scram == nil { // PLAIN: authzid NUL authcid NUL password (RFC 4616)
		authz, rest, ok1 := bytes.Cut(token, []byte{0})
		user, pw, ok2 := bytes.Cut(rest, []byte{0})
		if !ok1 || !ok2 || len(user) == 0 {
			return nil, errors.New("authentication failed: malformed PLAIN token (want authzid NUL user NUL password)")
		}
		if len(authz) > 0 && !bytes.Equal(authz, user) {
			return nil, errors.New("authentication failed: the authorization id differs from the user name")
		}
		l, err := c.s.cfg.Auth.Login(auth.Request{Protocol: "kafka", Remote: c.nc.RemoteAddr(),
			Username: string(user), Password: pw, Cert: auth.PeerCert(c.nc)})
		if err != nil {
			return nil, failed()
		}
		if err := c.login(l); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	out, err := st.scram.Step(token)
	if err != nil {
		return nil, failed()
	}
	if st.scram.Done() {
		if err := c.login(st.scram.Login()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rawToken handles a bare SASL token, after a v0 handshake: the answer is a bare
// size-prefixed token too (empty for PLAIN's success); a failure closes the
// connection without one, as Kafka does.
func (c *conn) rawToken(token []byte) error {
	out, err := c.saslStep(token)
	if err != nil {
		c.sasl = nil
		return fmt.Errorf("%w: %w", errAuth, err)
	}
	b, ok := c.q.Begin()
	if !ok {
		return nil
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(out)))
	b = append(b, out...)
	c.q.End(b)
	return nil
}
