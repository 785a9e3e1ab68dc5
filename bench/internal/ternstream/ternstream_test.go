package ternstream_test

import (
	"testing"

	"github.com/tern-mq/tern/bench/internal/streambench/streambenchtest"
	"github.com/tern-mq/tern/bench/internal/ternstream"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// TestWorkloads runs every stream workload against an in-process Tern server.
func TestWorkloads(t *testing.T) {
	s := servertest.Start(t, nil)
	d, err := ternstream.New(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	streambenchtest.CheckWorkloads(t, d, 2000, 4<<20)
}
