package kafka_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/server"
)

// TestTopicCompressionType: compression.type maps onto the compression of a
// topic's stream. Topics made through Kafka compress by default (producer);
// uncompressed turns it off; Kafka's codec names all mean compressed; anything
// else is refused. AlterConfigs and IncrementalAlterConfigs switch it, and
// records round-trip whatever it is.
func TestTopicCompressionType(t *testing.T) {
	s, addr := startTern(t, nil)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)

	streamCompression := func(topic string) string {
		t.Helper()
		st, err := s.Streams().Stream(topic)
		if err != nil {
			t.Fatalf("stream of %s: %v", topic, err)
		}
		return st.Config().Compression
	}
	// described is the topic's compression.type as DescribeConfigs gives it,
	// and whether it is reported at its default.
	described := func(topic string) (string, bool) {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("describe %s: %v %v", topic, err, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "compression.type" {
				return c.MaybeValue(), c.Source == kmsg.ConfigSourceDefaultConfig
			}
		}
		t.Fatalf("%s: no compression.type in %+v", topic, rc.Configs)
		return "", false
	}
	want := func(topic, stream, typ string, def bool) {
		t.Helper()
		if got := streamCompression(topic); got != stream {
			t.Errorf("%s: stream compression %q, want %q", topic, got, stream)
		}
		if got, isDef := described(topic); got != typ || isDef != def {
			t.Errorf("%s: compression.type %q (default %v), want %q (default %v)", topic, got, isDef, typ, def)
		}
	}
	// create returns the topic's error (kadm gives the same as its own).
	create := func(topic string, configs map[string]*string) kadm.CreateTopicResponse {
		t.Helper()
		r, _ := adm.CreateTopic(ctx, 2, -1, configs, topic)
		return r
	}

	if r := create("zipped", nil); r.Err != nil {
		t.Fatalf("create zipped: %v", r.Err)
	}
	want("zipped", "s2", "producer", true)
	if r := create("plain", map[string]*string{"compression.type": kadm.StringPtr("uncompressed")}); r.Err != nil {
		t.Fatalf("create plain: %v", r.Err)
	}
	if got := streamCompression("plain"); got != "" && got != "none" {
		t.Fatalf("plain: stream compression %q, want none", got)
	}
	if got, def := described("plain"); got != "uncompressed" || def {
		t.Fatalf("plain: compression.type %q (default %v), want uncompressed, not the default", got, def)
	}
	for _, codec := range []string{"producer", "snappy", "lz4", "zstd", "gzip"} {
		topic := "codec-" + codec
		if r := create(topic, map[string]*string{"compression.type": kadm.StringPtr(codec)}); r.Err != nil {
			t.Fatalf("create with compression.type=%s: %v", codec, r.Err)
		}
		want(topic, "s2", "producer", true)
	}
	r := create("bogus", map[string]*string{"compression.type": kadm.StringPtr("bogus")})
	if !kerrIs(r.Err, kerr.InvalidConfig) || !strings.Contains(r.ErrMessage, "compression.type") {
		t.Fatalf("create with compression.type=bogus: %v %s, want INVALID_CONFIG naming the config", r.Err, r.ErrMessage)
	}
	if _, err := s.Streams().Stream("bogus"); err == nil {
		t.Fatal("a topic refused for its compression.type was made")
	}

	alter := func(incremental bool, topic string, cs ...kadm.AlterConfig) error {
		t.Helper()
		var rs kadm.AlterConfigsResponses
		var err error
		if incremental {
			rs, err = adm.AlterTopicConfigs(ctx, cs, topic)
		} else {
			rs, err = adm.AlterTopicConfigsState(ctx, cs, topic)
		}
		if err != nil || len(rs) != 1 {
			t.Fatalf("alter %s %+v: %v %+v", topic, cs, err, rs)
		}
		return rs[0].Err
	}
	set := func(name, v string) kadm.AlterConfig { return kadm.AlterConfig{Name: name, Value: kadm.StringPtr(v)} }
	mustAlter := func(incremental bool, topic string, cs ...kadm.AlterConfig) {
		t.Helper()
		if err := alter(incremental, topic, cs...); err != nil {
			t.Fatalf("alter %s %+v: %v", topic, cs, err)
		}
	}

	// Incremental: SET switches it, other changes keep it, DELETE restores
	// the default.
	mustAlter(true, "zipped", set("compression.type", "uncompressed"))
	want("zipped", "none", "uncompressed", false)
	mustAlter(true, "zipped", set("retention.ms", "60000"))
	want("zipped", "none", "uncompressed", false)
	mustAlter(true, "zipped", kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "compression.type"})
	want("zipped", "s2", "producer", true)
	if err := alter(true, "zipped", set("compression.type", "bogus")); !kerrIs(err, kerr.InvalidConfig) {
		t.Fatalf("incremental compression.type=bogus: %v, want INVALID_CONFIG", err)
	}
	want("zipped", "s2", "producer", true)

	// Whole replacement: what is named is set, what is not goes back to its
	// default (producer, compressed).
	mustAlter(false, "plain", set("compression.type", "zstd"))
	want("plain", "s2", "producer", true)
	mustAlter(false, "plain", set("compression.type", "uncompressed"), set("retention.ms", "60000"))
	want("plain", "none", "uncompressed", false)
	mustAlter(false, "plain", set("retention.ms", "60000"))
	want("plain", "s2", "producer", true)
	if err := alter(false, "plain", set("compression.type", "brotli")); !kerrIs(err, kerr.InvalidConfig) {
		t.Fatalf("compression.type=brotli: %v, want INVALID_CONFIG", err)
	}

	// Records round-trip through a topic whatever its compression, before and
	// after a switch.
	cl := newClient(t, addr, kgo.ProducerBatchCompression(kgo.SnappyCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			r := &kgo.Record{Topic: "zipped", Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d %0100d", i, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 20)
	mustAlter(true, "zipped", set("compression.type", "uncompressed"))
	produce(20, 40)
	got := consume(t, addr, "zipped", 40)
	seen := map[string]bool{}
	for _, r := range got {
		var i int
		if _, err := fmt.Sscanf(string(r.Key), "k%d", &i); err != nil || string(r.Value) != fmt.Sprintf("value %d %0100d", i, i) || r.Partition != int32(i%2) {
			t.Fatalf("record %q=%q in partition %d", r.Key, r.Value, r.Partition)
		}
		seen[string(r.Key)] = true
	}
	if len(seen) != 40 {
		t.Fatalf("%d distinct records of 40", len(seen))
	}
}

// TestAutoCreatedTopicCompresses: a topic made on first produce compresses,
// as one made by CreateTopics without compression.type does.
func TestAutoCreatedTopicCompresses(t *testing.T) {
	s, addr := startTern(t, func(c *server.Config) { c.KafkaAutoCreate = true })
	cl := newClient(t, addr, kgo.AllowAutoTopicCreation())
	ctx := ctxT(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Streams().Stream("auto")
	if err != nil || st.Config().Compression != "s2" {
		t.Fatalf("auto-created stream: %v, compression %q", err, st.Config().Compression)
	}
	if got := consume(t, addr, "auto", 1); string(got[0].Value) != "first" {
		t.Fatalf("read back %q", got[0].Value)
	}
}

// TestServerUncompressedTopics: with kafka_compression = uncompressed, topics
// made by CreateTopics or on first produce store messages as they are, report
// compression.type uncompressed as their default, and can still ask for
// compression.
func TestServerUncompressedTopics(t *testing.T) {
	s, addr := startTern(t, func(c *server.Config) { c.KafkaAutoCreate, c.KafkaCompression = true, "uncompressed" })
	cl := newClient(t, addr, kgo.AllowAutoTopicCreation())
	adm := kadm.NewClient(cl)
	ctx := ctxT(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, "made"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"compression.type": kadm.StringPtr("lz4")}, "zipped"); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{"auto": "none", "made": "none", "zipped": "s2"} {
		st, err := s.Streams().Stream(topic)
		if err != nil || st.Config().Compression != want {
			t.Fatalf("%s: %v, compression %q, want %q", topic, err, st.Config().Compression, want)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "made", "zipped")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "compression.type" {
				continue
			}
			def := c.Source == kmsg.ConfigSourceDefaultConfig
			if rc.Name == "made" && (c.MaybeValue() != "uncompressed" || !def) || rc.Name == "zipped" && (c.MaybeValue() != "producer" || def) {
				t.Fatalf("%s: compression.type %q, default %v", rc.Name, c.MaybeValue(), def)
			}
		}
	}
}
