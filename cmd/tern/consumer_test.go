package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

func TestConsumerCommands(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	with := func(args ...string) []string { return append(args, srv...) }
	pre := func(args ...string) []string { return append(append([]string(nil), srv...), args...) } // pub takes options first
	mustRun(t, streamCLI, with("add", "ORDERS", "--subjects", "orders.>")...)
	if out := mustRun(t, pubCLI, pre("--ack", "--count", "3", "--header", "sender=s1", "orders.new", "hello {{i}}")...); strings.Count(out, "\n") != 3 {
		t.Fatalf("pub --ack: %q", out)
	}

	out := mustRun(t, consumerCLI, with("add", "ORDERS", "worker", "--filter", "orders.>", "--ack-wait", "10s",
		"--backoff", "10s,20s", "--max-deliver", "5", "--max-ack-pending", "100", "--description", "the worker")...)
	for _, re := range []string{`^Consumer ORDERS/worker created$`, `type:\s+pull, durable$`, `filter:\s+orders\.>$`,
		`deliver:\s+all$`, `ack policy:\s+explicit$`, `ack wait:\s+10s$`, `backoff:\s+10s,20s$`, `max deliver:\s+5$`,
		`dead letter:\s+\$TERN\.DLQ\.ORDERS\.worker \(default\)$`, `max ack pending:\s+100$`, `description:\s+the worker$`} {
		wantLine(t, out, re)
	}
	out = mustRun(t, consumerCLI, with("ls", "ORDERS")...)
	wantLine(t, out, `^NAME\s+TYPE\s+FILTER\s+ACK\s+PENDING\s+ACK PENDING\s+REDELIVERED\s+WAITING$`)
	wantLine(t, out, `^worker\s+pull, durable\s+orders\.>\s+explicit\s+3\s+0\s+0\s+0$`)
	wantLine(t, mustRun(t, streamCLI, with("info", "ORDERS")...), `^\s+consumers:\s+1$`)

	// next prints the message with its metadata and acknowledges it.
	out = mustRun(t, consumerCLI, with("next", "ORDERS", "worker")...)
	wantLine(t, out, `^\[#1\] orders\.new \(7 B\)$`)
	wantLine(t, out, `^  stream ORDERS  partition 0  seq 1  consumer seq 1  deliveries 1  pending 2$`)
	wantLine(t, out, `^  stored \d{4}-`)
	wantLine(t, out, `^  sender: s1$`)
	wantLine(t, out, `^hello 0$`)
	wantLine(t, out, `^  \(acked\)$`)
	out = mustRun(t, consumerCLI, with("info", "ORDERS", "worker")...)
	wantLine(t, out, `^\s+ack pending:\s+0$`)
	wantLine(t, out, `^\s+pending:\s+2$`)
	wantLine(t, out, `^\s+partition 0:\s+ack floor 1, delivered 1, ack pending 0$`)

	// --nak: delivered again at once, with a higher delivery count.
	out = mustRun(t, consumerCLI, with("next", "ORDERS", "worker", "--nak")...)
	wantLine(t, out, `seq 2 .* deliveries 1 `)
	wantLine(t, out, `^  \(nak, redeliver now\)$`)
	out = mustRun(t, consumerCLI, with("next", "ORDERS", "worker", "--count", "2", "--json")...)
	var msgs []jsonStreamMsg
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m jsonStreamMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("next --json: %v\n%s", err, out)
		}
		msgs = append(msgs, m)
	}
	if len(msgs) != 2 {
		t.Fatalf("next --count 2: %d messages\n%s", len(msgs), out)
	}
	bySeq := map[uint64]jsonStreamMsg{msgs[0].Seq: msgs[0], msgs[1].Seq: msgs[1]}
	if m := bySeq[2]; m.Deliveries != 2 || m.Data != "hello 1" || m.Ack != "acked" || m.Headers.Get("sender") != "s1" || m.Stream != "ORDERS" {
		t.Fatalf("redelivered message: %+v", m)
	}
	if m := bySeq[3]; m.Deliveries != 1 || m.Data != "hello 2" || m.Size != 7 || m.Subject != "orders.new" {
		t.Fatalf("third message: %+v", m)
	}
	out = mustRun(t, consumerCLI, with("info", "--json", "ORDERS", "worker")...)
	var ci tern.ConsumerInfo
	if err := json.Unmarshal([]byte(out), &ci); err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 0 || ci.NumPending != 0 || ci.NumRedelivered != 1 || ci.Name != "worker" || ci.Config.Durable != "worker" {
		t.Fatalf("info after the acks: %+v", ci)
	}
	if _, err := runCLI(t, consumerCLI, with("next", "ORDERS", "worker", "--no-wait")...); err == nil || !strings.Contains(err.Error(), "no messages") {
		t.Fatalf("next --no-wait on an empty consumer: %v", err)
	}
	start := time.Now()
	if _, err := runCLI(t, consumerCLI, with("next", "ORDERS", "worker", "--wait", "300ms")...); err == nil || !strings.Contains(err.Error(), "within 300ms") {
		t.Fatalf("next --wait on an empty consumer: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("next --wait 300ms took %v", d)
	}

	// --no-ack leaves the message pending.
	mustRun(t, pubCLI, pre("--ack", "orders.bad", "poison")...)
	out = mustRun(t, consumerCLI, with("next", "ORDERS", "worker", "--no-ack", "--raw")...)
	if out != "poison\n" {
		t.Fatalf("next --no-ack --raw: %q", out)
	}
	wantLine(t, mustRun(t, consumerCLI, with("info", "ORDERS", "worker")...), `^\s+ack pending:\s+1$`)

	// A consumer with a start sequence and ack all sees only the fourth message.
	mustRun(t, consumerCLI, with("add", "ORDERS", "late", "--deliver", "seq:4", "--ack", "all")...)
	out = mustRun(t, consumerCLI, with("next", "ORDERS", "late")...)
	wantLine(t, out, `seq 4 .* pending 0$`)
	wantLine(t, out, `^poison$`)
	mustRun(t, consumerCLI, with("rm", "ORDERS", "late")...)

	// rm removes it.
	if out := mustRun(t, consumerCLI, with("rm", "ORDERS", "worker")...); out != "Consumer ORDERS/worker deleted\n" {
		t.Fatalf("rm: %q", out)
	}
	for _, args := range [][]string{{"info", "ORDERS", "worker"}, {"next", "ORDERS", "worker"}, {"rm", "ORDERS", "worker"}} {
		if _, err := runCLI(t, consumerCLI, with(args...)...); err == nil || !strings.Contains(err.Error(), `consumer "worker" not found`) {
			t.Errorf("%v after rm: %v", args, err)
		}
	}
	if out := mustRun(t, consumerCLI, with("ls", "ORDERS")...); out != "No consumers on stream ORDERS\n" {
		t.Fatalf("ls after rm: %q", out)
	}
	if _, err := runCLI(t, consumerCLI, with("ls", "NOPE")...); err == nil || !strings.Contains(err.Error(), `stream "NOPE" not found`) {
		t.Fatalf("ls of a missing stream: %v", err)
	}
}

