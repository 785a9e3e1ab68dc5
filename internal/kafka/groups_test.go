package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/internal/server"
)

// fastGroups makes group tests quick: a short initial rebalance delay.
func fastGroups(c *server.Config) { c.KafkaGroupInitialDelay = 50 * time.Millisecond }

// createTopic makes a topic with n partitions through the admin API.
func createTopic(t *testing.T, adm *kadm.Client, topic string, n int32) {
	t.Helper()
	resp, err := adm.CreateTopics(ctxT(t), n, 1, nil, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// produceN produces n keyed records to topic, numbered from first.
func produceN(t *testing.T, cl *kgo.Client, topic string, first, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := first; i < first+n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// groupMember is a franz-go group consumer that commits what it processed before
// any rebalance can take its partitions (BlockRebalanceOnPoll), and so, leaving
// cleanly, never hands a record to another member twice.
type groupMember struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// seen counts deliveries per record value.
type seen struct {
	mu sync.Mutex
	n  map[string]int
	by map[string]map[int32]bool // member → partitions it consumed from
}

func (s *seen) total() (distinct, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.n {
		distinct++
		dups += c - 1
	}
	return
}

func startMember(t *testing.T, addr, topic, grp, name string, balancer kgo.GroupBalancer, rec *seen, opts ...kgo.Opt) *groupMember {
	t.Helper()
	cl := newClient(t, addr, append([]kgo.Opt{kgo.ConsumerGroup(grp), kgo.ConsumeTopics(topic), kgo.Balancers(balancer),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.HeartbeatInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond), kgo.ClientID(name),
		kgo.WithLogger(kgo.BasicLogger(testLog{t, name}, kgo.LogLevelInfo, nil))}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	m := &groupMember{cl: cl, cancel: cancel, done: make(chan struct{})}
	// A member the test left behind (it failed) stops before its client is closed:
	// polling a closed client returns at once, and the loop would spin.
	t.Cleanup(func() { cancel(); <-m.done })
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				rec.mu.Lock()
				rec.n[string(r.Value)]++
				if rec.by[name] == nil {
					rec.by[name] = map[int32]bool{}
				}
				rec.by[name][r.Partition] = true
				rec.mu.Unlock()
			})
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
				t.Logf("%s commit: %v", name, err)
			}
			cl.AllowRebalance()
		}
	}()
	return m
}

