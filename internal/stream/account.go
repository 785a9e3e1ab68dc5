package stream

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Streams of accounts (docs/security.md, "Accounts").
//
// An account's streams live in the account's subject space: the client of account
// X that asks for stream "ORDERS" capturing "orders.>" makes a stream that
// captures "$A.X.orders.>" inside the server. Everything the stream keeps and
// shows is in X's terms: its configuration, its stored messages' subjects
// (stripped of the prefix as they are captured), its consumers' filters, deliver
// and dead-letter subjects. Only what the engine hands the broker is prefixed:
// the subscriptions that capture, deliver subjects, ack reply subjects and dead
// letters.
//
// The engine knows a stream by its key: its name for the global account, and
// "$A.<account>.<name>" for another (names of accounts have no '.', names of
// streams neither, so a key splits back unambiguously). The global account's
// streams keep their names, directories and subjects as they were; an account's
// stream lives under <dir>/accounts/<account>/streams/<name>, its account also
// recorded in its stream.json.

// AccountLimits are what the engine enforces of an account's limits.
type AccountLimits struct {
	// MaxStorage bounds the sum of the max_bytes of the account's streams; with
	// it, every stream of the account must set max_bytes. 0: no limit.
	MaxStorage int64
	// MaxStreams bounds the account's streams; 0: no limit.
	MaxStreams int
}

// Key is the engine's name of an account's stream: the name itself for the
// global account ("" or auth.GlobalAccount), "$A.<account>.<name>" otherwise.
func Key(account, name string) string {
	if isGlobal(account) {
		return name
	}
	return auth.AccountPrefix + account + "." + name
}

// SplitKey is the account ("" for the global one) and name of a stream key.
func SplitKey(key string) (account, name string) {
	rest, ok := strings.CutPrefix(key, auth.AccountPrefix)
	if !ok {
		return "", key
	}
	account, name, _ = strings.Cut(rest, ".")
	return account, name
}

func isGlobal(account string) bool { return account == "" || account == auth.GlobalAccount }

// normAccount is "" for the global account, the name for any other.
func normAccount(account string) string {
	if isGlobal(account) {
		return ""
	}
	return account
}

// SubjectPrefix is what the account's subjects start with inside the server:
// "$A.<account>.", "" for the global account.
func SubjectPrefix(account string) string {
	if isGlobal(account) {
		return ""
	}
	return auth.AccountPrefix + account + "."
}

var acctPrefix = []byte(auth.AccountPrefix)

// CutAccount splits an internal subject of an account: its prefix
// ("$A.<account>."), the account's name and the rest. ok is false for a subject
// of the global account.
func CutAccount(subj []byte) (prefix, account, rest []byte, ok bool) {
	after, ok := bytes.CutPrefix(subj, acctPrefix)
	if !ok {
		return nil, nil, subj, false
	}
	i := bytes.IndexByte(after, '.')
	if i <= 0 {
		return nil, nil, subj, false
	}
	n := len(acctPrefix) + i + 1
	return subj[:n], after[:i], subj[n:], true
}

// accountDir is the directory of an account's data: its name with every byte
// but letters, digits, '-' and '_' written %XX, so that any account name makes one
// directory of its own.
func accountDir(account string) string {
	var b strings.Builder
	for i := 0; i < len(account); i++ {
		c := account[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (m *Manager) accountsDir() string { return filepath.Join(m.cfg.Dir, "accounts") }

// streamDir is where a stream of an account keeps its data.
func (m *Manager) streamDir(account, name string) string {
	if account == "" {
		return filepath.Join(m.streamsDir(), name)
	}
	return filepath.Join(m.accountsDir(), accountDir(account), "streams", name)
}

// AccountKnown reports whether the engine serves the account's requests: any
// account unless Config.Accounts says which exist.
func (m *Manager) AccountKnown(account string) bool {
	if account == "" || m.cfg.Accounts == nil {
		return true
	}
	_, ok := m.cfg.Accounts(account)
	return ok
}

// CheckAccount refuses a stream configuration (normalised) that would take the
// account past its limits, given the account's other streams' configurations
// (not cfg's stream's own). The global account has none here: the server's
// max_streams applies to it.
func (m *Manager) CheckAccount(account string, cfg streamapi.StreamConfig, others []streamapi.StreamConfig) error {
	account = normAccount(account)
	if account == "" || m.cfg.Accounts == nil {
		return nil
	}
	lim, ok := m.cfg.Accounts(account)
	if !ok {
		return fmt.Errorf("stream %q: %w: account %q is not defined", cfg.Name, ErrBadConfig, account)
	}
	if lim.MaxStreams > 0 && len(others) >= lim.MaxStreams {
		return fmt.Errorf("stream %q: %w: account %q has at most %d streams", cfg.Name, ErrLimit, account, lim.MaxStreams)
	}
	if lim.MaxStorage > 0 {
		if cfg.MaxBytes <= 0 {
			return fmt.Errorf("stream %q: %w: account %q has max_storage %d: its streams must set max_bytes", cfg.Name, ErrLimit, account, lim.MaxStorage)
		}
		used := int64(0)
		for _, o := range others {
			used += o.MaxBytes
		}
		if cfg.MaxBytes > lim.MaxStorage-used {
			return fmt.Errorf("stream %q: %w: max_bytes %d over what account %q has left of its max_storage %d (%d)",
				cfg.Name, ErrLimit, cfg.MaxBytes, account, lim.MaxStorage, max(lim.MaxStorage-used, 0))
		}
	}
	return nil
}

// accountConfigs are the configurations of the account's streams but name's;
// m.mu is held.
func (m *Manager) accountConfigs(account, name string) []streamapi.StreamConfig {
	var out []streamapi.StreamConfig
	for _, s := range m.streams {
		if s.acct == account && s.name != name {
			out = append(out, s.Config())
		}
	}
	return out
}
