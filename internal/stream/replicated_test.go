package stream

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

type testMsg struct{ subj, id, data string }

// msgEntryOf encodes msgs as the leader would.
func msgEntryOf(token uint64, ts int64, msgs ...testMsg) []byte {
	var q inbound
	var idx []int
	for _, m := range msgs {
		var it inItem
		it.subj = q.put([]byte(m.subj))
		var hdr []byte
		if id, after, ok := strings.Cut(m.id, " after "); ok {
			// "<id> after <id>": stored only behind the second.
			hdr = header.Append(header.Append(nil, streamapi.HeaderMsgID, id), streamapi.HeaderExpectedLastMsgID, after)
		} else if m.id != "" {
			hdr = header.Append(nil, streamapi.HeaderMsgID, m.id)
		}
		it.hdr = q.put(hdr)
		it.data = q.put([]byte(m.data))
		idx = append(idx, len(q.items))
		q.items = append(q.items, it)
	}
	b := appendMsgEntry(nil, token, ts, &q, idx)
	if n := msgEntrySize(token, ts, &q, idx); n != len(b) {
		panic(fmt.Sprintf("entry of %d bytes, sized %d", len(b), n))
	}
	// The leader cuts blocks by its messages' sizes; they must cut where a walk
	// of the entry does, and sizes that do not add up are refused.
	sizes := msgSizes(nil, &q, idx)
	for _, blockBytes := range []int{1, 60, store.BlockBytes} {
		walked, ok1 := appendBlocksEntry(nil, b, blockBytes, nil)
		sized, ok2 := appendBlocksEntry(nil, b, blockBytes, sizes)
		if !ok1 || !ok2 || !bytes.Equal(walked, sized) {
			panic(fmt.Sprintf("blocks of %d bytes: cut by sizes %v (%v), by a walk (%v)", blockBytes, sizes, ok2, ok1))
		}
	}
	if len(sizes) > 0 {
		wrong := slices.Clone(sizes)
		wrong[len(wrong)-1]++
		if _, ok := appendBlocksEntry(nil, b, 60, wrong); ok {
			panic("sizes longer than the entry were taken")
		}
		if _, ok := appendBlocksEntry(nil, b, 60, sizes[:len(sizes)-1]); ok {
			panic("sizes of fewer messages than the entry's were taken")
		}
	}
	return b
}

