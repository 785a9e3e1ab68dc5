package clustertest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// nodeCerts issues the certificate of each named node from ca and writes them, and
// the CA, to dir; tlsArgs are the flags that put a node's routes over TLS with them.
type nodeCerts struct {
	ca     *testcerts.CA
	dir    string
	caFile string
	files  map[string]testcerts.Pair
}

func newNodeCerts(t *testing.T, caName string, names ...string) *nodeCerts {
	t.Helper()
	c := &nodeCerts{ca: testcerts.NewCA(t, caName), dir: t.TempDir(), files: map[string]testcerts.Pair{}}
	c.caFile = testcerts.WriteFile(t, c.dir, "ca.pem", c.ca.PEM)
	for _, n := range names {
		c.issue(t, n)
	}
	return c
}

// issue (re)writes a fresh certificate for node name.
func (c *nodeCerts) issue(t *testing.T, name string) *testcerts.Leaf {
	t.Helper()
	l := c.ca.Node(t, name)
	c.files[name] = testcerts.WriteLeaf(t, c.dir, name, l)
	return l
}

func (c *nodeCerts) tlsArgs(name string) []string {
	f := c.files[name]
	return []string{"--cluster-tls=true", "--cluster-tls-cert-file", f.Cert, "--cluster-tls-key-file", f.Key,
		"--cluster-tls-ca-file", c.caFile}
}

// routeTo returns n's route to peer as /cluster shows it.
func routeTo(t *testing.T, n *clustertest.Node, peer string) (clustertest.Status, bool) {
	t.Helper()
	st, err := n.Status()
	if err != nil {
		return st, false
	}
	_, ok := clustertest.RouteTo(st, peer)
	return st, ok
}

