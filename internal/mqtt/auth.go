package mqtt

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
)

// Authentication and permissions (docs/mqtt.md, "Authentication and permissions").
// With Config.Auth set, a CONNECT's user name and password (or a bearer token as
// the password, or the TLS client certificate) name a user of the users file, and
// the topics the client publishes to and the filters it subscribes to are checked as
// the subjects they map to.

// TokenUser is the user name that, like an empty one, says the password is a
// bearer token, unless the users file has a user of that name.
const TokenUser = "token"

// access is the user a session belongs to and that user's rights, with
// authentication on. It is immutable: a CONNECT replaces the session's. A session
// without one (sessionExtra.access nil) belongs to the anonymous user, and that
// user may do anything.
type access struct {
	// user is nil for a restored session whose user is no more: it may do nothing.
	user *auth.User
	name string // the user's, "" anonymous
	// perms decides subscriptions and deliveries; its CanPublish is for the reader
	// of conn only (nil for a restored session), and asked only when restricted.
	perms      *auth.Checker
	conn       *conn
	restricted bool
	// rate is the user's account when it has a message rate (the reader of conn
	// waits for it), else nil.
	rate *auth.Account
	// login is what conn's client logged in with, for the checks after each
	// reload of the users file (reload.go); nil for a session's access by its
	// owner's name alone (restored, or its client away).
	login *auth.Login
}

// newAccess returns the access of user u on c: nil when authentication is off or u
// is the anonymous user with every right.
func newAccess(u *auth.User, name string, c *conn) *access {
	if u == nil {
		return &access{name: name}
	}
	if u.Name == "" && u.Perms.Unrestricted() {
		return nil
	}
	a := &access{user: u, name: u.Name, perms: u.Perms.NewChecker(), conn: c, restricted: !u.Perms.Unrestricted()}
	if u.Account != nil && u.Account.Limits.MaxMsgRate > 0 {
		a.rate = u.Account
	}
	return a
}

// ownerName is the name of the user a session with access a belongs to.
func (a *access) ownerName() string {
	if a == nil {
		return ""
	}
	return a.name
}

// userOf is the user of access a, nil for the anonymous user with every right.
func (a *access) userOf() *auth.User {
	if a == nil {
		return nil
	}
	return a.user
}

// account is the account of the user of access a: nil for the anonymous user with
// every right (the global account) and for a user who is no more.
func (a *access) account() *auth.Account {
	if a == nil || a.user == nil {
		return nil
	}
	return a.user.Account
}

// subChecker returns the checker that decides subscriptions made with access a,
// nil when none need deciding (authentication off). a is nil for the anonymous
// user with every right, which only the cluster's own subjects are closed to.
func (s *Server) subChecker(a *access) *auth.Checker {
	switch {
	case s.cfg.Auth == nil:
		return nil
	case a == nil:
		return auth.OpenChecker
	}
	return a.perms // nil when the user is gone: nothing is allowed
}

// maySubscribe decides a subscription to the broker subject subj (a filter) with
// access a: whether it is allowed, and the check (nil: none) each message delivered
// to it must pass, for a filter that reaches subjects the user may not read.
func (s *Server) maySubscribe(a *access, subj string) (ok bool, permit func([]byte) bool) {
	ck := s.subChecker(a)
	if ck == nil {
		return true, nil
	}
	if a != nil && a.user == nil {
		return false, nil
	}
	if a == nil && !strings.HasPrefix(subj, "$") && !auth.WildFirst(subj) {
		return true, nil // open rights: only filters that reach "$" subjects need a look
	}
	ok, check := ck.CanSubscribe(subj)
	if !ok || !check {
		return ok, nil
	}
	wildFirst := auth.WildFirst(subj)
	return true, func(b []byte) bool { return ck.MayReceive(b, wildFirst) }
}

