package stream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// env is a server with streams and a connected client.
type env struct {
	t   *testing.T
	srv *server.Server
	nc  *tern.Conn
	js  *tern.Streams
	ctx context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := servertest.Start(t, nil)
	return connectEnv(t, srv)
}

func connectEnv(t *testing.T, srv *server.Server) *env {
	t.Helper()
	nc, err := tern.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, srv: srv, nc: nc, js: nc.Streams(), ctx: ctx}
}

func (e *env) addStream(cfg tern.StreamConfig) *tern.StreamInfo {
	e.t.Helper()
	info, err := e.js.AddStream(e.ctx, cfg)
	if err != nil {
		e.t.Fatalf("add stream %s: %v", cfg.Name, err)
	}
	return info
}

func (e *env) addConsumer(stream string, cfg tern.ConsumerConfig) *tern.ConsumerInfo {
	e.t.Helper()
	info, err := e.js.AddConsumer(e.ctx, stream, cfg)
	if err != nil {
		e.t.Fatalf("add consumer on %s: %v", stream, err)
	}
	return info
}

func (e *env) publish(subject, data string, opts ...tern.PubOpt) *tern.PubAck {
	e.t.Helper()
	ack, err := e.js.Publish(e.ctx, subject, []byte(data), opts...)
	if err != nil {
		e.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack
}

func (e *env) streamInfo(name string) *tern.StreamInfo {
	e.t.Helper()
	info, err := e.js.StreamInfo(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

func (e *env) consumerInfo(stream, name string) *tern.ConsumerInfo {
	e.t.Helper()
	info, err := e.js.ConsumerInfo(e.ctx, stream, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// fetch takes exactly n messages, failing the test if they do not come in time.
func (e *env) fetch(p *tern.Pull, n int) []*tern.Msg {
	e.t.Helper()
	var out []*tern.Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		msgs, err := p.Fetch(e.ctx, n-len(out), tern.FetchMaxWait(2*time.Second))
		if err != nil && !errors.Is(err, tern.ErrTimeout) {
			e.t.Fatalf("fetch: %v", err)
		}
		out = append(out, msgs...)
	}
	if len(out) != n {
		e.t.Fatalf("fetched %d messages, want %d", len(out), n)
	}
	return out
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func meta(t *testing.T, m *tern.Msg) *tern.MsgMetadata {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatalf("metadata of %q (reply %q): %v", m.Subject, m.Reply, err)
	}
	return md
}

func TestPublishAckAndInfo(t *testing.T) {
	e := newEnv(t)
	info := e.addStream(tern.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	if info.Config.Retention != tern.RetainLimits || info.State.Msgs != 0 {
		t.Fatalf("new stream info: %+v", info)
	}
	for i := 1; i <= 100; i++ {
		ack := e.publish("orders.new", "order "+strconv.Itoa(i))
		if ack.Stream != "orders" || ack.Seq != uint64(i) || ack.Duplicate {
			t.Fatalf("publish %d: ack %+v", i, ack)
		}
	}
	info = e.streamInfo("orders")
	if info.State.Msgs != 100 || info.State.FirstSeq != 1 || info.State.LastSeq != 100 {
		t.Fatalf("state after 100 publishes: %+v", info.State)
	}
	msg, err := e.js.GetMsg(e.ctx, "orders", 0, 42)
	if err != nil || string(msg.Data) != "order 42" || msg.Subject != "orders.new" {
		t.Fatalf("get 42: %+v, %v", msg, err)
	}
	// Same configuration again is fine; a different one is a conflict.
	e.addStream(tern.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "orders", Subjects: []string{"other"}}); err == nil {
		t.Fatal("re-adding with other subjects succeeded")
	}
	// Overlapping subjects belong to one stream only.
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "o2", Subjects: []string{"orders.new"}}); err == nil {
		t.Fatal("overlapping stream accepted")
	}
	if _, err := e.js.StreamInfo(e.ctx, "nope"); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("info of a missing stream: %v", err)
	}
	// A publish to a subject no stream captures has no responder.
	if _, err := e.js.Publish(e.ctx, "nobody.here", nil); !errors.Is(err, tern.ErrNoResponders) {
		t.Fatalf("publish outside streams: %v", err)
	}
}

func TestPublishAsync(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "ev", Subjects: []string{"ev.*"}})
	js := e.nc.Streams(tern.PublishAsyncMaxPending(64))
	const n = 5000
	futures := make([]*tern.PubAckFuture, 0, n)
	for i := 0; i < n; i++ {
		f, err := js.PublishAsync("ev.x", []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatalf("async publishes still pending: %d", js.PublishAsyncPending())
	}
	for i, f := range futures {
		ack, err := f.Result()
		if err != nil || ack.Seq != uint64(i+1) {
			t.Fatalf("future %d: %+v %v", i, ack, err)
		}
	}
}

func TestDuplicateWindow(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "pay", DuplicateWindow: tern.Duration(time.Minute)})
	a1 := e.publish("pay", "x", tern.MsgID("m-1"))
	a2 := e.publish("pay", "x", tern.MsgID("m-1"))
	a3 := e.publish("pay", "y", tern.MsgID("m-2"))
	if a1.Duplicate || !a2.Duplicate || a2.Seq != a1.Seq || a3.Seq != a1.Seq+1 {
		t.Fatalf("acks %+v %+v %+v", a1, a2, a3)
	}
	if n := e.streamInfo("pay").State.Msgs; n != 2 {
		t.Fatalf("stored %d messages, want 2", n)
	}
}

