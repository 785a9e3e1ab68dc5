package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/kafka"
)

// TestFranzProduceConsumeEveryCodec produces keyed records with headers through
// franz-go with each compression codec to an auto-created topic and reads them
// back in order, with their keys, headers and offsets.
func TestFranzProduceConsumeEveryCodec(t *testing.T) {
	_, addr := startTern(t, nil)
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "codec-" + name
			cl := newClient(t, addr, kgo.ProducerBatchCompression(codec), kgo.AllowAutoTopicCreation())
			const n = 200
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7),
					Value:   fmt.Appendf(nil, "value %d of %s, compressible compressible compressible", i, name),
					Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}})
			}
			if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			got := consume(t, addr, topic, n)
			if len(got) != n {
				t.Fatalf("got %d records, want %d", len(got), n)
			}
			for i, r := range got {
				want := recs[i]
				if string(r.Value) != string(want.Value) || string(r.Key) != string(want.Key) || r.Offset != int64(i) {
					t.Fatalf("record %d: offset %d key %q value %q, want key %q value %q", i, r.Offset, r.Key, r.Value, want.Key, want.Value)
				}
				if !slices.EqualFunc(r.Headers, want.Headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
					t.Fatalf("record %d headers %v, want %v", i, r.Headers, want.Headers)
				}
				if r.Timestamp.UnixMilli() != want.Timestamp.UnixMilli() {
					t.Fatalf("record %d timestamp %v, want the producer's %v", i, r.Timestamp, want.Timestamp)
				}
			}
		})
	}
}

// TestNullAndEmptyKeysAndValues: a null value (a tombstone) reads back null, an
// empty one empty, and the same for keys; a native subscriber sees the
// tombstone as an empty payload marked Tern-Null-Value.
func TestNullAndEmptyKeysAndValues(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: "nulls", Subjects: []string{"nulls"}}); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync("nulls")
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr)
	recs := []*kgo.Record{
		{Topic: "nulls", Key: []byte("k"), Value: nil},
		{Topic: "nulls", Key: []byte("k"), Value: []byte{}},
		{Topic: "nulls", Key: nil, Value: []byte("v")},
		{Topic: "nulls", Key: []byte{}, Value: []byte("v")},
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consume(t, addr, "nulls", len(recs))
	for i, r := range got {
		want := recs[i]
		if (r.Value == nil) != (want.Value == nil) || (r.Key == nil) != (want.Key == nil) ||
			string(r.Value) != string(want.Value) || string(r.Key) != string(want.Key) {
			t.Errorf("record %d: key %q (null %v) value %q (null %v), want key %q (null %v) value %q (null %v)", i,
				r.Key, r.Key == nil, r.Value, r.Value == nil, want.Key, want.Key == nil, want.Value, want.Value == nil)
		}
		if len(r.Headers) != 0 {
			t.Errorf("record %d: headers %v, want none", i, r.Headers)
		}
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Header[kafka.HeaderNullValue]; !ok || len(m.Data) != 0 {
		t.Fatalf("the tombstone natively: payload %q, headers %v", m.Data, m.Header)
	}
}
