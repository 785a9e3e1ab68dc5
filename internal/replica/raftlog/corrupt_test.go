package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tern-mq/tern/internal/store"
)

// filled makes a log with entries 1..60 in several segments, a snapshot at 20,
// a compaction to 10 and a hard state, closed.
func filled(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.SegmentBytes = 1024
	l := mustOpen(t, cfg)
	if err := l.Append(ents(1, 61, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreateSnapshot(20, &pb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("state at 20")); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(10); err != nil {
		t.Fatal(err)
	}
	if err := l.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(40))}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func flip(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func segments(t *testing.T, cfg Config) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cfg.Dir, logDir, "*.log"))
	sort.Strings(m)
	if len(m) < 3 {
		t.Fatalf("%d segments", len(m))
	}
	return m
}

// TestCorruptFilesFailOpen: a flipped byte in an entry (in the store's record
// header, in the entry header, in the data), in the hard state file or in the
// snapshot file makes Open fail with ErrCorrupt, naming what is damaged.
func TestCorruptFilesFailOpen(t *testing.T) {
	cases := []struct {
		name  string
		file  func(cfg Config) string
		off   func(size int) int
		store bool // also a store.ErrCorrupt
	}{
		{"record header", func(cfg Config) string { return segments(t, cfg)[1] }, func(int) int { return 13 }, true},
		{"entry header", func(cfg Config) string { return segments(t, cfg)[1] }, func(int) int { return 36 + 8 }, true},
		{"entry data", func(cfg Config) string { return segments(t, cfg)[1] }, func(n int) int { return n / 2 }, true},
		{"hard state", func(cfg Config) string { return filepath.Join(cfg.Dir, hsFile) }, func(int) int { return 33 }, false},
		{"hard state magic", func(cfg Config) string { return filepath.Join(cfg.Dir, hsFile) }, func(int) int { return 0 }, false},
		{"snapshot metadata", func(cfg Config) string { return filepath.Join(cfg.Dir, snapFile) }, func(int) int { return 26 }, false},
		{"snapshot data", func(cfg Config) string { return filepath.Join(cfg.Dir, snapFile) }, func(n int) int { return n - 1 }, false},
		{"snapshot length", func(cfg Config) string { return filepath.Join(cfg.Dir, snapFile) }, func(int) int { return 12 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filled(t)
			path := tc.file(cfg)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			flip(t, path, tc.off(int(st.Size())))
			l, _, err := Open(cfg)
			if err == nil {
				l.Close()
				t.Fatal("Open of a damaged log succeeded")
			}
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, store.ErrCorrupt) != tc.store {
				t.Fatalf("err = %v: not ErrCorrupt (store: %v)", err, tc.store)
			}
			var c *store.Corruption
			if tc.store && (!errors.As(err, &c) || c.Segment != path) {
				t.Fatalf("err = %v does not name %s", err, path)
			}
			t.Log(err)
		})
	}
}

// TestDamageFoundAfterOpen: damage that appears while the log is open is
// reported by the reads that meet it, as ErrCorrupt.
func TestDamageFoundAfterOpen(t *testing.T) {
	cfg := filled(t)
	l := mustOpen(t, cfg) // nothing cached: entries come from disk
	flip(t, segments(t, cfg)[1], 36+16+3)
	if _, err := l.Entries(11, 61, noLimit); !errors.Is(err, ErrCorrupt) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Entries over a damaged record: %v", err)
	}
	flip(t, filepath.Join(cfg.Dir, snapFile), 30)
	if _, err := l.Snapshot(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Snapshot of a damaged file: %v", err)
	}
	// Terms are in memory: they still answer.
	if term, err := l.Term(30); err != nil || term != 2 {
		t.Fatalf("Term = %d, %v", term, err)
	}
}

