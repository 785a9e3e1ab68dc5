package outbound

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// TestInlineFlushOverTLS: a queue writing to a TLS connection whose socket is full
// never lets a write time out (a timed-out write corrupts a TLS connection for
// good): every byte arrives, in order, and Flush still never blocks.
func TestInlineFlushOverTLS(t *testing.T) {
	set := testcerts.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sraw, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server := tls.Server(sraw, &tls.Config{Certificates: []tls.Certificate{set.Server.TLS}})
	client := tls.Client(raw, &tls.Config{RootCAs: set.CA.Pool(), ServerName: "localhost"})
	t.Cleanup(func() { client.Close(); server.Close() })
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	g, err := NewGroup(Config{MaxPending: 256 << 20, WriteTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := new(Queue)
	q.Init(g, &endpoint{nc: server})

	var want []byte
	small := bytes.Repeat([]byte("0123456789abcdef"), InlineFlushMax/16/2)
	for i := 0; i < 2000; i++ { // far more than the socket buffers hold
		msg := append([]byte{byte(i)}, small...)
		want = append(want, msg...)
		b, ok := q.Reserve(len(msg))
		if !ok {
			t.Fatalf("message %d refused: the queue failed: %v", i, q.Reason())
		}
		q.Commit(append(b, msg...), len(msg))
		start := time.Now()
		q.Flush()
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Flush blocked %v", d)
		}
	}
	time.Sleep(20 * time.Millisecond) // the socket stays full a while
	got := make([]byte, len(want))
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("read %d of %d bytes: %v (pending %d, writer running %v, reason %v)", n, len(want), err, q.Pending(), q.WriterRunning(), q.Reason())
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes out of order or lost")
	}
	q.Close(nil)
	q.Finish()
}

// breaksOnTimeout is a connection that, like a WebSocket, closes when a write
// passes its deadline, and says so.
type breaksOnTimeout struct{ net.Conn }

func (b breaksOnTimeout) Write(p []byte) (int, error) {
	n, err := b.Conn.Write(p)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		b.Conn.Close()
	}
	return n, err
}

func (breaksOnTimeout) TimeoutBreaksWrites() bool { return true }

// TestInlineFlushOverFragileConn: a connection a timed-out write breaks (MQTT
// over WebSocket) gets everything through, however full its socket: the inline
// flush leaves it to the writer goroutine.
func TestInlineFlushOverFragileConn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sraw, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); sraw.Close() })
	g, err := NewGroup(Config{MaxPending: 256 << 20, WriteTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := new(Queue)
	q.Init(g, &endpoint{nc: breaksOnTimeout{sraw}})
	var want []byte
	small := bytes.Repeat([]byte("0123456789abcdef"), InlineFlushMax/16/2)
	for i := 0; i < 2000; i++ {
		msg := append([]byte{byte(i)}, small...)
		want = append(want, msg...)
		b, ok := q.Reserve(len(msg))
		if !ok {
			t.Fatalf("message %d refused: the queue failed: %v", i, q.Reason())
		}
		q.Commit(append(b, msg...), len(msg))
		q.Flush()
	}
	time.Sleep(20 * time.Millisecond) // the socket stays full a while
	got := make([]byte, len(want))
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("read %d of %d bytes: %v (reason %v)", n, len(want), err, q.Reason())
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes out of order or lost")
	}
	q.Close(nil)
	q.Finish()
}
