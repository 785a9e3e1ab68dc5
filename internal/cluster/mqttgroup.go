package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster/membership"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
)

// mqttProposePrefix is the subject of the MQTT group's forwarding: a node that is
// not the group's leader sends an entry to "$TERN.SYS.MQTT.PROPOSE.<leader>" and
// gets back the index it was committed at.
const mqttProposePrefix = "$TERN.SYS.MQTT.PROPOSE."

// The MQTT group keeps the cluster's persistent MQTT sessions and retained
// messages (its state machine is the MQTT front end's, Config.MQTTState). Every
// node that replicates holds a replica, as of the meta group, whose founding and
// membership it follows: formed with the meta group by the same founders, later
// nodes added as learners and promoted by the group's leader, evicted nodes
// removed.

// startMQTTGroup subscribes to the forwarding subject; the group itself starts with
// the meta group (metaGroup.form and start).
func (n *Node) startMQTTGroup() error {
	if n.cfg.MQTTState == nil {
		return nil
	}
	n.mqttLeader.ch = make(chan struct{})
	n.OnLeaderChange(func(lc replica.LeaderChange) {
		if lc.Group == meta.MQTTGroup {
			n.mqttLeader.mu.Lock()
			close(n.mqttLeader.ch)
			n.mqttLeader.ch = make(chan struct{})
			n.mqttLeader.mu.Unlock()
		}
	})
	n.mqttSub = &broker.Subscription{Sink: mqttForwardSink{n}, Subject: mqttProposePrefix + n.cfg.NodeName}
	if err := n.cfg.Broker.Subscribe(n.mqttSub); err != nil {
		return fmt.Errorf("cluster: mqtt group: %w", err)
	}
	return nil
}

// addMQTTGroup starts this node's replica of the MQTT group: with voters when
// founding it, empty when restarting from storage or waiting to be added.
func (n *Node) addMQTTGroup(voters []uint64) error {
	if n.cfg.MQTTState == nil || n.mqttStarted.Load() {
		return nil
	}
	if err := n.host.AddGroup(replica.GroupConfig{ID: meta.MQTTGroup, Storage: n.mqttStorage, StateMachine: n.cfg.MQTTState,
		Voters: voters}); err != nil {
		return fmt.Errorf("cluster: mqtt group: %w", err)
	}
	n.mqttStarted.Store(true)
	return nil
}

// ProposeMQTT commits an entry of the MQTT group and returns its index. On a node
// that is not the leader it is forwarded to the leader; retried until ctx ends
// while there is no leader.
func (n *Node) ProposeMQTT(ctx context.Context, data []byte) (uint64, error) {
	for {
		var index uint64
		err := ErrNoMetaGroup
		if n.mqttStarted.Load() {
			index, err = n.host.Propose(ctx, meta.MQTTGroup, data)
			var nl *replica.NotLeaderError
			if errors.As(err, &nl) && nl.Leader != 0 && nl.Leader != n.host.ID() {
				if name := n.tr.name(nl.Leader); name != "" {
					index, err = n.forwardWhileLeader(ctx, name, data)
				}
			}
		}
		if err == nil {
			return index, nil
		}
		if !retryable(err) && !errors.Is(err, ErrNoMetaGroup) {
			return 0, fmt.Errorf("cluster: mqtt group: %w", err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: mqtt group: %w (last: %w)", ctx.Err(), err)
		case <-n.done:
			return 0, replica.ErrStopped
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// forwardWhileLeader forwards an entry to leader, giving up as soon as this node
// learns that the group's leadership changed: a leader that died takes its answer
// with it, and the entry is proposed again (to the next leader; the group applies
// a publication once) rather than after the request's whole time limit.
func (n *Node) forwardWhileLeader(ctx context.Context, leader string, data []byte) (uint64, error) {
	n.mqttLeader.mu.Lock()
	changed := n.mqttLeader.ch
	n.mqttLeader.mu.Unlock()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-fctx.Done():
		}
	}()
	index, err := n.forwardMQTT(fctx, leader, data)
	if err != nil && ctx.Err() == nil && fctx.Err() != nil {
		return 0, fmt.Errorf("%w (the leader changed while forwarding)", replica.ErrNotLeader)
	}
	return index, err
}

// Answers of the forwarding: ok and the index, or an error and its text.
const (
	mqttForwardOK        = 0
	mqttForwardNotLeader = 1
	mqttForwardFailed    = 2
)

func (n *Node) forwardMQTT(ctx context.Context, leader string, data []byte) (uint64, error) {
	b, err := n.Request(ctx, mqttProposePrefix+leader, data, 2*time.Second)
	if err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, errors.New("cluster: mqtt group: empty answer from the leader")
	}
	switch b[0] {
	case mqttForwardOK:
		index, k := binary.Uvarint(b[1:])
		if k <= 0 {
			return 0, errors.New("cluster: mqtt group: bad answer from the leader")
		}
		return index, nil
	case mqttForwardNotLeader:
		return 0, fmt.Errorf("%w (forwarded: %s)", replica.ErrNotLeader, b[1:])
	default:
		return 0, fmt.Errorf("cluster: mqtt group: at the leader: %s", b[1:])
	}
}

// mqttForwardSink takes entries other nodes forward to this one and proposes each
// here only (never forwarded again), from a goroutine of its own: a proposal waits
// for a commit, and the sink runs on a route's reader.
type mqttForwardSink struct{ n *Node }

func (s mqttForwardSink) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	n := s.n
	if len(m.Reply) == 0 {
		return true
	}
	reply := string(m.Reply)
	data := append([]byte(nil), m.Payload...)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var answer []byte
		index, err := n.host.Propose(ctx, meta.MQTTGroup, data)
		switch {
		case err == nil:
			answer = binary.AppendUvarint([]byte{mqttForwardOK}, index)
		case errors.Is(err, replica.ErrNotLeader) || errors.Is(err, replica.ErrProposalDropped):
			answer = append([]byte{mqttForwardNotLeader}, err.Error()...)
		default:
			answer = append([]byte{mqttForwardFailed}, err.Error()...)
		}
		var p broker.Batch
		n.cfg.Broker.Publish(&p, &broker.Message{Subject: []byte(reply), Payload: answer})
		p.Flush()
	}()
	return true
}

func (mqttForwardSink) Flush() {}

// MQTTStatus is this node's view of the MQTT group, nil when it replicates none.
func (n *Node) MQTTStatus() *GroupStatus {
	if n.host == nil || n.cfg.MQTTState == nil {
		return nil
	}
	return n.groupStatus(meta.MQTTGroup, n.mqttStarted.Load())
}

// LeadsMQTT reports whether this node leads the MQTT group.
func (n *Node) LeadsMQTT() bool {
	if !n.mqttStarted.Load() {
		return false
	}
	st, err := n.host.Status(meta.MQTTGroup)
	return err == nil && st.State == "StateLeader"
}

// Alive reports whether the named node is this one or a member membership sees
// alive.
func (n *Node) Alive(name string) bool {
	if name == n.cfg.NodeName {
		return true
	}
	for _, m := range n.ms.Members() {
		if m.Name == name {
			return m.State == membership.StateAlive
		}
	}
	return false
}
