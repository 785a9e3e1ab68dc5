package runtimetune

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tern-mq/tern/internal/server"
)

func TestChooseGC(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	const mem = 8 << 30
	for _, tc := range []struct {
		name    string
		percent int
		limit   int64
		vars    map[string]string
		memory  int64
		want    gcSettings
	}{
		{name: "defaults", memory: mem,
			want: gcSettings{percent: defaultGCPercent, limit: mem / 2, percentFrom: "default", limitFrom: "default"}},
		{name: "environment wins over defaults", memory: mem, vars: map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"},
			want: gcSettings{percentFrom: "GOGC", limitFrom: "GOMEMLIMIT"}},
		{name: "configuration wins over environment", percent: 150, limit: 3 << 30, memory: mem,
			vars: map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"},
			want: gcSettings{percent: 150, limit: 3 << 30, percentFrom: "config", limitFrom: "config"}},
		{name: "off until the limit", percent: -1, memory: mem,
			want: gcSettings{percent: -1, limit: mem / 2, percentFrom: "config", limitFrom: "default"}},
		{name: "memory unknown", memory: 0,
			want: gcSettings{percent: defaultGCPercent, percentFrom: "default", limitFrom: "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server.DefaultConfig()
			cfg.GCPercent, cfg.MemoryLimit = tc.percent, tc.limit
			if got := chooseGC(cfg, env(tc.vars), tc.memory); got != tc.want {
				t.Fatalf("chooseGC = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSystemMemoryFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemFree:         1000 kB\nMemTotal:       24576000 kB\nBuffers: 1 kB\n")
	if got, want := memTotal(meminfo), int64(24576000)<<10; got != want {
		t.Errorf("memTotal = %d, want %d", got, want)
	}
	if got := memTotal(write("bad", "MemTotal: lots\n")); got != 0 {
		t.Errorf("memTotal of a bad file = %d, want 0", got)
	}
	if got := memTotal(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("memTotal of no file = %d, want 0", got)
	}
	if got := cgroupMemoryMax(write("max", "max\n")); got != 0 {
		t.Errorf("cgroupMemoryMax(max) = %d, want 0", got)
	}
	if got := cgroupMemoryMax(write("limit", "2147483648\n")); got != 2<<30 {
		t.Errorf("cgroupMemoryMax = %d, want %d", got, 2<<30)
	}
}

func TestApplySetsTheRuntimeAndLogsIt(t *testing.T) {
	oldPercent := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	cfg := server.DefaultConfig()
	cfg.GCPercent, cfg.MemoryLimit = 250, 3<<30
	var logged bytes.Buffer
	Apply(cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GC percent after Apply = %d, want 250", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 3<<30 {
		t.Errorf("memory limit after Apply = %d, want %d", got, int64(3<<30))
	}
	for _, want := range []string{"gc_percent=250", "gc_percent_from=config", "memory_limit=3221225472", "memory_limit_from=config"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log %q lacks %q", logged.String(), want)
		}
	}
}
