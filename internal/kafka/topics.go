package kafka

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

// nodeID is a single node's broker id in Metadata: the only broker, leader of every
// partition.
const nodeID = 0

// topic is a stream seen as a Kafka topic. A client of an account sees its
// account's streams only: topic T is the account's stream T, whose engine key is
// "$A.<account>.T" (stream.Key), the key of a global stream being its name.
type topic struct {
	name  string // the stream's name, as its account knows it
	key   string // the stream engine's (and the catalogue's) key
	acct  string // the stream's account, "" for the global one
	id    [16]byte
	cfg   streamapi.StreamConfig
	parts int
	// s is this node's replica of the stream when this node serves it (always on
	// a single node; in a cluster, while it leads the stream), else nil: fetches
	// go to the leader.
	s *stream.Stream
	// placement is each partition's leader and replicas in a cluster; nil on a
	// single node (this node, nodeID).
	placement []PartitionInfo
	// subject is what Produce publishes on: the stream's one subject when it has a
	// single literal one, else "" (records then name theirs, see produce.go).
	subject string
	// pub is subject inside the server: prefixed with the account's subject
	// prefix, the same string as subject for the global account.
	pub string
}

// topicID is a topic's Kafka id: derived from the stream's key (its name, for the
// global account) and creation time, so it is stable across restarts, a topic
// deleted and made again gets a new one, and two accounts' topics of one name
// have two.
func topicID(key string, created time.Time) [16]byte {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(created.UnixNano())))
	var id [16]byte
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x40 // a version 4 UUID's layout, as Kafka's ids have
	id[8] = id[8]&0x3f | 0x80
	return id
}

func topicOf(s *stream.Stream) *topic {
	cfg := s.Config()
	t := &topic{s: s, name: s.Name(), key: s.Key(), acct: s.Account(), id: topicID(s.Key(), s.Created()), cfg: cfg,
		parts: s.Partitions(), subject: singleSubject(cfg.Subjects)}
	t.setPub()
	return t
}

// setPub sets the subject Produce publishes on inside the server.
func (t *topic) setPub() {
	t.pub = t.subject
	if t.acct != "" && t.subject != "" {
		t.pub = stream.SubjectPrefix(t.acct) + t.subject
	}
}

// singleSubject is a stream's one subject when it has a single literal one, else "".
func singleSubject(subs []string) string {
	if len(subs) == 1 && subject.ValidatePublish([]byte(subs[0])) == nil {
		return subs[0]
	}
	return ""
}

// validTopic reports why a topic name cannot be a stream's, as Kafka's
// INVALID_TOPIC_EXCEPTION.
func validTopic(name string) error {
	if err := streamapi.ValidName("topic", name); err != nil {
		return fmt.Errorf("%w (a topic is a Tern stream: '.' is not allowed, at most 64 characters)", err)
	}
	return nil
}

// lookup finds the topic called name of an account ("" for the global one); a
// missing one is made when create is set and the server auto-creates topics. The
// error code is Kafka's.
func (s *Server) lookup(acct, name string, create bool) (*topic, int16, string) {
	if err := validTopic(name); err != nil {
		return nil, kerr.InvalidTopicException.Code, err.Error()
	}
	if c := s.cluster(); c != nil {
		if ti, ok := c.Topic(acct, name); ok {
			return s.clusterTopic(ti), 0, ""
		}
	} else if st, err := s.streams.Stream(stream.Key(acct, name)); err == nil {
		return topicOf(st), 0, ""
	}
	if !create || !s.cfg.AutoCreate {
		return nil, kerr.UnknownTopicOrPartition.Code, ""
	}
	t, code, msg := s.createTopic(acct, name, 1, streamapi.StreamConfig{Compression: s.topicCompression()})
	if code == kerr.TopicAlreadyExists.Code { // made meanwhile
		return s.lookup(acct, name, false)
	}
	return t, code, msg
}

// lookupID finds the account's topic with the given id.
func (s *Server) lookupID(acct string, id [16]byte) (*topic, int16) {
	s.idMu.Lock()
	key, ok := s.ids[id]
	s.idMu.Unlock()
	if ok {
		if a, name := stream.SplitKey(key); a == acct {
			if t, code, _ := s.lookup(acct, name, false); code == 0 && t.id == id {
				return t, 0
			}
		}
	}
	for _, t := range s.allTopics(acct) {
		s.noteID(t)
		if t.id == id {
			return t, 0
		}
	}
	return nil, kerr.UnknownTopicID.Code
}

