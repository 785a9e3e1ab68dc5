// Package host is what the benchmark harnesses learn of the machine they run on:
// its description for a report, and whether other processes keep it busy before a
// run starts.
package host

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes the machine a report was measured on.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	Memory     string `json:"memory"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	OS         string `json:"os"`
}

// Info describes this machine; the CPU model and memory come from /proc where it
// exists.
func Info() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
					}
				}
				break
			}
		}
	}
	return m
}

// cpuTimes returns the busy and total jiffies of all CPUs from /proc/stat.
func cpuTimes() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

// WaitQuiet waits until less than threshold of the CPUs is busy over a quarter
// second (nothing of the benchmark runs meanwhile, so this is other processes), or
// max has passed; it reports whether the machine was quiet. Without /proc/stat it
// does not wait.
func WaitQuiet(ctx context.Context, max time.Duration, threshold float64) bool {
	deadline := time.Now().Add(max)
	for {
		b0, t0, ok := cpuTimes()
		if !ok {
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(250 * time.Millisecond):
		}
		b1, t1, ok := cpuTimes()
		if !ok || t1 == t0 || float64(b1-b0)/float64(t1-t0) < threshold {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
