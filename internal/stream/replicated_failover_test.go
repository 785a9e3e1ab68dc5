package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/streamapi"
)

// memRaftStorage is raft's in-memory storage with the Sync the host calls: the
// tests' reference storage.
type memRaftStorage struct{ *raft.MemoryStorage }

func (memRaftStorage) Sync() error { return nil }

// replNode is one node of an in-process cluster of stream replicas: a broker, a
// stream engine and a Raft host on a shared in-process network.
type replNode struct {
	id       uint64
	storages []*raft.MemoryStorage // each group's Raft log
	b        *broker.Broker
	m        *Manager
	h        *replica.Host
	s        *Stream
	inbox    *ackInbox
	leader   sync.Mutex
	pubs     int // publishKV's count, for its reply subjects

	changes     chan bool
	changesDone chan struct{}
	stopped     bool
}

// ackInbox collects publish acks.
type ackInbox struct {
	mu   sync.Mutex
	acks map[string]string   // reply subject -> ack payload
	all  map[string][]string // reply subject -> every ack payload, in order
}

func (in *ackInbox) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	in.mu.Lock()
	in.acks[string(m.Subject)] = string(m.Payload)
	if in.all == nil {
		in.all = map[string][]string{}
	}
	in.all[string(m.Subject)] = append(in.all[string(m.Subject)], string(m.Payload))
	in.mu.Unlock()
	return true
}
func (in *ackInbox) Flush() {}

func (in *ackInbox) get(reply string) (string, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	a, ok := in.acks[reply]
	return a, ok
}

const replGroup = 16

func startReplNode(t *testing.T, net *replica.LocalNetwork, id uint64, cfg streamapi.StreamConfig) *replNode {
	t.Helper()
	return startReplNodeWith(t, net, id, cfg, 0, func(h *replica.Host) Replicator { return h })
}

