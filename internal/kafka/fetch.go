package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// fetchScratch is a connection's reusable fetch state.
type fetchScratch struct {
	w batchWriter
	// buf holds the answer's record batches, one after another, from
	// fetchHeadroom on (sendFetch).
	buf []byte
	enc []byte // the answer encoded around a marker (sendFetch)
	// handed is the size of the last buffer handed to the queue (sendFetch).
	handed int
	spans  []fetchSpan
	rec    kmsg.Record
	hdrs   []kmsg.Header
	wake   chan struct{}
	// next is the read a consumer streaming through a partition asks for next;
	// ahead is that read, done while the consumer was busy with the last answer.
	next, ahead readAhead
}

// readAhead is one partition's batch read from offset with limit, and the
// partition's state when it was read: it stands for a fresh read as long as
// nothing was removed from the partition since (appends only add after it).
type readAhead struct {
	t               *topic
	part            int
	offset, next    int64
	limit           int
	firstSeq, dels  uint64
	buf             []byte
	count           int
	wanted, present bool
}

// fetchSpan is where one partition's batches sit in fetchScratch.buf.
type fetchSpan struct{ topic, part, from, to int }

// maxFetchWait bounds a fetch's max.wait.ms: a client asking for more waits this.
const maxFetchWait = 30 * time.Second

// fetchRecords answers a Fetch. Each partition is read from the offset asked, its
// records encoded as one v2 batch; when the answer holds less than min.bytes, the
// request waits up to max.wait.ms for commits to any of its partitions (the
// stream's writer wakes it) and reads again.
func (c *conn) fetchRecords(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = req.Version
	sess, incremental, code := c.s.fetchSessions.begin(req, time.Now())
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	if sess != nil {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		sess.update(req, incremental)
		defer sess.answered(resp, req.Version, incremental)
		req = sess.fullRequest(req)
	}
	// Topics resolved once; a topic deleted meanwhile fails its reads.
	topics := make([]*topic, len(req.Topics))
	codes := make([]int16, len(req.Topics))
	for i := range req.Topics {
		if req.Version >= 13 {
			topics[i], codes[i] = c.findIDFor(req.Topics[i].TopicID, needRead)
		} else {
			topics[i], codes[i], _ = c.findFor(req.Topics[i].Topic, false, needRead)
		}
	}
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, c.s.maxWait)
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	fs := &c.fetch
	watching := false
	for {
		total, failed := c.readFetch(req, topics, codes, resp)
		if total >= int(req.MinBytes) || failed || wait <= 0 || !time.Now().Before(deadline) {
			break
		}
		if !watching {
			// Once, even with no partition to watch (a fetch naming none waits
			// out max.wait.ms, as Kafka's does).
			watching = true
			// Watch, then read once more: a commit between the read and the watch
			// must not be slept through.
			if fs.wake == nil {
				fs.wake = make(chan struct{}, 1)
			}
			select {
			case <-fs.wake: // a stale wake-up from an earlier fetch
			default:
			}
			for i, t := range topics {
				if t == nil || t.s == nil {
					continue
				}
				for _, p := range req.Topics[i].Partitions {
					if p.Partition >= 0 && int(p.Partition) < t.s.Partitions() {
						stops = append(stops, t.s.WatchAppends(int(p.Partition), fs.wake))
					}
				}
			}
			timer = time.NewTimer(time.Until(deadline))
			continue
		}
		select {
		case <-fs.wake:
		case <-timer.C:
		case <-c.s.done:
			wait = 0 // shutting down: answer with what there is
		}
	}
	// The batches' bytes are placed once the buffer no longer grows.
	for _, sp := range fs.spans {
		resp.Topics[sp.topic].Partitions[sp.part].RecordBatches = fs.buf[sp.from:sp.to]
	}
	return resp
}

