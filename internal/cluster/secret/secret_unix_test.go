//go:build unix

package secret

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileRefusesPipe: a named pipe is refused before it is opened, which
// would wait for a writer.
func TestReadFileRefusesPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := ReadFile(fifo, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a named pipe: %v", err)
	}
}
