package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Sentinel errors; a protocol adapter answers all of them with its protocol's
// authentication error and, like the server's logs, never says which applied.
var (
	// ErrDenied: the credentials are wrong, or name no user.
	ErrDenied = errors.New("authentication failed")
	// ErrAnonymous: no credentials, and anonymous clients are not accepted from
	// this address.
	ErrAnonymous = errors.New("anonymous access refused")
)

// Anonymous access policies.
const (
	AnonymousLoopback = "loopback" // from 127.0.0.0/8 and ::1 only
	AnonymousAll      = "all"
	AnonymousNone     = "none"
)

// User is an authenticated client's identity and rights. Users are immutable;
// a reload of the users file makes new ones, which Recheck gives the
// connections already open.
type User struct {
	// Name is the user's name, "" for an anonymous client.
	Name string
	// Perms are the user's permissions, nil when unrestricted.
	Perms *Permissions
	// Account is the user's subject space; nil or the global account's for
	// users of no account.
	Account *Account
	// Admin users may manage streams, consumers and the cluster (publish to
	// "$TERN.API.>", Kafka admin requests); Monitor users may read the monitoring
	// endpoints.
	Admin, Monitor bool
}

// unrestricted is the anonymous user without a users file's anonymous_user.
var unrestricted = &User{Admin: true, Monitor: true}

// MayManage reports whether u may make a management request on the API subject
// (a "$TERN.API." subject).
func (u *User) MayManage(apiSubject string) bool {
	return u.Perms == nil || u.Perms.canPublish([]byte(apiSubject))
}

// Request is what a client presented to authenticate.
type Request struct {
	// Protocol names the listener ("native", "mqtt", "kafka", "udp", "http") for
	// logs and counters.
	Protocol string
	Remote   net.Addr
	Username string
	Password []byte
	// Token is a bearer token.
	Token []byte
	// Cert is the client's verified TLS certificate, nil without one.
	Cert *x509.Certificate
}

// anonymous reports whether r carries no credentials. A client certificate
// that names no user counts as none: TLS verified it, and it identifies nobody.
func (r *Request) anonymous() bool {
	return r.Username == "" && len(r.Password) == 0 && len(r.Token) == 0
}

// Options configure an Authenticator.
type Options struct {
	// UsersFile names the users file; "" means no users.
	UsersFile string
	// Anonymous is the anonymous access policy; "" means loopback without a users
	// file and none with one.
	Anonymous string
	Log       *slog.Logger
	// FailureDelay is the pause after a source address's first failed login; it
	// doubles with each further failure, up to MaxFailureDelay. Zero values mean
	// 100 ms and 5 s.
	FailureDelay, MaxFailureDelay time.Duration
}

// Authenticator checks credentials against the users file.
type Authenticator struct {
	opts     Options
	log      *slog.Logger
	anon     string
	table    atomic.Pointer[userTable]
	throttle throttle
	// fakeKey derives the SCRAM salts of users that do not exist, so that an
	// exchange with a wrong user name looks like one with a wrong password.
	fakeKey [32]byte
	// dummyHash is compared against when a user has no password, so that a login
	// costs one bcrypt comparison whatever the user name.
	dummyHash []byte

	countsMu sync.Mutex
	counts   map[string]*Stats // by protocol

	// usage holds each account's counters, by name, across reloads.
	usageMu sync.Mutex
	usage   map[string]*accountUsage

	// reloadMu orders reloads, with the calls of their listeners (OnReload).
	reloadMu     sync.Mutex
	listenersMu  sync.Mutex
	listeners    []reloadListener
	nextListener uint64
}

func (a *Authenticator) accountUsage(name string) *accountUsage {
	a.usageMu.Lock()
	defer a.usageMu.Unlock()
	if a.usage == nil {
		a.usage = make(map[string]*accountUsage)
	}
	u := a.usage[name]
	if u == nil {
		u = &accountUsage{}
		a.usage[name] = u
	}
	return u
}

// AccountUsage is one account's connections and subscriptions on a node.
type AccountUsage struct {
	Conns int `json:"conns"`
	Subs  int `json:"subs"`
}

