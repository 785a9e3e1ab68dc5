// Package streamapi is the contract between the stream engine (internal/stream) and
// its clients: the management request and response types (JSON on subjects under
// "$TERN.API."), the compact text forms used on the data path (publish acks, consumer
// acks) and the subjects and header keys both sides use. It has no dependencies, so a
// client can import it without pulling in the server.
package streamapi

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Subject prefixes of the stream API.
const (
	APIPrefix = "$TERN.API."
	// AckPrefix starts every ack subject; see AckSubject.
	AckPrefix = "$TERN.ACK."
	// DeadLetterPrefix starts the default dead-letter subject of a consumer:
	// "$TERN.DLQ.<stream>.<consumer>".
	DeadLetterPrefix = "$TERN.DLQ."
)

// Management subjects. Each takes a JSON request body (possibly empty) and answers
// with a JSON response on the request's reply subject.
func StreamCreateSubject(stream string) string { return APIPrefix + "STREAM.CREATE." + stream }
func StreamUpdateSubject(stream string) string { return APIPrefix + "STREAM.UPDATE." + stream }
func StreamInfoSubject(stream string) string   { return APIPrefix + "STREAM.INFO." + stream }
func StreamDeleteSubject(stream string) string { return APIPrefix + "STREAM.DELETE." + stream }
func StreamPurgeSubject(stream string) string  { return APIPrefix + "STREAM.PURGE." + stream }
func StreamMsgGetSubject(stream string) string { return APIPrefix + "STREAM.MSG.GET." + stream }

// StreamListSubject lists every stream.
const StreamListSubject = APIPrefix + "STREAM.LIST"

// ClusterPrefix starts the cluster's management requests, answered by the server
// rather than the stream engine (docs/cluster.md).
const ClusterPrefix = APIPrefix + "CLUSTER."

// ClusterEvictSubject removes a node from the cluster for good (ClusterEvicted).
func ClusterEvictSubject(node string) string { return ClusterPrefix + "EVICT." + node }

// ClusterEvicted is the answer to ClusterEvictSubject.
type ClusterEvicted struct {
	Evicted string `json:"evicted"`
}

func ConsumerCreateSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.CREATE." + stream + "." + consumer
}
func ConsumerInfoSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.INFO." + stream + "." + consumer
}
func ConsumerDeleteSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.DELETE." + stream + "." + consumer
}
func ConsumerListSubject(stream string) string { return APIPrefix + "CONSUMER.LIST." + stream }

// ConsumerNextSubject is where a pull request (PullRequest as JSON) goes; messages and
// the final status come back on the request's reply subject.
func ConsumerNextSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.NEXT." + stream + "." + consumer
}

// Header keys the stream engine reads or writes.
const (
	// HeaderMsgID is the producer's message id for duplicate detection.
	HeaderMsgID = "Tern-Msg-Id"
	// HeaderExpectedLastMsgID stores a message only if the highest numbered id
	// ("<prefix><n>", n a decimal counter) the stream holds with that prefix
	// within its duplicate window is exactly the one named: a producer that
	// numbers its messages and sends before earlier ones are acknowledged (Kafka's
	// pipelined idempotent batches) never has a message stored after one that
	// failed. Otherwise the publish fails with CodeWrongLastMsgID. A value that
	// starts with ExpectedLastIfAny asks the same only when the window holds any
	// id of that prefix: a numbered producer's message must follow the last one
	// stored, unless that one has left the window (an idle producer), so a
	// publish held up on its way (a retry that overtook it was stored, and more
	// after it) is refused instead of stored out of order.
	HeaderExpectedLastMsgID = "Tern-Expected-Last-Msg-Id"
	// ExpectedLastIfAny starts a HeaderExpectedLastMsgID value that holds only when
	// an id of its prefix is stored within the duplicate window.
	ExpectedLastIfAny = "~"
	// SequenceMark ends the prefix of numbered message ids that form a sequence
	// ("<prefix>#<n>"): such an id n > 0 without HeaderExpectedLastMsgID is stored
	// only right after n-1 of its prefix (CodeWrongLastMsgID otherwise), so the
	// messages of a batch whose first one was refused are refused with it, and a
	// sequence is stored in order. A batch's first message names what it follows
	// with HeaderExpectedLastMsgID, or starts the sequence at 0.
	SequenceMark = "#"
	// HeaderKey chooses the partition of a partitioned stream; without it the subject
	// is hashed.
	HeaderKey = "Tern-Key"
	// HeaderToPartition puts the message in that partition (a number from 0) of a
	// partitioned stream, whatever its key: for publishers that partition
	// themselves, as Kafka producers do. Out of range, it is ignored.
	HeaderToPartition = "Tern-To-Partition"
	// HeaderNullValue marks a message whose value is null, a Kafka tombstone:
	// in a compacted stream it deletes its key (StreamConfig.Compact). Its
	// payload is empty; the header's value is ignored.
	HeaderNullValue = "Tern-Null-Value"
	// HeaderStream, HeaderSeq, HeaderPartition, HeaderConsumer, HeaderDeliveries and
	// HeaderReason describe a dead-lettered message's origin.
	HeaderStream     = "Tern-Stream"
	HeaderSeq        = "Tern-Seq"
	HeaderPartition  = "Tern-Partition"
	HeaderConsumer   = "Tern-Consumer"
	HeaderDeliveries = "Tern-Deliveries"
	HeaderReason     = "Tern-Reason"
	// HeaderPending on a pull status message reports messages still to be delivered.
	HeaderPending = "Tern-Pending"
	// HeaderAssigned on a pull status message lists the partitions assigned to the
	// member that asked (consumer groups), comma-separated.
	HeaderAssigned = "Tern-Assigned"
)