// TestInconsistentFilesFailOpen: files that are each intact but do not fit
// together (entries lost under a hard state that commits them, a snapshot
// beyond the entries, a missing segment) fail Open with ErrCorrupt.
func TestInconsistentFilesFailOpen(t *testing.T) {
	t.Run("commit beyond the entries", func(t *testing.T) {
		cfg := filled(t)
		l := mustOpen(t, cfg)
		if err := l.SetHardState(&pb.HardState{Term: new(uint64(2)), Commit: new(uint64(60))}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		// The last segment goes, as if it had never reached the disk.
		segs := segments(t, cfg)
		os.Remove(segs[len(segs)-1])
		if _, _, err := Open(cfg); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	})
	t.Run("missing segment", func(t *testing.T) {
		cfg := filled(t)
		os.Remove(segments(t, cfg)[1])
		if _, _, err := Open(cfg); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	})
	t.Run("snapshot beyond the entries", func(t *testing.T) {
		cfg := filled(t)
		l := mustOpen(t, cfg)
		b, _ := encodeSnapshot(&pb.Snapshot{Metadata: pb.EnsureSnapshotMetadata(&pb.SnapshotMetadata{Index: new(uint64(500)), Term: new(uint64(2))})})
		l.Close()
		if err := os.WriteFile(filepath.Join(cfg.Dir, snapFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(cfg); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	})
	t.Run("first entry without the marker", func(t *testing.T) {
		cfg := filled(t)
		os.Remove(filepath.Join(cfg.Dir, markerFile))
		if _, _, err := Open(cfg); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	})
}

// TestEveryByteFlipped flips each byte of the hard state and snapshot files
// and a stride of the segments' bytes: Open never panics, and either fails with
// ErrCorrupt or opens a log whose every method works.
func TestEveryByteFlipped(t *testing.T) {
	cfg := filled(t)
	var files []string
	for _, name := range []string{hsFile, snapFile} {
		files = append(files, filepath.Join(cfg.Dir, name))
	}
	files = append(files, segments(t, cfg)...)
	for _, path := range files {
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		stride := 1
		if filepath.Ext(path) == ".log" {
			stride = 7
		}
		opened := 0
		for off := 0; off < len(orig); off += stride {
			b := append([]byte(nil), orig...)
			b[off] ^= 0x01
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			l, _, err := Open(cfg)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s byte %d: %v", path, off, err)
				}
				continue
			}
			opened++
			first, _ := l.FirstIndex()
			last, _ := l.LastIndex()
			if _, err := l.Entries(first, last+1, noLimit); err != nil && !errors.Is(err, raft.ErrUnavailable) {
				t.Fatalf("%s byte %d: Entries: %v", path, off, err)
			}
			l.InitialState()
			l.Snapshot()
			l.Close()
			// Opening may have cut a torn tail: start from the original.
			copyBack(t, cfg, path, orig)
		}
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(path) != ".log" && opened > 0 {
			t.Fatalf("%s: %d flipped bytes went unnoticed", path, opened)
		}
	}
}

// copyBack restores path; a tail cut by Open was in the last segment only,
// which the loop restores when it gets there (the last segment is last).
func copyBack(t *testing.T, cfg Config, path string, orig []byte) {
	t.Helper()
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInterruptedWrites: what a crash leaves half done is finished or
// dropped by Open, never taken for damage.
func TestInterruptedWrites(t *testing.T) {
	t.Run("hard state not yet synced", func(t *testing.T) {
		cfg := filled(t)
		want := &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(50))}
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsTmpFile), encodeHardState(want), 0o644); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, cfg)
		if hs, _, _ := l.InitialState(); !proto.Equal(hs, want) {
			t.Fatalf("hard state %v, want the newer %v", hs, want)
		}
	})
	t.Run("hard state torn", func(t *testing.T) {
		cfg := filled(t)
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsTmpFile), encodeHardState(&pb.HardState{Term: new(uint64(9))})[:20], 0o644); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, cfg)
		if hs, _, _ := l.InitialState(); hs.GetTerm() != 2 || hs.GetCommit() != 40 {
			t.Fatalf("hard state %v, want the old one", hs)
		}
		if _, err := os.Stat(filepath.Join(cfg.Dir, hsTmpFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("torn hardstate.tmp left behind")
		}
	})
	t.Run("hard state being synced", func(t *testing.T) {
		// A crash in Sync after it took hardstate.tmp: hardstate.sync is newer
		// than hardstate; a hardstate.tmp written since is newer still.
		cfg := filled(t)
		synced := &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(45))}
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsSyncFile), encodeHardState(synced), 0o644); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, cfg)
		if hs, _, _ := l.InitialState(); !proto.Equal(hs, synced) {
			t.Fatalf("hard state %v, want hardstate.sync's %v", hs, synced)
		}
		l.Close()
		newer := &pb.HardState{Term: new(uint64(4)), Vote: new(uint64(1)), Commit: new(uint64(50))}
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsSyncFile), encodeHardState(synced), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsTmpFile), encodeHardState(newer), 0o644); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, cfg)
		if hs, _, _ := l.InitialState(); !proto.Equal(hs, newer) {
			t.Fatalf("hard state %v, want hardstate.tmp's %v", hs, newer)
		}
		for _, name := range []string{hsTmpFile, hsSyncFile} {
			if _, err := os.Stat(filepath.Join(cfg.Dir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left behind", name)
			}
		}
		l.Close()
		// A torn hardstate.sync was never synced: the older hard state stands.
		if err := os.WriteFile(filepath.Join(cfg.Dir, hsSyncFile), encodeHardState(&pb.HardState{Term: new(uint64(9))})[:20], 0o644); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, cfg)
		if hs, _, _ := l.InitialState(); !proto.Equal(hs, newer) {
			t.Fatalf("hard state %v after a torn hardstate.sync, want %v", hs, newer)
		}
	})
	t.Run("snapshot being created", func(t *testing.T) {
		cfg := filled(t)
		os.WriteFile(filepath.Join(cfg.Dir, snapTmpFile), []byte("half"), 0o644)
		l := mustOpen(t, cfg)
		if s, _ := l.Snapshot(); s.GetMetadata().GetIndex() != 20 {
			t.Fatalf("snapshot %v", s.GetMetadata())
		}
	})
	install := &pb.Snapshot{Data: []byte("state at 100"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(100)), Term: new(uint64(4)), ConfState: &pb.ConfState{Voters: []uint64{1, 2}}}}
	t.Run("install torn", func(t *testing.T) {
		cfg := filled(t)
		b, _ := encodeSnapshot(pb.EnsureSnapshot(proto.Clone(install).(*pb.Snapshot)))
		os.WriteFile(filepath.Join(cfg.Dir, installFile), b[:len(b)-3], 0o644)
		l, rep, err := Open(cfg)
		if err != nil || rep.FinishedInstall {
			t.Fatalf("Open: %v, %+v", err, rep)
		}
		defer l.Close()
		if first, _ := l.FirstIndex(); first != 11 {
			t.Fatalf("first index %d", first)
		}
	})
	// A crash at each step of an install: Open finishes it.
	for step := 0; step < 4; step++ {
		t.Run("install at step "+string(rune('0'+step)), func(t *testing.T) {
			cfg := filled(t)
			b, _ := encodeSnapshot(pb.EnsureSnapshot(proto.Clone(install).(*pb.Snapshot)))
			os.WriteFile(filepath.Join(cfg.Dir, installFile), b, 0o644)
			if step > 0 {
				// Part of the install was done: marker, reset, dummy.
				st, _, err := store.Open(store.Config{Dir: filepath.Join(cfg.Dir, logDir), Sync: store.SyncNever})
				if err != nil {
					t.Fatal(err)
				}
				if step >= 2 {
					if err := st.Reset(100); err != nil {
						t.Fatal(err)
					}
				}
				if step >= 3 {
					st.Append(nil, appendMeta(nil, &pb.Entry{Term: new(uint64(4)), Index: new(uint64(100))}), nil, 1)
					st.Commit()
				}
				st.Close()
			}
			l, rep, err := Open(cfg)
			if err != nil || !rep.FinishedInstall {
				t.Fatalf("Open: %v, %+v", err, rep)
			}
			defer l.Close()
			first, _ := l.FirstIndex()
			last, _ := l.LastIndex()
			term, _ := l.Term(100)
			s, _ := l.Snapshot()
			if first != 101 || last != 100 || term != 4 || string(s.Data) != string(install.Data) {
				t.Fatalf("after install: first %d last %d term %d snapshot %v", first, last, term, s)
			}
			if hs, _, _ := l.InitialState(); hs.GetCommit() != 100 {
				t.Fatalf("commit %d: raft would refuse a commit below the first index", hs.GetCommit())
			}
			if err := l.Append(ents(101, 105, 4)); err != nil {
				t.Fatal(err)
			}
			l = reopen(t, l)
			if got, err := l.Entries(101, 105, noLimit); err != nil || len(got) != 4 {
				t.Fatalf("Entries: %d, %v", len(got), err)
			}
		})
	}
}

