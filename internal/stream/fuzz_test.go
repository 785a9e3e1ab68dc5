package stream

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream/consumer"
	"github.com/tern-mq/tern/internal/streamapi"
)

// ---------------------------------------------------------------------------------
// Consumer journal

// journalBytes writes chunks through a real journal (one flush per chunk, as the
// delivery goroutine does per wake-up) and returns the file's bytes.
func journalBytes(t testing.TB, parts int, chunks ...func(j *records)) []byte {
	t.Helper()
	dir := t.TempDir()
	j, _, err := openJournal(dir, parts, store.SyncNever, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range chunks {
		var recs records
		chunk(&recs)
		if err := j.flush(recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// records builds a chunk's records.
type records []byte

func (r *records) add(typ byte, vals ...uint64) { *r = consumer.AppendRecord(*r, typ, vals...) }

// frameChunk frames records the way journal.flush does, so tests can build chunks
// whose checksum is right but whose records are not.
func frameChunk(dst, records []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(records)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(records, crcTable))
	return append(dst, records...)
}

// replay runs replayJournal under noPanic.
func replay(t testing.TB, data []byte, st *consumer.State) (n int) {
	t.Helper()
	noPanic(t, fmt.Sprintf("replaying %q", data), func() { n = replayJournal(data, st) })
	return n
}

// replayFresh replays data over an empty state of parts partitions, with the pending
// lists sorted: replay builds them from a map, so their order means nothing.
func replayFresh(t testing.TB, data []byte, parts int) (consumer.State, int) {
	t.Helper()
	st := consumer.State{Parts: make([]consumer.PartState, parts)}
	n := replay(t, data, &st)
	sortPending(&st)
	return st, n
}

func sortPending(st *consumer.State) {
	for i := range st.Parts {
		slices.SortFunc(st.Parts[i].Pending, func(a, b [2]uint64) int {
			switch {
			case a[0] < b[0]:
				return -1
			case a[0] > b[0]:
				return 1
			}
			return 0
		})
		if len(st.Parts[i].Pending) == 0 {
			st.Parts[i].Pending = nil // empty and absent are the same position
		}
	}
}

func cloneState(st consumer.State) consumer.State {
	st.Parts = slices.Clone(st.Parts)
	for i := range st.Parts {
		st.Parts[i].Pending = slices.Clone(st.Parts[i].Pending)
	}
	return st
}

// chunkEnds lists the offsets at which the chunks of a well-formed journal end.
func chunkEnds(data []byte) []int {
	var ends []int
	for off := 0; len(data)-off >= 8; {
		off += 8 + int(binary.LittleEndian.Uint32(data[off:]))
		if off > len(data) {
			break
		}
		ends = append(ends, off)
	}
	return ends
}

// sampleJournal is three chunks over two partitions covering every record type.
func sampleJournal(t testing.TB) []byte {
	return journalBytes(t, 2,
		func(j *records) {
			j.add(consumer.RecDelivered, 0, 1, 1)
			j.add(consumer.RecDelivered, 0, 2, 1)
			j.add(consumer.RecDelivered, 1, 7, 1)
			j.add(consumer.RecConsumerSeq, 3, 0)
		},
		func(j *records) {
			j.add(consumer.RecAcked, 0, 1)
			j.add(consumer.RecDelivered, 0, 2, 2) // redelivered
			j.add(consumer.RecConsumerSeq, 4, 1)
		},
		func(j *records) {
			j.add(consumer.RecAckedUpTo, 1, 7)
			j.add(consumer.RecNext, 1, 10)
		},
	)
}

// sampleAfterTwo and sampleAfterThree are the positions sampleJournal records after
// its second and third chunk.
var (
	sampleAfterTwo = consumer.State{ConsumerSeq: 4, Redelivered: 1, Parts: []consumer.PartState{
		{Next: 3, Pending: [][2]uint64{{2, 2}}},
		{Next: 8, Pending: [][2]uint64{{7, 1}}},
	}}
	sampleAfterThree = consumer.State{ConsumerSeq: 4, Redelivered: 1, Parts: []consumer.PartState{
		{Next: 3, Pending: [][2]uint64{{2, 2}}},
		{Next: 10},
	}}
)

func TestJournalReplay(t *testing.T) {
	data := sampleJournal(t)
	st, n := replayFresh(t, data, 2)
	if n != len(data) {
		t.Fatalf("replayed %d of %d bytes", n, len(data))
	}
	if !reflect.DeepEqual(st, sampleAfterThree) {
		t.Fatalf("state %+v, want %+v", st, sampleAfterThree)
	}

	// Replaying over a state that already holds the records changes nothing: that is
	// what lets a crash between writing a snapshot and truncating the journal pass.
	again := cloneState(st)
	if m := replay(t, data, &again); m != n {
		t.Fatalf("second replay took %d bytes, first %d", m, n)
	}
	sortPending(&again)
	if !reflect.DeepEqual(again, st) {
		t.Fatalf("replay over its own result: %+v, want %+v", again, st)
	}
}

func TestJournalTornTail(t *testing.T) {
	data := sampleJournal(t)
	ends := chunkEnds(data)
	if len(ends) != 3 || ends[2] != len(data) {
		t.Fatalf("chunk ends %v of %d bytes: the writer no longer makes one chunk per flush", ends, len(data))
	}
	// Every cut inside the last chunk, header included, drops exactly that chunk.
	for size := ends[1]; size < len(data); size++ {
		st, n := replayFresh(t, data[:size], 2)
		if n != ends[1] || !reflect.DeepEqual(st, sampleAfterTwo) {
			t.Fatalf("journal cut to %d bytes: replayed %d (want %d), state %+v, want %+v", size, n, ends[1], st, sampleAfterTwo)
		}
	}
	// A flipped bit in the middle chunk stops replay after the first chunk, even though
	// the third is intact: chunks after a damaged one are not trusted.
	bad := slices.Clone(data)
	bad[ends[0]+8] ^= 0x01
	if _, n := replayFresh(t, bad, 2); n != ends[0] {
		t.Fatalf("damaged second chunk: replayed %d bytes, want %d", n, ends[0])
	}
	// A length field pointing past the end is a torn chunk, not a huge allocation.
	bad = slices.Clone(data)
	binary.LittleEndian.PutUint32(bad[ends[1]:], 1<<31)
	if _, n := replayFresh(t, bad, 2); n != ends[1] {
		t.Fatalf("oversized length: replayed %d bytes, want %d", n, ends[1])
	}
}

// TestJournalReopen goes through the real open path: the torn tail is cut off the file
// and what is written next follows the last good chunk.
func TestJournalReopen(t *testing.T) {
	dir := t.TempDir()
	data := sampleJournal(t)
	ends := chunkEnds(data)
	path := filepath.Join(dir, "journal")
	if err := os.WriteFile(path, data[:len(data)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	j, st, err := openJournal(dir, 2, store.SyncNever, 0)
	if err != nil {
		t.Fatal(err)
	}
	sortPending(&st)
	if !reflect.DeepEqual(st, sampleAfterTwo) {
		t.Fatalf("reopened state %+v, want %+v", st, sampleAfterTwo)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(ends[1]) || j.size != int64(ends[1]) {
		t.Fatalf("torn tail not truncated: file of %d bytes, journal size %d, want %d", fi.Size(), j.size, ends[1])
	}
	if err := j.flush(consumer.AppendRecord(nil, consumer.RecAcked, 0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}

	// A snapshot beside the journal is the starting point of replay.
	snap := consumer.State{ConsumerSeq: 2, Parts: []consumer.PartState{{Next: 5, Pending: [][2]uint64{{4, 1}}}, {}}}
	if err := writeJSON(filepath.Join(dir, "state.json"), snap, false); err != nil {
		t.Fatal(err)
	}
	j, st, err = openJournal(dir, 2, store.SyncNever, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	sortPending(&st)
	want := consumer.State{ConsumerSeq: 4, Redelivered: 1, Parts: []consumer.PartState{
		{Next: 5, Pending: [][2]uint64{{4, 1}}}, // seq 2 acked after the reopen
		{Next: 8, Pending: [][2]uint64{{7, 1}}},
	}}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("snapshot plus journal: %+v, want %+v", st, want)
	}
}

// TestJournalBadRecords: a chunk whose checksum holds but whose records do not parse
// (unknown type, short varint, partition out of range) ends replay before it, and
// leaves no trace in the state, even when some of its records did parse.
func TestJournalBadRecords(t *testing.T) {
	good := journalBytes(t, 2, func(j *records) { j.add(consumer.RecDelivered, 0, 1, 1) })
	want, _ := replayFresh(t, good, 2)
	rec := func(typ byte, vals ...uint64) []byte {
		b := []byte{typ}
		for _, v := range vals {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	for _, c := range []struct {
		name string
		recs []byte
	}{
		{"unknown type", rec('Z', 0, 1)},
		{"short varint", []byte{consumer.RecAcked, 0, 0x80}},
		{"missing field", rec(consumer.RecDelivered, 0, 1)},
		{"partition out of range", rec(consumer.RecAcked, 2, 1)},
		// Partitions at or above 2^63 turn negative as an int.
		{"partition 2^63 next", rec(consumer.RecNext, 1<<63, 1)},
		{"partition 2^64-1 delivered", rec(consumer.RecDelivered, 1<<64-1, 1, 1)},
		{"good records first", slices.Concat(rec(consumer.RecAcked, 0, 1), rec(consumer.RecConsumerSeq, 9, 9), []byte{'Z'})},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := frameChunk(slices.Clone(good), c.recs)
			st, n := replayFresh(t, data, 2)
			if n != len(good) {
				t.Errorf("replayed %d bytes, want %d", n, len(good))
			}
			if !reflect.DeepEqual(st, want) {
				t.Errorf("state %+v, want %+v from the good chunk alone", st, want)
			}
		})
	}
}

// checkReplay holds for any input: replay claims a prefix made of whole chunks, and
// the state it builds is exactly the state of that prefix, replayed again. It
// returns the length of the prefix.
func checkReplay(t *testing.T, data []byte, parts int) int {
	st, n := replayFresh(t, data, parts)
	if n < 0 || n > len(data) {
		t.Fatalf("replayed %d of %d bytes", n, len(data))
	}
	if n > 0 && !slices.Contains(chunkEnds(data), n) {
		t.Fatalf("replayed %d bytes, not a chunk boundary (%v)", n, chunkEnds(data))
	}
	prefix, m := replayFresh(t, data[:n], parts)
	if m != n {
		t.Fatalf("the %d-byte prefix replays to %d bytes", n, m)
	}
	if !reflect.DeepEqual(st, prefix) {
		t.Fatalf("state differs from the state of the %d-byte prefix it claims:\n%+v\n%+v", n, st, prefix)
	}
	again := cloneState(st)
	if m := replay(t, data[:n], &again); m != n {
		t.Fatalf("second replay took %d bytes, first %d", m, n)
	}
	sortPending(&again)
	if !reflect.DeepEqual(st, again) {
		t.Fatalf("replay is not idempotent:\n%+v\n%+v", st, again)
	}
	return n
}

// FuzzJournal replays arbitrary file contents: no panic, and see checkReplay.
func FuzzJournal(f *testing.F) {
	f.Add(sampleJournal(f))
	f.Add(journalBytes(f, 3, func(j *records) {
		j.add(consumer.RecDelivered, 2, 5, 1)
		j.add(consumer.RecAckedUpTo, 0, 9)
		j.add(consumer.RecNext, 1, 4)
		j.add(consumer.RecConsumerSeq, 8, 2)
	}))
	f.Add(journalBytes(f, 3, func(j *records) { j.add(consumer.RecDelivered, 1, 1<<64-1, 1<<64-1) }))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 'D'})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkReplay(t, data, 3)
	})
}

// FuzzJournalRecords frames the input as a chunk with a valid checksum after a valid
// chunk, so that the fuzzer reaches the record parser instead of stopping at the
// checksum.
func FuzzJournalRecords(f *testing.F) {
	for _, recs := range [][]byte{
		{consumer.RecDelivered, 0, 1, 1, consumer.RecAcked, 0, 1},
		{consumer.RecAckedUpTo, 2, 9, consumer.RecNext, 1, 4, consumer.RecConsumerSeq, 8, 2},
		{'Z', consumer.RecAcked, 0, 1},
		{consumer.RecAcked, 7, 5},
		{consumer.RecConsumerSeq, 0x80},
	} {
		f.Add(recs)
	}
	// Partitions far out of range, in the widest varints.
	f.Add(binary.AppendUvarint(binary.AppendUvarint([]byte{consumer.RecAcked}, 1<<62), 1))
	f.Add(binary.AppendUvarint(binary.AppendUvarint([]byte{consumer.RecNext}, 1<<40), 1<<63))
	first := journalBytes(f, 3, func(j *records) {
		j.add(consumer.RecDelivered, 0, 1, 1)
		j.add(consumer.RecDelivered, 0, 5, 1)
		j.add(consumer.RecConsumerSeq, 2, 0)
	})
	f.Fuzz(func(t *testing.T, recs []byte) {
		data := frameChunk(slices.Clone(first), recs)
		if n := checkReplay(t, data, 3); n != len(first) && n != len(data) {
			t.Fatalf("replayed %d bytes: want the first chunk (%d) or both (%d)", n, len(first), len(data))
		}
	})
}

// ---------------------------------------------------------------------------------
// Management API

// apiHarness is a Manager whose state is put back to a fixed baseline before every
// request, so that each fuzz input is judged on its own (a crasher reproduces) and
// disk use stays bounded however many streams the inputs create.
type apiHarness struct {
	m        *Manager
	batch    broker.Batch
	stream   streamapi.StreamConfig   // normalised baseline stream
	consumer streamapi.ConsumerConfig // normalised baseline consumer
	msgs     uint64
	inbox    inboxSink
	// acked is set when an ack may have changed the baseline consumer's position,
	// which its configuration does not show.
	acked bool
}

// harnessPending is how many messages the baseline consumer holds unacknowledged.
const harnessPending = 2

// inboxSink takes replies, so that the consumer counts its deliveries as made, and
// remembers the ack subjects of the deliveries.
type inboxSink struct {
	mu   sync.Mutex
	acks []string
}

func (s *inboxSink) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	if bytes.HasPrefix(m.Reply, []byte(streamapi.AckPrefix)) {
		s.mu.Lock()
		s.acks = append(s.acks, string(m.Reply))
		s.mu.Unlock()
	}
	return true
}

func (s *inboxSink) Flush() {}

const (
	harnessStream   = "S"
	harnessConsumer = "C"
)

func newAPIHarness(t testing.TB) *apiHarness { return newHarnessSyncing(t, store.SyncNever) }

// newHarnessSyncing is newAPIHarness with streams and journals synced per policy.
func newHarnessSyncing(t testing.TB, sync store.SyncPolicy) *apiHarness {
	t.Helper()
	m, err := New(Config{Dir: t.TempDir(), Sync: sync, MaxStreams: 4, MaxConsumers: 4}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	h := &apiHarness{m: m}
	if err := m.broker.Subscribe(&broker.Subscription{Sink: &h.inbox, Subject: "_INBOX.>"}); err != nil {
		t.Fatal(err)
	}
	h.reset(t)
	return h
}

// reset removes everything but the baseline stream and consumer, and rebuilds those
// if a request changed them.
func (h *apiHarness) reset(t testing.TB) {
	t.Helper()
	m := h.m
	for _, s := range m.Streams() {
		if s.Name() != harnessStream {
			if err := m.DeleteStream(s.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := m.Stream(harnessStream)
	if err == nil && (!configsEqual(s.Config(), h.stream) || s.state().Msgs != h.msgs) {
		if err := m.DeleteStream(harnessStream); err != nil {
			t.Fatal(err)
		}
		s = nil
	}
	if s == nil {
		s = h.createStream(t)
	}
	for _, c := range s.Consumers() {
		if c.Name() != harnessConsumer || !configsEqualJSON(c.cfg, h.consumer) || h.acked || c.Info().NumAckPending != harnessPending {
			if err := s.DeleteConsumer(c.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.acked = false
	if _, err := s.Consumer(harnessConsumer); err != nil {
		h.createConsumer(t, s)
	}
}

// createConsumer makes the baseline consumer and has it deliver harnessPending
// messages, which stay unacknowledged for acks to work on (the long ack wait keeps
// them from being redelivered during a fuzz run).
func (h *apiHarness) createConsumer(t testing.TB, s *Stream) {
	t.Helper()
	c, err := s.AddConsumer(harnessConsumer, streamapi.ConsumerConfig{Durable: harnessConsumer, AckPolicy: streamapi.AckExplicit,
		AckWait: streamapi.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	h.consumer = c.cfg
	h.inbox.mu.Lock()
	h.inbox.acks = h.inbox.acks[:0]
	h.inbox.mu.Unlock()
	pull := &broker.Message{Subject: []byte(streamapi.ConsumerNextSubject(harnessStream, harnessConsumer)),
		Reply: []byte("_INBOX.pull"), Payload: fmt.Appendf(nil, `{"batch":%d}`, harnessPending)}
	if !h.m.api.Deliver(nil, pull) {
		t.Fatal("pull request refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Info().NumAckPending != harnessPending {
		if time.Now().After(deadline) {
			t.Fatalf("baseline consumer has %d messages pending, want %d", c.Info().NumAckPending, harnessPending)
		}
		time.Sleep(time.Millisecond)
	}
}

// createStream makes the baseline stream: two partitions holding a few messages, so
// that get, purge and info requests have something to work on.
func (h *apiHarness) createStream(t testing.TB) *Stream {
	t.Helper()
	s, err := h.m.AddStream(streamapi.StreamConfig{Name: harnessStream, Subjects: []string{"s.>"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	h.stream = s.Config()
	subjects := []string{"s.a", "s.b", "s.a", "s.c.d"}
	for i, subj := range subjects {
		h.m.broker.Publish(&h.batch, &broker.Message{Subject: []byte(subj), Payload: fmt.Appendf(nil, "m%d", i)})
	}
	h.batch.Flush()
	h.msgs = uint64(len(subjects))
	deadline := time.Now().Add(10 * time.Second)
	for s.state().Msgs != h.msgs {
		if time.Now().After(deadline) {
			t.Fatalf("baseline stream holds %d messages, want %d", s.state().Msgs, h.msgs)
		}
		time.Sleep(time.Millisecond)
	}
	return s
}

// handle answers one request, turning a hang into a failure that shows every
// goroutine, and a panic into a failure that shows where.
func (h *apiHarness) handle(t *testing.T, subj string, body []byte) []byte {
	t.Helper()
	type answer struct {
		resp  []byte
		panic any
		stack []byte
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- answer{panic: p, stack: stack(false)}
			}
		}()
		done <- answer{resp: h.m.api.handle(apiRequest{subject: subj, reply: []byte("_INBOX.x"), body: body})}
	}()
	select {
	case a := <-done:
		if a.panic != nil {
			t.Fatalf("request %q %q panicked: %v\n%s", subj, body, a.panic, a.stack)
		}
		return a.resp
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer to %q %q within 30 s:\n%s", subj, body, stack(true))
		return nil
	}
}

// noPanic runs fn, failing the test on a panic rather than letting it end the test
// binary, so that the other tests still report.
func noPanic(t testing.TB, what string, fn func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s panicked: %v\n%s", what, p, stack(false))
		}
	}()
	fn()
}

func stack(all bool) []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, all)]
}

// answerType is the value type the API promises for a request subject, nil when the
// request is not one it knows (which must be answered with an error).
func answerType(subj string) any {
	op, ok := strings.CutPrefix(subj, streamapi.APIPrefix)
	if !ok {
		return nil
	}
	tok := strings.Split(op, ".")
	switch {
	case op == "STREAM.LIST":
		return &streamapi.StreamList{}
	case len(tok) == 3 && tok[0] == "STREAM":
		switch tok[1] {
		case "CREATE", "UPDATE", "INFO":
			return &streamapi.StreamInfo{}
		case "DELETE":
			return &streamapi.Deleted{}
		case "PURGE":
			return &streamapi.PurgeResponse{}
		}
	case len(tok) == 4 && tok[0] == "STREAM" && tok[1] == "MSG" && tok[2] == "GET":
		return &streamapi.StoredMsg{}
	case len(tok) >= 3 && tok[0] == "CONSUMER":
		switch {
		case tok[1] == "CREATE" && len(tok) <= 4, tok[1] == "INFO" && len(tok) == 4:
			return &streamapi.ConsumerInfo{}
		case tok[1] == "DELETE" && len(tok) == 4:
			return &streamapi.Deleted{}
		case tok[1] == "LIST" && len(tok) == 3:
			return &streamapi.ConsumerList{}
		}
	}
	return nil
}

// checkAnswer decodes an answer strictly: a JSON object with exactly one of an error
// (with a code and a description) or a value of the type the request promises.
func checkAnswer(t *testing.T, subj string, body, resp []byte) (*streamapi.APIError, any) {
	t.Helper()
	var r struct {
		Error *streamapi.APIError `json:"error"`
		Value json.RawMessage     `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(resp))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("answer to %q %q is not a response object: %v: %q", subj, body, err, resp)
	}
	hasValue := len(r.Value) > 0 && string(r.Value) != "null"
	if (r.Error != nil) == hasValue {
		t.Fatalf("answer to %q %q has %s: %q", subj, body, map[bool]string{true: "both an error and a value", false: "neither an error nor a value"}[hasValue], resp)
	}
	if r.Error != nil {
		if r.Error.Code == 0 || r.Error.Description == "" {
			t.Fatalf("error answer to %q %q without code or description: %q", subj, body, resp)
		}
		return r.Error, nil
	}
	v := answerType(subj)
	if v == nil {
		t.Fatalf("unknown request %q answered with a value: %q", subj, resp)
	}
	vd := json.NewDecoder(bytes.NewReader(r.Value))
	vd.DisallowUnknownFields()
	if err := vd.Decode(v); err != nil {
		t.Fatalf("value answering %q is not a %T: %v: %q", subj, v, err, r.Value)
	}
	return nil, v
}

func TestAPIHandle(t *testing.T) {
	h := newAPIHarness(t)
	p := streamapi.APIPrefix
	cases := []struct {
		subj, body string
		code       int                     // 0: a value is expected
		check      func(v any) string      // optional; returns what is wrong
		after      func(m *Manager) string // optional; checks the engine's state
	}{
		{subj: p + "STREAM.INFO.S", check: func(v any) string {
			if i := v.(*streamapi.StreamInfo); i.Config.Name != "S" || i.State.Msgs != 4 || len(i.State.Parts) != 2 {
				return fmt.Sprintf("info %+v", i)
			}
			return ""
		}},
		{subj: p + "STREAM.CREATE.T", body: `{"subjects":["t.*"],"max_age":"1m","duplicate_window":60000000000}`, check: func(v any) string {
			if c := v.(*streamapi.StreamInfo).Config; c.Name != "T" || time.Duration(c.MaxAge) != time.Minute || time.Duration(c.DuplicateWindow) != time.Minute {
				return fmt.Sprintf("config %+v", c)
			}
			return ""
		}, after: func(m *Manager) string {
			if _, err := m.Stream("T"); err != nil {
				return err.Error()
			}
			return ""
		}},
		{subj: p + "STREAM.CREATE.T", body: `{"name":"U"}`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.CREATE.T", body: `{"subjects":["s.a"]}`, code: streamapi.CodeConflict},
		{subj: p + "STREAM.CREATE.T", body: `{"subjects":["$TERN.x"]}`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.CREATE.a*b", code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.CREATE.T", body: `{"unknown":1}`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.CREATE.T", body: `{"max_age":"soon"}`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.CREATE.T", body: `{`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.UPDATE.S", body: `{"subjects":["s.>"],"partitions":1}`, code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.INFO.nope", code: streamapi.CodeStreamNotFound},
		{subj: p + "STREAM.DELETE.S", after: func(m *Manager) string {
			if _, err := m.Stream("S"); err == nil {
				return "stream S still exists"
			}
			return ""
		}},
		{subj: p + "STREAM.PURGE.S", body: `{"filter":"s.a"}`, check: func(v any) string {
			if n := v.(*streamapi.PurgeResponse).Purged; n != 2 {
				return fmt.Sprintf("purged %d, want the 2 messages on s.a", n)
			}
			return ""
		}},
		{subj: p + "STREAM.PURGE.S", body: `{"keep":1}`, check: func(v any) string {
			if n := v.(*streamapi.PurgeResponse).Purged; n != 2 {
				return fmt.Sprintf("purged %d, want all but the last of each of 2 partitions", n)
			}
			return ""
		}},
		{subj: p + "STREAM.MSG.GET.S", body: `{"last_by_subj":"s.nope"}`, code: streamapi.CodeNotFound},
		{subj: p + "STREAM.MSG.GET.S", body: `{"seq":1,"partition":-1}`, code: streamapi.CodeNotFound},
		{subj: p + "STREAM.MSG.GET.S", body: `{"seq":1,"partition":2}`, code: streamapi.CodeNotFound},
		{subj: p + "STREAM.LIST", check: func(v any) string {
			if l := v.(*streamapi.StreamList); len(l.Streams) != 1 || l.Streams[0].Config.Name != "S" {
				return fmt.Sprintf("list %+v", l)
			}
			return ""
		}},
		{subj: p + "CONSUMER.INFO.S.C", check: func(v any) string {
			if i := v.(*streamapi.ConsumerInfo); i.Name != "C" || i.Stream != "S" || len(i.Partitions) != 2 {
				return fmt.Sprintf("info %+v", i)
			}
			return ""
		}},
		{subj: p + "CONSUMER.CREATE.S.D", body: `{"durable_name":"D","ack_wait":"5s","backoff":["1s",2000000000]}`, check: func(v any) string {
			if c := v.(*streamapi.ConsumerInfo).Config; time.Duration(c.AckWait) != 5*time.Second || len(c.Backoff) != 2 || time.Duration(c.Backoff[1]) != 2*time.Second {
				return fmt.Sprintf("config %+v", c)
			}
			return ""
		}},
		{subj: p + "CONSUMER.CREATE.S.D", body: `{"durable_name":"E"}`, code: streamapi.CodeBadRequest},
		{subj: p + "CONSUMER.CREATE.S.D", body: `{"backoff":["-1s"]}`, code: streamapi.CodeBadRequest},
		{subj: p + "CONSUMER.CREATE.S.D", body: `{"filter_subject":"t.>"}`, code: streamapi.CodeBadRequest},
		{subj: p + "CONSUMER.CREATE.S.C", body: `{"durable_name":"C","ack_policy":"none"}`, code: streamapi.CodeConflict},
		{subj: p + "CONSUMER.CREATE.nope.C", code: streamapi.CodeStreamNotFound},
		{subj: p + "CONSUMER.INFO.S.nope", code: streamapi.CodeConsumerMissing},
		{subj: p + "CONSUMER.DELETE.S.C", after: func(m *Manager) string {
			s, _ := m.Stream("S")
			if _, err := s.Consumer("C"); err == nil {
				return "consumer C still exists"
			}
			return ""
		}},
		{subj: p + "CONSUMER.LIST.S", check: func(v any) string {
			if l := v.(*streamapi.ConsumerList); len(l.Consumers) != 1 || l.Consumers[0].Name != "C" {
				return fmt.Sprintf("list %+v", l)
			}
			return ""
		}},
		{subj: p + "CONSUMER.NEXT.S.C", body: `{"batch":"x"}`, code: streamapi.CodeBadRequest},
		{subj: p + "CONSUMER.NEXT.S.nope", code: streamapi.CodeConsumerMissing},
		{subj: p + "STREAM", code: streamapi.CodeBadRequest},
		{subj: p + "STREAM.INFO.S.extra", code: streamapi.CodeBadRequest},
		{subj: p + "CONSUMER.LIST.S.extra", code: streamapi.CodeBadRequest},
		{subj: p, code: streamapi.CodeBadRequest},
	}
	for _, c := range cases {
		h.reset(t)
		resp := h.handle(t, c.subj, []byte(c.body))
		apiErr, v := checkAnswer(t, c.subj, []byte(c.body), resp)
		switch {
		case c.code == 0 && apiErr != nil:
			t.Errorf("%s %s: error %v", c.subj, c.body, apiErr)
			continue
		case c.code != 0 && (apiErr == nil || apiErr.Code != c.code):
			t.Errorf("%s %s: answer %s, want error code %d", c.subj, c.body, resp, c.code)
			continue
		}
		if c.check != nil {
			if what := c.check(v); what != "" {
				t.Errorf("%s %s: %s", c.subj, c.body, what)
			}
		}
		if c.after != nil {
			if what := c.after(h.m); what != "" {
				t.Errorf("%s %s: %s", c.subj, c.body, what)
			}
		}
	}
}

// FuzzAPIRequest: any management request gets, in bounded time, a JSON answer with
// either an error or a value of the promised type, never a panic.
func FuzzAPIRequest(f *testing.F) {
	seeds := []struct{ subj, body string }{
		{"STREAM.CREATE.T", `{"name":"T","subjects":["t.>"]}`},
		{"STREAM.CREATE.P", `{"name":"P","subjects":["p.*"],"partitions":3,"retention":"workqueue","max_age":"1h"}`},
		{"STREAM.CREATE.L", `{"subjects":["l"],"max_msgs":1,"discard":"new","sync":"always","segment_bytes":4096}`},
		{"STREAM.UPDATE.S", `{"name":"S","subjects":["s.>"],"partitions":2,"max_msgs":1}`},
		{"STREAM.UPDATE.S", `{"name":"S","subjects":["s.>"],"partitions":4}`},
		{"STREAM.INFO.S", ``},
		{"STREAM.LIST", ``},
		{"STREAM.PURGE.S", `{"filter":"s.a","keep":1}`},
		{"STREAM.PURGE.S", `{"seq":3}`},
		{"STREAM.MSG.GET.S", `{"seq":1}`},
		{"STREAM.MSG.GET.S", `{"last_by_subj":"s.a","partition":1}`},
		{"CONSUMER.CREATE.S.D", `{"durable_name":"D","ack_policy":"all","deliver_policy":"last_per_subject","filter_subject":"s.a"}`},
		{"CONSUMER.CREATE.S", `{"deliver_policy":"by_start_time","opt_start_time":"2024-01-01T00:00:00Z","backoff":["1s","5s"]}`},
		{"CONSUMER.CREATE.S.D", `{"durable_name":"D","deliver_subject":"out","deliver_group":"g","max_deliver":-1}`},
		{"CONSUMER.CREATE.S.D", `{"deliver_policy":"by_start_sequence","opt_start_seq":2}`},
		{"CONSUMER.INFO.S.C", ``},
		{"CONSUMER.LIST.S", ``},
		{"CONSUMER.NEXT.S.C", `{"batch":1}`},
		{"CONSUMER.DELETE.S.C", ``},
		{"STREAM.DELETE.S", ``},
		{"STREAM.CREATE.", `{`},
		{"NOPE", `null`},
	}
	for _, s := range seeds {
		f.Add(s.subj, []byte(s.body))
	}
	h := newAPIHarness(f)
	f.Fuzz(func(t *testing.T, subj string, body []byte) {
		h.reset(t)
		full := streamapi.APIPrefix + subj
		checkAnswer(t, full, body, h.handle(t, full, body))
	})
}

// pendingKeys lists what a consumer holds unacknowledged.
func pendingKeys(c *Consumer) map[partSeq]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make(map[partSeq]bool)
	for i, p := range c.m.State().Parts {
		for _, e := range p.Pending {
			keys[partSeq{i, e[0]}] = true
		}
	}
	return keys
}

// FuzzAckSink feeds an ack subject and one or more ack bodies (one per line) to the
// ack handler, as if a client published them, against a consumer holding delivered
// messages. Besides never panicking, the outcome must follow the documented meaning
// of acks: the message named is no longer pending if some body was an ack or a term,
// and nothing else changes (nak and wip keep it pending; other subjects do nothing).
func FuzzAckSink(f *testing.F) {
	h := newAPIHarness(f)
	h.inbox.mu.Lock()
	delivered := slices.Clone(h.inbox.acks)
	h.inbox.mu.Unlock()
	if len(delivered) != harnessPending {
		f.Fatalf("baseline deliveries %q", delivered)
	}
	for _, subj := range delivered {
		rest := strings.TrimPrefix(subj, streamapi.AckPrefix)
		for _, body := range []string{"", "ack", "nak", "nak 1ms\nterm gone", "wip\nwip", "nak\nack", "term\nack", "nak 5s\nnak"} {
			f.Add(rest, []byte(body))
		}
	}
	for _, subj := range []string{"S.C.2.1.1.1.1.0", "S.C.1048576.1.1.1.1.0", "S.nope.0.1.1.1.1.0", "nope.C.0.1.1.1.1.0", "S.C.0.1.99.1.1.0", "S.C"} {
		f.Add(subj, []byte("ack"))
	}
	f.Fuzz(func(t *testing.T, subj string, bodies []byte) {
		h.reset(t)
		s, err := h.m.Stream(harnessStream)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Consumer(harnessConsumer)
		if err != nil {
			t.Fatal(err)
		}
		want := pendingKeys(c)
		if len(want) != harnessPending {
			t.Fatalf("baseline consumer holds %d messages, want %d", len(want), harnessPending)
		}
		full := []byte(streamapi.AckPrefix + subj)
		ref, err := streamapi.ParseAckSubject(full)
		ours := err == nil && string(ref.Stream) == harnessStream && string(ref.Consumer) == harnessConsumer
		h.acked = h.acked || ours
		key := partSeq{ref.Partition, ref.StreamSeq}
		for _, body := range bytes.Split(bodies, []byte{'\n'}) {
			msg := &broker.Message{Subject: slices.Clone(full), Reply: []byte("_INBOX.confirm"), Payload: body}
			noPanic(t, fmt.Sprintf("ack %q %q", full, body), func() {
				if !h.m.acks.Deliver(nil, msg) {
					t.Fatalf("ack %q %q refused", full, body)
				}
			})
			if kind, _, _, err := streamapi.ParseAckBody(body); ours && err == nil && (kind == streamapi.Ack || kind == streamapi.Term) {
				delete(want, key)
			}
		}
		if got := pendingKeys(c); !reflect.DeepEqual(got, want) {
			t.Fatalf("after %q %q: pending %v, want %v", full, bodies, got, want)
		}
	})
}

// TestStoreDirLocked: a second engine on a directory in use is refused, and the
// directory is free again once the first closes.
func TestStoreDirLocked(t *testing.T) {
	dir := t.TempDir()
	m1, err := New(Config{Dir: dir}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: dir}, broker.New(), nil); !errors.Is(err, ErrDirInUse) {
		m1.Close()
		t.Fatalf("second engine on the same directory: %v, want ErrDirInUse", err)
	}
	m1.Close()
	m2, err := New(Config{Dir: dir}, broker.New(), nil)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	m2.Close()
}