// Status codes carried in the Tern-Status header of pull status messages.
const (
	StatusNoMessages = "404" // no_wait request and nothing to deliver
	StatusTimeout    = "408" // the request expired before its batch filled
	StatusConflict   = "409" // the request was ended by the server (consumer deleted, member reassigned, ...)
)

// Retention is what removes messages from a stream besides its limits.
type Retention string

const (
	// RetainLimits keeps messages until the age, size or count limits remove them.
	RetainLimits Retention = "limits"
	// RetainWorkQueue removes a message as soon as one consumer acknowledges it.
	RetainWorkQueue Retention = "workqueue"
	// RetainInterest removes a message once every consumer has acknowledged it.
	RetainInterest Retention = "interest"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration string
// ("1m30s") and also accepts a number of nanoseconds.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Duration(d).String()), nil
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) > 0 && s[0] == '"' {
		u, err := strconv.Unquote(s)
		if err != nil {
			return err
		}
		if u == "" {
			*d = 0
			return nil
		}
		v, err := time.ParseDuration(u)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"30s\" or nanoseconds", s)
	}
	*d = Duration(n)
	return nil
}

// MaxPartitions bounds a stream's partition count.
const MaxPartitions = 1024

// StreamConfig defines a stream.
type StreamConfig struct {
	Name     string   `json:"name"`
	Subjects []string `json:"subjects"`
	// Retention: "limits" (default), "workqueue" or "interest".
	Retention Retention `json:"retention,omitempty"`
	MaxAge    Duration  `json:"max_age,omitempty"`
	MaxBytes  int64     `json:"max_bytes,omitempty"`
	MaxMsgs   uint64    `json:"max_msgs,omitempty"`
	// MaxMsgSize limits one message's payload; 0 means the server's payload limit.
	MaxMsgSize int `json:"max_msg_size,omitempty"`
	// Discard: "old" (default) removes the oldest messages at a limit, "new" refuses
	// new ones.
	Discard string `json:"discard,omitempty"`
	// Partitions splits the stream into independent logs, each ordered; 0 or 1 means
	// one, MaxPartitions at most. A message goes to the partition chosen by its
	// Tern-Key header, or by its subject when it has none. An update may add
	// partitions, never remove them.
	Partitions int `json:"partitions,omitempty"`
	// DuplicateWindow is how long message ids are remembered; 0 means 2 minutes.
	DuplicateWindow Duration `json:"duplicate_window,omitempty"`
	// Sync overrides the server's fsync policy for this stream: "always", "interval"
	// or "never".
	Sync         string `json:"sync,omitempty"`
	SegmentBytes int64  `json:"segment_bytes,omitempty"`
	// SegmentAge rolls each partition's log to a new segment at the first
	// message stored once the head segment's first message is this old
	// (Kafka's segment.ms); 0: by size alone. Retention removes messages one
	// by one whatever the segments, so it matters to a compacted stream, whose
	// head is sealed at the smaller of this and Compact.MaxLag. It may change
	// on an update.
	SegmentAge Duration `json:"segment_age,omitempty"`
	// Compression is how the stream's logs store messages: "none" (default) or
	// "s2" (S2-compressed blocks of consecutive messages, when that saves space;
	// reads are unchanged). Unlike the other storage settings it may change on an
	// update, for what is written next.
	Compression string `json:"compression,omitempty"`
	// Replicas is how many nodes of a cluster keep the stream: 1, 3 or 5 (0: the
	// server's default, 1 on a single node). More than one needs a cluster that
	// replicates (cluster_size).
	Replicas int `json:"replicas,omitempty"`
	// Compact, when set, keeps only the latest message of each key in each
	// partition, as Kafka's cleanup.policy=compact does; the limits above still
	// apply beside it (Kafka's compact,delete). Only with retention "limits";
	// an update can switch it on (the stream reads its messages' keys) or off
	// (removing it, or setting its Off). Compaction says whether it is on.
	Compact *Compaction `json:"compact,omitempty"`
}

