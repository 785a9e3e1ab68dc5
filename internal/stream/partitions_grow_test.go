package stream_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// TestAddPartitions: a stream given more partitions keeps its messages and
// sequences in the old ones, new publishes spread over all of them by key, a
// durable consumer goes on where it was and reads the new partitions too, and
// the count survives a restart; partitions cannot be taken away.
func TestAddPartitions(t *testing.T) {
	dir := t.TempDir()
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	cfg := tern.StreamConfig{Name: "grow", Subjects: []string{"grow.>"}, MaxMsgs: 100000}
	e.addStream(cfg)
	for i := range 10 {
		if ack := e.publish("grow.x", "before"+strconv.Itoa(i), tern.Key("k"+strconv.Itoa(i))); ack.Seq != uint64(i+1) {
			t.Fatalf("publish %d before: %+v", i, ack)
		}
	}
	e.addConsumer("grow", tern.ConsumerConfig{Durable: "c"})
	p := e.js.Pull("grow", "c")
	acked := map[string]bool{}
	for _, m := range e.fetch(p, 4) {
		if err := m.AckSync(e.ctx); err != nil {
			t.Fatal(err)
		}
		acked[string(m.Data)] = true
	}
	p.Close()

	// Another client publishes while the partitions are added: each publish
	// is stored once.
	other := connectEnv(t, srv)
	var sent atomic.Int64
	stopAt := make(chan int64, 1)
	published := make(chan error, 1)
	go func() {
		limit := int64(5000)
		for i := int64(0); i < limit; i++ {
			select {
			case n := <-stopAt:
				limit = n
			default:
			}
			if _, err := other.js.Publish(other.ctx, "grow.y", []byte("during"+strconv.FormatInt(i, 10)),
				tern.Key("d"+strconv.FormatInt(i, 10)), tern.MsgID("during-"+strconv.FormatInt(i, 10))); err != nil {
				published <- err
				return
			}
			sent.Add(1)
		}
		published <- nil
	}()
	waitFor(t, "publishes before the update", func() bool { return sent.Load() >= 20 })
	cfg.Partitions = 3
	if _, err := e.js.UpdateStream(e.ctx, cfg); err != nil {
		t.Fatalf("adding partitions: %v", err)
	}
	stopAt <- sent.Load() + 60 // some after the update too
	if err := <-published; err != nil {
		t.Fatalf("publishing while partitions were added: %v", err)
	}
	other.nc.Close()
	during := int(sent.Load())
	info := e.streamInfo("grow")
	if info.Config.Partitions != 3 || len(info.State.Parts) != 3 {
		t.Fatalf("after the update: %d partitions configured, %d in the state", info.Config.Partitions, len(info.State.Parts))
	}
	if info.State.Msgs != uint64(10+during) || info.State.Parts[0].FirstSeq != 1 {
		t.Fatalf("after the update: %d messages (want %d), partition 0 %+v", info.State.Msgs, 10+during, info.State.Parts[0])
	}
	got := make([]uint64, 3)
	for i, ps := range info.State.Parts {
		got[i] = ps.LastSeq
		if ps.Msgs == 0 {
			t.Fatalf("partition %d got none of the publishes after the update: %+v", i, info.State.Parts)
		}
	}
	used := map[int]int{}
	for i := range 30 {
		ack := e.publish("grow.x", "after"+strconv.Itoa(i), tern.Key("key-"+strconv.Itoa(i)))
		used[ack.Partition]++
	}
	if len(used) != 3 {
		t.Fatalf("30 keys went to partitions %v, want all 3", used)
	}
	if ack := e.publish("grow.x", "chosen", tern.ToPartition(2)); ack.Partition != 2 || ack.Seq != got[2]+uint64(used[2])+1 {
		t.Fatalf("publish to partition 2: %+v, want its sequence %d", ack, got[2]+uint64(used[2])+1)
	}
	if ack := e.publish("grow.x", "p0", tern.ToPartition(0)); ack.Seq != got[0]+uint64(used[0])+1 {
		t.Fatalf("partition 0 goes on from its sequence: %+v, want %d", ack, got[0]+uint64(used[0])+1)
	}

	// The consumer: the 6 messages it had not taken, then everything since.
	p = e.js.Pull("grow", "c")
	seen := map[string]bool{}
	for _, m := range e.fetch(p, 6+during+30+2) {
		d := string(m.Data)
		if acked[d] || seen[d] {
			t.Fatalf("message %q delivered again", d)
		}
		seen[d] = true
		if err := m.AckSync(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()

	cfg.Partitions = 2
	if _, err := e.js.UpdateStream(e.ctx, cfg); err == nil {
		t.Fatal("taking a partition away succeeded")
	}
	e.nc.Close()
	stop(t, srv)

	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	info = e.streamInfo("grow")
	if info.Config.Partitions != 3 || info.State.Msgs != uint64(42+during) || len(info.State.Parts) != 3 {
		t.Fatalf("after a restart: %d partitions, %d messages, %d parts", info.Config.Partitions, info.State.Msgs, len(info.State.Parts))
	}
	if ci := e.consumerInfo("grow", "c"); ci.NumPending != 0 || ci.NumAckPending != 0 {
		t.Fatalf("consumer after a restart: %d to deliver, %d unacknowledged", ci.NumPending, ci.NumAckPending)
	}
}

// TestAddPartitionsLosesNoCapture: messages published without an
// acknowledgement while partitions are added, or other settings changed, are
// all stored: a reopened stream takes over the old one's subscriptions and
// what it had queued, and an update keeps the subscriptions of the subjects
// it keeps, so nothing published in between is dropped.
func TestAddPartitionsLosesNoCapture(t *testing.T) {
	srv := startAt(t, t.TempDir(), nil)
	defer stop(t, srv)
	e := connectEnv(t, srv)
	cfg := tern.StreamConfig{Name: "fire", Subjects: []string{"fire.>"}, Partitions: 1}
	e.addStream(cfg)

	pub := connectEnv(t, srv)
	const total = 60000
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range total {
			if err := pub.nc.Publish("fire.x", []byte("m"+strconv.Itoa(i))); err != nil {
				done <- err
				return
			}
			sent.Add(1)
			if i%500 == 499 {
				// Keep the publisher and the server in step, so that the
				// update lands among the publishes rather than after them.
				if err := pub.nc.Flush(); err != nil {
					done <- err
					return
				}
			}
		}
		done <- pub.nc.Flush()
	}()
	for step := 1; step <= 6; step++ {
		waitFor(t, "publishes before the update", func() bool { return sent.Load() >= int64(step)*total/8 })
		if step%2 == 1 {
			cfg.Partitions++ // 2, 3, 4
		} else {
			cfg.MaxMsgs = uint64(10 * total * step) // an update that reopens nothing
		}
		if _, err := e.js.UpdateStream(e.ctx, cfg); err != nil {
			t.Fatalf("update %d: %v", step, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("publishing: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.streamInfo("fire").State.Msgs < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if info := e.streamInfo("fire"); info.State.Msgs != total || len(info.State.Parts) != 4 {
		t.Fatalf("%d messages in %d partitions, want %d in 4: %+v", info.State.Msgs, len(info.State.Parts), total, info.State.Parts)
	}
}
