package stream

import (
	"fmt"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Setting a consumer's position from outside: the stream API's CONSUMER.SEEK
// request, which the Kafka API's OffsetCommit makes (a Kafka group's committed
// offsets are a durable consumer's positions, docs/kafka.md). The consumer's
// machine applies it (consumer.Machine.Seek) and journals it as any change, so a
// replicated stream's replicas carry it with the rest of the consumer's state; the
// answer waits for the journal, as a synchronous ack does. A request carrying a
// deadline (SeekRequest.NotAfter) that arrives after it is refused: its requester
// has given up on it and may have sought again since.

// seekRequest handles "CONSUMER.SEEK.<stream>.<consumer>" on the API goroutine:
// it answers nil when the consumer answers later, on reply.
func (a *apiSink) seekRequest(account, streamName, name string, body, reply []byte) []byte {
	var req streamapi.SeekRequest
	if err := DecodeRequest(body, &req); err != nil {
		return Respond[streamapi.ConsumerInfo](nil, err)
	}
	s, err := a.m.AccountStream(account, streamName)
	if err != nil {
		return Respond[streamapi.ConsumerInfo](nil, err)
	}
	c, err := s.Consumer(name)
	if err != nil {
		return Respond[streamapi.ConsumerInfo](nil, err)
	}
	if late := time.Since(req.NotAfter); !req.NotAfter.IsZero() && late > 0 {
		a.m.log.Warn("consumer seek refused: it arrived after its deadline", "stream", streamName, "consumer", name, "late", late)
		return Respond[streamapi.ConsumerInfo](nil, fmt.Errorf("stream %q: consumer %q: seek: %w (%v late)", streamName, name, ErrExpired, late))
	}
	if err := c.Seek(req.Positions, reply); err != nil {
		return Respond[streamapi.ConsumerInfo](nil, err)
	}
	return nil
}

// Seek moves the consumer's position in the partitions given (see
// streamapi.SeekPosition). When reply is set, the consumer's info is published
// there once its journal holds the new positions (or an error if it could not be
// written). A work queue's consumers cannot seek: skipping its messages would
// leave them in the stream for good.
func (c *Consumer) Seek(positions []streamapi.SeekPosition, reply []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("stream %q: consumer %q: seek: %w: %s", c.s.name, c.name, ErrBadConfig, fmt.Sprintf(format, args...))
	}
	if c.s.retention == streamapi.RetainWorkQueue {
		return bad("a work queue's consumers cannot seek")
	}
	seen := make(map[int]bool, len(positions))
	for _, p := range positions {
		if p.Partition < 0 || p.Partition >= len(c.s.parts) {
			return bad("partition %d: the stream has %d", p.Partition, len(c.s.parts))
		}
		if p.Next == 0 {
			return bad("partition %d: next must be 1 or more", p.Partition)
		}
		if seen[p.Partition] {
			return bad("partition %d given twice", p.Partition)
		}
		seen[p.Partition] = true
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("stream %q: consumer %q: %w", c.s.name, c.name, ErrConsumerNotFound)
	}
	for _, p := range positions {
		c.m.Seek(p.Partition, p.Next)
		c.src.parts[p.Partition].readerNext = 0
	}
	if reply != nil {
		c.seeks = append(c.seeks, reply)
	}
	c.mu.Unlock()
	c.wake()
	return nil
}

// answerSeeks answers seek requests now that the journal holds them (journalErr
// nil), on the delivery goroutine. An interest stream may now remove messages the
// consumer moved past.
func (c *Consumer) answerSeeks(replies [][]byte, journalErr error) {
	if len(replies) == 0 {
		return
	}
	var resp []byte
	if journalErr != nil {
		resp = Respond[streamapi.ConsumerInfo](nil, fmt.Errorf("stream %q: consumer %q: position not stored: %w", c.s.name, c.name, journalErr))
	} else {
		info := c.Info()
		resp = Respond(&info, nil)
	}
	for _, r := range replies {
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: r, Payload: resp})
	}
	if journalErr == nil && c.s.retention == streamapi.RetainInterest {
		go c.s.sweepInterest()
	}
}
