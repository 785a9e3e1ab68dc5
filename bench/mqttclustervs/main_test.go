package main

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/mqttload"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/server/servertest"
)

func TestRows(t *testing.T) {
	all := rows(1)
	if len(all) != 12 {
		t.Fatalf("%d rows, want 12", len(all))
	}
	want := map[string]row{
		"p1-32":    {Key: "p1-32", Persistent: true, Pubs: 1, Size: 32, Msgs: 200000},
		"c10-1k":   {Key: "c10-1k", Persistent: false, Pubs: 10, Size: 1024, Msgs: 50000},
		"q2p10-1k": {Key: "q2p10-1k", Persistent: true, Pubs: 10, Size: 1024, Msgs: 50000, QoS2: true},
	}
	for _, r := range all {
		if w, ok := want[r.Key]; ok && r != w {
			t.Errorf("row %s = %+v, want %+v", r.Key, r, w)
		}
	}
	sel, err := selectRows(rows(0.001), "p10,c1-32")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range sel {
		keys = append(keys, r.Key)
		if r.Msgs != 1000 {
			t.Errorf("%s at a tiny scale: %d messages, want the floor of 1000", r.Key, r.Msgs)
		}
	}
	if got := strings.Join(keys, ","); got != "p10-32,p10-1k,c1-32" {
		t.Errorf("selected %s", got)
	}
	if _, err := selectRows(all, "x"); err == nil {
		t.Error("a key that matches nothing was accepted")
	}
}

// TestSummarizeResume checks the resume figures on a made-up run: ten messages 1 ms
// apart, the kill at 4.5 ms, the first message on the new connection at 20 ms.
func TestSummarizeResume(t *testing.T) {
	const ms = int64(time.Millisecond)
	start := int64(1_000_000_000)
	kill := start + 4*ms + ms/2
	n := 10
	sent := make([]atomic.Int64, n)
	acks := make([]atomic.Int64, n)
	sub := &resumeSub{d: make([]delivery, n)}
	for i := range n {
		sent[i].Store(start + int64(i)*ms)
		if i != 7 { // 7 never acknowledged
			acks[i].Store(start + int64(i)*ms + ms/2)
		}
	}
	recv := func(i int, at int64, conn int) { sub.d[i] = delivery{first: at, conn: conn, count: 1} }
	// 0–3 received before the kill; 4 is in flight at the kill.
	for i := range 4 {
		recv(i, start+int64(i)*ms+ms/4, 1)
	}
	sub.firstOn2 = start + 20*ms
	recv(4, start+20*ms, 2) // first on node 3
	recv(5, start+21*ms, 2)
	recv(6, start+22*ms, 2)
	recv(8, start+23*ms, 2)
	// 9: acknowledged, never received. 3 again on node 3: a duplicate.
	sub.d[3].count = 2
	sub.dups = 1

	var res resumeResult
	summarizeResume(&res, kill, start, 1000, sub, sent, acks)
	if res.Published != 10 || res.Acked != 9 || res.Lost != 1 || res.Duplicates != 1 || res.UnackedReceived != 0 {
		t.Errorf("counts: %+v", res)
	}
	if res.ReceivedNode2 != 4 || res.ReceivedNode3 != 4 {
		t.Errorf("per node: %d, %d", res.ReceivedNode2, res.ReceivedNode3)
	}
	if res.FirstMsgMs != 15.5 {
		t.Errorf("first message %.1f ms after the kill, want 15.5", res.FirstMsgMs)
	}
	// The backlog: acknowledged, sent before 20 ms, not received before the kill:
	// 4, 5, 6, 8, 9; 9 never arrives.
	if res.Backlog != 5 || res.BacklogMs != -1 {
		t.Errorf("backlog %d in %.1f ms, want 5 never all received", res.Backlog, res.BacklogMs)
	}
	sub.d[9] = delivery{first: start + 30*ms, conn: 2, count: 1}
	res = resumeResult{}
	summarizeResume(&res, kill, start, 1000, sub, sent, acks)
	if res.Lost != 0 || res.Backlog != 5 || res.BacklogMs != 25.5 {
		t.Errorf("with 9 received: lost %d, backlog %d in %.1f ms, want 0, 5 in 25.5", res.Lost, res.Backlog, res.BacklogMs)
	}
	if res.FirstAckMs != 1 { // 5: sent at 5 ms, after the kill, acknowledged at 5.5 ms
		t.Errorf("first ack %.1f ms after the kill, want 1", res.FirstAckMs)
	}
	if res.MaxLatencyMs != 21 { // 9: sent at 9 ms, received at 30 ms
		t.Errorf("max latency %.1f ms, want 21", res.MaxLatencyMs)
	}
}

