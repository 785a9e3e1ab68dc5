//go:build unix

package stream

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrDirInUse reports a store directory another process holds.
var ErrDirInUse = errors.New("store directory in use by another process")

// lockDir takes an exclusive lock on dir/LOCK for the life of the process (or until
// the returned file is closed): two servers on one directory would corrupt each
// other's logs.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("stream engine: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("stream engine: %s: %w", dir, ErrDirInUse)
		}
		return nil, fmt.Errorf("stream engine: lock %s: %w", dir, err)
	}
	return f, nil
}
