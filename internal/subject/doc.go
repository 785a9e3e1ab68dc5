// Package subject owns Tern's subject syntax and the wildcard trie that maps a published
// subject to the subscriptions that want it.
//
// A subject is a non-empty list of tokens separated by '.', e.g. "sensors.k1.temp".
// Tokens are non-empty and contain no whitespace or control bytes. A subscription filter
// may use two wildcards as whole tokens: '*' matches exactly one token and '>' matches
// one or more remaining tokens (it must be last). Published subjects are literal.
// Limits: MaxLen bytes and MaxTokens tokens.
//
// Sublist is a trie of filters with a bounded cache of match results keyed by subject.
// Results are immutable and shared; Insert and Remove replace the cached results they
// affect (copy-on-write) so a cached result is never stale and never changes under a
// reader. Match on a cached subject takes a read lock and allocates nothing.
//
// The package knows nothing of protocols or of what the stored items are; front ends
// that use other syntaxes (MQTT's '/', '+', '#') translate into this one first.
package subject