// allTopics lists every topic of an account: the cluster's streams of the
// account, or this node's.
func (s *Server) allTopics(acct string) []*topic {
	var out []*topic
	if c := s.cluster(); c != nil {
		for _, ti := range c.Topics(acct) {
			out = append(out, s.clusterTopic(ti))
		}
		return out
	}
	for _, st := range s.streams.AccountStreams(acct) {
		out = append(out, topicOf(st))
	}
	return out
}

func (s *Server) noteID(t *topic) {
	s.idMu.Lock()
	if len(s.ids) > 100_000 {
		clear(s.ids)
	}
	s.ids[t.id] = t.key
	s.idMu.Unlock()
}

// createTopic makes the stream of an account's topic: its name, capturing the
// subject of the same name (in the account's terms), with partitions partitions
// and cfg's limits (and replicas, in a cluster: 0 for the cluster's default). The
// stream engine (or the cluster's catalogue) holds the account to its
// max_streams and max_storage.
func (s *Server) createTopic(acct, name string, partitions int, cfg streamapi.StreamConfig) (*topic, int16, string) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	cfg.Name, cfg.Subjects, cfg.Partitions = name, []string{name}, partitions
	if c := s.cluster(); c != nil {
		if _, ok := c.Topic(acct, name); ok {
			return nil, kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic %q already exists", name)
		}
		if err := c.CreateStream(acct, cfg); err != nil {
			return nil, apiErrorCode(err), err.Error()
		}
		ti, ok := s.waitTopic(c, acct, name, 1)
		if !ok {
			return nil, kerr.RequestTimedOut.Code, fmt.Sprintf("topic %q made, but not yet known here", name)
		}
		s.log.Info("topic created", "topic", name, "account", acctAttr(acct), "partitions", partitions, "replicas", cfg.Replicas)
		return s.clusterTopic(ti), 0, ""
	}
	if _, err := s.streams.Stream(stream.Key(acct, name)); err == nil {
		return nil, kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic %q already exists", name)
	}
	st, err := s.streams.AddAccountStream(acct, cfg)
	if err != nil {
		return nil, streamErrorCode(err), err.Error()
	}
	s.log.Info("topic created", "topic", name, "account", acctAttr(acct), "partitions", partitions)
	return topicOf(st), 0, ""
}

// acctAttr names an account in logs.
func acctAttr(acct string) string {
	if acct == "" {
		return auth.GlobalAccount
	}
	return acct
}

// apiErrorCode is the Kafka error code of the stream API's refusal err.
func apiErrorCode(err error) int16 {
	var ae *streamapi.APIError
	if !errors.As(err, &ae) {
		return kerr.UnknownServerError.Code
	}
	switch ae.Code {
	case streamapi.CodeConflict:
		if strings.Contains(ae.Description, "overlap") {
			return kerr.PolicyViolation.Code
		}
		return kerr.TopicAlreadyExists.Code
	case streamapi.CodeStreamNotFound:
		return kerr.UnknownTopicOrPartition.Code
	case streamapi.CodeBadRequest:
		return kerr.InvalidConfig.Code
	case streamapi.CodeLimits: // the server's max_streams, an account's limits
		return kerr.PolicyViolation.Code
	case streamapi.CodeUnavailable:
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}

// streamErrorCode is the Kafka error code of a stream engine error.
func streamErrorCode(err error) int16 {
	switch {
	case errors.Is(err, stream.ErrStreamNotFound):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, stream.ErrExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, stream.ErrOverlap), errors.Is(err, stream.ErrLimit):
		return kerr.PolicyViolation.Code
	case errors.Is(err, stream.ErrBadConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, store.ErrNoSpace):
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}

// ---------------------------------------------------------------------------------
// Metadata

func (c *conn) metadata(req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	s := c.s
	resp := kmsg.NewPtrMetadataResponse()
	resp.Version = req.Version
	self, brokers := s.brokers()
	for _, br := range brokers {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID = br.ID
		b.Host, b.Port = br.endpoint(c.tls)
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = &s.cfg.ClusterID
	resp.ControllerID = self
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		for _, t := range s.allTopics(c.acct) {
			if c.allowed(t, needDescribe) {
				resp.Topics = append(resp.Topics, metadataTopic(t, 0))
			}
		}
		return resp
	}
	// Before v4 a client could not say no, and Kafka created the topics it named.
	create := req.AllowAutoTopicCreation || req.Version < 4
	for _, rt := range req.Topics {
		var t *topic
		var code int16
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
			t, code, _ = c.findFor(name, create, needDescribe)
		} else {
			t, code = c.findIDFor(rt.TopicID, needDescribe)
		}
		if code != 0 {
			mt := kmsg.NewMetadataResponseTopic()
			mt.ErrorCode, mt.Topic, mt.TopicID = code, rt.Topic, rt.TopicID
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, metadataTopic(t, 0))
	}
	return resp
}