// TestExpectedLastMsgID: a message naming the last numbered id of its producer is
// stored only when that id is the highest one stored with its prefix.
func TestExpectedLastMsgID(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "seqd", Subjects: []string{"seqd"}})
	e.publish("seqd", "1", tern.MsgID("p:1"))
	e.publish("seqd", "2", tern.MsgID("p:2"), tern.ExpectLastMsgID("p:1"))
	e.publish("seqd", "q", tern.MsgID("q:7"))
	for _, exp := range []string{"p:1", "p:3", "q:2", "r:0", "plain"} {
		_, err := e.js.Publish(e.ctx, "seqd", []byte("refused"), tern.MsgID("p:3"), tern.ExpectLastMsgID(exp))
		var ae *tern.APIError
		if !errors.As(err, &ae) || ae.Code != streamapi.CodeWrongLastMsgID {
			t.Fatalf("expecting %s: %v, want code %d", exp, err, streamapi.CodeWrongLastMsgID)
		}
	}
	// A retry of a stored message is a duplicate whatever it expects.
	if a := e.publish("seqd", "2", tern.MsgID("p:2"), tern.ExpectLastMsgID("p:1")); !a.Duplicate || a.Seq != 2 {
		t.Fatalf("retry: %+v", a)
	}
	e.publish("seqd", "3", tern.MsgID("p:3"), tern.ExpectLastMsgID("p:2"))
	if n := e.streamInfo("seqd").State.Msgs; n != 4 {
		t.Fatalf("stored %d messages, want 4", n)
	}
}

// TestSequencedMsgIDs: ids "<prefix>#<n>" are a sequence. A message of one that
// names no last id is stored only right after the one before it, so the rest of a
// batch whose first message was refused is refused too; "~" names the last id only
// when the stream knows the sequence, so a copy of an old batch arriving after
// newer ones is refused, and a sequence the window forgot starts again.
func TestSequencedMsgIDs(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "sq", Subjects: []string{"sq"}, DuplicateWindow: tern.Duration(time.Second)})
	refused := func(id string, opts ...tern.PubOpt) {
		t.Helper()
		_, err := e.js.Publish(e.ctx, "sq", []byte(id), append(opts, tern.MsgID(id))...)
		var ae *tern.APIError
		if !errors.As(err, &ae) || ae.Code != streamapi.CodeWrongLastMsgID {
			t.Fatalf("%s: %v, want code %d", id, err, streamapi.CodeWrongLastMsgID)
		}
	}
	stored := func(id string, opts ...tern.PubOpt) uint64 {
		t.Helper()
		a := e.publish("sq", id, append(opts, tern.MsgID(id))...)
		if a.Duplicate {
			t.Fatalf("%s: a duplicate of %d", id, a.Seq)
		}
		return a.Seq
	}
	// A batch 0..2 with nothing before it, then one 3..5 behind it.
	stored("k#0")
	stored("k#1")
	stored("k#2")
	stored("k#3", tern.ExpectLastMsgID("~k#2"))
	stored("k#4")
	// A batch 6..8 behind one that failed (5 never came): all refused.
	refused("k#6", tern.ExpectLastMsgID("k#5"))
	refused("k#7")
	refused("k#8")
	// A copy of the batch 2..4, held up on its way: 2..4 are duplicates; a copy
	// of a batch 1..5 where 5 is new goes on after 4.
	if a := e.publish("sq", "k#2", tern.MsgID("k#2"), tern.ExpectLastMsgID("~k#1")); !a.Duplicate {
		t.Fatalf("k#2 again: %+v", a)
	}
	stored("k#5")
	// A late batch 3..4 with a new number past the end is refused ("~" holds),
	// and a sequence without its first message cannot start mid-way.
	refused("k#9", tern.ExpectLastMsgID("~k#2"))
	refused("j#4")
	// Other prefixes are not sequences: gaps are fine.
	stored("order-1")
	stored("order-5")
	// Once the window forgets k, a batch naming its last with "~" starts again;
	// one naming it strictly does not.
	time.Sleep(1100 * time.Millisecond)
	refused("k#20", tern.ExpectLastMsgID("k#19"))
	stored("k#20", tern.ExpectLastMsgID("~k#19"))
	stored("k#21")
	if n := e.streamInfo("sq").State.Msgs; n != 10 {
		t.Fatalf("stored %d messages, want 10", n)
	}
}

func TestPullFetchAck(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "jobs", Subjects: []string{"jobs.>"}})
	for i := 0; i < 10; i++ {
		e.publish("jobs.a", strconv.Itoa(i))
	}
	e.addConsumer("jobs", tern.ConsumerConfig{Durable: "w"})
	p := e.js.Pull("jobs", "w")
	defer p.Close()
	seen := 0
	for round := 0; round < 2; round++ {
		for _, m := range e.fetch(p, 5) {
			md := meta(t, m)
			if string(m.Data) != strconv.Itoa(seen) || md.StreamSeq != uint64(seen+1) || md.Deliveries != 1 || m.Subject != "jobs.a" {
				t.Fatalf("message %d: %q %+v", seen, m.Data, md)
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			seen++
		}
	}
	waitFor(t, "acks applied", func() bool {
		ci := e.consumerInfo("jobs", "w")
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Partitions[0].AckFloor == 10
	})
	// Nothing left: a no-wait fetch says so at once.
	if _, err := p.Fetch(e.ctx, 1, tern.FetchNoWait()); !errors.Is(err, tern.ErrNoMessages) {
		t.Fatalf("no-wait fetch of an empty consumer: %v", err)
	}
}

// TestFetchWaitsForMessages checks the long poll: a fetch waiting on an empty consumer
// gets a message published later as soon as it is stored, not at its deadline.
// TestFetchUnknownConsumer: a pull the server refuses is an error, not a message.
func TestFetchUnknownConsumer(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "fu", Subjects: []string{"fu.>"}})
	p := e.js.Pull("fu", "nobody")
	defer p.Close()
	msgs, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(2*time.Second))
	if !errors.Is(err, tern.ErrConsumerNotFound) || len(msgs) != 0 {
		t.Fatalf("fetch from a missing consumer: %d messages, %v; want ErrConsumerNotFound", len(msgs), err)
	}
}