// readFetch reads every partition of req into resp (replacing what an earlier
// read put there). It returns the record bytes read and whether a partition failed
// for another reason than having no new data.
func (c *conn) readFetch(req *kmsg.FetchRequest, topics []*topic, codes []int16, resp *kmsg.FetchResponse) (total int, failed bool) {
	fs := &c.fetch
	fs.buf, fs.spans = fs.headroom(fs.buf), fs.spans[:0]
	resp.Topics = resp.Topics[:0]
	budget := int(req.MaxBytes)
	if req.Version < 3 || budget <= 0 {
		budget = 50 << 20
	}
	fs.next.wanted = false
	var parts, full int
	for i := range req.Topics {
		rt := &req.Topics[i]
		ot := kmsg.NewFetchResponseTopic()
		ot.Topic, ot.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			op := kmsg.NewFetchResponseTopicPartition()
			op.Partition = rp.Partition
			op.HighWatermark, op.LastStableOffset, op.LogStartOffset = -1, -1, -1
			op.RecordBatches = []byte{} // empty, not null: clients read a null as a bad size
			t := topics[i]
			switch {
			case codes[i] != 0:
				op.ErrorCode = codes[i]
			case rp.Partition < 0 || int(rp.Partition) >= t.parts:
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case t.s == nil:
				op.ErrorCode = kerr.NotLeaderForPartition.Code // another node leads it: Metadata says which
			default:
				from := len(fs.buf)
				limit := min(int(rp.PartitionMaxBytes), budget)
				var n int
				var next int64
				op.ErrorCode, op.HighWatermark, op.LogStartOffset, n, next = c.readPartition(t, int(rp.Partition), rp.FetchOffset, limit, total == 0)
				op.LastStableOffset = op.HighWatermark
				if n > 0 {
					fs.spans = append(fs.spans, fetchSpan{topic: len(resp.Topics), part: len(ot.Partitions), from: from, to: len(fs.buf)})
					total += n
					budget -= n
					parts++
					if next >= 0 {
						// Stopped at the limit with more to read: the consumer's
						// next fetch of this partition starts there.
						full++
						fs.next = readAhead{t: t, part: int(rp.Partition), offset: next, limit: limit}
					}
				}
			}
			if op.ErrorCode != 0 {
				failed = true
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	fs.next.wanted = parts == 1 && full == 1 && !failed
	return total, failed
}

// readAhead reads what the last fetch's consumer will ask for next when it
// streams through one partition, while the consumer decodes the last answer, so
// that the next fetch only has to send it. The connection calls it when it has
// no request to read.
func (c *conn) readAhead() {
	fs := &c.fetch
	if !fs.next.wanted {
		return
	}
	fs.next.wanted = false
	nx := fs.next
	st, err := nx.t.s.PartitionState(nx.part)
	if err != nil || nx.offset >= int64(st.LastSeq) {
		return // nothing more yet: the next fetch waits for it as usual
	}
	a := &fs.ahead
	saved := fs.buf
	fs.buf = fs.headroom(a.buf)
	count, next, code := c.readRecords(nx.t, nx.part, nx.offset, nx.limit, true)
	a.buf, fs.buf = fs.buf, saved
	if code != 0 || count == 0 {
		a.present = false
		return
	}
	a.t, a.part, a.offset, a.limit = nx.t, nx.part, nx.offset, nx.limit
	a.firstSeq, a.dels, a.count, a.next, a.present = st.FirstSeq, st.Deleted, count, next, true
}

// fetchHeadroom is the room c.fetch.buf keeps before an answer's records, for
// the start of the answer's frame: a one-partition answer's header takes about
// 120 bytes and its topic's name (a stream's: at most 64 bytes).
const fetchHeadroom = 512

// headroom returns b emptied down to its head room, or, when b is smaller than
// the last answer that went to the queue, a new buffer of that answer's size:
// the buffers going round with the queue's may come back empty (one still being
// written), and growing a new one to a megabyte would copy it over and over.
func (fs *fetchScratch) headroom(b []byte) []byte {
	if cap(b) < max(fetchHeadroom, fs.handed) {
		b = make([]byte, fetchHeadroom, max(64<<10, fs.handed))
	}
	return b[:fetchHeadroom]
}

// fetchMarker stands for the records while sendFetch encodes the rest of an
// answer: 16 bytes no answer's other fields make.
var fetchMarker = []byte("\xfe\x01tern-records\x01\xfe")

// sendFetch queues resp, the answer to Fetch request corr. An answer whose only
// records are one partition's — a consumer streaming through a partition, the
// bulk of what fetches carry — is framed where its records were read (in
// c.fetch.buf, around them) and handed to the queue whole (Queue.Hand), so its
// megabyte of records is not copied again on its way to the socket. Any other
// answer is encoded into the queue as every answer is.
func (c *conn) sendFetch(corr int32, resp *kmsg.FetchResponse) {
	fs := &c.fetch
	var op *kmsg.FetchResponseTopicPartition
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if p := &resp.Topics[i].Partitions[j]; len(p.RecordBatches) > 0 {
				if op != nil {
					c.send(corr, resp)
					return
				}
				op = p
			}
		}
	}
	if op == nil || len(fs.buf) <= fetchHeadroom || &op.RecordBatches[0] != &fs.buf[fetchHeadroom] || len(op.RecordBatches) != len(fs.buf)-fetchHeadroom {
		c.send(corr, resp)
		return
	}
	records := op.RecordBatches
	op.RecordBatches = fetchMarker
	fs.enc = resp.AppendTo(fs.enc[:0])
	op.RecordBatches = records
	at := bytes.LastIndex(fs.enc, fetchMarker)
	flexible := resp.IsFlexible()
	var sizeBuf [binary.MaxVarintLen32]byte
	size := sizeBuf[:0] // the records' size, as the marker's was written
	if flexible {
		size = binary.AppendUvarint(size, uint64(len(fetchMarker)+1))
	} else {
		size = binary.BigEndian.AppendUint32(size, uint32(len(fetchMarker)))
	}
	if at < len(size) || !bytes.Equal(fs.enc[at-len(size):at], size) {
		c.send(corr, resp)
		return
	}
	// The frame: size, correlation id, header tags, the answer up to the
	// records' size, that size, the records, and the answer after them.
	var head [fetchHeadroom]byte
	h := append(head[:0], 0, 0, 0, 0)
	h = binary.BigEndian.AppendUint32(h, uint32(corr))
	if flexible {
		h = append(h, 0)
	}
	before := fs.enc[:at-len(size)]
	if len(h)+len(before)+binary.MaxVarintLen32 > fetchHeadroom {
		c.send(corr, resp) // a topic name too long for the head room
		return
	}
	h = append(h, before...)
	if flexible {
		h = binary.AppendUvarint(h, uint64(len(records)+1))
	} else {
		h = binary.BigEndian.AppendUint32(h, uint32(len(records)))
	}
	start := fetchHeadroom - len(h)
	copy(fs.buf[start:], h)
	fs.buf = append(fs.buf, fs.enc[at+len(fetchMarker):]...)
	binary.BigEndian.PutUint32(fs.buf[start:], uint32(len(fs.buf)-start-4))
	back, ok := c.q.Hand(fs.buf, start)
	if !ok {
		frame := fs.buf[start:]
		c.q.Append(func(b []byte) []byte { return append(b, frame...) })
		return
	}
	fs.handed = min(cap(fs.buf), 8*keepBody)
	fs.buf = back
}

