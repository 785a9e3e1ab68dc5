package kafka

import (
	"time"

	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Cluster is what the front end needs of a cluster that replicates streams: which
// nodes serve the Kafka API, where each topic's partitions are led, and the
// cluster's catalogue for topic administration. The server wires it in
// (SetCluster); without one, the front end serves this node's streams alone.
type Cluster interface {
	// Brokers lists the nodes that serve the Kafka API, this one (self) among them.
	Brokers() (self int32, brokers []Broker)
	// Topics lists the cluster's streams of an account ("" for the global one), in
	// name order; Topic finds one by its name in the account.
	Topics(account string) []TopicInfo
	Topic(account, name string) (TopicInfo, bool)
	// CreateStream, UpdateStream and DeleteStream change the cluster's catalogue,
	// for an account (cfg in its terms); a refusal is a *streamapi.APIError.
	CreateStream(account string, cfg streamapi.StreamConfig) error
	UpdateStream(account string, cfg streamapi.StreamConfig) error
	DeleteStream(account, name string) error
}

// Broker is a node serving the Kafka API: plain TCP at Host:Port, TLS at
// TLSHost:TLSPort (a port is 0 where the node has no such listener).
type Broker struct {
	ID      int32
	Host    string
	Port    int32
	TLSHost string
	TLSPort int32
}

// endpoint is where a client of a TLS listener (secure) or of a plain one is told
// to find b: the listener of its own kind, else the other.
func (b Broker) endpoint(secure bool) (string, int32) {
	if (secure && b.TLSPort != 0) || b.Port == 0 {
		return b.TLSHost, b.TLSPort
	}
	return b.Host, b.Port
}

// TopicInfo is a stream of the cluster as Metadata describes it.
type TopicInfo struct {
	// Account is the stream's account, "" for the global one; Name its name
	// there (the catalogue's key is stream.Key(Account, Name)).
	Account string
	Name    string
	Created time.Time
	Config  streamapi.StreamConfig
	// Partitions has each partition's leader (-1: none now) and replicas.
	Partitions []PartitionInfo
}

// PartitionInfo places one partition.
type PartitionInfo struct {
	Leader   int32
	Replicas []int32
}

// SetCluster makes the front end serve a cluster's streams.
func (s *Server) SetCluster(c Cluster) {
	self, _ := c.Brokers()
	s.prods.onNode(self)
	s.clusterOf.Store(&c)
}

func (s *Server) cluster() Cluster {
	if p := s.clusterOf.Load(); p != nil {
		return *p
	}
	return nil
}

// clusterTopic is a cluster's stream as a topic: served from this node's replica
// when this node leads it.
func (s *Server) clusterTopic(ti TopicInfo) *topic {
	key := stream.Key(ti.Account, ti.Name)
	t := &topic{name: ti.Name, key: key, acct: ti.Account, id: topicID(key, ti.Created), cfg: ti.Config,
		parts: len(ti.Partitions), placement: ti.Partitions}
	t.subject = singleSubject(ti.Config.Subjects)
	t.setPub()
	if st, err := s.streams.Stream(key); err == nil && st.Leads() && st.Partitions() == t.parts {
		t.s = st
	}
	return t
}

// waitTopic waits for a topic just made (or changed) through the catalogue to
// show in this node's copy of it with at least parts partitions.
func (s *Server) waitTopic(c Cluster, acct, name string, parts int) (TopicInfo, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ti, ok := c.Topic(acct, name); ok && len(ti.Partitions) >= parts {
			return ti, true
		}
		if time.Now().After(deadline) {
			return TopicInfo{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
