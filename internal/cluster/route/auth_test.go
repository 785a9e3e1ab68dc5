package route

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/secret"
	"github.com/tern-mq/tern/internal/wire"
)

var (
	testSecret  = bytes.Repeat([]byte("tern-test-secret"), 2)
	otherSecret = bytes.Repeat([]byte("another-secret!!"), 2)
)

// exchangePair is the two ends of one connection's proofs: the hellos as each end
// sent them, with fresh nonces.
func exchangePair(t *testing.T, key []byte) (dialer, acceptor *authExchange, dh, ah []byte) {
	t.Helper()
	dh, ah = helloBodyFor(t, "a", "a-id"), helloBodyFor(t, "b", "b-id")
	return newAuthExchange(key, true, dh, ah), newAuthExchange(key, false, ah, dh), dh, ah
}

func helloBodyFor(t *testing.T, name, id string) []byte {
	t.Helper()
	nonce, err := newNonce()
	if err != nil {
		t.Fatal(err)
	}
	return helloBody(wire.AppendRouteHello(nil, &wire.RouteHello{Version: wire.Version, Cluster: "c", NodeName: name,
		NodeID: id, RouteAddr: "127.0.0.1:1", ClientURLs: []string{"tern://127.0.0.1:2"}, Nonce: nonce}))
}

// TestAuthExchange: each end verifies the other's proof, and nothing else: not a
// tampered proof, not a proof from another connection (other nonces), not its own
// proof sent back (the wrong direction), not a proof made with another key or over
// a hello changed on the way.
func TestAuthExchange(t *testing.T) {
	key := secret.RouteKey(testSecret)
	d, a, dh, ah := exchangePair(t, key)
	dp, ap := d.proof(), a.proof()
	if len(dp) != wire.RouteAuthLen || len(ap) != wire.RouteAuthLen {
		t.Fatalf("proofs of %d and %d bytes", len(dp), len(ap))
	}
	if err := a.verify(dp); err != nil {
		t.Fatalf("the acceptor refuses the dialer's proof: %v", err)
	}
	if err := d.verify(ap); err != nil {
		t.Fatalf("the dialer refuses the acceptor's proof: %v", err)
	}
	if bytes.Equal(dp, ap) {
		t.Fatal("both directions have the same proof")
	}

	refused := func(what string, ex *authExchange, proof []byte) {
		t.Helper()
		if err := ex.verify(proof); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", what, err)
		}
	}
	for i := range dp {
		tampered := bytes.Clone(dp)
		tampered[i] ^= 1 << (i % 8)
		refused("a proof with a flipped bit", a, tampered)
	}
	refused("a truncated proof", a, dp[:len(dp)-1])
	refused("an empty proof", a, nil)
	refused("the acceptor's own proof reflected back", a, ap)
	refused("the dialer's own proof reflected back", d, dp)

	// A replay: the dialer's proof from this connection, on a new connection where
	// the acceptor drew another nonce.
	a2 := newAuthExchange(key, false, helloBodyFor(t, "b", "b-id"), dh)
	refused("a proof replayed on a connection with a new nonce", a2, dp)
	if err := a2.verify(newAuthExchange(key, true, dh, a2.acceptorHello).proof()); err != nil {
		t.Fatalf("the new connection's own proof: %v", err)
	}

	refused("a proof made with another secret", a, newAuthExchange(secret.RouteKey(otherSecret), true, dh, ah).proof())
	refused("a proof made with the gossip key", a, newAuthExchange(secret.GossipKey(testSecret), true, dh, ah).proof())
	// A node in the middle changing the acceptor's client URLs on the way.
	changed := bytes.Replace(ah, []byte("127.0.0.1:2"), []byte("10.6.6.6:2"), 1)
	refused("a proof over a hello changed on the way", newAuthExchange(key, false, changed, dh),
		newAuthExchange(key, true, dh, ah).proof())
}

func TestAuthPolicy(t *testing.T) {
	with := &wire.RouteHello{Flags: wire.HelloAuth}
	without := &wire.RouteHello{}
	if authPolicy(true, with) != nil || authPolicy(false, without) != nil {
		t.Fatal("matching ends refused")
	}
	if err := authPolicy(true, without); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "does not offer") {
		t.Errorf("a peer without the secret: %v", err)
	}
	if err := authPolicy(false, with); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "this node does not have") {
		t.Errorf("a node without the secret: %v", err)
	}
}

