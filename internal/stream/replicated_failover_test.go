package stream

import (
	"fmt"
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
	id     uint64
	b      *broker.Broker
	m      *Manager
	h      *replica.Host
	s      *Stream
	inbox  *ackInbox
	leader sync.Mutex

	changes     chan bool
	changesDone chan struct{}
}

// ackInbox collects publish acks.
type ackInbox struct {
	mu   sync.Mutex
	acks map[string]string // reply subject -> ack payload
}

func (in *ackInbox) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	in.mu.Lock()
	in.acks[string(m.Subject)] = string(m.Payload)
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
	n := &replNode{id: id, b: broker.New(), inbox: &ackInbox{acks: map[string]string{}}}
	m, err := New(Config{Dir: t.TempDir()}, n.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	n.m = m
	h, err := replica.NewHost(replica.Config{NodeID: id, TickInterval: 10 * time.Millisecond}, net.Transport(id))
	if err != nil {
		t.Fatal(err)
	}
	n.h = h
	s, machine, err := m.OpenReplica(cfg, time.Now(), ReplicaConfig{Group: replGroup, Replicator: h})
	if err != nil {
		t.Fatal(err)
	}
	n.s = s
	// As the cluster's driver does: off the Raft loop (SetLeader waits for it),
	// in the order the loop reports the changes.
	changes := make(chan bool, 64)
	n.changesDone = make(chan struct{})
	h.OnLeaderChange(func(lc replica.LeaderChange) {
		if lc.Group == replGroup {
			changes <- lc.Leader == id
		}
	})
	n.changes = changes
	go func() {
		defer close(n.changesDone)
		for leads := range changes {
			if err := s.SetLeader(leads); err != nil && leads {
				t.Logf("node %d: %v", id, err)
			}
		}
	}()
	if err := h.AddGroup(replica.GroupConfig{ID: replGroup, Storage: memRaftStorage{raft.NewMemoryStorage()},
		StateMachine: machine, Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := n.b.Subscribe(&broker.Subscription{Sink: n.inbox, Subject: "_ACK.>"}); err != nil {
		t.Fatal(err)
	}
	net.Attach(h)
	h.Start()
	return n
}

func (n *replNode) stop(net *replica.LocalNetwork) {
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
	n.b.Publish(&p, &broker.Message{Subject: []byte(fmt.Sprintf("orders.%d", i%3)), Reply: []byte(reply),
		Header: header.Append(nil, streamapi.HeaderMsgID, fmt.Sprint("m", i)), Payload: []byte(fmt.Sprint("order ", i))})
	p.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if a, ok := n.inbox.get(reply); ok {
			return a
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no ack for message %d on node %d", i, n.id)
	return ""
}

func leaderOf(t *testing.T, nodes []*replNode) *replNode {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if st, err := n.h.Status(replGroup); err == nil && st.Leader == n.id && n.s.repl.leader.Load() {
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
	var nodes []*replNode
	for id := uint64(1); id <= 3; id++ {
		nodes = append(nodes, startReplNode(t, net, id, cfg))
	}
	defer func() {
		for _, n := range nodes {
			n.stop(net)
		}
	}()
	leader := leaderOf(t, nodes)
	const first = 200
	for i := 1; i <= first; i++ {
		if a := leader.publish(t, i); a != fmt.Sprintf("+OK ORDERS 0 %d", i) {
			t.Fatalf("ack of message %d: %s", i, a)
		}
	}
	leader.stop(net)
	var rest []*replNode
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	nodes = rest
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