// TestConsumeUnknownConsumer: a Consume loop whose pulls the server refuses stops with
// the error and never hands the refusal to the handler as a message.
func TestConsumeUnknownConsumer(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "cu", Subjects: []string{"cu.>"}})
	var handled atomic.Int32
	cc, err := e.js.Pull("cu", "nobody").Consume(10, func(*tern.Msg) { handled.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for cc.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !errors.Is(cc.Err(), tern.ErrConsumerNotFound) || handled.Load() != 0 {
		t.Fatalf("Err %v, handler called %d times; want ErrConsumerNotFound and no call", cc.Err(), handled.Load())
	}
}

func TestFetchWaitsForMessages(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "lp"})
	e.addConsumer("lp", tern.ConsumerConfig{Durable: "c"})
	p := e.js.Pull("lp", "c")
	defer p.Close()
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = e.js.Publish(context.Background(), "lp", []byte("late"))
	}()
	start := time.Now()
	msgs, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(5*time.Second))
	took := time.Since(start)
	if err != nil || len(msgs) != 1 || string(msgs[0].Data) != "late" {
		t.Fatalf("fetch: %v %v", msgs, err)
	}
	if took < 250*time.Millisecond || took > 4*time.Second {
		t.Fatalf("fetch returned after %v; want soon after the 300ms publish", took)
	}
	// A fetch with nothing to get ends at its wait with a timeout.
	start = time.Now()
	if _, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(400*time.Millisecond)); !errors.Is(err, tern.ErrTimeout) {
		t.Fatalf("empty fetch: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("empty fetch returned after %v, before its wait", took)
	}
}

// TestFetchIgnoresEarlierRequestsEnd: a fetch whose context ended leaves its request
// on the server; the status that later ends that request does not end the next fetch,
// which still gets the message published after it.
func TestFetchIgnoresEarlierRequestsEnd(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "late"})
	e.addConsumer("late", tern.ConsumerConfig{Durable: "c"})
	p := e.js.Pull("late", "c")
	defer p.Close()
	// The server holds this request for 0.9 × 200 ms and then answers it with a 408.
	gone, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Fetch(gone, 1, tern.FetchMaxWait(200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fetch with an ended context: %v", err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // after the 408 of the first request
		_, _ = e.js.Publish(context.Background(), "late", []byte("after"))
	}()
	msgs, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(5*time.Second))
	if err != nil || len(msgs) != 1 || string(msgs[0].Data) != "after" {
		t.Fatalf("second fetch: %v, %v; want the message published after the first request ended", msgs, err)
	}
}

