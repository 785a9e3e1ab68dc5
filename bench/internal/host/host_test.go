package host

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestInfo(t *testing.T) {
	m := Info()
	if m.CPUs != runtime.NumCPU() || m.GOMAXPROCS < 1 || m.Go != runtime.Version() {
		t.Fatalf("%+v", m)
	}
	if runtime.GOOS == "linux" && (m.CPUModel == "" || !strings.HasSuffix(m.Memory, " GiB")) {
		t.Fatalf("on Linux the model and memory come from /proc: %+v", m)
	}
}

func TestWaitQuiet(t *testing.T) {
	// Any load is below 101 % of the CPUs: quiet after one quarter-second look.
	start := time.Now()
	if !WaitQuiet(context.Background(), time.Second, 1.01) {
		t.Fatal("not quiet under a threshold above 100 %")
	}
	if took := time.Since(start); runtime.GOOS == "linux" && took < 200*time.Millisecond {
		t.Fatalf("returned after %v without looking at the CPUs", took)
	}
	// Nothing is below 0 % busy: it gives up at max and says so.
	if runtime.GOOS == "linux" && WaitQuiet(context.Background(), 300*time.Millisecond, -1) {
		t.Fatal("quiet under a negative threshold")
	}
}

func TestMeter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	m := StartMeter(nil)
	// Busy in this process: not counted as other processes'.
	end := time.Now().Add(300 * time.Millisecond)
	for x := 0; time.Now().Before(end); x++ {
		_ = x * x
	}
	if o := m.OtherCores(); o < 0 || o > float64(runtime.NumCPU()) {
		t.Fatalf("other processes used %.2f cores", o)
	}
	if _, err := procTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestParseStatus(t *testing.T) {
	rss, hwm := ParseStatus("Name:\ttern\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n")
	if rss != 40960 || hwm != 51200 {
		t.Fatalf("rss %d hwm %d", rss, hwm)
	}
	if _, _, ok := ProcMemory(os.Getpid()); !ok && runtime.GOOS == "linux" {
		t.Error("ProcMemory of this process: not ok")
	}
}

// sink keeps the busy loop's result, so the compiler keeps the loop.
var sink int

func TestProcCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	pid := os.Getpid()
	p0, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	s0, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Busy on one goroutine until this process has used at least 300 ms of CPU
	// more, or 5 s have passed on a machine busy with others.
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for range 1_000_000 {
			x = x*31 + 7
		}
		if s, _ := SelfCPU(); s-s0 >= 300*time.Millisecond {
			break
		}
	}
	sink = x
	s1, _ := SelfCPU()
	p1, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if s1-s0 < 300*time.Millisecond {
		t.Skipf("only %v of CPU in 5 s: the machine is too busy to tell", s1-s0)
	}
	// /proc counts whole 10 ms ticks, sampled: allow some of them either way.
	if d := p1 - p0; d < 200*time.Millisecond || d > s1-s0+200*time.Millisecond {
		t.Fatalf("ProcCPU grew by %v while SelfCPU grew by %v", d, s1-s0)
	}
	if p1%clockTick != 0 {
		t.Fatalf("ProcCPU %v is not in whole ticks", p1)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Fatal("ProcCPU of a pid that does not exist: no error")
	}
}

// TestWaitProcsQuiet: an idle process ends the wait after one window; one that
// keeps a core busy holds it until max.
func TestWaitProcsQuiet(t *testing.T) {
	ctx := context.Background()
	self := []int{os.Getpid()}
	if waited := WaitProcsQuiet(ctx, self, 5*time.Second, 0.5); waited > 2*time.Second {
		t.Fatalf("an idle test process held the wait for %s", waited)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	if waited := WaitProcsQuiet(ctx, self, 700*time.Millisecond, 0.5); waited < 700*time.Millisecond {
		t.Fatalf("a process using a core ended the wait after %s", waited)
	}
	if waited := WaitProcsQuiet(ctx, []int{1 << 30}, time.Minute, 0.5); waited > time.Second {
		t.Fatalf("a pid that does not exist held the wait for %s", waited)
	}
}