// readPartition appends to c.fetch.buf one record batch of partition p from offset
// on, of at most limit bytes unless first (an answer's first batch goes whole, so a
// record larger than the limits still gets through, as in Kafka). It returns the
// bytes appended and, when it stopped at the limit, the offset a next read would
// start at (else -1).
func (c *conn) readPartition(t *topic, p int, offset int64, limit int, first bool) (code int16, hwm, logStart int64, n int, next int64) {
	fs := &c.fetch
	st, err := t.s.PartitionState(p)
	if err != nil {
		return kerr.UnknownTopicOrPartition.Code, -1, -1, 0, -1
	}
	hwm, logStart = int64(st.LastSeq), int64(st.FirstSeq)-1
	if offset < logStart || offset > hwm {
		return kerr.OffsetOutOfRange.Code, hwm, logStart, 0, -1
	}
	if offset == hwm || (limit <= 0 && !first) {
		return 0, hwm, logStart, 0, -1
	}
	var count int
	if a := &fs.ahead; a.present && first && len(fs.buf) == fetchHeadroom && a.t.s == t.s && a.part == p && a.offset == offset &&
		a.limit == limit && a.firstSeq == st.FirstSeq && a.dels == st.Deleted {
		// Read ahead, and nothing removed since: what a read now would give.
		a.present = false
		fs.buf, a.buf = a.buf, fs.buf
		count, next, n = a.count, a.next, len(fs.buf)-fetchHeadroom
	} else {
		start := len(fs.buf)
		if count, next, code = c.readRecords(t, p, offset, limit, first); code != 0 {
			return code, hwm, logStart, 0, -1
		}
		n = len(fs.buf) - start
	}
	if count == 0 {
		return 0, hwm, logStart, 0, -1
	}
	c.outMsgs.Add(uint64(count))
	c.outByte.Add(uint64(n))
	return 0, hwm, logStart, n, next
}

