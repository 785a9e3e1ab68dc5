package stream_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/streamapi"
)

// TestSeekConsumer: a durable consumer's position set through the API, forward and
// back, is where it delivers next and is still there after a restart; a work
// queue's consumer, a partition the stream lacks and a missing consumer are refused.
func TestSeekConsumer(t *testing.T) {
	dir := t.TempDir()
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "seek", Subjects: []string{"seek.>"}, Partitions: 2})
	for range 10 {
		e.publish("seek.a", "x", tern.ToPartition(0))
	}
	e.addConsumer("seek", tern.ConsumerConfig{Durable: "g", AckPolicy: tern.AckExplicit})
	p := e.js.Pull("seek", "g")
	for _, m := range e.fetch(p, 10) {
		if err := m.AckSync(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	info, err := e.js.SeekConsumer(e.ctx, "seek", "g", tern.SeekPosition{Partition: 0, Next: 4}, tern.SeekPosition{Partition: 1, Next: 7})
	if err != nil {
		t.Fatal(err)
	}
	if f0, f1 := info.Partitions[0].AckFloor, info.Partitions[1].AckFloor; f0 != 3 || f1 != 6 {
		t.Fatalf("ack floors after seek %d, %d; want 3, 6", f0, f1)
	}
	if got := meta(t, e.fetch(p, 1)[0]).StreamSeq; got != 4 {
		t.Fatalf("delivered seq %d after seeking back to 4", got)
	}
	stop(t, srv)
	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	if f := e.consumerInfo("seek", "g").Partitions[1].AckFloor; f != 6 {
		t.Fatalf("partition 1 ack floor %d after a restart, want 6", f)
	}
	// The backward move survived: seq 4 was delivered and awaits its ack (due
	// again after the ack wait), and seq 5 is next.
	if got := meta(t, e.fetch(e.js.Pull("seek", "g"), 1)[0]).StreamSeq; got != 5 {
		t.Fatalf("delivered seq %d after the restart, want 5", got)
	}

	var ae *tern.APIError
	if _, err := e.js.SeekConsumer(e.ctx, "seek", "g", tern.SeekPosition{Partition: 2, Next: 1}); !errors.As(err, &ae) || ae.Code != 400 {
		t.Fatalf("seek of partition 2: %v, want a 400", err)
	}
	if _, err := e.js.SeekConsumer(e.ctx, "seek", "nobody", tern.SeekPosition{Partition: 0, Next: 1}); !errors.Is(err, tern.ErrConsumerNotFound) {
		t.Fatalf("seek of a missing consumer: %v", err)
	}
	e.addStream(tern.StreamConfig{Name: "wq", Subjects: []string{"wq"}, Retention: tern.RetainWorkQueue})
	e.addConsumer("wq", tern.ConsumerConfig{Durable: "w"})
	if _, err := e.js.SeekConsumer(e.ctx, "wq", "w", tern.SeekPosition{Partition: 0, Next: 1}); !errors.As(err, &ae) || ae.Code != 400 {
		t.Fatalf("seek on a work queue: %v, want a 400", err)
	}
}

// TestSeekAfterItsDeadline: a seek that reaches its consumer after the deadline it
// carries is refused with CodeExpired and moves nothing, and one before its
// deadline is applied; so a requester that gave up on a seek and sought again is
// never overtaken by the first.
func TestSeekAfterItsDeadline(t *testing.T) {
	srv := startAt(t, t.TempDir(), nil)
	defer stop(t, srv)
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "dl", Subjects: []string{"dl"}})
	for range 10 {
		e.publish("dl", "x")
	}
	e.addConsumer("dl", tern.ConsumerConfig{Durable: "g", AckPolicy: tern.AckExplicit})
	seek := func(next uint64, notAfter time.Time) streamapi.Response[streamapi.ConsumerInfo] {
		t.Helper()
		body, _ := json.Marshal(streamapi.SeekRequest{Positions: []streamapi.SeekPosition{{Partition: 0, Next: next}}, NotAfter: notAfter})
		m, err := e.nc.Request(e.ctx, streamapi.ConsumerSeekSubject("dl", "g"), body)
		if err != nil {
			t.Fatal(err)
		}
		var resp streamapi.Response[streamapi.ConsumerInfo]
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := seek(8, time.Now().Add(time.Minute)); r.Error != nil || r.Value.Partitions[0].AckFloor != 7 {
		t.Fatalf("seek before its deadline: %+v", r)
	}
	r := seek(3, time.Now().Add(-time.Second))
	if r.Error == nil || r.Error.Code != streamapi.CodeExpired {
		t.Fatalf("seek after its deadline answered %+v, want code %d", r, streamapi.CodeExpired)
	}
	if f := e.consumerInfo("dl", "g").Partitions[0].AckFloor; f != 7 {
		t.Fatalf("ack floor %d after a refused seek, want 7", f)
	}
	if got := meta(t, e.fetch(e.js.Pull("dl", "g"), 1)[0]).StreamSeq; got != 8 {
		t.Fatalf("delivered seq %d, want 8", got)
	}
}