// Compaction configures a compacted stream (StreamConfig.Compact). A message's
// key is its Tern-Key header, or its subject when it has none. A message is
// removed once a newer one of its key is stored outside the head of its
// partition's log (its active segment, which a consumer that keeps up reads in
// full) and is at least MinLag old. A message with the Tern-Null-Value header
// deletes its key: once outside the head and TombstoneRetention old, it goes
// too.
type Compaction struct {
	// MinLag keeps every message at least this long (Kafka's
	// min.compaction.lag.ms); 0 (the default): none.
	MinLag Duration `json:"min_lag,omitempty"`
	// TombstoneRetention keeps a key's deletion this long so that consumers
	// catch it (Kafka's delete.retention.ms); 0 means 24 hours.
	TombstoneRetention Duration `json:"tombstone_retention,omitempty"`
	// MaxLag bounds how long a message stays in the head, never compacted: the
	// head is sealed at the first message stored after its first one is this
	// old (Kafka's max.compaction.lag.ms); 0 means DefaultMaxLag.
	MaxLag Duration `json:"max_lag,omitempty"`
	// Off keeps the settings above while the stream is not compacted, as a
	// Kafka topic switched to cleanup.policy=delete keeps its compaction
	// configs: the stream is then as one without Compact, and switched on
	// again it has them back.
	Off bool `json:"off,omitempty"`
}

// Compaction returns the stream's compaction settings when it is compacted,
// nil when it is not (no Compact, or Compact.Off).
func (c StreamConfig) Compaction() *Compaction {
	if c.Compact == nil || c.Compact.Off {
		return nil
	}
	return c.Compact
}

// DefaultTombstoneRetention is Compaction.TombstoneRetention's default, Kafka's.
const DefaultTombstoneRetention = 24 * time.Hour

// DefaultMaxLag is Compaction.MaxLag's default: a week, Kafka's segment.ms
// default, at which Kafka rolls a partition's active segment whatever its size,
// so that a quiet compacted topic is compacted in the end.
const DefaultMaxLag = 7 * 24 * time.Hour

// StreamState summarises a stream's contents (summed over partitions).
type StreamState struct {
	Msgs      uint64    `json:"messages"`
	Bytes     uint64    `json:"bytes"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	FirstTime time.Time `json:"first_ts"`
	LastTime  time.Time `json:"last_ts"`
	Deleted   uint64    `json:"num_deleted,omitempty"`
	Consumers int       `json:"consumer_count"`
	// FileBytes is what the logs' segment files take on this node: Bytes
	// compressed, or with removed messages still in them.
	FileBytes uint64 `json:"file_bytes,omitempty"`
	// Keys counts the distinct keys of a compacted stream on this node.
	Keys uint64 `json:"keys,omitempty"`
	// Partition numbers an entry of Parts (nil in the stream's own state).
	Partition *int          `json:"partition,omitempty"`
	Parts     []StreamState `json:"partitions,omitempty"`
}

// StreamInfo is the answer to stream create, update and info requests.
type StreamInfo struct {
	Config  StreamConfig `json:"config"`
	Created time.Time    `json:"created"`
	State   StreamState  `json:"state"`
	// Corrupt lists damage recovery found in the stream's logs.
	Corrupt []string `json:"corrupt,omitempty"`
	// Cluster is where the stream lives in a cluster that replicates.
	Cluster *StreamCluster `json:"cluster,omitempty"`
}

// StreamCluster describes a stream's Raft group as the node that answered sees it
// (its leader, when it has one).
type StreamCluster struct {
	Group   uint64 `json:"group"`
	Leader  string `json:"leader,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	// Replicas are the nodes keeping the stream, with the leader's view of each.
	Replicas []StreamReplica `json:"replicas,omitempty"`
	// Partitions describe each partition's group, when the stream has more than
	// one (the fields above are partition 0's, whose leader leads the stream).
	Partitions []StreamCluster `json:"partitions,omitempty"`
}

