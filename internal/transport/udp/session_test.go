package udp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestSessionEchoLoopback: a session over real sockets on loopback carries a byte
// stream both ways intact.
// arqData begins an ARQ data datagram (package arq's wire format: version 1, data
// flag); followed by 1, 3, 1, 'x' it is packet 1 carrying the message "x".
const arqData = 0x11

func TestSessionEchoLoopback(t *testing.T) {
	l, c := echoSession(t)
	data := make([]byte, 2<<20)
	_, _ = rand.Read(data)
	go func() { _, _ = c.Write(data) }()
	got := make([]byte, len(data))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back: %v (stats %+v)", err, c.Stats())
	}
	if !bytes.Equal(got, data) {
		t.Fatal("echoed bytes differ")
	}
	// A bulk stream is sent with segmentation offload and, on Linux, arrives
	// coalesced: runs of datagrams per read, taken apart again above.
	if n := l.Stats().Coalesced; runtime.GOOS == "linux" && n == 0 {
		t.Fatal("no coalesced reads on loopback: receive offload is off")
	}
}

// TestHandshakeNoAmplification: before a client proves its address the server never
// answers with more bytes than it got, and keeps no session for unproven sources;
// with encryption on too.
func TestHandshakeNoAmplification(t *testing.T) {
	priv, pub := testKeys(t)
	t.Run("plain", func(t *testing.T) { testNoAmplification(t, Config{}, Config{}) })
	t.Run("encrypted", func(t *testing.T) { testNoAmplification(t, Config{PrivateKey: priv}, Config{ServerKey: pub}) })
}

func testNoAmplification(t *testing.T, lcfg, dcfg Config) {
	l, err := Listen("127.0.0.1:0", lcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	send := func(b []byte) (int, []byte) {
		_, _ = pc.WriteTo(b, l.Addr())
		_ = pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 2048)
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return 0, nil
		}
		return n, buf[:n]
	}
	init := make([]byte, minInit)
	init[0] = kindInit
	binary.BigEndian.PutUint64(init[1:], 42)
	n, cookie := send(init)
	if n == 0 || n > len(init) || cookie[0] != kindCookie {
		t.Fatalf("cookie answer of %d bytes to a %d-byte init", n, len(init))
	}
	if n, _ := send(init[:100]); n != 0 {
		t.Fatal("an init shorter than the minimum got an answer")
	}
	// A forged cookie gets nothing, an unknown session id a reset no larger than
	// what was sent, and no session is made.
	var mode byte
	var msg1 []byte
	if !dcfg.ServerKey.IsZero() {
		h, err := newClientHandshake(dcfg, 42)
		if err != nil {
			t.Fatal(err)
		}
		mode, msg1 = h.mode, h.msg1
	}
	bad := handshakeInit2(42, cookie[9:33], mode, msg1)
	bad[20] ^= 0xff
	if n, _ := send(bad); n != 0 {
		t.Fatal("a forged cookie was answered")
	}
	data := []byte{kindData, 1, 2, 3, 4, 5, 6, 7, 8, arqData, 1, 3, 1, 'x'}
	wantReset := sessionHdr
	if !lcfg.PrivateKey.IsZero() {
		// A reset from a listener with a key carries the session's token: it
		// answers only datagrams at least as long, as sealed ones always are.
		if n, _ := send(data); n != 0 {
			t.Fatalf("a %d-byte datagram got a %d-byte reset", len(data), n)
		}
		data = append(data, make([]byte, sealOverhead)...)
		wantReset += resetTokenLen
	}
	n, b := send(data)
	if n != wantReset || b[0] != kindReset || !bytes.Equal(b[1:9], data[1:9]) {
		t.Fatalf("data for an unknown session: answer %x, want a reset", b)
	}
	if tok := resetToken(lcfg.PrivateKey, binary.BigEndian.Uint64(data[1:9])); n > sessionHdr && !bytes.Equal(b[sessionHdr:], tok[:]) {
		t.Fatalf("reset token %x, want %x", b[sessionHdr:], tok)
	}
	if n, _ := send(data[:5]); n != 0 {
		t.Fatal("a datagram shorter than the session header was answered")
	}
	l.mu.Lock()
	sessions := len(l.sessions)
	l.mu.Unlock()
	if sessions != 0 {
		t.Fatalf("%d sessions made from unproven sources", sessions)
	}
	// The genuine cookie opens a session.
	good := handshakeInit2(42, cookie[9:33], mode, msg1)
	if n, acc := send(good); n > len(good) || n < acceptPlain || acc[0] != kindAccept {
		t.Fatalf("genuine cookie: answer %d bytes", n)
	}
}

