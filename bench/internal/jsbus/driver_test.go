package jsbus_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tern-mq/tern/bench/internal/jsbus"
	"github.com/tern-mq/tern/bench/internal/jsbus/jstest"
	"github.com/tern-mq/tern/bench/internal/streambench"
)

// TestDriver checks the driver's contract directly: errors for what it cannot do or
// the server refuses, short fetches, cumulative acks, replay stopping.
func TestDriver(t *testing.T) {
	s := jstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := jsbus.New(s.URL)
	c, err := d.Connect(ctx, "jsbus-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := c.ServerVersion(); v == "" {
		t.Error("no server version")
	}

	spec := streambench.StreamSpec{Name: "T", Subjects: []string{"t"}, Retention: streambench.RetainLimits, Storage: streambench.StorageFile}
	bad := spec
	bad.Sync = streambench.SyncAlways
	if err := c.CreateStream(ctx, bad); !errors.Is(err, streambench.ErrUnsupported) {
		t.Fatalf("sync always: err %v, want ErrUnsupported", err)
	}
	if err := c.CreateStream(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateStream(ctx, streambench.StreamSpec{Name: "T2", Subjects: []string{"t"}}); err == nil {
		t.Fatal("a second stream on the same subject was accepted")
	}

	// Publishing to a subject no stream captures fails, synchronously and async.
	if err := c.PublishSync(ctx, "nowhere", []byte("x")); err == nil {
		t.Fatal("PublishSync to an uncaptured subject succeeded")
	}
	if f, err := c.PublishAsync("nowhere", []byte("x")); err == nil {
		if err := f.Wait(ctx); err == nil {
			t.Fatal("PublishAsync to an uncaptured subject was acknowledged")
		}
	}

	buf := make([]byte, 8)
	var futures []streambench.PubFuture
	for i := range 10 {
		binary.LittleEndian.PutUint64(buf, uint64(i+1))
		f, err := c.PublishAsync("t", buf)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := c.StreamState(ctx, "T"); err != nil || st.Msgs != 10 {
		t.Fatalf("state %+v, %v; want 10 messages", st, err)
	}

	// A fetch asking for more than there is returns the rest after maxWait, without
	// an error; a cancelled one returns promptly with the context's error.
	if err := c.AddConsumer(ctx, "T", streambench.ConsumerSpec{Durable: "all", AckPolicy: streambench.AckAll, MaxAckPending: 100}); err != nil {
		t.Fatal(err)
	}
	p, err := c.Pull(ctx, "T", "all")
	if err != nil {
		t.Fatal(err)
	}
	var last streambench.Msg
	var seqs []uint64
	start := time.Now()
	n, err := p.Fetch(ctx, 20, 300*time.Millisecond, func(m streambench.Msg) {
		seqs = append(seqs, binary.LittleEndian.Uint64(m.Data()))
		last = m
	})
	if err != nil || n != 10 || len(seqs) != 10 || seqs[0] != 1 || seqs[9] != 10 {
		t.Fatalf("fetch: %d messages %v, err %v", n, seqs, err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 3*time.Second {
		t.Fatalf("a short fetch took %v, want about maxWait", took)
	}
	if err := last.Ack(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(5 * time.Second)
	for {
		cons, err := js.Consumer(ctx, "T", "all")
		if err != nil {
			t.Fatal(err)
		}
		if cons.CachedInfo().NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("one ack under AckAll left %d pending", cons.CachedInfo().NumAckPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, ccancel)
	start = time.Now()
	n, err = p.Fetch(cctx, 5, 10*time.Second, func(streambench.Msg) {})
	ccancel()
	if n != 0 || !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancelled fetch: %d messages, err %v after %v", n, err, time.Since(start))
	}
	_ = p.Close()

	// Replay reads in order and stops when told to.
	var got []uint64
	err = c.Replay(ctx, "T", func(data []byte) bool {
		got = append(got, binary.LittleEndian.Uint64(data))
		return len(got) < 4
	})
	if err != nil || len(got) != 4 || got[0] != 1 || got[3] != 4 {
		t.Fatalf("replay: %v, err %v", got, err)
	}
	// Replaying past the end waits for more until the context ends.
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	got = got[:0]
	err = c.Replay(rctx, "T", func(data []byte) bool { got = append(got, 0); return true })
	rcancel()
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 10 {
		t.Fatalf("replay to the end: %d messages, err %v", len(got), err)
	}
	// The replays' ephemeral consumers are gone; the durable one remains.
	deadline = time.Now().Add(5 * time.Second)
	for {
		str, err := js.Stream(ctx, "T")
		if err != nil {
			t.Fatal(err)
		}
		if n := str.CachedInfo().State.Consumers; n == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d consumers after the replays, want 1", n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := c.DeleteStream(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StreamState(ctx, "T"); err == nil {
		t.Fatal("stream still there after DeleteStream")
	}
}

// With LocalLeader every replicated stream is led by the server the connection
// is to; StreamLeader says so, and names another server for a stream led
// elsewhere.
func TestLocalLeader(t *testing.T) {
	servers := jstest.StartCluster(t, 3)
	jstest.WaitJetStream(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := jsbus.New(servers[0].URL, jsbus.LocalLeader())
	c, err := d.Connect(ctx, "leader-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ll := c.(streambench.LeaderLocator)
	for i := range 3 {
		name := fmt.Sprintf("L%d", i)
		spec := streambench.StreamSpec{Name: name, Subjects: []string{"l" + fmt.Sprint(i)}, Replicas: 3}
		err := c.CreateStream(ctx, spec)
		// JetStream may still count a peer offline for a moment after its meta
		// group reports every peer current (seen under a loaded CI): ask again.
		for deadline := time.Now().Add(20 * time.Second); err != nil && strings.Contains(err.Error(), "peer offline") && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			err = c.CreateStream(ctx, spec)
		}
		if err != nil {
			t.Fatal(err)
		}
		leader, local, err := ll.StreamLeader(ctx, name)
		if err != nil || !local || leader != "js1" {
			t.Fatalf("stream %s: leader %q, local %v, %v; want js1", name, leader, local, err)
		}
	}
	// From another server the same stream's leader is remote.
	other, err := jsbus.New(servers[1].URL).Connect(ctx, "leader-test-2")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	leader, local, err := other.(streambench.LeaderLocator).StreamLeader(ctx, "L0")
	if err != nil || local || leader != "js1" {
		t.Fatalf("seen from js2: leader %q, local %v, %v; want js1, remote", leader, local, err)
	}
}
