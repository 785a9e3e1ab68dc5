package clustertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// infoOf asks for a stream's info, giving up after 2 s: a request made while the
// stream's leadership moves may be lost, and a poll asks again.
func infoOf(js *tern.Streams, name string) (*tern.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return js.StreamInfo(ctx, name)
}

// streamLeader is the leader of a stream's group as its info shows it, "" while
// the stream cannot be described or has no leader.
func streamLeader(js *tern.Streams, name string) string {
	info, err := infoOf(js, name)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// takeAcked fetches from pull until want messages are acknowledged (AckSync
// confirmed), calling note for each, or fails after 40 s. A message whose ack
// is not confirmed may come again, and is counted then.
func takeAcked(t *testing.T, ctx context.Context, pull *tern.Pull, want int, note func(*tern.Msg)) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for got := 0; got < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages in 40 s", got, want)
		}
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		msgs, _ := pull.Fetch(fctx, min(want-got, 25))
		fcancel()
		for _, m := range msgs {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			err := m.AckSync(actx)
			acancel()
			if err != nil {
				continue
			}
			note(m)
			got++
		}
	}
}

// TestReplicatedStreamSurvivesLeaderKill: a stream of 3 replicas created through
// one node is served by every node; messages published with ids through a node
// that is not its leader are acknowledged once a quorum has them; kill -9 of the
// leader loses none of them, the retries of the publishes that were in flight create
// no duplicate, and the killed node, restarted, catches up. Under both the default
// sync policy and sync = always, where a leader sends its appends before its own
// fsync ends.
func TestReplicatedStreamSurvivesLeaderKill(t *testing.T) {
	for _, sync := range []string{"interval", "always"} {
		t.Run(sync, func(t *testing.T) { replicatedStreamSurvivesLeaderKill(t, sync) })
	}
}

