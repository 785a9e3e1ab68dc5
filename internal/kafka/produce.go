package kafka

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

// Headers the Kafka API writes and reads besides the stream engine's.
const (
	// HeaderTimestamp keeps a produced record's timestamp (Kafka's CreateTime), in
	// unix milliseconds; Fetch gives it back as the record's timestamp.
	HeaderTimestamp = "Tern-Timestamp"
	// HeaderSubject names the subject a record is published on, for a topic whose
	// stream does not capture exactly one literal subject; Fetch sets it on records
	// of such topics.
	HeaderSubject = "Tern-Subject"
	// HeaderNullValue marks a record produced with a null value (a tombstone),
	// stored with an empty payload; Fetch gives it back null. A record's null
	// key is no Tern-Key header.
	HeaderNullValue = streamapi.HeaderNullValue
	// msgIDPrefix starts the message ids of idempotent producers' records.
	msgIDPrefix = "kafka:"
)

// produceScratch is a connection's reusable produce state.
type produceScratch struct {
	hdr     []byte    // header blocks of the records, one after another
	hdrEach int       // the most header bytes a record has taken, for growing hdr once per batch
	ids     recordIDs // the message ids of the batch being decoded
	follows []byte    // the lenient expected last id of a batch's first record
	reply   []byte
	num     []byte
	bufs    [][]byte // decompression buffers, one per compressed batch
	msgs    []outMsg
	parts   []partOut
	idem    []idemBatch
	rec     kmsg.Record
	bm      broker.Message
	errIdx  []kmsg.ProduceResponseTopicPartitionErrorRecord
	results []ackResult // the last ack wait's results, for the next one to take
	ranges  []ackRange
}

// outMsg is a record ready to publish.
type outMsg struct {
	subj         []byte
	hdrFrom, hdr int // span in produceScratch.hdr
	value        []byte
	part         int // index in produceScratch.parts
}

// partOut is one partition of the request and what its answer says.
type partOut struct {
	ti         int // the request's topic
	t          *topic
	partition  int32
	code       int16
	msg        string
	first, n   int   // its records' indexes in the ack wait
	dupBase    int64 // >= 0: the whole partition's data was a retried batch stored at this offset
	recordErrs []kmsg.ProduceResponseTopicPartitionErrorRecord
}

// idemBatch is an idempotent batch to record as stored once acknowledged.
type idemBatch struct {
	part        int
	id          int64
	epoch       int16
	first, last int32
	from, n     int // its records' indexes in the ack wait
}

