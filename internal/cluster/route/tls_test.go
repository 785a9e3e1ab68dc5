package route

import (
	"bytes"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/interest"
	"github.com/tern-mq/tern/internal/cluster/secret"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
	"github.com/tern-mq/tern/internal/tlsconf"
	"github.com/tern-mq/tern/internal/wire"
)

// nodeTLS writes leaf and the CA file ca to a directory of their own and returns a
// store for routes over TLS with them, and the leaf's files.
func nodeTLS(t *testing.T, leaf *testcerts.Leaf, ca *testcerts.CA) (*tlsconf.Store, testcerts.Pair) {
	t.Helper()
	dir := t.TempDir()
	files := testcerts.WriteLeaf(t, dir, "node", leaf)
	st, err := tlsconf.New(tlsconf.Settings{CertFile: files.Cert, KeyFile: files.Key,
		CAFile: testcerts.WriteFile(t, dir, "ca.pem", ca.PEM), ClientAuth: "require"})
	if err != nil {
		t.Fatal(err)
	}
	return st, files
}

// startTLS starts a node whose routes use st (plaintext for nil) and, when sec is
// not nil, the cluster secret, logging to the returned buffer.
func startTLS(t *testing.T, name string, st *tlsconf.Store, sec []byte) (*testNode, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	n := startNodeWith(t, "t", name, name+"-id", func(c *Config) {
		c.TLS = st
		if sec != nil {
			c.AuthKey = secret.RouteKey(sec)
		}
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return n, logs
}

func routeInfo(n *testNode, peer string) (Info, bool) {
	for _, in := range n.m.Routes() {
		if in.Node == peer {
			return in, true
		}
	}
	return Info{}, false
}

// TestRoutesOverTLS: nodes with certificates of one CA form a mesh over mutual TLS
// and carry messages, with and without the cluster secret on top; each route shows
// the peer's certificate.
func TestRoutesOverTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  []byte
	}{{"tls", nil}, {"tls+secret", testSecret}} {
		t.Run(tc.name, func(t *testing.T) {
			ca := testcerts.NewCA(t, "cluster CA")
			var nodes []*testNode
			for _, name := range []string{"a", "b", "c"} {
				st, _ := nodeTLS(t, ca.Node(t, name), ca)
				n, _ := startTLS(t, name, st, tc.sec)
				nodes = append(nodes, n)
			}
			a, b, c := nodes[0], nodes[1], nodes[2]
			mesh(a, b, c)
			waitFor(t, "full mesh", func() bool { return len(a.m.Routes()) == 2 && len(b.m.Routes()) == 2 && len(c.m.Routes()) == 2 })
			for _, n := range nodes {
				for _, in := range n.m.Routes() {
					if in.TLS != "TLS 1.3" || in.PeerCertSubject != "CN="+in.Node+",O=Tern tests" || in.PeerCertSerial == "" || in.PeerCertNotAfter == nil {
						t.Errorf("%s's route to %s: tls %q, peer certificate %q serial %q", n.name, in.Node, in.TLS, in.PeerCertSubject, in.PeerCertSerial)
					}
				}
			}
			onC := &inbox{}
			subscribe(t, c, onC, "secure.>", "")
			waitFor(t, "c's interest at a", func() bool { return interestOf(a, "c") == 1 })
			for range 100 {
				publish(a, &broker.Message{Subject: []byte("secure.x"), Payload: bytes.Repeat([]byte("p"), 10_000)})
			}
			t.Cleanup(func() {
				if t.Failed() {
					in, _ := routeInfo(a, "c")
					t.Logf("c got %d; a's route to c: %+v", onC.count(), in)
				}
			})
			waitFor(t, "delivery on c", func() bool { return onC.count() == 100 })
			for _, n := range nodes {
				if f := n.m.AuthFailures(); f != 0 {
					t.Errorf("%s counted %d authentication failures", n.name, f)
				}
			}
		})
	}
}

