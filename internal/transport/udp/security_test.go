package udp

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

func testKeys(t testing.TB) (priv, pub Key) {
	t.Helper()
	priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return priv, priv.Public()
}

// session opens a listener with lcfg and dials it at the address addr returns (the
// listener's own, or a proxy's); it returns both ends.
func session(t testing.TB, lcfg, dcfg Config, addr func(net.Addr) string) (*Conn, *Conn, *Listener) {
	t.Helper()
	l, err := Listen("127.0.0.1:0", lcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	target := l.Addr().String()
	if addr != nil {
		target = addr(l.Addr())
	}
	c, err := Dial(target, dcfg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case s := <-accepted:
		return c, s.(*Conn), l
	case <-time.After(5 * time.Second):
		t.Fatal("no session accepted")
	}
	return nil, nil, nil
}

// roundTrip sends n random bytes each way and checks they arrive intact.
func roundTrip(t *testing.T, a, b *Conn, n int) {
	t.Helper()
	for _, dir := range [][2]*Conn{{a, b}, {b, a}} {
		data := make([]byte, n)
		_, _ = rand.Read(data)
		go func() { _, _ = dir[0].Write(data) }()
		got := make([]byte, n)
		_ = dir[1].SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(dir[1], got); err != nil {
			t.Fatalf("read: %v (sender stats %+v, receiver stats %+v)", err, dir[0].Stats(), dir[1].Stats())
		}
		if !bytes.Equal(got, data) {
			t.Fatal("bytes differ")
		}
	}
}

// TestEncryptedSession: a client with the server's public key gets an encrypted
// session (with and without a pre-shared key) that carries data both ways.
func TestEncryptedSession(t *testing.T) {
	priv, pub := testKeys(t)
	psk, _ := GenerateKey()
	for name, keys := range map[string][2]Config{
		"NK":     {{PrivateKey: priv}, {ServerKey: pub}},
		"NKpsk0": {{PrivateKey: priv, PSK: psk}, {ServerKey: pub, PSK: psk}},
	} {
		t.Run(name, func(t *testing.T) {
			c, s, _ := session(t, keys[0], keys[1], nil)
			if c.sec == nil || s.sec == nil {
				t.Fatal("session not encrypted")
			}
			roundTrip(t, c, s, 512<<10)
			if st := s.Stats(); st.Forged != 0 || st.Replayed != 0 {
				t.Fatalf("drops on a clean path: %+v", st)
			}
		})
	}
}

// TestHandshakeRefusals: every mismatch of keys fails Dial at once with an error
// that says which.
func TestHandshakeRefusals(t *testing.T) {
	priv, pub := testKeys(t)
	_, otherPub := testKeys(t)
	psk, _ := GenerateKey()
	otherPSK, _ := GenerateKey()
	for _, tc := range []struct {
		name       string
		lcfg, dcfg Config
		want       error
	}{
		{"wrong server key", Config{PrivateKey: priv}, Config{ServerKey: otherPub}, ErrAuthentication},
		{"plain client, server with key", Config{PrivateKey: priv}, Config{}, ErrEncryptionRequired},
		{"client with key, plain server", Config{}, Config{ServerKey: pub}, ErrNotEncrypted},
		{"wrong psk", Config{PrivateKey: priv, PSK: psk}, Config{ServerKey: pub, PSK: otherPSK}, ErrAuthentication},
		{"client without psk", Config{PrivateKey: priv, PSK: psk}, Config{ServerKey: pub}, ErrAuthentication},
		{"client with psk, server without", Config{PrivateKey: priv}, Config{ServerKey: pub, PSK: psk}, ErrAuthentication},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen("127.0.0.1:0", tc.lcfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			start := time.Now()
			c, err := Dial(l.Addr().String(), tc.dcfg, 5*time.Second)
			if err == nil {
				c.Close()
				t.Fatal("session opened")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %v: the refusal should end Dial at once", d)
			}
			if n := l.Stats().Sessions; n != 0 {
				t.Fatalf("%d sessions kept for refused clients", n)
			}
		})
	}
}

// proxy relays datagrams between one client and a listener; mangle returns what to
// forward in place of each datagram.
type proxy struct {
	pc     *net.UDPConn
	mu     sync.Mutex
	client net.Addr
	mangle func(toServer bool, b []byte) [][]byte
}

