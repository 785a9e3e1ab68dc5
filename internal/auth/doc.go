// Package auth owns who a client is and what it may do, for every protocol alike:
// the users file (users, groups, passwords, tokens, certificate identities,
// publish and subscribe permissions), the anonymous-access policy, the checking of
// credentials (bcrypt passwords, bearer tokens, client certificates, SCRAM stored
// keys) with failed logins slowed per source address, and the permission checks a
// protocol adapter makes on each publish, subscribe and delivery.
//
// The package does no I/O of its own besides reading the users file: a protocol
// adapter gathers the credentials its protocol carries into a Request, calls
// (*Authenticator).Login once per connection, and keeps the Login and a Checker
// of its User's permissions for that connection's life. Permission decisions are
// cached per subject, so a publish with a permitted subject costs a map lookup
// and no allocation.
//
// A reload of the users file (Reload, on SIGHUP) reaches connections already
// open: after the new file is in force, Reload calls the functions adapters
// registered with OnReload, and each adapter walks its live connections, asking
// Recheck whether each Login still holds. A Login whose user is gone, whose
// password, token, SCRAM credentials or certificate mapping changed, or whose
// user is in another account now is refused (ErrRevoked, logged and counted):
// the adapter closes the connection with its protocol's signal. Otherwise the
// adapter gives the connection the user as the new file defines it: the
// Checker's Update makes its permissions the new ones (its cache starts over;
// the cached path costs one atomic load more), and the adapter decides its
// subscriptions again (SameRights says when nothing changed). The package keeps
// no list of connections: each adapter has its own.
//
// Subjects starting with "$" belong to the server (stream API, acks, system
// traffic): a pattern whose first token is a wildcard never matches them, so a user
// needs an explicit "$TERN.API.>" (or the admin flag) to manage streams, and a
// subscription to ">" does not receive them. "$TERN.SYS.>" carries traffic between
// cluster nodes and is never open to clients.
package auth
