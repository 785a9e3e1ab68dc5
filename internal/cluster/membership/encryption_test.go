package membership

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

var (
	gossipKey  = bytes.Repeat([]byte{0x5a}, 32)
	anotherKey = bytes.Repeat([]byte{0xa5}, 32)
)

// waitLog waits until the logs have a line holding every one of parts.
func waitLog(t *testing.T, c *cluster, timeout time.Duration, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for line := range strings.Lines(c.logs.String()) {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v", parts, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEncryptedGossip: nodes with the same key form a cluster; a node with no key
// and one with another key cannot join it: they never become members, both sides
// log why, and the cluster carries on.
func TestEncryptedGossip(t *testing.T) {
	c := newCluster(t)
	keyed := func(name string, key []byte, join ...string) *Membership {
		cfg := c.config(name, join...)
		cfg.SecretKey = key
		return c.start(cfg)
	}
	a := keyed("a", gossipKey)
	b := keyed("b", gossipKey, a.Local().Addr)
	cn := keyed("c", gossipKey, b.Local().Addr)
	waitMembers(t, settle, []string{"a", "b", "c"}, a, b, cn)

	plain := keyed("plain", nil, a.Local().Addr)
	other := keyed("other", anotherKey, b.Local().Addr)
	// The keyed node refuses the plaintext push/pull and the other key's; the
	// newcomers refuse the answers.
	waitLog(t, c, 10*time.Second, "n=a", refusedNoKey)
	waitLog(t, c, 10*time.Second, "n=b", refusedOtherKey)
	waitLog(t, c, 10*time.Second, "n=plain", refusedNeedKey)
	waitLog(t, c, 10*time.Second, "n=other", refusedOtherKey)
	// Several retries later, still apart, and the others still carry on.
	time.Sleep(300 * time.Millisecond)
	waitMembers(t, time.Second, []string{"a", "b", "c"}, a, b, cn)
	if got := names(plain.Members()); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("the node without a key sees %v", got)
	}
	if got := names(other.Members()); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("the node with another key sees %v", got)
	}
	for _, ev := range drain(a, 50*time.Millisecond) {
		if ev.Node.Name == "plain" || ev.Node.Name == "other" {
			t.Fatalf("a node without the key was reported: %+v", ev)
		}
	}
	// One warning per peer and kind, however often it retried.
	lines := 0
	for line := range strings.Lines(c.logs.String()) {
		if strings.Contains(line, "n=a") && strings.Contains(line, refusedNoKey) {
			lines++
		}
	}
	if lines != 1 {
		t.Fatalf("a logged the refusal of the plaintext node %d times, want once (rate-limited)", lines)
	}
	// The cluster still notices changes: c leaves, the others see it.
	if err := cn.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, settle, []string{"a", "b"}, a, b)
}

// TestPlainMemberlistIsRefused: a memberlist node that is not this package at all,
// speaking plaintext gossip under the right cluster name, cannot join a keyed node.
func TestPlainMemberlistIsRefused(t *testing.T) {
	c := newCluster(t)
	cfg := c.config("a")
	cfg.SecretKey = gossipKey
	a := c.start(cfg)

	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.Label, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "intruder", "test", "127.0.0.1", 0, 0
	mc.LogOutput = io.Discard
	list, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = list.Shutdown() }()
	if n, err := list.Join([]string{a.Local().Addr}); err == nil || n != 0 {
		t.Fatalf("a plaintext memberlist joined a keyed node: %d, %v", n, err)
	}
	waitLog(t, c, 5*time.Second, "n=a", refusedNoKey)
	if got := names(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a lists %v", got)
	}
	if list.NumMembers() != 1 {
		t.Fatalf("the intruder lists %d members", list.NumMembers())
	}
}