// readRecords appends to c.fetch.buf the batch readPartition describes and
// returns its records and where a next read starts when it stopped at the limit
// (else -1).
func (c *conn) readRecords(t *topic, p int, offset int64, limit int, first bool) (count int, next int64, code int16) {
	fs := &c.fetch
	r, err := t.s.PartitionReader(p, uint64(offset)+1)
	if err != nil {
		return 0, -1, kerr.UnknownTopicOrPartition.Code
	}
	defer r.Close()
	start := len(fs.buf)
	next = -1
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var corr *store.Corruption
		if errors.As(err, &corr) {
			c.s.log.Error("fetch skips damaged records", "topic", t.name, "partition", p, "err", err)
			continue
		}
		if err != nil {
			if count == 0 {
				return 0, -1, kerr.KafkaStorageError.Code
			}
			break
		}
		ts := c.kafkaRecord(t, &rec)
		size := int(recordLength(&fs.rec)) + 5
		if count == 0 {
			size += batchHeaderLen
		}
		if len(fs.buf)-start+size > limit && (count > 0 || !first) {
			next = int64(rec.Seq) - 1
			break
		}
		if count == 0 {
			fs.w.begin(fs.buf, int64(rec.Seq)-1, ts)
		}
		fs.w.add(&fs.rec, int64(rec.Seq)-1, ts)
		fs.buf = fs.w.buf
		count++
		if len(fs.buf)-start >= limit {
			next = int64(rec.Seq)
			break
		}
	}
	if count > 0 {
		fs.buf = fs.w.end()
	}
	return count, next, 0
}

