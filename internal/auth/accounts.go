package auth

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/cliflags"
)

// AccountPrefix starts the subjects of every account but the global one: an
// account's client publishing to "orders.new" publishes to "$A.<account>.orders.new"
// inside the server, so accounts share nothing unless they export and import.
const AccountPrefix = "$A."

// GlobalAccount names the account of users that name none; its subjects are not
// prefixed.
const GlobalAccount = "global"

// Account is a subject space of its own, with limits. Accounts are immutable
// once built (a reload builds new ones); their usage counters outlive reloads.
type Account struct {
	Name   string
	Limits AccountLimits
	prefix []byte // AccountPrefix + Name + ".", empty for the global account
	// imports are the subjects of other accounts this account's clients may
	// subscribe to; services those its clients may send requests to.
	imports  []subjectImport
	services []serviceImport
	usage    *accountUsage
}

// AccountLimits bound what an account's clients may use; zero means no limit.
// Connections and subscriptions count across a cluster (what the other nodes
// report, SetRemoteUsage), the message rate on each node.
type AccountLimits struct {
	MaxConnections   int `toml:"max_connections"`
	MaxSubscriptions int `toml:"max_subscriptions"`
	// MaxMsgRate is messages per second the account's clients may publish; a
	// client over it is slowed down (its reads wait), not refused.
	MaxMsgRate int `toml:"max_msg_rate"`
	// MaxStorage bounds the account's streams, across the server (or the
	// cluster): the sum of their max_bytes. With it, each of the account's
	// streams must set max_bytes.
	MaxStorage ByteSize `toml:"max_storage"`
	// MaxStreams bounds how many streams the account has.
	MaxStreams int `toml:"max_streams"`
}

// ByteSize is a byte count in the users file: an integer, or a string with a
// unit as the server's configuration takes them ("10GiB", "500MB").
type ByteSize int64

// UnmarshalTOML implements toml.Unmarshaler.
func (b *ByteSize) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("byte size %d: must not be negative", x)
		}
		*b = ByteSize(x)
		return nil
	case string:
		n, err := cliflags.ParseByteSize(x)
		if err != nil {
			return err
		}
		*b = ByteSize(n)
		return nil
	}
	return fmt.Errorf("byte size %v: want an integer or a string such as \"10GiB\"", v)
}

// subjectImport is another account's exported subjects, seen under local.
type subjectImport struct {
	from  *Account
	local pattern // the subjects as the importer sees them
	strip int     // tokens of the local prefix
	add   string  // the local prefix with its dot, "" for none
	// remote is the exporter's pattern, in the exporter's own (unprefixed) terms.
	remote pattern
}

// serviceImport is another account's exported service, called under local.
type serviceImport struct {
	from  *Account
	local pattern // the subjects as the importer sees them
	strip int     // tokens of the local prefix
	resp  ResponseType
}

// ResponseType is how an exported service answers: what the server keeps of a
// request's reply subject, and for how long.
type ResponseType struct {
	// Stream: any number of responses, until Threshold has passed; otherwise
	// the first response only (within Threshold).
	Stream    bool
	Threshold time.Duration
}

// DefaultResponseThreshold is how long a cross-account request's reply subject
// stays mapped when the export does not say.
const DefaultResponseThreshold = 2 * time.Minute

// ServiceCall is a request of one account's client to a service another account
// exports (Account.Service).
type ServiceCall struct {
	Exporter *Account
	Response ResponseType
	strip    int
}

// Global reports whether a is the global account (nil is too).
func (a *Account) Global() bool { return a == nil || len(a.prefix) == 0 }

// Prefix is what the account's subjects start with inside the server, "" for
// the global account.
func (a *Account) Prefix() string {
	if a == nil {
		return ""
	}
	return string(a.prefix)
}

// AppendInternal appends the server's name of the account's subject to dst.
func (a *Account) AppendInternal(dst, subject []byte) []byte {
	if a.Global() {
		return append(dst, subject...)
	}
	return append(append(dst, a.prefix...), subject...)
}

// External is the account's name of a subject inside the server, and whether
// the subject is the account's own.
func (a *Account) External(internal []byte) ([]byte, bool) {
	if a.Global() {
		return internal, true
	}
	if bytes.HasPrefix(internal, a.prefix) {
		return internal[len(a.prefix):], true
	}
	return internal, false
}

// ImportedSubscription is a subscription an account's client makes to another
// account's subjects: Filter is the broker's filter; a delivered subject loses
// Strip bytes and gains Add in front, to be the importer's.
type ImportedSubscription struct {
	Filter string
	Strip  int
	Add    string
}

