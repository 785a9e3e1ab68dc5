package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readToEnd reads topic's one partition from its start up to its high
// watermark with a fresh client: each key's values in order, a null value as
// "<null>".
func readToEnd(t *testing.T, addr, topic string) map[string][]string {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	ends, err := adm.ListEndOffsets(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	out := map[string][]string{}
	if end.Offset == 0 {
		return out
	}
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for last := int64(-1); last < end.Offset-1; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s to offset %d of %d: %v", topic, last, end.Offset, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if r.Value == nil {
				v = "<null>"
			}
			out[string(r.Key)] = append(out[string(r.Key)], v)
			last = r.Offset
		})
	}
	return out
}

// TestCompactedTopic: a topic made with cleanup.policy=compact keeps each
// key's latest record once later segments hold newer ones, as Kafka's log
// cleaner does; a tombstone (null value) reads as null until its
// delete.retention.ms passes and then goes with its key; a record without a key
// is refused with INVALID_RECORD; the compaction configs are described and can
// change, and so can the policy, switching compaction off and on again, its
// configs kept meanwhile as Kafka keeps them.
func TestCompactedTopic(t *testing.T) {
	_, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("512"),
		"delete.retention.ms": kadm.StringPtr("1"), "min.compaction.lag.ms": kadm.StringPtr("0"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.5"), "max.compaction.lag.ms": kadm.StringPtr("60000")}
	if r, err := adm.CreateTopic(ctx, 1, 1, configs, "kv"); err != nil || r.Err != nil {
		t.Fatalf("create: %v %v %s", err, r.Err, r.ErrMessage)
	}
	got := describedConfigs(t, adm, "kv")
	for k, v := range map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "1", "min.compaction.lag.ms": "0", "segment.bytes": "512"} {
		if got[k] != v {
			t.Errorf("%s described as %q, want %q", k, got[k], v)
		}
	}

	cl := newClient(t, addr)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kv", Value: []byte("no key")}).FirstErr(); !kerrIs(err, kerr.InvalidRecord) {
		t.Fatalf("record without a key: %v, want INVALID_RECORD", err)
	}
	const keys, rounds = 5, 20
	for r := range rounds {
		for k := range keys {
			rec := &kgo.Record{Topic: "kv", Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "k%d-v%d", k, r)}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kv", Key: []byte("k4")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The tombstone is in the head segment, which compaction leaves alone.
	if vs := readToEnd(t, addr, "kv")["k4"]; len(vs) == 0 || vs[len(vs)-1] != "<null>" {
		t.Fatalf("k4 before compaction: %q, want its tombstone last", vs)
	}
	// Filler on one key rolls past the segments that hold everything above.
	for i := range 40 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kv", Key: []byte("filler"), Value: fmt.Appendf(nil, "f%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var last error
	ok := pollUntil(15*time.Second, func() bool {
		byKey := readToEnd(t, addr, "kv")
		last = nil
		for k := range 4 {
			if vs, w := byKey[fmt.Sprintf("k%d", k)], fmt.Sprintf("k%d-v%d", k, rounds-1); len(vs) != 1 || vs[0] != w {
				last = fmt.Errorf("key k%d: %q, want only %q", k, vs, w)
			}
		}
		if vs := byKey["k4"]; len(vs) != 0 {
			last = fmt.Errorf("tombstoned k4: %q, want nothing", vs)
		}
		if vs := byKey["filler"]; len(vs) == 0 || vs[len(vs)-1] != "f39" {
			last = fmt.Errorf("filler: %q, want it to end with f39", vs)
		}
		return last == nil
	})
	if !ok {
		t.Fatalf("not compacted: %v", last)
	}

	// The compaction configs change; retention limits need the delete
	// policy; the policy switches compaction off and on.
	alter := func(name, value string) error {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: name, Value: kadm.StringPtr(value)}}, "kv")
		if err == nil {
			err = rs[0].Err
		}
		return err
	}
	if err := alter("delete.retention.ms", "5000"); err != nil {
		t.Fatalf("alter delete.retention.ms: %v", err)
	}
	if got := describedConfigs(t, adm, "kv")["delete.retention.ms"]; got != "5000" {
		t.Fatalf("delete.retention.ms described as %q after altering it", got)
	}
	if err := alter("retention.ms", "3600000"); !kerrIs(err, kerr.InvalidConfig) {
		t.Fatalf("retention.ms on a compact-only topic: %v, want INVALID_CONFIG", err)
	}
	if err := alter("cleanup.policy", "delete"); err != nil {
		t.Fatalf("cleanup.policy=delete on a compacted topic: %v", err)
	}
	// As in Kafka, the compaction configs stay, without effect.
	if got := describedConfigs(t, adm, "kv"); got["cleanup.policy"] != "delete" || got["delete.retention.ms"] != "5000" {
		t.Fatalf("after setting cleanup.policy=delete: %v", got)
	}
	// A record without a key is a record again.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kv", Value: []byte("no key")}).FirstErr(); err != nil {
		t.Fatalf("record without a key after compaction was switched off: %v", err)
	}
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("compact,delete")},
		{Name: "retention.ms", Value: kadm.StringPtr("3600000")}}, "kv")
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatalf("compact,delete with retention.ms: %v", err)
	}
	got = describedConfigs(t, adm, "kv")
	// Compaction is back with the configs it had.
	if got["cleanup.policy"] != "compact,delete" || got["retention.ms"] != "3600000" || got["delete.retention.ms"] != "5000" {
		t.Fatalf("after compact,delete: %v", got)
	}
	// A topic made with the delete policy keeps compaction configs too.
	r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete"),
		"min.compaction.lag.ms": kadm.StringPtr("1000")}, "plain")
	if err != nil || r.Err != nil {
		t.Fatalf("create with delete and min.compaction.lag.ms: %v %v", err, r.Err)
	}
	if got := describedConfigs(t, adm, "plain"); got["cleanup.policy"] != "delete" || got["min.compaction.lag.ms"] != "1000" {
		t.Fatalf("a delete topic's compaction configs: %v", got)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "plain", Value: []byte("no key")}).FirstErr(); err != nil {
		t.Fatalf("record without a key on a delete topic with compaction configs: %v", err)
	}
}

