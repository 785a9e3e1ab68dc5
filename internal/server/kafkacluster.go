package server

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/kafka"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// kafkaCluster is the Kafka front end's view of a cluster that replicates streams
// (kafka.Cluster): the nodes that serve the Kafka API come from the routes (each
// node's client URLs carry its "kafka://host:port"), topics from the catalogue,
// and the leader of a stream from its group as this node sees it, or from its
// leader's stream info when this node keeps no replica of it.
type kafkaCluster struct {
	s    *Server
	node *cluster.Node

	mu      sync.Mutex
	leaders map[string]cachedLeader // stream key → leader asked of the cluster
	topics  map[string]cachedTopic  // stream key → what Topic found, for topicTTL
}

type cachedTopic struct {
	ti kafka.TopicInfo
	ok bool
	at time.Time
}

// topicTTL bounds how long Topic's answer is reused: every produce and fetch looks
// its topic up, and reading the catalogue and the group's leader each time would
// cost every request a decode and a trip through the Raft loop. A client told
// NOT_LEADER by an answer that old asks again.
const topicTTL = 100 * time.Millisecond

type cachedLeader struct {
	node string
	at   time.Time
}

// leaderTTL bounds how long a leader learned by asking is believed: a client
// sent to an old leader is told NOT_LEADER and asks Metadata again.
const leaderTTL = time.Second

// kafkaBrokerID is a node's broker id: the same on every node, from its name.
func kafkaBrokerID(name string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int32(h.Sum32() & 0x7fffffff)
}

// The schemes of a node's Kafka listeners among its client URLs.
const (
	kafkaScheme    = "kafka://"
	kafkaTLSScheme = "kafka+tls://"
)