// mayKeep reports whether subscription e is allowed with access a: each of its
// broker subjects is (for a shared subscription, those of the filter after
// "$share/group/"), but for the parent level of a filter ending in "/#", which
// may be refused alone: "cmd/#" is allowed to a user who may subscribe to
// "cmd.>", and then does not deliver messages on "cmd" itself.
func (s *Server) mayKeep(a *access, e *sm.Sub) bool {
	for i, subj := range e.Subjects {
		if ok, _ := s.maySubscribe(a, subj); !ok && !isParentLevel(e, i) {
			return false
		}
	}
	return true
}

// isParentLevel reports whether e.Subjects[i] is the parent level a filter ending
// in "/#" also matches (FilterSubjects).
func isParentLevel(e *sm.Sub, i int) bool { return i == 0 && len(e.Subjects) == 2 }

// allowedSubjects returns the broker subjects of e that access a allows: all of
// them (e.Subjects itself) or, when the parent level of a "/#" filter is refused,
// the others.
func (s *Server) allowedSubjects(a *access, e *sm.Sub) []string {
	if len(e.Subjects) == 2 {
		if ok, _ := s.maySubscribe(a, e.Subjects[0]); !ok {
			return e.Subjects[1:]
		}
	}
	return e.Subjects
}

// mayReceive reports whether a message on subj may reach a session with access a
// (retained messages sent on subscribe, messages the cluster's MQTT group stored
// for it); dollarGuard: through a filter starting with a wildcard.
func (s *Server) mayReceive(a *access, subj []byte, dollarGuard bool) bool {
	ck := s.subChecker(a)
	if ck == nil {
		return true
	}
	if a != nil && a.user == nil {
		return false
	}
	return ck.MayReceive(subj, dollarGuard)
}

// mayRead reports whether a session with access a may receive a message on subj
// that its subscriptions matched without the broker's delivery checks (the cluster's
// MQTT group stores messages for persistent sessions by subject alone): it might
// subscribe to subj itself.
func (s *Server) mayRead(a *access, subj []byte) bool {
	ck := s.subChecker(a)
	if ck == nil {
		return true
	}
	if a != nil && a.user == nil {
		return false
	}
	ok, _ := ck.CanSubscribe(string(subj))
	return ok
}

// errDenied refuses a publish the client's permissions do not allow.
var errDenied = errors.New("publish denied")

// mayPublish checks a publish to subj (the account's name) by c's client, whose
// session has x (nil: none yet) and access a. Allocation-free: decisions are
// cached per subject by the connection's checker.
func (c *conn) mayPublish(x *sessionExtra, a *access, subj []byte) bool {
	if x == nil {
		return !auth.Reserved(subj)
	}
	if a == nil || !a.restricted {
		return !auth.Reserved(subj) // the cluster's and other accounts' subjects
	}
	// Another connection's rights: c has been taken over and is closing.
	return a.conn == c && a.perms.CanPublish(subj)
}

// authenticate checks a CONNECT's credentials. It runs on the connection's reader,
// which nothing else waits for: a slow password hash, or the pause after failed
// logins from the client's address, holds up this client only. The CONNECT's
// keepalive starts once it is accepted.
func (c *conn) authenticate(p *packet.Connect) (*auth.Login, error) {
	a := c.srv.cfg.Auth
	r := auth.Request{Protocol: "mqtt", Remote: c.nc.RemoteAddr()}
	if ws, ok := c.nc.(*wsConn); ok {
		r.Cert = ws.cert
	} else {
		r.Cert = auth.PeerCert(c.nc)
	}
	switch {
	case !p.HasPassword:
		r.Username = p.Username
	case p.Username == "", p.Username == TokenUser && a.UserNamed(TokenUser) == nil:
		r.Token = p.Password
	default:
		r.Username, r.Password = p.Username, p.Password
	}
	return a.Login(r)
}

// refusal is the CONNACK reason of a failed authentication.
func refusal(err error) packet.ReasonCode {
	if errors.Is(err, auth.ErrAnonymous) {
		return packet.NotAuthorized
	}
	return packet.BadUserNameOrPassword
}

// debugDenied logs a refused publish or subscription at debug level.
func (c *conn) debugDenied(what, topic string) {
	if c.srv.log.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug("mqtt "+what+" denied", "topic", topic)
	}
}