func metadataTopic(t *topic, code int16) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.name
	mt.Topic, mt.TopicID, mt.ErrorCode = &name, t.id, code
	for p := range t.parts {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = int32(p), nodeID, 0
		mp.Replicas, mp.ISR = []int32{nodeID}, []int32{nodeID}
		if t.placement != nil {
			pl := t.placement[p]
			mp.Leader, mp.Replicas, mp.ISR = pl.Leader, pl.Replicas, pl.Replicas
			if pl.Leader < 0 {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// brokers lists the nodes serving the Kafka API, and this one's id.
func (s *Server) brokers() (self int32, brokers []Broker) {
	if c := s.cluster(); c != nil {
		return c.Brokers()
	}
	host, port, tlsHost, tlsPort := s.advertised()
	return nodeID, []Broker{{ID: nodeID, Host: host, Port: port, TLSHost: tlsHost, TLSPort: tlsPort}}
}

// ---------------------------------------------------------------------------------
// Topic administration

func (c *conn) createTopics(req *kmsg.CreateTopicsRequest) *kmsg.CreateTopicsResponse {
	resp := kmsg.NewPtrCreateTopicsResponse()
	resp.Version = req.Version
	for _, rt := range req.Topics {
		out := kmsg.NewCreateTopicsResponseTopic()
		out.Topic = rt.Topic
		fail := func(code int16, msg string) {
			out.ErrorCode, out.ErrorMessage = code, &msg
		}
		parts := int(rt.NumPartitions)
		cfg, minInsync, err := topicConfig(rt.Configs, c.s.cfg.MaxPayload, c.s.topicCompression())
		cfg.MaxBytes = streamMaxBytes(cfg.MaxBytes, max(parts, 1))
		if err == nil {
			replicas := 1
			if rt.ReplicationFactor > 0 {
				replicas = int(rt.ReplicationFactor)
			} else if c.s.cluster() != nil {
				replicas = max(c.s.cfg.DefaultReplicas, 1)
			}
			err = checkMinInsync(minInsync, replicas)
		}
		switch {
		case !c.mayManage(streamapi.StreamCreateSubject(rt.Topic)):
			fail(kerr.TopicAuthorizationFailed.Code, fmt.Sprintf("not authorized to create topic %q", rt.Topic))
		case validTopic(rt.Topic) != nil:
			fail(kerr.InvalidTopicException.Code, validTopic(rt.Topic).Error())
		case len(rt.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "replica assignments are not supported: Tern places partitions itself")
		case c.s.cluster() == nil && rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1:
			fail(kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor %d: this node alone has only 1", rt.ReplicationFactor))
		case rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1 && rt.ReplicationFactor != 3 && rt.ReplicationFactor != 5:
			fail(kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor %d: a stream has 1, 3 or 5 replicas", rt.ReplicationFactor))
		case parts == 0 || parts < -1 || parts > 1024:
			fail(kerr.InvalidPartitions.Code, fmt.Sprintf("%d partitions: want 1 to 1024 (or -1 for 1)", parts))
		case err != nil:
			fail(kerr.InvalidConfig.Code, err.Error())
		}
		if parts == -1 {
			parts = 1
		}
		if rt.ReplicationFactor > 0 {
			cfg.Replicas = int(rt.ReplicationFactor)
		}
		if out.ErrorCode == 0 {
			if req.ValidateOnly {
				c2 := cfg
				c2.Name, c2.Subjects, c2.Partitions = rt.Topic, []string{rt.Topic}, parts
				if err := c.s.streams.Normalise(&c2); err != nil {
					fail(kerr.InvalidConfig.Code, err.Error())
				} else if _, code, _ := c.s.lookup(c.acct, rt.Topic, false); code == 0 {
					fail(kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic %q already exists", rt.Topic))
				} else {
					out.Configs = c.s.createdConfigs(c2)
				}
			} else if t, code, msg := c.s.createTopic(c.acct, rt.Topic, parts, cfg); code != 0 {
				fail(code, msg)
			} else {
				// Kafka's Java admin client reads the configs of every topic
				// made (v5+): never null.
				out.Configs = c.s.createdConfigs(t.cfg)
				out.TopicID = t.id
				if t.placement != nil {
					out.ReplicationFactor = int16(len(t.placement[0].Replicas))
				}
			}
		}
		if out.ErrorCode == 0 {
			out.NumPartitions = int32(parts)
			out.ReplicationFactor = max(out.ReplicationFactor, 1)
		} else {
			out.NumPartitions, out.ReplicationFactor = -1, -1
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// topicCompression is the compression of a topic's stream unless its
// compression.type says otherwise: "s2" unless the server is configured
// uncompressed. Kafka's default, producer, keeps the batches producers
// compressed as they came, compressed on disk; a Tern stream stores messages one
// by one, and S2 blocks of them are what keeps a topic's disk footprint near
// that.
func (s *Server) topicCompression() string {
	if s.cfg.Uncompressed {
		return "none"
	}
	return "s2"
}

// topicConfig reads the topic configs Tern maps onto a stream's: retention.ms,
// retention.bytes, max.message.bytes, segment.bytes, compression.type,
// cleanup.policy (delete, compact or both), min.compaction.lag.ms,
// max.compaction.lag.ms and delete.retention.ms. A config not given is at its
// default. MaxBytes is retention.bytes as given, a partition's: streamMaxBytes
// makes it the stream's. The compaction configs apply only with the compact
// policy, as in Kafka, which keeps them under the delete policy too: the
// stream keeps them with compaction off. Retention limits without the delete
// policy are refused.
// The configs that describe what Tern does anyway are taken when they say so:
// min.insync.replicas (returned, for checkMinInsync: 0 when not given),
// unclean.leader.election.enable=false, message.timestamp.type=CreateTime and
// min.cleanable.dirty.ratio.
func topicConfig(configs []kmsg.CreateTopicsRequestTopicConfig, maxPayload int, compression string) (cfg streamapi.StreamConfig, minInsync int, err error) {
	cfg = streamapi.StreamConfig{Compression: compression}
	compact, deletes := false, true
	var compaction streamapi.Compaction
	for _, kv := range configs {
		if kv.Value == nil {
			continue
		}
		v := *kv.Value
		num := func() (int64, error) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("config %s=%q: not a number", kv.Name, v)
			}
			return n, nil
		}
		switch kv.Name {
		case "retention.ms":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if n > 0 {
				cfg.MaxAge = streamapi.Duration(time.Duration(n) * time.Millisecond)
			}
		case "retention.bytes":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if n > 0 {
				cfg.MaxBytes = n
			}
		case "max.message.bytes":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if maxPayload > 0 && n > int64(maxPayload) {
				return cfg, 0, fmt.Errorf("config max.message.bytes=%d: above the server's max_payload (%d), which bounds every message", n, maxPayload)
			}
			if n > 0 && n < 1<<31 {
				cfg.MaxMsgSize = int(n)
			}
		case "segment.bytes":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if n > 0 {
				cfg.SegmentBytes = n
			}
		case "compression.type":
			switch v {
			case "producer", "snappy", "lz4", "zstd", "gzip":
				// Kafka would keep or recompress producers' batches with
				// the codec named; Tern's compressed blocks are S2 whatever
				// it is.
				cfg.Compression = "s2"
			case "uncompressed":
				cfg.Compression = "none"
			default:
				return cfg, 0, fmt.Errorf("config compression.type=%q: want producer, uncompressed, snappy, lz4, zstd or gzip", v)
			}
		case "cleanup.policy":
			compact, deletes = false, false
			for _, p := range strings.Split(v, ",") {
				switch strings.TrimSpace(p) {
				case "compact":
					compact = true
				case "delete":
					deletes = true
				default:
					return cfg, 0, fmt.Errorf("config cleanup.policy=%q: want delete, compact or compact,delete", v)
				}
			}
		case "min.compaction.lag.ms", "delete.retention.ms":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if n < 0 {
				return cfg, 0, fmt.Errorf("config %s=%d: must not be negative", kv.Name, n)
			}
			d := streamapi.Duration(time.Duration(n) * time.Millisecond)
			if kv.Name == "min.compaction.lag.ms" {
				compaction.MinLag = d
			} else {
				compaction.TombstoneRetention = d
			}
		case "max.compaction.lag.ms":
			// The head is sealed at the first record stored after its first
			// one is this old; Kafka's default, the largest long, is none.
			n, err := num()
			if err != nil || n < 1 {
				return cfg, 0, fmt.Errorf("config max.compaction.lag.ms=%q: want a positive number of milliseconds", v)
			}
			if n < math.MaxInt64/int64(time.Millisecond) {
				compaction.MaxLag = streamapi.Duration(time.Duration(n) * time.Millisecond)
			}
		case "min.cleanable.dirty.ratio":
			// Kafka rewrites a log once this much of it is superseded; Tern
			// removes each superseded record as it goes, and rewrites a
			// segment at Kafka's default ratio.
			if r, err := strconv.ParseFloat(v, 64); err != nil || r < 0 || r > 1 {
				return cfg, 0, fmt.Errorf("config min.cleanable.dirty.ratio=%q: want a number from 0 to 1", v)
			}
		case "min.insync.replicas":
			n, err := num()
			if err != nil {
				return cfg, 0, err
			}
			if n < 1 || n > math.MaxInt32 {
				return cfg, 0, fmt.Errorf("config min.insync.replicas=%d: want at least 1", n)
			}
			minInsync = int(n)
		case "unclean.leader.election.enable":
			if v != "false" {
				return cfg, 0, fmt.Errorf("config unclean.leader.election.enable=%q: a stream's groups elect only replicas that have every acknowledged record (false)", v)
			}
		case "segment.ms":
			// Kafka rolls segments by time so that retention, which drops whole
			// segments, is not held back by a segment still being written;
			// Tern removes messages one by one, so the roll matters to a
			// compacted topic, whose head is never compacted.
			n, err := num()
			if err != nil || n < 1 {
				return cfg, 0, fmt.Errorf("config segment.ms=%q: want a positive number of milliseconds", v)
			}
			if n < math.MaxInt64/int64(time.Millisecond) {
				cfg.SegmentAge = streamapi.Duration(time.Duration(n) * time.Millisecond)
			}
		case "message.timestamp.type":
			if v != "CreateTime" {
				return cfg, 0, fmt.Errorf("config message.timestamp.type=%q: records keep their producer's time (CreateTime)", v)
			}
		default:
			return cfg, 0, fmt.Errorf("config %q is not supported (Tern takes retention.ms, retention.bytes, max.message.bytes, segment.bytes, compression.type, cleanup.policy, min.compaction.lag.ms, delete.retention.ms, min.insync.replicas up to a majority of the replicas, unclean.leader.election.enable=false, message.timestamp.type=CreateTime, segment.ms, max.compaction.lag.ms, min.cleanable.dirty.ratio)", kv.Name)
		}
	}
	defaults := streamapi.Compaction{TombstoneRetention: streamapi.Duration(streamapi.DefaultTombstoneRetention)}
	switch {
	case compact:
		cfg.Compact = &compaction
	case compaction != (streamapi.Compaction{}) && compaction != defaults:
		// As Kafka keeps a topic's compaction configs whatever its policy:
		// the stream keeps them, compaction off.
		compaction.Off = true
		cfg.Compact = &compaction
	}
	if !deletes && (cfg.MaxAge > 0 || cfg.MaxBytes > 0) {
		// Kafka would keep the limits and never apply them; saying so beats
		// deleting what a compacted topic's users expect kept.
		return cfg, 0, errors.New("config retention.ms and retention.bytes apply only with cleanup.policy=delete (or compact,delete)")
	}
	return cfg, minInsync, nil
}

// insyncQuorum is how many of a stream's replicas have a record when acks=all
// is answered: a majority (Raft's commit).
func insyncQuorum(replicas int) int { return max(replicas, 1)/2 + 1 }

// checkMinInsync refuses a min.insync.replicas a stream of that many replicas
// does not keep: acks=all is answered once a majority has the record, so any
// count up to the majority holds (a smaller one too: Tern waits for more), a
// larger one does not.
func checkMinInsync(minInsync, replicas int) error {
	if q := insyncQuorum(replicas); minInsync > q {
		return fmt.Errorf("config min.insync.replicas=%d: a topic of %d replicas acknowledges acks=all once a majority (%d) has a record", minInsync, replicas, q)
	}
	return nil
}

func (c *conn) deleteTopics(req *kmsg.DeleteTopicsRequest) *kmsg.DeleteTopicsResponse {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	resp.Version = req.Version
	type named struct {
		name *string
		id   [16]byte
	}
	var todo []named
	for _, n := range req.TopicNames {
		todo = append(todo, named{name: &n})
	}
	for _, t := range req.Topics {
		todo = append(todo, named{name: t.Topic, id: t.TopicID})
	}
	for _, n := range todo {
		out := kmsg.NewDeleteTopicsResponseTopic()
		out.Topic, out.TopicID = n.name, n.id
		var t *topic
		var code int16
		if n.name != nil {
			t, code, _ = c.find(*n.name, false)
		} else {
			t, code = c.findIDFor(n.id, needDescribe)
		}
		if code == 0 && !c.mayManage(streamapi.StreamDeleteSubject(t.name)) {
			code = kerr.TopicAuthorizationFailed.Code
		}
		if code == 0 {
			out.TopicID = t.id
			var err error
			if cl := c.s.cluster(); cl != nil {
				if err = cl.DeleteStream(c.acct, t.name); err != nil {
					code = apiErrorCode(err)
				}
			} else if err = c.s.streams.DeleteStream(t.key); err != nil {
				code = streamErrorCode(err)
			}
			if err != nil {
				msg := err.Error()
				out.ErrorMessage = &msg
			} else {
				c.s.log.Info("topic deleted", "topic", t.name, "account", acctAttr(c.acct))
			}
		}
		out.ErrorCode = code
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// createPartitions adds partitions to topics: their streams gain empty
// partitions (and, in a cluster, a Raft group each on the stream's replicas).
func (c *conn) createPartitions(req *kmsg.CreatePartitionsRequest) *kmsg.CreatePartitionsResponse {
	resp := kmsg.NewPtrCreatePartitionsResponse()
	resp.Version = req.Version
	for _, rt := range req.Topics {
		out := kmsg.NewCreatePartitionsResponseTopic()
		out.Topic = rt.Topic
		code, msg := c.addPartitions(&rt, req.ValidateOnly)
		out.ErrorCode = code
		if msg != "" {
			out.ErrorMessage = &msg
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// addPartitions gives one topic the partition count asked, or says why not.
func (c *conn) addPartitions(rt *kmsg.CreatePartitionsRequestTopic, validateOnly bool) (code int16, msg string) {
	t, code, _ := c.find(rt.Topic, false)
	if code != 0 {
		return code, ""
	}
	if !c.mayManage(streamapi.StreamUpdateSubject(rt.Topic)) {
		return kerr.TopicAuthorizationFailed.Code, fmt.Sprintf("not authorized to change topic %q", rt.Topic)
	}
	want := int(rt.Count)
	switch {
	case want == t.parts:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("topic %q already has %d partitions", rt.Topic, want)
	case want < t.parts:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("topic %q has %d partitions, more than the %d asked: partitions can be added, not removed", rt.Topic, t.parts, want)
	case len(rt.Assignment) > 0:
		return kerr.InvalidReplicaAssignment.Code, "Tern places a topic's partitions on the replicas of its stream: ask without an assignment"
	}
	cfg := t.cfg
	cfg.Partitions = want
	cfg.MaxBytes = streamMaxBytes(retentionBytes(t.cfg), want) // retention.bytes stays each partition's
	if err := c.s.streams.Normalise(&cfg); err != nil {
		return kerr.InvalidPartitions.Code, err.Error()
	}
	if validateOnly {
		return 0, ""
	}
	if cl := c.s.cluster(); cl != nil {
		if err := cl.UpdateStream(c.acct, cfg); err != nil {
			return apiErrorCode(err), err.Error()
		}
		if _, ok := c.s.waitTopic(cl, c.acct, rt.Topic, want); !ok {
			return kerr.RequestTimedOut.Code, fmt.Sprintf("topic %q given %d partitions, but they are not yet known here", rt.Topic, want)
		}
	} else if _, err := c.s.streams.UpdateAccountStream(c.acct, cfg); err != nil {
		return streamErrorCode(err), err.Error()
	}
	c.s.log.Info("topic partitions added", "topic", rt.Topic, "account", acctAttr(c.acct), "partitions", want, "were", t.parts)
	return 0, ""
}

// ---------------------------------------------------------------------------------
// Cluster and configuration description

func (c *conn) describeCluster(req *kmsg.DescribeClusterRequest) *kmsg.DescribeClusterResponse {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.Version = req.Version
	if req.EndpointType > 1 { // 1 is brokers; controllers are not exposed
		msg := "only broker endpoints (1) are described"
		resp.ErrorCode, resp.ErrorMessage = kerr.UnsupportedEndpointType.Code, &msg
		return resp
	}
	resp.EndpointType = 1
	resp.ClusterID = c.s.cfg.ClusterID
	self, brokers := c.s.brokers()
	resp.ControllerID = self
	for _, br := range brokers {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID = br.ID
		b.Host, b.Port = br.endpoint(c.tls)
		resp.Brokers = append(resp.Brokers, b)
	}
	return resp
}

func (c *conn) describeConfigs(req *kmsg.DescribeConfigsRequest) *kmsg.DescribeConfigsResponse {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	resp.Version = req.Version
	for _, r := range req.Resources {
		out := kmsg.NewDescribeConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.ResourceType, r.ResourceName
		var entries []configEntry
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t, code, _ := c.findFor(r.ResourceName, false, needDescribe)
			if code != 0 {
				out.ErrorCode = code
				resp.Resources = append(resp.Resources, out)
				continue
			}
			entries = c.s.topicConfigEntries(t.cfg)
		case kmsg.ConfigResourceTypeBroker:
			if !c.mayManage(clusterConfigSubject) {
				msg := "not authorized to describe the broker's configs"
				out.ErrorCode, out.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, &msg
				resp.Resources = append(resp.Resources, out)
				continue
			}
			entries = []configEntry{{name: "message.max.bytes", value: strconv.Itoa(c.s.cfg.MaxPayload), def: true, readOnly: true}}
		default:
			msg := "only topic and broker configs are described"
			out.ErrorCode, out.ErrorMessage = kerr.InvalidRequest.Code, &msg
			resp.Resources = append(resp.Resources, out)
			continue
		}
		for _, e := range entries {
			if len(r.ConfigNames) > 0 && !contains(r.ConfigNames, e.name) {
				continue
			}
			ce := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := e.value
			ce.Name, ce.Value, ce.ReadOnly, ce.IsDefault = e.name, &v, e.readOnly, e.def
			ce.Source = kmsg.ConfigSourceDynamicTopicConfig
			if e.def {
				ce.Source = kmsg.ConfigSourceDefaultConfig
			}
			ce.ConfigType = e.typ
			out.Configs = append(out.Configs, ce)
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

type configEntry struct {
	name, value   string
	def, readOnly bool
	typ           kmsg.ConfigType
}

// createdConfigs is a made topic's configuration as CreateTopics answers it.
func (s *Server) createdConfigs(cfg streamapi.StreamConfig) []kmsg.CreateTopicsResponseTopicConfig {
	out := []kmsg.CreateTopicsResponseTopicConfig{}
	for _, e := range s.topicConfigEntries(cfg) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		v := e.value
		c.Name, c.Value, c.ReadOnly = e.name, &v, e.readOnly
		c.Source = int8(kmsg.ConfigSourceDynamicTopicConfig)
		if e.def {
			c.Source = int8(kmsg.ConfigSourceDefaultConfig)
		}
		out = append(out, c)
	}
	return out
}

// streamMaxBytes is a stream's max_bytes for Kafka's retention.bytes over parts
// partitions: Kafka bounds each partition, a stream the whole (each partition
// gets an even share). 0 stays 0 (no limit).
func streamMaxBytes(retentionBytes int64, parts int) int64 {
	if retentionBytes <= 0 {
		return 0
	}
	if retentionBytes > math.MaxInt64/int64(parts) {
		return math.MaxInt64
	}
	return retentionBytes * int64(parts)
}

// retentionBytes is a stream's max_bytes as Kafka's retention.bytes: each
// partition's share (0: no limit).
func retentionBytes(cfg streamapi.StreamConfig) int64 {
	if cfg.MaxBytes <= 0 {
		return 0
	}
	return cfg.MaxBytes / int64(max(cfg.Partitions, 1))
}

// topicConfigEntries describes a stream's limits, segments and compression as
// Kafka topic configs, the server's defaults where the stream has none.
func (s *Server) topicConfigEntries(cfg streamapi.StreamConfig) []configEntry {
	defCompression := s.topicCompression()
	segmentBytes := cfg.SegmentBytes
	if segmentBytes <= 0 {
		segmentBytes = s.cfg.SegmentBytes
	}
	ms := int64(-1)
	if cfg.MaxAge > 0 {
		ms = time.Duration(cfg.MaxAge).Milliseconds()
	}
	bytes := int64(-1)
	if cfg.MaxBytes > 0 {
		bytes = retentionBytes(cfg)
	}
	compaction := streamapi.Compaction{TombstoneRetention: streamapi.Duration(streamapi.DefaultTombstoneRetention)}
	if cfg.Compact != nil {
		compaction = *cfg.Compact
	}
	maxLag := strconv.FormatInt(math.MaxInt64, 10) // Kafka's default: none
	if compaction.MaxLag > 0 {
		maxLag = strconv.FormatInt(time.Duration(compaction.MaxLag).Milliseconds(), 10)
	}
	// Kafka's default rolls every week; a compacted stream's head is sealed
	// after as long (streamapi.DefaultMaxLag), and other streams' segments
	// roll by size alone, their retention not waiting for a roll.
	segmentMs := streamapi.DefaultMaxLag.Milliseconds()
	if cfg.SegmentAge > 0 {
		segmentMs = time.Duration(cfg.SegmentAge).Milliseconds()
	}
	return []configEntry{
		{name: "retention.ms", value: strconv.FormatInt(ms, 10), def: cfg.MaxAge <= 0, typ: kmsg.ConfigTypeLong},
		{name: "retention.bytes", value: strconv.FormatInt(bytes, 10), def: cfg.MaxBytes <= 0, typ: kmsg.ConfigTypeLong},
		{name: "max.message.bytes", value: strconv.Itoa(cfg.MaxMsgSize), typ: kmsg.ConfigTypeInt},
		{name: "compression.type", value: compressionType(cfg), def: compressionType(cfg) == compressionType(streamapi.StreamConfig{Compression: defCompression}), typ: kmsg.ConfigTypeString},
		{name: "cleanup.policy", value: cleanupPolicy(cfg), def: cfg.Compaction() == nil, typ: kmsg.ConfigTypeList},
		{name: "min.compaction.lag.ms", value: strconv.FormatInt(time.Duration(compaction.MinLag).Milliseconds(), 10), def: compaction.MinLag == 0, typ: kmsg.ConfigTypeLong},
		{name: "delete.retention.ms", value: strconv.FormatInt(time.Duration(compaction.TombstoneRetention).Milliseconds(), 10),
			def: compaction.TombstoneRetention == streamapi.Duration(streamapi.DefaultTombstoneRetention), typ: kmsg.ConfigTypeLong},
		{name: "max.compaction.lag.ms", value: maxLag, def: compaction.MaxLag == 0, typ: kmsg.ConfigTypeLong},
		{name: "segment.ms", value: strconv.FormatInt(segmentMs, 10), def: cfg.SegmentAge == 0, typ: kmsg.ConfigTypeLong},
		// Fixed when the topic is made (AlterConfigs refuses a change).
		{name: "segment.bytes", value: strconv.FormatInt(segmentBytes, 10), def: cfg.SegmentBytes <= 0, readOnly: true, typ: kmsg.ConfigTypeInt},
		{name: "min.insync.replicas", value: strconv.Itoa(insyncQuorum(cfg.Replicas)), def: true, typ: kmsg.ConfigTypeInt},
		{name: "unclean.leader.election.enable", value: "false", def: true, readOnly: true, typ: kmsg.ConfigTypeBoolean},
		{name: "message.timestamp.type", value: "CreateTime", def: true, readOnly: true, typ: kmsg.ConfigTypeString},
		{name: "tern.subjects", value: strings.Join(cfg.Subjects, ","), readOnly: true, typ: kmsg.ConfigTypeList},
		{name: "tern.retention", value: string(cfg.Retention), readOnly: true, typ: kmsg.ConfigTypeString},
	}
}

// cleanupPolicy is a stream's cleanup.policy: compact when it is compacted,
// with delete too when it also has an age or size limit.
func cleanupPolicy(cfg streamapi.StreamConfig) string {
	switch {
	case cfg.Compaction() == nil:
		return "delete"
	case cfg.MaxAge > 0 || cfg.MaxBytes > 0:
		return "compact,delete"
	}
	return "compact"
}

// compressionType is a stream's compression as a topic's compression.type:
// producer when its logs compress, uncompressed when not.
func compressionType(cfg streamapi.StreamConfig) string {
	if cfg.Compression == "" || cfg.Compression == "none" {
		return "uncompressed"
	}
	return "producer"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
