package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	tern "github.com/tern-mq/tern/client/go"
)

// TestKafkaToNativeAndBack: a record a Kafka producer sends reaches a native
// subscriber of the topic's subject with its key and headers, and a message
// published into the stream natively is read by a Kafka consumer.
func TestKafkaToNativeAndBack(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "orders", Subjects: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync("orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr)
	rec := &kgo.Record{Topic: "orders", Key: []byte("k1"), Value: []byte("from kafka"),
		Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("kgo")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "from kafka" || m.Header.Get("Tern-Key") != "k1" || m.Header.Get("origin") != "kgo" {
		t.Fatalf("native subscriber got %q with headers %v", m.Data, m.Header)
	}
	if ts, err := strconv.ParseInt(m.Header.Get("Tern-Timestamp"), 10, 64); err != nil || ts != rec.Timestamp.UnixMilli() {
		t.Fatalf("Tern-Timestamp %q, want %d", m.Header.Get("Tern-Timestamp"), rec.Timestamp.UnixMilli())
	}
	ack, err := nc.Streams().Publish(ctx, "orders", []byte("from tern"), tern.Key("k2"))
	if err != nil || ack.Seq != 2 {
		t.Fatalf("native publish: %+v, %v", ack, err)
	}
	got := consume(t, addr, "orders", 2)
	if string(got[1].Value) != "from tern" || string(got[1].Key) != "k2" || got[1].Offset != 1 {
		t.Fatalf("Kafka consumer read %q key %q at %d", got[1].Value, got[1].Key, got[1].Offset)
	}
}

// TestWildcardStream: a stream capturing a wildcard is a topic whose records name
// their subject in a Tern-Subject header; without one, or with one the stream
// does not capture, Produce refuses the batch with INVALID_RECORD.
func TestWildcardStream(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "SENSORS", Subjects: []string{"sensors.>"}}); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr, kgo.RecordRetries(0))
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "SENSORS", Value: []byte("x")}).FirstErr()
	if !kerrIs(err, kerr.InvalidRecord) {
		t.Fatalf("no subject: %v, want INVALID_RECORD", err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "SENSORS", Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: "Tern-Subject", Value: []byte("other.k1")}}}).FirstErr()
	if !kerrIs(err, kerr.InvalidRecord) {
		t.Fatalf("subject not captured: %v, want INVALID_RECORD", err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "SENSORS", Value: []byte("21.5"),
		Headers: []kgo.RecordHeader{{Key: "Tern-Subject", Value: []byte("sensors.k1.temp")}}}).FirstErr()
	if err != nil {
		t.Fatal(err)
	}
	got := consume(t, addr, "SENSORS", 1)
	if len(got[0].Headers) != 1 || got[0].Headers[0].Key != "Tern-Subject" || string(got[0].Headers[0].Value) != "sensors.k1.temp" {
		t.Fatalf("headers %v, want the subject", got[0].Headers)
	}
}

func kerrIs(err error, want *kerr.Error) bool {
	for e := err; e != nil; {
		if ke, ok := e.(*kerr.Error); ok {
			return ke.Code == want.Code
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// TestLongPollFetch: a fetch at the end of a partition with max.wait.ms of 10 s
// returns as soon as a record is committed, with it.
func TestLongPollFetch(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "poll", Subjects: []string{"poll"}, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 12, 10_000, 1, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "poll"
	for p := range int32(2) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, 0, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	start := time.Now()
	published := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		published <- time.Now()
		_, _ = nc.Streams().Publish(context.Background(), "poll", []byte("wake up"), tern.ToPartition(1))
	}()
	resp := r.do(req).(*kmsg.FetchResponse)
	took := time.Since(start)
	at := <-published
	if took > 5*time.Second {
		t.Fatalf("fetch answered after %v: it waited for its max wait, not for the data", took)
	}
	if time.Since(at) < 0 || took < 300*time.Millisecond {
		t.Fatalf("fetch answered after %v, before anything was published", took)
	}
	p1 := resp.Topics[0].Partitions[1]
	if p1.ErrorCode != 0 || p1.HighWatermark != 1 || len(p1.RecordBatches) == 0 {
		t.Fatalf("partition 1: error %d high watermark %d, %d bytes", p1.ErrorCode, p1.HighWatermark, len(p1.RecordBatches))
	}
	var b kmsg.RecordBatch
	if err := b.ReadFrom(p1.RecordBatches); err != nil || b.NumRecords != 1 || b.FirstOffset != 0 {
		t.Fatalf("batch %+v, %v", b, err)
	}
	// With nothing coming, the fetch waits its max wait and answers empty.
	req.MaxWaitMillis = 200
	req.Topics[0].Partitions[1].FetchOffset = 1
	start = time.Now()
	resp = r.do(req).(*kmsg.FetchResponse)
	if took := time.Since(start); took < 150*time.Millisecond || len(resp.Topics[0].Partitions[1].RecordBatches) != 0 {
		t.Fatalf("empty fetch took %v with %d bytes", took, len(resp.Topics[0].Partitions[1].RecordBatches))
	}
	// An offset past the end is out of range.
	req.Topics[0].Partitions[1].FetchOffset = 5
	resp = r.do(req).(*kmsg.FetchResponse)
	if code := resp.Topics[0].Partitions[1].ErrorCode; code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("offset past the end: error %d", code)
	}
}
