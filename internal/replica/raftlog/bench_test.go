package raftlog

import (
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tern-mq/tern/internal/store"
)

// benchEntries makes n entries from index `from`, as raft would hand them
// over: the Entry, its fields and its data are the entry's own bytes, made
// here with the timer stopped.
type benchEntries struct {
	slab []diskEntry
	ptrs []*pb.Entry
	data []byte
}

func (b *benchEntries) make(from uint64, n, size int) []*pb.Entry {
	b.slab = make([]diskEntry, n)
	b.ptrs = make([]*pb.Entry, n)
	b.data = make([]byte, n*size)
	for i := range b.slab {
		d := &b.slab[i]
		d.index, d.term = from+uint64(i), 1
		d.e.Index, d.e.Term = &d.index, &d.term
		d.e.Data = b.data[i*size : (i+1)*size : (i+1)*size]
		b.ptrs[i] = &d.e
	}
	return b.ptrs
}

// BenchmarkAppendEntries measures what a follower does per Ready and a leader
// per proposal batch: Append a batch (one write) and read it back with Entries
// as raft does to build MsgApp, which the in-memory tail serves. ns/op and
// allocs/op are per entry. "sync" adds Sync (one fsync of the segment) per
// batch.
func BenchmarkAppendEntries(b *testing.B) {
	for _, size := range []int{16, 1024} {
		for _, batch := range []int{1, 64} {
			for _, sync := range []bool{false, true} {
				name := fmt.Sprintf("%dB/batch%d", size, batch)
				if size == 1024 {
					name = fmt.Sprintf("1KiB/batch%d", batch)
				}
				if sync {
					name += "/sync"
				}
				b.Run(name, func(b *testing.B) {
					l, _, err := Open(Config{Dir: b.TempDir(), Sync: store.SyncNever})
					if err != nil {
						b.Fatal(err)
					}
					defer l.Close()
					const chunk = 1 << 14 // entries made per timer stop
					var src benchEntries
					var pending []*pb.Entry
					next := uint64(1)
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					for done := 0; done < b.N; done += batch {
						if len(pending) < batch {
							b.StopTimer()
							pending = src.make(next, chunk, size)
							b.StartTimer()
						}
						ents := pending[:batch:batch]
						pending = pending[batch:]
						if err := l.Append(ents); err != nil {
							b.Fatal(err)
						}
						if sync {
							if err := l.Sync(); err != nil {
								b.Fatal(err)
							}
						}
						got, err := l.Entries(next, next+uint64(batch), 1<<20)
						if err != nil || len(got) != batch {
							b.Fatal(len(got), err)
						}
						next += uint64(batch)
					}
				})
			}
		}
	}
}

// BenchmarkEntriesFromDisk reads entries older than the in-memory tail (a
// follower far behind, or the committed entries after a restart): one
// sequential pass through the segments per call, 64 entries a call.
func BenchmarkEntriesFromDisk(b *testing.B) {
	for _, size := range []int{16, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			l, _, err := Open(Config{Dir: b.TempDir(), Sync: store.SyncNever, CacheBytes: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const n = 20_000
			var src benchEntries
			if err := l.Append(src.make(1, n, size)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			lo := uint64(1)
			for done := 0; done < b.N; done += 64 {
				if lo+64 > n {
					lo = 1
				}
				got, err := l.Entries(lo, lo+64, 1<<30)
				if err != nil || len(got) != 64 {
					b.Fatal(len(got), err)
				}
				lo += 64
			}
		})
	}
}
