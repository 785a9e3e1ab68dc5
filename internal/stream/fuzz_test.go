package stream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// journalBytes writes records through a real journal and returns the file's bytes.
func journalBytes(t testing.TB, parts int, chunks ...func(j *journal)) []byte {
	dir := t.TempDir()
	j, _, err := openJournal(dir, parts, store.SyncNever, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range chunks {
		chunk(j)
		if err := j.flush(j.buf); err != nil {
			t.Fatal(err)
		}
		j.buf = j.buf[:0]
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

func sortedPending(st *consumerState) {
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
	}
}

func TestJournalReplay(t *testing.T) {
	data := journalBytes(t, 2,
		func(j *journal) {
			j.add(recDelivered, 0, 1, 1)
			j.add(recDelivered, 0, 2, 1)
			j.add(recDelivered, 1, 7, 1)
			j.add(recConsSeq, 3, 0)
		},
		func(j *journal) {
			j.add(recAcked, 0, 1)
			j.add(recDelivered, 0, 2, 2)
			j.add(recConsSeq, 4, 1)
		},
		func(j *journal) {
			j.add(recAckedUpTo, 1, 7)
			j.add(recNext, 1, 10)
		},
	)
	st := consumerState{Parts: make([]partState, 2)}
	if n := replayJournal(data, &st); n != len(data) {
		t.Fatalf("replayed %d of %d bytes", n, len(data))
	}
	sortedPending(&st)
	want := consumerState{ConsumerSeq: 4, Redelivered: 1, Parts: []partState{
		{Next: 3, Pending: [][2]uint64{{2, 2}}},
		{Next: 10},
	}}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("state %+v, want %+v", st, want)
	}

	// A torn last chunk is ignored; the chunks before it survive.
	for cut := 1; cut < 12; cut++ {
		st := consumerState{Parts: make([]partState, 2)}
		n := replayJournal(data[:len(data)-cut], &st)
		if n >= len(data)-cut || st.ConsumerSeq != 4 {
			t.Fatalf("cut %d: replayed %d bytes, consumer seq %d; want the first two chunks", cut, n, st.ConsumerSeq)
		}
	}
	// A flipped byte inside a chunk stops replay at that chunk.
	bad := slices.Clone(data)
	bad[10] ^= 0xff
	st = consumerState{Parts: make([]partState, 2)}
	if n := replayJournal(bad, &st); n != 0 || st.ConsumerSeq != 0 {
		t.Fatalf("corrupt first chunk: replayed %d bytes, state %+v", n, st)
	}
}

// FuzzJournal: replaying any bytes never panics, never claims more than it was
// given, and is idempotent (replaying the same prefix again changes nothing), which
// is what makes snapshot-then-truncate compaction safe.
func FuzzJournal(f *testing.F) {
	f.Add(journalBytes(f, 3, func(j *journal) {
		j.add(recDelivered, 2, 5, 1)
		j.add(recAckedUpTo, 0, 9)
		j.add(recNext, 1, 4)
		j.add(recConsSeq, 8, 2)
	}))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 'D'})
	f.Fuzz(func(t *testing.T, data []byte) {
		st := consumerState{Parts: make([]partState, 3)}
		n := replayJournal(data, &st)
		if n < 0 || n > len(data) {
			t.Fatalf("replayed %d of %d bytes", n, len(data))
		}
		again := st
		again.Parts = slices.Clone(st.Parts)
		for i := range again.Parts {
			again.Parts[i].Pending = slices.Clone(st.Parts[i].Pending)
		}
		if m := replayJournal(data[:n], &again); m != n {
			t.Fatalf("second replay took %d bytes, first %d", m, n)
		}
		sortedPending(&st)
		sortedPending(&again)
		if !reflect.DeepEqual(st, again) {
			t.Fatalf("replay is not idempotent:\n%+v\n%+v", st, again)
		}
	})
}

// FuzzAPIRequest: any management request gets a JSON answer with either a result or
// an error, never a panic.
func FuzzAPIRequest(f *testing.F) {
	seeds := []struct{ subj, body string }{
		{"STREAM.CREATE.S", `{"name":"S","subjects":["s.>"]}`},
		{"STREAM.CREATE.P", `{"name":"P","subjects":["p.*"],"partitions":3,"retention":"workqueue"}`},
		{"STREAM.UPDATE.S", `{"name":"S","subjects":["s.>"],"max_msgs":10}`},
		{"STREAM.INFO.S", ``},
		{"STREAM.LIST", ``},
		{"STREAM.PURGE.S", `{"subject":"s.a","keep":1}`},
		{"STREAM.MSG.GET.S", `{"seq":1}`},
		{"CONSUMER.CREATE.S.C", `{"durable_name":"C","ack_policy":"explicit","deliver_policy":"all"}`},
		{"CONSUMER.INFO.S.C", ``},
		{"CONSUMER.LIST.S", ``},
		{"CONSUMER.DELETE.S.C", ``},
		{"STREAM.DELETE.S", ``},
		{"STREAM.CREATE.", `{`},
		{"NOPE", `null`},
	}
	for _, s := range seeds {
		f.Add(s.subj, []byte(s.body))
	}
	dir := f.TempDir()
	m, err := New(Config{Dir: dir, Sync: store.SyncNever, MaxStreams: 8, MaxConsumers: 8}, broker.New(), nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	f.Fuzz(func(t *testing.T, subj string, body []byte) {
		resp := m.api.handle(apiRequest{subject: streamapi.APIPrefix + subj, body: body})
		var r struct {
			Error *streamapi.APIError `json:"error"`
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(resp, &raw); err != nil {
			t.Fatalf("answer to %q %q is not a JSON object: %q", subj, body, resp)
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			t.Fatalf("answer to %q: %v", subj, err)
		}
		if r.Error != nil && (r.Error.Code == 0 || r.Error.Description == "") {
			t.Fatalf("error answer without code or description: %q", resp)
		}
		if r.Error == nil && len(raw) == 0 {
			t.Fatalf("empty answer to %q %q", subj, body)
		}
	})
}
