package store

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingHooks counts fsyncs and can make them fail.
type countingHooks struct {
	n    atomic.Int64
	fail atomic.Pointer[error]
}

func (h *countingHooks) install(cfg *Config) {
	cfg.hooks = &testHooks{fsync: func(f *os.File) error {
		if e := h.fail.Load(); e != nil {
			return *e
		}
		if st, err := f.Stat(); err == nil && !st.IsDir() {
			h.n.Add(1) // count files; directories are synced when files come and go
		}
		return f.Sync()
	}}
}

func TestSyncPolicies(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		var h countingHooks
		cfg := testConfig(t)
		cfg.Sync = SyncAlways
		h.install(&cfg)
		l, _ := mustOpen(t, cfg)
		for i := 1; i <= 5; i++ {
			before := h.n.Load()
			appendMsgs(t, l, 3, subj("a"), 10)
			if h.n.Load() <= before {
				t.Fatalf("commit %d returned without an fsync", i)
			}
		}
		before := h.n.Load()
		if err := l.Delete(2); err != nil {
			t.Fatal(err)
		}
		if h.n.Load() <= before {
			t.Fatal("Delete returned without an fsync")
		}
	})
	t.Run("never", func(t *testing.T) {
		var h countingHooks
		cfg := testConfig(t)
		cfg.Sync = SyncNever
		h.install(&cfg)
		l, _ := mustOpen(t, cfg)
		for i := 0; i < 5; i++ {
			appendMsgs(t, l, 3, subj("a"), 10)
		}
		l.Delete(2)
		if n := h.n.Load(); n != 0 {
			t.Fatalf("%d fsyncs under SyncNever", n)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if h.n.Load() == 0 {
			t.Fatal("Close did not sync")
		}
	})
	t.Run("interval", func(t *testing.T) {
		var h countingHooks
		cfg := testConfig(t)
		cfg.Sync = SyncInterval
		cfg.SyncInterval = time.Hour // the background tick never fires here
		h.install(&cfg)
		l, _ := mustOpen(t, cfg)
		for i := 0; i < 5; i++ {
			appendMsgs(t, l, 3, subj("a"), 10)
		}
		if n := h.n.Load(); n != 0 {
			t.Fatalf("commits fsynced %d times under SyncInterval", n)
		}
		if err := l.Sync(); err != nil { // what the tick does
			t.Fatal(err)
		}
		if n := h.n.Load(); n != 1 {
			t.Fatalf("tick: %d fsyncs, want 1 (one dirty segment)", n)
		}
		if err := l.Sync(); err != nil || h.n.Load() != 1 {
			t.Fatalf("tick with nothing new fsynced again (%d)", h.n.Load())
		}
		l.Delete(2)
		appendMsgs(t, l, 1, subj("a"), 10)
		l.Sync()
		if n := h.n.Load(); n != 3 {
			t.Fatalf("%d fsyncs, want 3 (segment and tombstones)", n)
		}
	})
	t.Run("interval goroutine", func(t *testing.T) {
		var h countingHooks
		cfg := testConfig(t)
		cfg.Sync = SyncInterval
		cfg.SyncInterval = 5 * time.Millisecond
		h.install(&cfg)
		l, _ := mustOpen(t, cfg)
		appendMsgs(t, l, 3, subj("a"), 10)
		deadline := time.Now().Add(10 * time.Second)
		for h.n.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the background sync never ran")
			}
			time.Sleep(time.Millisecond)
		}
		if err := l.Close(); err != nil { // stops the goroutine
			t.Fatal(err)
		}
	})
}

// TestFsyncFailure: under SyncAlways a failed fsync fails the Commit, leaves
// nothing visible or on disk, hands the sequences out again, and the log works
// once fsync does.
func TestFsyncFailure(t *testing.T) {
	var h countingHooks
	cfg := testConfig(t)
	cfg.Sync = SyncAlways
	cfg.SegmentBytes = 600
	h.install(&cfg)
	l, _ := mustOpen(t, cfg)
	appendMsgs(t, l, 5, subj("a"), 20)
	st := l.State()
	size := l.active().size
	enospc := error(syscall.ENOSPC)
	h.fail.Store(&enospc)
	for i := 0; i < 20; i++ { // crosses a segment boundary too
		l.Append([]byte("b"), nil, make([]byte, 20), 0)
	}
	err := l.Commit()
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Commit = %v, want ErrNoSpace", err)
	}
	if l.State() != st || fileSize(t, l.active().logPath) != size || len(segFiles(t, cfg.Dir, ".log")) != 1 {
		t.Fatalf("failed commit left traces: %+v", l.State())
	}
	if _, _, err := l.Read(6, nil); !isNotFound(err) {
		t.Fatalf("failed record readable: %v", err)
	}
	if err := l.Delete(1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Delete = %v", err)
	}
	h.fail.Store(nil)
	ms := appendMsgs(t, l, 20, subj("c"), 20)
	if ms[0].seq != 6 {
		t.Fatalf("sequence not reused: %d", ms[0].seq)
	}
	l, rep := reopen(t, l)
	if rep.TruncatedBytes != 0 || len(rep.Corrupt) != 0 || l.State().Msgs != 25 {
		t.Fatalf("report %+v state %+v", rep, l.State())
	}
	for _, m := range ms {
		checkRead(t, l, m)
	}
}