// kafkaRecord turns a stored message into c.fetch.rec: Tern-Key becomes the key,
// the other headers Kafka headers, except those the Kafka API wrote for itself.
// It returns the record's Kafka timestamp, read in the same pass over the
// headers: the producer's, when a Kafka producer gave one, else when the stream
// stored it (unix milliseconds).
func (c *conn) kafkaRecord(t *topic, rec *store.Record) (ts int64) {
	fs := &c.fetch
	stamped := false
	out := &fs.rec
	out.Key, out.Value, out.Attributes = nil, rec.Payload, 0
	if out.Value == nil {
		out.Value = []byte{}
	}
	fs.hdrs = fs.hdrs[:0]
	header.Block(rec.Header).Each(func(k, v []byte) bool {
		switch unsafeString(k) {
		case streamapi.HeaderKey:
			out.Key = v
			if out.Key == nil {
				out.Key = []byte{}
			}
			return true
		case HeaderTimestamp:
			if ms, err := strconv.ParseInt(unsafeString(v), 10, 64); err == nil && !stamped {
				ts, stamped = ms, true
			}
			return true
		case streamapi.HeaderToPartition:
			return true
		case HeaderNullValue:
			out.Value = nil
			return true
		case streamapi.HeaderMsgID, streamapi.HeaderExpectedLastMsgID:
			if id := strings.TrimPrefix(unsafeString(v), streamapi.ExpectedLastIfAny); strings.HasPrefix(id, msgIDPrefix) {
				return true
			}
		}
		fs.hdrs = append(fs.hdrs, kmsg.Header{Key: unsafeString(k), Value: v})
		return true
	})
	if t.subject == "" {
		fs.hdrs = append(fs.hdrs, kmsg.Header{Key: HeaderSubject, Value: rec.Subject})
	}
	out.Headers = fs.hdrs
	if !stamped {
		ts = rec.Time / int64(time.Millisecond)
	}
	return ts
}

// ---------------------------------------------------------------------------------
// ListOffsets

// Special timestamps of ListOffsets.
const (
	offsetLatest        = -1
	offsetEarliest      = -2
	offsetMaxTimestamp  = -3
	offsetEarliestLocal = -4
	offsetTiered        = -5
)

func (c *conn) listOffsets(req *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	resp := kmsg.NewPtrListOffsetsResponse()
	resp.Version = req.Version
	for _, rt := range req.Topics {
		ot := kmsg.NewListOffsetsResponseTopic()
		ot.Topic = rt.Topic
		t, code, _ := c.findFor(rt.Topic, false, needRead)
		for _, rp := range rt.Partitions {
			op := kmsg.NewListOffsetsResponseTopicPartition()
			op.Partition, op.Timestamp, op.Offset, op.LeaderEpoch = rp.Partition, -1, -1, 0
			switch {
			case code != 0:
				op.ErrorCode = code
			case rp.Partition < 0 || int(rp.Partition) >= t.parts:
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case t.s == nil:
				op.ErrorCode = kerr.NotLeaderForPartition.Code
			default:
				op.ErrorCode, op.Offset, op.Timestamp = c.offsetFor(t, int(rp.Partition), rp.Timestamp)
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp
}

// offsetFor finds the offset ListOffsets asks for with ts.
func (c *conn) offsetFor(t *topic, p int, ts int64) (code int16, offset, at int64) {
	st, err := t.s.PartitionState(p)
	if err != nil {
		return kerr.UnknownTopicOrPartition.Code, -1, -1
	}
	hwm, logStart := int64(st.LastSeq), int64(st.FirstSeq)-1
	switch {
	case ts == offsetLatest:
		return 0, hwm, -1
	case ts == offsetEarliest || ts == offsetEarliestLocal:
		return 0, logStart, -1
	case ts == offsetTiered:
		return 0, -1, -1 // nothing is tiered
	case ts == offsetMaxTimestamp:
		if st.Msgs == 0 {
			return 0, -1, -1
		}
		return 0, hwm - 1, st.LastTime / int64(time.Millisecond)
	case ts < 0:
		return kerr.InvalidRequest.Code, -1, -1
	}
	// By time: the first message stored at or after ts (the time Tern stored it).
	seq, err := t.s.PartitionSeqForTime(p, ts*int64(time.Millisecond))
	if err != nil {
		return kerr.KafkaStorageError.Code, -1, -1
	}
	if seq > st.LastSeq {
		return 0, -1, -1
	}
	r, err := t.s.PartitionReader(p, seq)
	if err != nil {
		return kerr.UnknownTopicOrPartition.Code, -1, -1
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		return 0, int64(seq) - 1, -1
	}
	return 0, int64(rec.Seq) - 1, rec.Time / int64(time.Millisecond)
}