func TestReports(t *testing.T) {
	r := row{Key: "p1-32", Persistent: true, Pubs: 1, Size: 32, Msgs: 1000}
	md, sum := throughputReport([]throughputResult{
		{System: "tern", Row: r, Run: 1, Rate: 2000, P50us: 500, P99us: 1500},
		{System: "tern", Row: r, Run: 2, Rate: 4000, P50us: 700, P99us: 2500},
		{System: "js", Row: r, Run: 1, Rate: 1000, P50us: 900, P99us: 12000},
		{System: "js", Row: r, Run: 2, Error: "nothing received for 10s"},
	})
	for _, want := range []string{"| p1-32 | 1→1, 32 B, persistent session | 1,000 | 3.00k (2.00k–4.00k) | 600 µs | 2.0 ms | 1.00k [1 failed] | 900 µs | 12 ms | 3.00× |", "NATS p1-32 run 2: nothing received"} {
		if !strings.Contains(md, want) {
			t.Errorf("throughput report lacks %q:\n%s", want, md)
		}
	}
	if len(sum) != 2 || sum[1].Failed != 1 {
		t.Errorf("summary %+v", sum)
	}
	md, _ = resumeReport([]resumeResult{
		{System: "tern", Run: 1, Acked: 100, FirstMsgMs: 5, BacklogMs: 6, Backlog: 3, Killed: "tern2", LeadersBefore: map[string]string{"mqtt": "tern2", "meta": "tern1"}},
		{System: "tern", Run: 2, Acked: 100, FirstMsgMs: 7, BacklogMs: -1, Lost: 2, Killed: "tern2", LeadersBefore: map[string]string{"mqtt": "tern1"}},
	})
	for _, want := range []string{"| **first message received on node 3** | **6 ms (5 ms–7 ms)** |", "(never, in 1 runs)", "| **acknowledged, never received** | **2** of 200 |", "MQTT group: 1"} {
		if !strings.Contains(md, want) {
			t.Errorf("resume report lacks %q:\n%s", want, md)
		}
	}
}

// TestPublishResend runs the load client against a fake broker that acknowledges
// every PUBLISH: numbers, resends and acknowledgements reach the callbacks.
func TestPublishResend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r := packet.NewReader(nc, 1<<20)
		for {
			p, err := r.ReadPacket()
			if err != nil {
				return
			}
			var out []byte
			switch p := p.(type) {
			case *packet.Connect:
				r.SetVersion(packet.V311)
				out, _ = packet.Append(nil, &packet.Connack{}, packet.V311)
			case *packet.Publish:
				out, _ = packet.Append(nil, &packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}, packet.V311)
			}
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}()
	c, err := mqttload.Dial(ln.Addr().String(), "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sent, acked []uint64
	ackCh := make(chan uint64, 16)
	err = c.PublishWith(mqttload.PublishOptions{Topic: "t", QoS: 1, Count: 3, FirstSeq: 10, Resend: []uint64{4, 7}, Size: 16,
		Window: 2, Rate: 1000, Seq: true,
		OnSent: func(seq uint64, _ time.Time) { sent = append(sent, seq) },
		OnAck:  func(seq uint64, _ time.Time) { ackCh <- seq }})
	if err != nil {
		t.Fatal(err)
	}
	close(ackCh)
	for s := range ackCh {
		acked = append(acked, s)
	}
	if got := fmt.Sprint(sent); got != "[4 7 10 11 12]" {
		t.Errorf("sent %v, want the resends 4, 7 then 10, 11, 12", sent)
	}
	if len(acked) != 5 {
		t.Errorf("acknowledged %v, want five", acked)
	}
}

// TestQoS2RoundTrip: the load client's QoS 2 publisher and subscriber through a
// Tern server: every message arrives once, and the publisher hears every PUBCOMP.
func TestQoS2RoundTrip(t *testing.T) {
	s := servertest.Start(t, nil)
	addr := s.MQTTAddr().String()
	sub, err := mqttload.DialWith(addr, mqttload.DialOptions{ClientID: "q2-sub", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Subscribe("q2/#", 2); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var mu sync.Mutex
	seen := make([]int, n)
	var got atomic.Int64
	go func() {
		_ = sub.ReceiveFunc(func(p *packet.Publish, _ time.Time) {
			if _, seq, ok := mqttload.Stamped(p.Payload); ok && seq < n && p.QoS == 2 {
				mu.Lock()
				seen[seq]++
				mu.Unlock()
				got.Add(1)
			}
		})
	}()
	pub, err := mqttload.Dial(addr, "q2-pub", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var completed atomic.Int64
	err = pub.PublishWith(mqttload.PublishOptions{Topic: "q2/a", QoS: 2, Count: n, Size: 16, Window: 32, Seq: true, Stamp: true,
		AckTimeout: 10 * time.Second, OnAck: func(uint64, time.Time) { completed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if c := completed.Load(); c != n {
		t.Fatalf("%d PUBCOMPs for %d messages", c, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a duplicate would come right after
	mu.Lock()
	defer mu.Unlock()
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("message %d received %d times (%d received in all)", i, k, got.Load())
		}
	}
}