func TestRedeliveryNakTermAndDeadLetter(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "rd", Subjects: []string{"rd.>"}})
	// Dead letters can be kept in a stream of their own, on the default subject.
	e.addStream(tern.StreamConfig{Name: "dead", Subjects: []string{"$TERN.DLQ.>"}})
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "api", Subjects: []string{"$TERN.API.>"}}); err == nil {
		t.Fatal("a stream on the server's API subjects was accepted")
	}
	dlq, err := e.nc.SubscribeSync("$TERN.DLQ.rd.c")
	if err != nil {
		t.Fatal(err)
	}
	// The timing rules (ack wait, backoff, progress, nak delays) are the consumer
	// machine's scenarios (internal/stream/consumer/testdata); this test checks
	// that the server arms its timers from them and publishes what they decide.
	e.addConsumer("rd", tern.ConsumerConfig{Durable: "c", AckWait: tern.Duration(50 * time.Millisecond), MaxDeliver: 3})
	p := e.js.Pull("rd", "c")
	defer p.Close()

	// Not acknowledged: delivered again after the ack wait, then dead-lettered after 3.
	e.publish("rd.x", "ignored")
	for want := uint64(1); want <= 3; want++ {
		m := e.fetch(p, 1)[0]
		if md := meta(t, m); md.Deliveries != want || md.StreamSeq != 1 {
			t.Fatalf("delivery %d: %+v", want, md)
		}
	}
	dm, err := dlq.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	if string(dm.Data) != "ignored" || dm.Header.Get("Tern-Seq") != "1" || dm.Header.Get("Tern-Deliveries") != "3" ||
		dm.Header.Get("Tern-Reason") != "max deliveries reached" {
		t.Fatalf("dead letter %q %v", dm.Data, dm.Header)
	}
	waitFor(t, "dead letter stored", func() bool { return e.streamInfo("dead").State.Msgs >= 1 })

	// Nak redelivers at once; nak with a delay after it.
	e.publish("rd.x", "nak me")
	m := e.fetch(p, 1)[0]
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	m = e.fetch(p, 1)[0]
	if md := meta(t, m); md.Deliveries != 2 || string(m.Data) != "nak me" {
		t.Fatalf("after nak: %+v", md)
	}
	start := time.Now()
	if err := m.NakWithDelay(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m = e.fetch(p, 1)[0]
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("nak with 100ms delay redelivered after %v", d)
	}
	if err := m.AckSync(e.ctx); err != nil {
		t.Fatalf("ack sync: %v", err)
	}

	// Term: never again, straight to the dead-letter subject.
	e.publish("rd.x", "poison")
	m = e.fetch(p, 1)[0]
	if err := m.Term("cannot parse"); err != nil {
		t.Fatal(err)
	}
	dm, err = dlq.NextMsg(5 * time.Second)
	if err != nil || string(dm.Data) != "poison" || dm.Header.Get("Tern-Reason") != "terminated: cannot parse" {
		t.Fatalf("terminated dead letter: %v %v", dm, err)
	}
	if _, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(200*time.Millisecond)); !errors.Is(err, tern.ErrTimeout) {
		t.Fatalf("terminated message came back: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "bo"})
	e.addConsumer("bo", tern.ConsumerConfig{Durable: "c",
		Backoff: []tern.Duration{tern.Duration(100 * time.Millisecond), tern.Duration(600 * time.Millisecond)}})
	p := e.js.Pull("bo", "c")
	defer p.Close()
	e.publish("bo", "x")
	e.fetch(p, 1)
	t1 := time.Now()
	e.fetch(p, 1) // after ~100ms
	d1 := time.Since(t1)
	t2 := time.Now()
	e.fetch(p, 1) // after ~600ms
	d2 := time.Since(t2)
	if d1 > 500*time.Millisecond || d2 < 450*time.Millisecond {
		t.Fatalf("backoff waits %v then %v; want about 100ms then 600ms", d1, d2)
	}
}

func TestWorkQueueExactlyOnce(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "wq", Subjects: []string{"wq.>"}, Retention: tern.RetainWorkQueue})
	e.addConsumer("wq", tern.ConsumerConfig{Durable: "workers", AckWait: tern.Duration(time.Second)})
	if _, err := e.js.AddConsumer(e.ctx, "wq", tern.ConsumerConfig{Durable: "second"}); err == nil {
		t.Fatal("a second overlapping work-queue consumer was accepted")
	}
	const m, workers = 2000, 4
	js := e.nc.Streams()
	for i := 0; i < m; i++ {
		if _, err := js.PublishAsync("wq.job", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()

	// A worker that dies holding messages: they go to the others after the ack wait.
	dying, err := tern.Connect(e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	held := e.fetch(dying.Streams().Pull("wq", "workers"), 10)
	heldSeqs := map[string]bool{}
	for _, h := range held {
		heldSeqs[string(h.Data)] = true
	}
	dying.Close()

	var mu sync.Mutex
	counts := make(map[string]int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := tern.Connect(e.srv.URL())
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			p := nc.Streams().Pull("wq", "workers")
			for {
				mu.Lock()
				all := len(counts) == m
				mu.Unlock()
				if all {
					return
				}
				msgs, err := p.Fetch(e.ctx, 50, tern.FetchMaxWait(100*time.Millisecond))
				if errors.Is(err, tern.ErrTimeout) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				for _, msg := range msgs {
					mu.Lock()
					counts[string(msg.Data)]++
					mu.Unlock()
					if err := msg.Ack(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// Nothing comes back once all is acknowledged, not even after an ack wait.
	if extra, err := e.js.Pull("wq", "workers").Fetch(e.ctx, 1, tern.FetchMaxWait(300*time.Millisecond)); !errors.Is(err, tern.ErrTimeout) {
		t.Fatalf("after every message was processed, fetched %d more (err %v)", len(extra), err)
	}
	if len(counts) != m {
		t.Fatalf("processed %d distinct messages, want %d", len(counts), m)
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("message %s processed %d times", k, n)
		}
	}
	if len(heldSeqs) != 10 {
		t.Fatalf("dying worker held %d", len(heldSeqs))
	}
	waitFor(t, "work queue to empty", func() bool { return e.streamInfo("wq").State.Msgs == 0 })
}

func TestInterestRetention(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "in", Retention: tern.RetainInterest})
	// With no consumer, nobody is interested: acknowledged but not kept.
	e.publish("in", "lost")
	waitFor(t, "uninteresting message removed", func() bool { return e.streamInfo("in").State.Msgs == 0 })

	e.addConsumer("in", tern.ConsumerConfig{Durable: "a"})
	e.addConsumer("in", tern.ConsumerConfig{Durable: "b"})
	e.publish("in", "kept")
	pa, pb := e.js.Pull("in", "a"), e.js.Pull("in", "b")
	defer pa.Close()
	defer pb.Close()
	if err := e.fetch(pa, 1)[0].AckSync(e.ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := e.streamInfo("in").State.Msgs; n != 1 {
		t.Fatalf("after one of two acks the stream has %d messages, want 1", n)
	}
	if err := e.fetch(pb, 1)[0].AckSync(e.ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message removed after both acks", func() bool { return e.streamInfo("in").State.Msgs == 0 })

	// Deleting a consumer releases what only it still held.
	e.publish("in", "held by b")
	if err := e.fetch(pa, 1)[0].AckSync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteConsumer(e.ctx, "in", "b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message released by consumer deletion", func() bool { return e.streamInfo("in").State.Msgs == 0 })
}

func TestLimitsRetention(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "old", MaxMsgs: 10})
	for i := 0; i < 25; i++ {
		e.publish("old", strconv.Itoa(i))
	}
	st := e.streamInfo("old").State
	if st.Msgs != 10 || st.FirstSeq != 16 || st.LastSeq != 25 {
		t.Fatalf("discard old: %+v", st)
	}
	e.addStream(tern.StreamConfig{Name: "new", MaxMsgs: 5, Discard: "new"})
	for i := 0; i < 5; i++ {
		e.publish("new", "x")
	}
	_, err := e.js.Publish(e.ctx, "new", []byte("over"))
	var ae *tern.APIError
	if !errors.As(err, &ae) || ae.Code != 429 {
		t.Fatalf("publish over a discard-new limit: %v", err)
	}
	e.addStream(tern.StreamConfig{Name: "ttl", MaxAge: tern.Duration(100 * time.Millisecond)})
	e.publish("ttl", "short-lived")
	waitFor(t, "message to expire", func() bool { return e.streamInfo("ttl").State.Msgs == 0 })
	e.addStream(tern.StreamConfig{Name: "small", MaxMsgSize: 8})
	if _, err := e.js.Publish(e.ctx, "small", []byte("123456789")); !errors.As(err, &ae) || ae.Code != 413 {
		t.Fatalf("oversized message: %v", err)
	}
}

func TestPushConsumer(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "push", Subjects: []string{"push.>"}})
	for i := 0; i < 50; i++ {
		e.publish("push.a", strconv.Itoa(i))
	}
	got := make(chan *tern.Msg, 100)
	sub, err := e.nc.Subscribe("deliver.push", func(m *tern.Msg) { got <- m; _ = m.Ack() }, tern.Queue("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Outsiders on the deliver subject: a plain subscriber and another group get nothing.
	var outsiders atomic.Int64
	for _, opt := range [][]tern.SubOpt{nil, {tern.Queue("other")}} {
		o, err := e.nc.Subscribe("deliver.push", func(*tern.Msg) { outsiders.Add(1) }, opt...)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Unsubscribe()
	}
	_ = e.nc.Flush()
	e.addConsumer("push", tern.ConsumerConfig{Durable: "p", DeliverSubject: "deliver.push", DeliverGroup: "g"})
	for i := 0; i < 50; i++ {
		select {
		case m := <-got:
			if string(m.Data) != strconv.Itoa(i) || m.Subject != "push.a" {
				t.Fatalf("push message %d: %s %q", i, m.Subject, m.Data)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("push delivered %d of 50", i)
		}
	}
	waitFor(t, "push acks", func() bool { return e.consumerInfo("push", "p").NumAckPending == 0 })
	if n := outsiders.Load(); n != 0 {
		t.Fatalf("%d pushed messages reached subscribers outside deliver group g", n)
	}
}

func TestDeliverPolicies(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "dp", Subjects: []string{"dp.*"}})
	e.publish("dp.a", "a1")
	e.publish("dp.b", "b1")
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	e.publish("dp.a", "a2")
	e.publish("dp.b", "b2")

	cases := []struct {
		cfg  tern.ConsumerConfig
		want []string
	}{
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverAll}, []string{"a1", "b1", "a2", "b2"}},
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverLast}, []string{"b2"}},
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverLast, FilterSubject: "dp.a"}, []string{"a2"}},
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverLastPerSubject}, []string{"a2", "b2"}},
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverByStartSeq, OptStartSeq: 2}, []string{"b1", "a2", "b2"}},
		{tern.ConsumerConfig{DeliverPolicy: tern.DeliverByStartTime, OptStartTime: &mid}, []string{"a2", "b2"}},
		{tern.ConsumerConfig{FilterSubject: "dp.b"}, []string{"b1", "b2"}},
	}
	for i, tc := range cases {
		tc.cfg.Durable = "c" + strconv.Itoa(i)
		e.addConsumer("dp", tc.cfg)
		p := e.js.Pull("dp", tc.cfg.Durable)
		var got []string
		for _, m := range e.fetch(p, len(tc.want)) {
			got = append(got, string(m.Data))
			_ = m.Ack()
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s %s: got %v, want %v", tc.cfg.DeliverPolicy, tc.cfg.FilterSubject, got, tc.want)
		}
		if _, err := p.Fetch(e.ctx, 1, tern.FetchNoWait()); !errors.Is(err, tern.ErrNoMessages) {
			t.Errorf("%s: more than expected: %v", tc.cfg.DeliverPolicy, err)
		}
		p.Close()
	}
	e.publish("dp.a", "a3")
	e.addConsumer("dp", tern.ConsumerConfig{Durable: "fresh", DeliverPolicy: tern.DeliverNew})
	e.publish("dp.b", "b3")
	p := e.js.Pull("dp", "fresh")
	defer p.Close()
	if m := e.fetch(p, 1)[0]; string(m.Data) != "b3" {
		t.Fatalf("deliver new got %q", m.Data)
	}
}

