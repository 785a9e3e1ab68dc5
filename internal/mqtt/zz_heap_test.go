package mqtt_test

import (
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

func init() { runtime.MemProfileRate = 1 }

func TestZZHeapProfile(t *testing.T) {
	s, port := idleServer(t)
	const n = 3000
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c := dialRaw(t, port, packet.V311)
		c.connect("h"+strconv.Itoa(i), true, 0, nil)
		conns = append(conns, c.nc)
	}
	waitIdle(t, s, n)
	waitDormant(t, s, n)
	runtime.GC()
	runtime.GC()
	f, _ := os.Create("/tmp/heap.prof")
	pprof.WriteHeapProfile(f)
	f.Close()
}
