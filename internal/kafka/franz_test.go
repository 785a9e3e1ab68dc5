package kafka_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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
