package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// e2eConfig is one paced end-to-end latency run: a franz-go producer sends Warmup
// and then Msgs records of Size bytes at Rate records/s to Topic, each stamped with
// its send time and number; a consumer in the same process (no group, every
// partition from its start) reads them and records publish → receive for the
// measured ones.
type e2eConfig struct {
	Brokers []string
	Topic   string
	Size    int
	Rate    int
	Warmup  int
	Msgs    int
	// Timeout bounds the whole run; the consumer also gives up when nothing has
	// arrived for idleTimeout after the last send.
	Timeout time.Duration
}

const e2eIdleTimeout = 20 * time.Second

// e2eClientOpts are the options both clients share: franz-go's defaults otherwise
// (producer: acks=all, idempotent; consumer: fetch min 1 byte, max wait 5 s —
// a long poll the broker answers as soon as a record is there). The producer's
// linger is 0 (franz-go's default is 10 ms, which would be most of the latency
// measured at these rates).
func e2eProducerOpts(c e2eConfig) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(c.Topic), kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ClientID("bench-e2e-producer")}
}

func e2eConsumerOpts(c e2eConfig) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(c.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("bench-e2e-consumer")}
}

func e2eRun(ctx context.Context, c e2eConfig) (kafkaResult, error) {
	if c.Size < 16 || c.Rate <= 0 || c.Msgs <= 0 {
		return kafkaResult{}, errors.New("e2e: size at least 16, rate and count positive")
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cons, err := kgo.NewClient(e2eConsumerOpts(c)...)
	if err != nil {
		return kafkaResult{}, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(e2eProducerOpts(c)...)
	if err != nil {
		return kafkaResult{}, err
	}
	defer prod.Close()
	// Both clients have their metadata and connections before the first send.
	if err := prod.Ping(ctx); err != nil {
		return kafkaResult{}, fmt.Errorf("e2e: producer: %w", err)
	}

	total := c.Warmup + c.Msgs
	hist := hdrhistogram.New(1, 60_000_000, 3) // µs
	seen := make([]bool, total)
	var (
		received, dups int64
		firstRecv      time.Time
		lastRecv       time.Time
		sendDone       atomic.Int64 // unix nanos of the last send, 0 before
	)
	consDone := make(chan error, 1)
	go func() {
		for {
			// A poll bounded to a second, so the idle check below runs while nothing
			// arrives.
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fetches := cons.PollFetches(pctx)
			pcancel()
			now := time.Now()
			if ctx.Err() != nil {
				consDone <- ctx.Err()
				return
			}
			var ferr error
			fetches.EachError(func(_ string, _ int32, err error) {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					ferr = err
				}
			})
			if ferr != nil {
				consDone <- fmt.Errorf("e2e: fetch: %w", ferr)
				return
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if len(r.Value) < 16 {
					return
				}
				sent := int64(binary.BigEndian.Uint64(r.Value[0:8]))
				seq := int(binary.BigEndian.Uint64(r.Value[8:16]))
				if seq < 0 || seq >= total {
					return
				}
				if seen[seq] {
					dups++
					return
				}
				seen[seq] = true
				if seq < c.Warmup {
					return
				}
				if received == 0 {
					firstRecv = now
				}
				received++
				lastRecv = now
				_ = hist.RecordValue(max(1, now.Sub(time.Unix(0, sent)).Microseconds()))
			})
			if received >= int64(c.Msgs) {
				consDone <- nil
				return
			}
			if d := sendDone.Load(); d != 0 && time.Since(time.Unix(0, max(d, lastRecv.UnixNano()))) > e2eIdleTimeout {
				consDone <- fmt.Errorf("e2e: nothing received for %s after the last send", e2eIdleTimeout)
				return
			}
		}
	}()

	var (
		mu      sync.Mutex
		prodErr error
		acked   atomic.Int64
	)
	interval := time.Second / time.Duration(c.Rate)
	t0 := time.Now()
	var firstSend time.Time
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := t0.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		v := make([]byte, c.Size)
		now := time.Now()
		if i == c.Warmup {
			firstSend = now
		}
		binary.BigEndian.PutUint64(v[0:8], uint64(now.UnixNano()))
		binary.BigEndian.PutUint64(v[8:16], uint64(i))
		prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
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
	sendDone.Store(time.Now().UnixNano())
	flushErr := prod.Flush(ctx)
	err = <-consDone
	cancel()
	mu.Lock()
	defer mu.Unlock()
	res := kafkaResult{Records: received, Duplicates: dups}
	if !firstSend.IsZero() && received > 0 {
		res.Seconds = lastRecv.Sub(firstSend).Seconds()
		if res.Seconds > 0 {
			res.MsgsPerSec = float64(received) / res.Seconds
		}
		res.MBPerSec = res.MsgsPerSec * float64(c.Size) / 1e6
	}
	_ = firstRecv
	res.E2EP50US = float64(hist.ValueAtQuantile(50))
	res.E2EP99US = float64(hist.ValueAtQuantile(99))
	res.E2EP999US = float64(hist.ValueAtQuantile(99.9))
	res.E2EMaxUS = float64(hist.Max())
	res.Summary = fmt.Sprintf("%d records received (%d duplicates), %d acknowledged, p50 %gµs p99 %gµs p99.9 %gµs max %gµs",
		received, dups, acked.Load(), res.E2EP50US, res.E2EP99US, res.E2EP999US, res.E2EMaxUS)
	switch {
	case prodErr != nil:
		return res, fmt.Errorf("e2e: produce: %w", prodErr)
	case flushErr != nil:
		return res, fmt.Errorf("e2e: flush: %w", flushErr)
	case err != nil:
		return res, fmt.Errorf("%w (%d of %d received)", err, received, c.Msgs)
	}
	return res, nil
}
