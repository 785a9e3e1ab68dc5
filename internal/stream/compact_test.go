package stream

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

func TestCompactionKey(t *testing.T) {
	for _, c := range []struct {
		name string
		hdr  []byte
		want store.Keyed
	}{
		{"key header", header.Append(nil, streamapi.HeaderKey, "k1"), store.Keyed{Space: store.KeyedBy, Key: "k1"}},
		{"empty key", header.Append(nil, streamapi.HeaderKey, ""), store.Keyed{Space: store.KeyedBy}},
		{"no key: the subject", header.Append(nil, "Other", "v"), store.Keyed{Space: store.KeyedBySubject}},
		{"no header", nil, store.Keyed{Space: store.KeyedBySubject}},
		{"tombstone", header.Append(header.Append(nil, streamapi.HeaderKey, "k1"), streamapi.HeaderNullValue, ""),
			store.Keyed{Space: store.KeyedBy, Key: "k1", Tombstone: true}},
		{"subject's tombstone", header.Append(nil, streamapi.HeaderNullValue, ""), store.Keyed{Space: store.KeyedBySubject, Tombstone: true}},
	} {
		if got := compactionKey([]byte("a.b"), c.hdr); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// FuzzCompactEntry: compact entries come from the Raft log; any bytes decode or
// give errBadEntry, never a panic, and what decodes encodes back the same.
func FuzzCompactEntry(f *testing.F) {
	f.Add(appendCompactEntry(nil, 10, 7))
	f.Add(appendCompactEntry(nil, 1<<60, 0))
	f.Add([]byte{entryCompact, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		bound, tombBound, err := decodeCompactEntry(b)
		if err != nil {
			if !errors.Is(err, errBadEntry) {
				t.Fatalf("error not errBadEntry: %v", err)
			}
			return
		}
		if again := appendCompactEntry(nil, bound, tombBound); len(again) > len(b) {
			t.Fatalf("decoded %d %d from %x, encodes to %x", bound, tombBound, b, again)
		}
	})
}

// publishKV publishes value on subject with key (none when "") on n, a null
// value when value is "", and waits for the ack.
func (n *replNode) publishKV(t *testing.T, subject, key, value string) string {
	t.Helper()
	n.pubs++
	reply := fmt.Sprintf("_ACK.%d.kv%d", n.id, n.pubs)
	var h []byte
	if key != "" {
		h = header.Append(h, streamapi.HeaderKey, key)
	}
	if value == "" {
		h = header.Append(h, streamapi.HeaderNullValue, "")
	}
	var p broker.Batch
	n.b.Publish(&p, &broker.Message{Subject: []byte(subject), Reply: []byte(reply), Header: h, Payload: []byte(value)})
	p.Flush()
	return n.waitAck(t, reply)
}

// liveValues lists the payloads of partition 0's live messages on n.
func liveValues(t *testing.T, n *replNode) []string {
	t.Helper()
	r := n.s.parts[0].NewReader(1)
	defer r.Close()
	var out []string
	for {
		rec, err := r.Next()
		if err != nil {
			return out
		}
		out = append(out, string(rec.Payload))
	}
}

// TestCompactedReplicas: a compacted R3 stream keeps the latest value of each
// key (and of each keyless subject) on every replica, alike, once the head
// has moved on; a deleted key goes after its tombstone retention; each
// replica rewrites the mostly removed segment without its removed messages;
// the next leader after a leader's loss goes on compacting, with the keys it
// learned by applying.
func TestCompactedReplicas(t *testing.T) {
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "KV", Subjects: []string{"kv.>"}, SegmentBytes: 1024,
		Compact: &streamapi.Compaction{TombstoneRetention: streamapi.Duration(time.Millisecond)}}
	nodes := startReplNodes(t, net, cfg)
	leader := leaderOf(t, nodes)
	for round := range 3 {
		for k := range 5 {
			leader.publishKV(t, "kv.x", fmt.Sprint("k", k), fmt.Sprintf("k%d=%d", k, round))
		}
		leader.publishKV(t, "kv.dev", "", fmt.Sprint("dev=", round))
	}
	leader.publishKV(t, "kv.x", "k3", "") // deletes k3
	// Fill the head with distinct keys until the records above are sealed.
	fill := func(n *replNode, prefix string) []string {
		var fills []string
		last := n.s.parts[0].State().LastSeq
		for i := 0; ; i++ {
			if head, _ := n.s.parts[0].CompactBounds(0, 0); head > last {
				break
			}
			v := fmt.Sprintf("%s%03d-%s", prefix, i, "................................................................")
			n.publishKV(t, "kv.fill", v, v)
			fills = append(fills, v)
		}
		return fills
	}
	fills := fill(leader, "fill")
	want := append([]string{"k0=2", "k1=2", "k2=2", "k4=2", "dev=2"}, fills...)
	slices.Sort(want)
	waitCompacted := func(nodes []*replNode, want []string) {
		t.Helper()
		for _, n := range nodes {
			deadline := time.Now().Add(10 * time.Second)
			for {
				got := liveValues(t, n)
				slices.Sort(got)
				if slices.Equal(got, want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d holds %d messages %q, want %d %q", n.id, len(got), got, len(want), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	waitCompacted(nodes, want)
	// Each replica rewrites the segment compaction left mostly removed: its
	// files come to 1413 bytes, where the removed messages would keep 2035.
	for _, n := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for SegmentFileBytes(t, n.s.dir) > 1700 {
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %d bytes of segments, the removed messages still in them", n.id, SegmentFileBytes(t, n.s.dir))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	rest := stopNode(net, nodes, leader)
	next := leaderOf(t, rest)
	next.publishKV(t, "kv.x", "k0", "k0=new")
	next.publishKV(t, "kv.x", "k3", "k3=back")
	more := fill(next, "more")
	want = append([]string{"k0=new", "k1=2", "k2=2", "k3=back", "k4=2", "dev=2"}, fills...)
	want = append(want, more...)
	slices.Sort(want)
	waitCompacted(rest, want)
}

// SegmentFileBytes sums the sizes of the stream log segments under dir (Raft
// logs left out). Exported for the package's external tests too.
func SegmentFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".log" || strings.Contains(path, "raft") {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMachineLearnsKeysAtFirstCompaction: a replica whose log was opened before
// compaction was switched on learns its keys from the records when it applies
// the first compaction entry, so that every replica removes the same records
// whenever each heard of the switch.
func TestMachineLearnsKeysAtFirstCompaction(t *testing.T) {
	l := openTestLog(t, t.TempDir())
	m := newPartitionMachine(l, time.Minute, nil)
	entries := []replica.Entry{
		{Index: 1, Data: msgEntryOf(1, 1, testMsg{subj: "a", data: "1"}, testMsg{subj: "b", data: "1"})},
		{Index: 2, Data: msgEntryOf(2, 2, testMsg{subj: "a", data: "2"})},
		{Index: 3, Data: appendCompactEntry(nil, 10, 10)},
	}
	if err := m.Apply(entries); err != nil {
		t.Fatal(err)
	}
	if got := logRecords(t, l); len(got) != 2 || got[0] != "2 b 1 1" || got[1] != "3 a 2 2" {
		t.Fatalf("after the first compaction the log holds %q", got)
	}
	if l.Keys() != 2 {
		t.Fatalf("the log knows %d keys, want 2", l.Keys())
	}
}

// TestMachinePassesSegmentAge: a replica's log seals its head by the age the
// stream's max lag sets, which the machine passes to the log before it writes.
func TestMachinePassesSegmentAge(t *testing.T) {
	l := openTestLog(t, t.TempDir())
	m := newPartitionMachine(l, time.Minute, nil)
	m.segmentAge.Store(int64(time.Hour))
	old := time.Now().Add(-2 * time.Hour).UnixNano()
	if err := m.Apply([]replica.Entry{{Index: 1, Data: msgEntryOf(1, old, testMsg{subj: "a", data: "1"})}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply([]replica.Entry{{Index: 2, Data: msgEntryOf(2, time.Now().UnixNano(), testMsg{subj: "a", data: "2"})}}); err != nil {
		t.Fatal(err)
	}
	if head, _ := l.CompactBounds(0, 0); head != 2 {
		t.Fatalf("head segment starts at %d, want 2: the first, two hours old, sealed", head)
	}
	// A changed age reaches the log at the next Apply.
	m.segmentAge.Store(int64(time.Nanosecond))
	if err := m.Apply([]replica.Entry{{Index: 3, Data: msgEntryOf(3, time.Now().UnixNano(), testMsg{subj: "a", data: "3"})}}); err != nil {
		t.Fatal(err)
	}
	if head, _ := l.CompactBounds(0, 0); head != 3 {
		t.Fatalf("head segment starts at %d, want 3 after the age changed", head)
	}
}

// TestCompactedHeadAge: a compacted stream's head segment is sealed by age —
// the smaller of its segment_age and its max_lag, or a week (Kafka's segment.ms
// default) when neither is set — so that a quiet stream compacts in the end; a
// stream not compacted is sealed by size, and by its segment_age when set.
func TestCompactedHeadAge(t *testing.T) {
	m := &Manager{cfg: Config{SegmentBytes: 1 << 20}}
	minute := streamapi.Duration(time.Minute)
	for _, c := range []struct {
		compact *streamapi.Compaction
		age     streamapi.Duration
		want    time.Duration
	}{
		{nil, 0, 0},
		{nil, minute, time.Minute},
		{&streamapi.Compaction{}, 0, streamapi.DefaultMaxLag},
		{&streamapi.Compaction{}, minute, time.Minute},
		{&streamapi.Compaction{MaxLag: streamapi.Duration(time.Hour)}, 0, time.Hour},
		{&streamapi.Compaction{MaxLag: streamapi.Duration(time.Hour)}, minute, time.Minute},
		{&streamapi.Compaction{MaxLag: streamapi.Duration(time.Second)}, minute, time.Second},
	} {
		s := &Stream{m: m, name: "s", cfg: streamapi.StreamConfig{Name: "s", Compact: c.compact, SegmentAge: c.age}}
		if got := s.logConfig(0).SegmentAge; got != c.want {
			t.Errorf("compact %+v, segment age %v: the log's segment age %v, want %v", c.compact, c.age, got, c.want)
		}
	}
}