func startProxy(t testing.TB, server net.Addr, mangle func(toServer bool, b []byte) [][]byte) *proxy {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{pc: pc, mangle: mangle}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, readMax)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			toServer := from.String() != server.String()
			to := server
			p.mu.Lock()
			if toServer {
				p.client = from
			} else {
				to = p.client
			}
			p.mu.Unlock()
			for _, d := range mangle(toServer, bytes.Clone(buf[:n])) {
				_, _ = pc.WriteTo(d, to)
			}
		}
	}()
	return p
}

func (p *proxy) addr(net.Addr) string { return p.pc.LocalAddr().String() }

func sealedData(b []byte) bool { return len(b) > sessionHdr+sealOverhead && b[0] == kindData }

// TestTamperedDatagramsDropped: datagrams with a flipped bit anywhere after the kind
// fail authentication and are dropped; the ARQ resends them and the session goes on.
func TestTamperedDatagramsDropped(t *testing.T) {
	priv, pub := testKeys(t)
	var mu sync.Mutex
	count := 0
	var p *proxy
	c, s, _ := session(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, func(a net.Addr) string {
		p = startProxy(t, a, func(_ bool, b []byte) [][]byte {
			if !sealedData(b) {
				return [][]byte{b}
			}
			mu.Lock()
			count++
			i := count
			mu.Unlock()
			if i%7 == 0 {
				// Flip one bit: in the session id, the counter, the ciphertext or the tag.
				pos := 1 + i%(len(b)-1)
				if pos < sessionHdr {
					pos = len(b) - 1 // a changed id would just miss the session
				}
				b[pos] ^= 1 << (i % 8)
			}
			return [][]byte{b}
		})
		return p.addr(a)
	})
	roundTrip(t, c, s, 256<<10)
	if st, cst := s.Stats(), c.Stats(); st.Forged == 0 || cst.Forged == 0 {
		t.Fatalf("no forgeries counted: server %+v client %+v", st, cst)
	}
}

// TestReplayedDatagramsDropped: every datagram arrives twice and old ones again
// later; the replays never reach the ARQ.
func TestReplayedDatagramsDropped(t *testing.T) {
	priv, pub := testKeys(t)
	var mu sync.Mutex
	var old [][]byte
	c, s, _ := session(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, func(a net.Addr) string {
		return startProxy(t, a, func(_ bool, b []byte) [][]byte {
			if b[0] != kindData && b[0] != kindPing {
				return [][]byte{b}
			}
			mu.Lock()
			defer mu.Unlock()
			out := [][]byte{b, b}
			if len(old) > 0 {
				out = append(out, old[len(old)/2]) // an older one, out of order
			}
			old = append(old, b)
			return out
		}).addr(a)
	})
	roundTrip(t, c, s, 256<<10)
	st := s.Stats()
	if st.Replayed == 0 {
		t.Fatalf("no replays counted: %+v", st)
	}
	if st.Duplicates != 0 || c.Stats().Duplicates != 0 {
		t.Fatalf("replays reached the ARQ: server %+v, client %+v", st, c.Stats())
	}
}

// TestSpoofedCloseIgnored: with encryption, a close that anyone who saw the session
// id can forge — bare, with garbage, or a sniffed sealed datagram relabelled —
// does not end the session.
func TestSpoofedCloseIgnored(t *testing.T) {
	priv, pub := testKeys(t)
	var mu sync.Mutex
	var sniffed []byte
	c, s, l := session(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, func(a net.Addr) string {
		return startProxy(t, a, func(toServer bool, b []byte) [][]byte {
			mu.Lock()
			defer mu.Unlock()
			if toServer && sealedData(b) && sniffed == nil {
				// Withheld, so that its counter is still fresh at the server
				// when it comes back relabelled; the ARQ resends the data.
				sniffed = b
				return nil
			}
			return [][]byte{b}
		}).addr(a)
	})
	roundTrip(t, c, s, 1024)
	mu.Lock()
	relabelled := bytes.Clone(sniffed)
	mu.Unlock()
	relabelled[0] = kindClose
	bare := make([]byte, sessionHdr)
	bare[0] = kindClose
	binary.BigEndian.PutUint64(bare[1:], s.id)
	garbage := binary.BigEndian.AppendUint64(bytes.Clone(bare), 1<<40) // a fresh counter
	garbage = append(garbage, make([]byte, 16)...)
	spoofer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer spoofer.Close()
	for _, d := range [][]byte{bare, garbage, relabelled} {
		_, _ = spoofer.WriteTo(d, l.Addr())
	}
	time.Sleep(100 * time.Millisecond)
	if st := s.Stats(); st.Forged != 3 {
		t.Fatalf("forged = %d, want the 3 spoofed closes", st.Forged)
	}
	roundTrip(t, c, s, 1024) // still open, and still answering the client, not the spoofer
	// The genuine close still works.
	c.Close()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the client's close: %v, want EOF", err)
	}
}