// AppendLocal appends to dst the importer's name of subject, a subject the
// subscription delivered (the exporter's, inside the server). Crossing
// accounts, a message keeps no reply subject.
func (im ImportedSubscription) AppendLocal(dst, subject []byte) []byte {
	if len(subject) < im.Strip {
		return append(dst, im.Add...)
	}
	return append(append(dst, im.Add...), subject[im.Strip:]...)
}

// Imports returns the subscriptions a client of a needs besides its own for
// filter (in a's terms): one per import the filter reaches.
func (a *Account) Imports(filter string) []ImportedSubscription {
	if a == nil || len(a.imports) == 0 {
		return nil
	}
	f, err := parsePattern(filter)
	if err != nil {
		return nil
	}
	var out []ImportedSubscription
	for _, im := range a.imports {
		both, ok := intersect(f, im.local)
		if !ok {
			continue
		}
		remote := both[im.strip:]
		if len(remote) == 0 {
			continue
		}
		exporterPrefix := im.from.Prefix()
		out = append(out, ImportedSubscription{
			Filter: exporterPrefix + remote.String(),
			Strip:  len(exporterPrefix),
			Add:    im.add,
		})
	}
	return out
}

// Service reports whether subject, a publish subject in a's terms, calls a
// service a imports, and which.
func (a *Account) Service(subject []byte) (ServiceCall, bool) {
	if a == nil || len(a.services) == 0 {
		return ServiceCall{}, false
	}
	for _, si := range a.services {
		if si.local.matches(subject) {
			return ServiceCall{Exporter: si.from, Response: si.resp, strip: si.strip}, true
		}
	}
	return ServiceCall{}, false
}

// AppendSubject appends the server's name of the exporter's subject the call
// reaches: subject (the importer's) without the import's prefix, in the
// exporter's account.
func (sc ServiceCall) AppendSubject(dst, subject []byte) []byte {
	for range sc.strip {
		i := bytes.IndexByte(subject, '.')
		if i < 0 {
			break
		}
		subject = subject[i+1:]
	}
	return sc.Exporter.AppendInternal(dst, subject)
}

// ImportQueue is the queue group an importing account's clients form on
// imported subjects: queue groups of one subject are one group, so the
// importer's group is named apart from the exporter's and other importers'
// groups of the same name ("" stays "": no group).
func ImportQueue(account, queue string) string {
	if queue == "" {
		return ""
	}
	return "$I:" + account + ":" + queue
}

// intersect returns a pattern matching exactly the subjects both a and b match,
// when there is one.
func intersect(a, b pattern) (pattern, bool) {
	var out pattern
	for i := 0; ; i++ {
		switch {
		case i == len(a) && i == len(b):
			return out, true
		case i == len(a) || i == len(b):
			return nil, false
		case a[i] == ">":
			return append(out, b[i:]...), true
		case b[i] == ">":
			return append(out, a[i:]...), true
		case a[i] == "*":
			out = append(out, b[i])
		case b[i] == "*" || a[i] == b[i]:
			out = append(out, a[i])
		default:
			return nil, false
		}
	}
}

// accountUsage counts what an account's clients use on this node.
type accountUsage struct {
	mu    sync.Mutex
	conns int
	subs  int
	// What the cluster's other nodes last reported of the account (their sum):
	// the connection and subscription limits hold across the cluster.
	remoteConns, remoteSubs int
	// The message rate's token bucket.
	tokens float64
	last   time.Time
}

// AcquireConnection counts a new connection of the account; false when the
// account has its maximum.
func (a *Account) AcquireConnection() bool {
	if a == nil || a.usage == nil {
		return true
	}
	u := a.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if a.Limits.MaxConnections > 0 && u.conns+u.remoteConns >= a.Limits.MaxConnections {
		return false
	}
	u.conns++
	return true
}

// ReleaseConnection uncounts a connection AcquireConnection counted.
func (a *Account) ReleaseConnection() {
	if a == nil || a.usage == nil {
		return
	}
	a.usage.mu.Lock()
	a.usage.conns--
	a.usage.mu.Unlock()
}

// AcquireSubscriptions counts n new subscriptions; false (nothing counted)
// when they would pass the account's maximum.
func (a *Account) AcquireSubscriptions(n int) bool {
	if a == nil || a.usage == nil {
		return true
	}
	u := a.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if a.Limits.MaxSubscriptions > 0 && u.subs+u.remoteSubs+n > a.Limits.MaxSubscriptions {
		return false
	}
	u.subs += n
	return true
}

