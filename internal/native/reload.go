package native

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/wire"
)

// A reload of the users file reaches the connections already open
// (Authenticator.OnReload): each client's login is checked again. A login that
// no longer holds (its user removed, its password, token or certificate mapping
// changed, its user moved to another account) closes the connection with ERR 7
// ("authorization revoked: ..."). Otherwise the client has its user's new rights
// at once: its checker takes the new permissions (the next publish is decided
// by them), and each subscription is decided again — one no longer allowed is
// removed and reported with ERR 6 naming it, the others deliver by the new
// rules.

// usersReloaded checks every connection after a reload of the users file.
func (s *Server) usersReloaded() {
	for _, c := range s.snapshotConns() {
		_ = c.recheckLogin(s.cfg.Auth)
	}
}

// recheckLogin checks the client's login against the users file in force, and
// applies what changed (see above). It returns the error the connection closes
// with when the login no longer holds. Nothing to do before CONNECT, without
// authentication, or when the file has not changed since the last check.
func (c *Conn) recheckLogin(a *auth.Authenticator) error {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	l := c.login
	if l == nil {
		return nil
	}
	nl, err := a.Recheck(l)
	if err != nil {
		c.login = nil
		return c.fatal(wire.CodeAuth, err.Error())
	}
	if nl == l {
		return nil
	}
	c.login = nl
	old, u := c.user.Load(), nl.User()
	c.user.Store(u)
	if auth.SameRights(old, u) {
		return nil
	}
	c.perms.Update(u.Perms)
	c.recheckSubs(u)
	return nil
}

// recheckSubs decides each subscription again with the rights of u, the
// client's user after a reload. authMu is held.
func (c *Conn) recheckSubs(u *auth.User) {
	c.subsMu.Lock()
	subs := maps.Clone(c.subs)
	c.subsMu.Unlock()
	prefix := c.acct.Prefix()
	for _, sid := range slices.Sorted(maps.Keys(subs)) {
		sub := subs[sid]
		filter := strings.TrimPrefix(sub.Subject, prefix)
		ok, permit := c.subPermit(u, filter)
		if ok {
			sub.SetPermit(permit)
			if c.acct != nil {
				c.recheckImports(u, sid, sub, filter)
			}
			continue
		}
		imports, found := c.forget(sid, sub)
		if !found {
			continue // unsubscribed meanwhile
		}
		_ = c.srv.broker.Unsubscribe(sub)
		for _, isub := range imports {
			_ = c.srv.broker.Unsubscribe(isub)
		}
		c.log.Info("subscription removed: the reloaded users file no longer allows it", "user", u.Name, "subject", filter, "sid", sid)
		c.sendErr(wire.CodePermission, 0, fmt.Sprintf("subscription to %q denied: permissions changed, subscription %d removed", filter, sid))
	}
}

// recheckImports makes again the subscriptions to other accounts' subjects of
// subscription sid (sub, to filter in the client's terms) when the imports of
// u's account reach others than before. authMu is held.
func (c *Conn) recheckImports(u *auth.User, sid uint64, sub *broker.Subscription, filter string) {
	want := u.Account.Imports(filter)
	c.subsMu.Lock()
	have := c.imports[sid]
	c.subsMu.Unlock()
	if slices.EqualFunc(have, want, func(isub *broker.Subscription, im auth.ImportedSubscription) bool {
		k, ok := isub.Sink.(*importSink)
		return ok && k.im == im
	}) {
		return
	}
	for _, isub := range have {
		_ = c.srv.broker.Unsubscribe(isub)
	}
	isubs := c.subscribeImports(sub, want)
	c.subsMu.Lock()
	current := c.subs[sid] == sub
	if current {
		if c.imports == nil {
			c.imports = make(map[uint64][]*broker.Subscription)
		}
		c.imports[sid] = isubs
	}
	c.subsMu.Unlock()
	if !current { // unsubscribed meanwhile
		for _, isub := range isubs {
			_ = c.srv.broker.Unsubscribe(isub)
		}
	}
}