// testLog writes a member's client log into the test's, which shows it when the
// test fails: the group's joins, assignments and revocations, by member.
type testLog struct {
	t    *testing.T
	name string
}

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s: %s", l.name, bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// leave stops polling and leaves the group (LeaveGroup), after committing.
func (m *groupMember) leave() {
	m.cancel()
	<-m.done
	m.cl.AllowRebalance()
	m.cl.Close()
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !pollUntil(d, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// pollUntil checks cond every 20 ms until it holds (true) or d has passed (false).
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitRecords waits until the group consumed n distinct records and, if it does not,
// fails with where the group stands: each member's partitions, each partition's
// committed and end offsets.
func waitRecords(t *testing.T, adm *kadm.Client, grp, topic string, rec *seen, n int) {
	t.Helper()
	if pollUntil(30*time.Second, func() bool { d, _ := rec.total(); return d == n }) {
		return
	}
	var state strings.Builder
	if dg, err := adm.DescribeGroups(ctxT(t), grp); err != nil {
		fmt.Fprintf(&state, "describe: %v; ", err)
	} else {
		g := dg[grp]
		fmt.Fprintf(&state, "group %s:", g.State)
		for _, m := range g.Members {
			ca, _ := m.Assigned.AsConsumer()
			fmt.Fprintf(&state, " %s %v", m.ClientID, ca.Topics)
		}
	}
	offs, err := adm.FetchOffsets(ctxT(t), grp)
	ends, err2 := adm.ListEndOffsets(ctxT(t), topic)
	if err == nil && err2 == nil {
		ends.Each(func(e kadm.ListedOffset) {
			o, _ := offs.Lookup(topic, e.Partition)
			fmt.Fprintf(&state, "; p%d committed %d end %d", e.Partition, o.At, e.Offset)
		})
	}
	d, _ := rec.total()
	t.Fatalf("the group consumed %d distinct records, want %d; %s", d, n, state.String())
}

// TestFranzGroupRebalance: franz-go group consumers with each assignor (range,
// round-robin, cooperative-sticky) share a topic's partitions while members join
// and leave cleanly, and every record is consumed exactly once across the group;
// DescribeGroups shows the stable group with its three members' assignments.
func TestFranzGroupRebalance(t *testing.T) {
	balancers := map[string]kgo.GroupBalancer{"range": kgo.RangeBalancer(), "roundrobin": kgo.RoundRobinBalancer(),
		"cooperative-sticky": kgo.CooperativeStickyBalancer()}
	for name, bal := range balancers {
		t.Run(name, func(t *testing.T) {
			_, addr := startTern(t, fastGroups)
			prod := newClient(t, addr)
			adm := kadm.NewClient(prod)
			topic, grp := "reb-"+name, "g-"+name
			createTopic(t, adm, topic, 6)
			rec := &seen{n: map[string]int{}, by: map[string]map[int32]bool{}}
			produceN(t, prod, topic, 0, 300)
			a := startMember(t, addr, topic, grp, "a", bal, rec)
			waitUntil(t, "a's first records", 20*time.Second, func() bool { d, _ := rec.total(); return d > 0 })
			b := startMember(t, addr, topic, grp, "b", bal, rec)
			c := startMember(t, addr, topic, grp, "c", bal, rec)
			// Three members, each with partitions.
			waitUntil(t, "a stable group of three, each with partitions", 30*time.Second, func() bool {
				dg, err := adm.DescribeGroups(ctxT(t), grp)
				if err != nil {
					return false
				}
				g := dg[grp]
				if g.State != "Stable" || len(g.Members) != 3 {
					return false
				}
				for _, m := range g.Members {
					ca, ok := m.Assigned.AsConsumer()
					if !ok || len(ca.Topics) != 1 || len(ca.Topics[0].Partitions) != 2 {
						return false
					}
				}
				return true
			})
			produceN(t, prod, topic, 300, 300)
			waitRecords(t, adm, grp, topic, rec, 600)
			b.leave()
			produceN(t, prod, topic, 600, 300)
			waitRecords(t, adm, grp, topic, rec, 900)
			c.leave()
			produceN(t, prod, topic, 900, 300)
			waitRecords(t, adm, grp, topic, rec, 1200)
			a.leave()
			if d, dups := rec.total(); d != 1200 || dups != 0 {
				t.Fatalf("%d distinct records, %d duplicates; want 1200 and 0", d, dups)
			}
			rec.mu.Lock()
			for _, m := range []string{"a", "b", "c"} {
				if len(rec.by[m]) == 0 {
					t.Errorf("member %s consumed nothing", m)
				}
			}
			rec.mu.Unlock()
			// Everything is committed: the group's offsets are the partitions' ends.
			offs, err := adm.FetchOffsets(ctxT(t), grp)
			if err != nil {
				t.Fatal(err)
			}
			ends, err := adm.ListEndOffsets(ctxT(t), topic)
			if err != nil {
				t.Fatal(err)
			}
			ends.Each(func(e kadm.ListedOffset) {
				o, ok := offs.Lookup(topic, e.Partition)
				if !ok || o.At != e.Offset {
					t.Errorf("partition %d: committed %v, end %d", e.Partition, o.At, e.Offset)
				}
			})
		})
	}
}

// TestGroupTakesAddedPartitions: partitions added to a topic a group consumes
// (CreatePartitions) are found by the group's leader at its next metadata
// refresh; the group rebalances and its members read the new partitions from
// their start, so every record is consumed once, and the group's committed
// offsets reach every partition's end.
func TestGroupTakesAddedPartitions(t *testing.T) {
	_, addr := startTern(t, fastGroups)
	adm := kadm.NewClient(newClient(t, addr))
	const topic, grp = "growing", "g-growing"
	createTopic(t, adm, topic, 1)
	produceN(t, newClient(t, addr), topic, 0, 100)
	rec := &seen{n: map[string]int{}, by: map[string]map[int32]bool{}}
	fresh := []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond), kgo.MetadataMaxAge(500 * time.Millisecond)}
	a := startMember(t, addr, topic, grp, "a", kgo.CooperativeStickyBalancer(), rec, fresh...)
	b := startMember(t, addr, topic, grp, "b", kgo.CooperativeStickyBalancer(), rec, fresh...)
	waitRecords(t, adm, grp, topic, rec, 100)

	up, err := adm.UpdatePartitions(ctxT(t), 4, topic)
	if err != nil || up[topic].Err != nil {
		t.Fatalf("create partitions: %v %+v", err, up)
	}
	// A producer that has not seen the topic spreads its keys over all four.
	produceN(t, newClient(t, addr), topic, 100, 300)
	ends, err := adm.ListEndOffsets(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Offset == 0 {
			t.Errorf("partition %d got none of 300 keyed records", e.Partition)
		}
	})
	waitRecords(t, adm, grp, topic, rec, 400)
	a.leave()
	b.leave()
	if d, dups := rec.total(); d != 400 || dups != 0 {
		t.Fatalf("%d distinct records, %d duplicates; want 400 and 0", d, dups)
	}
	rec.mu.Lock()
	read := map[int32]bool{}
	for _, parts := range rec.by {
		for p := range parts {
			read[p] = true
		}
	}
	rec.mu.Unlock()
	if len(read) != 4 {
		t.Fatalf("the group read partitions %v, want all 4", read)
	}
	offs, err := adm.FetchOffsets(ctxT(t), grp)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		if o, ok := offs.Lookup(topic, e.Partition); !ok || o.At != e.Offset {
			t.Errorf("partition %d: committed %v, end %d", e.Partition, o.At, e.Offset)
		}
	})
}

