package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// clusterAPI answers the cluster's management requests ("$TERN.API.CLUSTER.>"),
// each on a goroutine of its own: they wait for the meta group.
type clusterAPI struct{ s *Server }

func (a clusterAPI) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	if len(m.Reply) == 0 {
		return true
	}
	op := strings.TrimPrefix(string(m.Subject), streamapi.ClusterPrefix)
	reply := string(m.Reply)
	go func() {
		var p broker.Batch
		a.s.broker.Publish(&p, &broker.Message{Subject: []byte(reply), Payload: a.handle(op)})
		p.Flush()
	}()
	return true
}

func (clusterAPI) Flush() {}

func (a clusterAPI) handle(op string) []byte {
	a.s.mu.Lock()
	node := a.s.cluster
	a.s.mu.Unlock()
	name, isEvict := strings.CutPrefix(op, "EVICT.")
	switch {
	case !isEvict || name == "" || strings.Contains(name, "."):
		return stream.Respond[struct{}](nil, &streamapi.APIError{Code: streamapi.CodeBadRequest, Description: "unknown API request CLUSTER." + op})
	case node == nil:
		return stream.Respond[struct{}](nil, &streamapi.APIError{Code: streamapi.CodeBadRequest, Description: "this server is not a cluster node"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := node.Evict(ctx, name)
	var ae *streamapi.APIError
	switch {
	case err == nil:
		return stream.Respond(&streamapi.ClusterEvicted{Evicted: name}, nil)
	case errors.Is(err, meta.ErrNotFound):
		ae = &streamapi.APIError{Code: streamapi.CodeNotFound, Description: err.Error()}
	case errors.Is(err, cluster.ErrNodeAlive):
		ae = &streamapi.APIError{Code: streamapi.CodeConflict, Description: err.Error()}
	case errors.Is(err, cluster.ErrNoMetaGroup):
		ae = &streamapi.APIError{Code: streamapi.CodeUnavailable, Description: err.Error() + " (cluster_size)"}
	default:
		ae = &streamapi.APIError{Code: streamapi.CodeInternal, Description: err.Error()}
	}
	return stream.Respond[struct{}](nil, ae)
}
