package replica

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPropose measures proposals acknowledged per second on 3 in-process
// nodes, many goroutines proposing concurrently to the leaders of a few groups
// (group commit: proposals/sync reports how many share one append and sync).
func BenchmarkPropose(b *testing.B) {
	for _, fsync := range []time.Duration{0, 500 * time.Microsecond} {
		for _, size := range []int{16, 1024} {
			for _, groups := range []int{1, 8} {
				b.Run(fmt.Sprintf("fsync=%v/size=%d/groups=%d", fsync, size, groups), func(b *testing.B) {
					benchPropose(b, size, groups, fsync)
				})
			}
		}
	}
}

func benchPropose(b *testing.B, size, groups int, fsync time.Duration) {
	cfg := Config{SnapshotEntries: 20000, CompactionOverhead: 1000}
	c := newCluster(b, cfg, 3)
	var ids []uint64
	for g := 1; g <= groups; g++ {
		c.addGroup(uint64(g), []uint64{1, 2, 3})
		ids = append(ids, uint64(g))
	}
	for _, st := range c.stores {
		st.delay = fsync
	}
	for _, h := range c.hosts {
		h.Start()
	}
	for _, g := range ids {
		_ = c.hosts[1].Campaign(context.Background(), g)
	}
	leaders := c.waitLeaders(b, ids, 10*time.Second, 0)
	syncs := func() (n int) {
		for _, g := range ids {
			n += c.stores[[2]uint64{leaders[g], g}].syncsAtomic()
		}
		return n
	}
	data := make([]byte, size)
	ctx := context.Background()
	var next atomic.Uint64
	before := syncs()
	b.SetBytes(int64(size))
	b.SetParallelism(32) // 32 × GOMAXPROCS proposers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g := ids[next.Add(1)%uint64(len(ids))]
			if _, err := c.hosts[leaders[g]].Propose(ctx, g, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if n := syncs() - before; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "proposals/sync")
	}
}

// BenchmarkIdleGroups measures the CPU time per second of wall time that 3
// in-process nodes spend on 1,000 idle groups of 3 replicas (the process's
// user+system time, so it includes the Go runtime).
func BenchmarkIdleGroups(b *testing.B) {
	for _, quiesce := range []bool{true, false} {
		b.Run(fmt.Sprintf("quiesce=%v", quiesce), func(b *testing.B) {
			benchIdle(b, 1000, !quiesce)
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchIdle(b *testing.B, groups int, noQuiesce bool) {
	cfg := Config{DisableQuiescence: noQuiesce}
	c := newCluster(b, cfg, 3)
	var ids []uint64
	for g := 1; g <= groups; g++ {
		c.addGroup(uint64(g), []uint64{1, 2, 3})
		ids = append(ids, uint64(g))
	}
	for _, h := range c.hosts {
		h.Start()
	}
	var wg sync.WaitGroup
	for _, g := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.hosts[g%3+1].Campaign(context.Background(), g)
		}()
	}
	wg.Wait()
	c.waitLeaders(b, ids, 30*time.Second, 0)
	time.Sleep(2 * time.Second) // settle (and quiesce)
	const window = 3 * time.Second
	b.ResetTimer()
	var perSec float64
	for b.Loop() {
		start, cpu0 := time.Now(), cpuTime()
		time.Sleep(window)
		perSec = float64(cpuTime()-cpu0) / float64(time.Since(start))
	}
	b.StopTimer()
	quiesced := 0
	for _, g := range ids {
		if st, err := c.hosts[1].Status(g); err == nil && st.Quiesced {
			quiesced++
		}
	}
	b.ReportMetric(perSec*1000, "cpu-ms/s")
	b.ReportMetric(float64(quiesced), "quiesced-groups")
}

// BenchmarkProposeOneAtATime measures the latency of one proposal at a time on
// 3 in-process nodes whose every sync takes a simulated fsync: with
// SendBeforeSync the leader's fsync overlaps its followers' instead of coming
// before them.
func BenchmarkProposeOneAtATime(b *testing.B) {
	for _, fsync := range []time.Duration{0, 500 * time.Microsecond} {
		for _, early := range []bool{false, true} {
			b.Run(fmt.Sprintf("fsync=%v/sendBeforeSync=%v", fsync, early), func(b *testing.B) {
				benchProposeOneAtATime(b, fsync, early, false)
			})
		}
		b.Run(fmt.Sprintf("fsync=%v/sendBeforeSync=true/lazyCommit", fsync), func(b *testing.B) {
			benchProposeOneAtATime(b, fsync, true, true)
		})
	}
}

func benchProposeOneAtATime(b *testing.B, fsync time.Duration, early, lazyCommit bool) {
	c := newCluster(b, Config{SnapshotEntries: 20000, CompactionOverhead: 1000, SendBeforeSync: early}, 3)
	c.lazyCommit = lazyCommit
	c.addGroup(1, []uint64{1, 2, 3})
	for _, st := range c.stores {
		st.delay = fsync
	}
	leader := c.startGroupOne(b)
	data := make([]byte, 16)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.hosts[leader].Propose(ctx, 1, data); err != nil {
			b.Fatal(err)
		}
	}
}

// startGroupOne starts every host, has node 1 campaign in group 1 and returns the
// leader that group elected.
func (c *cluster) startGroupOne(b testing.TB) uint64 {
	for _, h := range c.hosts {
		h.Start()
	}
	_ = c.hosts[1].Campaign(context.Background(), 1)
	return c.waitLeaders(b, []uint64{1}, 10*time.Second, 0)[1]
}
