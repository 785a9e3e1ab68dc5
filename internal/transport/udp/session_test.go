package udp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// TestSessionEchoLoopback: a session over real sockets on loopback carries a byte
// stream both ways intact.
func TestSessionEchoLoopback(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
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
	defer c.Close()
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
	// A forged cookie and unknown session ids get nothing, and no session is made.
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
	data := []byte{kindData, 1, 2, 3, 4, 5, 6, 7, 8, version | flagData, 1, 3, 1, 'x'}
	if n, _ := send(data); n != 0 {
		t.Fatal("data for an unknown session was answered")
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
