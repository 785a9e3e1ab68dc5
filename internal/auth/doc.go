// Package auth owns who a client is and what it may do, for every protocol alike:
// the users file (users, groups, passwords, tokens, certificate identities,
// publish and subscribe permissions), the anonymous-access policy, the checking of
// credentials (bcrypt passwords, bearer tokens, client certificates, SCRAM stored
// keys) with failed logins slowed per source address, and the permission checks a
// protocol adapter makes on each publish, subscribe and delivery.
//
// The package does no I/O of its own besides reading the users file: a protocol
// adapter gathers the credentials its protocol carries into a Request, calls
// (*Authenticator).Authenticate once per connection, and keeps the returned User's
// Checker for that connection's life. Permission decisions are cached per subject,
// so a publish with a permitted subject costs a map lookup and no allocation.
//
// Subjects starting with "$" belong to the server (stream API, acks, system
// traffic): a pattern whose first token is a wildcard never matches them, so a user
// needs an explicit "$TERN.API.>" (or the admin flag) to manage streams, and a
// subscription to ">" does not receive them. "$TERN.SYS.>" carries traffic between
// cluster nodes and is never open to clients.
package auth