// streamAndRoutes creates a stream of three replicas on members, publishes through
// one and reads through another, and routes a plain message between two.
func streamAndRoutes(t *testing.T, c *clustertest.Cluster, members []*clustertest.Node, stream string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js1 := members[0].Connect(t, members[0].URL()).Streams()
	info, err := js1.AddStream(ctx, tern.StreamConfig{Name: stream, Subjects: []string{strings.ToLower(stream) + ".>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("creating a stream of 3 replicas: %v", err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 3 {
		t.Fatalf("stream cluster %+v, want 3 replicas", info.Cluster)
	}
	js2 := members[1].Connect(t, members[1].URL()).Streams()
	const total = 50
	for i := range total {
		if _, err := js2.Publish(ctx, fmt.Sprintf("%s.%d", strings.ToLower(stream), i%3), []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	js3 := members[2].Connect(t, members[2].URL()).Streams()
	c.WaitFor("every replica caught up", 10*time.Second, func() bool {
		in, err := infoOf(js3, stream)
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
	if m, err := js3.GetMsg(ctx, stream, 0, total); err != nil || string(m.Data) != fmt.Sprint("m", total-1) {
		t.Fatalf("the last message read through %s: %+v, %v", members[2].Name, m, err)
	}

	subject := strings.ToLower(stream) + "-routed"
	sub, err := members[2].Connect(t, members[2].URL()).SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the interest at "+members[0].Name, 5*time.Second, func() bool { return interestFrom(members[0], members[2].Name) >= 1 })
	if err := members[0].Connect(t, members[0].URL()).Publish(subject, []byte("routed")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "routed" {
		t.Fatalf("routed: %v, %v", m, err)
	}
	_ = sub.Unsubscribe()
}

// TestClusterTLS: three `tern server` processes with cluster_tls, and the cluster
// secret as well, form a mesh over TLS that replicates a stream of three replicas
// and routes messages; /cluster shows every route's TLS version and the peer's
// certificate.
func TestClusterTLS(t *testing.T) {
	certs := newNodeCerts(t, "cluster CA", "n1", "n2", "n3")
	sec, _ := writeSecret(t, t.TempDir(), "cluster.secret")
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(i int) []string {
		name := fmt.Sprintf("n%d", i+1)
		return append(certs.tlsArgs(name), "--cluster-secret-file", sec, "--cluster-size", "3")
	}})
	c.WaitFor("the catalogue on the members", 10*time.Second, func() bool {
		for _, n := range c.Nodes {
			if m := metaOf(n); m == nil || m.Applied < 4 {
				return false
			}
		}
		return true
	})
	streamAndRoutes(t, c, c.Nodes, "OVERTLS")
	for _, n := range c.Nodes {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if !st.RoutesTLS || !st.Secured || st.RouteAuthFailures != 0 || len(st.Routes) != 2 {
			t.Fatalf("%s: routes tls %v, secured %v, %d failures, %d routes", n.Name, st.RoutesTLS, st.Secured, st.RouteAuthFailures, len(st.Routes))
		}
		for _, r := range st.Routes {
			if !strings.HasPrefix(r.TLS, "TLS 1.") || r.PeerCertSubject != "CN="+r.Node+",O=Tern tests" || r.PeerCertSerial == "" {
				t.Fatalf("%s's route to %s: tls %q, peer certificate %q serial %q", n.Name, r.Node, r.TLS, r.PeerCertSubject, r.PeerCertSerial)
			}
		}
		if !strings.Contains(n.Output(), "routes_tls=true") {
			t.Fatalf("%s does not log that its routes are TLS", n.Name)
		}
	}
}

// TestClusterTLSRefusals: three nodes with cluster_tls (and no secret: gossip lets
// anyone in) replicate and route; a fourth with a certificate of another CA and a
// fifth without TLS become gossip members, but get no route: both ends of each
// refusal log it, the cluster's nodes count it, and the cluster carries on.
func TestClusterTLSRefusals(t *testing.T) {
	certs := newNodeCerts(t, "cluster CA", "n1", "n2", "n3")
	rogue := newNodeCerts(t, "another CA", "n4")
	c := clustertest.Start(t, clustertest.Options{N: 5, Apart: 2, Args: func(i int) []string {
		switch i {
		case 3:
			return rogue.tlsArgs("n4")
		case 4:
			return nil
		}
		return append(certs.tlsArgs(fmt.Sprintf("n%d", i+1)), "--cluster-size", "3")
	}})
	members, other, plain := c.Nodes[:3], c.Nodes[3], c.Nodes[4]
	c.WaitFor("the catalogue on the members", 10*time.Second, func() bool {
		for _, n := range members {
			if m := metaOf(n); m == nil || m.Applied < 4 {
				return false
			}
		}
		return true
	})
	streamAndRoutes(t, c, members, "GUARDED")

	logged := func(n *clustertest.Node, parts ...string) bool {
		for line := range strings.Lines(n.Output()) {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return true
			}
		}
		return false
	}
	anyMember := func(parts ...string) bool {
		return slices.ContainsFunc(members, func(n *clustertest.Node) bool { return logged(n, parts...) })
	}
	c.WaitFor("the refusals logged on both ends", 15*time.Second, func() bool {
		return anyMember("route refused: TLS", "certificate signed by unknown authority") &&
			anyMember("route refused: TLS", "first record does not look like a TLS handshake") &&
			logged(other, "route refused: TLS", "remote error: tls: bad certificate") &&
			logged(plain, "route refused: TLS", "the peer speaks TLS (cluster_tls is on there) and this node does not")
	})
	time.Sleep(500 * time.Millisecond) // more dials
	for _, n := range members {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if !st.RoutesTLS || len(st.Routes) != 2 || st.RouteAuthFailures == 0 {
			t.Fatalf("%s: routes tls %v, %d routes, %d failures", n.Name, st.RoutesTLS, len(st.Routes), st.RouteAuthFailures)
		}
		for _, out := range []*clustertest.Node{other, plain} {
			if hasRoute(n, out.Name) {
				t.Fatalf("%s has a route to %s", n.Name, out.Name)
			}
		}
	}
	for _, out := range []*clustertest.Node{other, plain} {
		if st, ok := routeTo(t, out, "n1"); ok || len(st.Routes) != 0 {
			t.Fatalf("%s has routes: %+v", out.Name, st.Routes)
		}
		if logged(out, "route up") {
			t.Fatalf("%s had a route up", out.Name)
		}
	}
	metrics, err := members[0].Get("/metrics")
	if err != nil || strings.Contains(metrics, "\ntern_route_auth_failures_total 0\n") || !strings.Contains(metrics, "\ntern_route_auth_failures_total ") {
		t.Fatalf("%s's /metrics does not count the refusals (%v)", members[0].Name, err)
	}
	// The cluster carries on.
	streamAndRoutes(t, c, members, "AFTER")
}

// TestClusterTLSReload: after a node's certificate files are replaced and it gets
// SIGHUP, its open routes stay up with the old certificate, and a route opened
// afterwards presents the new one.
func TestClusterTLSReload(t *testing.T) {
	certs := newNodeCerts(t, "cluster CA", "n1", "n2", "n3")
	c := clustertest.Start(t, clustertest.Options{N: 3, Args: func(i int) []string {
		return certs.tlsArgs(fmt.Sprintf("n%d", i+1))
	}})
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	peerSerial := func(n *clustertest.Node, peer string) string {
		st, err := n.Status()
		if err != nil {
			return ""
		}
		r, _ := clustertest.RouteTo(st, peer)
		return r.PeerCertSerial
	}
	old := peerSerial(n1, "n3")
	if old == "" || peerSerial(n2, "n3") != old {
		t.Fatalf("n1 and n2 see n3's certificate as %q and %q", old, peerSerial(n2, "n3"))
	}
	fresh := certs.issue(t, "n3").Cert.SerialNumber.Text(16)
	n3.Hangup()
	c.WaitFor("n3's reload logged", 5*time.Second, func() bool {
		return strings.Contains(n3.Output(), "what=cluster_tls cert_serial="+fresh)
	})
	time.Sleep(200 * time.Millisecond)
	if got := peerSerial(n1, "n3"); got != old {
		t.Fatalf("n1's open route to n3 shows %q after the reload, want %q still", got, old)
	}
	// n1 starts again: its new routes meet n3's new certificate; n2's stays.
	n1.Kill()
	n1.Restart(t)
	c.WaitMesh(15 * time.Second)
	c.WaitFor("n1's new route to n3 with the new certificate", 5*time.Second, func() bool { return peerSerial(n1, "n3") == fresh })
	if got := peerSerial(n2, "n3"); got != old {
		t.Fatalf("n2's route to n3, open through the reload, shows %q, want %q", got, old)
	}
}
