package tern_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// BenchmarkPublish is the cost of Publish itself: a 16-byte message into the write
// buffer, with the flusher sending to a server that routes it nowhere.
func BenchmarkPublish(b *testing.B) {
	s := startServer(b, 0)
	nc := connect(b, s)
	data := make([]byte, 16)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		_ = nc.Publish("bench", data)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPublishMsgHeaders is PublishMsg with two headers.
func BenchmarkPublishMsgHeaders(b *testing.B) {
	s := startServer(b, 0)
	nc := connect(b, s)
	m := &tern.Msg{Subject: "bench", Header: tern.Header{"sender": {"s1"}, "trace": {"abc123"}},
		Data: make([]byte, 16)}
	b.ReportAllocs()
	for b.Loop() {
		_ = nc.PublishMsg(m)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPublishSubscribe measures throughput from one publishing connection to an
// asynchronous subscriber on another: ns/op is per message delivered to the handler.
func BenchmarkPublishSubscribe(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"16B", 16}, {"1KiB", 1024}} {
		b.Run(size.name, func(b *testing.B) {
			s := startServer(b, 0)
			pub := connect(b, s)
			sub := connect(b, s, tern.PendingLimits(-1, -1))
			var got atomic.Int64
			done := make(chan struct{})
			var want int64
			if _, err := sub.Subscribe("tput", func(*tern.Msg) {
				if got.Add(1) == want {
					close(done)
				}
			}); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, size.n)
			want = int64(b.N)
			b.ReportAllocs()
			b.SetBytes(int64(size.n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = pub.Publish("tput", data)
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatalf("received %d of %d", got.Load(), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRequest is one request/reply round trip through the server.
func BenchmarkRequest(b *testing.B) {
	s := startServer(b, 0)
	responder := connect(b, s)
	nc := connect(b, s)
	if _, err := responder.Subscribe("svc", func(m *tern.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 16)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nc.Request(ctx, "svc", data); err != nil {
			b.Fatal(err)
		}
	}
}
