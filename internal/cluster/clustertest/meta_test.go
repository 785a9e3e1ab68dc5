package clustertest_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/streamapi"
)

// metaOf is a node's view of the meta group, nil when it cannot be read.
func metaOf(n *clustertest.Node) *cluster.GroupStatus {
	st, err := n.Status()
	if err != nil || st.Meta == nil {
		return nil
	}
	return st.Meta
}

// agreedLeader is the meta leader every given node names, "" while they disagree or
// one has none.
func agreedLeader(nodes ...*clustertest.Node) string {
	leader := ""
	for _, n := range nodes {
		m := metaOf(n)
		if m == nil || !m.Running || m.Leader == "" || leader != "" && m.Leader != leader {
			return ""
		}
		leader = m.Leader
	}
	return leader
}

// waitCatalogue waits until every node has applied the founding entries and the
// leader's three add_node commands, and returns the highest index applied.
func waitCatalogue(c *clustertest.Cluster) uint64 {
	var applied uint64
	c.WaitFor("the catalogue on every node", 10*time.Second, func() bool {
		applied = 0
		for _, n := range c.Nodes {
			m := metaOf(n)
			if m == nil || m.Applied < 4 {
				return false
			}
			applied = max(applied, m.Applied)
		}
		return true
	})
	return applied
}

func nodeNamed(c *clustertest.Cluster, name string) *clustertest.Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// TestMetaGroupFormsAndFailsOver: three nodes started with cluster_size 3 form the
// meta group with all three as voters; kill -9 of its leader gets the other two a
// new leader within the election time; the killed node restarts from its Raft log
// and follows again.
func TestMetaGroupFormsAndFailsOver(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	var leader string
	took := c.WaitFor("one meta leader", 10*time.Second, func() bool { leader = agreedLeader(c.Nodes...); return leader != "" })
	t.Logf("meta group formed, leader %s, %v after the mesh", leader, took.Round(time.Millisecond))
	m := metaOf(nodeNamed(c, leader))
	if got := slices.Sorted(slices.Values(m.Voters)); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("voters %v, want n1 n2 n3", m.Voters)
	}
	// The leader adds every node to the catalogue: three commands after the
	// founding entries, applied everywhere.
	waitCatalogue(c)

	old := nodeNamed(c, leader)
	old.Kill()
	var rest []*clustertest.Node
	for _, n := range c.Nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	var next string
	took = c.WaitFor("a new meta leader", 10*time.Second, func() bool {
		next = agreedLeader(rest...)
		return next != "" && next != leader
	})
	t.Logf("new leader %s %v after kill -9 of %s", next, took.Round(time.Millisecond), leader)
	if took > 3*time.Second {
		t.Errorf("failover took %v, want well under 3 s", took)
	}

	old.Restart(t)
	c.WaitFor("the restarted node following", 15*time.Second, func() bool {
		m := metaOf(old)
		return m != nil && m.Running && m.Leader == agreedLeader(rest...) && m.Leader != ""
	})

	// A graceful stop hands the leadership off first.
	leader = agreedLeader(c.Nodes...)
	stopping := nodeNamed(c, leader)
	stopping.Terminate()
	if !strings.Contains(stopping.Output(), "leadership handed off before shutdown") {
		t.Errorf("%s stopped without handing the meta group off:\n%s", leader, stopping.Output())
	}
	rest = rest[:0]
	for _, n := range c.Nodes {
		if n != stopping {
			rest = append(rest, n)
		}
	}
	c.WaitFor("a leader after the graceful stop", 10*time.Second, func() bool { return agreedLeader(rest...) != "" })
}

// TestMetaGroupLaterNodesAreLearners: with cluster_size 3 and five nodes, the first
// three by name found the group; the leader adds the other two as learners, then
// promotes them, as five voters are possible.
func TestMetaGroupLaterNodesAreLearners(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 5, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	var leader string
	c.WaitFor("five voters", 20*time.Second, func() bool {
		leader = agreedLeader(c.Nodes...)
		if leader == "" {
			return false
		}
		m := metaOf(nodeNamed(c, leader))
		return m != nil && len(m.Voters) == 5 && len(m.Learners) == 0
	})
	for _, n := range c.Nodes {
		if m := metaOf(n); m == nil || m.Applied < 6 {
			t.Errorf("%s: meta group applied %+v, want the five nodes in the catalogue", n.Name, m)
		}
	}
}

