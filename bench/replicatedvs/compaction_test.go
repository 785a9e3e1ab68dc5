package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirBytes: the disk space of a directory's files, nested ones too, counts
// what is allocated (a sparse file's hole does not) and leaves out Kafka's
// *.deleted segments; the segment files (*.log) are counted.
func TestDirBytes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("00000000000000000000.log", 64<<10)
	write("p0/00000000000000000001.log", 32<<10)
	write("00000000000000000000.log.deleted", 1<<20)
	sparse, err := os.Create(filepath.Join(dir, "00000000000000000000.index"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(10 << 20); err != nil { // as Kafka preallocates an index
		t.Fatal(err)
	}
	sparse.Close()
	n, segs, err := dirBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(96 << 10); n < want || n > want+16<<10 || segs != 2 {
		t.Fatalf("dirBytes = %d in %d segment files, want about %d in 2", n, segs, want)
	}
	if n, segs, err := dirBytes(filepath.Join(dir, "missing")); err != nil || n != 0 || segs != 0 {
		t.Fatalf("a missing directory: %d, %d, %v", n, segs, err)
	}
}
