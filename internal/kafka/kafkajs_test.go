package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkajsResult is what testdata/js/kafkajs.js prints: kafkajs's answers.
type kafkajsResult struct {
	Created         bool `json:"created"`
	CreatedAgain    bool `json:"createdAgain"`
	AdminPartitions []struct {
		Partition int `json:"partition"`
		Leader    int `json:"leader"`
	} `json:"adminPartitions"`
	Produced map[string][]struct {
		Topic      string `json:"topic"`
		Partition  int    `json:"partition"`
		BaseOffset int64  `json:"baseOffset"`
		ErrorCode  int    `json:"errorCode"`
	} `json:"produced"`
	Offsets map[string][]struct {
		Partition int   `json:"partition"`
		Low       int64 `json:"low"`
		High      int64 `json:"high"`
	} `json:"offsets"`
	Topics []string `json:"topics"`
}

// TestKafkajs runs testdata/js/kafkajs.js: kafkajs (npm; scripts/deps.sh installs it
// into testdata/js/node_modules) creates topics with its admin client (one of 3
// partitions with a retention, which the stream gets), deletes one, produces 50
// keyed records with headers and timestamps to each of three topics — with no
// compression and with gzip (the codecs kafkajs has built in), acks=all, and with
// an idempotent producer — and reads offsets and the topic list. The test checks
// kafkajs's answers, the streams, and reads every record back with franz-go: kafkajs
// has no consumer outside a consumer group.
func TestKafkajs(t *testing.T) {
	s, addr := startTern(t, nil)
	dir, err := filepath.Abs(filepath.Join("testdata", "js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err != nil {
		t.Fatalf("kafkajs not installed in %s (scripts/deps.sh installs it): %v", dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not installed (scripts/deps.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "kafkajs.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BROKER="+addr, "KAFKAJS_NO_PARTITIONER_WARNING=1")
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("node kafkajs.js: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	var res kafkajsResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("kafkajs.js printed %q: %v\nstderr: %s", out.String(), err, errOut.String())
	}
	t.Logf("kafkajs: %s", out.String())

	// Admin: created, and "already there" the second time; 3 partitions led by this node.
	if !res.Created || res.CreatedAgain {
		t.Fatalf("createTopics answered %v, then %v: want true, then false", res.Created, res.CreatedAgain)
	}
	if len(res.AdminPartitions) != 3 {
		t.Fatalf("js-admin's metadata: %+v", res.AdminPartitions)
	}
	for i, p := range res.AdminPartitions {
		if p.Partition != i || p.Leader != 0 {
			t.Fatalf("js-admin's metadata: %+v", res.AdminPartitions)
		}
	}
	st, err := s.Streams().Stream("js-admin")
	if err != nil || st.Partitions() != 3 || time.Duration(st.Config().MaxAge) != time.Hour {
		t.Fatalf("stream js-admin: %v %+v", err, st)
	}
	if _, err := s.Streams().Stream("js-scratch"); err == nil {
		t.Fatal("stream js-scratch still there after deleteTopics")
	}
	for _, want := range []string{"js-admin", "js-gzip", "js-idempotent", "js-none"} {
		if !slices.Contains(res.Topics, want) {
			t.Fatalf("listTopics: %q, without %s", res.Topics, want)
		}
	}
	if slices.Contains(res.Topics, "js-scratch") {
		t.Fatalf("listTopics: %q, with js-scratch after deleteTopics", res.Topics)
	}

	// Produce: the base offsets of each send, and the partitions' offsets after.
	const n = 50
	wantBase := map[string][]int64{"js-none": {0, n / 2}, "js-gzip": {0, n / 2}, "js-idempotent": {0}}
	for topic, bases := range wantBase {
		got := res.Produced[topic]
		if len(got) != len(bases) {
			t.Fatalf("%s: send answered %+v", topic, got)
		}
		for i, r := range got {
			if r.Topic != topic || r.Partition != 0 || r.ErrorCode != 0 || r.BaseOffset != bases[i] {
				t.Fatalf("%s: send answered %+v, want base offsets %v", topic, got, bases)
			}
		}
		if o := res.Offsets[topic]; len(o) != 1 || o[0].Low != 0 || o[0].High != n {
			t.Fatalf("%s: fetchTopicOffsets %+v, want 0 to %d", topic, o, n)
		}
	}
	if o := res.Offsets["js-admin"]; len(o) != 3 || o[0].High != 0 || o[1].High != 0 || o[2].High != 0 {
		t.Fatalf("js-admin: fetchTopicOffsets %+v, want 3 empty partitions", o)
	}

	// The idempotent producer's records carry its message ids (sequences 0 to n-1),
	// the others' none.
	nc := native(t, s)
	for topic := range wantBase {
		m, err := nc.Streams().GetMsg(ctxT(t), topic, 0, n)
		if err != nil {
			t.Fatalf("%s: last message: %v", topic, err)
		}
		idem := regexp.MustCompile(fmt.Sprintf(`Tern-Msg-Id.kafka:\d+:0:0#%d(\D|$)`, n-1)).Match(m.Header)
		if idem != (topic == "js-idempotent") || (topic != "js-idempotent" && bytes.Contains(m.Header, []byte("Tern-Msg-Id"))) {
			t.Fatalf("%s: last message's headers %q", topic, m.Header)
		}
	}

	// Every record, read back by franz-go: key, value, headers and timestamp.
	for topic := range wantBase {
		got := consume(t, addr, topic, n)
		if len(got) != n {
			t.Fatalf("%s: read %d records, want %d", topic, len(got), n)
		}
		for i, r := range got {
			wantHeaders := []kgo.RecordHeader{{Key: "seq", Value: fmt.Appendf(nil, "%d", i)}, {Key: "origin", Value: []byte("kafkajs")}}
			if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("key-%d", i%5) ||
				string(r.Value) != fmt.Sprintf("%s record %d: compressible compressible compressible", topic, i) ||
				r.Timestamp.UnixMilli() != 1700000000000+int64(i) ||
				!slices.EqualFunc(r.Headers, wantHeaders, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
				t.Fatalf("%s: record %d: offset %d key %q value %q timestamp %d headers %v", topic, i, r.Offset, r.Key, r.Value,
					r.Timestamp.UnixMilli(), r.Headers)
			}
		}
	}
}
