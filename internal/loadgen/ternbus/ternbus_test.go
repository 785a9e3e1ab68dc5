package ternbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/loadgen/loadgentest"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
	"github.com/tern-mq/tern/internal/server"
)

// TestModes runs every workload against an in-process server and requires exact
// delivery counts.
func TestModes(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr = "127.0.0.1", 0, ""
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
		_ = s.Shutdown(ctx)
	})
	loadgentest.CheckModes(t, ternbus.Dialer("tern://"+s.Addr().String()), 2000)
}