func openTestLog(t *testing.T, dir string) *store.Log {
	t.Helper()
	l, _, err := store.Open(store.Config{Dir: dir, Name: "p0", Sync: store.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// records lists a log's messages as "seq subject payload".
func logRecords(t *testing.T, l *store.Log) []string {
	t.Helper()
	var out []string
	r := l.NewReader(1)
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, store.ErrNotFound) || err != nil {
			break
		}
		out = append(out, fmt.Sprintf("%d %s %s %d", rec.Seq, rec.Subject, rec.Payload, rec.Time))
	}
	return out
}

func TestMsgEntryRoundTrip(t *testing.T) {
	// Sizes around the varints' steps: msgEntryOf checks the entry is sized
	// exactly.
	for _, n := range []int{0, 127, 128, 16383, 16384} {
		for _, ts := range []int64{0, -1, 63, -64, 64, 1 << 62, -1 << 63} {
			msgEntryOf(uint64(n)<<20, ts, testMsg{"s", "", strings.Repeat("x", n)})
		}
	}
	b := msgEntryOf(42, -7, testMsg{"a.b", "id-1", "hello"}, testMsg{"c", "", ""})
	e, err := decodeMsgEntry(b)
	if err != nil || e.token != 42 || e.ts != -7 || e.count != 2 {
		t.Fatalf("decoded %+v, %v", e, err)
	}
	subj, hdr, data, ok, err := e.next()
	if !ok || err != nil || string(subj) != "a.b" || string(data) != "hello" {
		t.Fatalf("first: %q %q %v %v", subj, data, ok, err)
	}
	if id, _ := header.Block(hdr).Lookup(streamapi.HeaderMsgID); id != "id-1" {
		t.Fatalf("first header id %q", id)
	}
	if subj, _, data, ok, err = e.next(); !ok || err != nil || string(subj) != "c" || len(data) != 0 {
		t.Fatalf("second: %q %q %v %v", subj, data, ok, err)
	}
	if _, _, _, ok, err = e.next(); ok || err != nil {
		t.Fatalf("after the last: %v %v", ok, err)
	}
	for name, bad := range map[string][]byte{
		"empty":      nil,
		"unknown op": {9},
		"truncated":  b[:len(b)-1],
		"trailing":   append(bytes.Clone(b), 0),
		"count":      {entryMsgs, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		e, err := decodeMsgEntry(bad)
		for err == nil {
			var ok bool
			if _, _, _, ok, err = e.next(); !ok {
				break
			}
		}
		if !errors.Is(err, errBadEntry) {
			t.Errorf("%s: %v, want errBadEntry", name, err)
		}
	}
}

// FuzzMsgEntry: entries come from the Raft log, written by other nodes; any bytes
// decode to messages or errBadEntry, never a panic.
func FuzzMsgEntry(f *testing.F) {
	f.Add(msgEntryOf(1, 1, testMsg{"a", "x", "y"}))
	f.Add(msgEntryOf(1<<60, -1<<60, testMsg{"a.b.c", "", "payload"}, testMsg{"d", "id", ""}))
	f.Add([]byte{entryMsgs, 0, 0, 0})
	many := make([]testMsg, 20)
	for i := range many {
		many[i] = testMsg{"orders.created", fmt.Sprintf("id-%d", i), "payload payload"}
	}
	f.Add(compressMsgEntry(msgEntryOf(3, 3, many...), nil))
	small, _ := appendBlocksEntry(nil, msgEntryOf(3, 3, many...), 60, nil)
	f.Add(small)
	f.Add(append([]byte{entryMsgsS2}, s2.Encode(nil, msgEntryOf(3, 3, many...))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var err error
		if len(b) > 0 && b[0] == entryMsgsS2 {
			b, err = expandMsgEntry(nil, b)
		}
		if len(b) > 0 && b[0] == entryMsgsBlocks {
			var e msgEntry
			var blocks []msgBlock
			if e, blocks, err = decodeBlocksEntry(b, nil); err == nil {
				b, err = expandBlocksEntry(nil, e, blocks)
			}
		}
		if err != nil {
			if !errors.Is(err, errBadEntry) {
				t.Fatalf("error not errBadEntry: %v", err)
			}
			return
		}
		e, err := decodeMsgEntry(b)
		for n := 0; err == nil; n++ {
			var ok bool
			if _, _, _, ok, err = e.next(); !ok {
				break
			}
			if n > len(b) {
				t.Fatal("more messages than bytes")
			}
		}
		if err != nil && !errors.Is(err, errBadEntry) {
			t.Fatalf("error not errBadEntry: %v", err)
		}
	})
}

// randomEntries is a log of message batches with ids that repeat, sometimes within
// the duplicate window and sometimes after it.
func randomEntries(seed uint64, n int) []replica.Entry {
	rng := rand.New(rand.NewPCG(seed, 7))
	ts := int64(1_000_000_000)
	var ents []replica.Entry
	for i := range n {
		ts += int64(rng.IntN(3)) * int64(time.Second)
		var msgs []testMsg
		for range 1 + rng.IntN(5) {
			id := ""
			if rng.IntN(2) == 0 {
				id = fmt.Sprintf("id-%d", rng.IntN(20))
			}
			msgs = append(msgs, testMsg{fmt.Sprintf("s.%d", rng.IntN(3)), id, fmt.Sprintf("m%d", rng.IntN(1000))})
		}
		ents = append(ents, replica.Entry{Index: uint64(i + 2), Term: 1, Data: msgEntryOf(uint64(i), ts, msgs...)})
	}
	return ents
}

// TestReplicasStoreAlike: replicas applying the same entries, in batches of
// different sizes, hold the same messages under the same sequences, duplicates
// within the window included.
//
// Replicas applying the entries as a leader compresses them, in blocks, store
// the same too, whether their logs write the blocks as they are (compression
// on) or the messages one by one; blocks of one or two messages put
// duplicates both within a block and across blocks.
func TestReplicasStoreAlike(t *testing.T) {
	for seed := range uint64(10) {
		ents := randomEntries(seed, 60)
		blocked := make([]replica.Entry, len(ents))
		for i, e := range ents {
			blocked[i] = e
			blocked[i].Data, _ = appendBlocksEntry(nil, e.Data, 12+int(seed), nil)
		}
		var logs [][]string
		for k, batch := range []int{1, 7, 60, 1, 7, 60, 5} {
			l := openTestLog(t, t.TempDir())
			m := newPartitionMachine(l, 5*time.Second, nil)
			from := ents
			if k >= 3 {
				from = blocked
			}
			if k >= 6 {
				if err := l.SetCompression(store.CompressS2); err != nil {
					t.Fatal(err)
				}
				m.setCompression(store.CompressS2)
			}
			for i := 0; i < len(from); i += batch {
				if err := m.Apply(from[i:min(i+batch, len(from))]); err != nil {
					t.Fatal(err)
				}
			}
			logs = append(logs, logRecords(t, l))
		}
		if len(logs[0]) < 60 {
			t.Fatalf("seed %d: %d messages stored from 60 batches", seed, len(logs[0]))
		}
		for i := 1; i < len(logs); i++ {
			if fmt.Sprint(logs[i]) != fmt.Sprint(logs[0]) {
				t.Fatalf("seed %d: replica %d differs:\n%v\n%v", seed, i, logs[0], logs[i])
			}
		}
	}
}

// applyResults applies ents to a fresh replica with a duplicate window and
// returns each batch's results by its token.
func applyResults(t *testing.T, window time.Duration, ents []replica.Entry) map[uint64][]pubResult {
	t.Helper()
	got := map[uint64][]pubResult{}
	m := newPartitionMachine(openTestLog(t, t.TempDir()), window, func(token uint64, res []pubResult) {
		got[token] = append([]pubResult(nil), res...)
	})
	if err := m.Apply(ents); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestDuplicatesWithinWindow(t *testing.T) {
	sec := int64(time.Second)
	ents := []replica.Entry{
		{Index: 2, Data: msgEntryOf(1, 100*sec, testMsg{"a", "x", "1"}, testMsg{"a", "y", "2"})},
		{Index: 3, Data: msgEntryOf(2, 105*sec, testMsg{"a", "x", "1 again"})},  // within 10 s: a duplicate
		{Index: 4, Data: msgEntryOf(3, 120*sec, testMsg{"a", "x", "1 later"})},  // 20 s on: stored
		{Index: 5, Data: msgEntryOf(4, 121*sec, testMsg{"a", "y", "2 again"})},  // y at 100 s is 21 s old
		{Index: 6, Data: msgEntryOf(5, 125*sec, testMsg{"a", "x", "x thrice"})}, // x at 120 s: a duplicate
	}
	got := applyResults(t, 10*time.Second, ents)
	want := map[uint64][]pubResult{
		1: {{seq: 1}, {seq: 2}},
		2: {{seq: 1, dup: true}},
		3: {{seq: 3}},
		4: {{seq: 4}},
		5: {{seq: 3, dup: true}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
}

// TestExpectedLastMsgIDReplicated: every replica refuses alike a message whose
// expected last id is not the highest stored, on the entries' clock.
func TestExpectedLastMsgIDReplicated(t *testing.T) {
	sec := int64(time.Second)
	ents := []replica.Entry{
		{Index: 2, Data: msgEntryOf(1, 100*sec, testMsg{"a", "k:1", "1"}, testMsg{"a", "k:2 after k:1", "2"})},
		{Index: 3, Data: msgEntryOf(2, 101*sec, testMsg{"a", "k:4 after k:3", "4"})}, // k:3 never stored
		{Index: 4, Data: msgEntryOf(3, 102*sec, testMsg{"a", "k:3 after k:2", "3"}, testMsg{"a", "k:4 after k:3", "4"})},
		{Index: 5, Data: msgEntryOf(4, 120*sec, testMsg{"a", "k:5 after k:4", "5"})}, // k:4 is 18 s old: out of the window
	}
	got := applyResults(t, 10*time.Second, ents)
	wrong := func() pubResult {
		return pubResult{code: streamapi.CodeWrongLastMsgID, err: "wrong last message id: k:4 is not the last one stored"}
	}
	want := map[uint64][]pubResult{
		1: {{seq: 1}, {seq: 2}},
		2: {{code: streamapi.CodeWrongLastMsgID, err: "wrong last message id: k:3 is not the last one stored"}},
		3: {{seq: 3}, {seq: 4}},
		4: {wrong()},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
}

// TestSequencedMsgIDsReplicated: a replica refuses the rest of a sequence's batch
// whose first message was refused, across entries, and stores a retry of it in
// order; a copy of an old batch that comes after newer ones is refused whole.
func TestSequencedMsgIDsReplicated(t *testing.T) {
	sec := int64(time.Second)
	ents := []replica.Entry{
		{Index: 2, Data: msgEntryOf(1, 100*sec, testMsg{"a", "p#0", "0"}, testMsg{"a", "p#1", "1"})},
		// A batch 3..5 behind 2, which failed: its first entry, then its second.
		{Index: 3, Data: msgEntryOf(2, 101*sec, testMsg{"a", "p#3 after p#2", "3"}, testMsg{"a", "p#4", "4"})},
		{Index: 4, Data: msgEntryOf(3, 101*sec, testMsg{"a", "p#5", "5"})},
		// The retries: 2, then 3..5.
		{Index: 5, Data: msgEntryOf(4, 102*sec, testMsg{"a", "p#2 after ~p#1", "2"})},
		{Index: 6, Data: msgEntryOf(5, 102*sec, testMsg{"a", "p#3 after p#2", "3"}, testMsg{"a", "p#4", "4"}, testMsg{"a", "p#5", "5"})},
		// The first copy of 3..5, held up: duplicates; a copy of 1..2 with a
		// record 6 that never was part of it: 6 refused.
		{Index: 7, Data: msgEntryOf(6, 103*sec, testMsg{"a", "p#3 after ~p#2", "3"}, testMsg{"a", "p#4", "4"})},
		{Index: 8, Data: msgEntryOf(7, 103*sec, testMsg{"a", "p#1 after ~p#0", "1"}, testMsg{"a", "p#2", "2"}, testMsg{"a", "p#7", "7"})},
	}
	got := applyResults(t, 10*time.Second, ents)
	wrong := func(id string) pubResult {
		return pubResult{code: streamapi.CodeWrongLastMsgID, err: "wrong last message id: " + id + " does not follow the last one stored of its sequence"}
	}
	want := map[uint64][]pubResult{
		1: {{seq: 1}, {seq: 2}},
		2: {{code: streamapi.CodeWrongLastMsgID, err: "wrong last message id: p#2 is not the last one stored"}, wrong("p#4")},
		3: {wrong("p#5")},
		4: {{seq: 3}},
		5: {{seq: 4}, {seq: 5}, {seq: 6}},
		6: {{seq: 4, dup: true}, {seq: 5, dup: true}},
		7: {{seq: 2, dup: true}, {seq: 3, dup: true}, wrong("p#7")},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
}

// TestReplayAfterRestart: a replica that restarts applies again the entries after
// its snapshot; what its log already holds is not stored twice, and the duplicate
// window comes back from the log on the leader's clock.
func TestReplayAfterRestart(t *testing.T) {
	ents := randomEntries(3, 40)
	dir := t.TempDir()
	l := openTestLog(t, dir)
	m := newPartitionMachine(l, 5*time.Second, nil)
	if err := m.Apply(ents[:15]); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(ents[15:30]); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart: the log has everything up to entry 30; the group restores the
	// snapshot taken at entry 15 and applies 16 to 40.
	l2 := openTestLog(t, dir)
	m2 := newPartitionMachine(l2, 5*time.Second, nil)
	if err := m2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply(ents[15:]); err != nil {
		t.Fatal(err)
	}

	ref := openTestLog(t, t.TempDir())
	mr := newPartitionMachine(ref, 5*time.Second, nil)
	if err := mr.Apply(ents); err != nil {
		t.Fatal(err)
	}
	if got, want := logRecords(t, l2), logRecords(t, ref); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the replay:\n%v\nwant\n%v", got, want)
	}
}

func TestRestoreBehindSnapshot(t *testing.T) {
	l := openTestLog(t, t.TempDir())
	m := newPartitionMachine(l, time.Second, nil)
	if err := m.Apply(randomEntries(1, 5)); err != nil {
		t.Fatal(err)
	}
	snap, _ := m.Snapshot()
	empty := newPartitionMachine(openTestLog(t, t.TempDir()), time.Second, nil)
	if err := empty.Restore(snap); !errors.Is(err, errBehindSnapshot) {
		t.Fatalf("restoring onto an empty log: %v, want errBehindSnapshot", err)
	}
}

// leaderFetcher answers fetches from a leader's log, maxBytes at a time, counting
// them.
func leaderFetcher(l *store.Log, maxBytes int, calls *int) Fetcher {
	return func(_ context.Context, from uint64) ([]byte, error) {
		*calls++
		return readRecords(l, from, maxBytes)
	}
}

// TestRestoreCatchesUp: a replica whose log ends before the snapshot fetches what it
// misses from the leader, in several answers, and then holds the leader's records
// under the same sequences and times, its duplicate window included.
func TestRestoreCatchesUp(t *testing.T) {
	ents := randomEntries(3, 200)
	leader := openTestLog(t, t.TempDir())
	lm := newPartitionMachine(leader, time.Minute, nil)
	if err := lm.Apply(ents); err != nil {
		t.Fatal(err)
	}
	snap, err := lm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// The follower has the first 50 entries only.
	follower := openTestLog(t, t.TempDir())
	fm := newPartitionMachine(follower, time.Minute, nil)
	if err := fm.Apply(ents[:50]); err != nil {
		t.Fatal(err)
	}
	calls := 0
	fm.fetch = leaderFetcher(leader, 256, &calls)
	if err := fm.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if calls < 2 {
		t.Fatalf("caught up in %d fetches; the 256-byte answers should have taken several", calls)
	}
	if got, want := logRecords(t, follower), logRecords(t, leader); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the catch-up:\n%v\nwant\n%v", got, want)
	}
	// Both go on alike, their duplicate windows included (the ids repeat).
	next := randomEntries(4, 20)
	for i := range next {
		next[i].Index += 1000
	}
	if err := lm.Apply(next); err != nil {
		t.Fatal(err)
	}
	if err := fm.Apply(next); err != nil {
		t.Fatal(err)
	}
	if got, want := logRecords(t, follower), logRecords(t, leader); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after more entries:\n%v\nwant\n%v", got, want)
	}
}

// TestRestoreCatchesUpPastRemoved: records the leader's limits removed are skipped,
// and the follower's log starts after them as the leader's does.
func TestRestoreCatchesUpPastRemoved(t *testing.T) {
	ents := randomEntries(5, 100)
	leaderLog, _, err := store.Open(store.Config{Dir: t.TempDir(), Name: "p0", Sync: store.SyncNever, MaxMsgs: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer leaderLog.Close()
	lm := newPartitionMachine(leaderLog, time.Minute, nil)
	if err := lm.Apply(ents); err != nil {
		t.Fatal(err)
	}
	snap, _ := lm.Snapshot()
	followerLog, _, err := store.Open(store.Config{Dir: t.TempDir(), Name: "p0", Sync: store.SyncNever, MaxMsgs: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer followerLog.Close()
	fm := newPartitionMachine(followerLog, time.Minute, nil)
	if err := fm.Apply(ents[:3]); err != nil {
		t.Fatal(err)
	}
	calls := 0
	fm.fetch = leaderFetcher(leaderLog, 1<<20, &calls)
	if err := fm.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got, want := logRecords(t, followerLog), logRecords(t, leaderLog); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the catch-up:\n%v\nwant\n%v", got, want)
	}
	if fs, ls := followerLog.State(), leaderLog.State(); fs.FirstSeq != ls.FirstSeq || fs.LastSeq != ls.LastSeq {
		t.Fatalf("follower holds %d..%d, leader %d..%d", fs.FirstSeq, fs.LastSeq, ls.FirstSeq, ls.LastSeq)
	}
}

// FuzzFetchedRecords: a fetch answer comes from another node; any bytes decode to
// records or errBadEntry, never a panic.
func FuzzFetchedRecords(f *testing.F) {
	dir := f.TempDir()
	l, _, err := store.Open(store.Config{Dir: dir, Name: "p0", Sync: store.SyncNever})
	if err != nil {
		f.Fatal(err)
	}
	m := newPartitionMachine(l, time.Minute, nil)
	if err := m.Apply(randomEntries(9, 4)); err != nil {
		f.Fatal(err)
	}
	seed, err := readRecords(l, 1, 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	_ = l.Close()
	f.Add(seed)
	f.Add([]byte{entryRecords, 5, 0})
	f.Add([]byte{entryRecords, 0, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeRecords(b)
		for n := 0; err == nil; n++ {
			var ok bool
			if _, ok, err = fr.next(); !ok {
				break
			}
			if n > len(b) {
				t.Fatal("more records than bytes")
			}
		}
		if err != nil && !errors.Is(err, errBadEntry) {
			t.Fatalf("error not errBadEntry: %v", err)
		}
	})
}

// FuzzConsumerEntry: consumer entries come from the Raft log, written by other
// nodes; any bytes decode to an entry or errBadEntry, never a panic.
func FuzzConsumerEntry(f *testing.F) {
	f.Add(appendConsumerEntry(nil, entryConsumerAdd, "W", []byte(`{"name":"W"}`), []byte(`{"partitions":[{"next":1}]}`)))
	f.Add(appendConsumerEntry(nil, entryConsumerDelete, "W"))
	f.Add(appendConsumerEntry(nil, entryConsumerJournal, "W", []byte{'A', 0, 5}))
	f.Add([]byte{entryConsumerJournal, 1, 'x', 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeConsumerEntry(b)
		if err != nil {
			if !errors.Is(err, errBadEntry) {
				t.Fatalf("error not errBadEntry: %v", err)
			}
			return
		}
		if again := appendConsumerEntry(nil, e.op, e.name, e.fields[:fieldsOf(e.op)]...); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v encodes to %x, not %x", e, again, b)
		}
	})
}

func fieldsOf(op byte) int {
	switch op {
	case entryConsumerAdd:
		return 2
	case entryConsumerJournal:
		return 1
	}
	return 0
}

// FuzzRemovalEntry: delete and expire entries come from the Raft log; any bytes
// decode or give errBadEntry, never a panic.
func FuzzRemovalEntry(f *testing.F) {
	f.Add(appendDeleteEntry(nil, []uint64{1, 5, 1 << 40}))
	f.Add(appendExpireEntry(nil, -1))
	f.Add([]byte{entryDelete, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, seqs, cutoff, err := decodeRemoval(b, nil)
		if err != nil {
			if !errors.Is(err, errBadEntry) {
				t.Fatalf("error not errBadEntry: %v", err)
			}
			return
		}
		var again []byte
		if op == entryDelete {
			again = appendDeleteEntry(nil, seqs)
		} else {
			again = appendExpireEntry(nil, cutoff)
		}
		if !bytes.Equal(again, b) && len(again) >= len(b) {
			t.Fatalf("decoded %d %v %d from %x, encodes to %x", op, seqs, cutoff, b, again)
		}
	})
}

// FuzzPurgeEntry: purge entries come from the Raft log; any bytes decode or give
// errBadEntry, never a panic.
func FuzzPurgeEntry(f *testing.F) {
	f.Add(appendPurgeEntry(nil, 7, []byte(`{"keep":5,"filter":"a.b"}`)))
	f.Add(appendPurgeEntry(nil, 1<<40, []byte(`{}`)))
	f.Add([]byte{entryPurge, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := decodePurgeEntry(b); err != nil && !errors.Is(err, errBadEntry) {
			t.Fatalf("error not errBadEntry: %v", err)
		}
	})
}

// TestMsgEntryCompression: a batch of messages whose subjects and headers repeat is
// proposed compressed, one too small or that does not shrink by an eighth as it
// is; a replica applying the compressed entries stores what one applying the plain
// ones does.
func TestMsgEntryCompression(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('A' + rng.IntN(26))
		}
		return string(b)
	}
	var plain, proposed []replica.Entry
	for i := range 40 {
		var msgs []testMsg
		for j := range 1 + i%20 {
			msgs = append(msgs, testMsg{"orders.created.eu-west", fmt.Sprintf("kafka:7:0:0:%d", i*100+j), letters(100)})
		}
		e := msgEntryOf(uint64(i), int64(i+1)*int64(time.Second), msgs...)
		plain = append(plain, replica.Entry{Index: uint64(i + 2), Term: 1, Data: e})
		c := compressMsgEntry(e, nil)
		switch {
		case len(e) < compressMinBytes:
			if &c[0] != &e[0] {
				t.Fatalf("entry %d of %d bytes compressed", i, len(e))
			}
		case c[0] != entryMsgsBlocks || len(c) > len(e)-len(e)/8:
			t.Fatalf("entry %d of %d bytes (%d messages): op %d, %d bytes", i, len(e), len(msgs), c[0], len(c))
		}
		proposed = append(proposed, replica.Entry{Index: uint64(i + 2), Term: 1, Data: c})
	}
	// Payloads that do not repeat, under one-letter subjects and no headers:
	// not worth it.
	var q inbound
	var idx []int
	for range 8 {
		b := make([]byte, 200)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		idx = append(idx, len(q.items))
		q.items = append(q.items, inItem{subj: q.put([]byte("s")), hdr: q.put(nil), data: q.put(b)})
	}
	if e := appendMsgEntry(nil, 1, 1, &q, idx); compressMsgEntry(e, nil)[0] != entryMsgs {
		t.Fatalf("an incompressible batch of %d bytes compressed", len(e))
	}
	var logs []string
	for _, ents := range [][]replica.Entry{plain, proposed} {
		l := openTestLog(t, t.TempDir())
		m := newPartitionMachine(l, 5*time.Second, nil)
		for i := 0; i < len(ents); i += 7 {
			if err := m.Apply(ents[i:min(i+7, len(ents))]); err != nil {
				t.Fatal(err)
			}
		}
		logs = append(logs, fmt.Sprint(logRecords(t, l)))
	}
	if logs[0] != logs[1] {
		t.Fatalf("the replica of compressed entries differs:\n%v\n%v", logs[0], logs[1])
	}
	if n := strings.Count(logs[0], "orders.created.eu-west"); n != 420 {
		t.Fatalf("%d messages stored, want 420", n)
	}

	big := plain[len(plain)-1].Data
	c := compressMsgEntry(big, nil)
	huge := append([]byte{entryMsgsS2}, binary.AppendUvarint(nil, maxEntryExpanded+1)...)
	for name, bad := range map[string][]byte{
		"truncated":      c[:len(c)-3],
		"no block":       {entryMsgsS2},
		"too large":      huge,
		"not a batch":    append([]byte{entryMsgsS2}, s2.Encode(nil, []byte{entryDelete, 1, 2, 3})...),
		"compressed S2":  append([]byte{entryMsgsS2}, s2.Encode(nil, c)...),
		"an empty block": append([]byte{entryMsgsS2}, s2.Encode(nil, nil)...),
	} {
		if _, err := expandMsgEntry(nil, bad); !errors.Is(err, errBadEntry) {
			t.Errorf("%s: %v, want errBadEntry", name, err)
		}
		l := openTestLog(t, t.TempDir())
		if err := newPartitionMachine(l, time.Second, nil).Apply([]replica.Entry{{Index: 2, Data: bad}}); !errors.Is(err, errBadEntry) {
			t.Errorf("%s applied: %v, want errBadEntry", name, err)
		}
	}
}

// TestBlocksEntryMalformed: an entry of messages compressed in blocks that
// does not add up is errBadEntry, decoded or applied, never a panic or a
// message stored.
func TestBlocksEntryMalformed(t *testing.T) {
	head := func(count uint64) []byte {
		b := []byte{entryMsgsBlocks}
		b = binary.AppendUvarint(b, 1) // token
		b = binary.AppendVarint(b, 5)  // time
		return binary.AppendUvarint(b, count)
	}
	block := func(b []byte, msgs, innerLen int, inner []byte) []byte {
		enc := s2.Encode(nil, inner)
		b = binary.AppendUvarint(b, uint64(msgs))
		b = binary.AppendUvarint(b, uint64(innerLen))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(enc)))
		return append(b, enc...)
	}
	two := msgEntryOf(1, 5, testMsg{"a", "", "x"}, testMsg{"b", "", "y"})
	e, err := decodeMsgEntry(two)
	if err != nil {
		t.Fatal(err)
	}
	good := block(head(2), 2, len(e.rest), e.rest)
	if _, _, err := decodeBlocksEntry(good, nil); err != nil {
		t.Fatalf("a well-formed entry: %v", err)
	}
	cases := map[string][]byte{
		"blocks of fewer messages":  block(head(3), 2, len(e.rest), e.rest),
		"blocks of more messages":   block(head(1), 2, len(e.rest), e.rest),
		"a block of no message":     block(block(head(2), 2, len(e.rest), e.rest), 0, 0, nil),
		"an S2 length past the end": good[:len(good)-1],
		"an inner length not S2's":  block(head(2), 2, len(e.rest)+1, e.rest),
		"inner bytes cut short":     block(head(2), 2, len(e.rest)-1, e.rest[:len(e.rest)-1]),
		"inner bytes too long":      block(head(1), 1, len(e.rest), e.rest),
		"no S2 length":              append(binary.AppendUvarint(binary.AppendUvarint(head(2), 2), 3), 1, 2),
	}
	for name, bad := range cases {
		// Blocks that expand whole but hold other messages than they say
		// are found when the batch is applied.
		expands := name == "inner bytes cut short" || name == "inner bytes too long"
		ent, blocks, err := decodeBlocksEntry(bad, nil)
		if err == nil {
			_, err = expandBlocksEntry(nil, ent, blocks)
		}
		if expands != (err == nil) || err != nil && !errors.Is(err, errBadEntry) {
			t.Errorf("%s: expanding gives %v", name, err)
		}
		for _, compress := range []bool{false, true} {
			l := openTestLog(t, t.TempDir())
			m := newPartitionMachine(l, time.Second, nil)
			if compress {
				m.setCompression(store.CompressS2)
			}
			if err := m.Apply([]replica.Entry{{Index: 2, Data: bad}}); !errors.Is(err, errBadEntry) {
				t.Errorf("%s applied (compression %v): %v, want errBadEntry", name, compress, err)
			}
			if st := l.State(); st.Msgs != 0 {
				t.Errorf("%s: %d messages stored", name, st.Msgs)
			}
		}
	}
}

// A partition whose batches do not shrink is tried less and less often, down to
// one batch in 32, and back to every batch once one shrinks.
func TestCompressGatePacesAttempts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	batch := func(random bool) []byte {
		var q inbound
		var idx []int
		for range 8 {
			b := make([]byte, 200)
			for i := range b {
				if random {
					b[i] = byte(rng.Uint32())
				} else {
					b[i] = 'a' + byte(i%3)
				}
			}
			idx = append(idx, len(q.items))
			q.items = append(q.items, inItem{subj: q.put([]byte("s")), hdr: q.put(nil), data: q.put(b)})
		}
		return appendMsgEntry(nil, 1, 1, &q, idx)
	}
	var g compressGate // its pace is s2pace's (TestGatePace)
	for range 320 {
		if e := g.entry(batch(true), nil); e[0] != entryMsgs {
			t.Fatal("an incompressible batch compressed")
		}
	}
	if g.Misses() == 0 {
		t.Fatal("320 incompressible batches and no miss")
	}
	plainBefore := 0
	for g.entry(batch(false), nil)[0] == entryMsgs {
		plainBefore++
		if plainBefore > 32 {
			t.Fatal("a compressible batch still not compressed after 32")
		}
	}
	for i := range 50 {
		if g.entry(batch(false), nil)[0] != entryMsgsBlocks {
			t.Fatalf("compressible batch %d after the first one that shrank went plain", i)
		}
	}
	// Small batches are not attempts and do not move the pace.
	if e := g.entry([]byte{entryMsgs, 1, 2}, nil); len(e) != 3 || g.Misses() != 0 {
		t.Fatal("a batch under compressMinBytes changed the gate")
	}
}

// segmentBytes is everything a log's segment files hold.
func segmentBytes(t *testing.T, dir string) []byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("segments in %s: %v %v", dir, paths, err)
	}
	var all []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// TestBlocksWrittenAsProposed: a replica whose log compresses writes the
// blocks of a compressed entry to its log as the leader made them, except a
// block holding a duplicate, whose other messages it stores one by one; it
// stores the same messages under the same sequences as a replica applying the
// plain batches, and as the proposer applying its lent plain batch.
func TestBlocksWrittenAsProposed(t *testing.T) {
	sec := int64(time.Second)
	batch := func(token uint64, from, n int, dupAt int) []byte {
		var msgs []testMsg
		for i := range n {
			id := fmt.Sprintf("kafka:7:0:0:%d", from+i)
			if i == dupAt {
				id = "kafka:7:0:0:3" // stored by the first batch
			}
			msgs = append(msgs, testMsg{"sensors.eu.temperature", id, fmt.Sprintf(`{"sensor":%d,"celsius":%d.5,"unit":"C","site":"north"}`, (from+i)%50, (from+i)%30)})
		}
		return msgEntryOf(token, int64(token)*sec, msgs...)
	}
	plains := [][]byte{batch(1, 0, 1500, -1), batch(2, 1500, 1500, 1000)}
	var plainEnts, blockEnts []replica.Entry
	var blocks [][]msgBlock
	for i, p := range plains {
		c := compressMsgEntry(p, nil)
		_, bl, err := decodeBlocksEntry(c, nil)
		if err != nil || len(bl) < 2 {
			t.Fatalf("batch %d: %d blocks, %v", i, len(bl), err)
		}
		blocks = append(blocks, bl)
		plainEnts = append(plainEnts, replica.Entry{Index: uint64(i + 2), Term: 1, Data: p})
		blockEnts = append(blockEnts, replica.Entry{Index: uint64(i + 2), Term: 1, Data: c})
	}
	open := func(compress bool) (*partitionMachine, *store.Log, string) {
		dir := t.TempDir()
		l := openTestLog(t, dir)
		m := newPartitionMachine(l, time.Minute, nil)
		if compress {
			if err := l.SetCompression(store.CompressS2); err != nil {
				t.Fatal(err)
			}
			m.setCompression(store.CompressS2)
		}
		return m, l, dir
	}
	ref, refLog, _ := open(false)
	if err := ref.Apply(plainEnts); err != nil {
		t.Fatal(err)
	}
	want := logRecords(t, refLog)
	if len(want) != 2999 {
		t.Fatalf("%d messages stored, want 2999 (one duplicate)", len(want))
	}
	for _, lend := range []bool{false, true} {
		m, l, dir := open(true)
		if lend {
			for i, e := range blockEnts {
				p := bytes.Clone(plains[i])
				m.lent.lend(e.Data, &p)
			}
		}
		if err := m.Apply(blockEnts); err != nil {
			t.Fatal(err)
		}
		if got := logRecords(t, l); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lent %v: the replica differs", lend)
		}
		disk := segmentBytes(t, dir)
		for i, bl := range blocks {
			at := 0
			for k, b := range bl {
				holdsDup := i == 1 && at <= 1000 && 1000 < at+b.msgs
				if bytes.Contains(disk, b.s2) == holdsDup {
					t.Fatalf("lent %v: batch %d block %d (messages %d-%d) written as it came: %v", lend, i, k, at, at+b.msgs-1, !holdsDup)
				}
				at += b.msgs
			}
		}
		if len(m.lent.all) != 0 {
			t.Fatalf("%d lent batches left", len(m.lent.all))
		}
	}
}
