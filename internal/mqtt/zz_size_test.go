package mqtt

import (
	"testing"
	"unsafe"
)

func TestZZSizes(t *testing.T) {
	t.Logf("conn %d session %d flight %d reader %d", unsafe.Sizeof(conn{}), unsafe.Sizeof(session{}), unsafe.Sizeof(flight{}), unsafe.Sizeof(reader{}))
}
