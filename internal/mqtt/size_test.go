package mqtt

import (
	"testing"
	"unsafe"
)

// TestIdleStateStaysSmall: an idle connection is its conn (which holds the session
// machine's Link) and its session; bytes added to either show in the idle-connection
// memory row of bench/RESULTS.md (a conn over 224 bytes or a session over 112 moves
// to the next allocation size class).
func TestIdleStateStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(conn{}); size > 224 {
		t.Errorf("conn is %d bytes, want at most 224", size)
	}
	if size := unsafe.Sizeof(session{}); size > 112 {
		t.Errorf("session is %d bytes, want at most 112", size)
	}
}
