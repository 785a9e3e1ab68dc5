package kafka_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/internal/server"
)

// TestAdmin drives topic administration through franz-go's admin client:
// CreateTopics (with retention configs), DescribeConfigs, ListOffsets (earliest,
// latest, by time), CreatePartitions (validated, applied, refused when it would
// not add), DescribeCluster and DeleteTopics.
func TestAdmin(t *testing.T) {
	s, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)

	created, err := adm.CreateTopic(ctx, 3, -1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "events")
	if err != nil || created.Err != nil {
		t.Fatalf("create: %v %v", err, created.Err)
	}
	st, err := s.Streams().Stream("events")
	if err != nil || st.Partitions() != 3 || time.Duration(st.Config().MaxAge) != time.Hour {
		t.Fatalf("stream after create: %v, %+v", err, st)
	}
	if r, _ := adm.CreateTopic(ctx, 1, -1, nil, "events"); !kerrIs(r.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("create again: %v", r.Err)
	}
	if r, _ := adm.CreateTopic(ctx, 1, -1, nil, "bad.name"); !kerrIs(r.Err, kerr.InvalidTopicException) {
		t.Fatalf("create bad.name: %v", r.Err)
	}
	if r, _ := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("shred")}, "shredded"); !kerrIs(r.Err, kerr.InvalidConfig) {
		t.Fatalf("create with cleanup.policy=shred: %v", r.Err)
	}

	if cfgs := describedConfigs(t, adm, "events"); cfgs["retention.ms"] != "3600000" {
		t.Fatalf("retention.ms not in %+v", cfgs)
	}

	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	before := time.Now()
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 1, Value: []byte{byte('a' + i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 1, Value: []byte("d")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start, err := adm.ListStartOffsets(ctx, "events")
	end, err2 := adm.ListEndOffsets(ctx, "events")
	if err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	if o, _ := start.Lookup("events", 1); o.Offset != 0 {
		t.Fatalf("earliest %d", o.Offset)
	}
	if o, _ := end.Lookup("events", 1); o.Offset != 4 {
		t.Fatalf("latest %d", o.Offset)
	}
	if o, _ := end.Lookup("events", 0); o.Offset != 0 {
		t.Fatalf("latest of an empty partition %d", o.Offset)
	}
	byTime, err := adm.ListOffsetsAfterMilli(ctx, mid.UnixMilli(), "events")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := byTime.Lookup("events", 1); o.Offset != 3 {
		t.Fatalf("offset after %v: %d, want 3", mid.Sub(before), o.Offset)
	}

	if up, err := adm.ValidateUpdatePartitions(ctx, 7, "events"); err != nil || up["events"].Err != nil || st.Partitions() != 3 {
		t.Fatalf("create partitions, validate only: %v %+v; the stream has %d", err, up, st.Partitions())
	}
	up, err := adm.UpdatePartitions(ctx, 5, "events")
	if err != nil || up["events"].Err != nil {
		t.Fatalf("create partitions: %v %+v", err, up)
	}
	if st, err = s.Streams().Stream("events"); err != nil || st.Partitions() != 5 || time.Duration(st.Config().MaxAge) != time.Hour {
		t.Fatalf("stream after create partitions: %v, %+v", err, st)
	}
	cl.ForceMetadataRefresh() // as clients do every metadata.max.age.ms
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if leader, _, err := cl.PartitionLeader("events", 4); err == nil && leader >= 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 4, Value: []byte("e")}).FirstErr(); err != nil {
		t.Fatalf("produce to a new partition: %v", err)
	}
	end, err = adm.ListEndOffsets(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range []int64{0, 4, 0, 0, 1} {
		if o, _ := end.Lookup("events", int32(p)); o.Offset != want {
			t.Fatalf("after adding partitions: partition %d ends at %d, want %d", p, o.Offset, want)
		}
	}
	for _, bad := range []struct {
		count int
		says  string
	}{{5, "already has 5"}, {2, "not removed"}, {4096, "1024"}} {
		up, err := adm.UpdatePartitions(ctx, bad.count, "events")
		if err != nil || !kerrIs(up["events"].Err, kerr.InvalidPartitions) || !strings.Contains(up["events"].ErrMessage, bad.says) {
			t.Fatalf("create partitions to %d: %v %+v", bad.count, err, up)
		}
	}

	meta, err := adm.BrokerMetadata(ctx)
	if err != nil || len(meta.Brokers) != 1 || meta.Controller != 0 || meta.Brokers[0].Port == 0 {
		t.Fatalf("cluster: %+v %v", meta, err)
	}

	del, err := adm.DeleteTopics(ctx, "events")
	if err != nil || del["events"].Err != nil {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if _, err := s.Streams().Stream("events"); err == nil {
		t.Fatal("stream still there after DeleteTopics")
	}
}

// TestAutoCreateOff: with kafka_auto_create off, producing to an unknown topic
// fails with UNKNOWN_TOPIC_OR_PARTITION and creates nothing.
func TestAutoCreateOff(t *testing.T) {
	s, addr := startTern(t, func(c *server.Config) { c.KafkaAutoCreate = false })
	cl := newClient(t, addr, kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(2*time.Second))
	err := cl.ProduceSync(ctxT(t), &kgo.Record{Topic: "nope", Value: []byte("x")}).FirstErr()
	if err == nil {
		t.Fatal("produce to an unknown topic succeeded")
	}
	if _, serr := s.Streams().Stream("nope"); serr == nil {
		t.Fatalf("topic created with auto-create off (produce said %v)", err)
	}
}

// TestCreatePartitionsWhileProducing: an idempotent producer keeps producing
// while partitions are added, three times; every record is acknowledged once
// (a publish the stream missed while it reopened is retried by the client) and
// the topic holds each once.
func TestCreatePartitionsWhileProducing(t *testing.T) {
	s, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	const topic = "busy"
	createTopic(t, adm, topic, 1)
	cl := newClient(t, addr, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(200*time.Millisecond))
	const total = 30000
	var acked, failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			if i%100 == 0 {
				time.Sleep(5 * time.Millisecond) // production spans the changes
			}
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 97)), Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("record: %v", err)
					}
					return
				}
				acked.Add(1)
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Errorf("flush: %v", err)
		}
	}()
	for i, parts := range []int{2, 4, 7} {
		waitUntil(t, "records acknowledged before the change", 20*time.Second, func() bool { return acked.Load() >= int64(i+1)*5000 })
		if up, err := adm.UpdatePartitions(ctx, parts, topic); err != nil || up[topic].Err != nil {
			t.Fatalf("to %d partitions: %v %+v", parts, err, up)
		}
	}
	<-done
	if acked.Load() != total || failed.Load() != 0 {
		t.Fatalf("%d records acknowledged, %d failed, of %d", acked.Load(), failed.Load(), total)
	}
	st, err := s.Streams().Stream(topic)
	if err != nil {
		t.Fatal(err)
	}
	var held uint64
	for p := range st.Partitions() {
		ps, err := st.PartitionState(p)
		if err != nil {
			t.Fatal(err)
		}
		if ps.Msgs == 0 {
			t.Errorf("partition %d holds nothing", p)
		}
		held += ps.Msgs
	}
	if held != total {
		t.Fatalf("the topic holds %d records, want %d", held, total)
	}
}

