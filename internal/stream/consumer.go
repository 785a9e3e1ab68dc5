package stream

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream/consumer"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

const (
	deliverChunk = 1024 // messages per pass before flushing and yielding the lock
	interestPoll = 100 * time.Millisecond
)

// Consumer is a view of a stream with its own position and acknowledgements. Its
// logic is the pure state machine of package consumer; Consumer drives it: it feeds
// acks and pull requests from publishers' goroutines, and runs one delivery
// goroutine that reads the stream, publishes into the broker and writes the journal.
// The lock that acks take is held only for in-memory work: journal writes and
// fsyncs happen outside it.
type Consumer struct {
	s       *Stream
	name    string
	cfg     streamapi.ConsumerConfig
	created time.Time
	durable bool
	// replicated: a durable consumer of a replicated stream, whose journal records
	// are entries of the stream's group.
	replicated  bool
	dir         string
	filter      string
	deadLetter  string
	deliverSubj []byte

	mu       sync.Mutex
	m        *consumer.Machine
	src      source
	confirms [][]byte // replies of synchronous acks, answered once the journal has them
	seeks    [][]byte // replies of seek requests, answered likewise (seek.go)
	closed   bool
	running  bool

	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	// Owned by the delivery goroutine.
	batch        broker.Batch
	ackSubj      []byte
	hdrBuf       []byte
	spareConfirm [][]byte
	jr           *journal
	// jretry holds records whose write failed, written again before newer ones.
	jretry []byte
	// journalFailing is set while journal writes fail, to log the failure once.
	journalFailing bool
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.name }

// start launches the delivery goroutine.
func (c *Consumer) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.closed {
		return
	}
	c.running = true
	go c.run()
}

// stop ends the delivery goroutine, answers waiting pulls and closes (or removes) the
// consumer's files.
func (c *Consumer) stop(remove bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	running := c.running
	close(c.done)
	c.mu.Unlock()
	if running {
		<-c.stopped
	}
	c.mu.Lock()
	c.m.Close()
	rd := c.m.Ready()
	c.answer(rd.Statuses)
	records := rd.Journal
	c.m.Advance()
	c.src.close()
	seeks := c.seeks
	c.seeks = nil
	c.mu.Unlock()
	var journalErr error
	if c.jr != nil {
		journalErr = c.jr.flush(append(c.jretry, records...))
		if err := c.jr.close(); err != nil {
			c.s.m.log.Error("closing consumer journal", "stream", c.s.name, "consumer", c.name, "err", err)
		}
	} else if c.replicated && len(seeks) > 0 {
		journalErr = fmt.Errorf("%w: the consumer stopped", ErrNotLeader)
	}
	c.answerSeeks(seeks, journalErr)
	c.batch.Flush()
	if remove && c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func (c *Consumer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// purged moves the consumer past messages purged under it.
func (c *Consumer) purged() {
	c.mu.Lock()
	for i, l := range c.s.parts {
		c.m.Purged(i, l.State().FirstSeq)
		c.src.parts[i].readerNext = 0
	}
	c.mu.Unlock()
	c.wake()
}

// ---------------------------------------------------------------------------------
// Acks and pulls (called on the publishing connection's goroutine)

func (c *Consumer) ack(ref *streamapi.AckRef, kind streamapi.AckKind, delay time.Duration, reason []byte, confirm []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.m.Ack(time.Now(), consumer.Key{Part: ref.Partition, Seq: ref.StreamSeq}, kind, delay, reason)
	if confirm != nil {
		c.confirms = append(c.confirms, confirm)
	}
	c.mu.Unlock()
	c.wake()
}

// pull queues a pull request.
func (c *Consumer) pull(reply []byte, req streamapi.PullRequest) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.m.Pull(time.Now(), reply, req)
	c.mu.Unlock()
	c.wake()
}

// ---------------------------------------------------------------------------------
// Delivery goroutine

func (c *Consumer) run() {
	defer close(c.stopped)
	// The first pass runs at once: a push consumer has a backlog to send and an
	// ephemeral one an inactivity clock to start before anything wakes it.
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.kick:
		case <-timer.C:
		case <-c.done:
			return
		}
		for {
			more, wait, remove := c.pass()
			c.batch.Flush()
			c.batch.WaitStalled(10 * time.Millisecond)
			if remove {
				go func() { _ = c.s.DeleteConsumer(c.name) }()
				<-c.done
				return
			}
			if !more {
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				timer.Reset(wait)
				break
			}
			select {
			case <-c.done:
				return
			default:
			}
		}
	}
}

