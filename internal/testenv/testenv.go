// Package testenv finds, for tests, what scripts/deps.sh installs in the repository:
// the repository's root and the interpreter of its Python virtual environment; it
// tells tests which goroutine runs them (GoroutineID), and collects output that
// other goroutines write (Buffer). Only tests import it.
package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// Root is the repository's root: the nearest directory above the test's working
// directory that holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// Python is the interpreter of the project's virtual environment (.venv), where
// scripts/deps.sh installs what tests need (forWhat names it, for the message when
// it is missing).
func Python(t testing.TB, forWhat string) string {
	t.Helper()
	py := filepath.Join(Root(t), ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s missing: run scripts/deps.sh to install %s", py, forWhat)
	}
	return py
}

// GoroutineID is the running goroutine's number, from its stack's first line
// ("goroutine N [running]:"): for tests asserting which goroutine did some work.
func GoroutineID() uint64 {
	var b [64]byte
	f := bytes.Fields(b[:runtime.Stack(b[:], false)])
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}

// Buffer collects what several goroutines write (a child process's output, a
// logger's) for a test to read while they go on.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
