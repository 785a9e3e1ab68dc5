package store

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestKill9 runs a writer in a child process, kills it with SIGKILL in the
// middle of its work and reopens the log: under every sync policy, every
// record whose Commit returned and every tombstone whose Delete returned is
// there (the data was in the page cache). The writer deletes most records
// soon after it writes them and cleans beside itself, so the kill may come in
// the middle of a segment's rewrite or a merge of several.
func TestKill9(t *testing.T) {
	if os.Getenv("TERN_STORE_CHILD") != "" {
		return
	}
	for _, policy := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$")
			cmd.Env = append(os.Environ(), "TERN_STORE_CHILD="+dir, "TERN_STORE_POLICY="+policy.String())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// "c N": records up to N committed; "d N": record N about to be
			// deleted, "D N": deleted. Each line is written once what it
			// says is done, and every line is read, the ones written
			// before the kill came included.
			var committed uint64
			deleted, deleting := map[uint64]bool{}, map[uint64]bool{}
			sc := bufio.NewScanner(out)
			killed := false
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 2 {
					continue
				}
				n, _ := strconv.ParseUint(f[1], 10, 64)
				switch f[0] {
				case "c":
					committed = n
				case "d":
					deleting[n] = true
				case "D":
					deleted[n] = true
				}
				if committed >= 3000 && !killed {
					cmd.Process.Signal(syscall.SIGKILL)
					killed = true
				}
			}
			cmd.Wait()
			if committed == 0 {
				t.Fatal("the child committed nothing")
			}
			l, rep := mustOpen(t, Config{Dir: dir, Name: "kill", SegmentBytes: 64 << 10, Sync: SyncNever})
			if len(rep.Corrupt) != 0 {
				t.Fatalf("report %+v", rep)
			}
			st := l.State()
			if st.LastSeq < committed {
				t.Fatalf("LastSeq %d, but %d was committed", st.LastSeq, committed)
			}
			var buf []byte
			for q := uint64(1); q <= committed; q++ {
				rec, b, err := l.Read(q, buf)
				buf = b
				if deleted[q] {
					if !isNotFound(err) {
						t.Fatalf("deleted %d: %v", q, err)
					}
					continue
				}
				if deleting[q] && isNotFound(err) {
					continue // the kill came before the child said so
				}
				if err != nil || !bytes.Equal(rec.Payload, payloadFor(q, len(rec.Payload))) {
					t.Fatalf("committed %d: %v", q, err)
				}
			}
			t.Logf("committed %d, deleted %d, recovered LastSeq %d, truncated %d bytes", committed, len(deleted), st.LastSeq, rep.TruncatedBytes)
		})
	}
}

// TestKill9Child is the writer TestKill9 kills; it does nothing on its own.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("TERN_STORE_CHILD")
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	policy, _ := ParseSyncPolicy(os.Getenv("TERN_STORE_POLICY"))
	l, _, err := Open(Config{Dir: dir, Name: "kill", SegmentBytes: 64 << 10, Sync: policy})
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	var commits [][2]uint64 // each commit's first and last sequence
	for i := 0; ; i++ {
		var first, last uint64
		for j := 0; j < 1+i%7; j++ {
			seq, err := l.Append([]byte("k"), nil, payloadFor(l.last+uint64(l.npend)+1, (i*37+j*11)%900), 0)
			if err != nil {
				t.Fatal(err)
			}
			if j == 0 {
				first = seq
			}
			last = seq
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "c %d\n", last)
		commits = append(commits, [2]uint64{first, last})
		var dels []uint64
		if i%3 == 0 && last > 5 {
			dels = append(dels, last-5)
		}
		if i >= 3 {
			// All but the first record of the commit three before.
			c := commits[i-3]
			for q := c[0] + 1; q <= c[1]; q++ {
				dels = append(dels, q)
			}
		}
		for _, q := range dels {
			fmt.Fprintf(w, "d %d\n", q)
		}
		w.Flush()
		for _, q := range dels {
			if err := l.Delete(q); err != nil && !isNotFound(err) {
				t.Fatal(err)
			}
			fmt.Fprintf(w, "D %d\n", q)
		}
		if _, err := l.CleanAside(0.5, nil); err != nil {
			t.Fatal(err)
		}
		w.Flush()
	}
}