// StreamReplica is one replica of a stream.
type StreamReplica struct {
	Node    string `json:"node"`
	Leader  bool   `json:"leader,omitempty"`
	Learner bool   `json:"learner,omitempty"`
	// Lag is how many log entries the replica is behind the leader; Active that
	// the leader heard from it recently.
	Lag    uint64 `json:"lag"`
	Active bool   `json:"active"`
}

// DeliverPolicy says where a new consumer starts.
type DeliverPolicy string

const (
	DeliverAll            DeliverPolicy = "all"
	DeliverNew            DeliverPolicy = "new"
	DeliverLast           DeliverPolicy = "last"
	DeliverLastPerSubject DeliverPolicy = "last_per_subject"
	DeliverByStartSeq     DeliverPolicy = "by_start_sequence"
	DeliverByStartTime    DeliverPolicy = "by_start_time"
)

// AckPolicy says which acknowledgements a consumer expects.
type AckPolicy string

const (
	AckNone     AckPolicy = "none"     // a message counts as handled when sent
	AckExplicit AckPolicy = "explicit" // every message is acknowledged on its own
	AckAll      AckPolicy = "all"      // an ack covers every earlier message of its partition
)

// ConsumerConfig defines a consumer. A consumer with DeliverSubject is a push
// consumer; without one it is pulled with ConsumerNextSubject requests.
type ConsumerConfig struct {
	// Durable consumers keep their definition and position across restarts; a consumer
	// created without Durable is ephemeral and removed after InactiveThreshold without
	// pulls (push: without interest).
	Durable       string        `json:"durable_name,omitempty"`
	Name          string        `json:"name,omitempty"`
	Description   string        `json:"description,omitempty"`
	FilterSubject string        `json:"filter_subject,omitempty"`
	DeliverPolicy DeliverPolicy `json:"deliver_policy,omitempty"`
	OptStartSeq   uint64        `json:"opt_start_seq,omitempty"`
	OptStartTime  *time.Time    `json:"opt_start_time,omitempty"`
	AckPolicy     AckPolicy     `json:"ack_policy,omitempty"`
	// AckWait is how long a delivered message may stay unacknowledged before it is
	// delivered again; 0 means 30 s.
	AckWait Duration `json:"ack_wait,omitempty"`
	// Backoff, when set, replaces AckWait for the n-th delivery (the last entry repeats).
	Backoff []Duration `json:"backoff,omitempty"`
	// MaxDeliver ends redelivery after this many deliveries (0 or -1: no limit); the
	// message then goes to DeadLetterSubject.
	MaxDeliver int `json:"max_deliver,omitempty"`
	// DeadLetterSubject receives messages that reached MaxDeliver or were terminated;
	// "" means "$TERN.DLQ.<stream>.<consumer>". Publish a stream on it to keep them.
	DeadLetterSubject string `json:"dead_letter_subject,omitempty"`
	// MaxAckPending bounds delivered-but-unacknowledged messages; 0 means 10000.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// DeliverSubject makes a push consumer; DeliverGroup delivers to one member of
	// that queue group.
	DeliverSubject string `json:"deliver_subject,omitempty"`
	DeliverGroup   string `json:"deliver_group,omitempty"`
	// InactiveThreshold removes an ephemeral consumer idle this long; 0 means 5 s.
	InactiveThreshold Duration `json:"inactive_threshold,omitempty"`
	// MemberTimeout removes a consumer-group member not heard from for this long; 0
	// means 10 s. Members are the distinct PullRequest.Member values.
	MemberTimeout Duration `json:"member_timeout,omitempty"`
}