// TestRoutesTLSRefusals: a node with a certificate of another CA, one whose
// certificate names another node, and one without TLS — dialling or dialled — get
// no route to nodes over TLS; both ends log why, the TLS end counts it, and the
// others carry on.
func TestRoutesTLSRefusals(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	other := testcerts.NewCA(t, "another CA")
	stA, _ := nodeTLS(t, ca.Node(t, "a"), ca)
	stB, _ := nodeTLS(t, ca.Node(t, "b"), ca)
	a, aLogs := startTLS(t, "a", stA, nil)
	b, _ := startTLS(t, "b", stB, nil)
	for _, tc := range []struct {
		name   string
		store  func(name string) *tlsconf.Store
		aSays  string // in a's refusal
		itSays string // in its refusal
	}{
		// Dialled by a: a's client refuses the unknown authority.
		{"m-otherca", func(name string) *tlsconf.Store { st, _ := nodeTLS(t, other.Node(t, name), other); return st },
			"route refused: TLS", "route refused: TLS"},
		// Dials a: a refuses its certificate, and it refuses a's.
		{"0-otherca", func(name string) *tlsconf.Store { st, _ := nodeTLS(t, other.Node(t, name), other); return st },
			"route refused: TLS", "route refused: TLS"},
		// Its certificate is of the CA but names someone else.
		{"n-wrongname", func(string) *tlsconf.Store { st, _ := nodeTLS(t, ca.Node(t, "someone-else"), ca); return st },
			`does not name node \"n-wrongname\", which it says it is`, "refused by the peer: authentication failed"},
		// Without TLS, dialled by a, and dialling a.
		{"z-plain", func(string) *tlsconf.Store { return nil },
			"first record does not look like a TLS handshake", "the peer speaks TLS (cluster_tls is on there) and this node does not"},
		{"0-plain", func(string) *tlsconf.Store { return nil },
			"first record does not look like a TLS handshake", "this node's routes are TLS (cluster_tls)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.m.AuthFailures()
			x, xLogs := startTLS(t, tc.name, tc.store(tc.name), nil)
			mesh(a, b, x)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("a:\n%s\n%s:\n%s", aLogs, tc.name, xLogs)
				}
			})
			waitFor(t, "the refusals logged on both ends", func() bool {
				return strings.Contains(aLogs.String(), tc.aSays) && strings.Contains(xLogs.String(), tc.itSays) &&
					a.m.AuthFailures() > before
			})
			waitFor(t, "a and b meshed", func() bool { return interestOf(a, "b") >= 0 && interestOf(b, "a") >= 0 })
			time.Sleep(200 * time.Millisecond) // several redials
			// (A node refused after the hellos, for its certificate's name, has
			// the route for the moment it takes the ERR to come.)
			if r := x.m.Routes(); len(r) != 0 && !strings.Contains(tc.name, "wrongname") {
				t.Fatalf("%s has routes %+v", tc.name, r)
			}
			for _, n := range []*testNode{a, b} {
				if interestOf(n, tc.name) != -1 {
					t.Fatalf("%s has a route to %s", n.name, tc.name)
				}
			}
			t.Logf("a: %s", lastLine(aLogs.String(), "route refused"))
			t.Logf("%s: %s", tc.name, lastLine(xLogs.String(), "route refused"))
			a.m.Drop(tc.name)
			b.m.Drop(tc.name)
			x.m.Shutdown()
		})
	}
	onB := &inbox{}
	subscribe(t, b, onB, "after", "")
	waitFor(t, "b's interest at a", func() bool { return interestOf(a, "b") == 1 })
	publish(a, &broker.Message{Subject: []byte("after")})
	waitFor(t, "delivery on b", func() bool { return onB.count() == 1 })
}

// lastLine is the last line of logs holding s.
func lastLine(logs, s string) string {
	last := ""
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			last = strings.TrimSpace(line)
		}
	}
	return last
}

// TestRouteTLSAnyName: with TLSAnyName, a certificate of the CA naming another
// node is accepted.
func TestRouteTLSAnyName(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	anyName := func(name, certName string) *testNode {
		st, _ := nodeTLS(t, ca.Node(t, certName), ca)
		return startNodeWith(t, "t", name, name+"-id", func(c *Config) { c.TLS, c.TLSAnyName = st, true })
	}
	a, b := anyName("a", "shared"), anyName("b", "shared")
	mesh(a, b)
	waitFor(t, "the route", func() bool { return interestOf(a, "b") >= 0 && interestOf(b, "a") >= 0 })
}