func replicatedStreamSurvivesLeaderKill(t *testing.T, sync string) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3", "--sync", sync} }})
	waitCatalogue(c)

	admin := c.Nodes[0].Connect(t, c.Nodes[0].URL())
	ajs := admin.Streams()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	info, err := ajs.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("creating a stream of 3 replicas: %v", err)
	}
	// The create is answered once the group's leader describes every replica.
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 3 || info.Cluster.Term == 0 {
		t.Fatalf("created stream info %+v (cluster %+v), want 3 replicas and a term", info.Config, info.Cluster)
	}
	leader := info.Cluster.Leader
	t.Logf("stream ORDERS led by %s", leader)

	// Every node answers for the stream, whichever it is connected to, and its
	// metrics say whether it leads the stream's group.
	for _, n := range c.Nodes {
		js := n.Connect(t, n.URL()).Streams()
		c.WaitFor("the stream described through "+n.Name, 5*time.Second, func() bool { return streamLeader(js, "ORDERS") == leader })
		metrics, err := n.Get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		want := `tern_stream_raft_leader{stream="ORDERS"} 0`
		if n.Name == leader {
			want = `tern_stream_raft_leader{stream="ORDERS"} 1`
			for _, r := range c.Nodes {
				if line := fmt.Sprintf(`tern_stream_replica_active{replica=%q,stream="ORDERS"} 1`, r.Name); !strings.Contains(metrics, line) {
					t.Errorf("the leader's metrics lack %s", line)
				}
			}
		}
		if !strings.Contains(metrics, want) {
			t.Errorf("%s's metrics lack %s", n.Name, want)
		}
	}

	var pubNode *clustertest.Node
	for _, n := range c.Nodes {
		if n.Name != leader {
			pubNode = n
			break
		}
	}
	pub := pubNode.Connect(t, pubNode.URL(), tern.MaxReconnects(-1))
	// The client's own retries carry each publish across the election (a publish
	// forwarded to the dying leader is sent again after PublishAckWait; while no
	// node leads the stream, no responders): the caller sees no error at all.
	pjs := pub.Streams(tern.PublishRetryFor(10 * time.Second))
	const total = 600
	acked := map[uint64]string{} // sequence → message id
	publish := func(i int) {
		id := fmt.Sprintf("m-%d", i)
		pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
		ack, err := pjs.Publish(pctx, fmt.Sprintf("orders.%d", i%7), []byte(id), tern.MsgID(id))
		pcancel()
		if err != nil {
			t.Fatalf("publishing %s: the client's retries returned an error: %v", id, err)
		}
		if prev, ok := acked[ack.Seq]; ok && prev != id {
			t.Fatalf("sequence %d acknowledged for %s and %s", ack.Seq, prev, id)
		}
		acked[ack.Seq] = id
	}
	for i := range total / 2 {
		publish(i)
	}
	killed := nodeNamed(c, leader)
	killed.Kill()
	killedAt := time.Now()
	publish(total / 2)
	t.Logf("the first acknowledgement after the kill came %v after it", time.Since(killedAt).Round(time.Millisecond))
	for i := total/2 + 1; i < total; i++ {
		publish(i)
	}
	if len(acked) != total {
		t.Fatalf("%d distinct sequences acknowledged for %d messages: a retry was stored twice", len(acked), total)
	}

	var newLeader string
	c.WaitFor("a new stream leader", 10*time.Second, func() bool {
		newLeader = streamLeader(pjs, "ORDERS")
		return newLeader != "" && newLeader != leader
	})
	info, err = pjs.StreamInfo(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total || info.State.LastSeq != total {
		t.Fatalf("after the leader's kill the stream has %d messages up to %d, want %d", info.State.Msgs, info.State.LastSeq, total)
	}
	for seq := uint64(1); seq <= total; seq++ {
		m, err := pjs.GetMsg(ctx, "ORDERS", 0, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if string(m.Data) != acked[seq] {
			t.Fatalf("message %d is %q, acknowledged as %q", seq, m.Data, acked[seq])
		}
	}

	// A purge goes through the group: every replica removes the same messages.
	n, err := pjs.PurgeStream(ctx, "ORDERS", &tern.PurgeRequest{UpTo: 101})
	if err != nil || n != 100 {
		t.Fatalf("purging below 101: %d messages, %v; want 100", n, err)
	}
	info, err = pjs.StreamInfo(ctx, "ORDERS")
	if err != nil || info.State.Msgs != total-100 || info.State.FirstSeq != 101 {
		t.Fatalf("after the purge: %+v %v", info, err)
	}

	// The killed node restarts from its disk and catches up with the group.
	killed.Restart(t)
	c.WaitFor("the restarted replica caught up", 20*time.Second, func() bool {
		info, err := infoOf(pjs, "ORDERS")
		if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 3 {
			return false
		}
		return !slices.ContainsFunc(info.Cluster.Replicas, func(r tern.StreamReplica) bool { return !r.Active || r.Lag > 0 })
	})

	// Deleting the stream through any node removes it from every node.
	if err := pjs.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		js := n.Connect(t, n.URL()).Streams()
		c.WaitFor("the stream gone on "+n.Name, 5*time.Second, func() bool {
			_, err := infoOf(js, "ORDERS")
			var ae *tern.APIError
			return errors.As(err, &ae) && ae.Code == 10059
		})
	}
}

// storedRecords lists a stopped node's records of a one-partition stream as
// "seq subject payload time".
func storedRecords(t *testing.T, n *clustertest.Node, name string) []string {
	t.Helper()
	return storedPartRecords(t, n, name, 0)
}

// storedPartRecords is storedRecords of partition part.
func storedPartRecords(t *testing.T, n *clustertest.Node, name string, part int) []string {
	t.Helper()
	l, _, err := store.Open(store.Config{Dir: filepath.Join(n.Dir(), "streams", name, fmt.Sprint("p", part)), Name: name, Sync: store.SyncNever})
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	defer l.Close()
	var out []string
	r := l.NewReader(1)
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		out = append(out, fmt.Sprintf("%d %s %s %d", rec.Seq, rec.Subject, rec.Payload, rec.Time))
	}
}

