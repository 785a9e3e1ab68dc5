package store

import (
	"runtime"
	"testing"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestMemoryStaysFlat writes, replays and reopens a log of 48 MB: the heap
// grows by the index and per-segment state only, not with the payloads.
func TestMemoryStaysFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 48 MB")
	}
	cfg := testConfig(t)
	cfg.SegmentBytes = 1 << 20
	l, _ := mustOpen(t, cfg)
	before := heapInUse()
	payload := make([]byte, 1024)
	subject := []byte("orders.eu.created")
	const n = 45_000 // ~48 MB
	for i := 1; i <= n; i++ {
		if _, err := l.Append(subject, nil, payload, 0); err != nil {
			t.Fatal(err)
		}
		if i%64 == 0 {
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Commit()
	r := l.NewReader(0)
	for i := 0; i < n; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	grown := int64(heapInUse()) - int64(before)
	// Index: 16 B per 4 KiB (~190 KB); segments: 48 x a few hundred bytes;
	// buffers: the batch and one pooled reader buffer.
	const limit = 2 << 20
	if grown > limit {
		t.Fatalf("heap grew by %d bytes writing and reading %d MB", grown, n*1077>>20)
	}
	cfg2 := l.cfg
	l.Close()
	l = nil
	before = heapInUse()
	l2, _ := mustOpen(t, cfg2)
	if grown := int64(heapInUse()) - int64(before); grown > limit {
		t.Fatalf("heap grew by %d bytes opening %d MB", grown, n*1077>>20)
	}
	if l2.State().Msgs != n {
		t.Fatal(l2.State())
	}
	t.Logf("heap growth after Open: %d bytes; segments %d", grown, l2.State().Segments)
}
