package store

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mountTmpfs mounts a small tmpfs for a full-disk test. Without permission to
// mount, the test fails with a clear message, unless TERN_NO_MOUNT=1 says the
// environment cannot do it.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if os.Getenv("TERN_NO_MOUNT") == "1" {
			t.Skipf("TERN_NO_MOUNT=1 and mounting a tmpfs failed (%v): full-disk behaviour not tested", err)
		}
		t.Fatalf("cannot mount a %s tmpfs on %s: %v\n"+
			"this test fills a small filesystem and needs root (or CAP_SYS_ADMIN);\n"+
			"set TERN_NO_MOUNT=1 to skip it where mounting is impossible", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestNoSpace fills a 2 MiB filesystem: the failing Commit wraps ErrNoSpace,
// leaves no partial record visible or on disk, hands its sequences out again,
// and appends succeed once a purge frees space, before and after a restart.
func TestNoSpace(t *testing.T) {
	mnt := mountTmpfs(t, "2m")
	for _, policy := range []SyncPolicy{SyncAlways, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := Config{Dir: filepath.Join(mnt, policy.String()), Name: "full", SegmentBytes: 200 << 10, Sync: policy}
			l, _ := mustOpen(t, cfg)
			defer os.RemoveAll(cfg.Dir)
			payload := make([]byte, 1000)
			var err error
			var committed []msg
			for i := 0; i < 10000 && err == nil; i++ {
				var pend []msg
				for j := 0; j < 7; j++ {
					seq, aerr := l.Append([]byte("fill"), nil, payloadFor(uint64(i*7+j+1), 1000), 0)
					if aerr != nil {
						t.Fatal(aerr)
					}
					pend = append(pend, msg{seq: seq, subject: "fill", payload: payloadFor(seq, 1000)})
				}
				if err = l.Commit(); err == nil {
					committed = append(committed, pend...)
				}
			}
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("filling the disk: %v, want ErrNoSpace", err)
			}
			st := l.State()
			if st.LastSeq != uint64(len(committed)) {
				t.Fatalf("state %+v after %d committed", st, len(committed))
			}
			a := l.active()
			if got := fileSize(t, a.logPath); got != a.size {
				t.Fatalf("active segment is %d bytes on disk, %d committed", got, a.size)
			}
			for _, m := range committed[len(committed)-3:] {
				checkRead(t, l, m)
			}
			if _, _, err := l.Read(st.LastSeq+1, nil); !isNotFound(err) {
				t.Fatalf("failed record visible: %v", err)
			}
			// Still full: a batch that would open a new segment fails too and
			// leaves no new file behind.
			files := len(segFiles(t, cfg.Dir, ".log"))
			for j := 0; j < 250; j++ {
				l.Append([]byte("big"), nil, payload, 0)
			}
			if err := l.Commit(); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("second commit: %v", err)
			}
			if n := len(segFiles(t, cfg.Dir, ".log")); n != files {
				t.Fatalf("%d segment files, was %d", n, files)
			}
			// Free space by purging old segments, then write again.
			if _, err := l.Purge(st.LastSeq/2, ""); err != nil {
				t.Fatalf("Purge on a full disk: %v", err)
			}
			more := appendMsgs(t, l, 20, subj("after"), 1000)
			if more[0].seq != st.LastSeq+1 {
				t.Fatalf("sequence %d, want %d handed out again", more[0].seq, st.LastSeq+1)
			}
			l, rep := reopen(t, l)
			if rep.TruncatedBytes != 0 || len(rep.Corrupt) != 0 {
				t.Fatalf("report %+v", rep)
			}
			for _, m := range more {
				checkRead(t, l, m)
			}
			if got := readAll(t, l, 0); uint64(len(got)) != l.State().Msgs {
				t.Fatalf("reader %d, state %+v", len(got), l.State())
			}
			l.Close()
		})
	}
}