// replicasCurrent reports whether the leader of stream name sees all three replicas
// of every partition with nothing to catch up, and, with active, each heard from
// lately.
func replicasCurrent(js *tern.Streams, name string, active bool) func() bool {
	current := func(c tern.StreamCluster) bool {
		return len(c.Replicas) == 3 &&
			!slices.ContainsFunc(c.Replicas, func(r tern.StreamReplica) bool { return (active && !r.Active) || r.Lag > 0 })
	}
	return func() bool {
		info, err := infoOf(js, name)
		return err == nil && info.Cluster != nil && current(*info.Cluster) &&
			!slices.ContainsFunc(info.Cluster.Partitions, func(c tern.StreamCluster) bool { return !current(c) })
	}
}

// sameRecordsEverywhere stops every node and checks that each holds the leader's
// records of stream name, total of them (0: any number), and returns them.
func sameRecordsEverywhere(t *testing.T, c *clustertest.Cluster, leader *clustertest.Node, name string, total int) []string {
	t.Helper()
	for _, n := range c.Nodes {
		n.Terminate()
	}
	want := storedRecords(t, leader, name)
	if total > 0 && len(want) != total {
		t.Fatalf("the leader holds %d records, want %d", len(want), total)
	}
	for _, n := range c.Nodes {
		if got := storedRecords(t, n, name); !slices.Equal(got, want) {
			t.Fatalf("%s holds %d records, the leader %d; first difference at %d", n.Name, len(got), len(want), firstDiff(got, want))
		}
	}
	return want
}