// TestSyncDoesNotStallWrites: while Sync makes the log durable, appends and hard
// states go on (the Raft loop must not wait for a timer's fsync); what they wrote
// meanwhile is made durable by the next Sync, and the hard state Sync took
// reaches the disk in its place.
func TestSyncDoesNotStallWrites(t *testing.T) {
	cfg := Config{Dir: t.TempDir(), Sync: store.SyncNever}
	l := mustOpen(t, cfg)
	if err := l.Append(ents(1, 11, 1)); err != nil {
		t.Fatal(err)
	}
	taken := &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(10))}
	if err := l.SetHardState(taken); err != nil {
		t.Fatal(err)
	}
	inSync, release := make(chan struct{}), make(chan struct{})
	l.syncing = func() { close(inSync); <-release }
	synced := make(chan error, 1)
	go func() { synced <- l.Sync() }()
	<-inSync
	// The writes below would deadlock if Sync held the log's lock now.
	if err := l.Append(ents(11, 21, 1)); err != nil {
		t.Fatal(err)
	}
	later := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(20))}
	if err := l.SetHardState(later); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	l.syncing = nil
	b, err := os.ReadFile(filepath.Join(cfg.Dir, hsFile))
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := decodeHardState(b); err != nil || !proto.Equal(hs, taken) {
		t.Fatalf("hardstate after the Sync: %v (%v), want the one it took, %v", hs, err, taken)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l = reopen(t, l)
	if hs, _, _ := l.InitialState(); !proto.Equal(hs, later) {
		t.Fatalf("hard state %v, want %v", hs, later)
	}
	if last, _ := l.LastIndex(); last != 20 {
		t.Fatalf("last index %d, want 20", last)
	}
}
