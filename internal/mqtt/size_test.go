package mqtt

import (
	"testing"
	"unsafe"
)

// TestIdleStateStaysSmall: an idle connection is its conn and its session; bytes
// added to either show in the idle-connection memory row of bench/RESULTS.md (a conn
// over 192 bytes moves to the next allocation size class).
func TestIdleStateStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(conn{}); size > 192 {
		t.Errorf("conn is %d bytes, want at most 192", size)
	}
	if size := unsafe.Sizeof(session{}); size > 128 {
		t.Errorf("session is %d bytes, want at most 128", size)
	}
}
