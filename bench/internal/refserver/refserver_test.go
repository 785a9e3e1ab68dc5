package refserver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNATSServerEnv(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nats-server")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(NATSServerEnv, bin)
	if got := NATSServer(t); got != bin {
		t.Fatalf("NATSServer() = %q, want %q", got, bin)
	}
	t.Setenv(NATSServerEnv, bin+".missing")
	if _, err := natsServer(); err == nil {
		t.Fatal("a missing $TERN_NATS_SERVER was accepted")
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(root) != "bench" {
		t.Fatalf("module root %s, want the bench directory", root)
	}
}
