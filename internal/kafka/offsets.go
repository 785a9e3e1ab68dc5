package kafka

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Committed offsets. A Kafka group G's committed offsets on topic T are the
// positions of one durable consumer of stream T, named after G (consumerName):
// committing offset o for partition p moves that consumer's position in p to
// sequence o + 1 (the stream API's CONSUMER.SEEK, answered once the consumer's
// journal holds it, and refused if it reaches the consumer after the deadline it
// carries, so that a commit this node gave up on never lands after a newer one),
// and the committed offset read back is the consumer's ack floor there. So a group's progress is durable and, in a cluster, replicated
// with the stream's consumer state, and native clients see it
// (`tern consumer info T G`). The consumer is made by the group's first commit on
// the topic: a pull consumer (nothing is delivered while nobody pulls) with
// explicit acks, starting at each partition's first message, whose description
// names the group (descriptionPrefix) so that ListGroups finds it after a restart.
// Every request goes through the broker to the stream API, as a client's would, so
// any node can make it.

// descriptionPrefix starts the description of a consumer a Kafka group's commit
// made; the group's id follows.
const descriptionPrefix = "Kafka consumer group "

// consumerName is the durable consumer holding group's offsets: the group id
// itself when it is a valid consumer name (1 to 64 letters, digits, '-' and '_'),
// else the id with every other character replaced by '_', cut to 55 characters,
// then '-' and the first 8 hex digits of the id's SHA-256.
func consumerName(group string) string {
	if streamapi.ValidName("consumer", group) == nil {
		return group
	}
	b := []byte(group)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 55 {
		b = b[:55]
	}
	sum := sha256.Sum256([]byte(group))
	return string(b) + "-" + hex.EncodeToString(sum[:4])
}

// groupOfConsumer is the Kafka group whose commits made consumer info, "" when
// none did.
func groupOfConsumer(info *streamapi.ConsumerInfo) string {
	g, ok := strings.CutPrefix(info.Config.Description, descriptionPrefix)
	if !ok || consumerName(g) != info.Name {
		return ""
	}
	return g
}

// An account's group keeps its offsets in consumers of the account's streams,
// reached through the account's stream API subjects ("$A.<account>.$TERN.API.>"):
// consumer names need no account in them.

// apiSubject is the account's name of a stream API subject inside the server.
func apiSubject(acct, subject string) string {
	if acct == "" {
		return subject
	}
	return stream.SubjectPrefix(acct) + subject
}

// seekOffsets sends a group's offsets on one topic to its consumer (apiAnswer
// waits for the answer: CodeConsumerMissing before the group's first commit
// there, see makeOffsetsConsumer).
func (s *Server) seekOffsets(g groupRef, topic string, positions []streamapi.SeekPosition) *apiCall {
	return s.api.send(apiSubject(g.acct, streamapi.ConsumerSeekSubject(topic, consumerName(g.id))),
		streamapi.SeekRequest{Positions: positions, NotAfter: s.api.seekDeadline()})
}

// makeOffsetsConsumer makes the consumer holding a group's offsets on a topic, for
// the group's first commit there; one made meanwhile by another commit will do.
func (s *Server) makeOffsetsConsumer(g groupRef, topic string) error {
	name := consumerName(g.id)
	cfg := streamapi.ConsumerConfig{Durable: name, Description: descriptionPrefix + g.id,
		AckPolicy: streamapi.AckExplicit, DeliverPolicy: streamapi.DeliverAll}
	if _, err := apiRequest[streamapi.ConsumerInfo](s.api, apiSubject(g.acct, streamapi.ConsumerCreateSubject(topic, name)), cfg); err != nil && apiCode(err) != streamapi.CodeConflict {
		return err
	}
	s.log.Info("group offsets consumer created", "group", g.id, "account", acctAttr(g.acct), "topic", topic, "consumer", name)
	return nil
}

// fetchOffsets reads a group's consumer on a topic: nil when the group has no
// offsets there (or the topic does not exist).
func (s *Server) fetchOffsets(g groupRef, topic string) (*streamapi.ConsumerInfo, error) {
	info, err := apiRequest[streamapi.ConsumerInfo](s.api, apiSubject(g.acct, streamapi.ConsumerInfoSubject(topic, consumerName(g.id))), nil)
	switch apiCode(err) {
	case streamapi.CodeConsumerMissing, streamapi.CodeStreamNotFound:
		return nil, nil
	}
	return info, err
}

// streamNames lists every stream of an account, hence every topic.
func (s *Server) streamNames(acct string) ([]string, error) {
	list, err := apiRequest[streamapi.StreamList](s.api, apiSubject(acct, streamapi.StreamListSubject), nil)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Streams))
	for _, st := range list.Streams {
		names = append(names, st.Config.Name)
	}
	return names, nil
}

// groupOffsets reads a group's consumers on every topic, by topic.
func (s *Server) groupOffsets(group groupRef) (map[string]*streamapi.ConsumerInfo, error) {
	names, err := s.streamNames(group.acct)
	if err != nil {
		return nil, err
	}
	out := map[string]*streamapi.ConsumerInfo{}
	for _, n := range names {
		info, err := s.fetchOffsets(group, n)
		if err != nil {
			return nil, err
		}
		if info != nil {
			out[n] = info
		}
	}
	return out, nil
}

// committedGroups lists an account's groups whose commits made consumers, on any
// topic of the account.
func (s *Server) committedGroups(acct string) ([]string, error) {
	names, err := s.streamNames(acct)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		list, err := apiRequest[streamapi.ConsumerList](s.api, apiSubject(acct, streamapi.ConsumerListSubject(n)), nil)
		if apiCode(err) == streamapi.CodeStreamNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i := range list.Consumers {
			if g := groupOfConsumer(&list.Consumers[i]); g != "" && !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out, nil
}

// deleteOffsets removes a group's consumers from every topic and reports whether
// there was any.
func (s *Server) deleteOffsets(group groupRef) (bool, error) {
	byTopic, err := s.groupOffsets(group)
	if err != nil {
		return false, err
	}
	for topic := range byTopic {
		_, err := apiRequest[streamapi.Deleted](s.api, apiSubject(group.acct, streamapi.ConsumerDeleteSubject(topic, consumerName(group.id))), nil)
		if err != nil && apiCode(err) != streamapi.CodeConsumerMissing {
			return false, err
		}
	}
	return len(byTopic) > 0, nil
}

// offsetsErrorCode is the Kafka error code of a failed offsets request.
func offsetsErrorCode(err error) int16 {
	switch apiCode(err) {
	case 0:
		if errors.Is(err, errNoResponders) {
			return kerr.CoordinatorNotAvailable.Code
		}
		return kerr.RequestTimedOut.Code
	case streamapi.CodeStreamNotFound:
		return kerr.UnknownTopicOrPartition.Code
	case streamapi.CodeBadRequest, streamapi.CodeConflict:
		return kerr.InvalidCommitOffsetSize.Code
	case streamapi.CodeLimits:
		return kerr.PolicyViolation.Code
	case streamapi.CodeUnavailable:
		return kerr.CoordinatorNotAvailable.Code
	case streamapi.CodeExpired:
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}