// recordingProxy passes TCP connections to target and records every byte that
// goes through, both ways.
type recordingProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	seen   []byte
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *recordingProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *recordingProxy) pipe(from, to net.Conn) {
	defer p.wg.Done()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.seen = append(p.seen, buf[:n]...)
			p.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *recordingProxy) recorded() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.seen)
}

// TestRouteTLSEncrypts: what goes over a route between two nodes, recorded by a
// proxy between them, shows the subject and payload of a forwarded message in the
// clear without TLS, and neither (nor the node names) with TLS.
func TestRouteTLSEncrypts(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	const subject, marker = "capture.subject.zq7", "PAYLOAD-MARKER-6f1e0b"
	for _, withTLS := range []bool{false, true} {
		name := map[bool]string{false: "plaintext", true: "tls"}[withTLS]
		t.Run(name, func(t *testing.T) {
			store := func(node string) *tlsconf.Store {
				if !withTLS {
					return nil
				}
				st, _ := nodeTLS(t, ca.Node(t, node), ca)
				return st
			}
			a, _ := startTLS(t, "a", store("a"), nil)
			b, _ := startTLS(t, "b", store("b"), nil)
			proxy := newRecordingProxy(t, b.addr)
			a.m.Want("b", proxy.ln.Addr().String()) // a sorts first: it dials b, through the proxy
			b.m.Want("a", a.addr)
			onB := &inbox{}
			subscribe(t, b, onB, subject, "")
			waitFor(t, "b's interest at a", func() bool { return interestOf(a, "b") == 1 })
			for range 10 {
				publish(a, &broker.Message{Subject: []byte(subject), Payload: []byte(marker)})
			}
			waitFor(t, "delivery on b", func() bool { return onB.count() == 10 })
			seen := proxy.recorded()
			if len(seen) < 300 {
				t.Fatalf("only %d bytes recorded", len(seen))
			}
			for _, s := range []string{marker, subject, "b-id"} {
				if got := bytes.Contains(seen, []byte(s)); got == withTLS {
					t.Errorf("%q in the %d bytes recorded: %v", s, len(seen), got)
				}
			}
			if in, _ := routeInfo(a, "b"); (in.TLS != "") != withTLS {
				t.Errorf("a's route to b: tls %q", in.TLS)
			}
		})
	}
}