// recorder is a gossip proxy in front of a node: UDP and TCP sent to its address
// are recorded and passed on to the node, and the node's UDP answers passed back.
type recorder struct {
	t      *testing.T
	tcp    net.Listener
	udp    net.PacketConn
	target string
	mu     sync.Mutex
	udpIn  [][]byte // datagrams sent to the node
	tcpIn  []byte   // stream bytes sent to the node
	wg     sync.WaitGroup
	conns  []net.Conn
	closed bool
}

func newRecorder(t *testing.T, port int, target string) *recorder {
	t.Helper()
	addr := hostPort("127.0.0.1", port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	r := &recorder{t: t, tcp: l, udp: u, target: target}
	r.wg.Add(2)
	go r.serveTCP()
	go r.serveUDP()
	t.Cleanup(r.close)
	return r
}

func (r *recorder) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns = append(r.conns, c)
	return true
}

func (r *recorder) serveTCP() {
	defer r.wg.Done()
	for {
		in, err := r.tcp.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		if !r.track(in) || !r.track(out) {
			in.Close()
			out.Close()
			return
		}
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			defer out.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 {
					r.mu.Lock()
					r.tcpIn = append(r.tcpIn, buf[:n]...)
					r.mu.Unlock()
					if _, err := out.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer r.wg.Done()
			defer in.Close()
			_, _ = io.Copy(in, out)
		}()
	}
}

func (r *recorder) serveUDP() {
	defer r.wg.Done()
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return
	}
	target, err := net.ResolveUDPAddr("udp", r.target)
	if err != nil {
		up.Close()
		return
	}
	var (
		mu   sync.Mutex
		last net.Addr
	)
	r.wg.Add(1)
	go func() { // the node's answers, back to whoever sent last
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, _, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			to := last
			mu.Unlock()
			if to != nil {
				_, _ = r.udp.WriteTo(buf[:n], to)
			}
		}
	}()
	defer up.Close()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.udpIn = append(r.udpIn, bytes.Clone(buf[:n]))
		r.mu.Unlock()
		mu.Lock()
		last = from
		mu.Unlock()
		_, _ = up.WriteTo(buf[:n], target)
	}
}

func (r *recorder) captured() (datagrams [][]byte, stream []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.udpIn), bytes.Clone(r.tcpIn)
}

