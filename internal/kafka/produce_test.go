package kafka

import (
	"testing"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/streamapi"
)

// An idempotent producer's record ids are numbered ("<prefix><seq>"), which the
// stream's duplicate window keeps as runs: the prefix is made once per batch.
func TestIdempotentRecordIDs(t *testing.T) {
	prefix := appendIDPrefix(nil, 4711, 3, 2)
	if string(prefix) != "kafka:4711:3:2:" {
		t.Fatalf("prefix %q", prefix)
	}
	h := appendMsgID(nil, streamapi.HeaderMsgID, prefix, 2147483647)
	h = appendMsgID(h, streamapi.HeaderExpectedLastMsgID, prefix, 0)
	if id, _ := header.Block(h).Lookup(streamapi.HeaderMsgID); id != "kafka:4711:3:2:2147483647" {
		t.Errorf("id %q", id)
	}
	if id, _ := header.Block(h).Lookup(streamapi.HeaderExpectedLastMsgID); id != "kafka:4711:3:2:0" {
		t.Errorf("expected last id %q", id)
	}
}