// TestReplicatedStreamCatchUpBySnapshot: a replica that was down while its group
// snapshotted and compacted its Raft log past it catches up, once restarted, from
// the snapshot and the leader's stream log, and ends with the same records as the
// others under the same sequences.
func TestReplicatedStreamCatchUpBySnapshot(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string {
		return []string{"--cluster-size", "3", "--raft-snapshot-entries", "20"}
	}})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Nodes[0].Connect(t, c.Nodes[0].URL()).Streams().AddStream(ctx,
		tern.StreamConfig{Name: "LOG", Subjects: []string{"log.>"}, Replicas: 3, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	leader := nodeNamed(c, info.Cluster.Leader)
	var away *clustertest.Node
	for _, n := range c.Nodes {
		if n != leader {
			away = n
			break
		}
	}
	away.Kill()
	js := leader.Connect(t, leader.URL()).Streams()
	const total = 400
	for i := range total {
		if _, err := js.Publish(ctx, fmt.Sprintf("log.%d", i%5), fmt.Appendf(nil, "m-%d", i), tern.ToPartition(i%2)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	away.Restart(t)
	c.WaitFor("the restarted replica caught up", 20*time.Second, replicasCurrent(js, "LOG", true))
	for part := range 2 {
		if !regexp.MustCompile(fmt.Sprint("caught up from the leader.* partition=", part, " from=")).MatchString(away.Output()) {
			t.Fatalf("%s did not catch up partition %d from a snapshot (the Raft log should have been compacted past it)", away.Name, part)
		}
	}
	// A purge keeping the newest 50 of each partition is decided by each replica
	// on its own log, the caught-up one included: they end alike.
	if n, err := js.PurgeStream(ctx, "LOG", &tern.PurgeRequest{Keep: 50}); err != nil || n != total-100 {
		t.Fatalf("purge keeping 50: %d removed, %v; want %d", n, err, total-100)
	}
	c.WaitFor("every replica applied the purge", 10*time.Second, replicasCurrent(js, "LOG", false))
	for _, n := range c.Nodes {
		n.Terminate()
	}
	for part := range 2 {
		want := storedPartRecords(t, leader, "LOG", part)
		if len(want) != 50 || !strings.HasPrefix(want[0], fmt.Sprint(total/2-49, " ")) {
			t.Fatalf("partition %d: the leader keeps %d records from %v, want the last 50", part, len(want), want[:min(1, len(want))])
		}
		for _, n := range c.Nodes {
			if got := storedPartRecords(t, n, "LOG", part); !slices.Equal(got, want) {
				t.Fatalf("%s holds %d records of partition %d, the leader %d; first difference at %d", n.Name, len(got), part, len(want), firstDiff(got, want))
			}
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestReplicatedConsumerSurvivesLeaderKill: a durable pull consumer of a stream of 3
// replicas keeps its position across kill -9 of the stream's leader: the messages
// acknowledged before the kill are not delivered again, every other one is, and
// the new leader shows the consumer's acknowledgements.
func TestReplicatedConsumerSurvivesLeaderKill(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ajs := c.Nodes[0].Connect(t, c.Nodes[0].URL()).Streams()
	info, err := ajs.AddStream(ctx, tern.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := nodeNamed(c, info.Cluster.Leader)
	const total = 200
	for i := 1; i <= total; i++ {
		if _, err := ajs.Publish(ctx, "jobs.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if _, err := ajs.AddConsumer(ctx, "JOBS", tern.ConsumerConfig{Durable: "W", AckPolicy: tern.AckExplicit,
		AckWait: tern.Duration(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	var worker *clustertest.Node
	for _, n := range c.Nodes {
		if n != leader {
			worker = n
			break
		}
	}
	wjs := worker.Connect(t, worker.URL()).Streams()
	pull := wjs.Pull("JOBS", "W")
	seen := map[uint64]int{}
	note := func(m *tern.Msg) {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seen[md.StreamSeq]++
	}
	takeAcked(t, ctx, pull, total/2, note)
	leader.Kill()
	takeAcked(t, ctx, pull, total/2, note)
	for seq := uint64(1); seq <= total; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("message %d acknowledged %d times, want once (a message acked before the kill came again, or one never came)", seq, seen[seq])
		}
	}
	ci, err := wjs.ConsumerInfo(ctx, "JOBS", "W")
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 0 || ci.Partitions[0].AckFloor != total {
		t.Fatalf("consumer info after the failover: ack floor %d, %d pending; want %d, 0", ci.Partitions[0].AckFloor, ci.NumAckPending, total)
	}
}

// TestReplicatedRemovals: what the leader removes besides the store's limits is
// removed on every replica: acknowledged messages of a work queue and messages past
// max_age stay gone after the leader's kill.
func TestReplicatedRemovals(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := c.Nodes[0].Connect(t, c.Nodes[0].URL(), tern.MaxReconnects(-1)).Streams()
	wq, err := js.AddStream(ctx, tern.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: tern.RetainWorkQueue, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "AGE", Subjects: []string{"age.>"}, MaxAge: tern.Duration(time.Second), Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	const total = 50
	for i := range total {
		for _, subj := range []string{"wq.x", "age.x"} {
			if _, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := js.AddConsumer(ctx, "WQ", tern.ConsumerConfig{Durable: "W", AckPolicy: tern.AckExplicit}); err != nil {
		t.Fatal(err)
	}
	pull := js.Pull("WQ", "W")
	for acked := 0; acked < total; {
		msgs, err := pull.Fetch(ctx, total-acked)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := m.AckSync(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	empty := func(name string) bool {
		info, err := infoOf(js, name)
		return err == nil && info.State.Msgs == 0 && info.State.LastSeq == total
	}
	c.WaitFor("the work queue emptied by its acks", 10*time.Second, func() bool { return empty("WQ") })
	c.WaitFor("the aged stream emptied", 10*time.Second, func() bool { return empty("AGE") })

	nodeNamed(c, wq.Cluster.Leader).Kill()
	c.WaitFor("a new leader of WQ", 10*time.Second, func() bool {
		l := streamLeader(js, "WQ")
		return l != "" && l != wq.Cluster.Leader
	})
	for _, name := range []string{"WQ", "AGE"} {
		c.WaitFor(name+" served after the kill", 10*time.Second, func() bool { return streamLeader(js, name) != wq.Cluster.Leader && streamLeader(js, name) != "" })
		info, err := js.StreamInfo(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 || info.State.FirstSeq != total+1 {
			t.Fatalf("%s after the leader's kill: %d messages from %d, want none (first %d)", name, info.State.Msgs, info.State.FirstSeq, total+1)
		}
	}
}

// TestReplicatedConsumersThroughAnyNode: consumers of a replicated stream are
// created and read through a node that does not lead it: an ephemeral pull
// consumer, a durable one, and a push consumer delivering to a subscriber there
// (deliveries cross the route under the inbox or deliver subject they are routed
// by, keeping their own subject).
func TestReplicatedConsumersThroughAnyNode(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Nodes[0].Connect(t, c.Nodes[0].URL()).Streams().AddStream(ctx,
		tern.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	var far *clustertest.Node
	for _, n := range c.Nodes {
		if n.Name != info.Cluster.Leader {
			far = n
			break
		}
	}
	nc := far.Connect(t, far.URL())
	js := nc.Streams()
	const total = 30
	for i := range total {
		if _, err := js.Publish(ctx, fmt.Sprintf("r.%d", i), fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, msgs []*tern.Msg) {
		t.Helper()
		if len(msgs) != total {
			t.Fatalf("%s: %d messages, want %d", what, len(msgs), total)
		}
		for i, m := range msgs {
			if m.Subject != fmt.Sprintf("r.%d", i) || string(m.Data) != fmt.Sprint(i) {
				t.Fatalf("%s: message %d is %s %q", what, i, m.Subject, m.Data)
			}
		}
	}
	fetchAll := func(p *tern.Pull) []*tern.Msg {
		var out []*tern.Msg
		for len(out) < total {
			msgs, err := p.Fetch(ctx, total-len(out))
			if err != nil {
				t.Fatalf("fetch after %d: %v", len(out), err)
			}
			out = append(out, msgs...)
		}
		return out
	}
	eph, err := js.AddConsumer(ctx, "R", tern.ConsumerConfig{AckPolicy: tern.AckNone})
	if err != nil {
		t.Fatal(err)
	}
	check("ephemeral pull consumer", fetchAll(js.Pull("R", eph.Name)))
	if _, err := js.AddConsumer(ctx, "R", tern.ConsumerConfig{Durable: "D", AckPolicy: tern.AckExplicit}); err != nil {
		t.Fatal(err)
	}
	durable := fetchAll(js.Pull("R", "D"))
	for _, m := range durable {
		if err := m.AckSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("durable pull consumer", durable)

	got := make(chan *tern.Msg, total)
	sub, err := nc.Subscribe("deliver.push", func(m *tern.Msg) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddConsumer(ctx, "R", tern.ConsumerConfig{Durable: "P", DeliverSubject: "deliver.push", AckPolicy: tern.AckNone}); err != nil {
		t.Fatal(err)
	}
	var pushed []*tern.Msg
	for len(pushed) < total {
		select {
		case m := <-got:
			pushed = append(pushed, m)
		case <-ctx.Done():
			t.Fatalf("push consumer: %d of %d messages", len(pushed), total)
		}
	}
	check("push consumer", pushed)
}

// TestReplicatedStreamMembership: a stream's replica count changes with an edit (3
// to 5: two replicas join, catch up and vote; 5 to 3: two leave and delete their
// copy), and a node evicted for good is taken out of the stream's group; through it
// all the stream keeps its messages.
func TestReplicatedStreamMembership(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 5, Args: func(int) []string { return []string{"--cluster-size", "5"} }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nc := c.Nodes[0].Connect(t, c.Nodes[0].URL(), tern.MaxReconnects(-1))
	js := nc.Streams()
	var info *tern.StreamInfo
	c.WaitFor("a stream of 3 replicas made (the catalogue knowing the nodes)", 20*time.Second, func() bool {
		var err error
		info, err = js.AddStream(ctx, tern.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Replicas: 3})
		return err == nil
	})
	const total = 100
	for i := range total {
		if _, err := js.Publish(ctx, "m.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// settled waits until the leader shows n voting replicas, all caught up.
	settled := func(n int) []string {
		var names []string
		last := ""
		defer func() {
			if t.Failed() {
				t.Logf("last stream info: %s", last)
			}
		}()
		c.WaitFor(fmt.Sprintf("%d replicas in the group, caught up", n), 30*time.Second, func() bool {
			in, err := infoOf(js, "M")
			if err != nil {
				last = err.Error()
				return false
			}
			b, _ := json.Marshal(in.Cluster)
			last = fmt.Sprintf("%s, %d messages", b, in.State.Msgs)
			if in.Cluster == nil || len(in.Cluster.Replicas) != n || in.State.Msgs != total {
				return false
			}
			names = names[:0]
			for _, r := range in.Cluster.Replicas {
				if r.Learner || !r.Active || r.Lag > 0 {
					return false
				}
				names = append(names, r.Node)
			}
			return true
		})
		return names
	}
	settled(3)
	if _, err := js.UpdateStream(ctx, tern.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Replicas: 5}); err != nil {
		t.Fatalf("scaling to 5: %v", err)
	}
	settled(5)

	// A node killed for good and evicted leaves the group; no node is left to
	// take its place, so the stream goes on with 4.
	leader := streamLeader(js, "M")
	var gone *clustertest.Node
	for _, n := range c.Nodes[1:] {
		if n.Name != leader {
			gone = n
			break
		}
	}
	gone.Kill()
	c.WaitFor(gone.Name+" gone from membership", 15*time.Second, func() bool {
		st, err := c.Nodes[0].Status()
		return err == nil && !clustertest.Alive(st, gone.Name)
	})
	msg, err := nc.Request(ctx, streamapi.ClusterEvictSubject(gone.Name), nil)
	if err != nil || !strings.Contains(string(msg.Data), `"evicted"`) {
		t.Fatalf("evicting %s: %v %s", gone.Name, err, msg.Data)
	}
	if names := settled(4); slices.Contains(names, gone.Name) {
		t.Fatalf("the evicted %s is still a replica: %v", gone.Name, names)
	}

	// Down to 3: the two replicas dropped delete their copy once out of the group.
	if _, err := js.UpdateStream(ctx, tern.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Replicas: 3}); err != nil {
		t.Fatalf("scaling to 3: %v", err)
	}
	kept := settled(3)
	for _, n := range c.Nodes {
		if n == gone || slices.Contains(kept, n.Name) {
			continue
		}
		c.WaitFor(n.Name+" deleting its copy", 15*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(n.Dir(), "streams", "M"))
			return errors.Is(err, os.ErrNotExist)
		})
	}
	if info.Config.Replicas != 3 {
		t.Fatalf("created with %d replicas", info.Config.Replicas)
	}
}

// TestReplicaRepairsDamagedRecords: a byte flipped on disk in one replica's stream
// log (as a bad sector would) is reported when the replica opens, and the records
// from the damaged one on come back from the group, so that every replica ends
// with the same records and nothing acknowledged is lost.
func TestReplicaRepairsDamagedRecords(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string {
		return []string{"--cluster-size", "3", "--raft-snapshot-entries", "20"}
	}})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Nodes[0].Connect(t, c.Nodes[0].URL()).Streams().AddStream(ctx,
		tern.StreamConfig{Name: "DMG", Subjects: []string{"dmg.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := nodeNamed(c, info.Cluster.Leader)
	js := leader.Connect(t, leader.URL()).Streams()
	const total = 300
	for i := range total {
		if _, err := js.Publish(ctx, "dmg.x", fmt.Appendf(nil, "message-number-%04d", i)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	var victim *clustertest.Node
	for _, n := range c.Nodes {
		if n != leader {
			victim = n
			break
		}
	}
	c.WaitFor("every replica has every message", 10*time.Second, replicasCurrent(js, "DMG", false))
	victim.Terminate()
	segs, _ := filepath.Glob(filepath.Join(victim.Dir(), "streams", "DMG", "p0", "*.log"))
	flipped := false
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if at := bytes.Index(b, []byte("message-number-0150")); at >= 0 {
			b[at+len("message-number-")] ^= 0x40
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("message 150 not found in %s's segments %v", victim.Name, segs)
	}
	victim.Restart(t)
	c.WaitFor("the damaged replica to report the damage", 20*time.Second, func() bool {
		return strings.Contains(victim.Output(), "damaged on disk")
	})
	// Then a message more, so that the leader's view of the replica is fresh. A
	// leader elected meanwhile answers 503 (not replicated): the publish is
	// retried with its message id, as a client would, and stored once.
	var lastErr error
	c.WaitFor("the message after the damage stored", 20*time.Second, func() bool {
		_, lastErr = js.Publish(ctx, "dmg.x", fmt.Appendf(nil, "message-number-%04d", total), tern.MsgID("after-damage"))
		var ae *tern.APIError
		if lastErr != nil && !(errors.As(lastErr, &ae) && ae.Code == streamapi.CodeUnavailable) {
			t.Fatalf("publish after the damage: %v", lastErr)
		}
		return lastErr == nil
	})
	c.WaitFor("the damaged replica repaired", 20*time.Second, replicasCurrent(js, "DMG", true))
	sameRecordsEverywhere(t, c, leader, "DMG", total+1)
}

// TestReplicaRecoversFromFullDisk: one replica's stream disk fills up (a tmpfs of
// its own, which needs root: TERN_NO_NETNS=1 skips it with the other root tests) while
// publishes go on: the replica reports it and stops storing, the stream goes on
// with the others, and once there is room again the replica catches up and holds
// the same records as the others.
func TestReplicaRecoversFromFullDisk(t *testing.T) {
	skipWithoutNetns(t)
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string {
		return []string{"--cluster-size", "3", "--segment-size", "1MiB"}
	}})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := c.Nodes[0].Connect(t, c.Nodes[0].URL()).Streams().AddStream(ctx,
		tern.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := nodeNamed(c, info.Cluster.Leader)
	js := leader.Connect(t, leader.URL()).Streams()
	var victim *clustertest.Node
	for _, n := range c.Nodes {
		if n != leader {
			victim = n
			break
		}
	}
	payload := bytes.Repeat([]byte("x"), 8<<10)
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "full.x", append(fmt.Appendf(nil, "%06d ", i), payload...)); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, 50)

	// The victim's stream logs move to a tmpfs with a few MiB to spare (its log
	// file and Raft logs stay where they are).
	victim.Terminate()
	dir := filepath.Join(victim.Dir(), "streams")
	saved := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", saved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	used, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	kib, _ := strconv.Atoi(strings.Fields(string(used))[0])
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", kib+3072), "tern-full", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	if out, err := exec.Command("cp", "-a", saved+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("cp back: %v: %s", err, out)
	}
	victim.Restart(t)

	// 8 KiB messages until the victim's disk is full: publishes go on (a
	// majority stores them) and the victim says why it cannot.
	next := 50
	c.WaitFor("the victim's disk to fill", 40*time.Second, func() bool {
		publish(next, next+50)
		next += 50
		return strings.Contains(victim.Output(), "no space left on device")
	})
	publish(next, next+100)
	next += 100

	if out, err := exec.Command("mount", "-o", "remount,size=256m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	publish(next, next+1)
	next++
	c.WaitFor("the victim caught up", 60*time.Second, replicasCurrent(js, "FULL", true))
	sameRecordsEverywhere(t, c, leader, "FULL", next)
}

// TestReplicatedStreamAddsPartitions: an update giving a replicated stream more
// partitions adds a Raft group for each on the stream's replicas; the leader
// leads them all, keyed publishes spread over every partition, the consumer goes
// on where it was and reads the new partitions too, and kill -9 of the leader
// loses nothing, the new partitions' groups electing the same new leader.
func TestReplicatedStreamAddsPartitions(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	js := c.Nodes[0].Connect(t, c.Nodes[0].URL(), tern.MaxReconnects(-1)).Streams()
	cfg := tern.StreamConfig{Name: "GROW", Subjects: []string{"grow.>"}, Replicas: 3}
	if _, err := js.AddStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	published := 0
	publish := func(n int) map[int]int {
		parts := map[int]int{}
		for range n {
			id := strconv.Itoa(published)
			ack, err := js.Publish(ctx, "grow.x", []byte(id), tern.Key("k"+id), tern.MsgID("m"+id))
			if err != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			parts[ack.Partition]++
			published++
		}
		return parts
	}
	publish(50)
	if _, err := js.AddConsumer(ctx, "GROW", tern.ConsumerConfig{Durable: "C", AckPolicy: tern.AckExplicit,
		AckWait: tern.Duration(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	pull := js.Pull("GROW", "C")
	seen := map[string]int{}
	note := func(m *tern.Msg) { seen[string(m.Data)]++ }
	takeAcked(t, ctx, pull, 10, note)

	cfg.Partitions = 3
	info, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("adding partitions: %v", err)
	}
	if info.Config.Partitions != 3 {
		t.Fatalf("updated to %d partitions", info.Config.Partitions)
	}
	// Every partition's group has the three replicas, caught up, and one leader.
	var last string
	c.WaitFor("three partitions, each a group of 3 with the stream's leader", 30*time.Second, func() bool {
		in, err := infoOf(js, "GROW")
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := json.Marshal(in.Cluster)
		last = string(b)
		if in.Cluster == nil || len(in.Cluster.Partitions) != 3 || len(in.State.Parts) != 3 {
			return false
		}
		for _, pc := range in.Cluster.Partitions {
			if pc.Leader != in.Cluster.Leader || len(pc.Replicas) != 3 {
				return false
			}
			for _, r := range pc.Replicas {
				if !r.Active || r.Lag > 0 {
					return false
				}
			}
		}
		return true
	})
	if t.Failed() {
		t.Logf("last cluster info: %s", last)
	}
	if parts := publish(60); len(parts) != 3 {
		t.Fatalf("60 keys went to partitions %v, want all 3", parts)
	}
	takeAcked(t, ctx, pull, 40+30, note)

	leader := nodeNamed(c, streamLeader(js, "GROW"))
	if leader == nil {
		t.Fatal("no leader")
	}
	leader.Kill()
	if leader == c.Nodes[0] {
		js = c.Nodes[1].Connect(t, c.Nodes[1].URL(), tern.MaxReconnects(-1)).Streams()
		pull = js.Pull("GROW", "C")
	}
	if parts := publish(30); len(parts) != 3 {
		t.Fatalf("30 keys after the kill went to partitions %v, want all 3", parts)
	}
	takeAcked(t, ctx, pull, 30+30, note)
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %s acknowledged %d times", id, n)
		}
	}
	if len(seen) != published {
		t.Fatalf("%d messages consumed of %d published", len(seen), published)
	}
	in, err := infoOf(js, "GROW")
	if err != nil || in.State.Msgs != uint64(published) {
		t.Fatalf("after the kill: %v, %+v messages, want %d", err, in, published)
	}
}