// LocalUsage returns the usage on this node of every account with limits on
// connections or subscriptions, for the cluster's other nodes (SetRemoteUsage).
func (a *Authenticator) LocalUsage() map[string]AccountUsage {
	out := map[string]AccountUsage{}
	for name, acct := range a.table.Load().accounts {
		if acct.Limits.MaxConnections == 0 && acct.Limits.MaxSubscriptions == 0 {
			continue
		}
		c, s := acct.Usage()
		out[name] = AccountUsage{Conns: c, Subs: s}
	}
	return out
}

// SetRemoteUsage sets what the cluster's other nodes use of each account, their
// sum; an account absent from remote uses nothing elsewhere.
func (a *Authenticator) SetRemoteUsage(remote map[string]AccountUsage) {
	a.usageMu.Lock()
	defer a.usageMu.Unlock()
	for name, u := range a.usage {
		r := remote[name]
		u.mu.Lock()
		u.remoteConns, u.remoteSubs = r.Conns, r.Subs
		u.mu.Unlock()
	}
}

// HasAccounts reports whether the users file defines accounts besides the
// global one: global clients must then be kept from their subjects.
func (a *Authenticator) HasAccounts() bool { return len(a.table.Load().accounts) > 1 }

// Account returns the account of that name, nil if the users file defines
// none ("global" always exists).
func (a *Authenticator) Account(name string) *Account {
	if t := a.table.Load(); t.accounts != nil {
		return t.accounts[name]
	}
	if name == GlobalAccount {
		return &Account{Name: GlobalAccount}
	}
	return nil
}

// New reads the users file, if any, and returns an Authenticator.
func New(opts Options) (*Authenticator, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{opts: opts, log: opts.Log, anon: opts.Anonymous}
	switch a.anon {
	case "":
		a.anon = AnonymousLoopback
		if opts.UsersFile != "" {
			a.anon = AnonymousNone
		}
	case AnonymousLoopback, AnonymousAll, AnonymousNone:
	default:
		return nil, fmt.Errorf("anonymous %q: want %s, %s or %s", opts.Anonymous, AnonymousLoopback, AnonymousAll, AnonymousNone)
	}
	a.throttle.init(opts.FailureDelay, opts.MaxFailureDelay)
	if _, err := rand.Read(a.fakeKey[:]); err != nil {
		return nil, err
	}
	var err error
	if a.dummyHash, err = bcrypt.GenerateFromPassword(a.fakeKey[:16], bcrypt.DefaultCost); err != nil {
		return nil, err
	}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload re-reads the users file. On error the users in force stay. On success
// the functions given to OnReload are called, in order, before Reload returns:
// the protocols check their clients' logins again (Recheck) and apply the new
// rights.
func (a *Authenticator) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	t := &userTable{}
	if a.opts.UsersFile != "" {
		data, err := os.ReadFile(a.opts.UsersFile)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUsersFile, err)
		}
		if t, err = parseUsersFile(data, a.accountUsage); err != nil {
			return fmt.Errorf("%s: %w", a.opts.UsersFile, err)
		}
	}
	a.table.Store(t)
	a.listenersMu.Lock()
	ls := make([]func(), 0, len(a.listeners))
	for _, l := range a.listeners {
		ls = append(ls, l.f)
	}
	a.listenersMu.Unlock()
	for _, f := range ls {
		f()
	}
	return nil
}

// OnReload calls f after each successful Reload, in Reload's goroutine (never
// two calls at once); remove stops the calls. A protocol registers the function
// that checks its connections' logins again (Recheck).
func (a *Authenticator) OnReload(f func()) (remove func()) {
	a.listenersMu.Lock()
	defer a.listenersMu.Unlock()
	a.nextListener++
	id := a.nextListener
	a.listeners = append(a.listeners, reloadListener{id: id, f: f})
	return func() {
		a.listenersMu.Lock()
		defer a.listenersMu.Unlock()
		a.listeners = slices.DeleteFunc(a.listeners, func(l reloadListener) bool { return l.id == id })
	}
}

