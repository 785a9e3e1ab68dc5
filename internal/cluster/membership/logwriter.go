package membership

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into slog
// records. Its INFO lines are demoted to debug because this package logs the same
// changes (joins, failures) itself with structure; its ERR lines are demoted to
// warnings because they are about peers or the network (a dead peer's failed
// ping), while this package logs errors of its own at error level. The lines it
// prints for refusals this package already logged are demoted to debug. The lines
// about gossip dropped for the cluster secret (keyRefusals) become one warning per
// peer and kind every logEvery, saying what to fix.
type logWriter struct {
	log *slog.Logger
	// limit rate-limits the refusals of keyRefusals; nil logs every one.
	limit *rateLimit
}

var demoted = []string{
	"ignoring alive message for",
	"Conflicting address for",
	"Failed push/pull merge",
}

// keyRefusals are what memberlist says when it drops gossip over the cluster
// secret, and what this package says instead.
var keyRefusals = []struct{ match, msg string }{
	// This node has the key; the peer's gossip is plaintext or under another key.
	{"encryption is configured but remote state is not encrypted", refusedNoKey},
	{"no installed keys could decrypt the message", refusedOtherKey},
	{"Decrypt packet failed", refusedOtherKey},
	// This node has no key; the peer encrypts.
	{"remote state is encrypted and encryption is not configured", refusedNeedKey},
}

const (
	refusedNoKey    = "gossip refused: the peer does not encrypt gossip (it has no cluster_secret_file?)"
	refusedOtherKey = "gossip refused: not encrypted with this cluster's key (a node without the cluster secret, or with another one)"
	refusedNeedKey  = "gossip refused: the peer encrypts gossip and this node has no cluster secret (set cluster_secret_file)"
)

func (w logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelDebug},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelWarn},
		{"[ERROR]", slog.LevelWarn},
	} {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			line, level = strings.TrimSpace(rest), l.level
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	ctx := context.Background()
	if level > slog.LevelDebug {
		if msg := keyRefusal(line); msg != "" {
			peer := peerOf(line)
			if w.limit == nil || w.limit.allow(msg+"|"+peer) {
				w.log.Warn(msg, "peer", peer, "detail", line, "from", "memberlist")
			}
			return len(p), nil
		}
		for _, d := range demoted {
			if strings.Contains(line, d) {
				level = slog.LevelDebug
				break
			}
		}
	}
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, line, "from", "memberlist")
	}
	return len(p), nil
}

// keyRefusal is what to log for a memberlist error or line about gossip dropped
// over the cluster secret, "" for any other.
func keyRefusal(text string) string {
	for _, r := range keyRefusals {
		if strings.Contains(text, r.match) {
			return r.msg
		}
	}
	return ""
}

// peerOf finds the peer's host in a memberlist line ("... from=10.0.0.2:41234"),
// without the port: a TCP peer's port changes with every connection.
func peerOf(line string) string {
	_, addr, ok := strings.Cut(line, "from=")
	if !ok {
		return ""
	}
	addr, _, _ = strings.Cut(addr, " ")
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// rateLimit lets a line about one key through once every logEvery. It keeps at
// most maxLogged keys: peers are addresses, which another network could invent
// without end.
type rateLimit struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (r *rateLimit) allow(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.seen == nil {
		r.seen = make(map[string]time.Time)
	}
	if t, ok := r.seen[key]; ok && now.Sub(t) < logEvery {
		return false
	}
	if len(r.seen) >= maxLogged {
		for k, t := range r.seen {
			if now.Sub(t) >= logEvery {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= maxLogged {
			return false
		}
	}
	r.seen[key] = now
	return true
}
