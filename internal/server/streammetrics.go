package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tern-mq/tern/internal/stream"
)

// streamCollector reports every stream and consumer to Prometheus at scrape time, so
// the data path keeps no metric state of its own.
type streamCollector struct{ m *stream.Manager }

var (
	streamMsgsDesc          = prometheus.NewDesc("tern_stream_messages", "Messages stored in a stream.", []string{"stream"}, nil)
	streamBytesDesc         = prometheus.NewDesc("tern_stream_bytes", "Bytes of records stored in a stream.", []string{"stream"}, nil)
	streamLastSeqDesc       = prometheus.NewDesc("tern_stream_last_seq", "Highest sequence of a stream (over its partitions).", []string{"stream"}, nil)
	streamCorruptDesc       = prometheus.NewDesc("tern_stream_corrupt_ranges", "Damaged ranges recovery found in a stream's logs.", []string{"stream"}, nil)
	streamFileBytesDesc     = prometheus.NewDesc("tern_stream_file_bytes", "Bytes of a stream's segment files on this node.", []string{"stream"}, nil)
	streamKeysDesc          = prometheus.NewDesc("tern_stream_keys", "Distinct keys of a compacted stream on this node.", []string{"stream"}, nil)
	consumerPendingDesc     = prometheus.NewDesc("tern_consumer_pending", "Messages a consumer has yet to receive.", []string{"stream", "consumer"}, nil)
	consumerAckPendingDesc  = prometheus.NewDesc("tern_consumer_ack_pending", "Messages delivered and not yet acknowledged.", []string{"stream", "consumer"}, nil)
	consumerRedeliveredDesc = prometheus.NewDesc("tern_consumer_redelivered_total", "Redeliveries by a consumer.", []string{"stream", "consumer"}, nil)
	consumerWaitingDesc     = prometheus.NewDesc("tern_consumer_waiting_pulls", "Pull requests waiting for messages.", []string{"stream", "consumer"}, nil)

	streamLeaderDesc        = prometheus.NewDesc("tern_stream_raft_leader", "1 if this node leads the stream's Raft group.", []string{"stream"}, nil)
	streamTermDesc          = prometheus.NewDesc("tern_stream_raft_term", "Raft term of the stream's group as this node sees it.", []string{"stream"}, nil)
	streamAppliedDesc       = prometheus.NewDesc("tern_stream_raft_applied", "Last Raft index this node's replica of the stream applied.", []string{"stream"}, nil)
	streamReplicaLagDesc    = prometheus.NewDesc("tern_stream_replica_lag", "Raft entries a replica of the stream is behind its leader (reported by the leader).", []string{"stream", "replica"}, nil)
	streamReplicaActiveDesc = prometheus.NewDesc("tern_stream_replica_active", "1 if the stream's leader heard from the replica recently (reported by the leader).", []string{"stream", "replica"}, nil)
)

func (c streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamMsgsDesc, streamBytesDesc, streamLastSeqDesc, streamCorruptDesc, streamFileBytesDesc, streamKeysDesc,
		consumerPendingDesc, consumerAckPendingDesc, consumerRedeliveredDesc, consumerWaitingDesc,
		streamLeaderDesc, streamTermDesc, streamAppliedDesc, streamReplicaLagDesc, streamReplicaActiveDesc} {
		ch <- d
	}
}

func (c streamCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// Every account's streams, each by its key: the global account's by name,
	// another's as "$A.<account>.<name>".
	for _, s := range c.m.AllStreams() {
		info := s.Info()
		gauge(streamMsgsDesc, float64(info.State.Msgs), s.Key())
		gauge(streamBytesDesc, float64(info.State.Bytes), s.Key())
		gauge(streamLastSeqDesc, float64(info.State.LastSeq), s.Key())
		gauge(streamCorruptDesc, float64(len(info.Corrupt)), s.Key())
		gauge(streamFileBytesDesc, float64(info.State.FileBytes), s.Key())
		if info.Config.Compaction() != nil {
			gauge(streamKeysDesc, float64(info.State.Keys), s.Key())
		}
		if cl := info.Cluster; cl != nil && s.Replicated() {
			// Only the leader knows its replicas' progress: its view lists them.
			for _, r := range cl.Replicas {
				gauge(streamReplicaLagDesc, float64(r.Lag), s.Key(), r.Node)
				gauge(streamReplicaActiveDesc, b2f(r.Active), s.Key(), r.Node)
			}
			gauge(streamLeaderDesc, b2f(len(cl.Replicas) > 0), s.Key())
			gauge(streamTermDesc, float64(cl.Term), s.Key())
			gauge(streamAppliedDesc, float64(cl.Applied), s.Key())
		}
		for _, cons := range s.Consumers() {
			ci := cons.Info()
			gauge(consumerPendingDesc, float64(ci.NumPending), s.Key(), ci.Name)
			gauge(consumerAckPendingDesc, float64(ci.NumAckPending), s.Key(), ci.Name)
			ch <- prometheus.MustNewConstMetric(consumerRedeliveredDesc, prometheus.CounterValue, float64(ci.NumRedelivered), s.Key(), ci.Name)
			gauge(consumerWaitingDesc, float64(ci.NumWaiting), s.Key(), ci.Name)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
