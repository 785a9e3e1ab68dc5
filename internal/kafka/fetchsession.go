package kafka

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Incremental fetch sessions (KIP-227). A client that fetches with session id 0 and
// epoch 0 gets a session: the server remembers the partitions of that full fetch
// and where the client reads each. Its next fetches (the session's id, epochs 1, 2,
// ...) name only the partitions that changed (a new offset, new ones) and those to
// forget, and are answered with only the partitions that have something new: records,
// another high watermark or start offset, or an error. Epoch -1 closes the session;
// a wrong epoch gets INVALID_FETCH_SESSION_EPOCH and an unknown id
// FETCH_SESSION_ID_NOT_FOUND, after which clients fetch in full again.

// Limits of the session cache: the least recently used goes first.
const (
	maxFetchSessions = 1000
	fetchSessionIdle = 2 * time.Minute
)

type fetchSessions struct {
	mu sync.Mutex
	m  map[int32]*fetchSession
}

type fetchSession struct {
	mu    sync.Mutex // a session is a client's: one fetch at a time
	id    int32
	epoch int32 // the epoch the next fetch must carry
	used  time.Time
	parts []sessionPart
	at    map[sessionKey]int
}

type sessionKey struct {
	topic     string
	id        [16]byte
	partition int32
}

// sessionPart is one partition of a session: what the client asked and what it was
// last told.
type sessionPart struct {
	key                            sessionKey
	offset                         int64
	maxBytes                       int32
	hwm, logStart                  int64
	answered                       bool
	currentEpoch, lastFetchedEpoch int32
}

func keyOf(rt *kmsg.FetchRequestTopic, partition int32, v int16) sessionKey {
	if v >= 13 {
		return sessionKey{id: rt.TopicID, partition: partition}
	}
	return sessionKey{topic: rt.Topic, partition: partition}
}

// begin resolves req's session: nil for a fetch without one; incremental tells
// that the answer carries only what changed. A non-zero code refuses the fetch.
// A full fetch (epoch 0, or -1 for none) closes the session it names, known or
// not, as Kafka's broker does: a client whose fetch opened a session but whose
// answer was lost with its connection asks again with the id it had before.
func (fs *fetchSessions) begin(req *kmsg.FetchRequest, now time.Time) (s *fetchSession, incremental bool, code int16) {
	if req.Version < 7 {
		return nil, false, 0
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = map[int32]*fetchSession{}
	}
	switch req.SessionEpoch {
	case -1, 0:
		delete(fs.m, req.SessionID)
		if req.SessionEpoch == -1 {
			return nil, false, 0
		}
	default:
		if req.SessionID == 0 {
			return nil, false, kerr.InvalidFetchSessionEpoch.Code
		}
		old := fs.m[req.SessionID]
		if old == nil {
			return nil, false, kerr.FetchSessionIDNotFound.Code
		}
		if req.SessionEpoch != old.epoch {
			return nil, false, kerr.InvalidFetchSessionEpoch.Code
		}
		old.used = now
		return old, true, 0
	}
	for id, s := range fs.m {
		if now.Sub(s.used) > fetchSessionIdle {
			delete(fs.m, id)
		}
	}
	if len(fs.m) >= maxFetchSessions {
		var oldest *fetchSession
		for _, s := range fs.m {
			if oldest == nil || s.used.Before(oldest.used) {
				oldest = s
			}
		}
		delete(fs.m, oldest.id)
	}
	s = &fetchSession{used: now, at: map[sessionKey]int{}}
	for s.id == 0 || fs.m[s.id] != nil {
		var b [4]byte
		_, _ = rand.Read(b[:])
		s.id = int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
	}
	fs.m[s.id] = s
	return s, false, 0
}

// update applies a fetch of the session to its partitions: new offsets and
// partitions, forgotten ones (none in a full fetch, which replaces them all).
func (s *fetchSession) update(req *kmsg.FetchRequest, incremental bool) {
	if !incremental {
		s.parts, s.at = s.parts[:0], map[sessionKey]int{}
	}
	for i := range req.ForgottenTopics {
		ft := &req.ForgottenTopics[i]
		rt := kmsg.FetchRequestTopic{Topic: ft.Topic, TopicID: ft.TopicID}
		for _, p := range ft.Partitions {
			k := keyOf(&rt, p, req.Version)
			if at, ok := s.at[k]; ok {
				s.parts = append(s.parts[:at], s.parts[at+1:]...)
				delete(s.at, k)
				for j := at; j < len(s.parts); j++ {
					s.at[s.parts[j].key] = j
				}
			}
		}
	}
	for i := range req.Topics {
		rt := &req.Topics[i]
		for _, p := range rt.Partitions {
			k := keyOf(rt, p.Partition, req.Version)
			at, ok := s.at[k]
			if !ok {
				at = len(s.parts)
				s.parts = append(s.parts, sessionPart{key: k})
				s.at[k] = at
			}
			sp := &s.parts[at]
			sp.offset, sp.maxBytes, sp.currentEpoch, sp.lastFetchedEpoch = p.FetchOffset, p.PartitionMaxBytes, p.CurrentLeaderEpoch, p.LastFetchedEpoch
		}
	}
	s.epoch = nextEpoch(s.epoch)
}

func nextEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// fullRequest is the fetch of every partition of the session.
func (s *fetchSession) fullRequest(req *kmsg.FetchRequest) *kmsg.FetchRequest {
	full := *req
	full.Topics, full.ForgottenTopics = nil, nil
	index := map[sessionKey]int{} // topic (partition -1) → position in full.Topics
	for _, sp := range s.parts {
		tk := sp.key
		tk.partition = -1
		at, ok := index[tk]
		if !ok {
			at = len(full.Topics)
			index[tk] = at
			full.Topics = append(full.Topics, kmsg.FetchRequestTopic{Topic: sp.key.topic, TopicID: sp.key.id})
		}
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.FetchOffset, p.PartitionMaxBytes = sp.key.partition, sp.offset, sp.maxBytes
		p.CurrentLeaderEpoch, p.LastFetchedEpoch = sp.currentEpoch, sp.lastFetchedEpoch
		full.Topics[at].Partitions = append(full.Topics[at].Partitions, p)
	}
	return &full
}

// answered notes what resp tells of each partition and, for an incremental fetch,
// leaves in resp only the partitions with something new.
func (s *fetchSession) answered(resp *kmsg.FetchResponse, version int16, incremental bool) {
	resp.SessionID = s.id
	topics := resp.Topics[:0]
	for _, ot := range resp.Topics {
		rt := kmsg.FetchRequestTopic{Topic: ot.Topic, TopicID: ot.TopicID}
		parts := ot.Partitions[:0]
		for _, op := range ot.Partitions {
			at, ok := s.at[keyOf(&rt, op.Partition, version)]
			changed := true
			if ok {
				sp := &s.parts[at]
				changed = !sp.answered || len(op.RecordBatches) > 0 || op.ErrorCode != 0 ||
					op.HighWatermark != sp.hwm || op.LogStartOffset != sp.logStart
				sp.answered, sp.hwm, sp.logStart = true, op.HighWatermark, op.LogStartOffset
			}
			if !incremental || changed {
				parts = append(parts, op)
			}
		}
		if len(parts) > 0 {
			ot.Partitions = parts
			topics = append(topics, ot)
		}
	}
	resp.Topics = topics
}