// kafkaURL is this node's Kafka listener, plain or TLS (secure), as other nodes
// pass it on to clients: kafka_advertise (kafka_tls_advertise), else the
// listener's host (cluster_advertise when bound to every interface); "" when
// there is no such listener.
func (s *Server) kafkaURL(secure bool) string {
	if s.kafka == nil {
		return ""
	}
	scheme, adv, addr := kafkaScheme, s.cfg.KafkaAdvertise, s.KafkaAddr()
	if secure {
		scheme, adv, addr = kafkaTLSScheme, s.cfg.KafkaTLSAdvertise, s.KafkaTLSAddr()
	}
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	if adv != "" {
		return scheme + adv
	}
	host := s.cfg.ClusterAdvertise
	if host == "" && !a.IP.IsUnspecified() {
		host = a.IP.String()
	}
	if host == "" {
		return ""
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// kafkaBroker is the broker of node that urls, its client URLs, describe: its
// plain and TLS Kafka listeners; ok false when it has neither.
func kafkaBroker(node string, urls ...string) (b kafka.Broker, ok bool) {
	b.ID = kafkaBrokerID(node)
	for _, u := range urls {
		hp, secure := strings.CutPrefix(u, kafkaTLSScheme)
		if !secure {
			var plain bool
			if hp, plain = strings.CutPrefix(u, kafkaScheme); !plain {
				continue
			}
		}
		host, p, err := net.SplitHostPort(hp)
		port, perr := strconv.Atoi(p)
		if err != nil || perr != nil || port <= 0 || port > 65535 {
			continue
		}
		if secure {
			b.TLSHost, b.TLSPort = host, int32(port)
		} else {
			b.Host, b.Port = host, int32(port)
		}
		ok = true
	}
	return b, ok
}

func (k *kafkaCluster) Brokers() (int32, []kafka.Broker) {
	self := kafkaBrokerID(k.s.cfg.ServerName)
	var out []kafka.Broker
	if b, ok := kafkaBroker(k.s.cfg.ServerName, k.s.kafkaURL(false), k.s.kafkaURL(true)); ok {
		out = append(out, b)
	}
	for _, r := range k.node.Status().Routes {
		if b, ok := kafkaBroker(r.Node, r.ClientURLs...); ok && !slices.ContainsFunc(out, func(o kafka.Broker) bool { return o.ID == b.ID }) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b kafka.Broker) int { return int(a.ID) - int(b.ID) })
	return self, out
}

// Topics lists an account's streams: the catalogue keeps every account's, by
// key (stream.Key), and a Kafka client sees its account's only.
func (k *kafkaCluster) Topics(account string) []kafka.TopicInfo {
	var sts []*meta.Stream
	k.node.Catalogue(func(c *meta.State) { sts = c.Streams() })
	out := make([]kafka.TopicInfo, 0, len(sts))
	for _, st := range sts {
		if acct, _ := stream.SplitKey(st.Name); acct != account {
			continue
		}
		if ti, ok := k.topicInfo(st); ok {
			out = append(out, ti)
		}
	}
	return out
}

// Topic finds an account's stream by its name there, through its key.
func (k *kafkaCluster) Topic(account, name string) (kafka.TopicInfo, bool) {
	key := stream.Key(account, name)
	now := time.Now()
	k.mu.Lock()
	c, hit := k.topics[key]
	k.mu.Unlock()
	if hit && now.Sub(c.at) < topicTTL {
		return c.ti, c.ok
	}
	var st *meta.Stream
	k.node.Catalogue(func(c *meta.State) { st = c.Stream(key) })
	c = cachedTopic{at: now}
	if st != nil {
		c.ti, c.ok = k.topicInfo(st)
	}
	k.mu.Lock()
	if len(k.topics) > 10_000 {
		clear(k.topics)
	}
	k.topics[key] = c
	k.mu.Unlock()
	return c.ti, c.ok
}

func (k *kafkaCluster) topicInfo(st *meta.Stream) (kafka.TopicInfo, bool) {
	acct, name := stream.SplitKey(st.Name)
	var cfg streamapi.StreamConfig
	if json.Unmarshal(st.Config, &cfg) != nil || len(st.Groups) == 0 {
		return kafka.TopicInfo{}, false
	}
	ti := kafka.TopicInfo{Account: acct, Name: name, Created: time.Unix(0, st.Created).UTC(), Config: cfg}
	leader := int32(-1)
	if name := k.leaderOf(st); name != "" {
		leader = kafkaBrokerID(name)
	}
	for _, g := range st.Groups {
		pi := kafka.PartitionInfo{Leader: leader}
		for _, id := range g.Replicas {
			if name := k.node.NodeName(id); name != "" {
				pi.Replicas = append(pi.Replicas, kafkaBrokerID(name))
			}
		}
		ti.Partitions = append(ti.Partitions, pi)
	}
	return ti, true
}

// leaderOf names the node serving st: its one replica's, or its group's leader.
func (k *kafkaCluster) leaderOf(st *meta.Stream) string {
	if st.Replicas <= 1 {
		return k.node.NodeName(st.Groups[0].Replicas[0])
	}
	if gs := k.node.GroupStatus(st.Groups[0].ID); gs != nil && gs.Running && gs.Leader != "" {
		return gs.Leader
	}
	k.mu.Lock()
	c, ok := k.leaders[st.Name]
	k.mu.Unlock()
	if ok && time.Since(c.at) < leaderTTL {
		return c.node
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	leader := ""
	acct, name := stream.SplitKey(st.Name)
	if b, err := k.node.Request(ctx, stream.SubjectPrefix(acct)+streamapi.StreamInfoSubject(name), nil, 500*time.Millisecond); err == nil {
		var r streamapi.Response[streamapi.StreamInfo]
		if json.Unmarshal(b, &r) == nil && r.Value != nil && r.Value.Cluster != nil {
			leader = r.Value.Cluster.Leader
		}
	}
	k.mu.Lock()
	if len(k.leaders) > 10_000 {
		clear(k.leaders)
	}
	k.leaders[st.Name] = cachedLeader{node: leader, at: time.Now()}
	k.mu.Unlock()
	return leader
}

// CreateStream, UpdateStream and DeleteStream make an account's requests on its
// stream API subjects ("$A.<account>.$TERN.API.>"), as its native clients'
// arrive: the catalogue keys the stream and holds the account to its limits.
func (k *kafkaCluster) CreateStream(account string, cfg streamapi.StreamConfig) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return k.request(stream.SubjectPrefix(account)+streamapi.StreamCreateSubject(cfg.Name), body)
}

func (k *kafkaCluster) UpdateStream(account string, cfg streamapi.StreamConfig) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return k.request(stream.SubjectPrefix(account)+streamapi.StreamUpdateSubject(cfg.Name), body)
}

func (k *kafkaCluster) DeleteStream(account, name string) error {
	return k.request(stream.SubjectPrefix(account)+streamapi.StreamDeleteSubject(name), nil)
}

// request makes a stream API request through the catalogue and returns its refusal.
// Every topic looked up is read afresh afterwards: this node's changes show at once.
func (k *kafkaCluster) request(subject string, body []byte) error {
	defer func() {
		k.mu.Lock()
		clear(k.topics)
		k.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := k.node.Request(ctx, subject, body, 15*time.Second)
	if err != nil {
		return &streamapi.APIError{Code: streamapi.CodeUnavailable, Description: err.Error()}
	}
	var r streamapi.Response[json.RawMessage]
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("stream api answer: %w", err)
	}
	if r.Error != nil {
		return r.Error
	}
	return nil
}