// TestEncryptedInit2Idempotent: a retransmitted init2 gets the same accept, bytes
// and all; another Noise message under the same nonce gets nothing.
func TestEncryptedInit2Idempotent(t *testing.T) {
	priv, pub := testKeys(t)
	l, err := Listen("127.0.0.1:0", Config{PrivateKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	send := rawSender(t, l.Addr())
	const nonce = 7
	_, cookie := send(handshakeInit(nonce))
	h1, err := newClientHandshake(Config{ServerKey: pub}, nonce)
	if err != nil {
		t.Fatal(err)
	}
	init2 := handshakeInit2(nonce, cookie[9:33], modeNK, h1.msg1)
	n, first := send(init2)
	if n != acceptSealed {
		t.Fatalf("accept of %d bytes", n)
	}
	if n, again := send(init2); !bytes.Equal(again, first) {
		t.Fatalf("retransmission answered with %d other bytes", n)
	}
	h2, _ := newClientHandshake(Config{ServerKey: pub}, nonce)
	if n, _ := send(handshakeInit2(nonce, cookie[9:33], modeNK, h2.msg1)); n != 0 {
		t.Fatal("a second Noise message under a used nonce was answered")
	}
	if _, sid, msg2, _ := parseAccept(first); sid == 0 {
		t.Fatal("no session id")
	} else if _, err := h1.finish(sid, msg2); err != nil {
		t.Fatalf("the accept does not complete the handshake: %v", err)
	}
	if n := l.Stats().Sessions; n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}

func rawSender(t testing.TB, to net.Addr) func([]byte) (int, []byte) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return func(b []byte) (int, []byte) {
		_, _ = pc.WriteTo(b, to)
		_ = pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 2048)
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return 0, nil
		}
		return n, buf[:n]
	}
}

func handshakeInit(nonce uint64) []byte {
	b := make([]byte, minInit)
	b[0] = kindInit
	binary.BigEndian.PutUint64(b[1:], nonce)
	return b
}

func handshakeInit2(nonce uint64, cookie []byte, mode byte, msg1 []byte) []byte {
	b := make([]byte, minInit)
	b[0] = kindInit2
	binary.BigEndian.PutUint64(b[1:], nonce)
	copy(b[9:], cookie)
	b[init2Fixed] = mode
	copy(b[init2Fixed+1:], msg1)
	return b
}

func TestReplayWindow(t *testing.T) {
	var w replayWindow
	accept := func(n uint64) bool {
		if !w.fresh(n) {
			return false
		}
		w.mark(n)
		return true
	}
	for _, n := range []uint64{0, 2, 1, 5, 3} {
		if !accept(n) {
			t.Fatalf("%d refused", n)
		}
	}
	for _, n := range []uint64{0, 1, 2, 3, 5} {
		if accept(n) {
			t.Fatalf("%d accepted twice", n)
		}
	}
	if !accept(4) || !accept(5000) {
		t.Fatal("fresh counters refused")
	}
	if accept(5000-replayWindowSize) || accept(4) {
		t.Fatal("counter older than the window accepted")
	}
	if !accept(5000-replayWindowSize+1) || !accept(4999) {
		t.Fatal("counter inside the window refused")
	}
	if accept(maxCounter) {
		t.Fatal("the reserved counter accepted")
	}
	// Bits reused across the ring are cleared as the window moves.
	if !accept(5000+replayWindowSize-1) || !accept(5000+replayWindowSize) {
		t.Fatal("counters a window ahead refused")
	}
}

