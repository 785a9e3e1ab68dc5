package membership

import (
	"context"
	"log/slog"
	"strings"
)

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into slog
// records. Its INFO lines are demoted to debug because this package logs the same
// changes (joins, failures) itself with structure; its ERR lines are demoted to
// warnings because they are about peers or the network (a dead peer's failed
// ping), while this package logs errors of its own at error level. The lines it
// prints for refusals this package already logged are demoted to debug.
type logWriter struct{ log *slog.Logger }

var demoted = []string{
	"ignoring alive message for",
	"Conflicting address for",
	"Failed push/pull merge",
}

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
	if level > slog.LevelDebug {
		for _, d := range demoted {
			if strings.Contains(line, d) {
				level = slog.LevelDebug
				break
			}
		}
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, line, "from", "memberlist")
	}
	return len(p), nil
}
