package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-mq/tern/internal/cluster/secret"
)

// TestClusterKeygen: the printed secret is 32 random bytes in base64, a new one
// each time; -o writes it to a private file the server reads, never over one.
func TestClusterKeygen(t *testing.T) {
	keygen := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runTern(context.Background(), &out, &out, append([]string{"cluster", "keygen"}, args...)...)
		return out.String(), err
	}
	a, err := keygen()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := keygen()
	sa, err := secret.Parse(a)
	if err != nil || len(sa) != 32 || a == b {
		t.Fatalf("printed %q then %q: %d bytes, %v", a, b, len(sa), err)
	}

	path := filepath.Join(t.TempDir(), "cluster.secret")
	if out, err := keygen("-o", path); err != nil || out != "" {
		t.Fatalf("-o: %q %v", out, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi.Mode(), err)
	}
	before, _ := os.ReadFile(path)
	if s, err := secret.ReadFile(path, nil); err != nil || len(s) != 32 {
		t.Fatalf("the file does not hold a secret: %v", err)
	}
	if _, err := keygen("--output", path); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("overwrote the secret: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the file changed")
	}
	if code, _, stderr := runExit(t, "cluster", "keygen", "extra"); code != 2 || !strings.Contains(stderr, "tern cluster keygen") {
		t.Fatalf("an argument: exit %d, %q", code, stderr)
	}
}