func TestParseKey(t *testing.T) {
	priv, pub := testKeys(t)
	for _, s := range []string{pub.String(), " " + pub.String() + "\n",
		hex.EncodeToString(pub[:]), base64.RawURLEncoding.EncodeToString(pub[:])} {
		if k, err := ParseKey(s); err != nil || k != pub {
			t.Fatalf("ParseKey(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "abc", pub.String()[:40], hex.EncodeToString(pub[:31])} {
		if _, err := ParseKey(s); !errors.Is(err, ErrBadKey) {
			t.Fatalf("ParseKey(%q): err %v", s, err)
		}
	}
	if priv.Public() != pub || pub == priv {
		t.Fatal("public key")
	}
}

// TestHandshakeBurst: a burst of encrypted handshakes, more than the listener keeps
// waiting for its key work, leaves a running session's data flowing; the ones it
// dropped get in when their clients send init2 again, each exactly once.
func TestHandshakeBurst(t *testing.T) {
	priv, pub := testKeys(t)
	c, s, l := session(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, nil)
	go func() { // take every session the burst opens, as a server would
		for {
			if _, err := l.Accept(); err != nil {
				return
			}
		}
	}()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	const burst = 4 * keyBacklog
	init2s := make(map[uint64][]byte, burst)
	for nonce := uint64(1000); nonce < 1000+burst; nonce++ {
		// The cookie binds the address: ask for it from the socket that sends init2.
		_, _ = pc.WriteTo(handshakeInit(nonce), l.Addr())
		buf := make([]byte, 64)
		_ = pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil || n < 33 {
			t.Fatalf("cookie for %d: %d bytes, %v", nonce, n, err)
		}
		h, err := newClientHandshake(Config{ServerKey: pub}, nonce)
		if err != nil {
			t.Fatal(err)
		}
		init2s[nonce] = handshakeInit2(nonce, buf[9:33], modeNK, h.msg1)
	}
	accepted := map[uint64]bool{}
	rounds := 0
	for ; len(accepted) < burst && rounds < 50; rounds++ {
		for nonce, b := range init2s {
			if !accepted[nonce] {
				_, _ = pc.WriteTo(b, l.Addr())
			}
		}
		if rounds == 0 {
			roundTrip(t, c, s, 64<<10) // while the burst is being worked through
		}
		buf := make([]byte, 2048)
		for {
			_ = pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				break
			}
			if nonce, sid, _, ok := parseAccept(buf[:n]); ok && sid != 0 {
				accepted[nonce] = true
			}
		}
		if rounds == 0 && len(accepted) == burst {
			t.Logf("all %d handshakes of the burst answered at once", burst)
		}
	}
	if len(accepted) != burst {
		t.Fatalf("%d of %d handshakes accepted after %d rounds", len(accepted), burst, rounds)
	}
	if n := l.Stats().Sessions; n != burst+1 {
		t.Fatalf("%d sessions, want %d (the burst and the running one)", n, burst+1)
	}
	t.Logf("%d handshakes accepted in %d rounds", burst, rounds)
	roundTrip(t, c, s, 64<<10)
}

// crash ends a listener the way a crash would: its socket goes, and no session
// hears of it.
func crash(l *Listener) {
	close(l.done)
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	_ = l.pc.Close()
}

// TestEncryptedSessionReset: an encrypted session ends at a reset only if it
// carries the session's token, which a server restarted with the same key can
// make and one with another key cannot.
func TestEncryptedSessionReset(t *testing.T) {
	priv, pub := testKeys(t)
	other, _ := testKeys(t)
	c, _, l := session(t, Config{PrivateKey: priv}, Config{ServerKey: pub}, nil)
	addr := l.Addr().String()
	crash(l)
	wrong, err := Listen(addr, Config{PrivateKey: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("anyone?")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	if _, err := c.Read(buf); errors.Is(err, ErrReset) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read while a server with another key answers: %v, want a read timeout", err)
	}
	if st := wrong.Stats(); st.Sessions != 0 {
		t.Fatalf("the other server has %d sessions", st.Sessions)
	}
	crash(wrong)
	right, err := Listen(addr, Config{PrivateKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	defer right.Close()
	start := time.Now()
	// The client still resends its first message, so the reset may come before
	// this write, which then fails with it.
	if _, err := c.Write([]byte("anyone?")); err != nil && !errors.Is(err, ErrReset) {
		t.Fatalf("write after the server restarted with its key: %v, want success or ErrReset", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); !errors.Is(err, ErrReset) {
		t.Fatalf("read after the server restarted with its key: %v, want ErrReset", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("reset noticed after %v", took)
	}
}