func TestAckAllIsCumulative(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "cum"})
	for i := 0; i < 10; i++ {
		e.publish("cum", strconv.Itoa(i))
	}
	e.addConsumer("cum", tern.ConsumerConfig{Durable: "c", AckPolicy: tern.AckAll})
	p := e.js.Pull("cum", "c")
	defer p.Close()
	msgs := e.fetch(p, 10)
	if err := msgs[6].AckSync(e.ctx); err != nil {
		t.Fatal(err)
	}
	ci := e.consumerInfo("cum", "c")
	if ci.NumAckPending != 3 || ci.Partitions[0].AckFloor != 7 {
		t.Fatalf("after acking the 7th of 10: %+v", ci)
	}
}

func TestPurgeAndDelete(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "pg", Subjects: []string{"pg.*"}})
	for i := 0; i < 10; i++ {
		e.publish("pg.a", "x")
		e.publish("pg.b", "y")
	}
	n, err := e.js.PurgeStream(e.ctx, "pg", &tern.PurgeRequest{Subject: "pg.a"})
	if err != nil || n != 10 {
		t.Fatalf("purge subject: %d %v", n, err)
	}
	if st := e.streamInfo("pg").State; st.Msgs != 10 {
		t.Fatalf("after subject purge: %+v", st)
	}
	n, err = e.js.PurgeStream(e.ctx, "pg", &tern.PurgeRequest{Keep: 3})
	if err != nil || n != 7 {
		t.Fatalf("purge keep 3: %d %v", n, err)
	}
	if _, err := e.js.PurgeStream(e.ctx, "pg", nil); err != nil {
		t.Fatal(err)
	}
	if st := e.streamInfo("pg").State; st.Msgs != 0 || st.LastSeq != 20 {
		t.Fatalf("after purge: %+v", st)
	}
	if err := e.js.DeleteStream(e.ctx, "pg"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.StreamInfo(e.ctx, "pg"); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("deleted stream: %v", err)
	}
	list, err := e.js.ListStreams(e.ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %v %v", list, err)
	}
}

func TestEphemeralConsumerGoesAway(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "eph"})
	info := e.addConsumer("eph", tern.ConsumerConfig{InactiveThreshold: tern.Duration(300 * time.Millisecond)})
	if info.Name == "" {
		t.Fatal("ephemeral consumer without a name")
	}
	waitFor(t, "idle ephemeral consumer removed", func() bool {
		_, err := e.js.ConsumerInfo(e.ctx, "eph", info.Name)
		return errors.Is(err, tern.ErrConsumerNotFound)
	})
}

func TestPartitionsKeepKeyOrder(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "parts", Subjects: []string{"parts.>"}, Partitions: 4})
	partOf := map[string]int{}
	for i := 0; i < 200; i++ {
		key := "k" + strconv.Itoa(i%8)
		ack := e.publish("parts.x", key+":"+strconv.Itoa(i), tern.Key(key))
		if p, ok := partOf[key]; ok && p != ack.Partition {
			t.Fatalf("key %s went to partitions %d and %d", key, p, ack.Partition)
		}
		partOf[key] = ack.Partition
	}
	used := map[int]bool{}
	for _, p := range partOf {
		used[p] = true
	}
	if len(used) < 2 {
		t.Fatalf("8 keys used only partitions %v", used)
	}
	if st := e.streamInfo("parts").State; st.Msgs != 200 || len(st.Parts) != 4 {
		t.Fatalf("partitioned state: %+v", st)
	}
	e.addConsumer("parts", tern.ConsumerConfig{Durable: "all"})
	p := e.js.Pull("parts", "all")
	defer p.Close()
	last := map[string]int{}
	for _, m := range e.fetch(p, 200) {
		var key string
		var n int
		if _, err := fmt.Sscanf(string(m.Data), "%2s:%d", &key, &n); err != nil {
			t.Fatalf("payload %q: %v", m.Data, err)
		}
		if prev, ok := last[key]; ok && n <= prev {
			t.Fatalf("key %s: %d after %d", key, n, prev)
		}
		last[key] = n
		_ = m.Ack()
	}
	info, err := e.js.StreamInfo(e.ctx, "parts")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Partition != nil || len(info.State.Parts) != 4 {
		t.Fatalf("state: partition %v, %d parts", info.State.Partition, len(info.State.Parts))
	}
	for i, ps := range info.State.Parts {
		if ps.Partition == nil || *ps.Partition != i {
			t.Fatalf("parts[%d] is numbered %v", i, ps.Partition)
		}
	}
}

