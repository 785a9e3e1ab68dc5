package stream

import (
	"testing"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/streamapi"
)

// The removals the writer takes are never the array consumers append the next
// ones to, whatever the order of takes with and without removals: a batch of
// messages taken with no removals queued must not leave the queue of removals
// sharing the spare's array.
func TestTakenRemovalsAreNotTheQueue(t *testing.T) {
	m, err := New(Config{Dir: t.TempDir()}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.AddStream(streamapi.StreamConfig{Name: "WQ", Subjects: []string{"wq"}, Retention: streamapi.RetainWorkQueue})
	if err != nil {
		t.Fatal(err)
	}
	s.role.Lock() // the writer waits: this goroutine takes and recycles as it would
	defer s.role.Unlock()
	queueDel := func(seq uint64) {
		s.qmu.Lock()
		s.deletes = append(s.deletes, partSeq{0, seq})
		s.qmu.Unlock()
	}
	queueMsg := func() {
		s.qmu.Lock()
		s.q.add(&broker.Message{Subject: []byte("wq"), Payload: []byte("m")}, 1<<20)
		s.qmu.Unlock()
	}
	queueDel(1)
	dels, _, _ := s.take(true)
	s.recycle(dels)
	queueMsg() // a batch without removals
	dels, _, _ = s.take(true)
	s.recycle(dels)
	queueDel(2)
	dels, _, _ = s.take(true)
	queueDel(3) // a consumer queues the next while the writer works on dels
	if len(dels) != 1 || dels[0].seq != 2 {
		t.Fatalf("the removals taken became %v when the next was queued", dels)
	}
	s.recycle(dels)
}
