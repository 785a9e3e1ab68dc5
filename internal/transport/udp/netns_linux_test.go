package udp

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests here run a session between two network namespaces the test creates,
// joined by a veth pair, with random loss from the iptables statistic match (this
// kernel has no netem) and a blackout made by dropping everything. They need root;
// TERN_NO_NETNS=1 skips them on machines that cannot create namespaces.

type netns struct {
	t            *testing.T
	a, b         string // namespace names
	addrA, addrB string
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newNetns(t *testing.T) *netns {
	if os.Getenv("TERN_NO_NETNS") == "1" {
		t.Skip("TERN_NO_NETNS=1")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s missing: run scripts/deps.sh (or TERN_NO_NETNS=1 to skip)", tool)
		}
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	n := &netns{t: t, a: "tern-a-" + id, b: "tern-b-" + id, addrA: "10.197.0.1", addrB: "10.197.0.2"}
	run(t, "ip", "netns", "add", n.a)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.a).Run() })
	run(t, "ip", "netns", "add", n.b)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.b).Run() })
	va, vb := "tva"+id, "tvb"+id
	run(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	run(t, "ip", "link", "set", va, "netns", n.a)
	run(t, "ip", "link", "set", vb, "netns", n.b)
	for _, s := range []struct{ ns, dev, addr string }{{n.a, va, n.addrA}, {n.b, vb, n.addrB}} {
		run(t, "ip", "netns", "exec", s.ns, "ip", "addr", "add", s.addr+"/24", "dev", s.dev)
		run(t, "ip", "netns", "exec", s.ns, "ip", "link", "set", s.dev, "up")
		run(t, "ip", "netns", "exec", s.ns, "ip", "link", "set", "lo", "up")
	}
	return n
}

// in runs fn on an OS thread inside namespace ns; sockets fn creates stay in it.
func in(t *testing.T, ns string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("enter namespace %s: %v", ns, err)
	}
}

// loss drops a random share of the UDP datagrams entering each namespace.
func (n *netns) loss(p float64) {
	for _, ns := range []string{n.a, n.b} {
		run(n.t, "ip", "netns", "exec", ns, "iptables", "-F", "INPUT")
		if p > 0 {
			run(n.t, "ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-p", "udp", "-m", "statistic",
				"--mode", "random", "--probability", fmt.Sprint(p), "-j", "DROP")
		}
	}
}

func (n *netns) blackout(on bool) {
	for _, ns := range []string{n.a, n.b} {
		if on {
			run(n.t, "ip", "netns", "exec", ns, "iptables", "-I", "INPUT", "-p", "udp", "-j", "DROP")
		} else {
			run(n.t, "ip", "netns", "exec", ns, "iptables", "-D", "INPUT", "-p", "udp", "-j", "DROP")
		}
	}
}

// session opens a listener in B and a client in A and returns both ends.
func (n *netns) session(t *testing.T, lcfg, dcfg Config) (client *Conn, server io.ReadWriteCloser) {
	var l *Listener
	in(t, n.b, func() {
		var err error
		if l, err = Listen(n.addrB+":17499", lcfg); err != nil {
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
	in(t, n.a, func() {
		var err error
		if client, err = Dial(n.addrB+":17499", dcfg, 20*time.Second); err != nil {
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
	n := newNetns(t)
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
	n := newNetns(t)
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