// startReplNodeWith is startReplNode with the stream reaching its host through
// what replicator makes of it, and raft's election timeout at electionTicks
// ticks of 10 ms (0: the default).
func startReplNodeWith(t *testing.T, net *replica.LocalNetwork, id uint64, cfg streamapi.StreamConfig, electionTicks int, replicator func(*replica.Host) Replicator) *replNode {
	t.Helper()
	n := &replNode{id: id, b: broker.New(), inbox: &ackInbox{acks: map[string]string{}}}
	m, err := New(Config{Dir: t.TempDir()}, n.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	n.m = m
	h, err := replica.NewHost(replica.Config{NodeID: id, TickInterval: 10 * time.Millisecond, ElectionTicks: electionTicks}, net.Transport(id))
	if err != nil {
		t.Fatal(err)
	}
	n.h = h
	groups := make([]uint64, max(cfg.Partitions, 1))
	for p := range groups {
		groups[p] = replGroup + uint64(p)
	}
	s, machines, err := m.OpenReplica(cfg, time.Now(), ReplicaConfig{Groups: groups, Replicator: replicator(h)})
	if err != nil {
		t.Fatal(err)
	}
	n.s = s
	// As the cluster's driver does: off the Raft loop (SetLeader waits for it),
	// the node leading partition 0's group leads the stream once it leads every
	// partition's group, and it asks for those it does not lead.
	changes := make(chan bool, 64)
	n.changesDone = make(chan struct{})
	h.OnLeaderChange(func(lc replica.LeaderChange) {
		if lc.Group >= replGroup && lc.Group < replGroup+uint64(len(groups)) {
			select {
			case changes <- true:
			default:
			}
		}
	})
	n.changes = changes
	go func() {
		defer close(n.changesDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		leads := false
		for {
			select {
			case _, ok := <-changes:
				if !ok {
					return
				}
			case <-tick.C:
			}
			all := true
			for p, g := range groups {
				st, err := h.Status(g)
				if err != nil || st.Leader != id {
					all = false
					if p > 0 && leads0(h, groups[0], id) {
						ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
						_ = h.TransferLeadership(ctx, g, id)
						cancel()
					}
				}
			}
			if all == leads {
				continue
			}
			if err := s.SetLeader(all); err != nil {
				t.Logf("node %d: %v", id, err)
				continue
			}
			leads = all
		}
	}()
	for p, g := range groups {
		st := raft.NewMemoryStorage()
		n.storages = append(n.storages, st)
		if err := h.AddGroup(replica.GroupConfig{ID: g, Storage: memRaftStorage{st},
			StateMachine: machines[p], Voters: []uint64{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.b.Subscribe(&broker.Subscription{Sink: n.inbox, Subject: "_ACK.>"}); err != nil {
		t.Fatal(err)
	}
	net.Attach(h)
	h.Start()
	return n
}

// stopNode stops n and returns the other nodes.
func stopNode(net *replica.LocalNetwork, nodes []*replNode, n *replNode) []*replNode {
	n.stop(net)
	var rest []*replNode
	for _, o := range nodes {
		if o != n {
			rest = append(rest, o)
		}
	}
	return rest
}

func leads0(h *replica.Host, group, id uint64) bool {
	st, err := h.Status(group)
	return err == nil && st.Leader == id
}

// startReplNodes starts a cluster of three replNodes of cfg's stream and stops
// those still running when the test ends.
func startReplNodes(t *testing.T, net *replica.LocalNetwork, cfg streamapi.StreamConfig) []*replNode {
	t.Helper()
	var nodes []*replNode
	for id := uint64(1); id <= 3; id++ {
		nodes = append(nodes, startReplNode(t, net, id, cfg))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(net)
		}
	})
	return nodes
}

// stop stops n, once.
func (n *replNode) stop(net *replica.LocalNetwork) {
	if n.stopped {
		return
	}
	n.stopped = true
	net.Detach(n.id)
	n.h.Stop()
	close(n.changes)
	<-n.changesDone
	n.m.Close()
}

// publish publishes on n with a message id and waits for the ack.
func (n *replNode) publish(t *testing.T, i int) string {
	t.Helper()
	reply := fmt.Sprintf("_ACK.%d.%d", n.id, i)
	var p broker.Batch
	n.b.Publish(&p, &broker.Message{Subject: []byte(fmt.Sprintf("orders.%d", i%7)), Reply: []byte(reply),
		Header: header.Append(nil, streamapi.HeaderMsgID, fmt.Sprint("m", i)), Payload: []byte(fmt.Sprint("order ", i))})
	p.Flush()
	return n.waitAck(t, reply)
}

// waitAck waits for the ack on reply.
func (n *replNode) waitAck(t *testing.T, reply string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if a, ok := n.inbox.get(reply); ok {
			return a
		}
		time.Sleep(time.Millisecond)
	}
	st, err := n.h.Status(replGroup)
	t.Fatalf("no ack on %s (node %d: stream leader %v, group status %+v %v)", reply, n.id, n.s.repl.leader.Load(), st, err)
	return ""
}

// capturing reports whether s leads and captures its subjects: SetLeader marks
// the stream leader before it subscribes, and a publish in between finds no
// stream (a client retries it; a test publishing once would wait in vain).
func capturing(s *Stream) bool {
	s.cfgMu.RLock()
	defer s.cfgMu.RUnlock()
	return s.repl.leader.Load() && len(s.subs) > 0
}

func leaderOf(t *testing.T, nodes []*replNode) *replNode {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if st, err := n.h.Status(replGroup); err == nil && st.Leader == n.id && capturing(n.s) {
				return n
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no leader")
	return nil
}

// TestReplicatedStreamSurvivesLeaderLoss: messages acknowledged by the leader of an
// R3 stream are on every replica; when the leader goes, another takes over with all
// of them, publishing goes on, and a retried publish is not stored twice.
func TestReplicatedStreamSurvivesLeaderLoss(t *testing.T) {
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}
	nodes := startReplNodes(t, net, cfg)
	leader := leaderOf(t, nodes)
	const first = 200
	for i := 1; i <= first; i++ {
		if a := leader.publish(t, i); a != fmt.Sprintf("+OK ORDERS 0 %d", i) {
			t.Fatalf("ack of message %d: %s", i, a)
		}
	}
	rest := stopNode(net, nodes, leader)
	next := leaderOf(t, rest)
	// Retried publish of an acknowledged message: a duplicate, not a new message.
	if a := next.publish(t, first); a != fmt.Sprintf("+OK ORDERS 0 %d dup", first) {
		t.Fatalf("retry after failover: %s", a)
	}
	for i := first + 1; i <= first+50; i++ {
		if a := next.publish(t, i); a != fmt.Sprintf("+OK ORDERS 0 %d", i) {
			t.Fatalf("ack of message %d after failover: %s", i, a)
		}
	}
	// Every replica left holds every acknowledged message, in order.
	for _, n := range rest {
		deadline := time.Now().Add(5 * time.Second)
		for n.s.parts[0].State().LastSeq < first+50 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for seq := uint64(1); seq <= first+50; seq++ {
			rec, _, err := n.s.parts[0].Read(seq, nil)
			if err != nil || string(rec.Payload) != fmt.Sprint("order ", seq) {
				t.Fatalf("node %d, seq %d: %q %v", n.id, seq, rec.Payload, err)
			}
		}
	}
}

// TestPartitionedReplicatedStreamSurvivesLeaderLoss: each partition of an R3 stream
// is a group of its own, all led by the stream's leader; after the leader goes,
// every acknowledged message is in its partition on every replica left, under the
// sequence it was acknowledged with, and a retried publish is a duplicate.
func TestPartitionedReplicatedStreamSurvivesLeaderLoss(t *testing.T) {
	net := replica.NewLocalNetwork()
	const parts = 3
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Partitions: parts}
	nodes := startReplNodes(t, net, cfg)
	type at struct {
		part int
		seq  uint64
	}
	acked := map[int]at{}
	last := make([]uint64, parts)
	publishAll := func(n *replNode, from, to int) {
		for i := from; i <= to; i++ {
			a := n.publish(t, i)
			f := strings.Fields(a)
			if len(f) < 4 || f[0] != "+OK" || f[1] != "ORDERS" {
				t.Fatalf("ack of message %d: %q", i, a)
			}
			p, _ := strconv.Atoi(f[2])
			seq, _ := strconv.ParseUint(f[3], 10, 64)
			dup := strings.Join(f[4:], " ")
			if prev, ok := acked[i]; ok {
				if prev != (at{p, seq}) || dup != "dup" {
					t.Fatalf("message %d again: %q, first acknowledged at %v", i, a, prev)
				}
				continue
			}
			if seq != last[p]+1 {
				t.Fatalf("message %d: %q, partition %d was at %d", i, a, p, last[p])
			}
			last[p] = seq
			acked[i] = at{p, seq}
		}
	}
	leader := leaderOf(t, nodes)
	for g := replGroup; g < replGroup+parts; g++ {
		if st, err := leader.h.Status(uint64(g)); err != nil || st.Leader != leader.id {
			t.Fatalf("group %d led by %d, the stream by %d (%v)", g, st.Leader, leader.id, err)
		}
	}
	publishAll(leader, 1, 150)
	for p, n := range last {
		if n == 0 {
			t.Fatalf("partition %d got nothing: the subjects do not spread (%v)", p, last)
		}
	}
	rest := stopNode(net, nodes, leader)
	next := leaderOf(t, rest)
	// Every partition's group follows the stream's leader; until it has, a
	// publish for that partition may go to the dead node and be lost unanswered
	// (clients retry such publishes; this test publishes once).
	deadline := time.Now().Add(10 * time.Second)
	for g := replGroup; g < replGroup+parts; g++ {
		for {
			st, err := next.h.Status(uint64(g))
			if err == nil && st.Leader == next.id {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d not led by the new stream leader %d: %+v %v", g, next.id, st, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	publishAll(next, 140, 200) // 140..150 again: duplicates
	for _, n := range rest {
		for i, want := range acked {
			deadline := time.Now().Add(5 * time.Second)
			for n.s.parts[want.part].State().LastSeq < want.seq && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			rec, _, err := n.s.parts[want.part].Read(want.seq, nil)
			if err != nil || string(rec.Payload) != fmt.Sprint("order ", i) {
				t.Fatalf("node %d, message %d at %v: %q %v", n.id, i, want, rec.Payload, err)
			}
		}
		for p := range parts {
			if got := n.s.parts[p].State().LastSeq; got != last[p] {
				t.Fatalf("node %d: partition %d ends at %d, want %d", n.id, p, got, last[p])
			}
		}
	}
}

// TestReplicatedBigBatchInEntries: a captured batch larger than one entry may
// hold (several MiB, as a Kafka producer's pipelined requests make) is proposed
// as several entries, in order; every message is acknowledged at the sequence it
// was sent in, and every replica holds them all.
func TestReplicatedBigBatchInEntries(t *testing.T) {
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}
	nodes := startReplNodes(t, net, cfg)
	leader := leaderOf(t, nodes)
	// 10 MiB in one broker batch: the writer takes it as one queue.
	const count, size = 1280, 8 << 10
	payload := make([]byte, size)
	var p broker.Batch
	for i := 1; i <= count; i++ {
		payload[0] = byte(i)
		leader.b.Publish(&p, &broker.Message{Subject: []byte("orders.x"), Reply: []byte(fmt.Sprintf("_ACK.big.%d", i)), Payload: payload})
	}
	p.Flush()
	for i := 1; i <= count; i++ {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if a, ok := leader.inbox.get(fmt.Sprintf("_ACK.big.%d", i)); ok {
				if a != fmt.Sprintf("+OK ORDERS 0 %d", i) {
					t.Fatalf("ack of message %d: %s", i, a)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ack for message %d", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, n := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for n.s.parts[0].State().LastSeq < count && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if st := n.s.parts[0].State(); st.LastSeq != count || st.Msgs != count {
			t.Fatalf("node %d holds %d messages up to %d, want %d", n.id, st.Msgs, st.LastSeq, count)
		}
	}
	// No entry held more than maxEntryBytes of messages (and one message's worth).
	entries := msgEntriesOf(t, leader.storages[0])
	for _, e := range entries {
		if len(e) > maxEntryBytes+size+64 {
			t.Fatalf("an entry of %d bytes, over %d", len(e), maxEntryBytes)
		}
	}
	if len(entries) < count*size/maxEntryBytes {
		t.Fatalf("%d message entries for %d MiB", len(entries), count*size>>20)
	}
}

// msgEntriesOf returns the message entries of a group's Raft log, whatever their
// op.
func msgEntriesOf(t *testing.T, st *raft.MemoryStorage) [][]byte {
	t.Helper()
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	ents, err := st.Entries(first, last+1, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, e := range ents {
		if len(e.Data) > 0 && (e.Data[0] == entryMsgs || e.Data[0] == entryMsgsS2 || e.Data[0] == entryMsgsBlocks) {
			out = append(out, e.Data)
		}
	}
	return out
}

// Every publisher of a batch the leader's writer proposes is answered once: those
// whose messages were stored by the goroutine that applied them (a run of one
// in-process acker's messages as one answer), one refused before any proposal
// by the writer.
func TestReplicatedPublishersAnsweredOnce(t *testing.T) {
	t.Run("writer", func(t *testing.T) { testPublishersAnsweredOnce(t, (*broker.Batch).Flush) })
	t.Run("inline", func(t *testing.T) { testPublishersAnsweredOnce(t, (*broker.Batch).FlushInline) })
}

func testPublishersAnsweredOnce(t *testing.T, flush func(*broker.Batch)) {
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxMsgSize: 100}
	nodes := startReplNodes(t, net, cfg)
	leader := leaderOf(t, nodes)
	const single, ranged = 40, 30
	for round := range 5 {
		var p broker.Batch
		acker := &InProcessAcks{}
		pub := func(reply string, acked bool, payload []byte) {
			m := &broker.Message{Subject: []byte("orders.x"), Reply: []byte(reply), Payload: payload}
			if acked {
				m.Acker, m.AckTag = acker, 7
			}
			leader.b.Publish(&p, m)
		}
		for i := range single {
			pub(fmt.Sprintf("_ACK.S.%d.%d", round, i), false, []byte("s"))
			pub("", true, []byte("r")) // interleaved: runs of one
		}
		for range ranged { // consecutive: one answer for the run
			pub("", true, []byte("r"))
		}
		bigReply := fmt.Sprintf("_ACK.B.%d", round)
		pub(bigReply, false, make([]byte, 200))
		flush(&p)

		wantReplies := single + 1
		deadline := time.Now().Add(10 * time.Second)
		for {
			leader.inbox.mu.Lock()
			got := 0
			for r := range leader.inbox.all {
				if r == bigReply || strings.HasPrefix(r, fmt.Sprintf("_ACK.S.%d.", round)) {
					got++
				}
			}
			leader.inbox.mu.Unlock()
			if got == wantReplies && acker.Count() >= single+ranged {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d reply subjects answered, %d of %d in-process acks", round, got, wantReplies, acker.Count(), single+ranged)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // a second answer would come by now
		leader.inbox.mu.Lock()
		for i := range single {
			r := fmt.Sprintf("_ACK.S.%d.%d", round, i)
			if a := leader.inbox.all[r]; len(a) != 1 || !strings.HasPrefix(a[0], "+OK ORDERS 0 ") {
				t.Errorf("%s answered %q", r, a)
			}
		}
		if a := leader.inbox.all[bigReply]; len(a) != 1 || !strings.HasPrefix(a[0], fmt.Sprintf("-ERR %d ", streamapi.CodeTooLarge)) {
			t.Errorf("the message too large answered %q", a)
		}
		leader.inbox.mu.Unlock()
		acker.Lock()
		seqs := map[string]bool{}
		for _, s := range acker.Seqs[7] {
			if seqs[s] {
				t.Errorf("round %d: sequence %s acknowledged twice", round, s)
			}
			seqs[s] = true
		}
		if len(seqs) != single+ranged || acker.Calls > single+1 {
			t.Errorf("round %d: %d calls answer %d messages, want at most %d answering %d", round, acker.Calls, len(seqs), single+1, single+ranged)
		}
		acker.Unlock()
	}
}

// TestReplicatedMessageBlocksSurviveLeaderLoss: a compressing R3 stream's
// replicas write big batches as the leader's compressed blocks; after the
// leader goes, the new one takes a batch that repeats some of them (their block
// is stored message by message, the duplicates answered as such) and every
// replica left holds every message under the sequence it was acknowledged with.
func TestReplicatedMessageBlocksSurviveLeaderLoss(t *testing.T) {
	net := replica.NewLocalNetwork()
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Compression: "s2"}
	nodes := startReplNodes(t, net, cfg)
	payload := func(i int) string { return fmt.Sprintf(`{"order":%d,"item":"widget","qty":%d}`, i, i%9) }
	round := func(n *replNode, name string, from, to int, want func(i int) string) {
		t.Helper()
		var p broker.Batch
		for i := from; i <= to; i++ {
			n.b.Publish(&p, &broker.Message{Subject: []byte(fmt.Sprintf("orders.%d", i%3)), Reply: []byte(fmt.Sprintf("_ACK.%s.%d", name, i)),
				Header: header.Append(nil, streamapi.HeaderMsgID, fmt.Sprint("m", i)), Payload: []byte(payload(i))})
		}
		p.Flush()
		for i := from; i <= to; i++ {
			if a := n.waitAck(t, fmt.Sprintf("_ACK.%s.%d", name, i)); a != want(i) {
				t.Fatalf("%s: ack of message %d: %s, want %s", name, i, a, want(i))
			}
		}
	}
	stored := func(i int) string { return fmt.Sprintf("+OK ORDERS 0 %d", i) }
	leader := leaderOf(t, nodes)
	round(leader, "first", 1, 3000, stored)
	blocks := 0
	for _, e := range msgEntriesOf(t, leader.storages[0]) {
		if e[0] == entryMsgsBlocks {
			blocks++
		}
	}
	if blocks == 0 {
		t.Fatal("no entry of messages in blocks")
	}
	rest := stopNode(net, nodes, leader)
	next := leaderOf(t, rest)
	round(next, "second", 2990, 6000, func(i int) string {
		if i <= 3000 {
			return stored(i) + " dup"
		}
		return stored(i)
	})
	for _, n := range rest {
		deadline := time.Now().Add(10 * time.Second)
		for n.s.parts[0].State().LastSeq < 6000 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if st := n.s.parts[0].State(); st.LastSeq != 6000 || st.Msgs != 6000 {
			t.Fatalf("node %d holds %d messages up to %d", n.id, st.Msgs, st.LastSeq)
		}
		r := n.s.parts[0].NewReader(1)
		for seq := uint64(1); seq <= 6000; seq++ {
			rec, err := r.Next()
			if err != nil || rec.Seq != seq || string(rec.Payload) != payload(int(seq)) || string(rec.Subject) != fmt.Sprintf("orders.%d", seq%3) {
				t.Fatalf("node %d, seq %d: %d %q %v", n.id, seq, rec.Seq, rec.Payload, err)
			}
		}
		r.Close()
	}
}