func (r *recorder) close() {
	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.mu.Unlock()
	r.tcp.Close()
	r.udp.Close()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

// TestGossipOnTheWireIsEncrypted records the gossip one node sends another, UDP
// probes and the TCP push/pull of the join, through a proxy the second node
// advertises as its address. Without a key the node names, route address and tags
// are there to read; with one, nothing but the cluster name (memberlist's label,
// authenticated with the rest) is.
func TestGossipOnTheWireIsEncrypted(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"plaintext", nil}, {"encrypted", gossipKey}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			proxyPort := freePort(t, "127.0.0.1")
			bc := c.config("node-bravo-7e1f")
			bc.SecretKey, bc.uncompressed = tc.key, true
			bc.AdvertiseAddr = hostPort("127.0.0.1", proxyPort)
			bc.RouteAddr = "127.0.0.1:17401"
			// A port of its own: with 0, memberlist would advertise the port it bound.
			bc.GossipPort = freePort(t, "127.0.0.1")
			b := c.start(bc)
			rec := newRecorder(t, proxyPort, hostPort("127.0.0.1", bc.GossipPort))
			ac := c.config("node-alpha-3c9d", hostPort("127.0.0.1", proxyPort))
			ac.SecretKey, ac.uncompressed = tc.key, true
			ac.RouteAddr = "127.0.0.1:17411"
			ac.Tags = map[string]string{"zone": "secret-zone-x"}
			a := c.start(ac)
			waitMembers(t, settle, []string{"node-alpha-3c9d", "node-bravo-7e1f"}, a, b)
			deadline := time.Now().Add(5 * time.Second)
			for {
				d, _ := rec.captured()
				if len(d) >= 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("only %d datagrams sent to b within 5s", len(d))
				}
				time.Sleep(20 * time.Millisecond)
			}
			datagrams, stream := rec.captured()
			if len(stream) == 0 {
				t.Fatal("no TCP gossip recorded")
			}
			secrets := []string{"node-alpha-3c9d", "node-bravo-7e1f", "127.0.0.1:17411", "secret-zone-x"}
			seen := func(b []byte) []string {
				var out []string
				for _, s := range secrets {
					if bytes.Contains(b, []byte(s)) {
						out = append(out, s)
					}
				}
				return out
			}
			var inUDP, decrypted []string
			for _, d := range datagrams {
				inUDP = append(inUDP, seen(d)...)
				if tc.key == nil {
					continue
				}
				// What a holder of the key reads: memberlist's label, then version 1,
				// a 12-byte nonce and AES-GCM over the message with the label as
				// additional data.
				body, label, err := memberlist.RemoveLabelHeaderFromPacket(bytes.Clone(d))
				if err != nil || label != "test" || len(body) < 1+12+16 || body[0] != 1 {
					t.Fatalf("a datagram that is not label, version 1, nonce, ciphertext: %x (%v)", d, err)
				}
				for _, k := range [][]byte{anotherKey, tc.key} {
					block, _ := aes.NewCipher(k)
					gcm, _ := cipher.NewGCM(block)
					plain, err := gcm.Open(nil, body[1:13], body[13:], []byte(label))
					if bytes.Equal(k, anotherKey) {
						if err == nil {
							t.Fatal("another key opens a datagram")
						}
						continue
					}
					if err != nil {
						t.Fatalf("the key does not open a datagram: %v", err)
					}
					decrypted = append(decrypted, seen(plain)...)
				}
			}
			inTCP := seen(stream)
			t.Logf("%d datagrams and %d stream bytes to b; readable: UDP %v, TCP %v", len(datagrams), len(stream), slices.Compact(slices.Sorted(slices.Values(inUDP))), inTCP)
			if tc.key == nil {
				// The control: the recording does see what plaintext gossip carries.
				if !slices.Contains(inUDP, "node-alpha-3c9d") || !slices.Contains(inTCP, "secret-zone-x") {
					t.Fatalf("plaintext gossip not readable in the recording: UDP %v, TCP %v", inUDP, inTCP)
				}
				return
			}
			if len(inUDP) > 0 || len(inTCP) > 0 {
				t.Fatalf("encrypted gossip shows %v over UDP and %v over TCP", inUDP, inTCP)
			}
			if !slices.Contains(decrypted, "node-bravo-7e1f") {
				t.Fatalf("the datagrams, decrypted with the key, do not name the node probed: %v", decrypted)
			}
		})
	}
}

// TestKeyRefusalLines: memberlist's lines about gossip dropped over the key become
// one warning per kind and peer host, saying what to fix; other lines pass as before.
func TestKeyRefusalLines(t *testing.T) {
	logs := &logBuf{}
	w := logWriter{log: slog.New(slog.NewTextHandler(logs, nil)), limit: &rateLimit{}}
	for _, line := range []string{
		"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.9:41000",
		"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.9:41001",
		"[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=10.0.0.9:7402",
		"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.10:5000",
		"[WARN] memberlist: Got ping for unexpected node from=10.0.0.9:7402",
	} {
		_, _ = w.Write([]byte(line + "\n"))
	}
	out := logs.String()
	if n := strings.Count(out, refusedNoKey); n != 2 {
		t.Errorf("%d warnings for plaintext peers, want 2 (one per host):\n%s", n, out)
	}
	if n := strings.Count(out, refusedOtherKey); n != 1 {
		t.Errorf("%d warnings for another key, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "peer=10.0.0.10") || !strings.Contains(out, "Got ping for unexpected node") {
		t.Errorf("missing lines:\n%s", out)
	}
}

func TestStartRejectsBadGossipKey(t *testing.T) {
	c := newCluster(t)
	cfg := c.config("a")
	cfg.SecretKey = make([]byte, 20)
	if _, err := Start(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "gossip key of 20 bytes") {
		t.Fatalf("a 20-byte key: %v", err)
	}
}
