package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// streamLeader is the leader of a stream's group as its info shows it, "" while
// the stream cannot be described or has no leader.
func streamLeader(js *tern.Streams, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := js.StreamInfo(ctx, name)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// TestReplicatedStreamSurvivesLeaderKill: a stream of 3 replicas created through
// one node is served by every node; messages published with ids through a node
// that is not its leader are acknowledged once a quorum has them; kill -9 of the
// leader loses none of them, the retries of the publishes that were in flight create
// no duplicate, and the killed node, restarted, catches up.
func TestReplicatedStreamSurvivesLeaderKill(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	waitCatalogue(c)

	admin := c.Nodes[0].Connect(t, c.Nodes[0].URL())
	ajs := admin.Streams()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	info, err := ajs.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("creating a stream of 3 replicas: %v", err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 3 {
		t.Fatalf("created stream info %+v (cluster %+v), want 3 replicas", info.Config, info.Cluster)
	}
	leader := info.Cluster.Leader
	t.Logf("stream ORDERS led by %s", leader)

	// Every node answers for the stream, whichever it is connected to.
	for _, n := range c.Nodes {
		js := n.Connect(t, n.URL()).Streams()
		c.WaitFor("the stream described through "+n.Name, 5*time.Second, func() bool { return streamLeader(js, "ORDERS") == leader })
	}

	var pubNode *clustertest.Node
	for _, n := range c.Nodes {
		if n.Name != leader {
			pubNode = n
			break
		}
	}
	pub := pubNode.Connect(t, pubNode.URL(), tern.MaxReconnects(-1))
	pjs := pub.Streams()
	const total = 600
	acked := map[uint64]string{} // sequence → message id
	publish := func(i int) {
		id := fmt.Sprintf("m-%d", i)
		deadline := time.Now().Add(20 * time.Second)
		for {
			pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
			ack, err := pjs.Publish(pctx, fmt.Sprintf("orders.%d", i%7), []byte(id), tern.MsgID(id))
			pcancel()
			if err == nil {
				if prev, ok := acked[ack.Seq]; ok && prev != id {
					t.Fatalf("sequence %d acknowledged for %s and %s", ack.Seq, prev, id)
				}
				acked[ack.Seq] = id
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publishing %s: no acknowledgement within 20 s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
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

	// The killed node restarts from its disk and catches up with the group.
	killed.Restart(t)
	c.WaitFor("the restarted replica caught up", 20*time.Second, func() bool {
		info, err := pjs.StreamInfo(ctx, "ORDERS")
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
			_, err := js.StreamInfo(ctx, "ORDERS")
			var ae *tern.APIError
			return errors.As(err, &ae) && ae.Code == 10059
		})
	}
}
