package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Record deletion and topic configuration changes.

// deleteRecords removes each partition's records below the offset asked (-1: every
// record): a purge of that partition below the sequence offset+1, through the
// stream (and its group, in a cluster), on the node that leads it.
func (c *conn) deleteRecords(req *kmsg.DeleteRecordsRequest) *kmsg.DeleteRecordsResponse {
	resp := kmsg.NewPtrDeleteRecordsResponse()
	resp.Version = req.Version
	for _, rt := range req.Topics {
		ot := kmsg.NewDeleteRecordsResponseTopic()
		ot.Topic = rt.Topic
		t, code, _ := c.find(rt.Topic, false)
		if code == 0 && !c.mayManage(streamapi.StreamPurgeSubject(rt.Topic)) {
			code = kerr.TopicAuthorizationFailed.Code
		}
		for _, rp := range rt.Partitions {
			op := kmsg.NewDeleteRecordsResponseTopicPartition()
			op.Partition, op.LowWatermark = rp.Partition, -1
			switch {
			case code != 0:
				op.ErrorCode = code
			case rp.Partition < 0 || int(rp.Partition) >= t.parts:
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case t.s == nil:
				op.ErrorCode = kerr.NotLeaderForPartition.Code
			default:
				op.ErrorCode, op.LowWatermark = c.deletePartition(t, int(rp.Partition), rp.Offset)
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp
}

func (c *conn) deletePartition(t *topic, p int, offset int64) (code int16, low int64) {
	st, err := t.s.PartitionState(p)
	if err != nil {
		return kerr.UnknownTopicOrPartition.Code, -1
	}
	hwm := int64(st.LastSeq)
	if offset == -1 {
		offset = hwm
	}
	if offset < 0 || offset > hwm {
		return kerr.OffsetOutOfRange.Code, -1
	}
	if _, err := t.s.Purge(streamapi.PurgeRequest{UpTo: uint64(offset) + 1, Partition: &p}); err != nil {
		c.s.log.Warn("delete records", "topic", t.name, "partition", p, "err", err)
		return streamErrorCode(err), -1
	}
	if st, err = t.s.PartitionState(p); err != nil {
		return kerr.UnknownTopicOrPartition.Code, -1
	}
	return 0, max(offset, int64(st.FirstSeq)-1)
}

// alterConfigs replaces a topic's configuration: what it names is set, the rest of
// what Tern maps back to its default.
func (c *conn) alterConfigs(req *kmsg.AlterConfigsRequest) *kmsg.AlterConfigsResponse {
	resp := kmsg.NewPtrAlterConfigsResponse()
	resp.Version = req.Version
	for _, r := range req.Resources {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.ResourceType, r.ResourceName
		var set []kmsg.CreateTopicsRequestTopicConfig
		for _, kv := range r.Configs {
			set = append(set, kmsg.CreateTopicsRequestTopicConfig{Name: kv.Name, Value: kv.Value})
		}
		out.ErrorCode, out.ErrorMessage = c.alterTopic(r.ResourceType, r.ResourceName, req.ValidateOnly, func(streamapi.StreamConfig) []kmsg.CreateTopicsRequestTopicConfig {
			return set
		})
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// incrementalAlterConfigs sets or deletes (back to the default) the configs named,
// keeping the others.
func (c *conn) incrementalAlterConfigs(req *kmsg.IncrementalAlterConfigsRequest) *kmsg.IncrementalAlterConfigsResponse {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	resp.Version = req.Version
	for _, r := range req.Resources {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.ResourceType, r.ResourceName
		var bad string
		for _, kv := range r.Configs {
			if kv.Op != kmsg.IncrementalAlterConfigOpSet && kv.Op != kmsg.IncrementalAlterConfigOpDelete {
				bad = fmt.Sprintf("config %s: only SET and DELETE apply to Tern's topic configs (none is a list)", kv.Name)
			}
		}
		if bad != "" {
			out.ErrorCode, out.ErrorMessage = kerr.InvalidConfig.Code, &bad
			resp.Resources = append(resp.Resources, out)
			continue
		}
		out.ErrorCode, out.ErrorMessage = c.alterTopic(r.ResourceType, r.ResourceName, req.ValidateOnly, func(cur streamapi.StreamConfig) []kmsg.CreateTopicsRequestTopicConfig {
			// Start from the topic's current values, then apply the changes.
			values := map[string]*string{}
			var order []string
			for _, e := range c.s.topicConfigEntries(cur) {
				if settableConfig(e.name) {
					v := e.value
					values[e.name] = &v
					order = append(order, e.name)
				}
			}
			for _, kv := range r.Configs {
				if _, ok := values[kv.Name]; !ok {
					order = append(order, kv.Name)
				}
				if kv.Op == kmsg.IncrementalAlterConfigOpDelete {
					values[kv.Name] = nil
				} else {
					values[kv.Name] = kv.Value
				}
			}
			var set []kmsg.CreateTopicsRequestTopicConfig
			for _, name := range order {
				set = append(set, kmsg.CreateTopicsRequestTopicConfig{Name: name, Value: values[name]})
			}
			return set
		})
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// settableConfig reports whether a topic config can change after the topic is
// made: what incrementalAlterConfigs carries over from the topic's current
// configuration when a request does not name it.
func settableConfig(name string) bool {
	switch name {
	case "retention.ms", "retention.bytes", "max.message.bytes", "compression.type",
		"cleanup.policy", "min.compaction.lag.ms", "delete.retention.ms", "max.compaction.lag.ms", "segment.ms":
		return true
	}
	return false
}

// alterTopic applies the configs configsFor gives (from the topic's current
// configuration) to a topic's stream.
func (c *conn) alterTopic(typ kmsg.ConfigResourceType, name string, validateOnly bool,
	configsFor func(streamapi.StreamConfig) []kmsg.CreateTopicsRequestTopicConfig) (int16, *string) {
	fail := func(code int16, msg string) (int16, *string) { return code, &msg }
	if typ == kmsg.ConfigResourceTypeBroker && !c.mayManage(clusterConfigSubject) {
		return fail(kerr.ClusterAuthorizationFailed.Code, "not authorized to change the broker's configs")
	}
	if typ != kmsg.ConfigResourceTypeTopic {
		return fail(kerr.InvalidRequest.Code, "only topic configs can be changed")
	}
	t, code, _ := c.find(name, false)
	if code != 0 {
		return code, nil
	}
	if !c.mayManage(streamapi.StreamUpdateSubject(name)) {
		return fail(kerr.TopicAuthorizationFailed.Code, fmt.Sprintf("not authorized to change topic %q", name))
	}
	set, minInsync, err := topicConfig(configsFor(t.cfg), c.s.cfg.MaxPayload, c.s.topicCompression())
	if err == nil {
		err = checkMinInsync(minInsync, t.cfg.Replicas)
	}
	if err != nil {
		return fail(kerr.InvalidConfig.Code, err.Error())
	}
	if set.SegmentBytes != 0 && set.SegmentBytes != t.cfg.SegmentBytes {
		return fail(kerr.InvalidConfig.Code, "segment.bytes cannot change after a topic is made")
	}
	cfg := t.cfg
	cfg.MaxAge, cfg.MaxMsgSize, cfg.Compression, cfg.Compact, cfg.SegmentAge = set.MaxAge, set.MaxMsgSize, set.Compression, set.Compact, set.SegmentAge
	if set.MaxBytes != retentionBytes(t.cfg) {
		// Unchanged, the stream's own max_bytes stays, remainder of its
		// division between partitions included.
		cfg.MaxBytes = streamMaxBytes(set.MaxBytes, max(t.cfg.Partitions, 1))
	}
	if validateOnly {
		if err := c.s.streams.Normalise(&cfg); err != nil {
			return fail(kerr.InvalidConfig.Code, err.Error())
		}
		return 0, nil
	}
	if cl := c.s.cluster(); cl != nil {
		if err := cl.UpdateStream(c.acct, cfg); err != nil {
			return fail(apiErrorCode(err), err.Error())
		}
	} else if _, err := c.s.streams.UpdateAccountStream(c.acct, cfg); err != nil {
		return fail(streamErrorCode(err), err.Error())
	}
	c.s.log.Info("topic configuration changed", "topic", name, "account", acctAttr(c.acct))
	return 0, nil
}