// TestMQTTTakeoverAcrossNodes: a client id connected to one node that connects to
// another has its first connection closed there, as a session takeover (reason 0x8E
// to a v5 client), through the meta group's client registry; the new connection
// stays.
func TestMQTTTakeoverAcrossNodes(t *testing.T) {
	py := python(t)
	c := clustertest.Start(t, clustertest.Options{N: 3, MQTT: true, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	c.WaitFor("one meta leader", 10*time.Second, func() bool { return agreedLeader(c.Nodes...) != "" })
	before := waitCatalogue(c)
	first := startLines(t, py, "-c", pahoRoamer, strconv.Itoa(c.Nodes[0].MQTTPort))
	if l := first.next(t, 10*time.Second); l != "connected" {
		t.Fatalf("first connection: %q", l)
	}
	// The first record commits before the second connection makes its own.
	c.WaitFor("the first connection's record", 10*time.Second, func() bool {
		m := metaOf(c.Nodes[0])
		return m != nil && m.Applied > before
	})
	second := startLines(t, py, "-c", pahoRoamer, strconv.Itoa(c.Nodes[1].MQTTPort))
	if l := second.next(t, 10*time.Second); l != "connected" {
		t.Fatalf("second connection: %q", l)
	}
	if l := first.next(t, 10*time.Second); l != "disconnected 142" {
		t.Fatalf("first connection after the second connected elsewhere: %q, want disconnected 142", l)
	}
	time.Sleep(time.Second)
	if l, ok := second.poll(); ok {
		t.Fatalf("second connection: %q, want it still connected", l)
	}
}

// pahoRoamer connects as client id "roamer" (MQTT 5, no reconnects), prints
// "connected", and prints "disconnected <reason code>" and exits when the server
// ends the connection.
const pahoRoamer = `
import os, sys
import paho.mqtt.client as mqtt
def on_connect(c, ud, flags, rc, props):
    print("connected", flush=True)
def on_disconnect(c, ud, flags, rc, props):
    print("disconnected %d" % rc.value, flush=True)
    os._exit(0)
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="roamer", protocol=mqtt.MQTTv5)
c.on_connect, c.on_disconnect = on_connect, on_disconnect
c.connect("127.0.0.1", int(sys.argv[1]), keepalive=30)
c.loop_forever()
`

// TestEvictNode: a node that is gone can be evicted through any node; it leaves the
// meta group's voters. An alive node or an unknown one cannot.
func TestEvictNode(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	c.WaitFor("one meta leader", 10*time.Second, func() bool { return agreedLeader(c.Nodes...) != "" })
	waitCatalogue(c)
	nc := c.Nodes[0].Connect(t, c.Nodes[0].URL())
	evict := func(node string) streamapi.Response[streamapi.ClusterEvicted] {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		msg, err := nc.Request(ctx, streamapi.ClusterEvictSubject(node), nil)
		if err != nil {
			t.Fatalf("evict %s: %v", node, err)
		}
		var resp streamapi.Response[streamapi.ClusterEvicted]
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			t.Fatalf("evict %s: %v", node, err)
		}
		return resp
	}
	if r := evict("n2"); r.Error == nil || r.Error.Code != streamapi.CodeConflict {
		t.Fatalf("evicting an alive node: %+v, want 409", r)
	}
	if r := evict("nope"); r.Error == nil || r.Error.Code != streamapi.CodeNotFound {
		t.Fatalf("evicting an unknown node: %+v, want 404", r)
	}
	c.Nodes[2].Kill()
	c.WaitFor("n3 gone from membership", 10*time.Second, func() bool {
		st, err := c.Nodes[0].Status()
		return err == nil && !clustertest.Alive(st, "n3")
	})
	if r := evict("n3"); r.Error != nil || r.Value == nil || r.Value.Evicted != "n3" {
		t.Fatalf("evicting n3: %+v", r)
	}
	rest := c.Nodes[:2]
	c.WaitFor("n3 out of the meta group", 10*time.Second, func() bool {
		leader := agreedLeader(rest...)
		if leader == "" {
			return false
		}
		m := metaOf(nodeNamed(c, leader))
		return m != nil && !slices.Contains(m.Voters, "n3") && !slices.Contains(m.Learners, "n3")
	})
}

// TestMetaGroupWholeClusterRestart: every node killed -9 and started again comes
// back from its Raft log: the same group, a leader, and nothing applied lost.
func TestMetaGroupWholeClusterRestart(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(int) []string { return []string{"--cluster-size", "3"} }})
	c.WaitFor("one meta leader", 10*time.Second, func() bool { return agreedLeader(c.Nodes...) != "" })
	applied := waitCatalogue(c)
	for _, n := range c.Nodes {
		n.Kill()
	}
	for _, n := range c.Nodes {
		n.Restart(t)
	}
	c.WaitFor("a leader after the restart", 15*time.Second, func() bool { return agreedLeader(c.Nodes...) != "" })
	for _, n := range c.Nodes {
		c.WaitFor(n.Name+" applying what it had", 10*time.Second, func() bool {
			m := metaOf(n)
			return m != nil && m.Applied >= applied && len(m.Voters) == 3
		})
		if !strings.Contains(n.Output(), "meta group restarted from storage") {
			t.Errorf("%s did not restart its replica from storage", n.Name)
		}
	}
}
