// Package host is what the benchmark harnesses learn of the machine they run on:
// its description for a report, whether other processes keep it busy before a run
// starts, and how much memory and CPU time a server process uses.
package host

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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

// quietWindow is the span over which the waits below measure CPU use.
const quietWindow = 250 * time.Millisecond

// waitWindows measures quietWindow after quietWindow, each between two calls of
// sample, until quiet says one was quiet, sample fails, ctx ends or max has
// passed; it reports false only when max passed first.
func waitWindows[T any](ctx context.Context, max time.Duration, sample func() (T, bool), quiet func(before, after T) bool) bool {
	deadline := time.Now().Add(max)
	for {
		before, ok := sample()
		if !ok {
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(quietWindow):
		}
		after, ok := sample()
		if !ok || quiet(before, after) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// WaitQuiet waits until less than threshold of the CPUs is busy over a quarter
// second (nothing of the benchmark runs meanwhile, so this is other processes), or
// max has passed; it reports whether the machine was quiet. Without /proc/stat it
// does not wait.
func WaitQuiet(ctx context.Context, max time.Duration, threshold float64) bool {
	type times struct{ busy, total uint64 }
	sample := func() (times, bool) {
		b, t, ok := cpuTimes()
		return times{b, t}, ok
	}
	return waitWindows(ctx, max, sample, func(a, b times) bool {
		return b.total == a.total || float64(b.busy-a.busy)/float64(b.total-a.total) < threshold
	})
}

// WaitProcsQuiet waits until the processes pids together use less than cores of
// CPU over a quarter second, or max has passed (a process gone ends the wait),
// and returns how long it waited.
func WaitProcsQuiet(ctx context.Context, pids []int, max time.Duration, cores float64) time.Duration {
	start := time.Now()
	sample := func() (time.Duration, bool) {
		var sum time.Duration
		for _, p := range pids {
			c, err := ProcCPU(p)
			if err != nil {
				return 0, false
			}
			sum += c
		}
		return sum, true
	}
	waitWindows(ctx, max, sample, func(a, b time.Duration) bool {
		return float64(b-a) < cores*float64(quietWindow)
	})
	return time.Since(start)
}

// Meter measures what other processes use of the CPUs over a window: the whole
// machine's busy time (/proc/stat) minus that of the processes measured and of
// this one (/proc/<pid>/stat utime+stime). Both count in the kernel's clock ticks.
type Meter struct {
	pids  []int
	busy0 uint64
	own0  []uint64
	t0    time.Time
	ok    bool
}

// StartMeter starts a window over the processes pids (and this one).
func StartMeter(pids []int) *Meter {
	m := &Meter{pids: append([]int{os.Getpid()}, pids...), t0: time.Now()}
	busy, _, ok := cpuTimes()
	m.busy0, m.ok = busy, ok
	for _, p := range m.pids {
		t, _ := procTicks(p)
		m.own0 = append(m.own0, t)
	}
	return m
}

// OtherCores is what other processes used since StartMeter, in cores (1 = one
// core busy the whole window), assuming 100 clock ticks a second (Linux's
// USER_HZ); -1 without /proc. A process that ended meanwhile counts as idle since
// the start, so its use shows as other processes'.
func (m *Meter) OtherCores() float64 {
	busy, _, ok := cpuTimes()
	secs := time.Since(m.t0).Seconds()
	if !m.ok || !ok || secs <= 0 {
		return -1
	}
	own := uint64(0)
	for i, p := range m.pids {
		if t, err := procTicks(p); err == nil && t >= m.own0[i] {
			own += t - m.own0[i]
		}
	}
	other := float64(busy-m.busy0) - float64(own)
	return max(0, other/100/secs)
}

// procTicks is a process's utime+stime in clock ticks.
func procTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may hold spaces: utime and
	// stime are fields 14 and 15, the 12th and 13th after its closing parenthesis.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return u + st, nil
}

// clockTick is one of the kernel's clock ticks, the unit of /proc/<pid>/stat's
// utime and stime: Linux's USER_HZ is 100 on every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// ProcCPU is the CPU time pid has used so far, user and system (utime+stime of
// /proc/<pid>/stat), in whole clock ticks (10 ms); threads that ended count, the
// children it waited for do not.
func ProcCPU(pid int) (time.Duration, error) {
	t, err := procTicks(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(t) * clockTick, nil
}

// SelfCPU is the CPU time this process has used so far, user and system
// (getrusage RUSAGE_SELF, to the microsecond).
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// WaitQuietOrNote is WaitQuiet before a measurement, max 0 or less meaning do not
// wait; when the machine is still busy it says so on log ("running anyway": the run
// goes ahead and its record says it started busy) and returns true.
func WaitQuietOrNote(ctx context.Context, max time.Duration, threshold float64, log io.Writer) (busy bool) {
	if max <= 0 || WaitQuiet(ctx, max, threshold) {
		return false
	}
	fmt.Fprintf(log, "note: the machine was still busy after %s; running anyway\n", max)
	return true
}

// ParseStatus reads VmRSS and VmHWM (KiB) from the text of /proc/<pid>/status.
func ParseStatus(s string) (rss, hwm uint64) {
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

// ProcMemory is pid's resident memory now and at its peak (VmRSS, VmHWM, KiB); ok
// is false when /proc/<pid>/status cannot be read (no such process, no /proc).
func ProcMemory(pid int) (rss, hwm int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	r, h := ParseStatus(string(b))
	return int64(r), int64(h), true
}