// TestCompactedTopicMaxLag: on a quiet topic whose head segment never fills,
// max.compaction.lag.ms, or segment.ms, seals the head at the first record
// produced after its first one is that old, so superseded records are
// compacted anyway; segment.ms is described and can change.
func TestCompactedTopicMaxLag(t *testing.T) {
	_, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	cl := newClient(t, addr)
	for _, config := range []string{"max.compaction.lag.ms", "segment.ms"} {
		topic := "quiet-" + strings.ReplaceAll(config, ".", "-")
		configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), config: kadm.StringPtr("300")}
		if r, err := adm.CreateTopic(ctx, 1, 1, configs, topic); err != nil || r.Err != nil {
			t.Fatalf("create: %v %v %s", err, r.Err, r.ErrMessage)
		}
		if got := describedConfigs(t, adm, topic)[config]; got != "300" {
			t.Fatalf("%s described as %q", config, got)
		}
		produce := func(key, value string) {
			t.Helper()
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		produce("k", "v1")
		produce("k", "v2")
		time.Sleep(400 * time.Millisecond)
		produce("k", "v3") // seals v1 and v2 in their own segment
		time.Sleep(400 * time.Millisecond)
		produce("x", "y") // and v3
		var got map[string][]string
		if !pollUntil(10*time.Second, func() bool {
			got = readToEnd(t, addr, topic)
			return len(got["k"]) == 1 && got["k"][0] == "v3"
		}) {
			t.Fatalf("%s: quiet topic not compacted: %v", config, got)
		}
	}

	// segment.ms changes with the other configs, and goes back to its default.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: kadm.StringPtr("86400000")}}, "quiet-segment-ms"); err != nil {
		t.Fatal(err)
	}
	if got := describedConfigs(t, adm, "quiet-segment-ms"); got["segment.ms"] != "86400000" || got["cleanup.policy"] != "compact" {
		t.Fatalf("after the change: segment.ms %q, cleanup.policy %q", got["segment.ms"], got["cleanup.policy"])
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "segment.ms"}}, "quiet-segment-ms"); err != nil {
		t.Fatal(err)
	}
	if got := describedConfigs(t, adm, "quiet-segment-ms")["segment.ms"]; got != "604800000" {
		t.Fatalf("segment.ms back to its default described as %q, want a week", got)
	}
}
