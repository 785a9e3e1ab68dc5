package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// TestLoadUDPKeys: key files fill the listener's keys; a PSK without a key, an
// unreadable or malformed file are configuration errors.
func TestLoadUDPKeys(t *testing.T) {
	dir := t.TempDir()
	priv, _ := udp.GenerateKey()
	psk, _ := udp.GenerateKey()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile, pskFile, bad := write("k", priv.String()+"\n"), write("p", psk.String()), write("bad", "not a key")
	var ucfg udp.Config
	if err := loadUDPKeys(&ucfg, Config{UDPKeyFile: keyFile, UDPPSKFile: pskFile}); err != nil || ucfg.PrivateKey != priv || ucfg.PSK != psk {
		t.Fatalf("keys not loaded: %v", err)
	}
	for name, cfg := range map[string]Config{
		"psk without key": {UDPPSKFile: pskFile},
		"missing file":    {UDPKeyFile: filepath.Join(dir, "none")},
		"malformed key":   {UDPKeyFile: bad},
		"malformed psk":   {UDPKeyFile: keyFile, UDPPSKFile: bad},
	} {
		if err := loadUDPKeys(&udp.Config{}, cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