// AddSubscriptions counts n subscriptions whatever the account's maximum: those
// a server restores (an MQTT persistent session's after a restart), which were
// allowed when they were made.
func (a *Account) AddSubscriptions(n int) {
	if a == nil || a.usage == nil {
		return
	}
	a.usage.mu.Lock()
	a.usage.subs += n
	a.usage.mu.Unlock()
}

// ReleaseSubscriptions uncounts n subscriptions.
func (a *Account) ReleaseSubscriptions(n int) {
	if a == nil || a.usage == nil {
		return
	}
	a.usage.mu.Lock()
	a.usage.subs -= n
	a.usage.mu.Unlock()
}

// PublishDelay takes one message from the account's rate and returns how long
// the publisher must wait first; 0 without a rate limit.
func (a *Account) PublishDelay(now time.Time) time.Duration {
	if a == nil || a.Limits.MaxMsgRate <= 0 {
		return 0
	}
	u := a.usage
	rate := float64(a.Limits.MaxMsgRate)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last.IsZero() {
		u.tokens, u.last = rate, now
	}
	// A burst of up to one second's worth.
	u.tokens = min(rate, u.tokens+now.Sub(u.last).Seconds()*rate)
	u.last = now
	u.tokens--
	if u.tokens >= 0 {
		return 0
	}
	return time.Duration(-u.tokens / rate * float64(time.Second))
}

// Usage reports the account's connections and subscriptions on this node.
func (a *Account) Usage() (conns, subs int) {
	if a == nil || a.usage == nil {
		return 0, 0
	}
	a.usage.mu.Lock()
	defer a.usage.mu.Unlock()
	return a.usage.conns, a.usage.subs
}

// accountDef is an account in the users file.
type accountDef struct {
	Name string `toml:"name"`
	AccountLimits
	Exports []exportDef `toml:"exports"`
	Imports []importDef `toml:"imports"`
}

// exportDef shares subjects (their messages) or services (request subjects whose
// responders answer the importer's requests) with other accounts.
type exportDef struct {
	Subjects string   `toml:"subjects"`
	Services string   `toml:"services"`
	To       []string `toml:"to"` // empty: every account
	// Response is "singleton" (the default: one response per request) or
	// "stream" (responses until the threshold); ResponseThreshold ("2m" by
	// default) is how long a request's reply subject stays mapped.
	Response          string `toml:"response"`
	ResponseThreshold string `toml:"response_threshold"`
}

// what is the export's pattern, and whether it exports services.
func (e *exportDef) what() (string, bool) {
	if e.Services != "" {
		return e.Services, true
	}
	return e.Subjects, false
}

type importDef struct {
	Account  string `toml:"account"`
	Subjects string `toml:"subjects"`
	Services string `toml:"services"`
	// Prefix puts the imported subjects under "<prefix>." for the importer.
	Prefix string `toml:"prefix"`
}

// what is the import's pattern, and whether it imports services.
func (i *importDef) what() (string, bool) {
	if i.Services != "" {
		return i.Services, true
	}
	return i.Subjects, false
}

// responseType reads an export's response settings.
func (e *exportDef) responseType() (ResponseType, error) {
	rt := ResponseType{Threshold: DefaultResponseThreshold}
	switch e.Response {
	case "", "singleton":
	case "stream":
		rt.Stream = true
	default:
		return rt, fmt.Errorf("response %q: want singleton or stream", e.Response)
	}
	if e.ResponseThreshold != "" {
		d, err := time.ParseDuration(e.ResponseThreshold)
		if err != nil || d <= 0 {
			return rt, fmt.Errorf("response_threshold %q: want a positive duration such as \"2m\"", e.ResponseThreshold)
		}
		rt.Threshold = d
	}
	return rt, nil
}

// MaxAccountName bounds an account's name.
const MaxAccountName = 64

func checkAccountName(name string) error {
	if name == "" || len(name) > MaxAccountName || strings.ContainsAny(name, ".*> \t\r\n$") {
		return fmt.Errorf("%w: account name %q: 1 to %d bytes, none of . * > $ or white space", ErrUsersFile, name, MaxAccountName)
	}
	return nil
}

