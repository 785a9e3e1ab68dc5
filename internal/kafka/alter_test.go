package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAlterConfigsAndDeleteRecords: kadm changes a topic's retention (incremental
// and whole), which the stream's limits follow, and deletes a partition's records
// below an offset, which moves that partition's start offset only.
func TestAlterConfigsAndDeleteRecords(t *testing.T) {
	s, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	if r, err := adm.CreateTopic(ctx, 2, -1, nil, "logs"); err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	limits := func() (time.Duration, int64) {
		st, err := s.Streams().Stream("logs")
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(st.Config().MaxAge), st.Config().MaxBytes
	}

	alter := func(incremental bool, cs ...kadm.AlterConfig) {
		t.Helper()
		var rs kadm.AlterConfigsResponses
		var err error
		if incremental {
			rs, err = adm.AlterTopicConfigs(ctx, cs, "logs")
		} else {
			rs, err = adm.AlterTopicConfigsState(ctx, cs, "logs")
		}
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("alter %+v: %v %+v", cs, err, rs)
		}
	}
	// retention.bytes is Kafka's limit of each partition; the stream's max_bytes
	// is the whole stream's, shared evenly between its partitions.
	retention := func() string { return describedConfigs(t, adm, "logs")["retention.bytes"] }
	alter(true, kadm.AlterConfig{Name: "retention.ms", Value: kadm.StringPtr("60000")},
		kadm.AlterConfig{Name: "retention.bytes", Value: kadm.StringPtr("1048576")})
	if age, bytes := limits(); age != time.Minute || bytes != 2<<20 {
		t.Fatalf("after setting both: max age %v, max bytes %d (2 partitions of 1 MiB)", age, bytes)
	}
	if r := retention(); r != "1048576" {
		t.Fatalf("retention.bytes described as %s", r)
	}
	// Another config changed: the limit stays as it was.
	alter(true, kadm.AlterConfig{Name: "retention.ms", Value: kadm.StringPtr("60000")})
	if _, bytes := limits(); bytes != 2<<20 {
		t.Fatalf("after changing retention.ms alone: max bytes %d", bytes)
	}
	alter(true, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.bytes"})
	if age, bytes := limits(); age != time.Minute || bytes != 0 {
		t.Fatalf("after deleting retention.bytes: max age %v, max bytes %d", age, bytes)
	}
	// A whole replacement resets what it does not name.
	alter(false, kadm.AlterConfig{Name: "retention.bytes", Value: kadm.StringPtr("2097152")})
	if age, bytes := limits(); age != 0 || bytes != 4<<20 {
		t.Fatalf("after replacing: max age %v, max bytes %d", age, bytes)
	}
	// Partitions added keep each partition's retention.bytes.
	if up, err := adm.UpdatePartitions(ctx, 3, "logs"); err != nil || up["logs"].Err != nil {
		t.Fatalf("create partitions: %v %+v", err, up)
	}
	if _, bytes := limits(); bytes != 6<<20 || retention() != "2097152" {
		t.Fatalf("after adding a partition: max bytes %d, retention.bytes %s", bytes, retention())
	}
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.bytes", Value: kadm.StringPtr("1024")}}, "logs")
	if err != nil || len(rs) != 1 || !kerrIs(rs[0].Err, kerr.InvalidConfig) {
		t.Fatalf("changing segment.bytes: %v %+v", err, rs)
	}
	// The server's max_payload (1 MiB here) bounds every message: a larger
	// max.message.bytes would not be kept, so it is refused.
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2000000")}}, "logs")
	if err != nil || len(rs) != 1 || !kerrIs(rs[0].Err, kerr.InvalidConfig) {
		t.Fatalf("max.message.bytes above max_payload: %v %+v", err, rs)
	}

	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "logs", Partition: int32(i % 2), Value: []byte{byte('a' + i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: "logs", Partition: 1, At: 3})
	del, err := adm.DeleteRecords(ctx, offsets)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := del.Lookup("logs", 1); !ok || r.Err != nil || r.LowWatermark != 3 {
		t.Fatalf("delete records below 3: %+v", r)
	}
	start, err := adm.ListStartOffsets(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := start.Lookup("logs", 1); o.Offset != 3 {
		t.Fatalf("partition 1 starts at %d, want 3", o.Offset)
	}
	if o, _ := start.Lookup("logs", 0); o.Offset != 0 {
		t.Fatalf("partition 0 starts at %d, want 0 (untouched)", o.Offset)
	}
	got := consume(t, addr, "logs", 7)
	if len(got) != 7 {
		t.Fatalf("read %d records after the deletion, want 7", len(got))
	}
	offsets = kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: "logs", Partition: 0, At: 99})
	if del, err = adm.DeleteRecords(ctx, offsets); err != nil {
		t.Fatal(err)
	}
	if r, _ := del.Lookup("logs", 0); !kerrIs(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete below an offset past the end: %+v", r)
	}
}
