package auth

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
)

// ErrRevoked: a reload of the users file no longer admits a connection's login
// (Recheck); the connection is closed.
var ErrRevoked = errors.New("authorization revoked")

// proofKind is what a client logged in with.
type proofKind uint8

const (
	proofAnonymous proofKind = iota
	proofPassword
	proofToken
	proofCert
	proofSCRAM
)

// Login is one client's successful authentication (Authenticator.Login): its
// user, and what proved it, so that a reload of the users file can tell whether
// it still holds (Recheck). It keeps no secret the client sent: a password is
// remembered by the hash it matched, a token by its SHA-256, a SCRAM exchange by
// the stored key it was verified with. A Login never changes; Recheck returns a
// new one.
type Login struct {
	user      *User
	table     *userTable // the users file user is of
	protocol  string
	remote    net.Addr
	how       proofKind
	name      string            // the user's name, "" for an anonymous client
	hash      []byte            // proofPassword, or proofCert with a password: the bcrypt hash it matched
	token     [32]byte          // proofToken: the token's SHA-256
	cert      *x509.Certificate // proofCert
	scramMech string            // proofSCRAM: the mechanism and the stored key the proof was checked with
	scramKey  []byte
}

// User is who the client is, with the rights of the users file the Login was
// checked against.
func (l *Login) User() *User { return l.user }

// Recheck checks a connection's login against the users file in force, after a
// reload (OnReload). It returns l itself when the file has not changed since l
// was made, and otherwise a Login with the user as the file now defines it (new
// rights, limits and account definition). It refuses, with an error wrapping
// ErrRevoked that says why, a login that no longer holds: its user was removed;
// the password it matched, the token it gave, the SCRAM credentials it was
// verified with or the certificate mapping that named its user changed; or its
// user (or the anonymous user, for an anonymous client) is now in another
// account. A refusal is logged and counted (Stats.Revoked); the caller closes
// the connection.
func (a *Authenticator) Recheck(l *Login) (*Login, error) {
	t := a.table.Load()
	if l.table == t {
		return l, nil
	}
	u, reason := a.recheck(t, l)
	if reason == "" && accountName(u) != accountName(l.user) {
		reason = fmt.Sprintf("moved from account %q to %q", accountName(l.user), accountName(u))
	}
	if reason == "" && !servesAccounts(l.protocol, u) {
		reason = fmt.Sprintf("account %q is not served to %s clients", accountName(u), l.protocol)
	}
	if reason != "" {
		a.countStats(l.protocol, func(c *Stats) { c.Revoked++ })
		a.log.Info("authorization revoked: closing the connection", "protocol", l.protocol, "remote", addrString(l.remote),
			"user", l.name, "reason", reason)
		return nil, fmt.Errorf("%w: %s", ErrRevoked, reason)
	}
	nl := *l
	nl.user, nl.table = u, t
	return &nl, nil
}

// recheck finds l's user in t, or says why l no longer holds.
func (a *Authenticator) recheck(t *userTable, l *Login) (*User, string) {
	if l.how == proofAnonymous {
		u, err := a.anonymousUser(t, l.remote)
		if err != nil {
			return nil, "anonymous clients are no longer accepted"
		}
		return u, ""
	}
	e := t.byName[l.name]
	if e == nil {
		return nil, "user removed"
	}
	switch l.how {
	case proofPassword:
		if !bytes.Equal(e.password, l.hash) {
			return nil, "password changed"
		}
	case proofToken:
		if t.byToken[l.token] != e {
			return nil, "token removed"
		}
	case proofCert:
		if t.byCert(l.cert) != e {
			return nil, "certificate no longer names the user"
		}
		if l.hash != nil && !bytes.Equal(e.password, l.hash) {
			return nil, "password changed"
		}
	case proofSCRAM:
		if c, ok := e.scram[l.scramMech]; !ok || !bytes.Equal(c.StoredKey, l.scramKey) {
			return nil, "SCRAM credentials changed"
		}
	}
	return e.user, ""
}

// accountName is the name of u's account.
func accountName(u *User) string {
	if u.Account == nil {
		return GlobalAccount
	}
	return u.Account.Name
}

// SameRights reports whether u and v are the same user with the same rights:
// permissions, admin and monitor flags, and account, with the same imports. A
// connection whose user a reload left with the same rights keeps its
// subscriptions as they are; account limits are read from the user at each use.
func SameRights(u, v *User) bool {
	if u == v {
		return true
	}
	if u == nil || v == nil {
		return false
	}
	return u.Name == v.Name && u.Admin == v.Admin && u.Monitor == v.Monitor &&
		u.Perms.equal(v.Perms) && u.Account.sameShares(v.Account)
}

func (p *Permissions) equal(q *Permissions) bool {
	if p == nil || q == nil {
		return p == q
	}
	eq := func(a, b []pattern) bool {
		return slices.EqualFunc(a, b, func(x, y pattern) bool { return slices.Equal(x, y) })
	}
	return p.pubAll == q.pubAll && p.subAll == q.subAll && p.responses == q.responses &&
		eq(p.pubAllow, q.pubAllow) && eq(p.pubDeny, q.pubDeny) && eq(p.subAllow, q.subAllow) && eq(p.subDeny, q.subDeny)
}

// sameShares reports whether a and b are the same account with the same
// imports of subjects and services.
func (a *Account) sameShares(b *Account) bool {
	if a.Global() && b.Global() {
		return true // the global account imports nothing
	}
	if a == nil || b == nil || a.Name != b.Name {
		return false
	}
	return slices.EqualFunc(a.imports, b.imports, func(x, y subjectImport) bool {
		return x.from.Name == y.from.Name && slices.Equal(x.local, y.local) && x.strip == y.strip &&
			x.add == y.add && slices.Equal(x.remote, y.remote)
	}) && slices.EqualFunc(a.services, b.services, func(x, y serviceImport) bool {
		return x.from.Name == y.from.Name && slices.Equal(x.local, y.local) && x.strip == y.strip && x.resp == y.resp
	})
}

// Stale reports whether the users file was reloaded since l was made or last
// rechecked: a protocol that logged a client in while a reload was checking its
// connections calls Recheck for it itself.
func (a *Authenticator) Stale(l *Login) bool { return l.table != a.table.Load() }

// AnonymousLogin is the Login of an anonymous client that Login admitted with
// every right, for a protocol that keeps no Login for such clients (an MQTT
// connection stays small): Recheck finds the anonymous user in force for it.
// The anonymous policy is not reloaded, so the client stays admitted.
func (a *Authenticator) AnonymousLogin(protocol string) *Login {
	return &Login{user: unrestricted, protocol: protocol, how: proofAnonymous}
}
