package stream

import (
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
)

// TestAckDoesNotWaitForJournalSync: under sync=always the consumer's journal is
// fsynced after acks, but outside the lock acks take, so a publisher's ack (and an
// info request) goes through while an fsync is in progress; the synchronous ack's
// confirmation waits for it.
func TestAckDoesNotWaitForJournalSync(t *testing.T) {
	h := newHarnessSyncing(t, store.SyncAlways)
	h.inbox.mu.Lock()
	acks := slices.Clone(h.inbox.acks)
	h.inbox.mu.Unlock()
	if len(acks) < 2 {
		t.Fatalf("baseline deliveries %q", acks)
	}
	s, err := h.m.Stream(harnessStream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Consumer(harnessConsumer)
	if err != nil {
		t.Fatal(err)
	}
	confirmed := make(chan struct{}, 4)
	if err := h.m.broker.Subscribe(&broker.Subscription{Sink: signalSink(confirmed), Subject: "_INBOX.confirm"}); err != nil {
		t.Fatal(err)
	}

	// The first fsync after this point blocks until released.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var blocked atomic.Bool
	hook := func(f *os.File) error {
		if blocked.CompareAndSwap(false, true) {
			entered <- struct{}{}
			<-release
		}
		return f.Sync()
	}
	syncHook.Store(&hook)
	t.Cleanup(func() { syncHook.Store(nil) })

	ack := func(subj string, reply string) {
		msg := &broker.Message{Subject: []byte(subj), Payload: []byte("ack")}
		if reply != "" {
			msg.Reply = []byte(reply)
		}
		h.m.acks.Deliver(nil, msg)
	}
	ack(acks[0], "_INBOX.confirm")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first ack's journal write never reached fsync")
	}
	done := make(chan struct{})
	go func() {
		ack(acks[1], "")
		_ = c.Info()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("an ack waited behind the journal's fsync")
	}
	select {
	case <-confirmed:
		t.Fatal("a synchronous ack was confirmed before its journal record was synced")
	default:
	}
	close(release)
	select {
	case <-confirmed:
	case <-time.After(10 * time.Second):
		t.Fatal("the synchronous ack was never confirmed")
	}
	waitUntil(t, "both acks applied", func() bool { return c.Info().NumAckPending == len(acks)-2 })
}

// signalSink signals each message it gets.
type signalSink chan struct{}

func (s signalSink) Deliver(*broker.Subscription, *broker.Message) bool {
	select {
	case s <- struct{}{}:
	default:
	}
	return true
}
func (signalSink) Flush() {}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
