//go:build unix

package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestClusterScript runs scripts/cluster.sh as the README tour does, on ports no
// one else uses: start twice (the second starts nothing), status, stop twice (the
// second stops nothing), and checks that stop ended exactly the processes start
// recorded.
func TestClusterScript(t *testing.T) {
	if _, err := exec.LookPath("ps"); err != nil {
		t.Fatal("ps not installed: the script checks its pids with it")
	}
	dir := t.TempDir()
	base, mqttBase := freePortBase(t, 2)
	env := append(os.Environ(), "TERN_CLUSTER_DIR="+dir, "TERN_CLUSTER_NAME=script-test",
		"TERN_CLUSTER_PORT_BASE="+strconv.Itoa(base), "TERN_CLUSTER_MQTT_BASE="+strconv.Itoa(mqttBase),
		"TERN_CLUSTER_KAFKA_BASE="+strconv.Itoa(mqttBase+kafkaOffset))
	script := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("../../scripts/cluster.sh", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	pids := func() []int {
		var out []int
		for i := 1; i <= 2; i++ {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.pid", i)))
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, pid)
		}
		return out
	}
	t.Cleanup(func() {
		for _, pid := range pids() { // a failed test leaves no node behind
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	out := script("start", "2")
	wantLine(t, out, `^n1 started \(pid \d+\): tern://127\.0\.0\.1:`+strconv.Itoa(base)+`, http://127\.0\.0\.1:`+strconv.Itoa(base+80)+`, log `)
	wantLine(t, out, `^Cluster script-test: 2 members, 1 route, as node n1 sees it$`)
	wantLine(t, out, `^  n2 +alive +127\.0\.0\.1:`+strconv.Itoa(base+11)+` `)
	started := pids()
	if len(started) != 2 {
		t.Fatalf("pid files: %v", started)
	}
	out = script("start", "2")
	wantLine(t, out, `^n1 already running \(pid `+strconv.Itoa(started[0])+`\)$`)
	wantLine(t, out, `^n2 already running \(pid `+strconv.Itoa(started[1])+`\)$`)
	wantLine(t, script("status"), `^n2 running \(pid \d+\): tern://127\.0\.0\.1:`+strconv.Itoa(base+10)+`, http://127\.0\.0\.1:`+strconv.Itoa(base+90)+`, mqtt 127\.0\.0\.1:`+strconv.Itoa(mqttBase+1)+
		`, kafka 127\.0\.0\.1:`+strconv.Itoa(mqttBase+kafkaOffset+1)+`$`)

	out = script("stop")
	for i, pid := range started {
		wantLine(t, out, fmt.Sprintf(`^n%d stopped \(pid %d\)$`, i+1, pid))
		if syscall.Kill(pid, 0) == nil {
			if b, _ := exec.Command("ps", "-p", strconv.Itoa(pid), "-o", "stat=").Output(); !strings.HasPrefix(string(b), "Z") {
				t.Errorf("pid %d still runs after stop", pid)
			}
		}
	}
	if left := pids(); len(left) != 0 {
		t.Errorf("pid files left: %v", left)
	}
	if out := script("stop"); out != "no nodes running\n" {
		t.Errorf("second stop: %q", out)
	}
	for i := 1; i <= 2; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		if err != nil || !regexp.MustCompile(`tern server ready`).Match(b) {
			t.Errorf("n%d.log: %v\n%s", i, err, b)
		}
	}
	if out, err := exec.Command("../../scripts/cluster.sh", "start", "9").CombinedOutput(); err == nil || !strings.Contains(string(out), "N must be 1 to 8") {
		t.Errorf("start 9: %v %s", err, out)
	}
}

// freePortBase finds a port base for cluster.sh with n nodes whose every port is
// free: base+10i+{0,1,2} and base+80+10i over TCP (and UDP for the native and
// gossip ports), and mqttBase+i.
// kafkaOffset puts the nodes' Kafka ports above their MQTT ports.
const kafkaOffset = 20

func freePortBase(t *testing.T, n int) (base, mqttBase int) {
	t.Helper()
	free := func(network string, port int) bool {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if network == "udp" {
			c, err := net.ListenPacket("udp", addr)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
		}
		return err == nil
	}
	for try := 0; try < 100; try++ {
		// Below the kernel's ephemeral range (32768 and up by default), which the
		// other tests' outbound connections take ports from while this one runs.
		base, mqttBase = 20000+10*rand.IntN(1200), 12000+rand.IntN(7000)
		ok := true
		for i := 0; i < n && ok; i++ {
			p := base + 10*i
			ok = free("tcp", p) && free("udp", p) && free("tcp", p+1) && free("tcp", p+2) && free("udp", p+2) &&
				free("tcp", base+80+10*i) && free("tcp", mqttBase+i) && free("tcp", mqttBase+kafkaOffset+i)
		}
		if ok {
			return base, mqttBase
		}
	}
	t.Fatal("no free ports for the cluster script")
	return 0, 0
}
