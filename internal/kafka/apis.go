package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Keys of the APIs the connection treats apart.
const (
	produceKey     = 0
	apiVersionsKey = 18
)

// apiRange is the versions of one API this server serves.
type apiRange struct{ key, min, max int16 }

// apis lists every API served and its versions: the oldest each is served from is
// the oldest Kafka 4 serves (older clients are long gone), the newest is kmsg's.
// ApiVersions answers with exactly this list.
var apis = []apiRange{
	{0, 3, 13}, // Produce (v3+: record batch v2)
	{1, 4, 18}, // Fetch
	{2, 1, 11}, // ListOffsets
	{3, 0, 13}, // Metadata
	{8, 2, 10}, // OffsetCommit
	{9, 1, 10}, // OffsetFetch (v8+: several groups)
	{10, 0, 6}, // FindCoordinator (v4+: several keys)
	{11, 0, 9}, // JoinGroup
	{12, 0, 4}, // Heartbeat
	{13, 0, 5}, // LeaveGroup (v3+: several members)
	{14, 0, 5}, // SyncGroup
	{15, 0, 6}, // DescribeGroups
	{16, 0, 5}, // ListGroups
	{17, 0, 1}, // SaslHandshake (v0: bare tokens follow)
	{18, 0, 5}, // ApiVersions
	{19, 2, 7}, // CreateTopics
	{20, 1, 6}, // DeleteTopics
	{21, 0, 2}, // DeleteRecords
	{22, 0, 5}, // InitProducerID (idempotent producers; no transactions)
	{32, 1, 4}, // DescribeConfigs
	{33, 0, 2}, // AlterConfigs
	{35, 1, 5}, // DescribeLogDirs
	{36, 0, 2}, // SaslAuthenticate
	{37, 0, 3}, // CreatePartitions
	{42, 0, 3}, // DeleteGroups
	{44, 0, 1}, // IncrementalAlterConfigs
	{47, 0, 0}, // OffsetDelete
	{60, 0, 2}, // DescribeCluster
}

func supported(key, version int16) bool {
	for _, a := range apis {
		if a.key == key {
			return version >= a.min && version <= a.max
		}
	}
	return false
}

// dispatch answers a decoded request. A nil answer sends nothing (Produce with
// acks=0); an error closes the connection.
func (c *conn) dispatch(req kmsg.Request) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return apiVersionsResponse(r.Version), nil
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(r)
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(r)
	case *kmsg.MetadataRequest:
		return c.metadata(r), nil
	case *kmsg.FetchRequest:
		return c.fetchRecords(r), nil
	case *kmsg.ListOffsetsRequest:
		return c.listOffsets(r), nil
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(r), nil
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(r), nil
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(r), nil
	case *kmsg.InitProducerIDRequest:
		return c.initProducerID(r), nil
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(r), nil
	case *kmsg.AlterConfigsRequest:
		return c.alterConfigs(r), nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.incrementalAlterConfigs(r), nil
	case *kmsg.DeleteRecordsRequest:
		return c.deleteRecords(r), nil
	case *kmsg.DescribeClusterRequest:
		return c.describeCluster(r), nil
	case *kmsg.DescribeLogDirsRequest:
		return c.describeLogDirs(r), nil
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(r), nil
	case *kmsg.JoinGroupRequest:
		return c.joinGroup(r), nil
	case *kmsg.SyncGroupRequest:
		return c.syncGroup(r), nil
	case *kmsg.HeartbeatRequest:
		return c.heartbeat(r), nil
	case *kmsg.LeaveGroupRequest:
		return c.leaveGroup(r), nil
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(r), nil
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(r), nil
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(r), nil
	case *kmsg.ListGroupsRequest:
		return c.listGroups(r), nil
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(r), nil
	case *kmsg.OffsetDeleteRequest:
		return c.offsetDelete(r), nil
	}
	return unsupported(req), nil // not reached: supported() lists only the above
}

func apiVersionsResponse(version int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	for _, a := range apis {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