// produce publishes the records of req. It returns the answer when it is already
// made (a refusal), the wait for the stream's acks to make it from (answerProduce),
// or neither for acks=0, which is not answered.
func (c *conn) produce(ps *produceScratch, req *kmsg.ProduceRequest) (*kmsg.ProduceResponse, *ackWait, error) {
	ps.hdr, ps.msgs, ps.parts, ps.idem = ps.hdr[:0], ps.msgs[:0], ps.parts[:0], ps.idem[:0]
	nbuf := 0
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = req.Version
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		return c.refuseProduce(req, resp, kerr.InvalidRequiredAcks.Code, "acks must be 0, 1 or -1"), nil, nil
	}
	if req.Acks != 0 {
		if err := c.s.acks.subscribe(); err != nil {
			return nil, nil, fmt.Errorf("kafka: ack inbox: %w", err)
		}
	}
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		var t *topic
		var code int16
		var msg string
		if req.Version >= 13 {
			t, code = c.findIDFor(rt.TopicID, needWrite)
		} else {
			t, code, msg = c.findFor(rt.Topic, true, needWrite)
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			po := partOut{ti: ti, t: t, partition: rp.Partition, code: code, msg: msg, dupBase: -1, first: len(ps.msgs)}
			switch {
			case req.TransactionID != nil:
				po.code, po.msg = kerr.TransactionalIDAuthorizationFailed.Code, "transactions are not supported yet"
			case po.code == 0 && (rp.Partition < 0 || int(rp.Partition) >= t.parts):
				po.code = kerr.UnknownTopicOrPartition.Code
			case po.code == 0 && t.s == nil:
				// Another node leads it, as Kafka answers: the client asks Metadata
				// and sends the records there, where they are stored together.
				po.code, po.msg = kerr.NotLeaderForPartition.Code, "another node leads this partition"
			}
			ps.parts = append(ps.parts, po)
			if po.code != 0 {
				continue
			}
			nbuf = c.decodePartition(ps, len(ps.parts)-1, rp.Records, nbuf)
		}
	}
	// Publish every record, with one reply subject per partition.
	var w *ackWait
	if req.Acks != 0 {
		ps.ranges = ps.ranges[:0]
		for _, po := range ps.parts {
			ps.ranges = append(ps.ranges, ackRange{first: po.first, n: po.n})
		}
		w = c.s.acks.open(len(ps.msgs), ps.ranges, ps.results)
		ps.results = w.results
	}
	bm := &ps.bm
	replyPart := -1
	// A partition's records are stored at consecutive offsets, with no other
	// publisher's message between them: the answer gives only the first's.
	c.batch.BeginGroup()
	for i := range ps.msgs {
		m := &ps.msgs[i]
		*bm = broker.Message{Subject: m.subj, Header: header.Block(ps.hdr[m.hdrFrom:m.hdr]), Payload: m.value}
		if w != nil {
			if m.part != replyPart {
				replyPart, ps.reply = m.part, c.s.acks.appendReply(ps.reply[:0], c.prefix, w, m.part)
			}
			// The stream answers in process when this node serves it, on the
			// reply subject when another node does (leadership moved).
			bm.Reply, bm.Acker, bm.AckTag = ps.reply, w, uint64(m.part)
		}
		if c.s.broker.Publish(&c.batch, bm) == 0 && w != nil {
			c.s.acks.fail(w, i, streamapi.CodeNotFound, "no stream captures subject "+strings.TrimPrefix(string(m.subj), c.prefix))
		}
		c.inBytes.Add(uint64(len(m.value)))
	}
	c.inMsgs.Add(uint64(len(ps.msgs)))
	c.batch.FlushInline()
	c.batch.WaitStalled(time.Second)
	if req.Acks == 0 {
		c.endIdem(ps, nil)
		for i := range ps.parts {
			if ps.parts[i].code != 0 {
				// As Kafka: the client cannot be told, so it is made to notice and
				// refresh its metadata.
				return nil, nil, &batchError{code: ps.parts[i].code, msg: "acks=0 produce refused: " + ps.parts[i].msg}
			}
		}
		return nil, nil, nil
	}
	return resp, w, nil
}

// waitAcks waits for the stream's acks of a produce request, its timeout at most
// (timer, reused from one request to the next) or until stop is closed; the
// answer then stops the wait (queueAnswer).
func (c *conn) waitAcks(req *kmsg.ProduceRequest, w *ackWait, timer *time.Timer, stop <-chan struct{}) {
	timer.Reset(time.Duration(max(req.TimeoutMillis, 1000)) * time.Millisecond)
	select {
	case <-w.done:
	case <-timer.C:
	case <-c.s.done:
	case <-stop:
	}
	timer.Stop() // since Go 1.23 a stopped timer's channel holds nothing stale
}

