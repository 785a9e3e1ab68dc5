package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// makeBatch encodes an uncompressed v2 record batch of values, from an idempotent
// producer when pid >= 0.
func makeBatch(pid int64, epoch int16, firstSeq int32, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		body := r.AppendTo(nil)[1:] // after a zero Length
		recs = append(kbin.AppendVarint(recs, int32(len(body))), body...)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: firstSeq, NumRecords: int32(len(values)), Records: recs}
	if pid < 0 {
		b.ProducerEpoch, b.FirstSequence = -1, -1
	}
	b.Length = int32(49 + len(recs))
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func produceReq(topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func producePart(t *testing.T, r *raw, req *kmsg.ProduceRequest) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp := r.do(req).(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("produce answer %+v", resp)
	}
	return resp.Topics[0].Partitions[0]
}

// TestUnsupportedAPIsAndVersions: an API nobody knows, an API Tern does not serve
// and a version it does not serve each get UNSUPPORTED_VERSION, and the
// connection goes on serving.
func TestUnsupportedAPIsAndVersions(t *testing.T) {
	_, addr := startTern(t, nil)
	r := dialRaw(t, addr)

	// ApiVersions at a version from the future: a v0 answer with the error and the
	// versions served (KIP-511).
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 99
	corr := r.send(av)
	got, body, err := r.readFrame()
	if err != nil || got != corr {
		t.Fatalf("ApiVersions v99: answer %d (want %d), %v", got, corr, err)
	}
	v0 := kmsg.NewPtrApiVersionsResponse()
	if err := v0.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if v0.ErrorCode != kerr.UnsupportedVersion.Code || len(v0.ApiKeys) == 0 {
		t.Fatalf("ApiVersions v99: error %d with %d APIs", v0.ErrorCode, len(v0.ApiKeys))
	}

	// An unknown API key: just the error code.
	r.corr++
	frame := kbin.AppendInt16(nil, 200)
	frame = kbin.AppendInt16(frame, 0)
	frame = kbin.AppendInt32(frame, r.corr)
	frame = kbin.AppendNullableString(frame, nil)
	r.write(append(kbin.AppendInt32(nil, int32(len(frame))), frame...))
	got, body, err = r.readFrame()
	if err != nil || got != r.corr || len(body) != 2 || int16(binary.BigEndian.Uint16(body)) != kerr.UnsupportedVersion.Code {
		t.Fatalf("unknown API: answer %d %x, %v", got, body, err)
	}

	// An API Tern does not serve (EndTxn, of transactions): its answer, with
	// the error.
	et := kmsg.NewPtrEndTxnRequest()
	et.TransactionalID = "t"
	if resp := r.do(et).(*kmsg.EndTxnResponse); resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("EndTxn: error %d", resp.ErrorCode)
	}

	// A version of a served API below what Tern serves (Produce v2, message sets).
	pr := produceReq("old", 0, nil)
	pr.Version = 2
	if resp := r.do(pr).(*kmsg.ProduceResponse); len(resp.Topics) != 0 {
		t.Fatalf("Produce v2 answered %+v", resp)
	}

	// Still serving.
	av = kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	resp := r.do(av).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions v3: error %d", resp.ErrorCode)
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == 26 {
			t.Fatal("EndTxn advertised")
		}
	}
}

// TestMalformedFrames: a request whose body does not decode, a size over the limit
// and a negative size each close the connection; other connections are served.
func TestMalformedFrames(t *testing.T) {
	_, addr := startTern(t, nil)
	cases := map[string][]byte{
		// Metadata v1 with a topic array claiming 1000 entries and no bytes for them.
		"truncated body": {0, 0, 0, 14, 0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 3, 0xe8},
		"over the limit": {0x7f, 0, 0, 0, 0, 0, 0, 1},
		"negative size":  {0xff, 0xff, 0xff, 0xf0},
		"too short":      {0, 0, 0, 2, 0, 3},
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.write(frame)
			if !r.closed() {
				t.Fatal("connection still open")
			}
			ok := dialRaw(t, addr)
			req := kmsg.NewPtrApiVersionsRequest()
			if resp := ok.do(req).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
				t.Fatalf("another connection: ApiVersions error %d", resp.ErrorCode)
			}
		})
	}
}

