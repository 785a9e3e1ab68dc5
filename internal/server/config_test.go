package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestConfigDefaultsWithNothingGiven(t *testing.T) {
	cfg, err := LoadConfig(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg != DefaultConfig() {
		t.Fatalf("got %+v, want defaults", cfg)
	}
	if cfg.Port != 7400 || cfg.HTTPAddr != "0.0.0.0:7480" || cfg.MaxPayload != 1<<20 {
		t.Fatalf("defaults changed: %+v", cfg)
	}
}

func TestConfigPrecedenceFileEnvFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tern.toml")
	file := `
port = 7500
max_payload = "2MiB"
ping_interval = "30s"
server_name = "from-file"
slow_consumer_policy = "disconnect"
`
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig([]string{"--config", path, "--port", "7600"},
		env(map[string]string{"TERN_PORT": "7550", "TERN_SERVER_NAME": "from-env"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 7600 {
		t.Errorf("flag should win: port %d", cfg.Port)
	}
	if cfg.ServerName != "from-env" {
		t.Errorf("env should beat file: name %q", cfg.ServerName)
	}
	if cfg.MaxPayload != 2<<20 || cfg.PingInterval != 30*time.Second || cfg.SlowConsumerPolicy != "disconnect" {
		t.Errorf("file values lost: %+v", cfg)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	_ = os.WriteFile(bad, []byte("no_such_setting = 1\n"), 0o644)
	for name, args := range map[string][]string{
		"unknown key":  {"--config", bad},
		"missing file": {"--config", filepath.Join(dir, "absent.toml")},
		"bad duration": {"--ping-interval", "soon"},
		"bad size":     {"--max-payload", "lots"},
		"stray arg":    {"extra"},
	} {
		if _, err := LoadConfig(args, env(nil), &bytes.Buffer{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg := DefaultConfig()
	cfg.SlowConsumerPolicy = "ignore"
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "slow consumer policy") {
		t.Errorf("bad policy accepted: %v", err)
	}
}

func TestHelpListsEveryOption(t *testing.T) {
	var out bytes.Buffer
	_, err := LoadConfig([]string{"--help"}, env(nil), &out)
	if err == nil {
		t.Fatal("--help returned no error")
	}
	for _, o := range options {
		if !strings.Contains(out.String(), "-"+flagName(o.key)) || !strings.Contains(out.String(), envName(o.key)) {
			t.Errorf("--help lacks %s", o.key)
		}
	}
}