// TestDescribeLogDirs: DescribeLogDirs (franz-go's admin client and Kafka's
// kafka-log-dirs tool) gives this node's streams directory, each partition's
// size — its segment files' bytes, growing as records are produced — and the
// volume's size and free bytes.
func TestDescribeLogDirs(t *testing.T) {
	s, addr := startTern(t, nil)
	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	ctx := ctxT(t)
	createTopic(t, adm, "sized", 2)
	createTopic(t, adm, "other", 1)
	var recs []*kgo.Record
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		v := make([]byte, 1000) // random bytes: the stream's S2 blocks cannot shrink them
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		recs = append(recs, &kgo.Record{Topic: "sized", Partition: 1, Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	all, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{"sized": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	dirs := all.Sorted()
	if len(dirs) != 1 || dirs[0].Err != nil || dirs[0].Dir != s.Streams().StreamsDir() || dirs[0].TotalBytes <= 0 || dirs[0].UsableBytes <= 0 {
		t.Fatalf("log dirs: %+v", dirs)
	}
	if _, ok := dirs[0].Topics["other"]; ok {
		t.Fatal("a topic not asked for is described")
	}
	p0, p1 := dirs[0].Topics["sized"][0], dirs[0].Topics["sized"][1]
	var files int64
	segs, _ := filepath.Glob(filepath.Join(s.Streams().StreamsDir(), "sized", "p1", "*.log"))
	for _, seg := range segs {
		if fi, err := os.Stat(seg); err == nil {
			files += fi.Size()
		}
	}
	if p0.Size != 0 || p1.Size != files || p1.Size < 50*1000 || p1.Size > 50*1200 {
		t.Fatalf("sizes: partition 0 %d, partition 1 %d, its files %d bytes (50 records of 1000 bytes)", p0.Size, p1.Size, files)
	}
	out, errOut, err := kafkaTool(t, 60*time.Second, "", "org.apache.kafka.tools.LogDirsCommand",
		"--bootstrap-server", addr, "--describe", "--topic-list", "sized")
	if err != nil {
		t.Fatalf("kafka-log-dirs: %v\n%s%s", err, out, errOut)
	}
	if want := fmt.Sprintf(`{"partition":"sized-1","size":%d,"offsetLag":0,"isFuture":false}`, p1.Size); !strings.Contains(out, want) {
		t.Fatalf("kafka-log-dirs lacks %s:\n%s", want, out)
	}
}

// TestConfigsTernKeepsAnyway: topic configs that describe what Tern does anyway
// are taken (min.insync.replicas up to a majority of the replicas,
// unclean.leader.election.enable=false, message.timestamp.type=CreateTime) and
// described, and so are segment.ms and segment.bytes (the server's when the
// topic has none); those that ask for something else are refused with
// INVALID_CONFIG.
func TestConfigsTernKeepsAnyway(t *testing.T) {
	_, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	ok := map[string]*string{"min.insync.replicas": kadm.StringPtr("1"), "unclean.leader.election.enable": kadm.StringPtr("false"),
		"message.timestamp.type": kadm.StringPtr("CreateTime"), "retention.ms": kadm.StringPtr("-1"), "segment.ms": kadm.StringPtr("600000")}
	if r, err := adm.CreateTopic(ctx, 1, 1, ok, "kept"); err != nil || r.Err != nil {
		t.Fatalf("create with configs Tern keeps: %v %v %s", err, r.Err, r.ErrMessage)
	}
	got := describedConfigs(t, adm, "kept")
	for k, v := range map[string]string{"min.insync.replicas": "1", "unclean.leader.election.enable": "false", "message.timestamp.type": "CreateTime", "retention.ms": "-1",
		"segment.ms": "600000", "segment.bytes": "67108864"} { // the server's segment_size
		if got[k] != v {
			t.Errorf("%s described as %q, want %q", k, got[k], v)
		}
	}
	for name, v := range map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "true",
		"message.timestamp.type": "LogAppendTime", "segment.ms": "0", "max.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "2"} {
		r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{name: kadm.StringPtr(v)}, "refused")
		if err == nil {
			err = r.Err
		}
		if !kerrIs(err, kerr.InvalidConfig) {
			t.Errorf("create with %s=%s: %v, want INVALID_CONFIG", name, v, err)
		}
	}
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr("2")}}, "kept")
	if err != nil || len(rs) != 1 || !kerrIs(rs[0].Err, kerr.InvalidConfig) {
		t.Fatalf("min.insync.replicas=2 on one replica: %v %+v", err, rs)
	}
}

// describedConfigs is a topic's configs as DescribeConfigs gives them, by name.
func describedConfigs(t *testing.T, adm *kadm.Client, topic string) map[string]string {
	t.Helper()
	rc, err := adm.DescribeTopicConfigs(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range r.Configs {
		out[c.Key] = c.MaybeValue()
	}
	return out
}
