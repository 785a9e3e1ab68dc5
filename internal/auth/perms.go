package auth

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// SysPrefix starts the subjects of traffic between cluster nodes; no client may
// publish or subscribe to them.
const SysPrefix = "$TERN.SYS."

// apiPattern is what the admin flag adds to a user's publish permissions: the
// stream, consumer and cluster management API.
const apiPattern = "$TERN.API.>"

// Permissions says which subjects a user may publish to and subscribe to. A nil
// allow list allows everything (but "$TERN.SYS."); deny entries win over allow
// entries. Permissions are immutable once built and shared by the user's
// connections.
type Permissions struct {
	pubAllow, pubDeny []pattern
	subAllow, subDeny []pattern
	// pubAll and subAll are set when there is no allow list.
	pubAll, subAll bool
	// responses lets the user answer the requests it receives: publish once to
	// the reply subject of a message delivered to it, within responseTTL.
	responses bool
}

// responseTTL is how long a received request's reply subject stays open to a
// user with allow_responses; maxOpenResponses bounds them per connection.
const (
	responseTTL      = 2 * time.Minute
	maxOpenResponses = 4096
)

// PermissionSpec is the text form of Permissions: subject patterns.
type PermissionSpec struct {
	PublishAllow, PublishDeny     []string
	SubscribeAllow, SubscribeDeny []string
	// AllowResponses lets the user publish one answer to the reply subject of each
	// request delivered to it, whatever its publish permissions.
	AllowResponses bool
}

// NewPermissions compiles spec. An empty allow list (nil or no entries) allows
// every subject.
func NewPermissions(spec PermissionSpec) (*Permissions, error) {
	p := &Permissions{pubAll: len(spec.PublishAllow) == 0, subAll: len(spec.SubscribeAllow) == 0, responses: spec.AllowResponses}
	for _, l := range []struct {
		src []string
		dst *[]pattern
	}{{spec.PublishAllow, &p.pubAllow}, {spec.PublishDeny, &p.pubDeny}, {spec.SubscribeAllow, &p.subAllow}, {spec.SubscribeDeny, &p.subDeny}} {
		for _, s := range l.src {
			pt, err := parsePattern(s)
			if err != nil {
				return nil, err
			}
			*l.dst = append(*l.dst, pt)
		}
	}
	return p, nil
}

// Unrestricted reports whether p allows every subject but the cluster's own.
func (p *Permissions) Unrestricted() bool {
	return p == nil || (p.pubAll && p.subAll && len(p.pubDeny) == 0 && len(p.subDeny) == 0)
}

func matchAny(ps []pattern, s []byte) bool {
	for _, p := range ps {
		if p.matches(s) {
			return true
		}
	}
	return false
}

func (p *Permissions) canPublish(s []byte) bool {
	if bytes.HasPrefix(s, []byte(SysPrefix)) || bytes.HasPrefix(s, []byte(AccountPrefix)) {
		return false
	}
	if p == nil {
		return true
	}
	if matchAny(p.pubDeny, s) {
		return false
	}
	return p.pubAll || matchAny(p.pubAllow, s)
}

// subscribe decides a subscription to filter f: whether it is allowed, and whether
// each message delivered to it must be checked (it reaches denied subjects, or
// server subjects through a leading wildcard).
func (p *Permissions) subscribe(f pattern) (ok, check bool) {
	if f[0] == "$A" {
		return false, false // other accounts' subjects
	}
	if f[0] == "$TERN" && len(f) > 1 && (f[1] == "SYS" || f[1] == "*" || f[1] == ">") {
		if f[1] == "SYS" {
			return false, false
		}
		check = true // "$TERN.>" must not deliver "$TERN.SYS." traffic
	}
	if p == nil {
		return true, check || f.wildFirst()
	}
	for _, d := range p.subDeny {
		if d.covers(f) {
			return false, false
		}
		if d.overlaps(f) {
			check = true
		}
	}
	if !p.subAll {
		ok = false
		for _, a := range p.subAllow {
			if a.covers(f) {
				ok = true
				break
			}
		}
		if !ok {
			return false, false
		}
	}
	if f.wildFirst() {
		check = true // "$" subjects are withheld from it
	}
	return true, check
}

// mayReceive reports whether a message on subject s may be delivered to a
// subscription that needs checking.
func (p *Permissions) mayReceive(s []byte, wildFirst bool) bool {
	if bytes.HasPrefix(s, []byte(SysPrefix)) || bytes.HasPrefix(s, []byte(AccountPrefix)) {
		return false
	}
	if p == nil {
		return true
	}
	if wildFirst && len(s) > 0 && s[0] == '$' && !p.Unrestricted() {
		return false
	}
	return !matchAny(p.subDeny, s)
}

// cacheLimit bounds a Checker's caches; past it the cache is cleared, as a
// connection cycling through endless subjects must not grow without bound.
const cacheLimit = 256

