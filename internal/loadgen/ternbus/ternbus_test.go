package ternbus_test

import (
	"testing"

	"github.com/tern-mq/tern/internal/loadgen/loadgentest"
	"github.com/tern-mq/tern/internal/loadgen/ternbus"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// TestModes runs every workload against an in-process server and requires exact
// delivery counts.
func TestModes(t *testing.T) {
	s := servertest.Start(t, nil)
	loadgentest.CheckModes(t, ternbus.Dialer("tern://"+s.Addr().String()), 2000)
}
