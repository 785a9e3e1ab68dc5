package mqtt

import (
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
)

// Accounts (docs/security.md, "Accounts"). An MQTT client of an account other than
// the global one lives in that account's subject space: the topics it publishes to
// (and its will) are the account's subjects, "$A.<account>." and the topic's subject
// inside the server; its filters are prefixed alike; what is delivered to it loses
// the prefix before it becomes a topic again. Retained messages are kept under
// their inside subjects, so a subscription finds those of its own account only. The
// subjects another account exports and the client's account imports are extra
// broker subscriptions (importSink) whose deliveries are renamed into the
// importer's space.
//
// A session is the account's: it is kept under sessionKey, the client id alone for
// the global account (as before accounts) and the account's name, NUL and the
// client id for another, so that two accounts' clients with the same id have two
// sessions. Stored records keep the key and the filters as the client wrote them;
// the prefix comes back from the key. The global account costs nothing per
// message: its prefix is empty.

// sessionKey is the key of the session of clientID in account a.
func sessionKey(a *auth.Account, clientID string) string {
	if a.Global() {
		return clientID
	}
	return a.Name + "\x00" + clientID
}

// splitKey returns the account ("" for the global one) and the client id of a
// session key. Client ids cannot hold NUL, so the last one ends the account.
func splitKey(key string) (account, clientID string) {
	i := strings.LastIndexByte(key, 0)
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

// clientIDOf is the client id of a session key.
func clientIDOf(key string) string {
	_, id := splitKey(key)
	return id
}

// keyPrefix is the subject prefix of the account of a session key: "" for the
// global account.
func keyPrefix(key string) string {
	acct, _ := splitKey(key)
	if acct == "" {
		return ""
	}
	return auth.AccountPrefix + acct + "."
}

// accountName is the name of the account of u ("" for the global one).
func accountName(u *auth.User) string {
	if u == nil || u.Account.Global() {
		return ""
	}
	return u.Account.Name
}

// external is the account's name of subj, a subject of its space (prefix, "" for
// the global account, is the account's).
func external(subj []byte, prefix string) []byte {
	if len(prefix) == 0 {
		return subj
	}
	if len(subj) >= len(prefix) && string(subj[:len(prefix)]) == prefix {
		return subj[len(prefix):]
	}
	return subj
}

// externalReply is the account's name of a reply subject; one outside its space
// (none is: replies do not cross accounts) is dropped.
func externalReply(reply []byte, prefix string) []byte {
	if len(prefix) == 0 || len(reply) == 0 {
		return reply
	}
	if len(reply) >= len(prefix) && string(reply[:len(prefix)]) == prefix {
		return reply[len(prefix):]
	}
	return nil
}

// importSink delivers to a session the messages of another account's subjects its
// account imports, renamed into its own space (im's Add is the session's prefix
// and the import's). Replies do not cross accounts.
type importSink struct {
	s  *session
	im auth.ImportedSubscription
	// subj is the subject of the session's filter (in the account's names) the
	// import was made for.
	subj string
	// permit, when set, decides each message by the importer's name of its
	// subject (the user's permissions); it changes when a reload of the users
	// file changes them (setPermit).
	permit atomic.Pointer[func(subject []byte) bool]
}

// setPermit makes f (nil: none) the sink's check.
func (k *importSink) setPermit(f func(subject []byte) bool) {
	if f == nil {
		k.permit.Store(nil)
		return
	}
	k.permit.Store(&f)
}

// Deliver implements broker.Sink.
func (k *importSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	var buf [256]byte
	mm := *m
	mm.Subject = k.im.AppendLocal(buf[:0], m.Subject)
	mm.Reply = nil
	if f := k.permit.Load(); f != nil && !(*f)(external(mm.Subject, k.s.prefix())) {
		return false
	}
	one := [1]*broker.Subscription{sub}
	return k.s.DeliverMatched(one[:], &mm)
}

// Flush implements broker.Sink.
func (k *importSink) Flush() { k.s.Flush() }

// Stall implements broker.Staller.
func (k *importSink) Stall() <-chan struct{} { return k.s.Stall() }

// Stuck implements broker.Staller.
func (k *importSink) Stuck() { k.s.Stuck() }

// importQueue is the queue group of a shared subscription of the session of key
// to imported subjects: queue groups of one subject are one group whatever their
// filters, so the importer's group is named apart from the exporter's own groups
// and other importers' ("" stays "": no group).
func importQueue(key, queue string) string {
	if queue == "" {
		return ""
	}
	acct, _ := splitKey(key)
	return auth.ImportQueue(acct, queue)
}

// imported reports whether sub is one of a session's import subscriptions.
func imported(sub *broker.Subscription) bool {
	_, ok := sub.Sink.(*importSink)
	return ok
}

// keyAttr is a session key as logs show it: the client id, after the account for
// one that is not the global account's.
func keyAttr(key string) slog.Attr {
	acct, id := splitKey(key)
	if acct == "" {
		return slog.String("client_id", id)
	}
	return slog.Group("", slog.String("account", acct), slog.String("client_id", id))
}