// TestGroupOffsetsSurviveRestart: offsets a group committed are there after the
// server restarts on the same store, where a new member resumes from them; the
// group's offsets are the position of the durable consumer named after it, which
// the native API shows.
func TestGroupOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*server.Server, string) {
		return startTern(t, func(c *server.Config) { fastGroups(c); c.StoreDir = dir })
	}
	s, addr := start()
	prod := newClient(t, addr)
	createTopic(t, kadm.NewClient(prod), "durable", 2)
	produceN(t, prod, "durable", 0, 10)
	rec := &seen{n: map[string]int{}, by: map[string]map[int32]bool{}}
	m := startMember(t, addr, "durable", "keeper", "a", kgo.RangeBalancer(), rec)
	waitUntil(t, "10 records", 20*time.Second, func() bool { d, _ := rec.total(); return d == 10 })
	m.leave()
	offs, err := kadm.NewClient(prod).FetchOffsets(ctxT(t), "keeper")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) { want[o.Partition] = o.At })
	if want[0]+want[1] != 10 {
		t.Fatalf("committed %v, want 10 records' worth", want)
	}
	// The native view: consumer "keeper" of stream "durable".
	info, err := native(t, s).Streams().ConsumerInfo(ctxT(t), "durable", "keeper")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Partitions {
		if int64(p.AckFloor) != want[int32(p.Partition)] {
			t.Fatalf("native partition %d ack floor %d, Kafka offset %d", p.Partition, p.AckFloor, want[int32(p.Partition)])
		}
	}
	prod.Close()
	if err := s.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	_, addr = start()
	prod = newClient(t, addr)
	offs, err = kadm.NewClient(prod).FetchOffsets(ctxT(t), "keeper")
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At != want[o.Partition] {
			t.Errorf("partition %d: committed %d after the restart, was %d", o.Partition, o.At, want[o.Partition])
		}
	})
	produceN(t, prod, "durable", 10, 10)
	m = startMember(t, addr, "durable", "keeper", "b", kgo.RangeBalancer(), rec)
	waitUntil(t, "20 records", 20*time.Second, func() bool { d, _ := rec.total(); return d == 20 })
	m.leave()
	if d, dups := rec.total(); d != 20 || dups != 0 {
		t.Fatalf("%d distinct, %d duplicates after the restart; want 20 and 0", d, dups)
	}
}

