package kafka

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeLogDirs describes this node's one log directory, where its streams
// live: the size of each partition it stores (its segment files' bytes, as
// Kafka gives its log's: compressed, and with the records removed but not yet
// cleaned out) of the topics asked (every one when none) that the user may
// describe, and from v4 the volume's size and free bytes. In a cluster each
// node describes the replicas it holds, as each Kafka broker does.
func (c *conn) describeLogDirs(req *kmsg.DescribeLogDirsRequest) *kmsg.DescribeLogDirsResponse {
	resp := kmsg.NewPtrDescribeLogDirsResponse()
	resp.Version = req.Version
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = c.s.streams.StreamsDir()
	if total, free, err := diskSpace(dir.Dir); err == nil {
		dir.TotalBytes, dir.UsableBytes = total, free
	}
	var asked map[string][]int32
	if req.Topics != nil {
		asked = make(map[string][]int32, len(req.Topics))
		for _, rt := range req.Topics {
			asked[rt.Topic] = append(asked[rt.Topic], rt.Partitions...)
		}
	}
	for _, st := range c.s.streams.AccountStreams(c.acct) {
		parts, ok := asked[st.Name()]
		if asked != nil && !ok {
			continue
		}
		if !c.allowed(topicOf(st), needDescribe) {
			continue
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = st.Name()
		for p := range st.Partitions() {
			if asked != nil && !slices.Contains(parts, int32(p)) {
				continue
			}
			size, err := st.PartitionFileBytes(p)
			if err != nil {
				continue // closed meanwhile: not here any more
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition, dp.Size = int32(p), size
			dt.Partitions = append(dt.Partitions, dp)
		}
		dir.Topics = append(dir.Topics, dt)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}
