package stream_test

import (
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// TestWatchAppendsAndPartitionReader: a watcher of one partition is woken by a
// commit to it, not by one to another partition, and a reader by position finds
// what was stored there.
func TestWatchAppendsAndPartitionReader(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "W", Subjects: []string{"w"}, Partitions: 2})
	s, err := e.srv.Streams().Stream("W")
	if err != nil {
		t.Fatal(err)
	}
	if s.Partitions() != 2 {
		t.Fatalf("partitions %d, want 2", s.Partitions())
	}
	c := make(chan struct{}, 1)
	stop := s.WatchAppends(1, c)
	defer stop()
	if _, err := e.js.Publish(e.ctx, "w", []byte("to 0"), tern.ToPartition(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
		t.Fatal("woken by a commit to another partition")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := e.js.Publish(e.ctx, "w", []byte("to 1"), tern.ToPartition(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken by a commit to the watched partition")
	}
	st, err := s.PartitionState(1)
	if err != nil || st.FirstSeq != 1 || st.LastSeq != 1 {
		t.Fatalf("partition 1 state %+v, %v", st, err)
	}
	r, err := s.PartitionReader(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || string(rec.Payload) != "to 1" || rec.Seq != 1 {
		t.Fatalf("read %q seq %d, %v", rec.Payload, rec.Seq, err)
	}
	if _, err := s.PartitionReader(2, 1); err == nil {
		t.Fatal("a reader of partition 2 of a 2-partition stream")
	}
	stop()
	stop() // twice is harmless
}
