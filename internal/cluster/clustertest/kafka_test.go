package clustertest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// TestKafkaOnReplicatedCluster: on three nodes with replication, every node serves
// the Kafka API and lists all three as brokers; a topic made through Kafka's admin
// API with replication factor 3 is a stream of 3 replicas whose partitions the
// stream's leader leads. franz-go's idempotent producer (acks=all) keeps producing
// while that leader is killed (-9): every record acknowledged before or after is
// read back exactly once, in its partition's order, by a consumer group (its
// coordinator one of the surviving nodes), whose committed offsets are then the
// partitions' ends. A produce request sent to a node that does not lead the
// partition is answered NOT_LEADER_OR_FOLLOWER, as Kafka answers it.
func TestKafkaOnReplicatedCluster(t *testing.T) {
	c, seeds := startKafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	const topic, parts = "orders", 3
	c.WaitFor("the topic made through the admin API", 30*time.Second, func() bool {
		r, err := adm.CreateTopic(ctx, parts, 3, nil, topic)
		if err != nil {
			t.Logf("create topic: %v", err)
		}
		return err == nil && (r.Err == nil || r.ErrMessage == "")
	})
	leader := waitPlaced(ctx, c, adm, topic, parts)

	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if b.NodeID == leader {
			continue
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, md.Topics[topic].ID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, oneRecordBatch("to a follower")
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := admin.Broker(int(b.NodeID)).Request(ctx, req)
		if err != nil {
			t.Fatalf("produce to follower %d: %v", b.NodeID, err)
		}
		got := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if got.ErrorCode != kerr.NotLeaderForPartition.Code {
			t.Fatalf("produce to follower %d: error %d base %d, want NOT_LEADER_OR_FOLLOWER", b.NodeID, got.ErrorCode, got.BaseOffset)
		}
	}

	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	const total = 600
	var (
		mu    sync.Mutex
		acked = map[string][2]int64{} // value → partition, offset
		wg    sync.WaitGroup
	)
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			wg.Add(1)
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%11), Value: fmt.Appendf(nil, "v%d", i)}
			producer.Produce(ctx, r, func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("record %s: %v", r.Value, err)
					return
				}
				mu.Lock()
				acked[string(r.Value)] = [2]int64{int64(r.Partition), r.Offset}
				mu.Unlock()
			})
		}
	}
	produce(0, total/3)
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	killed := killKafkaLeader(t, c, adm, topic, leader)
	produce(total/3, total)
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	mu.Lock()
	if len(acked) != total {
		t.Fatalf("%d of %d records acknowledged", len(acked), total)
	}
	mu.Unlock()

	var live []string
	for i, n := range c.Nodes {
		if n != killed {
			live = append(live, seeds[i])
		}
	}
	// Every surviving node lists the same two brokers (and so names the same
	// coordinator for the group) before the group forms: a coordinator that
	// moves rebalances the group, as in Kafka.
	for _, seed := range live {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
		if err != nil {
			t.Fatal(err)
		}
		c.WaitFor("two brokers in "+seed+"'s metadata", 20*time.Second, func() bool {
			md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
			return err == nil && len(md.Brokers) == 2
		})
		cl.Close()
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(live...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup("readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := map[string]int{}
	last := map[int32]int64{}
	for len(seen) < total && ctx.Err() == nil {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		fs := consumer.PollFetches(fctx)
		fcancel()
		fs.EachRecord(func(r *kgo.Record) {
			if prev, ok := last[r.Partition]; ok && r.Offset <= prev {
				t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			seen[string(r.Value)]++
			if at, ok := acked[string(r.Value)]; ok && at != [2]int64{int64(r.Partition), r.Offset} {
				t.Errorf("%s read at %d/%d, acknowledged at %v", r.Value, r.Partition, r.Offset, at)
			}
		})
	}
	for v := range acked {
		if seen[v] != 1 {
			t.Errorf("%s read %d times", v, seen[v])
		}
	}
	if len(seen) != total {
		t.Fatalf("read %d distinct records, want %d", len(seen), total)
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	c.WaitFor("the group's committed offsets at the partitions' ends", 20*time.Second, func() bool {
		offs, err := adm.FetchOffsets(ctx, "readers")
		if err != nil {
			return false
		}
		for p, end := range last {
			o, ok := offs.Lookup(topic, p)
			if !ok || o.Err != nil || o.At != end+1 {
				return false
			}
		}
		return true
	})
	t.Logf("%d records over %d partitions, leader %s killed after %d", total, parts, killed.Name, total/3)
}

// TestKafkaCreatePartitionsOnCluster: CreatePartitions sent to a node that does
// not lead the topic gives its stream a Raft group per new partition on the
// topic's 3 replicas; metadata then shows every partition led by the stream's
// leader, keyed records spread over all of them, and they read back once each.
func TestKafkaCreatePartitionsOnCluster(t *testing.T) {
	c, seeds := startKafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	const topic = "widening"
	c.WaitFor("the topic made", 30*time.Second, func() bool {
		r, err := adm.CreateTopic(ctx, 1, 3, nil, topic)
		return err == nil && (r.Err == nil || r.ErrMessage == "")
	})
	leader := waitPlaced(ctx, c, adm, topic, 1)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := int32(-1)
	for _, b := range md.Brokers {
		if b.NodeID != leader {
			follower = b.NodeID
			break
		}
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, 4
	req.Topics = append(req.Topics, rt)
	resp, err := admin.Broker(int(follower)).Request(ctx, req)
	if err != nil {
		t.Fatalf("create partitions through node %d: %v", follower, err)
	}
	if got := resp.(*kmsg.CreatePartitionsResponse).Topics[0]; got.ErrorCode != 0 {
		t.Fatalf("create partitions through node %d: error %d %v", follower, got.ErrorCode, got.ErrorMessage)
	}
	waitPlaced(ctx, c, adm, topic, 4)

	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	const total = 200
	var recs []*kgo.Record
	for i := range total {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	used := map[int32]int{}
	for _, r := range recs {
		used[r.Partition]++
	}
	if len(used) != 4 {
		t.Fatalf("%d keyed records went to partitions %v, want all 4", total, used)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := map[string]int{}
	for len(seen) < total && ctx.Err() == nil {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		fs := consumer.PollFetches(fctx)
		fcancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for _, r := range recs {
		if seen[string(r.Value)] != 1 {
			t.Fatalf("%s read %d times", r.Value, seen[string(r.Value)])
		}
	}
}

// waitPlaced waits until metadata shows the 3 brokers and topic with parts
// partitions, each on 3 replicas and led by one node, and returns that node.
func waitPlaced(ctx context.Context, c *clustertest.Cluster, adm *kadm.Client, topic string, parts int) int32 {
	var leader int32
	c.WaitFor(fmt.Sprintf("metadata: 3 brokers, %d partitions on 3 replicas with one leader", parts), 30*time.Second, func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil || len(md.Brokers) != 3 {
			return false
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) != parts {
			return false
		}
		leader = td.Partitions[0].Leader
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 || p.Leader != leader || len(p.Replicas) != 3 {
				return false
			}
		}
		return true
	})
	return leader
}

// startKafkaCluster starts 3 nodes with the Kafka API and returns them with
// their Kafka addresses, once the catalogue is on every node.
func startKafkaCluster(t *testing.T) (*clustertest.Cluster, []string) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{N: 3, Kafka: true, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	var seeds []string
	for _, n := range c.Nodes {
		seeds = append(seeds, net.JoinHostPort(n.Host, strconv.Itoa(n.KafkaPort)))
	}
	return c, seeds
}

// killKafkaLeader kills (-9) the node whose broker id leads the topic and waits
// until another node leads every partition.
func killKafkaLeader(t *testing.T, c *clustertest.Cluster, adm *kadm.Client, topic string, leader int32) *clustertest.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var killed *clustertest.Node
	for _, b := range md.Brokers {
		if b.NodeID != leader {
			continue
		}
		for _, n := range c.Nodes {
			if n.KafkaPort == int(b.Port) {
				killed = n
			}
		}
	}
	if killed == nil {
		t.Fatalf("no node is broker %d: %+v", leader, md.Brokers)
	}
	killed.Kill()
	return killed
}

// oneRecordBatch is a record batch of one record with value v, no producer id.
func oneRecordBatch(v string) []byte {
	r := kmsg.Record{Value: []byte(v)}
	body := r.AppendTo(nil)[1:] // after a zero Length
	recs := append(kbin.AppendVarint(nil, int32(len(body))), body...)
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: 1, Records: recs}
	b.Length = int32(49 + len(recs))
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// TestKafkaCompactedTopicOnCluster: a topic made with cleanup.policy=compact
// and replication factor 3 keeps each key's latest record on every replica:
// the leader proposes the compaction through the partition's Raft log, so the
// three nodes' files come to about the same size (DescribeLogDirs), and after
// the leader is killed the next one compacts what is superseded next.
func TestKafkaCompactedTopicOnCluster(t *testing.T) {
	c, seeds := startKafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	const topic = "profiles"
	configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("512"),
		"delete.retention.ms": kadm.StringPtr("1")}
	c.WaitFor("the topic made", 30*time.Second, func() bool {
		r, err := adm.CreateTopic(ctx, 1, 3, configs, topic)
		return err == nil && (r.Err == nil || r.ErrMessage == "")
	})
	leader := waitPlaced(ctx, c, adm, topic, 1)

	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(key, value string) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Key: []byte(key)}
		if value != "" {
			r.Value = []byte(value)
		}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s=%s: %v", key, value, err)
		}
	}
	for round := range 10 {
		for k := range 4 {
			produce(fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-v%d", k, round))
		}
	}
	produce("k3", "") // a tombstone
	for i := range 30 {
		produce("filler", fmt.Sprintf("f%d", i))
	}
	want := map[string]string{"k0": "k0-v9", "k1": "k1-v9", "k2": "k2-v9"}
	waitLatestOnly(ctx, c, seeds, topic, want, "filler")
	// Each replica's files (DescribeLogDirs) come to about the same size: the
	// same records are removed everywhere, and each replica rewrites its
	// segments itself, at its own moment, so that they may differ by what one
	// segment held when it was rewritten.
	var sizes []int64
	c.WaitFor("the replicas' files compacted alike", 30*time.Second, func() bool {
		dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			return false
		}
		sizes = sizes[:0]
		for _, byDir := range dirs {
			for _, d := range byDir {
				d.Topics.Each(func(p kadm.DescribedLogDirPartition) { sizes = append(sizes, p.Size) })
			}
		}
		return len(sizes) == 3 && slices.Max(sizes) <= 2048 && slices.Max(sizes)-slices.Min(sizes) <= 512
	})
	t.Logf("the replicas' files: %v bytes", sizes)

	killKafkaLeader(t, c, adm, topic, leader)
	produce("k0", "k0-new")
	for i := range 30 {
		produce("filler", fmt.Sprintf("g%d", i))
	}
	want["k0"] = "k0-new"
	waitLatestOnly(ctx, c, seeds, topic, want, "filler")
}

// waitLatestOnly reads topic's partition 0 from its start to its end until it
// holds, of each key of want, only the value want gives, nothing of any other
// key but ignore, and ignore's latest record last.
func waitLatestOnly(ctx context.Context, c *clustertest.Cluster, seeds []string, topic string, want map[string]string, ignore string) {
	c.WaitFor("only the latest record of each key", 30*time.Second, func() bool {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		defer cl.Close()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		end, _ := ends.Lookup(topic, 0)
		got := map[string][]string{}
		for off := int64(-1); off < end.Offset-1 && ctx.Err() == nil; {
			fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
			fs := cl.PollFetches(fctx)
			timedOut := fctx.Err() != nil
			fcancel()
			if timedOut {
				return false
			}
			fs.EachRecord(func(r *kgo.Record) {
				got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
				off = r.Offset
			})
		}
		for k, vs := range got {
			if k == ignore {
				continue
			}
			if len(vs) != 1 || vs[0] != want[k] {
				return false
			}
		}
		return len(got) == len(want)+1
	})
}