// refuseProduce answers every partition of req with code.
func (c *conn) refuseProduce(req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, code int16, msg string) *kmsg.ProduceResponse {
	for _, rt := range req.Topics {
		ot := kmsg.NewProduceResponseTopic()
		ot.Topic, ot.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			p := kmsg.NewProduceResponseTopicPartition()
			p.Partition, p.ErrorCode, p.ErrorMessage = rp.Partition, code, kmsg.StringPtr(msg)
			p.BaseOffset, p.LogAppendTime, p.LogStartOffset = -1, -1, -1
			ot.Partitions = append(ot.Partitions, p)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp
}

// decodePartition checks and decodes a partition's record batches and queues
// their records for publishing; a batch refused refuses the partition.
func (c *conn) decodePartition(ps *produceScratch, pi int, data []byte, nbuf int) int {
	po := &ps.parts[pi]
	t := po.t
	var num, tsNum [20]byte
	partText := strconv.AppendInt(num[:0], int64(po.partition), 10)
	fail := func(err error) int {
		po.code, po.msg = errorCode(err)
		ps.msgs = ps.msgs[:po.first]
		c.trimIdem(ps, pi)
		return nbuf
	}
	for len(data) > 0 {
		batch, rest, err := nextBatch(data)
		if err != nil {
			return fail(err)
		}
		data = rest
		if batch.Attributes&(attrTransactional|attrControl) != 0 {
			return fail(badBatch(kerr.InvalidTxnState.Code, "transactional batches are not supported yet"))
		}
		if batch.NumRecords < 0 {
			return fail(badBatch(kerr.CorruptMessage.Code, "record batch with %d records", batch.NumRecords))
		}
		idem := batch.ProducerID >= 0 && batch.FirstSequence >= 0
		var last, after int32
		var hasAfter bool
		if idem {
			last = nextSeq(batch.FirstSequence, int64(batch.NumRecords)-1)
			k := partKey{t.key, po.partition}
			var base int64
			var dup bool
			var code int16
			base, dup, after, hasAfter, code = c.s.prods.check(batch.ProducerID, batch.ProducerEpoch, k, batch.FirstSequence, last)
			if code != 0 {
				return fail(badBatch(code, "producer %d epoch %d: batch sequences %d to %d refused", batch.ProducerID, batch.ProducerEpoch, batch.FirstSequence, last))
			}
			if dup {
				po.dupBase = base // answered from what was stored the first time
				continue
			}
		}
		if nbuf == len(ps.bufs) {
			ps.bufs = append(ps.bufs, nil)
		}
		body, err := decompress(&batch, ps.bufs[nbuf], c.s.cfg.MaxRequestSize)
		if err != nil {
			return fail(err)
		}
		if batch.Attributes&attrCodec != codecNone {
			ps.bufs[nbuf] = body
			nbuf++
		}
		from := len(ps.msgs)
		if idem {
			// The ids of a batch's records differ in their sequence only.
			ps.ids.begin(batch.ProducerID, batch.ProducerEpoch, po.partition, batch.FirstSequence)
		}
		lastTS, tsText := int64(0), []byte(nil)
		hdrFrom := len(ps.hdr)
		// NumRecords is the sender's word, so the body bounds the growth.
		ps.hdr = slices.Grow(ps.hdr, min(int(batch.NumRecords)*ps.hdrEach, 4*len(body)))
		err = eachRecord(body, batch.NumRecords, &ps.rec, func(i int, rec *kmsg.Record) error {
			subj, err := recordSubject(t, rec)
			if err == nil && rec.Key == nil && t.cfg.Compaction() != nil {
				err = errCompactedNoKey
			}
			if err != nil {
				po.recordErrs = append(po.recordErrs, kmsg.ProduceResponseTopicPartitionErrorRecord{
					RelativeOffset: int32(i), ErrorMessage: kmsg.StringPtr(err.Error())})
				return nil
			}
			if t.subject == "" && c.perms != nil && !c.perms.CanPublish(subj) {
				// A record's own subject (Tern-Subject) the user may not publish
				// on refuses its partition's data.
				return badBatch(kerr.TopicAuthorizationFailed.Code, "not authorized to publish on subject %q", subj)
			}
			if t.acct != "" {
				// The account's subject inside the server: the topic's, made
				// once per lookup, or the record's own, prefixed.
				if t.subject != "" {
					subj = unsafeBytes(t.pub)
				} else {
					subj = append([]byte(c.prefix), subj...)
				}
			}
			m := outMsg{subj: subj, hdrFrom: len(ps.hdr), value: rec.Value, part: pi}
			h := header.Append(ps.hdr, streamapi.HeaderToPartition, unsafeString(partText))
			if rec.Key != nil {
				h = header.Append(h, streamapi.HeaderKey, unsafeString(rec.Key))
			}
			if rec.Value == nil {
				h = header.Append(h, HeaderNullValue, "")
			}
			if ts := batch.FirstTimestamp + rec.TimestampDelta64; tsText == nil || ts != lastTS {
				// A batch's records mostly share their timestamp.
				lastTS, tsText = ts, strconv.AppendInt(tsNum[:0], ts, 10)
			}
			h = header.Append(h, HeaderTimestamp, unsafeString(tsText))
			if idem {
				h = header.Append(h, streamapi.HeaderMsgID, unsafeString(ps.ids.of(i)))
				switch {
				case i != 0:
				case hasAfter:
					// Behind a batch still in flight: stored only if that one was.
					h = header.Append(h, streamapi.HeaderExpectedLastMsgID, unsafeString(ps.ids.ofSeq(after)))
				case batch.FirstSequence > 0:
					// Stored only right after the sequence before it, when the
					// stream still knows the producer: a copy of an earlier batch
					// held up on its way (the producer had sent it again and
					// gone on) is refused rather than stored behind later ones.
					ps.follows = append(append(ps.follows[:0], streamapi.ExpectedLastIfAny...), ps.ids.ofSeq(batch.FirstSequence-1)...)
					h = header.Append(h, streamapi.HeaderExpectedLastMsgID, unsafeString(ps.follows))
				}
			}
			for j := range rec.Headers {
				if hk := rec.Headers[j].Key; hk != "" && hk != HeaderSubject && hk != HeaderNullValue {
					h = header.Append(h, hk, unsafeString(rec.Headers[j].Value))
				}
			}
			ps.hdr, m.hdr = h, len(h)
			ps.msgs = append(ps.msgs, m)
			return nil
		})
		if err != nil {
			return fail(err)
		}
		if batch.NumRecords > 0 {
			ps.hdrEach = max(ps.hdrEach, (len(ps.hdr)-hdrFrom)/int(batch.NumRecords)+1)
		}
		if len(po.recordErrs) > 0 {
			// Kafka stores none of a batch with an invalid record.
			po.code, po.msg = kerr.InvalidRecord.Code, *po.recordErrs[0].ErrorMessage
			ps.msgs = ps.msgs[:po.first]
			c.trimIdem(ps, pi)
			return nbuf
		}
		if idem {
			ps.idem = append(ps.idem, idemBatch{part: pi, id: batch.ProducerID, epoch: batch.ProducerEpoch,
				first: batch.FirstSequence, last: last, from: from, n: len(ps.msgs) - from})
			c.s.prods.begin(batch.ProducerID, batch.ProducerEpoch, partKey{t.key, po.partition}, last, time.Now())
		}
	}
	po.n = len(ps.msgs) - po.first
	return nbuf
}

// trimIdem drops partition part's batches from idem: none of its records is
// published after all.
func (c *conn) trimIdem(ps *produceScratch, part int) {
	out := ps.idem[:0]
	now := time.Now()
	for _, b := range ps.idem {
		if b.part != part {
			out = append(out, b)
			continue
		}
		po := &ps.parts[b.part]
		c.s.prods.abort(b.id, b.epoch, partKey{po.t.key, po.partition}, now)
	}
	ps.idem = out
}

// endIdem records the outcome of the idempotent batches of a produce request: w
// holds the stream's acks (nil for acks=0, whose outcome is not known: the
// batches count as stored).
func (c *conn) endIdem(ps *produceScratch, w *ackWait) {
	now := time.Now()
	for _, b := range ps.idem {
		ok := b.n > 0
		base := int64(-1)
		if w != nil {
			for i := b.from; i < b.from+b.n; i++ {
				if r := w.results[i]; !r.got || r.code != 0 {
					ok = false
				}
			}
			if ok {
				base = int64(w.results[b.from].seq) - 1
			}
		}
		po := &ps.parts[b.part]
		c.s.prods.finish(b.id, b.epoch, partKey{po.t.key, po.partition}, b.first, b.last, base, ok, now)
	}
}

// recordSubject is the subject a record is published on: the topic's subject, or,
// for a stream without exactly one literal subject, the record's Tern-Subject
// header, which must be a subject the stream captures.
func recordSubject(t *topic, rec *kmsg.Record) ([]byte, error) {
	if t.subject != "" {
		return unsafeBytes(t.subject), nil
	}
	for i := range rec.Headers {
		if rec.Headers[i].Key != HeaderSubject {
			continue
		}
		subj := rec.Headers[i].Value
		if subject.ValidatePublish(subj) != nil {
			return nil, errRecord("header " + HeaderSubject + " " + strconv.Quote(string(subj)) + " is not a valid subject")
		}
		for _, f := range t.cfg.Subjects {
			if subject.Matches(f, string(subj)) {
				return subj, nil
			}
		}
		return nil, errRecord("subject " + strconv.Quote(string(subj)) + " is not one stream " + t.name + " captures")
	}
	return nil, errRecord("stream " + t.name + " captures several subjects or wildcards: name the record's subject in a " + HeaderSubject + " header")
}

type errRecord string

// errCompactedNoKey refuses a record without a key on a compacted topic, as
// Kafka does: its key is what compaction keeps the latest of.
const errCompactedNoKey = errRecord("compacted topic cannot accept a record without a key")

func (e errRecord) Error() string { return string(e) }

// recordIDs makes the message ids of one idempotent batch's records,
// "kafka:<producer id>:<epoch>:<partition>#<sequence>", record i's sequence being
// the batch's first plus i (wrapping after the int32 maximum, as Kafka's do).
// Records are asked for in order, so an id is mostly the last one's text with its
// number advanced by one, not formatted again.
type recordIDs struct {
	buf    []byte // the prefix, then the last id's sequence
	prefix int
	first  int32
	i      int // the record whose id buf holds; -1: none
	seq    int32
}

// begin starts the ids of a batch.
func (r *recordIDs) begin(producer int64, epoch int16, part, first int32) {
	b := append(r.buf[:0], msgIDPrefix...)
	b = strconv.AppendInt(b, producer, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(epoch), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(part), 10)
	r.buf = append(b, streamapi.SequenceMark...)
	r.prefix, r.first, r.i = len(r.buf), first, -1
}

// of returns record i's id, valid until the next call.
func (r *recordIDs) of(i int) []byte {
	if r.i >= 0 && i == r.i+1 && r.seq != math.MaxInt32 {
		r.i, r.seq = i, r.seq+1
		r.advance()
		return r.buf
	}
	id := r.ofSeq(nextSeq(r.first, int64(i)))
	r.i = i
	return id
}

// ofSeq returns the id of the record of sequence seq, valid until the next call.
func (r *recordIDs) ofSeq(seq int32) []byte {
	r.buf = strconv.AppendInt(r.buf[:r.prefix], int64(seq), 10)
	r.i, r.seq = -1, seq
	return r.buf
}

// advance adds one to the decimal sequence at the end of buf.
func (r *recordIDs) advance() {
	digits := r.buf[r.prefix:]
	for k := len(digits) - 1; k >= 0; k-- {
		if digits[k] != '9' {
			digits[k]++
			return
		}
		digits[k] = '0'
	}
	// Every digit was a nine: one digit more, a one and zeros.
	r.buf = append(r.buf, '0')
	r.buf[r.prefix] = '1'
}

// answerProduce fills the answer from the stream's acks.
func (c *conn) answerProduce(ps *produceScratch, req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, w *ackWait) {
	// Acks all in (or the wait given up): record the idempotent batches stored.
	c.endIdem(ps, w)
	var rt *kmsg.ProduceResponseTopic
	lastTi := -1
	for i := range ps.parts {
		po := &ps.parts[i]
		if po.ti != lastTi {
			lastTi = po.ti
			resp.Topics = append(resp.Topics, kmsg.NewProduceResponseTopic())
			rt = &resp.Topics[len(resp.Topics)-1]
			rt.Topic, rt.TopicID = req.Topics[po.ti].Topic, req.Topics[po.ti].TopicID
		}
		p := kmsg.NewProduceResponseTopicPartition()
		p.Partition = po.partition
		p.BaseOffset, p.LogAppendTime, p.LogStartOffset = -1, -1, -1
		code, msg := po.code, po.msg
		if code == 0 {
			if po.n > 0 {
				p.BaseOffset = int64(w.results[po.first].seq) - 1
				for j := po.first; j < po.first+po.n; j++ {
					r := w.results[j]
					if !r.got {
						code, msg = kerr.RequestTimedOut.Code, "the stream did not acknowledge in time"
						break
					}
					if r.code != 0 {
						code, msg = pubErrorCode(r.code), r.err
						break
					}
				}
			} else if po.dupBase >= 0 {
				p.BaseOffset = po.dupBase
			}
			if po.t.s != nil {
				if st, err := po.t.s.PartitionState(int(po.partition)); err == nil {
					p.LogStartOffset = int64(st.FirstSeq) - 1
				}
			}
		}
		if code != 0 {
			p.ErrorCode = code
			p.BaseOffset = -1
			if msg != "" {
				p.ErrorMessage = kmsg.StringPtr(msg)
			}
			p.ErrorRecords = po.recordErrs
		}
		rt.Partitions = append(rt.Partitions, p)
	}
}

// pubErrorCode maps the stream's answer to a failed publish to Kafka's code.
func pubErrorCode(code int) int16 {
	switch code {
	case streamapi.CodeTooLarge:
		return kerr.MessageTooLarge.Code
	case streamapi.CodeLimits:
		return kerr.PolicyViolation.Code
	case streamapi.CodeUnavailable:
		return kerr.KafkaStorageError.Code
	case streamapi.CodeNotFound:
		return kerr.UnknownTopicOrPartition.Code
	case streamapi.CodeWrongLastMsgID:
		// Behind a batch in flight that failed: the producer sends both again.
		return kerr.OutOfOrderSequenceNumber.Code
	}
	return kerr.UnknownServerError.Code
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func unsafeBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