// TestSessionSurvivesAddressChange: the client's datagrams start coming from another
// port mid-session (NAT rebinding) and the session goes on.
func TestSessionSurvivesAddressChange(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := Dial(l.Addr().String(), Config{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-accepted
	if _, err := c.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := srv.Read(buf); err != nil || string(buf[:n]) != "before" {
		t.Fatalf("before: %q %v", buf[:n], err)
	}
	// Move the client to a new socket (a new source port), keeping its session.
	npc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	old := c.pc
	c.mu.Lock()
	c.pc, c.bc = npc, newBatchConn(npc)
	c.mu.Unlock()
	go func() {
		b := make([]byte, readMax)
		for {
			n, from, err := npc.ReadFrom(b)
			if err != nil {
				return
			}
			if b[0] == kindData {
				c.datagram(b[:n], from, time.Now())
				c.inputDone(time.Now())
			}
		}
	}()
	defer npc.Close()
	_ = old // still open, as a client behind a NAT keeps its socket; only the port seen changes
	if _, err := c.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Read(buf); err != nil || string(buf[:n]) != "after" {
		t.Fatalf("after rebinding: %q %v", buf[:n], err)
	}
	if _, err := srv.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "reply" {
		t.Fatalf("reply to the new address: %q %v", buf[:n], err)
	}
}

// TestSessionResetAfterServerRestart: a server that lost its sessions (it crashed
// and came back on the same port) answers a client's datagrams with a reset, and
// the client's session ends at once with ErrReset instead of retransmitting until
// its idle timeout. A reset from another address is ignored.
func TestSessionResetAfterServerRestart(t *testing.T) {
	l, c := echoSession(t)
	addr := l.Addr().String()
	buf := make([]byte, 16)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf[:5]); err != nil {
		t.Fatal(err)
	}

	// A reset for our session from a stranger changes nothing.
	stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	reset := make([]byte, sessionHdr)
	reset[0] = kindReset
	binary.BigEndian.PutUint64(reset[1:], c.id)
	clientAddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: c.pc.LocalAddr().(*net.UDPAddr).Port}
	if _, err := stranger.WriteTo(reset, clientAddr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Write([]byte("still")); err != nil {
		t.Fatalf("after a stranger's reset: %v", err)
	}
	if _, err := io.ReadFull(c, buf[:5]); err != nil || string(buf[:5]) != "still" {
		t.Fatalf("after a stranger's reset: %q %v", buf[:5], err)
	}

	// The server crashes: its socket goes away without a word to the client.
	crash(l)
	l2, err := Listen(addr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	start := time.Now()
	if _, err := c.Write([]byte("anyone?")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(buf)
	if !errors.Is(err, ErrReset) {
		t.Fatalf("read after the server restarted: %v, want ErrReset", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("reset noticed after %v", took)
	}
	// Writing to the ended session says why it ended, as a TCP reset does.
	if _, err := c.Write([]byte("again")); !errors.Is(err, ErrReset) {
		t.Fatalf("write after the reset: %v, want ErrReset", err)
	}
}

// TestFloodLeavesSessionsAlone: a bounded flood of junk — random bytes, inits,
// forged cookies, data and pings for made-up sessions — while a real session
// carries 1 MiB: the transfer completes intact, the flood makes no session, and
// the flooder gets back far fewer bytes than it sent (resets are rate-limited).
func TestFloodLeavesSessionsAlone(t *testing.T) {
	l, c := echoSession(t)

	flooder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer flooder.Close()
	var back, resets atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := flooder.ReadFrom(buf)
			if err != nil {
				return
			}
			back.Add(int64(n))
			if buf[0] == kindReset {
				resets.Add(1)
			}
		}
	}()
	floodStart := time.Now()
	sent := int64(0)
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		junk := make([]byte, 300)
		for i := range 50000 {
			_, _ = rand.Read(junk)
			n := 9 + i%len(junk[9:])
			switch i % 5 {
			case 0: // random bytes
			case 1:
				junk[0] = kindInit
				n = minInit
			case 2:
				junk[0] = kindInit2
				n = minInit
			case 3:
				junk[0] = kindData
			case 4:
				junk[0] = kindPing
				n = sessionHdr
			}
			if _, err := flooder.WriteTo(junk[:n], l.Addr()); err == nil {
				sent += int64(n)
			}
		}
	}()

	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	go func() { _, _ = c.Write(data) }()
	got := make([]byte, len(data))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("transfer under a flood: %v (stats %+v)", err, c.Stats())
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bytes differ")
	}
	<-floodDone
	floodTime := time.Since(floodStart)
	time.Sleep(100 * time.Millisecond)
	l.mu.Lock()
	sessions := len(l.sessions)
	l.mu.Unlock()
	if sessions != 1 {
		t.Fatalf("%d sessions after the flood, want the one real session", sessions)
	}
	// Cookies answer inits one to one but are smaller; resets are rate-limited.
	if b := back.Load(); b*2 > sent {
		t.Fatalf("the flooder sent %d bytes and got %d back", sent, b)
	}
	if n, most := resets.Load(), resetBurst+int64(floodTime.Seconds()*resetRate)+10; n > most {
		t.Fatalf("%d resets for 20,000 datagrams to made-up sessions in %v, want at most %d", n, floodTime, most)
	}
}

// echoSession starts a listener on loopback whose sessions echo what they get and
// returns it with a client session to it; both close when the test ends.
func echoSession(t *testing.T) (*Listener, *Conn) {
	t.Helper()
	l, err := Listen("127.0.0.1:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	c, err := Dial(l.Addr().String(), Config{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return l, c
}
