// Package runtimetune owns the Go runtime settings of a server process: how often
// the garbage collector runs (GOGC) and the memory it keeps the process under
// (GOMEMLIMIT). They are process-wide, so only a command that runs one server
// (tern server, bench/ternserve) applies them; a library user of internal/server
// keeps its own.
package runtimetune

import (
	"bufio"
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/tern-mq/tern/internal/server"
)

// defaultGCPercent is the server's heap growth between collections unless told
// otherwise. The live heap of a busy node is small (a few MB: buffers are pooled),
// so Go's 100 collects several times a second, and a publish that meets a mark
// phase waits for it; 400 collects a quarter as often for a few more MB, and the
// memory limit below keeps a large heap from growing without bound.
const defaultGCPercent = 400

// gcSettings are the collector settings a server process runs with, and where each
// came from (for the log).
type gcSettings struct {
	percent                int
	limit                  int64
	percentFrom, limitFrom string
}

// chooseGC decides the collector settings: the configuration's when set, else the
// GOGC / GOMEMLIMIT environment variables (which the runtime has already applied),
// else the server's defaults; memory is the machine's or cgroup's memory, 0 if
// unknown.
func chooseGC(cfg server.Config, getenv func(string) string, memory int64) gcSettings {
	g := gcSettings{percent: cfg.GCPercent, limit: cfg.MemoryLimit, percentFrom: "config", limitFrom: "config"}
	if g.percent == 0 {
		if getenv("GOGC") != "" {
			g.percent, g.percentFrom = 0, "GOGC"
		} else {
			g.percent, g.percentFrom = defaultGCPercent, "default"
		}
	}
	if g.limit == 0 {
		switch {
		case getenv("GOMEMLIMIT") != "":
			g.limitFrom = "GOMEMLIMIT"
		case memory > 0:
			g.limit, g.limitFrom = memory/2, "default"
		default:
			g.limitFrom = "none"
		}
	}
	return g
}

// Apply sets the process's collector as cfg's gc_percent and memory_limit say, or
// as the environment or the defaults do, and logs the result. A setting left to
// the environment is not touched: the runtime read it at start.
func Apply(cfg server.Config, log *slog.Logger) {
	g := chooseGC(cfg, os.Getenv, systemMemory())
	if g.percent != 0 {
		debug.SetGCPercent(g.percent)
	}
	if g.limit != 0 {
		debug.SetMemoryLimit(g.limit)
	}
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := any(debug.SetMemoryLimit(-1))
	if limit == any(int64(math.MaxInt64)) {
		limit = "none"
	}
	log.Info("go runtime", "gc_percent", percent, "gc_percent_from", g.percentFrom,
		"memory_limit", limit, "memory_limit_from", g.limitFrom)
}

// systemMemory is the memory the process may use: the smaller of the machine's
// (/proc/meminfo) and its cgroup v2 limit; 0 when neither can be read.
func systemMemory() int64 {
	total := memTotal("/proc/meminfo")
	if c := cgroupMemoryMax("/sys/fs/cgroup/memory.max"); c > 0 && (total == 0 || c < total) {
		total = c
	}
	return total
}

// memTotal reads MemTotal from a meminfo file, in bytes; 0 if it cannot.
func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil || kb <= 0 {
			return 0
		}
		return kb << 10
	}
	return 0
}

// cgroupMemoryMax reads a cgroup v2 memory.max file, in bytes; 0 when it cannot or
// when it says "max" (no limit).
func cgroupMemoryMax(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
