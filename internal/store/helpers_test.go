package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testConfig(t testing.TB) Config {
	return Config{Dir: filepath.Join(t.TempDir(), "log"), Name: "test/0", Sync: SyncNever}
}

func mustOpen(t testing.TB, cfg Config) (*Log, Report) {
	t.Helper()
	l, rep, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, rep
}

func reopen(t testing.TB, l *Log) (*Log, Report) {
	t.Helper()
	cfg := l.cfg
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return mustOpen(t, cfg)
}

// msg is what a test expects to read back.
type msg struct {
	seq     uint64
	ts      int64
	subject string
	header  []byte
	payload []byte
}

func payloadFor(seq uint64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(seq*31 + uint64(i)*7)
	}
	return b
}

func appendMsgs(t testing.TB, l *Log, n int, subject func(i int) string, size int) []msg {
	t.Helper()
	var out []msg
	for i := 0; i < n; i++ {
		s := subject(i)
		seq, err := l.Append([]byte(s), nil, payloadFor(l.last+uint64(l.npend)+1, size), 0)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		out = append(out, msg{seq: seq, subject: s, payload: payloadFor(seq, size)})
	}
	if err := l.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return out
}

func subj(s string) func(int) string { return func(int) string { return s } }

func checkRead(t testing.TB, l *Log, m msg) {
	t.Helper()
	r, _, err := l.Read(m.seq, nil)
	if err != nil {
		t.Fatalf("Read(%d): %v", m.seq, err)
	}
	if r.Seq != m.seq || string(r.Subject) != m.subject || !bytes.Equal(r.Payload, m.payload) {
		t.Fatalf("Read(%d) = seq %d subject %q payload %d bytes; want subject %q payload %d bytes",
			m.seq, r.Seq, r.Subject, len(r.Payload), m.subject, len(m.payload))
	}
}

func readAll(t testing.TB, l *Log, from uint64) []Record {
	t.Helper()
	r := l.NewReader(from)
	defer r.Close()
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		rec.Subject = bytes.Clone(rec.Subject)
		rec.Header = bytes.Clone(rec.Header)
		rec.Payload = bytes.Clone(rec.Payload)
		out = append(out, rec)
	}
}

func seqsOf(recs []Record) []uint64 {
	var s []uint64
	for _, r := range recs {
		s = append(s, r.Seq)
	}
	return s
}

type subjCount struct{ msgs, last uint64 }

func subjects(l *Log) map[string]subjCount {
	m := map[string]subjCount{}
	l.ForEachSubject(func(s string, n, last uint64) bool {
		m[s] = subjCount{n, last}
		return true
	})
	return m
}

func segFiles(t testing.TB, dir, ext string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

var _ = fmt.Sprintf
