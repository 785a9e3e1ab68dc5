package udp

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/netns"
)

// The tests here run a session between two network namespaces the test creates,
// joined by a veth pair, with random loss from the iptables statistic match (this
// kernel has no netem) and a blackout made by dropping everything. They need root;
// TERN_NO_NETNS=1 skips them on machines that cannot create namespaces.

type lossyPath struct {
	t *testing.T
	*netns.Pair
}

func newLossyPath(t *testing.T) *lossyPath {
	if os.Getenv("TERN_NO_NETNS") == "1" {
		t.Skip("TERN_NO_NETNS=1")
	}
	p, err := netns.NewPair("tern-udp", 197)
	if err != nil {
		t.Fatalf("%v (TERN_NO_NETNS=1 skips these tests)", err)
	}
	t.Cleanup(p.Close)
	return &lossyPath{t: t, Pair: p}
}

// in runs fn on an OS thread inside namespace ns; sockets fn creates stay in it.
func in(t *testing.T, ns string, fn func()) {
	t.Helper()
	if err := netns.In(ns, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// loss drops a random share of the UDP datagrams entering each namespace.
func (n *lossyPath) loss(p float64) {
	if err := n.SetLoss("udp", p); err != nil {
		n.t.Fatal(err)
	}
}

func (n *lossyPath) blackout(on bool) {
	if err := n.Blackout("udp", on); err != nil {
		n.t.Fatal(err)
	}
}

// session opens a listener in B and a client in A and returns both ends.
func (n *lossyPath) session(t *testing.T, lcfg, dcfg Config) (client *Conn, server io.ReadWriteCloser) {
	var l *Listener
	in(t, n.B, func() {
		var err error
		if l, err = Listen(n.AddrB+":17499", lcfg); err != nil {
			t.Errorf("listen: %v", err)
		}
	})
	if l == nil {
		t.FailNow()
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c.(*Conn)
		}
	}()
	in(t, n.A, func() {
		var err error
		if client, err = Dial(n.AddrB+":17499", dcfg, 20*time.Second); err != nil {
			t.Errorf("dial: %v", err)
		}
	})
	if client == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close() })
	select {
	case s := <-accepted:
		return client, s
	case <-time.After(20 * time.Second):
		t.Fatal("no session accepted")
	}
	return nil, nil
}

// transfer writes size random bytes from w and reads them back at r, within limit.
func transfer(t *testing.T, w io.Writer, r io.Reader, size int, limit time.Duration) {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(data)
		errc <- err
	}()
	got := make([]byte, size)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(r, got)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("%d bytes not through within %v", size, limit)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bytes differ")
	}
}

func TestNetnsRandomLoss(t *testing.T) {
	testNetnsRandomLoss(t, Config{}, Config{}, 0.01, 0.10, 0.30)
}

// TestNetnsRandomLossEncrypted: the Noise handshake and sealed datagrams hold up on a
// lossy link; nothing lost counts as forged.
func TestNetnsRandomLossEncrypted(t *testing.T) {
	priv, pub := testKeys(t)
	testNetnsRandomLoss(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, 0.10, 0.30)
}

func testNetnsRandomLoss(t *testing.T, lcfg, dcfg Config, losses ...float64) {
	n := newLossyPath(t)
	client, server := n.session(t, lcfg, dcfg)
	for _, p := range losses {
		n.loss(p)
		transfer(t, client, server, 256<<10, 60*time.Second)
		transfer(t, server, client, 64<<10, 60*time.Second)
		st := client.Stats()
		t.Logf("loss %.0f%%: client %+v", p*100, st)
		if st.Forged != 0 || st.Replayed != 0 {
			t.Fatalf("datagrams dropped as forged or replayed on an honest path: %+v", st)
		}
	}
}

func TestNetnsBlackout(t *testing.T) {
	// Mostly waiting out the blackout, on its own pair of namespaces: in parallel
	// with the other blackout test rather than after it.
	t.Parallel()
	n := newLossyPath(t)
	client, server := n.session(t, Config{}, Config{})
	transfer(t, client, server, 64<<10, 20*time.Second)
	n.blackout(true)
	data := []byte("sent into the blackout")
	go func() { _, _ = client.Write(data) }()
	time.Sleep(10 * time.Second)
	n.blackout(false)
	got := make([]byte, len(data))
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(server, got)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after the blackout: %q %v", got, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing arrived after the blackout ended (client %+v)", client.Stats())
	}
	transfer(t, server, client, 64<<10, 20*time.Second)
}