// TestRouteTLSReload: after the store is reloaded with a new certificate, routes
// already open stay up, and new routes present the new certificate; after a reload
// to a certificate of a CA the peers do not trust, new routes are refused.
func TestRouteTLSReload(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	first := ca.Node(t, "a")
	stA, filesA := nodeTLS(t, first, ca)
	stB, _ := nodeTLS(t, ca.Node(t, "a-b"), ca)
	stC, _ := nodeTLS(t, ca.Node(t, "c"), ca)
	a, _ := startTLS(t, "a", stA, nil)
	b, bLogs := startTLS(t, "a-b", stB, nil) // named to sort after a: a dials it
	c, _ := startTLS(t, "c", stC, nil)
	mesh(a, b, c)
	waitFor(t, "full mesh", func() bool { return len(a.m.Routes()) == 2 && len(b.m.Routes()) == 2 && len(c.m.Routes()) == 2 })
	serialOf := func(n *testNode) string { in, _ := routeInfo(n, "a"); return in.PeerCertSerial }
	if serialOf(b) != first.Cert.SerialNumber.Text(16) {
		t.Fatalf("b sees a's certificate %s, want %s", serialOf(b), first.Cert.SerialNumber.Text(16))
	}
	cSince, _ := routeInfo(c, "a")

	write := func(l *testcerts.Leaf) {
		t.Helper()
		for file, b := range map[string][]byte{filesA.Cert: l.CertPEM, filesA.Key: l.KeyPEM} {
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := stA.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	second := ca.Node(t, "a")
	write(second)
	// The open routes stay as they are.
	time.Sleep(100 * time.Millisecond)
	if in, ok := routeInfo(c, "a"); !ok || !in.Since.Equal(cSince.Since) || in.PeerCertSerial != first.Cert.SerialNumber.Text(16) {
		t.Fatalf("c's route to a after the reload: %+v (was %+v)", in, cSince)
	}
	// A new route (b drops it; a dials again) has the new certificate.
	b.m.Drop("a")
	waitFor(t, "a new route with the new certificate", func() bool { return serialOf(b) == second.Cert.SerialNumber.Text(16) })

	// A certificate of a CA nobody else trusts: new routes are refused, open ones stay.
	before := b.m.AuthFailures()
	write(testcerts.NewCA(t, "rogue CA").Node(t, "a"))
	b.m.Drop("a")
	waitFor(t, "b refusing a's new certificate", func() bool {
		return b.m.AuthFailures() > before && strings.Contains(bLogs.String(), "route refused: TLS")
	})
	if _, ok := routeInfo(b, "a"); ok {
		t.Fatal("b has a route to a with the rogue certificate")
	}
	if in, ok := routeInfo(c, "a"); !ok || !in.Since.Equal(cSince.Since) {
		t.Fatalf("c's route to a was not kept: %+v", in)
	}
}

// TestNewManagerTLSNeedsClientCertificates: a store that does not require client
// certificates, or has no CA, is refused.
func TestNewManagerTLSNeedsClientCertificates(t *testing.T) {
	set := testcerts.New(t)
	st, err := tlsconf.New(tlsconf.Settings{CertFile: set.ServerFiles.Cert, KeyFile: set.ServerFiles.Key, CAFile: set.CAFile, ClientAuth: "verify"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewManager(Config{Broker: broker.New(), Local: interest.NewLocal(), TLS: st,
		Hello: wire.RouteHello{NodeName: "a", NodeID: "a-id"}}); err == nil || !strings.Contains(err.Error(), `client auth "require"`) {
		t.Fatalf("a store with client auth verify: %v", err)
	}
}

// TestCheckCertificate: a node's certificate needs both key usages and, unless any
// name goes, the node's name.
func TestCheckCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	if err := CheckCertificate(ca.Node(t, "n1").Cert, "n1", false); err != nil {
		t.Fatalf("a node certificate: %v", err)
	}
	cnOnly := ca.Issue(t, testcerts.Options{CommonName: "n1", Peer: true}).Cert
	if err := CheckCertificate(cnOnly, "n1", false); err != nil {
		t.Fatalf("a certificate naming the node in its common name only: %v", err)
	}
	if err := CheckCertificate(ca.Node(t, "n2").Cert, "n1", false); err == nil || !strings.Contains(err.Error(), `does not name node "n1"`) {
		t.Fatalf("another node's certificate: %v", err)
	}
	if err := CheckCertificate(ca.Node(t, "n2").Cert, "n1", true); err != nil {
		t.Fatalf("another node's certificate, any name: %v", err)
	}
	server := ca.Issue(t, testcerts.Options{CommonName: "n1", Server: true}).Cert
	if err := CheckCertificate(server, "n1", false); err == nil || !strings.Contains(err.Error(), "lacks extended key usage clientAuth") {
		t.Fatalf("a server-only certificate: %v", err)
	}
	client := ca.Issue(t, testcerts.Options{CommonName: "n1"}).Cert
	if err := CheckCertificate(client, "n1", false); err == nil || !strings.Contains(err.Error(), "lacks extended key usage serverAuth") {
		t.Fatalf("a client-only certificate: %v", err)
	}
}

func TestLooksLikeTLS(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want bool
	}{
		{[]byte{0x16, 0x03, 0x01, 0x02, 0x00}, true}, // ClientHello
		{[]byte{0x15, 0x03, 0x03, 0x00, 0x02}, true}, // alert
		{[]byte{0x20, 0x03, 0x01}, false},            // RHELLO
		{[]byte{0x16, 0x03}, false},                  // too short to tell
		{[]byte{0x09, 0x10, 0x07}, false},            // ERR
	} {
		if got := looksLikeTLS(tc.b); got != tc.want {
			t.Errorf("looksLikeTLS(% x) = %v", tc.b, got)
		}
	}
	if tlsRefusal(io.EOF) || tlsRefusal(errors.New("i/o timeout")) {
		t.Error("EOF or a timeout taken for a TLS refusal")
	}
	if !tlsRefusal(x509.UnknownAuthorityError{}) {
		t.Error("an unknown authority not taken for a TLS refusal")
	}
}
