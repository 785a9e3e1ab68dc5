package natsbus_test

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/natsbus"
	"github.com/tern-mq/tern/bench/internal/refserver"
	"github.com/tern-mq/tern/internal/loadgen/loadgentest"
)

// TestModes runs every workload against a nats-server started for the test (the
// project's build: scripts/deps.sh, run by make test, installs it).
func TestModes(t *testing.T) {
	bin := refserver.NATSServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := natsbus.Dial(url, "probe")
		if err == nil {
			_ = b.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	loadgentest.CheckModes(t, natsbus.Dialer(url), 2000)
}
