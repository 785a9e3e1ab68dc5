package udp

import (
	"io"
	"strconv"
	"testing"
	"time"
)

// BenchmarkSessionLoopback streams b.N writes of the given size from a client to a
// server over loopback and waits until the server has read them all.
func BenchmarkSessionLoopback(b *testing.B) {
	for _, size := range []int{16, 1024} {
		b.Run(byteSize(size), func(b *testing.B) { benchLoopback(b, size, Config{}, Config{}) })
	}
}

// BenchmarkSessionLoopbackEncrypted is BenchmarkSessionLoopback over a Noise session.
func BenchmarkSessionLoopbackEncrypted(b *testing.B) {
	priv, pub := testKeys(b)
	for _, size := range []int{16, 1024} {
		b.Run(byteSize(size), func(b *testing.B) {
			benchLoopback(b, size, Config{PrivateKey: priv}, Config{ServerKey: pub})
		})
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func benchLoopback(b *testing.B, size int, lcfg, dcfg Config) {
	l, err := Listen("127.0.0.1:0", lcfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	total := int64(size) * int64(b.N)
	done := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, _ := io.CopyN(io.Discard, c, total)
		done <- n
	}()
	c, err := Dial(l.Addr().String(), dcfg, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	if n := <-done; n != total {
		b.Fatalf("server read %d of %d bytes (stats %+v)", n, total, c.Stats())
	}
	b.StopTimer()
	st := c.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(st.Retransmits), "retrans")
}