type reloadListener struct {
	id uint64
	f  func()
}

// Users reports how many users the users file defines.
func (a *Authenticator) Users() int { return len(a.table.Load().byName) }

// AnonymousPolicy is the anonymous access policy in force.
func (a *Authenticator) AnonymousPolicy() string { return a.anon }

// Stats counts logins since the start, and the connections closed because a
// reload of the users file no longer admitted their login (Recheck).
type Stats struct {
	Successes, Failures, Revoked uint64
}

// Stats returns the login counters by protocol (Request.Protocol).
func (a *Authenticator) Stats() map[string]Stats {
	a.countsMu.Lock()
	defer a.countsMu.Unlock()
	m := make(map[string]Stats, len(a.counts))
	for p, c := range a.counts {
		m[p] = *c
	}
	return m
}

func (a *Authenticator) count(protocol string, ok bool) {
	a.countStats(protocol, func(c *Stats) {
		if ok {
			c.Successes++
		} else {
			c.Failures++
		}
	})
}

func (a *Authenticator) countStats(protocol string, f func(*Stats)) {
	a.countsMu.Lock()
	defer a.countsMu.Unlock()
	if a.counts == nil {
		a.counts = make(map[string]*Stats)
	}
	c := a.counts[protocol]
	if c == nil {
		c = &Stats{}
		a.counts[protocol] = c
	}
	f(c)
}

// Authenticate checks a client's credentials and returns its user. A source
// address with recent failures waits before its credentials are checked, and
// again before a failure is answered. Errors wrap ErrDenied or ErrAnonymous.
// A client that stays connected logs in with Login instead, which a reload of
// the users file can check again.
func (a *Authenticator) Authenticate(r Request) (*User, error) {
	l, err := a.Login(r)
	if err != nil {
		return nil, err
	}
	return l.user, nil
}

// Login is Authenticate for a client that stays connected: the Login it returns
// is its user and what proved it, for Recheck after each reload of the users
// file (OnReload).
func (a *Authenticator) Login(r Request) (*Login, error) {
	host := hostOf(r.Remote)
	if d := a.throttle.delay(host); d > 0 {
		time.Sleep(d)
	}
	l, reason := a.check(&r)
	if l != nil && !servesAccounts(r.Protocol, l.user) {
		l, reason = nil, fmt.Errorf("%w: user %q of account %q: %s clients cannot use accounts yet", ErrDenied, l.user.Name, l.user.Account.Name, r.Protocol)
	}
	if l != nil {
		a.count(r.Protocol, true)
		a.throttle.succeeded(host)
		return l, nil
	}
	return nil, a.fail(r.Protocol, r.Remote, r.Username, reason)
}

// servesAccounts reports whether a client of protocol may log in as u: the
// protocols that keep an account's subjects apart serve every account, the
// others only the global one.
func servesAccounts(protocol string, u *User) bool {
	switch protocol {
	case "native", "udp", "http", "mqtt", "kafka":
		return true
	}
	return u.Account.Global()
}

// fail records, logs and slows down a failed login.
func (a *Authenticator) fail(protocol string, remote net.Addr, user string, reason error) error {
	a.count(protocol, false)
	host := hostOf(remote)
	d := a.throttle.failed(host)
	a.log.Warn("authentication failed", "protocol", protocol, "remote", addrString(remote), "user", user, "reason", reason.Error())
	if d > 0 {
		time.Sleep(d)
	}
	if errors.Is(reason, ErrAnonymous) {
		return ErrAnonymous
	}
	return ErrDenied
}

