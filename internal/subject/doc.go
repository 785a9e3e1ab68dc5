// Package subject owns Tern's subject syntax and the wildcard trie that maps a
// published subject to the subscriptions that want it.
//
// # Syntax
//
// A subject is a non-empty list of tokens separated by '.', e.g. "sensors.k1.temp".
// Tokens are non-empty and contain no byte below 0x21 (space, tab, CR, LF, NUL and
// the other control bytes) and no DEL (0x7f). A subject is at most MaxLen bytes and
// MaxTokens tokens. A subscription filter may also use two wildcards, each only as a
// whole token: '*' matches exactly one token and '>' matches one or more remaining
// tokens, so it must be the last token. A published subject has no wildcards. Queue
// group names are 1..MaxQueueLen bytes with none of the above bytes nor '.', '*' or
// '>'. ValidatePublish, ValidateFilter and ValidateQueue check these rules in one pass
// without allocating on valid input; their errors wrap the sentinel errors (ErrEmpty,
// ErrEmptyToken, ...) for errors.Is. Tokens, IsLiteral and Matches work on subjects
// without a trie.
//
// # Trie and cache
//
// Sublist is a trie of filters holding comparable items, each either a plain
// subscriber or a member of a named queue group. Match returns a Result listing every
// plain subscriber whose filter matches and, per queue group, all matching members
// merged across filters (groups sorted by name). Results are cached per subject in a
// bounded cache of 4096 entries, split by subject hash into 16 shards; a full shard
// drops a quarter of its entries, whichever its map yields first. A subject that
// matches no queue group is cached on its second miss, while its hash is among
// the 64 a shard remembers of subjects that missed once: a reply subject used
// once (an acknowledgement per publish, an answer per request) is answered from
// the trie and not cached. One that matches a queue group is cached at once, so
// that its group's cursor turns from its first message on. A Result is
// immutable and shared by every caller that gets it: Insert and Remove never change a
// Result already handed out but replace, copy-on-write, the cached Results of the
// subjects they affect, so the cache never serves a stale Result. A Match that finds
// its subject cached allocates nothing. The price is on the write side: Insert and
// Remove of a wildcard filter scan every cached subject and rebuild each one the
// filter matches (a literal filter touches at most one).
//
// A publisher that sends runs of one subject keeps a Memo and calls MatchMemo: the
// Memo holds its last subject and Result, and the Sublist counts its Inserts and
// Removes, so while the subject repeats and the count has not moved the Result is
// answered without hashing the subject or taking a shard's lock.
//
// # Concurrency
//
// A Sublist is safe for concurrent use. Matches on cached subjects take one read lock
// of a cache shard chosen by the subject's hash and never wait for the trie lock; a
// cache miss reads the trie under its read lock; Insert and Remove take the trie's
// write lock. Once Insert or Remove has returned, every Match that starts sees the
// change.
//
// The package knows nothing of protocols, connections or the broker, nor of what the
// stored items are. Front ends that use other syntaxes (MQTT's '/', '+' and '#')
// translate into this one before subjects reach a Sublist.
package subject
