//go:build !unix

package stream

import (
	"errors"
	"os"
)

// ErrDirInUse reports a store directory another process holds.
var ErrDirInUse = errors.New("store directory in use by another process")

// lockDir does not lock where there is no flock; one process per directory is then
// the operator's to ensure.
func lockDir(string) (*os.File, error) { return nil, nil }
