package jsbus_test

import (
	"context"
	"testing"

	"github.com/tern-mq/tern/bench/internal/jsbus"
	"github.com/tern-mq/tern/bench/internal/jsbus/jstest"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/bench/internal/streambench/streambenchtest"
)

// TestWorkloads runs every stream workload against a nats-server -js started for the
// test (scripts/deps.sh installs nats-server).
func TestWorkloads(t *testing.T) {
	s := jstest.Start(t)
	streambenchtest.CheckWorkloads(t, jsbus.New(s.URL), 2000, 4<<20)
}

// TestReplayModes replays with both of nats.go's ordered consumers.
func TestReplayModes(t *testing.T) {
	s := jstest.Start(t)
	for _, mode := range []string{jsbus.ReplayPush, jsbus.ReplayPull} {
		opt, err := jsbus.ReplayMode(mode)
		if err != nil {
			t.Fatal(err)
		}
		cfg := streambench.Config{Workload: streambench.WorkReplay, Size: 1024, Msgs: 4096}
		res, err := streambench.Run(context.Background(), jsbus.New(s.URL, opt), cfg)
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, res)
		}
		streambenchtest.CheckExact(t, cfg, res)
	}
	if _, err := jsbus.ReplayMode("sideways"); err == nil {
		t.Fatal("unknown replay mode accepted")
	}
}