// pass does one round of delivery: under the lock, what the machine decides and the
// in-memory publishing; then, without it, the journal. It reports whether there is
// more to do at once, else how long until the next timed event, and whether an idle
// ephemeral consumer should be removed.
func (c *Consumer) pass() (more bool, wait time.Duration, remove bool) {
	if c.s.repl != nil {
		// A leader paused (or cut off) and resumed believes it leads until it
		// hears otherwise, and its consumers would deliver again what the new
		// leader's had acknowledged meanwhile: deliver only once a quorum has
		// just confirmed this node's leadership (a read index).
		if err := c.s.confirmLeader(); err != nil {
			return false, 100 * time.Millisecond, false
		}
	}
	c.mu.Lock()
	now := time.Now()
	push := len(c.deliverSubj) > 0
	interest := push && c.s.m.broker.HasInterest(c.deliverSubj)
	if push {
		c.m.SetInterest(now, interest)
	}
	c.m.Tick(now)
	c.src.refresh()
	n := 0
	for ; n < deliverChunk; n++ {
		d, ok := c.m.Next(now, &c.src)
		if !ok {
			break
		}
		if !c.publish(&d) {
			c.m.NotTaken(d)
		}
	}
	more = n == deliverChunk
	rd := c.m.Ready()
	c.answer(rd.Statuses)
	c.deadLetters(rd.DeadLetters)
	c.retire(rd.Retired)
	if rd.Members != nil {
		c.s.m.log.Debug("consumer group rebalanced", "stream", c.s.name, "consumer", c.name, "members", rd.Members)
	}
	records := rd.Journal
	var snap *consumer.State
	if c.jr != nil && c.jr.size+int64(len(c.jretry)+len(records)) > compactAt {
		st := c.m.State()
		snap = &st
	}
	confirms := c.confirms
	c.confirms, c.spareConfirm = c.spareConfirm[:0], confirms
	seeks := c.seeks
	c.seeks = nil
	c.m.Advance()
	c.mu.Unlock()

	if rd.Remove {
		return false, 0, true
	}
	wait = time.Hour
	if !rd.Deadline.IsZero() {
		wait = max(rd.Deadline.Sub(now), time.Millisecond)
	}
	if push && !interest {
		wait = min(wait, interestPoll)
	}
	var journalErr error
	switch {
	case c.jr != nil:
		journalErr = c.writeJournal(records, snap)
		if c.jr.dirty || journalErr != nil {
			wait = min(wait, max(c.s.m.cfg.SyncInterval, time.Millisecond))
		}
	case c.replicated && len(records) > 0:
		// Acks confirmed once the group has them; on an error the records are
		// lost with this node's leadership, and the next leader delivers again
		// what they would have retired.
		journalErr = c.proposeJournal(records)
	}
	c.confirm(confirms, journalErr)
	clear(confirms)
	c.answerSeeks(seeks, journalErr)
	return more, wait, false
}

// publish sends one delivery, and reports whether anyone took it.
func (c *Consumer) publish(d *consumer.Delivery) bool {
	meta := streamapi.AckMeta{Stream: c.s.name, Consumer: c.name, Partition: d.Key.Part, Deliveries: d.Deliveries,
		StreamSeq: d.Key.Seq, ConsumerSeq: d.ConsumerSeq, Time: d.Msg.Time, Pending: c.numPendingLocked()}
	c.ackSubj = streamapi.AppendAckSubject(append(c.ackSubj[:0], c.s.prefix...), &meta)
	msg := broker.Message{Subject: d.Msg.Subject, Route: d.Reply, Reply: c.ackSubj, Header: d.Msg.Header, Payload: d.Msg.Payload}
	if d.Reply == nil {
		msg.Route = c.deliverSubj
		msg.Group = c.cfg.DeliverGroup
	}
	return c.s.m.broker.Publish(&c.batch, &msg) != 0
}

// answer ends pull requests with a status message on their reply subjects.
func (c *Consumer) answer(statuses []consumer.Status) {
	for _, st := range statuses {
		if st.Code == "" {
			continue
		}
		h := header.Append(c.hdrBuf[:0], header.Status, st.Code)
		h = header.Append(h, header.Description, st.Description)
		h = header.Append(h, streamapi.HeaderPending, strconv.FormatUint(c.numPendingLocked(), 10))
		if st.Member != "" {
			var parts []string
			for _, i := range c.m.Assigned(st.Member) {
				parts = append(parts, strconv.Itoa(i))
			}
			h = header.Append(h, streamapi.HeaderAssigned, strings.Join(parts, ","))
		}
		c.hdrBuf = h
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: st.Reply, Header: h})
	}
}