// TestBadCRC: a batch whose CRC does not match is refused with CORRUPT_MESSAGE and
// nothing is stored; the same batch with its CRC right is stored.
func TestBadCRC(t *testing.T) {
	s, addr := startTern(t, nil)
	r := dialRaw(t, addr)
	batch := makeBatch(-1, 0, 0, "one", "two")
	bad := append([]byte(nil), batch...)
	bad[len(bad)-1] ^= 0xff // a value byte: the CRC no longer matches
	if p := producePart(t, r, produceReq("crc", 0, bad)); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("bad CRC: error %d, want CORRUPT_MESSAGE", p.ErrorCode)
	}
	if p := producePart(t, r, produceReq("crc", 0, batch)); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("good batch: error %d base offset %d", p.ErrorCode, p.BaseOffset)
	}
	st, err := s.Streams().Stream("crc")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Info().State.Msgs; n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

// TestIdempotentSequences: a retried batch is answered with the first one's offset
// and not stored twice; a gap in sequences and an old epoch are refused as Kafka
// refuses them.
func TestIdempotentSequences(t *testing.T) {
	s, addr := startTern(t, nil)
	r := dialRaw(t, addr)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	init := r.do(ip).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 || init.ProducerID < 0 {
		t.Fatalf("InitProducerID: %+v", init)
	}
	pid, epoch := init.ProducerID, init.ProducerEpoch
	first := producePart(t, r, produceReq("idem", 0, makeBatch(pid, epoch, 0, "a", "b", "c")))
	if first.ErrorCode != 0 || first.BaseOffset != 0 {
		t.Fatalf("first batch: error %d base %d", first.ErrorCode, first.BaseOffset)
	}
	second := producePart(t, r, produceReq("idem", 0, makeBatch(pid, epoch, 3, "d")))
	if second.ErrorCode != 0 || second.BaseOffset != 3 {
		t.Fatalf("second batch: error %d base %d", second.ErrorCode, second.BaseOffset)
	}
	// The first batch again, as a producer retries one whose answer it lost.
	retry := producePart(t, r, produceReq("idem", 0, makeBatch(pid, epoch, 0, "a", "b", "c")))
	if retry.ErrorCode != 0 || retry.BaseOffset != 0 {
		t.Fatalf("retried batch: error %d base %d, want success at 0", retry.ErrorCode, retry.BaseOffset)
	}
	gap := producePart(t, r, produceReq("idem", 0, makeBatch(pid, epoch, 9, "x")))
	if gap.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("sequence gap: error %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", gap.ErrorCode)
	}
	newEpoch := producePart(t, r, produceReq("idem", 0, makeBatch(pid, epoch+1, 5, "x")))
	if newEpoch.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("new epoch not from 0: error %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", newEpoch.ErrorCode)
	}
	st, _ := s.Streams().Stream("idem")
	if n := st.Info().State.Msgs; n != 4 {
		t.Fatalf("stream holds %d messages, want 4", n)
	}
}

// TestIdempotentRetryAfterRestart: the producer state is in memory, but a batch
// retried after a restart is still stored once, and one that does not follow the
// last one stored is refused whole: its records' message ids (Tern-Msg-Id) are a
// sequence in the stream's duplicate window.
func TestIdempotentRetryAfterRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*server.Server, string) {
		return startTern(t, func(c *server.Config) { c.StoreDir = dir })
	}
	s, addr := start()
	batch := makeBatch(777, 0, 0, "once", "only")
	if p := producePart(t, dialRaw(t, addr), produceReq("restart", 0, batch)); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("first: error %d base %d", p.ErrorCode, p.BaseOffset)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s, addr = start()
	r := dialRaw(t, addr)
	if p := producePart(t, r, produceReq("restart", 0, batch)); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("retry after restart: error %d base %d, want success at 0", p.ErrorCode, p.BaseOffset)
	}
	// This node knows nothing of the producer now, but the stream does: a batch
	// that does not follow the last one stored (a copy held up on its way, as
	// a new partition leader can get) is refused whole, and the next one is
	// taken.
	if p := producePart(t, r, produceReq("restart", 0, makeBatch(777, 0, 5, "late", "copy"))); p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("a batch after a gap: error %d base %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", p.ErrorCode, p.BaseOffset)
	}
	if p := producePart(t, r, produceReq("restart", 0, makeBatch(777, 0, 2, "next", "one"))); p.ErrorCode != 0 || p.BaseOffset != 2 {
		t.Fatalf("the next batch: error %d base %d, want success at 2", p.ErrorCode, p.BaseOffset)
	}
	st, _ := s.Streams().Stream("restart")
	if n := st.Info().State.Msgs; n != 4 {
		t.Fatalf("stream holds %d messages, want 4", n)
	}
}