// PartitionState is a consumer's position in one partition.
type PartitionState struct {
	Partition int `json:"partition"`
	// AckFloor is the committed offset: every message up to it was acknowledged (or
	// skipped by the filter).
	AckFloor uint64 `json:"ack_floor"`
	// Delivered is the last stream sequence delivered.
	Delivered  uint64 `json:"delivered"`
	AckPending int    `json:"ack_pending"`
	Member     string `json:"member,omitempty"`
}

// ConsumerInfo is the answer to consumer create and info requests.
type ConsumerInfo struct {
	Stream         string           `json:"stream_name"`
	Name           string           `json:"name"`
	Config         ConsumerConfig   `json:"config"`
	Created        time.Time        `json:"created"`
	NumPending     uint64           `json:"num_pending"`
	NumAckPending  int              `json:"num_ack_pending"`
	NumRedelivered uint64           `json:"num_redelivered"`
	NumWaiting     int              `json:"num_waiting"`
	Partitions     []PartitionState `json:"partitions"`
	Members        []string         `json:"members,omitempty"`
}

// PullRequest asks a pull consumer for up to Batch messages.
type PullRequest struct {
	Batch    int      `json:"batch"`
	MaxBytes int      `json:"max_bytes,omitempty"`
	Expires  Duration `json:"expires,omitempty"` // 0: 30 s; the request waits this long for messages
	NoWait   bool     `json:"no_wait,omitempty"` // answer 404 at once when nothing is ready
	// Member names a consumer-group member; the request is served only from the
	// partitions assigned to it.
	Member string `json:"member,omitempty"`
}

// PurgeRequest narrows a purge; the zero value purges everything.
type PurgeRequest struct {
	Subject string `json:"filter,omitempty"`
	Keep    uint64 `json:"keep,omitempty"`
	UpTo    uint64 `json:"seq,omitempty"` // purge below this sequence (per partition)
	// Partition limits the purge to one partition; nil: every partition.
	Partition *int `json:"partition,omitempty"`
}

// PurgeResponse reports how many messages a purge removed.
type PurgeResponse struct {
	Purged uint64 `json:"purged"`
}

