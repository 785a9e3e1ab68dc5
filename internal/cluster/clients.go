package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/cluster/meta"
)

// ClientRegistry is this node's end of the MQTT client-id registry the meta group
// keeps: it records in the catalogue that a client id connected here (Claim) or left
// (Release), and tells the MQTT server when a client id it holds was claimed by
// another node since, so that the connection here ends as a session takeover does
// on one node. Records go through the meta group in the background: a CONNECT never
// waits for the cluster.
type ClientRegistry struct {
	g          *metaGroup
	onTakeover func(client string, order uint64)

	mu      sync.Mutex
	pending []clientOp
	moved   []takeover
	wake    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

type clientOp struct {
	client  string
	release bool
	claimed func(order uint64)
}

type takeover struct {
	client string
	order  uint64
}

// clientWorkers propose registry records concurrently: the Raft host batches the
// proposals of one wake-up into one append.
const clientWorkers = 4

// ClientRegistry returns the node's registry, made on first call, nil when the node
// replicates nothing. onTakeover is called, from a goroutine of the registry, when a
// client id that was connected here was claimed by another node at order (its
// position in the cluster's log): the MQTT server closes its connection of that id if
// it was claimed here before order.
func (n *Node) ClientRegistry(onTakeover func(client string, order uint64)) *ClientRegistry {
	if n.meta == nil {
		return nil
	}
	g := n.meta
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.clients == nil {
		r := &ClientRegistry{g: g, onTakeover: onTakeover, wake: make(chan struct{}, 1), done: g.done}
		for range clientWorkers {
			r.wg.Add(1)
			go r.work()
		}
		g.clients = r
	}
	return g.clients
}

// Claim records that this node holds clientID's connection; claimed gets the
// record's order once it is committed. When the meta group has not formed, nothing
// is recorded and claimed is not called.
func (r *ClientRegistry) Claim(clientID string, claimed func(order uint64)) {
	r.queue(clientOp{client: clientID, claimed: claimed})
}

// Release records that clientID's connection here ended.
func (r *ClientRegistry) Release(clientID string) {
	r.queue(clientOp{client: clientID, release: true})
}

func (r *ClientRegistry) queue(op clientOp) {
	r.mu.Lock()
	r.pending = append(r.pending, op)
	r.mu.Unlock()
	r.signal()
}

func (r *ClientRegistry) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// movedAway is called by the meta group's Apply, on the Raft loop: it only queues.
func (r *ClientRegistry) movedAway(client string, order uint64) {
	r.mu.Lock()
	r.moved = append(r.moved, takeover{client, order})
	r.mu.Unlock()
	r.signal()
}

func (r *ClientRegistry) work() {
	defer r.wg.Done()
	self := r.g.host.ID()
	for {
		r.mu.Lock()
		var op *clientOp
		var moved []takeover
		if len(r.moved) > 0 {
			moved, r.moved = r.moved, nil
		} else if len(r.pending) > 0 {
			op = &r.pending[0]
			r.pending = r.pending[1:]
		}
		more := len(r.moved) > 0 || len(r.pending) > 0
		r.mu.Unlock()
		if more {
			r.signal() // another worker takes the rest
		}
		for _, t := range moved {
			r.onTakeover(t.client, t.order)
		}
		if op != nil {
			r.propose(self, op)
			continue
		}
		if moved != nil {
			continue
		}
		select {
		case <-r.wake:
		case <-r.done:
			return
		}
	}
}

func (r *ClientRegistry) propose(self uint64, op *clientOp) {
	cmd := &meta.Command{Op: meta.OpClaimClient, Client: op.client, NodeID: self}
	if op.release {
		cmd.Op = meta.OpReleaseClient
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, order, err := r.g.proposeAt(ctx, cmd)
	switch {
	case err == nil:
		if op.claimed != nil {
			op.claimed(order)
		}
	case errors.Is(err, ErrNoMetaGroup):
	default:
		r.g.log.Warn("client registry: record not made", "client_id", op.client, "release", op.release, "err", err)
	}
}
