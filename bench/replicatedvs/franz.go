package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The franz-go throughput rows: the same produce and consume workloads as Kafka's
// own tools, with a client that costs less CPU than their JVM, so that on a
// machine the client shares with the servers the servers' capacity shows more.
const (
	kindFranzProduce = "franz-produce"
	kindFranzConsume = "franz-consume"
)

// franzConfig is one franz-go throughput run.
type franzConfig struct {
	Brokers []string
	Topic   string
	Size    int
	Msgs    int
	Values  string // kafkaRow.Values
	Timeout time.Duration
}

// letterValues is the pool the valuesLetters rows cycle through: enough distinct
// values that one repeats only far beyond snappy's 64 KiB window.
const letterValues = 4096

// recordValues are the values franzProduce cycles through, each shared by the
// records that carry it (franz-go does not modify a record's value).
func recordValues(size int, kind string) [][]byte {
	if kind != valuesLetters {
		return [][]byte{make([]byte, size)}
	}
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	pool := make([][]byte, letterValues)
	for i := range pool {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte('A' + rng.IntN(26))
		}
		pool[i] = v
	}
	return pool
}

// franzProduce sends Msgs records of Size bytes as fast as the client's buffer
// allows — acks=all and idempotent, franz-go's defaults, with a 5 ms linger as
// Kafka 4's producer — and times first send to last acknowledgement.
func franzProduce(ctx context.Context, c franzConfig) (kafkaResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(c.Topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ClientID("bench-franz-producer"))
	if err != nil {
		return kafkaResult{}, err
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return kafkaResult{}, fmt.Errorf("franz produce: %w", err)
	}
	var (
		mu      sync.Mutex
		prodErr error
		acked   atomic.Int64
	)
	values := recordValues(c.Size, c.Values)
	start := time.Now()
	for i := 0; i < c.Msgs && ctx.Err() == nil; i++ {
		cl.Produce(ctx, &kgo.Record{Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if prodErr == nil {
					prodErr = err
				}
				mu.Unlock()
				return
			}
			acked.Add(1)
		})
	}
	flushErr := cl.Flush(ctx)
	secs := time.Since(start).Seconds()
	res := kafkaResult{Records: acked.Load(), Seconds: secs}
	if secs > 0 {
		res.MsgsPerSec = float64(res.Records) / secs
		res.MBPerSec = res.MsgsPerSec * float64(c.Size) / 1e6
	}
	res.Summary = fmt.Sprintf("%d of %d records acknowledged in %.2fs", res.Records, c.Msgs, secs)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case prodErr != nil:
		return res, fmt.Errorf("franz produce: %w", prodErr)
	case flushErr != nil:
		return res, fmt.Errorf("franz produce: flush: %w", flushErr)
	case res.Records < int64(c.Msgs):
		return res, fmt.Errorf("franz produce: %d of %d records acknowledged", res.Records, c.Msgs)
	}
	return res, nil
}

// franzConsume reads Msgs records of a pre-filled topic from its start, without
// a group (as the e2e consumer), and times the first poll to the last record.
func franzConsume(ctx context.Context, c franzConfig) (kafkaResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(c.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("bench-franz-consumer"))
	if err != nil {
		return kafkaResult{}, err
	}
	defer cl.Close()
	var got int64
	start := time.Now()
	for got < int64(c.Msgs) {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return kafkaResult{Records: got}, fmt.Errorf("franz consume: %w", ferr)
		}
		got += int64(fetches.NumRecords())
	}
	secs := time.Since(start).Seconds()
	res := kafkaResult{Records: got, Seconds: secs}
	if secs > 0 {
		res.MsgsPerSec = float64(got) / secs
		res.MBPerSec = res.MsgsPerSec * float64(c.Size) / 1e6
	}
	res.Summary = fmt.Sprintf("%d of %d records read in %.2fs", got, c.Msgs, secs)
	if got < int64(c.Msgs) {
		return res, fmt.Errorf("franz consume: %d of %d records read: %w", got, c.Msgs, ctx.Err())
	}
	return res, nil
}