// MsgGetRequest reads one stored message by sequence, or the last one of a subject.
type MsgGetRequest struct {
	Seq        uint64 `json:"seq,omitempty"`
	Partition  int    `json:"partition,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
}

// StoredMsg is a message read back from a stream.
type StoredMsg struct {
	Subject   string    `json:"subject"`
	Seq       uint64    `json:"seq"`
	Partition int       `json:"partition"`
	Header    []byte    `json:"hdrs,omitempty"`
	Data      []byte    `json:"data,omitempty"`
	Time      time.Time `json:"time"`
}

// Error codes of APIError, for callers to branch on.
const (
	CodeBadRequest      = 400
	CodeNotFound        = 404
	CodeExpired         = 408 // a request that reached its target after its NotAfter
	CodeConflict        = 409 // exists with a different configuration, overlapping subjects
	CodeTooLarge        = 413
	CodeLimits          = 429 // stream or consumer limits, discard-new stream full
	CodeInternal        = 500
	CodeUnavailable     = 503 // storage unavailable (for example the disk is full)
	CodeStreamNotFound  = 10059
	CodeConsumerMissing = 10014
	CodeWrongLastMsgID  = 10070 // Tern-Expected-Last-Msg-Id is not the highest id stored
)

// APIError is the error part of every management response and of a failed publish ack.
type APIError struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
}

func (e *APIError) Error() string { return fmt.Sprintf("stream api: %s (%d)", e.Description, e.Code) }

// Response wraps every management answer: exactly one of Error or the payload fields.
type Response[T any] struct {
	Error *APIError `json:"error,omitempty"`
	Value *T        `json:"value,omitempty"`
}

// StreamList is the answer to StreamListSubject.
type StreamList struct {
	Streams []StreamInfo `json:"streams"`
}

// ConsumerList is the answer to ConsumerListSubject.
type ConsumerList struct {
	Consumers []ConsumerInfo `json:"consumers"`
}

// Deleted is the answer to delete requests.
type Deleted struct {
	Deleted bool `json:"deleted"`
}

// ValidName checks a stream or consumer name: 1–64 bytes of letters, digits, '-' and
// '_', so that it is one subject token.
func ValidName(kind, name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%s name %q: must be 1 to 64 characters", kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%s name %q: only letters, digits, '-' and '_' are allowed", kind, name)
		}
	}
	return nil
}

// PubAck is the answer to a publish captured by a stream: "+OK <stream> <partition>
// <seq>" with " dup" appended for a duplicate, or "-ERR <code> <description>".
type PubAck struct {
	Stream    string
	Partition int
	Seq       uint64
	Duplicate bool
}

// AppendPubAck appends the text form of a successful publish ack.
func AppendPubAck(dst []byte, stream string, partition int, seq uint64, dup bool) []byte {
	dst = append(dst, "+OK "...)
	dst = append(dst, stream...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, seq, 10)
	if dup {
		dst = append(dst, " dup"...)
	}
	return dst
}

// AppendPubErr appends the text form of a failed publish.
func AppendPubErr(dst []byte, code int, description string) []byte {
	dst = append(dst, "-ERR "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	return append(dst, description...)
}

// ErrNotPubAck reports a reply that is neither form of publish ack.
var ErrNotPubAck = errors.New("streamapi: reply is not a publish ack")

// ParsePubAck parses a publish ack; a "-ERR" answer is returned as *APIError.
func ParsePubAck(b []byte) (PubAck, error) {
	name, part, seq, dup, err := scanPubAck(b)
	if err != nil {
		return PubAck{}, err
	}
	return PubAck{Stream: string(name), Partition: part, Seq: seq, Duplicate: dup}, nil
}

// ScanPubAck parses a publish ack as ParsePubAck does, without the stream's
// name and without allocating when the ack is a success.
func ScanPubAck(b []byte) (partition int, seq uint64, dup bool, err error) {
	_, partition, seq, dup, err = scanPubAck(b)
	return partition, seq, dup, err
}

// scanPubAck reads "+OK <stream> <partition> <seq>[ dup]" or "-ERR <code> <text>".
func scanPubAck(b []byte) (name []byte, part int, seq uint64, dup bool, err error) {
	if rest, ok := bytes.CutPrefix(b, []byte("-ERR ")); ok {
		code, desc, _ := bytes.Cut(rest, []byte(" "))
		c, err := strconv.Atoi(string(code))
		if err != nil {
			return nil, 0, 0, false, fmt.Errorf("%w: %q", ErrNotPubAck, truncate(string(b)))
		}
		return nil, 0, 0, false, &APIError{Code: c, Description: string(desc)}
	}
	bad := func() error { return fmt.Errorf("%w: %q", ErrNotPubAck, truncate(string(b))) }
	rest, ok := bytes.CutPrefix(b, []byte("+OK "))
	if !ok {
		return nil, 0, 0, false, bad()
	}
	var f [5][]byte
	k := 0
	for len(rest) > 0 && k < len(f) {
		rest = bytes.TrimLeft(rest, " \t\r\n\v\f")
		if len(rest) == 0 {
			break
		}
		end := bytes.IndexAny(rest, " \t\r\n\v\f")
		if end < 0 {
			end = len(rest)
		}
		f[k], rest = rest[:end], rest[end:]
		k++
	}
	if k < 3 || k > 4 || len(bytes.TrimSpace(rest)) > 0 {
		return nil, 0, 0, false, bad()
	}
	if k == 4 {
		if string(f[3]) != "dup" {
			return nil, 0, 0, false, bad()
		}
		dup = true
	}
	p, ok1 := atoiBytes(f[1])
	s, ok2 := atouBytes(f[2])
	if !ok1 || !ok2 {
		return nil, 0, 0, false, bad()
	}
	return f[0], p, s, dup, nil
}

// atouBytes parses a decimal uint64 without allocating.
func atouBytes(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// atoiBytes parses a non-negative decimal int, with an optional "+", without
// allocating.
func atoiBytes(b []byte) (int, bool) {
	if len(b) > 1 && b[0] == '+' {
		b = b[1:]
	}
	n, ok := atouBytes(b)
	if !ok || n > math.MaxInt {
		return 0, false
	}
	return int(n), true
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
