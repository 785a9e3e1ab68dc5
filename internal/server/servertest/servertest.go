// Package servertest starts real Tern servers on loopback for tests of other packages
// (the client, the CLI, the benchmark harness).
package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
)

// Start runs a server on 127.0.0.1 with free native and MQTT ports, no HTTP listener and its streams
// in a temporary directory, after
// letting mutate adjust the configuration (it may be nil). The server is shut down
// when the test ends.
func Start(t testing.TB, mutate func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = "127.0.0.1", 0, "", 0, 0, -1
	cfg.StoreDir = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return s
}
