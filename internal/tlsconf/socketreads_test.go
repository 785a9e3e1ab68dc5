//go:build unix

package tlsconf

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := l.Accept()
		accepted <- nc
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// tlsPair returns a TLS client and the server end read through BatchReads.
func tlsPair(t testing.TB) (*tls.Conn, *Conn, *socketReader) {
	t.Helper()
	cs := testcerts.New(t)
	st, err := New(baseSettings(cs))
	if err != nil {
		t.Fatal(err)
	}
	cnc, snc := tcpPair(t)
	srv := Server(snc, st.ServerConfig(), 5*time.Second)
	sr, ok := srv.NetConn().(*socketReader)
	if !ok {
		t.Fatalf("the server's socket is read through %T, not the batching reader", srv.NetConn())
	}
	cfg := cs.CA.ClientConfig(nil)
	cfg.ServerName = "127.0.0.1"
	cli := tls.Client(cnc, cfg)
	handshake(t, cli, srv)
	return cli, srv, sr
}

// handshake runs both sides' handshakes.
func handshake(t testing.TB, cli *tls.Conn, srv interface{ Handshake() error }) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Records sent in a burst come in with a few socket reads, not one or two each,
// every byte in order; the buffer goes back to the pool once drained.
func TestBatchReadsManyRecordsFewSyscalls(t *testing.T) {
	cli, srv, sr := tlsPair(t)
	const records, size = 2000, 1024
	var sent bytes.Buffer
	go func() {
		msg := make([]byte, size)
		for i := 0; i < records; i++ {
			for j := range msg {
				msg[j] = byte(i + j)
			}
			sent.Write(msg)
			if _, err := cli.Write(msg); err != nil { // one TLS record per write
				return
			}
		}
	}()
	_ = srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, records*size)
	before := sr.reads
	if _, err := io.ReadFull(srv, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatal("the bytes read differ from the bytes sent")
	}
	reads := sr.reads - before
	t.Logf("%d records of %d B in %d socket reads", records, size, reads)
	if reads >= records {
		t.Fatalf("%d socket reads for %d records: reads are not batched", reads, records)
	}
	if sr.buf != nil {
		t.Fatal("a drained connection still holds its read buffer")
	}
}

func TestBatchReadsDeadlineCloseAndEOF(t *testing.T) {
	cli, srv, _ := tlsPair(t)

	_ = srv.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := srv.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}

	// A timed-out read leaves the connection usable for reads (crypto/tls keeps
	// only write timeouts as permanent).
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cli.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "after" {
		t.Fatalf("read after a timeout: %q, %v", buf, err)
	}

	// The peer's close is an EOF.
	_ = cli.Close()
	if _, err := srv.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}

	// A close from another goroutine ends a read waiting for data.
	_, srv2, _ := tlsPair(t)
	_ = srv2.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := srv2.Read(buf); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = srv2.Conn.NetConn().Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting for data did not end when the connection closed")
	}
}

func TestBatchReadsLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if BatchReads(a) != a {
		t.Fatal("a connection that is not a socket was wrapped")
	}
	_, snc := tcpPair(t)
	w := BatchReads(snc)
	sc, ok := w.(interface{ NetConn() net.Conn })
	if !ok || sc.NetConn() != snc {
		t.Fatal("the wrapped socket is not reachable through NetConn")
	}
	if _, ok := w.(syscall.Conn); !ok {
		t.Fatal("the wrapped socket hides its descriptor (socket options, the idle poller)")
	}
}

// bufferedWrites is a client socket whose writes are sent 64 KiB at a time, as by
// a client that writes through a bufio.Writer and flushes once per wake-up.
type bufferedWrites struct {
	net.Conn
	w        *bufio.Writer
	buffered bool // false during the handshake
}

func (b *bufferedWrites) Write(p []byte) (int, error) {
	if !b.buffered {
		return b.Conn.Write(p)
	}
	return b.w.Write(p)
}

// BenchmarkTLSRead reads a stream of TLS records of 1 KiB and of 16 KiB (the size
// crypto/tls makes of a large write), sent in bursts of 64 KiB, through the
// batching reader and straight from the socket.
func BenchmarkTLSRead(b *testing.B) {
	for _, record := range []int{1 << 10, 16 << 10} {
		for _, batched := range []bool{true, false} {
			name := fmt.Sprintf("record=%d/socket", record)
			if batched {
				name = fmt.Sprintf("record=%d/batched", record)
			}
			b.Run(name, func(b *testing.B) {
				cs := testcerts.New(b)
				st, err := New(baseSettings(cs))
				if err != nil {
					b.Fatal(err)
				}
				cnc, snc := tcpPair(b)
				var srv *tls.Conn
				if batched {
					srv = tls.Server(BatchReads(snc), st.ServerConfig())
				} else {
					srv = tls.Server(snc, st.ServerConfig())
				}
				cfg := cs.CA.ClientConfig(nil)
				cfg.ServerName = "127.0.0.1"
				cfg.DynamicRecordSizingDisabled = true
				bw := &bufferedWrites{Conn: cnc, w: bufio.NewWriterSize(cnc, 64<<10)}
				cli := tls.Client(bw, cfg)
				handshake(b, cli, srv)
				bw.buffered = true
				go func() {
					msg := make([]byte, record)
					for i := 0; i < b.N; i++ {
						if _, err := cli.Write(msg); err != nil {
							return
						}
						if bw.w.Buffered() > 48<<10 || i == b.N-1 {
							if bw.w.Flush() != nil {
								return
							}
						}
					}
				}()
				b.SetBytes(int64(record))
				b.ReportAllocs()
				buf := make([]byte, 32<<10)
				for total := 0; total < b.N*record; {
					n, err := srv.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					total += n
				}
			})
		}
	}
}
