package mqtt

import (
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/subject"
)

// retainedMsg is the last retained message of one subject.
type retainedMsg struct {
	subject  string
	payload  []byte
	header   []byte
	reply    string
	qos      byte
	expireAt int64 // Unix nanoseconds, 0 = never
}

// retainStore holds the retained message of each subject. Subscribing with a
// wildcard scans it; retained sets are small next to message rates, and a subscribe
// is rare next to a publish.
type retainStore struct {
	mu sync.RWMutex
	m  map[string]*retainedMsg
	kv *kvStore // nil: kept in memory only
}

func newRetainStore() *retainStore { return &retainStore{m: make(map[string]*retainedMsg)} }

// set keeps m as its subject's retained message; an empty payload clears it.
func (r *retainStore) set(m *broker.Message) {
	subj := string(m.Subject)
	if len(m.Payload) == 0 {
		r.mu.Lock()
		if _, had := r.m[subj]; had && r.kv != nil {
			r.kv.del(kvRetained + subj) // under the lock: the log sees changes in map order
		}
		delete(r.m, subj)
		r.mu.Unlock()
		return
	}
	rm := &retainedMsg{
		subject:  subj,
		payload:  append([]byte(nil), m.Payload...),
		header:   append([]byte(nil), m.Header...),
		reply:    string(m.Reply),
		qos:      m.QoS,
		expireAt: expiryOf(m.Header),
	}
	r.mu.Lock()
	r.m[subj] = rm
	if r.kv != nil {
		r.kv.put(kvRetained+subj, encodeRetained(rm))
	}
	r.mu.Unlock()
}

// replicated applies what the cluster's MQTT group committed: del are subjects
// whose retained message went, set the retained messages now kept.
func (r *retainStore) replicated(set []*retainedMsg, del []string) {
	if len(set) == 0 && len(del) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, subj := range del {
		delete(r.m, subj)
	}
	for _, rm := range set {
		r.m[rm.subject] = rm
	}
}

// setVolatile keeps m retained in memory without writing it to storage.
func (r *retainStore) setVolatile(m *broker.Message) {
	rm := &retainedMsg{subject: string(m.Subject), payload: append([]byte(nil), m.Payload...), qos: m.QoS}
	r.mu.Lock()
	r.m[rm.subject] = rm
	r.mu.Unlock()
}

// match calls fn for every unexpired retained message matching one of filters;
// dollarGuard skips subjects starting with '$' past their first strip bytes (an
// account's prefix).
func (r *retainStore) match(filters []string, dollarGuard bool, strip int, now time.Time, fn func(*retainedMsg)) {
	var hits []*retainedMsg
	r.mu.RLock()
	for subj, rm := range r.m {
		if dollarGuard && len(subj) > strip && IsDollar([]byte(subj[strip:])) {
			continue
		}
		if rm.expireAt != 0 && now.UnixNano() >= rm.expireAt {
			continue
		}
		for _, f := range filters {
			if subject.Matches(f, subj) {
				hits = append(hits, rm)
				break
			}
		}
	}
	r.mu.RUnlock()
	for _, rm := range hits {
		fn(rm)
	}
}

func (r *retainStore) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.m)
}