func TestConsumerTermDeadLetters(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	with := func(args ...string) []string { return append(args, srv...) }
	pre := func(args ...string) []string { return append(append([]string(nil), srv...), args...) } // pub takes options first
	mustRun(t, streamCLI, with("add", "JOBS")...)
	mustRun(t, consumerCLI, with("add", "JOBS", "w", "--dead-letter", "dead.jobs")...)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dead, err := nc.SubscribeSync("dead.jobs")
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, pubCLI, pre("--ack", "JOBS", "poison")...)
	out := mustRun(t, consumerCLI, with("next", "JOBS", "w", "--term", "--reason", "cannot parse")...)
	wantLine(t, out, `^  \(terminated\)$`)
	m, err := dead.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if string(m.Data) != "poison" || !strings.Contains(m.Header.Get("Tern-Reason"), "cannot parse") || m.Header.Get("Tern-Stream") != "JOBS" {
		t.Fatalf("dead letter %q %v", m.Data, m.Header)
	}
	wantLine(t, mustRun(t, consumerCLI, with("info", "JOBS", "w")...), `^\s+ack pending:\s+0$`)
}

func TestConsumerAddVariants(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	with := func(args ...string) []string { return append(args, srv...) }
	pre := func(args ...string) []string { return append(append([]string(nil), srv...), args...) } // pub takes options first
	mustRun(t, streamCLI, with("add", "EV", "--subjects", "ev.*")...)
	mustRun(t, pubCLI, pre("--ack", "ev.a", "one")...)

	// Ephemeral, server-named.
	out := mustRun(t, consumerCLI, with("add", "EV", "--ephemeral", "--json", "--inactive-threshold", "1m", "--ack", "none")...)
	var ci tern.ConsumerInfo
	if err := json.Unmarshal([]byte(out), &ci); err != nil {
		t.Fatalf("add --ephemeral --json: %v\n%s", err, out)
	}
	if ci.Name == "" || ci.Config.Durable != "" || time.Duration(ci.Config.InactiveThreshold) != time.Minute || ci.Config.AckPolicy != tern.AckNone {
		t.Fatalf("ephemeral consumer: %+v", ci)
	}
	out = mustRun(t, consumerCLI, with("next", "EV", ci.Name)...)
	wantLine(t, out, `^  \(no ack needed \(ack policy none\)\)$`)
	// Ephemeral with a chosen name.
	out = mustRun(t, consumerCLI, with("add", "EV", "eph", "--ephemeral", "--deliver", "new")...)
	wantLine(t, out, `^Consumer EV/eph created$`)
	wantLine(t, out, `type:\s+pull, ephemeral$`)
	wantLine(t, out, `deliver:\s+new$`)
	wantLine(t, out, `inactive threshold:\s+5s \(default\)$`)

	// Push: next refuses and says why.
	out = mustRun(t, consumerCLI, with("add", "EV", "pusher", "--deliver-subject", "out.ev", "--deliver-group", "g", "--deliver", "last")...)
	wantLine(t, out, `type:\s+push, durable$`)
	wantLine(t, out, `deliver subject:\s+out\.ev$`)
	wantLine(t, out, `deliver group:\s+g$`)
	if _, err := runCLI(t, consumerCLI, with("next", "EV", "pusher")...); err == nil || !strings.Contains(err.Error(), "push consumer") {
		t.Fatalf("next on a push consumer: %v", err)
	}

	ts := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	out = mustRun(t, consumerCLI, with("add", "EV", "bytime", "--deliver", "time:"+ts, "--json")...)
	if err := json.Unmarshal([]byte(out), &ci); err != nil || ci.Config.DeliverPolicy != tern.DeliverByStartTime || ci.Config.OptStartTime == nil {
		t.Fatalf("--deliver time: %v %+v", err, ci.Config)
	}
	out = mustRun(t, consumerCLI, with("add", "EV", "byseq", "--deliver", "seq:1", "--json")...)
	if err := json.Unmarshal([]byte(out), &ci); err != nil || ci.Config.DeliverPolicy != tern.DeliverByStartSeq || ci.Config.OptStartSeq != 1 {
		t.Fatalf("--deliver seq: %v %+v", err, ci.Config)
	}

	for _, bad := range [][]string{
		{"add", "EV"},
		{"add", "EV", "x", "--deliver", "sometime"},
		{"add", "EV", "x", "--deliver", "seq:zero"},
		{"add", "EV", "x", "--deliver", "time:yesterday"},
		{"add", "EV", "x", "--ack", "maybe"},
		{"add", "EV", "x", "--backoff", "1s,soon"},
		{"add", "EV", "x", "--deliver-group", "g"},
		{"add", "NOPE", "x"},
		{"next", "EV", "x", "--nak", "--term"},
		{"next", "EV", "x", "--count", "0"},
		{"next", "EV"},
		{"bogus"},
	} {
		if _, err := runCLI(t, consumerCLI, with(bad...)...); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
}

func TestConsumerGroupMember(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	with := func(args ...string) []string { return append(args, srv...) }
	pre := func(args ...string) []string { return append(append([]string(nil), srv...), args...) } // pub takes options first
	mustRun(t, streamCLI, with("add", "P", "--partitions", "2")...)
	for _, k := range []string{"a", "b", "c", "d"} {
		mustRun(t, pubCLI, pre("--ack", "--key", k, "P", k)...)
	}
	mustRun(t, consumerCLI, with("add", "P", "grp")...)
	// The only member is assigned both partitions and gets every message.
	out := mustRun(t, consumerCLI, with("next", "P", "grp", "--member", "m1", "--count", "4", "--wait", "2s")...)
	if n := strings.Count(out, "(acked)"); n != 4 {
		t.Fatalf("member m1 got %d messages:\n%s", n, out)
	}
	out = mustRun(t, consumerCLI, with("info", "P", "grp")...)
	wantLine(t, out, `^\s+ack pending:\s+0$`)
	wantLine(t, out, `^\s+partition 1:\s+ack floor \d+, delivered \d+, ack pending 0`)
}

func TestConsumerNextStopsOnCancel(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	mustRun(t, streamCLI, append([]string{"add", "IDLE"}, srv...)...)
	mustRun(t, consumerCLI, append([]string{"add", "IDLE", "c"}, srv...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consumerCmd(ctx, append([]string{"next", "IDLE", "c", "--wait", "1m"}, srv...), &bytes.Buffer{})
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("next after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("next --wait 1m did not stop on cancel")
	}
}
