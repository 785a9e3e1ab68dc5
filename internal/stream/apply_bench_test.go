package stream

import (
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// kafkaLikeEntry is a compressed batch of n messages as the Kafka API proposes
// an idempotent producer's records: 100-byte values of zeros and the headers it
// adds to each (partition, timestamp, numbered message id).
func kafkaLikeEntry(token uint64, ts int64, firstID, n int) []byte {
	var q inbound
	idx := make([]int, 0, n)
	value := make([]byte, 100)
	tsText := strconv.FormatInt(ts/int64(time.Millisecond), 10)
	for i := range n {
		var it inItem
		it.subj = q.put([]byte("bench"))
		h := header.Append(nil, streamapi.HeaderToPartition, "0")
		h = header.Append(h, "Tern-Timestamp", tsText)
		h = header.Append(h, streamapi.HeaderMsgID, "kafka:7:0:0:"+strconv.Itoa(firstID+i))
		it.hdr = q.put(h)
		it.data = q.put(value)
		idx = append(idx, len(q.items))
		q.items = append(q.items, it)
	}
	return compressMsgEntry(appendMsgEntry(nil, token, ts, &q, idx))
}

// BenchmarkApplyKafkaBatches measures a follower applying compressed batches of
// an idempotent Kafka producer's records to a compressing log: expanding them,
// the duplicate check, storing and committing. Reported per message.
func BenchmarkApplyKafkaBatches(b *testing.B) {
	const perEntry = 500
	l, _, err := store.Open(store.Config{Dir: b.TempDir(), Name: "p0", Sync: store.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	m := newPartitionMachine(l, 2*time.Minute, nil)
	m.setCompression(store.CompressS2) // as the stream's configuration asks; Apply passes it on
	const ents = 64
	entries := make([][]byte, ents)
	ts := time.Now().UnixNano()
	id := 0
	for i := range entries {
		entries[i] = kafkaLikeEntry(uint64(i+1), ts, id, perEntry)
		if entries[i][0] != entryMsgsS2 {
			b.Fatal("a Kafka-like batch did not compress")
		}
		id += perEntry
	}
	b.ReportAllocs()
	b.ResetTimer()
	index := uint64(1)
	for i := 0; i < b.N; i += perEntry {
		k := (i / perEntry) % ents
		if k == 0 && i > 0 {
			// The same ids again would be duplicates: next round, new ids.
			b.StopTimer()
			ts += int64(time.Millisecond)
			for j := range entries {
				entries[j] = kafkaLikeEntry(uint64(j+1), ts, id, perEntry)
				id += perEntry
			}
			b.StartTimer()
		}
		if err := m.Apply([]replica.Entry{{Index: index, Data: entries[k]}}); err != nil {
			b.Fatal(err)
		}
		index++
	}
	b.StopTimer()
	if st := l.State(); st.LastSeq < uint64(b.N) {
		b.Fatalf("%d messages stored of %d", st.LastSeq, b.N)
	}
}