// TestIdempotentProducerIdleBeyondTheWindow: a producer whose last records have
// left the stream's duplicate window goes on where it was: its next batch names
// its last sequence only if the stream still knows it ("~").
func TestIdempotentProducerIdleBeyondTheWindow(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: "idle", Subjects: []string{"idle"},
		DuplicateWindow: tern.Duration(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	if p := producePart(t, r, produceReq("idle", 0, makeBatch(31, 0, 0, "a", "b"))); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("first batch: error %d base %d", p.ErrorCode, p.BaseOffset)
	}
	time.Sleep(400 * time.Millisecond)
	if p := producePart(t, r, produceReq("idle", 0, makeBatch(31, 0, 2, "c", "d"))); p.ErrorCode != 0 || p.BaseOffset != 2 {
		t.Fatalf("a batch after the window: error %d base %d, want success at 2", p.ErrorCode, p.BaseOffset)
	}
}

// TestProduceInvalidAcks: a produce request with acks other than 0, 1 or -1 is
// answered INVALID_REQUIRED_ACKS, nothing of it stored, and the connection
// goes on serving.
func TestProduceInvalidAcks(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: "acks", Subjects: []string{"acks"}}); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	req := produceReq("acks", 0, makeBatch(-1, -1, -1, "x"))
	req.Acks = 2
	resp := r.do(req).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.InvalidRequiredAcks.Code {
		t.Fatalf("acks=2: error %d, want INVALID_REQUIRED_ACKS", p.ErrorCode)
	}
	if p := producePart(t, r, produceReq("acks", 0, makeBatch(-1, -1, -1, "y"))); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("after it, on the same connection: error %d base %d, want success at 0", p.ErrorCode, p.BaseOffset)
	}
}

// TestPipelinedProduceBesideAnotherPublisher: while a native client publishes
// into the same stream, so that the stream's writer is sometimes busy and a
// produce request's acks sometimes come after the reader has moved on, 200
// pipelined produce requests are answered in the order they came, each with the
// offset its records are stored at, whether the reader answered it itself or
// handed it to the answerer.
func TestPipelinedProduceBesideAnotherPublisher(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: "shared", Subjects: []string{"shared"}}); err != nil {
		t.Fatal(err)
	}
	const requests, maxNatives = 200, 1_000_000
	published, stop := make(chan error, 1), make(chan struct{})
	pub := native(t, s)
	go func() {
		// Publishing until the produce answers are in, and no further.
		for i := 0; i < maxNatives; i++ {
			select {
			case <-stop:
				published <- pub.Flush()
				return
			default:
			}
			if err := pub.Publish("shared", []byte("native")); err != nil {
				published <- err
				return
			}
		}
		published <- pub.Flush()
	}()
	if err := pub.Flush(); err != nil { // the publisher is under way
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	corrs := make([]int32, requests)
	for i := range corrs {
		req := produceReq("shared", 0, makeBatch(-1, -1, -1, fmt.Sprintf("k%d-0", i), fmt.Sprintf("k%d-1", i)))
		req.Acks = int16(1 - 2*(i%2)) // acks=1 and acks=all in turn
		corrs[i] = r.send(req)
	}
	bases := make([]int64, requests)
	for i, want := range corrs {
		body := r.answer(i, want)
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(body[1:]); err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || (i > 0 && p.BaseOffset <= bases[i-1]) {
			t.Fatalf("request %d: error %d base %d after %d", i, p.ErrorCode, p.BaseOffset, bases[i-1])
		}
		bases[i] = p.BaseOffset
	}
	close(stop)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	for i, base := range bases {
		for j := range 2 {
			m, err := nc.Streams().GetMsg(ctxT(t), "shared", 0, uint64(base)+1+uint64(j))
			if want := fmt.Sprintf("k%d-%d", i, j); err != nil || string(m.Data) != want {
				t.Fatalf("offset %d: %q %v, want %q", base+int64(j), m.Data, err, want)
			}
		}
	}
}