// logBuffer collects a node's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startSecured starts a node with the route key of sec (none for nil), logging to
// the returned buffer.
func startSecured(t *testing.T, name string, sec []byte) (*testNode, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	n := startNodeWith(t, "t", name, name+"-id", func(c *Config) {
		if sec != nil {
			c.AuthKey = secret.RouteKey(sec)
		}
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return n, logs
}

// TestRoutesWithSecret: nodes with the same secret form a mesh and carry messages.
func TestRoutesWithSecret(t *testing.T) {
	a, _ := startSecured(t, "a", testSecret)
	b, _ := startSecured(t, "b", testSecret)
	c, _ := startSecured(t, "c", testSecret)
	mesh(a, b, c)
	waitFor(t, "full mesh", func() bool { return len(a.m.Routes()) == 2 && len(b.m.Routes()) == 2 && len(c.m.Routes()) == 2 })
	onC := &inbox{}
	subscribe(t, c, onC, "secure.>", "")
	waitFor(t, "c's interest at a", func() bool { return interestOf(a, "c") == 1 })
	publish(a, &broker.Message{Subject: []byte("secure.x"), Payload: []byte("hi")})
	waitFor(t, "delivery on c", func() bool { return onC.count() == 1 })
	for _, n := range []*testNode{a, b, c} {
		if f := n.m.AuthFailures(); f != 0 {
			t.Errorf("%s counted %d authentication failures", n.name, f)
		}
	}
}

// TestRoutesRefuseWithoutTheSecret: a node with another secret, and one with none,
// get no route to nodes with the secret, whichever end dials; both ends log the
// refusal, which never shows the secret, and count it.
func TestRoutesRefuseWithoutTheSecret(t *testing.T) {
	a, aLogs := startSecured(t, "a", testSecret)
	b, _ := startSecured(t, "b", testSecret)
	for _, tc := range []struct {
		name   string
		sec    []byte
		aSays  string // what a logs about it
		itSays string // what it logs about a
	}{
		{"m-wrong", otherSecret, "proof of the cluster secret does not verify", "proof of the cluster secret does not verify"},
		{"0-none", nil, "does not offer to prove the cluster secret", "requires the cluster secret, which this node does not have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.m.AuthFailures()
			x, xLogs := startSecured(t, tc.name, tc.sec)
			mesh(a, b, x) // "0-none" sorts first and dials; "m-wrong" is dialled by a and b
			waitFor(t, "the refusals logged on both ends", func() bool {
				return strings.Contains(aLogs.String(), tc.aSays) && strings.Contains(xLogs.String(), tc.itSays) &&
					a.m.AuthFailures() > before && x.m.AuthFailures() > 0
			})
			waitFor(t, "a and b meshed", func() bool { return interestOf(a, "b") >= 0 && interestOf(b, "a") >= 0 })
			time.Sleep(200 * time.Millisecond) // several redials
			if r := x.m.Routes(); len(r) != 0 {
				t.Fatalf("%s has routes %+v", tc.name, r)
			}
			for _, n := range []*testNode{a, b} {
				if interestOf(n, tc.name) != -1 {
					t.Fatalf("%s has a route to %s", n.name, tc.name)
				}
			}
			for _, l := range []string{aLogs.String(), xLogs.String()} {
				if !strings.Contains(l, "route refused: peer not authenticated") {
					t.Errorf("no refusal logged: %s", l)
				}
				for _, s := range [][]byte{testSecret, otherSecret, secret.RouteKey(testSecret)} {
					if strings.Contains(l, string(s)) {
						t.Fatal("a log shows the secret")
					}
				}
			}
			a.m.Drop(tc.name)
			b.m.Drop(tc.name)
			x.m.Shutdown()
		})
	}
	// a and b still carry messages.
	onB := &inbox{}
	subscribe(t, b, onB, "after", "")
	waitFor(t, "b's interest at a", func() bool { return interestOf(a, "b") == 1 })
	publish(a, &broker.Message{Subject: []byte("after")})
	waitFor(t, "delivery on b", func() bool { return onB.count() == 1 })
}

// docProof computes a route proof as docs/protocol.md describes it, apart from
// routeProof: HMAC-SHA256 under the route key of the label, the direction byte and
// the two RHELLO bodies, the dialer's first, each after its length as a uvarint.
func docProof(sec []byte, dir byte, dialerHello, acceptorHello []byte) []byte {
	mac := hmac.New(sha256.New, secret.RouteKey(sec))
	msg := append([]byte("tern route proof v1"), dir)
	msg = binary.AppendUvarint(msg, uint64(len(dialerHello)))
	msg = append(msg, dialerHello...)
	msg = binary.AppendUvarint(msg, uint64(len(acceptorHello)))
	msg = append(msg, acceptorHello...)
	mac.Write(msg)
	return mac.Sum(nil)
}

// dialSecured opens a hand-made route to addr with the secret: it sends an RHELLO
// with a nonce, reads the node's, and sends the proof prove makes of the two
// bodies. It returns the peer, both bodies, and the node's RAUTH proof, which it
// sends before it has checked ours.
func dialSecured(t *testing.T, addr, name string, prove func(ours, theirs []byte) []byte) (p *fakePeer, ours, theirs, proof []byte) {
	t.Helper()
	nonce, _ := newNonce()
	hello := wire.AppendRouteHello(nil, &wire.RouteHello{Version: wire.Version, Cluster: "t", NodeName: name, NodeID: name + "-id", Nonce: nonce})
	p = dialRaw(t, addr)
	p.send(hello)
	hf := p.next()
	if hf.Type != wire.TypeRouteHello {
		t.Fatalf("first frame %s", hf.Type)
	}
	h, err := wire.ParseRouteHello(hf.Payload)
	if err != nil || h.Flags&wire.HelloAuth == 0 || len(h.Nonce) != wire.RouteNonceLen {
		t.Fatalf("the node's RHELLO %+v (%v) asks for no proof", h, err)
	}
	ours, theirs = helloBody(hello), hf.Payload
	p.send(wire.AppendRouteAuth(nil, prove(ours, theirs)))
	f := p.next()
	if f.Type != wire.TypeRouteAuth {
		t.Fatalf("the node sent %s after RHELLO, want RAUTH", f.Type)
	}
	return p, ours, theirs, f.Payload
}

// TestRouteProofOnTheWire: a hand-made peer following docs/protocol.md is accepted
// with the right proof, and refused (ERR 7, no route) with a proof of the wrong
// direction, a tampered one, or one replayed from an earlier connection.
func TestRouteProofOnTheWire(t *testing.T) {
	a, logs := startSecured(t, "a", testSecret)

	p, ours, theirs, proof := dialSecured(t, a.addr, "z", func(ours, theirs []byte) []byte { return docProof(testSecret, 1, ours, theirs) })
	if !hmac.Equal(proof, docProof(testSecret, 2, ours, theirs)) {
		t.Fatalf("the node's proof %x is not the one docs/protocol.md describes", proof)
	}
	waitFor(t, "the route up", func() bool { return interestOf(a, "z") >= 0 })
	replay := docProof(testSecret, 1, ours, theirs)
	p.nc.Close()
	waitFor(t, "the route down", func() bool { return interestOf(a, "z") == -1 })

	for _, tc := range []struct {
		name  string
		prove func(ours, theirs []byte) []byte
	}{
		{"wrong direction", func(ours, theirs []byte) []byte { return docProof(testSecret, 2, ours, theirs) }},
		{"tampered", func(ours, theirs []byte) []byte {
			pr := docProof(testSecret, 1, ours, theirs)
			pr[7] ^= 0x10
			return pr
		}},
		{"replayed", func([]byte, []byte) []byte { return replay }},
		{"other secret", func(ours, theirs []byte) []byte { return docProof(otherSecret, 1, ours, theirs) }},
	} {
		before := a.m.AuthFailures()
		p, _, _, _ := dialSecured(t, a.addr, "z", tc.prove)
		if f := p.next(); f.Type != wire.TypeErr || f.Code != wire.CodeAuth || !strings.Contains(string(f.Payload), "does not verify") {
			t.Fatalf("%s: the node answered %s %d %q, want ERR %d", tc.name, f.Type, f.Code, f.Payload, wire.CodeAuth)
		}
		// The node counts and logs the refusal after it has sent ERR.
		waitFor(t, tc.name+" counted", func() bool { return a.m.AuthFailures() == before+1 })
		if interestOf(a, "z") != -1 {
			t.Fatalf("%s: a route is up", tc.name)
		}
	}
	waitFor(t, "4 refusals logged", func() bool {
		return strings.Count(logs.String(), "route refused: peer not authenticated") == 4
	})
	t.Logf("a refusal as logged: %s", logs.String()[strings.LastIndex(logs.String()[:len(logs.String())-1], "\n")+1:])
}
