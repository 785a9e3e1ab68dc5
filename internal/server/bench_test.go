package server

import (
	"errors"
	"testing"

	"github.com/tern-mq/tern/internal/wire"
)

// BenchmarkPubSubLoopback measures the broker end to end over loopback TCP with the
// raw codec: one connection publishes batches of 16-byte messages, another receives.
func BenchmarkPubSubLoopback(b *testing.B) {
	s := startServer(b, func(c *Config) { c.HTTPAddr = "" })
	sub, _ := connectRaw(b, s, 0)
	pub, _ := connectRaw(b, s, 0)
	sub.send(wire.AppendSub(nil, 0, 1, "bench", "", ""))
	sub.sync()
	payload := make([]byte, 16)
	var batch []byte
	for i := 0; i < 512; i++ {
		batch = wire.AppendPub(batch, 0, "bench", "", nil, payload)
	}
	done := make(chan int)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		got := 0
		buf := make([]byte, 256<<10)
		n := 0
		for got < b.N {
			k, err := sub.nc.Read(buf[n:])
			if err != nil {
				break
			}
			n += k
			off := 0
			var f wire.Frame
			for {
				c, err := f.Decode(buf[off:n], 0)
				if errors.Is(err, wire.ErrIncomplete) {
					break
				}
				if err != nil {
					panic(err)
				}
				off += c
				got++
			}
			n = copy(buf, buf[off:n])
		}
		done <- got
	}()
	for sent := 0; sent < b.N; sent += 512 {
		k := min(512, b.N-sent)
		if _, err := pub.nc.Write(batch[:k*len(batch)/512]); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.SetBytes(16)
}