// TestPipelinedProduce: produce requests sent without waiting for answers, with a
// Metadata request among them, are answered in the order they came; an
// idempotent batch sent behind one the stream refuses is refused too (never
// stored after a gap), and both go through when sent again.
func TestPipelinedProduce(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: "piped", Subjects: []string{"piped"}, MaxMsgSize: 100}); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	init := r.do(ip).(*kmsg.InitProducerIDResponse)
	pid, epoch := init.ProducerID, init.ProducerEpoch

	// Ten batches of three and a Metadata request in the middle, all sent first.
	var corrs []int32
	for i := range 10 {
		corrs = append(corrs, r.send(produceReq("piped", 0, makeBatch(pid, epoch, int32(3*i), "a", "b", "c"))))
		if i == 4 {
			md := kmsg.NewPtrMetadataRequest()
			md.Version = 9
			corrs = append(corrs, r.send(md))
		}
	}
	for i, want := range corrs {
		body := r.answer(i, want)
		if i == 5 {
			continue // Metadata
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(body[1:]); err != nil {
			t.Fatal(err)
		}
		n := i
		if i > 5 {
			n--
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.BaseOffset != int64(3*n) {
			t.Fatalf("batch %d: error %d base %d, want base %d", n, p.ErrorCode, p.BaseOffset, 3*n)
		}
	}

	// A batch the stream refuses (a record over max_msg_size) and one behind it.
	big := string(make([]byte, 200))
	bad := r.send(produceReq("piped", 0, makeBatch(pid, epoch, 30, "d", big)))
	behind := r.send(produceReq("piped", 0, makeBatch(pid, epoch, 32, "f")))
	read := func(corr int32) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		got, body, err := r.readFrame()
		if err != nil || got != corr {
			t.Fatalf("answer to %d: got %d, %v", corr, got, err)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(body[1:]); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	if p := read(bad); p.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("batch with a record too large: error %d, want MESSAGE_TOO_LARGE", p.ErrorCode)
	}
	if p := read(behind); p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("batch behind a refused one: error %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", p.ErrorCode)
	}
	// The producer sends both again (the first one fixed, as a test may).
	again := r.send(produceReq("piped", 0, makeBatch(pid, epoch, 30, "d", "e")))
	behind = r.send(produceReq("piped", 0, makeBatch(pid, epoch, 32, "f")))
	if p := read(again); p.ErrorCode != 0 || p.BaseOffset != 30 {
		t.Fatalf("sent again: error %d base %d, want base 30", p.ErrorCode, p.BaseOffset)
	}
	if p := read(behind); p.ErrorCode != 0 || p.BaseOffset != 32 {
		t.Fatalf("the one behind, sent again: error %d base %d, want base 32", p.ErrorCode, p.BaseOffset)
	}
	st, _ := s.Streams().Stream("piped")
	if n := st.Info().State.Msgs; n != 33 {
		t.Fatalf("stream holds %d messages, want 33", n)
	}
}

// TestFetchWithoutPartitionsWaits: a fetch naming no partition (Kafka's Java
// consumer sends them) waits out its max.wait.ms idle, as Kafka's broker does,
// instead of reading again and again until then.
func TestFetchWithoutPartitionsWaits(t *testing.T) {
	_, addr := startTern(t, nil)
	r := dialRaw(t, addr)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 12, 400, 1, 1<<20, -1
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	resp := r.do(req).(*kmsg.FetchResponse)
	took := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	if resp.ErrorCode != 0 || len(resp.Topics) != 0 {
		t.Fatalf("answer %+v", resp)
	}
	if took < 350*time.Millisecond {
		t.Fatalf("answered after %v, want max.wait.ms (400 ms)", took)
	}
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	if cpu > 150*time.Millisecond {
		t.Fatalf("the process used %v of CPU while the fetch waited %v: it spun", cpu, took)
	}
}