func TestPublisherChoosesPartition(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "chosen", Subjects: []string{"chosen"}, Partitions: 3})
	for i := range 9 {
		want := i % 3
		ack := e.publish("chosen", strconv.Itoa(i), tern.Key("one key"), tern.ToPartition(want))
		if ack.Partition != want {
			t.Fatalf("message %d asked partition %d, went to %d", i, want, ack.Partition)
		}
	}
	keyed := e.publish("chosen", "x", tern.Key("one key"))
	for _, bad := range []int{3, -1} {
		if ack := e.publish("chosen", "y", tern.Key("one key"), tern.ToPartition(bad)); ack.Partition != keyed.Partition {
			t.Fatalf("partition %d out of range: went to %d, the key's is %d", bad, ack.Partition, keyed.Partition)
		}
	}
}

func TestPurgeOnePartition(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "pp", Subjects: []string{"pp"}, Partitions: 2})
	for i := range 10 {
		e.publish("pp", strconv.Itoa(i), tern.ToPartition(i%2))
	}
	one := 1
	n, err := e.js.PurgeStream(e.ctx, "pp", &tern.PurgeRequest{UpTo: 4, Partition: &one})
	if err != nil || n != 3 {
		t.Fatalf("purge below 4 in partition 1: %d %v, want 3", n, err)
	}
	st := e.streamInfo("pp").State
	if st.Parts[0].Msgs != 5 || st.Parts[1].Msgs != 2 || st.Parts[1].FirstSeq != 4 {
		t.Fatalf("after the purge: %+v", st.Parts)
	}
	two := 2
	if _, err := e.js.PurgeStream(e.ctx, "pp", &tern.PurgeRequest{Partition: &two}); err == nil {
		t.Fatal("purge of a partition the stream does not have succeeded")
	}
}

func TestConsumerGroupRebalances(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "grp", Partitions: 4})
	e.addConsumer("grp", tern.ConsumerConfig{Durable: "g", MemberTimeout: tern.Duration(300 * time.Millisecond)})
	for i := 0; i < 40; i++ {
		e.publish("grp", strconv.Itoa(i), tern.Key(strconv.Itoa(i)))
	}
	a := e.js.Pull("grp", "g", tern.Member("a"))
	b := e.js.Pull("grp", "g", tern.Member("b"))
	defer a.Close()
	defer b.Close()
	// Join both, then check each is served only from its own partitions.
	_, _ = a.Fetch(e.ctx, 1, tern.FetchNoWait())
	_, _ = b.Fetch(e.ctx, 1, tern.FetchNoWait())
	ci := e.consumerInfo("grp", "g")
	if len(ci.Members) != 2 {
		t.Fatalf("members %v", ci.Members)
	}
	owner := map[int]string{}
	for _, ps := range ci.Partitions {
		owner[ps.Partition] = ps.Member
	}
	for _, mb := range []struct {
		name string
		p    *tern.Pull
	}{{"a", a}, {"b", b}} {
		for {
			msgs, err := mb.p.Fetch(e.ctx, 10, tern.FetchNoWait())
			if err != nil {
				break
			}
			for _, m := range msgs {
				part := meta(t, m).Partition
				if owner[part] != mb.name {
					t.Fatalf("member %s got partition %d owned by %q", mb.name, part, owner[part])
				}
				_ = m.Ack()
			}
		}
	}
	// b goes quiet; after the member timeout a owns every partition.
	time.Sleep(450 * time.Millisecond)
	_, _ = a.Fetch(e.ctx, 1, tern.FetchNoWait())
	waitFor(t, "rebalance to the remaining member", func() bool {
		ci := e.consumerInfo("grp", "g")
		for _, ps := range ci.Partitions {
			if ps.Member != "a" {
				return false
			}
		}
		return len(ci.Members) == 1
	})
	// a drains what is left, including the messages b and a fetched at the start
	// without acking; the status that ends the drain carries the new assignment.
	for {
		msgs, err := a.Fetch(e.ctx, 10, tern.FetchNoWait())
		if err != nil {
			break
		}
		for _, m := range msgs {
			_ = m.Ack()
		}
	}
	if got := a.Assigned(); len(got) != 4 {
		t.Fatalf("a's assignment %v, want all 4 partitions; info %+v", got, e.consumerInfo("grp", "g"))
	}
}

// TestAckSyncBoundedByAPITimeout: AckSync with a context that has no deadline waits at
// most the APITimeout of the Streams that fetched the message when no confirmation
// comes (its consumer was deleted meanwhile).
func TestAckSyncBoundedByAPITimeout(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "as", Subjects: []string{"as.>"}})
	e.addConsumer("as", tern.ConsumerConfig{Durable: "gone", AckPolicy: "explicit"})
	e.publish("as.x", "one")
	js := e.nc.Streams(tern.APITimeout(300 * time.Millisecond))
	p := js.Pull("as", "gone")
	defer p.Close()
	msgs, err := p.Fetch(e.ctx, 1, tern.FetchMaxWait(2*time.Second))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("fetch: %d messages, %v", len(msgs), err)
	}
	if err := e.js.DeleteConsumer(e.ctx, "as", "gone"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = msgs[0].AckSync(context.Background())
	if took := time.Since(start); !errors.Is(err, tern.ErrTimeout) || took > 3*time.Second {
		t.Fatalf("AckSync after its consumer went: %v after %v, want ErrTimeout after about 300ms", err, took)
	}
}

