package kafka

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Authorization: a connection's user has the permissions of the users file
// (package auth), the same for every protocol, and the Kafka APIs map onto them:
//
//   - Writing a topic (Produce) is publishing on the subject its records land
//     on: the stream's subject when it has one literal subject, else each
//     record's Tern-Subject, checked record by record.
//   - Reading a topic (Fetch, ListOffsets, the committed offsets of a group on
//     it) is subscribing to the whole stream: every subject filter of the stream
//     must be allowed, with no denied subject inside it (a fetch answers whole
//     batches, so records cannot be withheld one by one without breaking
//     offsets).
//   - Describing a topic (Metadata, DescribeConfigs, DescribeLogDirs) needs one
//     of reading it, writing some of it, or the stream API's STREAM.INFO on it;
//     topics a user may not describe are left out of the lists of every topic
//     and refused by name, as Kafka hides them.
//   - Topic administration is the stream API's management permission on the
//     matching subject: CreateTopics and auto-creation STREAM.CREATE,
//     DeleteTopics STREAM.DELETE, AlterConfigs, IncrementalAlterConfigs and
//     CreatePartitions STREAM.UPDATE, DeleteRecords STREAM.PURGE; broker
//     configs need clusterConfigSubject; DeleteGroups needs CONSUMER.DELETE of
//     the group's consumer on every topic it has offsets on, OffsetDelete that
//     of the topics named (and reading them).
//
// Refusals use Kafka's codes: TOPIC_AUTHORIZATION_FAILED per topic or
// partition, GROUP_AUTHORIZATION_FAILED per group, CLUSTER_AUTHORIZATION_FAILED
// for broker resources. Consumer groups themselves (join, sync, heartbeat,
// describe, list) are open to every authenticated user: Tern has no group
// permissions, and a group's offsets are reached only through topics the user
// may read.

// clusterConfigSubject is the management subject a user needs publish
// permission on to describe or change the broker's configs (admin users have
// it).
const clusterConfigSubject = streamapi.ClusterPrefix + "CONFIG"

// topicRights are a user's rights on a topic, decided for its stream's subjects.
type topicRights struct {
	subjects              []string
	read, write, describe bool
}

// allRights are an unrestricted user's.
var allRights = &topicRights{read: true, write: true, describe: true}

// maxRights bounds a connection's cache of decisions; past it the cache starts
// over.
const maxRights = 256

// rightsOn returns the connection's rights on t, decided once per topic and
// stream subjects (a map lookup afterwards, no allocation).
func (c *conn) rightsOn(t *topic) *topicRights {
	if c.perms == nil {
		return allRights
	}
	if r := c.rights[t.name]; r != nil && slices.Equal(r.subjects, t.cfg.Subjects) {
		return r
	}
	r := &topicRights{subjects: slices.Clone(t.cfg.Subjects), read: len(t.cfg.Subjects) > 0}
	for _, f := range t.cfg.Subjects {
		if ok, check := c.perms.CanSubscribe(f); !ok || check {
			r.read = false
		}
		if t.subject == "" && c.perms.CanPublishSome(f) {
			r.write = true
		}
	}
	if t.subject != "" {
		r.write = c.perms.CanPublish([]byte(t.subject))
	}
	r.describe = r.read || r.write || c.mayManage(streamapi.StreamInfoSubject(t.name))
	if c.rights == nil || len(c.rights) >= maxRights {
		c.rights = make(map[string]*topicRights)
	}
	c.rights[t.name] = r
	return r
}

// mayManage reports whether the connection may make the management request of
// the stream API subject.
func (c *conn) mayManage(apiSubject string) bool {
	return c.perms == nil || c.user.MayManage(apiSubject)
}

// mayDescribeName reports whether the connection may learn about a topic that
// does not exist: it could read, write or describe one of that name (capturing
// the subject of its name, as an auto-created topic does), or create it.
func (c *conn) mayDescribeName(name string) bool {
	if c.perms == nil {
		return true
	}
	if ok, _ := c.perms.CanSubscribe(name); ok {
		return true
	}
	return c.perms.CanPublish([]byte(name)) || c.mayManage(streamapi.StreamInfoSubject(name)) ||
		c.mayManage(streamapi.StreamCreateSubject(name))
}

// need is a right on a topic.
type need uint8

const (
	needRead need = iota
	needWrite
	needDescribe
)

// allowed reports whether the connection has right n on t.
func (c *conn) allowed(t *topic, n need) bool {
	r := c.rightsOn(t)
	switch n {
	case needRead:
		return r.read
	case needWrite:
		return r.write
	}
	return r.describe
}

// find looks up the topic a request names, as (*Server).lookup, but makes a
// missing one only when the user may create it (else TOPIC_AUTHORIZATION_FAILED),
// and answers a missing one the user could not describe with
// TOPIC_AUTHORIZATION_FAILED too, so that a topic's existence is not disclosed.
func (c *conn) find(name string, create bool) (*topic, int16, string) {
	if c.perms == nil {
		return c.s.lookup(c.acct, name, create)
	}
	t, code, msg := c.s.lookup(c.acct, name, false)
	if code != kerr.UnknownTopicOrPartition.Code {
		return t, code, msg
	}
	if create && c.s.cfg.AutoCreate {
		if !c.mayManage(streamapi.StreamCreateSubject(name)) {
			return nil, kerr.TopicAuthorizationFailed.Code, fmt.Sprintf("not authorized to create topic %q", name)
		}
		return c.s.lookup(c.acct, name, true)
	}
	if !c.mayDescribeName(name) {
		return nil, kerr.TopicAuthorizationFailed.Code, ""
	}
	return t, code, msg
}

// findFor is find followed by the check of right n on the topic found.
func (c *conn) findFor(name string, create bool, n need) (*topic, int16, string) {
	t, code, msg := c.find(name, create)
	if code == 0 && !c.allowed(t, n) {
		return nil, kerr.TopicAuthorizationFailed.Code, deniedMsg(name, n)
	}
	return t, code, msg
}

// findIDFor looks up a topic by id and checks right n on it. A topic the user
// may not describe is answered as unknown.
func (c *conn) findIDFor(id [16]byte, n need) (*topic, int16) {
	t, code := c.s.lookupID(c.acct, id)
	if code == 0 && !c.allowed(t, n) {
		if !c.allowed(t, needDescribe) {
			return nil, kerr.UnknownTopicID.Code
		}
		return nil, kerr.TopicAuthorizationFailed.Code
	}
	return t, code
}

func deniedMsg(topic string, n need) string {
	what := "describe"
	switch n {
	case needRead:
		what = "read"
	case needWrite:
		what = "write to"
	}
	return fmt.Sprintf("not authorized to %s topic %q", what, topic)
}