// check finds the user r names and makes its Login; on failure it says why
// (for the server's log).
func (a *Authenticator) check(r *Request) (*Login, error) {
	t := a.table.Load()
	var certUser *entry
	if r.Cert != nil {
		certUser = t.byCert(r.Cert)
	}
	login := func(e *entry, how proofKind) *Login {
		return &Login{user: e.user, table: t, protocol: r.Protocol, remote: r.Remote, how: how, name: e.user.Name}
	}
	if r.anonymous() && certUser == nil {
		u, err := a.anonymousUser(t, r.Remote)
		if err != nil {
			return nil, err
		}
		return &Login{user: u, table: t, protocol: r.Protocol, remote: r.Remote, how: proofAnonymous}, nil
	}
	if e := certUser; e != nil {
		l := login(e, proofCert)
		l.cert = r.Cert
		switch {
		case r.Username != "" && r.Username != e.user.Name:
			return nil, fmt.Errorf("%w: certificate of user %q presented with user name %q", ErrDenied, e.user.Name, r.Username)
		case len(r.Password) > 0:
			if !a.passwordMatches(e, r.Password) {
				return nil, fmt.Errorf("%w: wrong password", ErrDenied)
			}
			l.hash = e.password
		}
		return l, nil
	}
	if len(r.Token) > 0 && r.Username == "" {
		h := sha256.Sum256(r.Token)
		e := t.byToken[h]
		if e == nil {
			return nil, fmt.Errorf("%w: unknown token", ErrDenied)
		}
		l := login(e, proofToken)
		l.token = h
		return l, nil
	}
	e := t.byName[r.Username]
	pw := r.Password
	if len(pw) == 0 {
		pw = r.Token
	}
	if !a.passwordMatches(e, pw) || e == nil {
		return nil, fmt.Errorf("%w: wrong user name or password", ErrDenied)
	}
	l := login(e, proofPassword)
	l.hash = e.password
	return l, nil
}

// anonymousUser is who an anonymous client from remote is under the users of
// t, or why it may not connect.
func (a *Authenticator) anonymousUser(t *userTable, remote net.Addr) (*User, error) {
	switch {
	case a.anon == AnonymousAll, a.anon == AnonymousLoopback && isLoopback(remote):
		if t.anonymous != nil {
			return t.anonymous, nil
		}
		return unrestricted, nil
	case a.anon == AnonymousLoopback:
		return nil, fmt.Errorf("%w: only loopback clients may connect without credentials", ErrAnonymous)
	}
	return nil, fmt.Errorf("%w: credentials required", ErrAnonymous)
}

// passwordMatches compares password with e's hash, or with a dummy hash when
// there is no e or it has no password, so that both cost the same time.
func (a *Authenticator) passwordMatches(e *entry, password []byte) bool {
	hash := a.dummyHash
	if e != nil && e.password != nil {
		hash = e.password
	}
	ok := bcrypt.CompareHashAndPassword(hash, password) == nil
	return ok && e != nil && e.password != nil
}

func (t *userTable) byCert(c *x509.Certificate) *entry {
	if e := t.bySubject[c.Subject.String()]; e != nil {
		return e
	}
	for _, s := range c.EmailAddresses {
		if e := t.bySAN[s]; e != nil {
			return e
		}
	}
	for _, s := range c.DNSNames {
		if e := t.bySAN[s]; e != nil {
			return e
		}
	}
	for _, u := range c.URIs {
		if e := t.bySAN[u.String()]; e != nil {
			return e
		}
	}
	return nil
}

func hostOf(a net.Addr) string {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.IP.String()
	case *net.UDPAddr:
		return v.IP.String()
	case nil:
		return ""
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// isLoopback reports whether a is a loopback address. A client with no network
// address (in-process) counts as local.
func isLoopback(a net.Addr) bool {
	if a == nil {
		return true
	}
	ip := net.ParseIP(hostOf(a))
	return ip != nil && ip.IsLoopback()
}

// fakeSalt derives a stable salt for a user name that does not exist.
func (a *Authenticator) fakeSalt(name string) []byte {
	m := hmac.New(sha256.New, a.fakeKey[:])
	m.Write([]byte(name))
	return m.Sum(nil)[:16]
}

// PeerCert returns the client certificate a TLS connection presented and the
// server verified, nil for any other connection. The handshake must be over
// (the connection has been read from).
func PeerCert(nc net.Conn) *x509.Certificate {
	tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	return VerifiedCert(&cs)
}

// VerifiedCert returns the client certificate of a TLS connection's state that
// the server verified, nil for none (or cs nil: no TLS).
func VerifiedCert(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}
