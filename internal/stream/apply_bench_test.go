package stream

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// kafkaLikeEntry is a compressed batch of n messages as the Kafka API proposes
// an idempotent producer's records: 100-byte values (value(i)) and the headers
// it adds to each (partition, timestamp, numbered message id).
func kafkaLikeEntry(token uint64, ts int64, firstID, n int, value func(i int) []byte) []byte {
	var q inbound
	idx := make([]int, 0, n)
	tsText := strconv.FormatInt(ts/int64(time.Millisecond), 10)
	for i := range n {
		var it inItem
		it.subj = q.put([]byte("bench"))
		h := header.Append(nil, streamapi.HeaderToPartition, "0")
		h = header.Append(h, "Tern-Timestamp", tsText)
		h = header.Append(h, streamapi.HeaderMsgID, "kafka:7:0:0#"+strconv.Itoa(firstID+i))
		it.hdr = q.put(h)
		it.data = q.put(value(firstID + i))
		idx = append(idx, len(q.items))
		q.items = append(q.items, it)
	}
	return compressMsgEntry(appendMsgEntry(nil, token, ts, &q, idx), nil)
}

// BenchmarkApplyKafkaBatches measures a follower applying compressed batches of
// an idempotent Kafka producer's records to a compressing log: expanding them,
// the duplicate check, storing and committing. Reported per message. Values are
// zeros, or random capital letters as the franz-go harness's letters row sends.
func BenchmarkApplyKafkaBatches(b *testing.B) {
	zeros := make([]byte, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	letters := make([]byte, 1<<16)
	for i := range letters {
		letters[i] = byte('A' + rng.IntN(26))
	}
	for _, v := range []struct {
		name  string
		value func(i int) []byte
	}{
		{"zeros", func(int) []byte { return zeros }},
		{"letters", func(i int) []byte { at := i * 37 % (len(letters) - 100); return letters[at : at+100] }},
	} {
		b.Run(v.name, func(b *testing.B) {
			const perEntry = 500
			l, _, err := store.Open(store.Config{Dir: b.TempDir(), Name: "p0", Sync: store.SyncNever})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			m := newPartitionMachine(l, 2*time.Minute, nil)
			m.setCompression(store.CompressS2) // as the stream's configuration asks; Apply passes it on
			entries := make([][]byte, (b.N+perEntry-1)/perEntry)
			ts := time.Now().UnixNano()
			for i := range entries {
				entries[i] = kafkaLikeEntry(uint64(i+1), ts, i*perEntry, perEntry, v.value)
				if entries[i][0] != entryMsgsBlocks {
					b.Fatal("a Kafka-like batch did not compress")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i, e := range entries {
				if err := m.Apply([]replica.Entry{{Index: uint64(i + 1), Data: e}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if st := l.State(); st.LastSeq != uint64(len(entries)*perEntry) {
				b.Fatalf("%d messages stored of %d", st.LastSeq, len(entries)*perEntry)
			}
		})
	}
}
