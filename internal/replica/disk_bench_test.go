package replica

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/replica/raftlog"
	"github.com/tern-mq/tern/internal/store"
)

// intervalStorage is a raftlog under sync = interval, as a server opens it: its
// timer syncs, so the host's Sync has nothing to do.
type intervalStorage struct{ *raftlog.Log }

func (*intervalStorage) Sync() error { return nil }

// BenchmarkProposeOnDisk proposes one entry at a time on 3 in-process nodes
// whose group keeps its Raft log on disk under sync = interval (the server's
// default: a timer fsyncs every log every 10 ms here, to see its effect often),
// and reports the latency percentiles: a timer's fsync must not stall the loop.
func BenchmarkProposeOnDisk(b *testing.B) {
	c := newCluster(b, Config{SnapshotEntries: 1 << 30}, 3)
	for _, n := range c.nodes {
		l, _, err := raftlog.Open(raftlog.Config{Dir: b.TempDir(), Sync: store.SyncInterval, SyncInterval: 10 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		if err := c.hosts[n].AddGroup(GroupConfig{ID: 1, Storage: &intervalStorage{l}, StateMachine: &chainSM{}, Voters: c.nodes}); err != nil {
			b.Fatal(err)
		}
	}
	leader := c.startGroupOne(b)
	data := make([]byte, 16)
	ctx := context.Background()
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t := time.Now()
		if _, err := c.hosts[leader].Propose(ctx, 1, data); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
	b.ReportMetric(at(1), "max-µs")
}
