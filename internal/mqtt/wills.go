package mqtt

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	sm "github.com/tern-mq/tern/internal/mqtt/session"
)

// Wills in a cluster. A will is published by the node its client is connected to
// when the connection ends badly, as on a single node; but when that node dies, its
// connections end with it and nobody there is left to publish. So, in a cluster
// that replicates MQTT state, the will of every connection that has one is a record
// of the MQTT group while the connection lasts (kvWill + client + "\x00" + the
// connection's own key): written before the CONNACK, deleted when the connection
// ends on its node (which then does what a single node does). A record whose node
// is dead (the MQTT group's leader sees it so), or is this node in an earlier life,
// is a will nobody will publish: the leader (or the node itself) publishes it, once
// its delay has passed unless its client has connected again, and deletes it
// first, so it is published at most once.

// willRecord is a will as the MQTT group keeps it.
type willRecord struct {
	Host string `json:"host"`
	// Life tells the host's lives apart: a record of this node in an earlier life
	// is an orphan too.
	Life    string `json:"life"`
	Subject []byte `json:"subject"`
	Payload []byte `json:"payload,omitempty"`
	Header  []byte `json:"header,omitempty"`
	Reply   []byte `json:"reply,omitempty"`
	QoS     byte   `json:"qos,omitempty"`
	Retain  bool   `json:"retain,omitempty"`
	// Delay is the will delay, already the session expiry when that is sooner.
	Delay time.Duration `json:"delay_ns,omitempty"`
}

// willKey is the record key of conn's will.
func (s *Server) willKey(client string, c *conn) string {
	return fmt.Sprintf("%s%s\x00%s/%s/%d", kvWill, client, s.nodeName, s.life, c.id)
}

// clientOfWill is the client id of a will record's key (the part after kvWill).
func clientOfWill(rest string) string {
	// The last NUL: an account's session key holds one (sessionKey).
	if i := strings.LastIndexByte(rest, 0); i >= 0 {
		return rest[:i]
	}
	return rest
}

// recordWill writes the will of a connection being accepted to the MQTT group and
// waits for the commit, before the CONNACK. expiry is the session's (<0: never).
func (s *Server) recordWill(c *conn, client string, w *sm.Will, expiry time.Duration) error {
	if s.state == nil {
		return nil
	}
	delay := w.Delay
	if expiry >= 0 && expiry < delay {
		delay = expiry
	}
	rec := willRecord{Host: s.nodeName, Life: s.life, Subject: w.Msg.Subject, Payload: w.Msg.Payload, Header: w.Msg.Header,
		Reply: w.Msg.Reply, QoS: w.Msg.QoS, Retain: w.Msg.Retain, Delay: delay}
	val, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	committed := make(chan error, 1)
	s.kv.enqueue(kvOp{key: s.willKey(client, c), val: val, done: func(err error) { committed <- err }})
	if err := <-committed; err != nil {
		return fmt.Errorf("will not replicated: %w", err)
	}
	c.willRecorded = true
	return nil
}

// forgetWill deletes the record of a connection's will once the connection ended
// here: this node decides about the will now.
func (s *Server) forgetWill(c *conn, client string) {
	if c.willRecorded {
		s.kv.enqueue(kvOp{key: s.willKey(client, c)})
		c.willRecorded = false
	}
}

// publishOrphanWills publishes the wills of connections whose node died (with
// adopt, on the MQTT group's leader: alive says which nodes are) or that this node
// had in an earlier life, each once its delay has passed since it was found, unless
// its client connected again meanwhile (a will with a delay only). It returns how
// many it published.
func (s *Server) publishOrphanWills(adopt bool, alive func(node string) bool, now time.Time) int {
	type orphan struct {
		key    string
		rec    willRecord
		client string
	}
	var due []orphan
	s.state.mu.RLock()
	found := make(map[string]bool, len(s.state.wills))
	for rest, val := range s.state.wills {
		var rec willRecord
		if json.Unmarshal(val, &rec) != nil {
			continue
		}
		if !(rec.Host == s.nodeName && rec.Life != s.life) && !(adopt && rec.Host != s.nodeName && !alive(rec.Host)) {
			continue
		}
		found[rest] = true
		since, seen := s.orphanWills[rest]
		if !seen {
			s.orphanWills[rest], since = now, now
		}
		if now.Sub(since) < rec.Delay {
			continue
		}
		client := clientOfWill(rest)
		if rec.Delay > 0 && s.state.connectedElsewhereLocked(client, rest) {
			due = append(due, orphan{key: kvWill + rest, client: client}) // back: deleted, not published
			continue
		}
		due = append(due, orphan{key: kvWill + rest, rec: rec, client: client})
	}
	s.state.mu.RUnlock()
	for rest := range s.orphanWills {
		if !found[rest] {
			delete(s.orphanWills, rest)
		}
	}
	n := 0
	for _, o := range due {
		delete(s.orphanWills, strings.TrimPrefix(o.key, kvWill))
		if o.rec.Subject == nil {
			s.kv.enqueue(kvOp{key: o.key})
			continue
		}
		rec := o.rec
		s.kv.enqueue(kvOp{key: o.key, done: func(err error) {
			if err != nil {
				return // not deleted: whoever leads next decides again
			}
			s.publish(&broker.Message{Subject: rec.Subject, Payload: rec.Payload, Header: rec.Header, Reply: rec.Reply,
				QoS: rec.QoS, Retain: rec.Retain})
		}})
		n++
		s.log.Info("mqtt will of a connection whose node is gone published", keyAttr(o.client), "node", rec.Host)
	}
	return n
}

// connectedElsewhereLocked reports whether client has a will record of another
// connection than the one under rest, or a session hosted by a node other than that
// connection's: its client connected again. st.mu is held.
func (st *State) connectedElsewhereLocked(client, rest string) bool {
	for other := range st.wills {
		if other != rest && clientOfWill(other) == client {
			return true
		}
	}
	var will willRecord
	_ = json.Unmarshal(st.wills[rest], &will)
	if ss := st.sessions[client]; ss != nil && ss.rec != nil {
		var rec sessionRecord
		if json.Unmarshal(ss.rec, &rec) == nil && rec.Host != "" && rec.Host != will.Host {
			return true
		}
	}
	return false
}
