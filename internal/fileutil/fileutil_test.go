package fileutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomicReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, sync := range []bool{true, false} {
		for _, content := range []string{"first", "second, longer", "3"} {
			if err := WriteAtomic(path, []byte(content), sync); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != content {
				t.Fatalf("read %q, %v; want %q", got, err, content)
			}
			if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
				t.Fatalf("temporary file left behind: %v", err)
			}
		}
	}
}

func TestWriteAtomicFailureLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteAtomic(path, []byte("old"), true); err != nil {
		t.Fatal(err)
	}
	// A directory where the temporary file should go makes the write fail.
	if err := os.Mkdir(path+".tmp", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("new"), true); err == nil {
		t.Fatal("write over a blocked temporary file succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("after a failed replace: %q, want old", got)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
}
