// Package fileutil owns the crash-safe ways the project writes small files
// (definitions, hard states, snapshots, ids): a file replaced whole, a file written
// and fsynced, a directory fsynced so that a rename in it survives a crash.
package fileutil

import (
	"os"
	"path/filepath"
)

// WriteSynced creates (or truncates) path, writes b and, with sync, fsyncs the file.
// On failure the file is removed.
func WriteSynced(path string, b []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// WriteAtomic replaces path with b: written to path+".tmp", renamed over path and,
// with sync, fsynced before the rename and the directory after it, so that a crash
// leaves the old file or the new one, never a mix. On failure the temporary file is
// removed.
func WriteAtomic(path string, b []byte, sync bool) error {
	tmp := path + ".tmp"
	if err := WriteSynced(tmp, b, sync); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if sync {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// SyncDir fsyncs a directory: the names created, renamed or removed in it are then
// on disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