// TestKadmGroups: ListGroups, DescribeGroups, FetchOffsets, CommitOffsets (a
// consumer assigning partitions itself) and DeleteGroups through franz-go's admin
// client.
func TestKadmGroups(t *testing.T) {
	_, addr := startTern(t, fastGroups)
	prod := newClient(t, addr)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "adm", 3)
	produceN(t, prod, "adm", 0, 30)
	rec := &seen{n: map[string]int{}, by: map[string]map[int32]bool{}}
	m := startMember(t, addr, "adm", "live", "a", kgo.RoundRobinBalancer(), rec)
	waitUntil(t, "30 records", 20*time.Second, func() bool { d, _ := rec.total(); return d == 30 })

	// A group with offsets only, committed by a consumer outside any group.
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "adm", Partition: 1, At: 4, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctxT(t), "manual.group", os); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
	if f, err := adm.FetchOffsets(ctxT(t), "manual.group"); err != nil {
		t.Fatal(err)
	} else if o, _ := f.Lookup("adm", 1); o.At != 4 {
		t.Fatalf("fetched %+v, want 4", o)
	}

	listed, err := adm.ListGroups(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := listed["live"]; !ok || g.State != "Stable" || g.ProtocolType != "consumer" {
		t.Fatalf("listed %+v", listed)
	}
	if g, ok := listed["manual.group"]; !ok || g.State != "Empty" {
		t.Fatalf("listed %+v", listed)
	}
	dg, err := adm.DescribeGroups(ctxT(t), "live", "manual.group", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if g := dg["live"]; g.State != "Stable" || g.Protocol != "roundrobin" || len(g.Members) != 1 || g.Members[0].ClientID != "a" {
		t.Fatalf("live: %+v", g)
	}
	if g := dg["manual.group"]; g.State != "Empty" {
		t.Fatalf("manual.group: %+v", g)
	}
	if g := dg["nobody"]; g.State != "Dead" {
		t.Fatalf("nobody: %+v", g)
	}

	// A group with members cannot be deleted; once they left, it can, offsets
	// and all.
	del, err := adm.DeleteGroups(ctxT(t), "live", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if del["live"].Err == nil || del["nobody"].Err == nil {
		t.Fatalf("delete while live: %+v", del)
	}
	m.leave()
	waitUntil(t, "the group empty", 10*time.Second, func() bool {
		dg, err := adm.DescribeGroups(ctxT(t), "live")
		return err == nil && dg["live"].State == "Empty"
	})
	del, err = adm.DeleteGroups(ctxT(t), "live", "manual.group")
	if err != nil || del["live"].Err != nil || del["manual.group"].Err != nil {
		t.Fatalf("delete: %v %+v", err, del)
	}
	f, err := adm.FetchOffsets(ctxT(t), "live")
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 0 {
		t.Fatalf("offsets after the delete: %v", f)
	}
	listed, _ = adm.ListGroups(ctxT(t))
	if len(listed) != 0 {
		t.Fatalf("groups after the deletes: %v", listed)
	}
}

// TestOffsetDelete: OffsetDelete of every partition of a topic removes the
// group's offsets there (OffsetFetch: none), of some partitions takes those back
// to the partition's start, of a topic a member of the group subscribes to is
// refused with GROUP_SUBSCRIBED_TO_TOPIC, and of a group that has neither
// offsets nor members gets GROUP_ID_NOT_FOUND.
func TestOffsetDelete(t *testing.T) {
	_, addr := startTern(t, fastGroups)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxT(t)
	createTopic(t, adm, "od-a", 3)
	createTopic(t, adm, "od-b", 2)
	produceN(t, newClient(t, addr, kgo.RecordPartitioner(kgo.RoundRobinPartitioner())), "od-a", 0, 30)
	produceN(t, newClient(t, addr, kgo.RecordPartitioner(kgo.RoundRobinPartitioner())), "od-b", 0, 20)
	commit := func(grp string, topic string, parts int32, at int64) {
		t.Helper()
		var os kadm.Offsets
		for p := range parts {
			os.AddOffset(topic, p, at, -1)
		}
		r, err := adm.CommitOffsets(ctx, grp, os)
		if err == nil {
			err = r.Error()
		}
		if err != nil {
			t.Fatalf("commit %s %s: %v", grp, topic, err)
		}
	}
	commit("g", "od-a", 3, 5)
	commit("g", "od-b", 2, 4)

	del, err := adm.DeleteOffsets(ctx, "g", kadm.TopicsSet{"od-a": {0: {}, 1: {}, 2: {}}})
	if err != nil || del.Error() != nil {
		t.Fatalf("delete od-a's offsets: %v %v", err, del.Error())
	}
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := offs.Lookup("od-a", 0); ok {
		t.Fatalf("offsets of od-a after deleting them all: %+v", offs)
	}
	if o, ok := offs.Lookup("od-b", 1); !ok || o.At != 4 {
		t.Fatalf("od-b's offsets after deleting od-a's: %+v", o)
	}

	del, err = adm.DeleteOffsets(ctx, "g", kadm.TopicsSet{"od-b": {1: {}}})
	if err != nil || del.Error() != nil {
		t.Fatalf("delete od-b/1's offset: %v %v", err, del.Error())
	}
	offs, err = adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("od-b", 0); o.At != 4 {
		t.Fatalf("od-b/0 after deleting od-b/1's offset: %+v", o)
	}
	if o, _ := offs.Lookup("od-b", 1); o.At != 0 {
		t.Fatalf("od-b/1 after deleting its offset: %+v, want the partition's start (0)", o)
	}

	// A member subscribed to od-b: its offsets stay.
	rec := &seen{n: map[string]int{}, by: map[string]map[int32]bool{}}
	m := startMember(t, addr, "od-b", "g", "m", kgo.RangeBalancer(), rec)
	waitUntil(t, "the member's records", 20*time.Second, func() bool { d, _ := rec.total(); return d > 0 })
	del, err = adm.DeleteOffsets(ctx, "g", kadm.TopicsSet{"od-b": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := del.Lookup("od-b", 0); !kerrIs(e, kerr.GroupSubscribedToTopic) {
		t.Fatalf("delete offsets of a subscribed topic: %v, want GROUP_SUBSCRIBED_TO_TOPIC", e)
	}
	m.leave()

	if _, err := adm.DeleteOffsets(ctx, "nobody", kadm.TopicsSet{"od-a": {0: {}}}); !kerrIs(err, kerr.GroupIDNotFound) {
		t.Fatalf("delete offsets of an unknown group: %v, want GROUP_ID_NOT_FOUND", err)
	}
}
