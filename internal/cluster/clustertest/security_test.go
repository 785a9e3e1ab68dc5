package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/cluster/secret"
)

// writeSecret writes a fresh cluster secret to a file of mode 0600 in dir.
func writeSecret(t *testing.T, dir, name string) (path, text string) {
	t.Helper()
	text, err := secret.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, text
}

// TestClusterSecret: three `tern server` processes sharing a secret
// (cluster_secret_file) form a cluster that replicates a stream and routes
// messages. A fourth with another secret and a fifth with none, given the same
// join list, never become members and get no route: they and the cluster log why,
// and the cluster carries on.
func TestClusterSecret(t *testing.T) {
	dir := t.TempDir()
	good, goodText := writeSecret(t, dir, "cluster.secret")
	other, otherText := writeSecret(t, dir, "other.secret")
	c := clustertest.Start(t, clustertest.Options{N: 5, Apart: 2, Args: func(i int) []string {
		switch i {
		case 3:
			return []string{"--cluster-secret-file", other}
		case 4:
			return nil
		}
		return []string{"--cluster-secret-file", good, "--cluster-size", "3"}
	}})
	members, wrong, none := c.Nodes[:3], c.Nodes[3], c.Nodes[4]
	c.WaitFor("the catalogue on the members", 10*time.Second, func() bool {
		for _, n := range members {
			if m := metaOf(n); m == nil || m.Applied < 4 {
				return false
			}
		}
		return true
	})

	// A stream of three replicas, published to through one node and read through
	// another.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	js1 := members[0].Connect(t, members[0].URL()).Streams()
	info, err := js1.AddStream(ctx, tern.StreamConfig{Name: "SEALED", Subjects: []string{"sealed.>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("creating a stream of 3 replicas: %v", err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 3 {
		t.Fatalf("stream cluster %+v, want 3 replicas", info.Cluster)
	}
	js2 := members[1].Connect(t, members[1].URL()).Streams()
	const total = 50
	for i := range total {
		if _, err := js2.Publish(ctx, fmt.Sprintf("sealed.%d", i%3), []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	js3 := members[2].Connect(t, members[2].URL()).Streams()
	c.WaitFor("every replica caught up", 10*time.Second, func() bool {
		in, err := infoOf(js3, "SEALED")
		if err != nil || in.State.Msgs != total || in.Cluster == nil || len(in.Cluster.Replicas) != 3 {
			return false
		}
		for _, r := range in.Cluster.Replicas {
			if r.Lag != 0 || !r.Active {
				return false
			}
		}
		return true
	})
	if m, err := js3.GetMsg(ctx, "SEALED", 0, total); err != nil || string(m.Data) != fmt.Sprint("m", total-1) {
		t.Fatalf("the last message read through %s: %+v, %v", members[2].Name, m, err)
	}

	// Plain messages routed between the members.
	routed := func(what string) {
		t.Helper()
		sub, err := members[2].Connect(t, members[2].URL()).SubscribeSync("routed." + what)
		if err != nil {
			t.Fatal(err)
		}
		c.WaitFor("the interest at "+members[0].Name, 5*time.Second, func() bool { return interestFrom(members[0], members[2].Name) >= 1 })
		// The count above may be other subscriptions' of the node: publish
		// until this one's interest has reached the publisher's node.
		pub := members[0].Connect(t, members[0].URL())
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := pub.Publish("routed."+what, []byte(what)); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err == nil && string(m.Data) == what {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("routed %s: %v, %v", what, m, err)
			}
		}
		_ = sub.Unsubscribe()
	}
	routed("first")

	// Both sides of each refusal say why; the node with another secret and the
	// one without are never members, and nobody has a route to them.
	logged := func(n *clustertest.Node, s string) bool { return strings.Contains(n.Output(), s) }
	c.WaitFor("the refusals logged", 15*time.Second, func() bool {
		anyMember := func(s string) bool {
			return slices.ContainsFunc(members, func(n *clustertest.Node) bool { return logged(n, s) })
		}
		return logged(wrong, "gossip refused: not encrypted with this cluster's key") &&
			logged(none, "gossip refused: the peer encrypts gossip and this node has no cluster secret") &&
			anyMember("gossip refused: the peer does not encrypt gossip") &&
			anyMember("gossip refused: not encrypted with this cluster's key")
	})
	time.Sleep(500 * time.Millisecond) // more join attempts
	for _, n := range members {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Secured || len(st.Members) != 3 || len(st.Routes) != 2 {
			t.Fatalf("%s: secured %v, %d members, %d routes: %+v", n.Name, st.Secured, len(st.Members), len(st.Routes), st)
		}
		for _, out := range []*clustertest.Node{wrong, none} {
			if clustertest.Alive(st, out.Name) || hasRoute(n, out.Name) {
				t.Fatalf("%s lists %s", n.Name, out.Name)
			}
		}
	}
	for _, out := range []*clustertest.Node{wrong, none} {
		st, err := out.Status()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Members) != 1 || len(st.Routes) != 0 {
			t.Fatalf("%s: %d members, %d routes", out.Name, len(st.Members), len(st.Routes))
		}
		if logged(out, "node joined") || logged(out, "route up") {
			t.Fatalf("%s joined something:\n%s", out.Name, out.Output())
		}
	}
	for _, n := range c.Nodes {
		if logged(n, goodText) || logged(n, otherText) {
			t.Fatalf("%s logged a secret", n.Name)
		}
	}
	metrics, err := members[0].Get("/metrics")
	if err != nil || !strings.Contains(metrics, "\ntern_route_auth_failures_total 0\n") {
		t.Fatalf("%s's /metrics lacks tern_route_auth_failures_total 0 (%v)", members[0].Name, err)
	}

	// The cluster carries on.
	routed("after")
	if _, err := js1.Publish(ctx, "sealed.after", []byte("after")); err != nil {
		t.Fatalf("publish after the refusals: %v", err)
	}
}
