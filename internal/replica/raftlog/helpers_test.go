package raftlog

import (
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tern-mq/tern/internal/store"
)

func testConfig(t testing.TB) Config {
	return Config{Dir: filepath.Join(t.TempDir(), "group"), Name: "test/0", Sync: store.SyncNever}
}

func mustOpen(t testing.TB, cfg Config) *Log {
	t.Helper()
	l, _, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func reopen(t testing.TB, l *Log) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return mustOpen(t, l.cfg)
}

// ent makes a normal entry as raft does (Type left unset).
func ent(index, term uint64, data []byte) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Data: data}
}

// ents makes entries lo … hi-1 of term with data derived from the index.
func ents(lo, hi, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := lo; i < hi; i++ {
		out = append(out, ent(i, term, dataFor(i, term)))
	}
	return out
}

func dataFor(index, term uint64) []byte {
	b := make([]byte, int(index%50)+1)
	for i := range b {
		b[i] = byte(index*31 + term*7 + uint64(i))
	}
	return b
}