// TestNumPendingExact: a consumer's pending count is the live messages from its
// position on that pass its filter, not the stream sequences after it: through
// reads, removals by another work-queue consumer, new messages and purges.
func TestNumPendingExact(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "np", Subjects: []string{"np.>"}, Retention: tern.RetainWorkQueue})
	for i := 0; i < 30; i++ {
		e.publish("np."+string(rune('a'+i%3)), strconv.Itoa(i)) // np.a, np.b, np.c: 10 each
	}
	e.addConsumer("np", tern.ConsumerConfig{Durable: "a", FilterSubject: "np.a"})
	e.addConsumer("np", tern.ConsumerConfig{Durable: "b", FilterSubject: "np.b"})
	check := func(stage string, wantA, wantB uint64) {
		t.Helper()
		a, b := e.consumerInfo("np", "a").NumPending, e.consumerInfo("np", "b").NumPending
		if a != wantA || b != wantB {
			t.Fatalf("%s: pending a %d, b %d; want %d, %d", stage, a, b, wantA, wantB)
		}
	}
	check("start", 10, 10)
	take := func(name string, n int) {
		p := e.js.Pull("np", name)
		defer p.Close()
		for _, m := range e.fetch(p, n) {
			if err := m.AckSync(e.ctx); err != nil { // the work queue removes it
				t.Fatal(err)
			}
		}
	}
	take("a", 4)
	check("a took 4", 6, 10)
	take("b", 3)
	check("b took 3", 6, 7)
	for i := 0; i < 5; i++ {
		e.publish("np.b", "more")
	}
	check("5 more for b", 6, 12)
	if _, err := e.js.PurgeStream(e.ctx, "np", &tern.PurgeRequest{Subject: "np.a"}); err != nil {
		t.Fatal(err)
	}
	check("np.a purged", 0, 12)
	take("b", 12)
	check("b took all", 0, 0)

	// Without a filter: interior removals count too.
	e.addStream(tern.StreamConfig{Name: "all", Subjects: []string{"all.>"}})
	for i := 0; i < 20; i++ {
		e.publish("all."+strconv.Itoa(i%4), "x")
	}
	e.addConsumer("all", tern.ConsumerConfig{Durable: "c"})
	p := e.js.Pull("all", "c")
	defer p.Close()
	e.fetch(p, 3)
	if n := e.consumerInfo("all", "c").NumPending; n != 17 {
		t.Fatalf("unfiltered after 3: %d pending, want 17", n)
	}
	if _, err := e.js.PurgeStream(e.ctx, "all", &tern.PurgeRequest{Subject: "all.1"}); err != nil {
		t.Fatal(err)
	}
	// all.1 were sequences 2, 6, 10, 14, 18: four of them after the position.
	if n := e.consumerInfo("all", "c").NumPending; n != 13 {
		t.Fatalf("unfiltered after purging all.1: %d pending, want 13", n)
	}
}

// TestNumPendingModel: random publishes, fetches and subject purges on a work
// queue with two filtered consumers; at random moments each consumer's pending
// count equals the model's (messages of its subject published, neither delivered
// nor purged).
func TestNumPendingModel(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "m", Subjects: []string{"m.>"}, Retention: tern.RetainWorkQueue})
	e.addConsumer("m", tern.ConsumerConfig{Durable: "a", FilterSubject: "m.a"})
	e.addConsumer("m", tern.ConsumerConfig{Durable: "b", FilterSubject: "m.b.*"})
	pulls := map[string]*tern.Pull{"a": e.js.Pull("m", "a"), "b": e.js.Pull("m", "b")}
	for _, p := range pulls {
		defer p.Close()
	}
	model := map[string]int{}
	rng := rand.New(rand.NewPCG(7, 11))
	for op := 0; op < 300; op++ {
		switch r := rng.IntN(10); {
		case r < 5:
			switch rng.IntN(3) {
			case 0:
				e.publish("m.a", "x")
				model["a"]++
			case 1:
				e.publish("m.b."+strconv.Itoa(rng.IntN(3)), "x")
				model["b"]++
			default:
				e.publish("m.c", "x") // neither
			}
		case r < 8:
			name := []string{"a", "b"}[rng.IntN(2)]
			if k := min(model[name], 1+rng.IntN(4)); k > 0 {
				for _, m := range e.fetch(pulls[name], k) {
					if err := m.AckSync(e.ctx); err != nil {
						t.Fatal(err)
					}
				}
				model[name] -= k
			}
		case r < 9:
			if rng.IntN(2) == 0 {
				if _, err := e.js.PurgeStream(e.ctx, "m", &tern.PurgeRequest{Subject: "m.a"}); err != nil {
					t.Fatal(err)
				}
				model["a"] = 0
			} else {
				if _, err := e.js.PurgeStream(e.ctx, "m", &tern.PurgeRequest{Subject: "m.c"}); err != nil {
					t.Fatal(err)
				}
			}
		default:
			for _, name := range []string{"a", "b"} {
				if got := e.consumerInfo("m", name).NumPending; got != uint64(model[name]) {
					t.Fatalf("op %d: %s has %d pending, model %d", op, name, got, model[name])
				}
			}
		}
	}
}