// Checker makes one connection's permission decisions and caches them by
// subject. CanPublish is for the connection's reading goroutine; CanSubscribe,
// MayReceive and Update may be called from any goroutine.
//
// The permissions in force can change while the connection lives (Update, when
// a reload of the users file changes its user's): each cache remembers which
// permissions its decisions are of and starts over when they are no longer the
// ones in force, so that a cached decision costs one atomic load more than a map
// lookup, and no allocation.
type Checker struct {
	perms atomic.Pointer[Permissions] // in force; nil: unrestricted
	// pubOf is what pub caches decisions of (the reader's, like pub).
	pubOf *Permissions
	pub   map[string]bool

	recvMu sync.Mutex
	recvOf *Permissions // what recv caches decisions of
	recv   map[string]bool
	// replies are the reply subjects of requests delivered to the connection that
	// it may answer (allow_responses), with when they stop being open.
	replies map[string]time.Time
}

// OpenChecker decides the subscriptions and deliveries of unrestricted clients:
// the cluster's and other accounts' subjects stay closed to them. Its
// CanSubscribe and MayReceive are safe from any goroutine; its CanPublish is not
// for use, nor its Update.
var OpenChecker = (*Permissions)(nil).NewChecker()

// NewChecker returns a checker of p for one connection.
func (p *Permissions) NewChecker() *Checker {
	c := &Checker{pubOf: p, pub: make(map[string]bool)}
	c.perms.Store(p)
	return c
}

// Update makes p the permissions in force: every decision from then on, and
// every subscription's delivery check (MayReceive), is p's. Cached decisions of
// the permissions before are dropped. Safe from any goroutine.
func (c *Checker) Update(p *Permissions) { c.perms.Store(p) }

// CanPublish reports whether the connection may publish to subject. A cached
// decision costs one map lookup and no allocation.
func (c *Checker) CanPublish(subject []byte) bool {
	p := c.perms.Load()
	if p == nil {
		return !Reserved(subject) // unrestricted: nothing to cache
	}
	if p != c.pubOf {
		c.pubOf = p
		clear(c.pub)
	}
	if ok, hit := c.pub[string(subject)]; hit {
		return ok || c.answers(p, subject)
	}
	ok := p.canPublish(subject)
	if !ok && c.answers(p, subject) {
		return true // not cached: the permission is for one answer
	}
	if len(c.pub) >= cacheLimit {
		clear(c.pub)
	}
	c.pub[string(subject)] = ok
	return ok
}

// CanSubscribe decides a subscription to the filter (valid, as checked by
// subject.ValidateFilter). When check is set, each message delivered to the
// subscription must pass MayReceive.
func (c *Checker) CanSubscribe(filter string) (ok, check bool) {
	f, err := parsePattern(filter)
	if err != nil {
		return false, false
	}
	return c.perms.Load().subscribe(f)
}

// MayReceive reports whether a message on subject may be delivered to a
// subscription whose CanSubscribe asked for checks; wildFirst is whether that
// subscription's filter starts with a wildcard.
func (c *Checker) MayReceive(subject []byte, wildFirst bool) bool {
	if Reserved(subject) {
		return false
	}
	p := c.perms.Load()
	if p.Unrestricted() {
		return true
	}
	if wildFirst && len(subject) > 0 && subject[0] == '$' {
		return false
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if c.recvOf != p {
		c.recvOf, c.recv = p, nil
	}
	if ok, hit := c.recv[string(subject)]; hit {
		return ok
	}
	ok := p.mayReceive(subject, false)
	if c.recv == nil || len(c.recv) >= cacheLimit {
		c.recv = make(map[string]bool)
	}
	c.recv[string(subject)] = ok
	return ok
}

// Reserved reports whether a subject belongs to the cluster ("$TERN.SYS.") or
// to an account other than the global one ("$A."): no client reaches it by its
// name, whatever its permissions.
func Reserved(subject []byte) bool {
	return len(subject) > 0 && subject[0] == '$' &&
		(bytes.HasPrefix(subject, []byte(SysPrefix)) || bytes.HasPrefix(subject, []byte(AccountPrefix)))
}

// TracksRequests reports whether NoteRequest must be called for the messages
// delivered to the connection.
func (c *Checker) TracksRequests() bool {
	p := c.perms.Load()
	return p != nil && p.responses
}

// NoteRequest opens reply, the reply subject of a message delivered to the
// connection, to one answer.
func (c *Checker) NoteRequest(reply []byte, now time.Time) {
	if bytes.HasPrefix(reply, []byte(SysPrefix)) {
		return
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if c.replies == nil {
		c.replies = make(map[string]time.Time)
	}
	if len(c.replies) >= maxOpenResponses {
		for r, until := range c.replies {
			if now.After(until) || len(c.replies) >= maxOpenResponses {
				delete(c.replies, r)
			}
		}
	}
	c.replies[string(reply)] = now.Add(responseTTL)
}

// answers reports whether subject is an open reply subject, and closes it; p
// are the permissions in force.
func (c *Checker) answers(p *Permissions, subject []byte) bool {
	if p == nil || !p.responses {
		return false
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	until, ok := c.replies[string(subject)]
	if !ok {
		return false
	}
	delete(c.replies, string(subject))
	return time.Now().Before(until)
}

// WildFirst reports whether the filter starts with a wildcard token.
func WildFirst(filter string) bool {
	return len(filter) > 0 && (filter[0] == '*' || filter[0] == '>') && (len(filter) == 1 || filter[1] == '.')
}
