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

// TestFetchAnswerFramedInPlace: an answer whose records are one partition's is
// framed around them where they were read and handed to the connection's queue
// whole; every Fetch version clients use, names (up to a stream's longest) or topic
// ids, and answers of two partitions (framed the usual way) decode to the same
// records, answer after answer on one connection.
func TestFetchAnswerFramedInPlace(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	long := "f" + string(bytes.Repeat([]byte("l"), 63)) // a stream's longest name
	for _, name := range []string{"inplace", long} {
		if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 60
	for i := range n {
		for _, name := range []string{"inplace", long} {
			msg := &tern.Msg{Subject: fmt.Sprintf("%s.%d", name, i), Data: fmt.Appendf(nil, "%04d %s", i, bytes.Repeat([]byte("v"), 500)),
				Header: tern.Header{"Tern-Key": {fmt.Sprint(i % 7)}}} // keys spread over both partitions
			if _, err := nc.Streams().PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := dialRaw(t, addr)
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Version = 12
	for _, name := range []string{"inplace", long} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		mreq.Topics = append(mreq.Topics, mt)
	}
	ids := map[string][16]byte{}
	for _, mt := range r.do(mreq).(*kmsg.MetadataResponse).Topics {
		ids[*mt.Topic] = mt.TopicID
	}
	values := func(p *kmsg.FetchResponseTopicPartition) []string {
		_, recs := fetchedRecords(t, p.RecordBatches)
		var out []string
		for _, rec := range recs {
			out = append(out, string(rec.Value[:4]))
		}
		return out
	}
	for _, version := range []int16{4, 7, 11, 12, 13, 16} {
		for _, name := range []string{"inplace", long} {
			for _, parts := range [][]int32{{0}, {1}, {0, 1}} {
				req := kmsg.NewPtrFetchRequest()
				req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = version, 100, 1, 1<<20, -1
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic, rt.TopicID = name, ids[name]
				for _, p := range parts {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.PartitionMaxBytes = p, 1<<20
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
				resp := r.do(req).(*kmsg.FetchResponse)
				what := fmt.Sprintf("v%d, %d-byte name, partitions %v", version, len(name), parts)
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != len(parts) {
					t.Fatalf("%s: answer of %d topics", what, len(resp.Topics))
				}
				if version < 13 && resp.Topics[0].Topic != name {
					t.Fatalf("%s: answer names topic %q", what, resp.Topics[0].Topic)
				}
				total := 0
				for i, p := range resp.Topics[0].Partitions {
					if p.ErrorCode != 0 || p.Partition != parts[i] {
						t.Fatalf("%s: partition %d error %d", what, p.Partition, p.ErrorCode)
					}
					got := values(&p)
					if int64(len(got)) != p.HighWatermark || len(got) == 0 {
						t.Fatalf("%s: partition %d: %d records, high watermark %d", what, p.Partition, len(got), p.HighWatermark)
					}
					for j := 1; j < len(got); j++ {
						if got[j] <= got[j-1] {
							t.Fatalf("%s: partition %d: %s after %s", what, p.Partition, got[j], got[j-1])
						}
					}
					total += len(got)
				}
				if len(parts) == 2 && total != n {
					t.Fatalf("%s: %d records in both partitions, want %d", what, total, n)
				}
			}
		}
	}
}
