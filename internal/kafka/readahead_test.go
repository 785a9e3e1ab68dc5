package kafka_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	tern "github.com/tern-mq/tern/client/go"
)

// fetchedRecords decodes the records of a fetched partition's batches, with their
// offsets.
func fetchedRecords(t *testing.T, batches []byte) (offsets []int64, recs []kmsg.Record) {
	t.Helper()
	for len(batches) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(batches); err != nil {
			t.Fatalf("batch: %v", err)
		}
		batches = batches[12+int(b.Length):]
		body := b.Records
		for i := 0; i < int(b.NumRecords); i++ {
			length, k := kbin.Varint(body)
			var r kmsg.Record
			if err := r.ReadFrom(body[:k+int(length)]); err != nil {
				t.Fatalf("record: %v", err)
			}
			body = body[k+int(length):]
			offsets = append(offsets, b.FirstOffset+int64(r.OffsetDelta))
			recs = append(recs, r)
		}
	}
	return offsets, recs
}

// TestFetchReadAhead: a consumer streaming through a partition in fetches that
// stop at their byte limit gets every record once and in order, with the
// connection reading ahead between its fetches, and a read ahead never outlives
// a removal: after a purge of one subject between two fetches, the next fetch
// holds none of that subject's messages.
func TestFetchReadAhead(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "ahead", Subjects: []string{"ahead.>"}, Compression: "s2"}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := range n {
		subj := "ahead.a"
		if i%2 == 1 {
			subj = "ahead.b"
		}
		if _, err := nc.Streams().Publish(ctx, subj, fmt.Appendf(nil, "%04d %s", i, bytes.Repeat([]byte("x"), 1000))); err != nil {
			t.Fatal(err)
		}
	}
	r := dialRaw(t, addr)
	fetch := func(offset int64) *kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 12, 100, 1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "ahead"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 32<<10
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := r.do(req).(*kmsg.FetchResponse)
		p := &resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("fetch at %d: error %d", offset, p.ErrorCode)
		}
		return p
	}
	subjectOf := func(rec kmsg.Record) string {
		for _, h := range rec.Headers {
			if h.Key == "Tern-Subject" {
				return string(h.Value)
			}
		}
		return ""
	}
	// Streaming: each fetch stops at its limit, the next starts after it.
	next, seen := int64(0), 0
	for round := 0; round < 4; round++ {
		offs, recs := fetchedRecords(t, fetch(next).RecordBatches)
		if len(recs) < 10 || len(recs) > 40 {
			t.Fatalf("round %d: %d records for a 32 KiB limit", round, len(recs))
		}
		for i, rec := range recs {
			if offs[i] != next || string(rec.Value[:4]) != fmt.Sprintf("%04d", next) {
				t.Fatalf("round %d: offset %d holds %q, want offset %d", round, offs[i], rec.Value[:4], next)
			}
			next++
			seen++
		}
	}
	// The connection has read ahead from next by now (it does so while it waits
	// for the next request); a purge of ahead.b must void that.
	time.Sleep(100 * time.Millisecond)
	if _, err := nc.Streams().PurgeStream(ctx, "ahead", &tern.PurgeRequest{Subject: "ahead.b"}); err != nil {
		t.Fatal(err)
	}
	for next < n {
		p := fetch(next)
		offs, recs := fetchedRecords(t, p.RecordBatches)
		if len(recs) == 0 {
			t.Fatalf("nothing at %d, high watermark %d", next, p.HighWatermark)
		}
		for i, rec := range recs {
			if subj := subjectOf(rec); subj != "ahead.a" || offs[i] < next || offs[i]%2 != 0 {
				t.Fatalf("offset %d (subject %q) after the purge of ahead.b, fetching from %d", offs[i], subj, next)
			}
			if string(rec.Value[:4]) != fmt.Sprintf("%04d", offs[i]) {
				t.Fatalf("offset %d holds %q", offs[i], rec.Value[:4])
			}
			next = offs[i] + 1
		}
		if p.HighWatermark == next+1 {
			next++ // the last message, ahead.b's, is gone
		}
	}
}