// buildAccounts checks the accounts of a users file and links their imports to
// their exports. usage returns an account's counters, kept across reloads.
func buildAccounts(defs []accountDef, usage func(string) *accountUsage) (map[string]*Account, error) {
	accts := map[string]*Account{GlobalAccount: {Name: GlobalAccount, usage: usage(GlobalAccount)}}
	for i := range defs {
		d := &defs[i]
		if err := checkAccountName(d.Name); err != nil {
			return nil, err
		}
		a := accts[d.Name]
		switch {
		case a != nil && d.Name != GlobalAccount:
			return nil, fmt.Errorf("%w: account %q defined twice", ErrUsersFile, d.Name)
		case a == nil:
			a = &Account{Name: d.Name, prefix: []byte(AccountPrefix + d.Name + "."), usage: usage(d.Name)}
			accts[d.Name] = a
		}
		a.Limits = d.AccountLimits
		if a.Limits.MaxConnections < 0 || a.Limits.MaxSubscriptions < 0 || a.Limits.MaxMsgRate < 0 || a.Limits.MaxStreams < 0 {
			return nil, fmt.Errorf("%w: account %q: negative limit", ErrUsersFile, d.Name)
		}
	}
	byName := make(map[string]*accountDef, len(defs))
	for i := range defs {
		byName[defs[i].Name] = &defs[i]
	}
	for i := range defs {
		d := &defs[i]
		for _, ex := range d.Exports {
			if (ex.Subjects == "") == (ex.Services == "") {
				return nil, fmt.Errorf("%w: account %q: an export names subjects or services, one of the two", ErrUsersFile, d.Name)
			}
			what, service := ex.what()
			if _, err := parsePattern(what); err != nil {
				return nil, fmt.Errorf("%w: account %q: export: %w", ErrUsersFile, d.Name, err)
			}
			if strings.HasPrefix(what, "$") {
				return nil, fmt.Errorf("%w: account %q: export %q: the server's subjects cannot be exported", ErrUsersFile, d.Name, what)
			}
			if _, err := ex.responseType(); err != nil {
				return nil, fmt.Errorf("%w: account %q: export %q: %w", ErrUsersFile, d.Name, what, err)
			}
			if !service && (ex.Response != "" || ex.ResponseThreshold != "") {
				return nil, fmt.Errorf("%w: account %q: export %q: response settings are for services", ErrUsersFile, d.Name, what)
			}
			for _, to := range ex.To {
				if accts[to] == nil {
					return nil, fmt.Errorf("%w: account %q: export %q to %q: no such account", ErrUsersFile, d.Name, what, to)
				}
			}
		}
		for _, im := range d.Imports {
			what, _ := im.what()
			if d.Name == GlobalAccount {
				return nil, fmt.Errorf("%w: account %q: import of %q: the global account exports, it does not import", ErrUsersFile, d.Name, what)
			}
			if (im.Subjects == "") == (im.Services == "") {
				return nil, fmt.Errorf("%w: account %q: an import names subjects or services, one of the two", ErrUsersFile, d.Name)
			}
			if err := addImport(accts[d.Name], accts, byName, im); err != nil {
				return nil, fmt.Errorf("%w: account %q: import of %q from %q: %w", ErrUsersFile, d.Name, what, im.Account, err)
			}
		}
	}
	return accts, nil
}

func addImport(to *Account, accts map[string]*Account, defs map[string]*accountDef, im importDef) error {
	from := accts[im.Account]
	if from == nil {
		return fmt.Errorf("no such account")
	}
	if from == to {
		return fmt.Errorf("an account cannot import from itself")
	}
	what, service := im.what()
	remote, err := parsePattern(what)
	if err != nil {
		return err
	}
	// The exporter must export a pattern covering the import, of its kind, to
	// this account.
	var export *exportDef
	if d := defs[im.Account]; d != nil {
		for i := range d.Exports {
			ex := &d.Exports[i]
			exWhat, exService := ex.what()
			p, _ := parsePattern(exWhat)
			if exService == service && p.covers(remote) && (len(ex.To) == 0 || slices.Contains(ex.To, to.Name)) {
				export = ex
				break
			}
		}
	}
	if export == nil {
		if service {
			return fmt.Errorf("not exported as a service to this account")
		}
		return fmt.Errorf("not exported to this account")
	}
	local, strip := remote, 0
	add := ""
	if im.Prefix != "" {
		pre, err := parsePattern(im.Prefix)
		if err != nil || strings.ContainsAny(im.Prefix, "*>$") {
			return fmt.Errorf("prefix %q: want literal tokens", im.Prefix)
		}
		local = append(append(pattern(nil), pre...), remote...)
		strip, add = len(pre), im.Prefix+"."
	}
	if service {
		resp, _ := export.responseType()
		to.services = append(to.services, serviceImport{from: from, local: local, strip: strip, resp: resp})
		return nil
	}
	to.imports = append(to.imports, subjectImport{from: from, remote: remote, local: local, strip: strip, add: add})
	return nil
}