// TestConsumeManyBatches: a Consume loop keeps requests outstanding until every
// message has come, many batches' worth, each once and in order, and then waits
// with requests still out for messages published later.
func TestConsumeManyBatches(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "many", Subjects: []string{"many.>"}})
	const n = 500
	for i := 0; i < n; i++ {
		e.publish("many.x", strconv.Itoa(i))
	}
	e.addConsumer("many", tern.ConsumerConfig{Durable: "c", AckPolicy: tern.AckNone})
	got := make(chan string, 2*n)
	cc, err := e.js.Pull("many", "c").Consume(16, func(m *tern.Msg) { got <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	next := func(want string) {
		t.Helper()
		select {
		case d := <-got:
			if d != want {
				t.Fatalf("got %q, want %q", d, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiting for %q: nothing came (loop error %v)", want, cc.Err())
		}
	}
	for i := 0; i < n; i++ {
		next(strconv.Itoa(i))
	}
	e.publish("many.x", "later")
	next("later")
}

// replyAcks collects the acks publishers get on reply subjects.
type replyAcks struct {
	mu  sync.Mutex
	got []string
}

func (r *replyAcks) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	r.mu.Lock()
	r.got = append(r.got, string(m.Payload))
	r.mu.Unlock()
	return true
}
func (r *replyAcks) Flush() {}

// TestInProcessAcks: a publisher with a broker.Acker gets its answers in
// process, a run of messages stored one after another with one tag in one call,
// a duplicate its own, a message too large its refusal; a publisher with only
// a reply subject still gets one pub-ack message per message.
func TestInProcessAcks(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "RANGE", Subjects: []string{"range.>"}, MaxMsgSize: 100})
	b := e.srv.Broker()
	replies := &replyAcks{}
	if err := b.Subscribe(&broker.Subscription{Sink: replies, Subject: "_INBOX.range.>"}); err != nil {
		t.Fatal(err)
	}
	e.publish("range.x", "first", tern.MsgID("k:1"))
	acker := &stream.InProcessAcks{}
	var batch broker.Batch
	pub := func(reply string, tag uint64, id string, size int) {
		m := &broker.Message{Subject: []byte("range.x"), Reply: []byte(reply), Payload: make([]byte, size)}
		if tag != 0 {
			m.Acker, m.AckTag = acker, tag
		}
		if id != "" {
			m.Header = header.Block(header.Append(nil, streamapi.HeaderMsgID, id))
		}
		b.Publish(&batch, m)
	}
	// One publish call's worth, as the Kafka API sends a produce request; the
	// reply subjects of messages with an Acker are not answered.
	for range 5 {
		pub("_INBOX.range.a", 1, "", 1)
	}
	pub("_INBOX.range.a", 1, "k:1", 1) // a duplicate
	pub("_INBOX.range.a", 1, "", 1)
	pub("_INBOX.range.b", 2, "", 1)   // another tag
	pub("_INBOX.range.b", 2, "", 200) // too large
	pub("_INBOX.range.c", 0, "", 1)   // a reply subject only
	pub("_INBOX.range.c", 0, "", 1)
	batch.Flush()
	waitFor(t, "the acks", func() bool {
		replies.mu.Lock()
		defer replies.mu.Unlock()
		return acker.Count() >= 9 && len(replies.got) >= 2
	})
	time.Sleep(20 * time.Millisecond) // an answer too many would come by now
	acker.Lock()
	defer acker.Unlock()
	if got, want := strings.Join(acker.Seqs[1], " "), "2 3 4 5 6 1 dup 7"; got != want {
		t.Errorf("tag 1 acks %q, want %q", got, want)
	}
	if got, want := strings.Join(acker.Seqs[2], " "), fmt.Sprintf("8 err %d", streamapi.CodeTooLarge); got != want {
		t.Errorf("tag 2 acks %q, want %q", got, want)
	}
	// Runs are answered in one call each: tag 1's five, its duplicate, its
	// last, and tag 2's two make 5 calls when the writer takes the queue as one
	// batch (a run split across two commits is two calls, which is right too).
	if acker.Calls >= 9 {
		t.Errorf("%d calls for 9 messages: no run answered in one", acker.Calls)
	}
	replies.mu.Lock()
	defer replies.mu.Unlock()
	if got, want := strings.Join(replies.got, "|"), "+OK RANGE 0 9|+OK RANGE 0 10"; got != want {
		t.Errorf("reply-subject acks %q, want %q", got, want)
	}
}

// TestGroupsStoredTogether: publishers' groups (broker.Batch.BeginGroup, as the
// Kafka API publishes a record batch) are stored at consecutive sequences while
// another publisher's messages come in between, two group publishers at once so
// that one group is often open while the other's comes (and is staged), in a
// stream capturing a literal subject and in one whose filter starts with a
// wildcard.
func TestGroupsStoredTogether(t *testing.T) {
	e := newEnv(t)
	e.addStream(tern.StreamConfig{Name: "GRP", Subjects: []string{"grp.x"}})
	e.addStream(tern.StreamConfig{Name: "WILD", Subjects: []string{"*.w"}})
	b := e.srv.Broker()
	const groups, size, maxSingles = 200, 20, 1_000_000
	stop, singles := make(chan struct{}), make(chan int, 1)
	var started atomic.Int64
	go func() {
		// One message at a time until the groups are in, and no further.
		var batch broker.Batch
		n := 0
		for ; n < maxSingles; n++ {
			select {
			case <-stop:
				singles <- n
				return
			default:
			}
			b.Publish(&batch, &broker.Message{Subject: []byte("grp.x"), Payload: []byte("single")})
			b.Publish(&batch, &broker.Message{Subject: []byte("wild.w"), Payload: []byte("single")})
			batch.FlushInline()
			started.Store(int64(n))
		}
		singles <- n
	}()
	waitFor(t, "the other publisher under way", func() bool { return started.Load() >= 100 })
	var wg sync.WaitGroup
	for _, who := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch broker.Batch
			for g := range groups {
				batch.BeginGroup()
				for i := range size { // the group goes to both streams, interleaved
					b.Publish(&batch, &broker.Message{Subject: []byte("grp.x"), Payload: fmt.Appendf(nil, "%s%d-%d", who, g, i)})
					b.Publish(&batch, &broker.Message{Subject: []byte("wild.w"), Payload: fmt.Appendf(nil, "%s%d-%d", who, g, i)})
				}
				batch.FlushInline()
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-singles
	total := uint64(2*groups*size + n)
	for _, name := range []string{"GRP", "WILD"} {
		waitFor(t, name+" holding every message", func() bool { return e.streamInfo(name).State.Msgs == total })
		next := map[string]int{} // per publisher, the group expected next
		for seq := uint64(1); seq <= total; seq++ {
			m, err := e.js.GetMsg(e.ctx, name, 0, seq)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Data) == "single" {
				continue
			}
			who := string(m.Data[:1])
			if want := fmt.Sprintf("%s%d-0", who, next[who]); string(m.Data) != want {
				t.Fatalf("%s seq %d: %q, want %q", name, seq, m.Data, want)
			}
			for i := 1; i < size; i++ {
				m, err := e.js.GetMsg(e.ctx, name, 0, seq+uint64(i))
				if want := fmt.Sprintf("%s%d-%d", who, next[who], i); err != nil || string(m.Data) != want {
					t.Fatalf("%s seq %d: %q %v, want %q right after the group's first", name, seq+uint64(i), m.Data, err, want)
				}
			}
			seq += size - 1
			next[who]++
		}
		if next["a"] != groups || next["b"] != groups {
			t.Fatalf("%s: groups found %v, want %d of each", name, next, groups)
		}
	}
	t.Logf("%d single messages published among the groups", n)
}
