package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// TestUDPKeygen: the key file is private, is not overwritten, and -public prints the
// key clients configure.
func TestUDPKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.key")
	var out bytes.Buffer
	if err := runUDPKeygen([]string{"-o", path}, &out); err != nil {
		t.Fatal(err)
	}
	pub, err := udp.ParseKey(out.String())
	if err != nil {
		t.Fatalf("printed %q: %v", out.String(), err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	priv, err := udp.ReadKeyFile(path)
	if err != nil || priv.Public() != pub {
		t.Fatalf("file holds the wrong key: %v", err)
	}
	if err := runUDPKeygen([]string{"-o", path}, &out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("overwrote the key: %v", err)
	}
	out.Reset()
	if err := runUDPKeygen([]string{"-public", path}, &out); err != nil || strings.TrimSpace(out.String()) != pub.String() {
		t.Fatalf("-public: %q %v", out.String(), err)
	}
	out.Reset()
	if err := runUDPKeygen(nil, &out); err != nil || !strings.HasPrefix(out.String(), "private ") {
		t.Fatalf("no -o: %q %v", out.String(), err)
	}
}
