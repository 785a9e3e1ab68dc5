package mqtt

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
)

// A reload of the users file reaches the sessions already kept
// (Authenticator.OnReload), connected or not. A connected client's login is
// checked again: one that no longer holds (its user removed, its password,
// token or certificate mapping changed, its user moved to another account)
// closes the connection — DISCONNECT with reason 0x87 (not authorized) for an
// MQTT 5 client, the connection closed for MQTT 3 — and its session, if it
// stays, goes on with the rights of its user by name, as a restored session
// does. Otherwise the session takes its user's new rights at once: publishes
// are decided by them from the next one, subscriptions no longer allowed are
// removed from the session (persistent ones too, and saved so), and the others
// deliver by the new rules.

// usersReloaded checks every session after a reload of the users file.
func (s *Server) usersReloaded() {
	s.mu.Lock()
	sessions := slices.Collect(maps.Values(s.sessions))
	s.mu.Unlock()
	for _, sess := range sessions {
		sess.recheckRights(s.cfg.Auth)
	}
}

// recheckRights gives the session the rights the users file in force grants its
// user, and closes its connection when the client's login no longer holds.
func (s *session) recheckRights(a *auth.Authenticator) {
	var revoked *conn
	var why error
	_ = s.step(func(time.Time) error {
		if s.m.Ended() || s.disownedLocked() {
			return nil
		}
		old := s.accessLocked()
		next := old
		if c := s.conn.Load(); c != nil && (old == nil || old.conn == c) {
			l := a.AnonymousLogin("mqtt") // the anonymous user with every right keeps no access
			if old != nil {
				l = old.login
			}
			nl, err := a.Recheck(l)
			switch {
			case err != nil:
				revoked, why = c, err
				next, _ = s.ownerAccess(old.ownerName())
			case nl == l:
				return nil
			default:
				u := nl.User()
				if next = newAccess(u, u.Name, c); next != nil {
					next.login = nl
				}
			}
		} else {
			next, _ = s.ownerAccess(old.ownerName())
			if old != nil && next != nil && old.user == next.user {
				return nil // the file left the user as it was
			}
		}
		s.applyAccessLocked(old, next)
		return nil
	})
	if revoked != nil {
		revoked.disconnect(packet.NotAuthorized, why.Error())
	}
}

// applyAccessLocked makes next the session's access in place of old, after a
// reload of the users file: subscriptions next does not allow are removed, the
// others deliver by next's rights. When next makes the same broker
// subscriptions as old (most changes of rights), those stay and take new
// delivery checks; otherwise they are made again. mu is held.
func (s *session) applyAccessLocked(old, next *access) {
	s.setAccessLocked(next)
	if x := s.x.Load(); x != nil && x.acct != nil {
		// The account that counts the session's connections and subscriptions,
		// as the file defines it now (its limits); its counts are kept by name.
		if a := next.account(); a != nil && a.Name == x.acct.Name {
			x.acct = a
		}
	}
	if sameAccessRights(old, next) {
		return
	}
	keep := func(e *sm.Sub) bool { return s.srv.mayKeep(next, e) }
	x := s.x.Load()
	if x == nil {
		return // no subscription
	}
	bySub := x.bySub()
	if !s.bindingsHold(next, bySub, keep) {
		s.m.Recheck(keep)
		return
	}
	for sub, e := range bySub {
		if !keep(e) {
			continue // removed by Prune
		}
		if k, ok := sub.Sink.(*importSink); ok {
			k.setPermit(s.accountPermit(next, k.subj, false))
			continue
		}
		subj := strings.TrimPrefix(sub.Subject, x.prefix)
		_, permit := s.srv.maySubscribe(next, subj)
		if x.prefix != "" {
			permit = s.accountPermit(next, subj, true)
		}
		sub.SetPermit(permit)
	}
	s.m.Prune(keep)
}

// sameAccessRights reports whether accesses a and b grant the same.
func sameAccessRights(a, b *access) bool {
	switch {
	case a == nil || b == nil:
		return a == b
	case a.user == nil || b.user == nil:
		return a.user == b.user
	}
	return auth.SameRights(a.user, b.user)
}

// binding is one broker subscription a session's subscription makes: to its
// own subject (imported false), or to another account's, imported as im.
type binding struct {
	subject  string
	imported bool
	im       auth.ImportedSubscription
}

func compareBindings(a, b binding) int {
	if c := cmp.Compare(a.subject, b.subject); c != 0 {
		return c
	}
	if a.imported != b.imported {
		if a.imported {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(a.im.Add, b.im.Add); c != 0 {
		return c
	}
	return cmp.Compare(a.im.Strip, b.im.Strip)
}

// bindingsHold reports whether each subscription that keep keeps would make
// with access next the broker subscriptions it has (bySub, the view's), as
// bindSubsLocked makes them. mu is held.
func (s *session) bindingsHold(next *access, bySub map[*broker.Subscription]*sm.Sub, keep func(*sm.Sub) bool) bool {
	x := s.x.Load()
	have := make(map[*sm.Sub][]binding)
	for sub, e := range bySub {
		b := binding{subject: sub.Subject}
		if k, ok := sub.Sink.(*importSink); ok {
			b.imported, b.im = true, k.im
		}
		have[e] = append(have[e], b)
	}
	hold := true
	s.m.Subs(func(e *sm.Sub) {
		if !hold || !keep(e) {
			return
		}
		got := have[e]
		var want []binding
		for _, subj := range e.Subjects {
			if ok, _ := s.srv.maySubscribe(next, subj); !ok {
				continue
			}
			want = append(want, binding{subject: x.prefix + subj})
			for _, im := range next.account().Imports(subj) {
				want = append(want, binding{subject: im.Filter, imported: true,
					im: auth.ImportedSubscription{Strip: im.Strip, Add: x.prefix + im.Add}})
			}
		}
		slices.SortFunc(got, compareBindings)
		slices.SortFunc(want, compareBindings)
		hold = slices.Equal(got, want)
	})
	return hold
}