// deadLetters publishes messages that reached MaxDeliver or were terminated to the
// dead-letter subject, with headers naming their origin.
func (c *Consumer) deadLetters(dead []consumer.DeadLetter) {
	for _, d := range dead {
		rec, ok := c.src.Read(d.Key.Part, d.Key.Seq)
		if !ok {
			continue
		}
		h := append(c.hdrBuf[:0], rec.Header...)
		h = header.Append(h, streamapi.HeaderStream, c.s.name)
		h = header.Append(h, streamapi.HeaderSeq, strconv.FormatUint(d.Key.Seq, 10))
		h = header.Append(h, streamapi.HeaderPartition, strconv.Itoa(d.Key.Part))
		h = header.Append(h, streamapi.HeaderConsumer, c.name)
		h = header.Append(h, streamapi.HeaderDeliveries, strconv.FormatUint(d.Deliveries, 10))
		h = header.Append(h, streamapi.HeaderReason, d.Reason)
		c.hdrBuf = h
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: []byte(c.deadLetter), Header: h, Payload: rec.Payload})
		c.s.m.log.Info("message dead-lettered", "stream", c.s.name, "account", accountAttr(c.s.acct), "consumer", c.name, "partition", d.Key.Part,
			"seq", d.Key.Seq, "deliveries", d.Deliveries, "reason", d.Reason, "subject", c.deadLetter)
		c.retire([]consumer.Key{d.Key})
	}
}

// retire tells the stream the consumer is done with messages.
func (c *Consumer) retire(keys []consumer.Key) {
	for _, k := range keys {
		switch c.s.retention {
		case streamapi.RetainWorkQueue:
			c.s.queueDelete(k.Part, k.Seq)
		case streamapi.RetainInterest:
			c.s.queueInterestCheck(partSeq{k.Part, k.Seq})
		}
	}
}

// confirm answers synchronous acks now that the journal holds them; when it could
// not, it says so (an empty confirmation is success): the ack is applied, but a
// restart would deliver the message again.
func (c *Consumer) confirm(replies [][]byte, journalErr error) {
	var failure []byte
	if journalErr != nil && len(replies) > 0 {
		failure, _ = json.Marshal(streamapi.Response[struct{}]{Error: &streamapi.APIError{
			Code: streamapi.CodeUnavailable, Description: "ack not stored: " + journalErr.Error()}})
	}
	for _, r := range replies {
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: r, Payload: failure})
	}
}

// isAcked reports whether this consumer is done with a message (interest retention).
func (c *Consumer) isAcked(key partSeq, subj string) bool {
	if c.filter != "" && !subject.Matches(c.filter, subj) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Done(consumer.Key{Part: key.part, Seq: key.seq})
}

// Info describes the consumer.
func (c *Consumer) Info() streamapi.ConsumerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.src.refresh()
	info := streamapi.ConsumerInfo{Stream: c.s.name, Name: c.name, Config: c.cfg, Created: c.created,
		NumPending: c.numPendingLocked(), NumAckPending: c.m.NumAckPending(), NumRedelivered: c.m.Redelivered(),
		NumWaiting: c.m.NumWaiting(), Members: c.m.Members()}
	info.Partitions = make([]streamapi.PartitionState, len(c.s.parts))
	for i := range info.Partitions {
		next := c.m.Position(i)
		ps := streamapi.PartitionState{Partition: i, Delivered: next - 1, AckFloor: next - 1, Member: c.m.Owner(i)}
		if n, lowest := c.m.PendingIn(i); n > 0 {
			ps.AckPending = n
			ps.AckFloor = min(ps.AckFloor, lowest-1)
		}
		info.Partitions[i] = ps
	}
	return info
}

// writeJournal appends records (after any that failed before) as one chunk, synced
// per the stream's policy, and replaces the journal by snap when one is given.
// Records that could not be written are kept for the next write.
func (c *Consumer) writeJournal(records []byte, snap *consumer.State) error {
	if len(c.jretry) > 0 {
		c.jretry = append(c.jretry, records...)
		records = c.jretry
	}
	err := c.jr.flush(records)
	if err != nil {
		c.jretry = append(c.jretry[:0], records...)
		if !c.journalFailing {
			c.s.m.log.Error("consumer journal", "stream", c.s.name, "consumer", c.name, "err", err)
		}
		c.journalFailing = true
	} else {
		c.jretry = c.jretry[:0]
		if c.journalFailing {
			c.journalFailing = false
			c.s.m.log.Info("consumer journal written again", "stream", c.s.name, "consumer", c.name)
		}
	}
	if snap != nil {
		c.snapshot(*snap)
	}
	return err
}

// snapshot writes the whole position and empties the journal.
func (c *Consumer) snapshot(st consumer.State) {
	sync := c.s.syncPolicy() != store.SyncNever
	if err := writeJSON(filepath.Join(c.dir, "state.json"), st, sync); err != nil {
		c.s.m.log.Error("consumer snapshot", "stream", c.s.name, "consumer", c.name, "err", err)
		return
	}
	if err := c.jr.reset(); err != nil {
		c.s.m.log.Error("consumer journal reset", "stream", c.s.name, "consumer", c.name, "err", err)
		return
	}
	c.jretry = c.jretry[:0] // the snapshot holds them
}
