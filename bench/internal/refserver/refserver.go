// Package refserver finds the reference servers the bench module's tests start: the
// pinned builds that bench/lib.sh installs into bench/.tools/bin (scripts/deps.sh runs
// it), not whatever of the same name is on PATH.
package refserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// NATSServerEnv, when set, is the nats-server binary to use instead of the project's.
const NATSServerEnv = "TERN_NATS_SERVER"

// NATSServer returns the path of the nats-server binary for tests: $TERN_NATS_SERVER
// if set, else bench/.tools/bin/nats-server. It fails the test when neither exists.
func NATSServer(t testing.TB) string {
	t.Helper()
	bin, err := natsServer()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func natsServer() (string, error) {
	if bin := os.Getenv(NATSServerEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", NATSServerEnv, err)
		}
		return bin, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".tools", "bin", "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("nats-server not installed in %s: run scripts/deps.sh (or set %s)", filepath.Dir(bin), NATSServerEnv)
	}
	return bin, nil
}

// moduleRoot is the directory of the bench module's go.mod: the nearest one above the
// working directory, which for a test is its package's source directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
