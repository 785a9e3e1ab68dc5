package mqtt

import (
	"fmt"
	"time"
)

// Registry is the cluster's record of which node each client id is connected to (the
// meta group's client registry, internal/cluster), so that a client id connecting to
// one node ends its connection on another, as a session takeover does on one node.
// A server alone has none.
type Registry interface {
	// Claim records that this node holds clientID's connection. It returns at
	// once; claimed is called with the record's order in the cluster's log once it
	// is committed (never, when the cluster cannot record it).
	Claim(clientID string, claimed func(order uint64))
	// Release records that the connection here ended.
	Release(clientID string)
}

// claim is a connection this server recorded in the registry, and the order of the
// record once committed (0 before).
type claim struct {
	c     *conn
	order uint64
}

// SetRegistry makes the server record its clients in r; call it before Serve.
func (s *Server) SetRegistry(r Registry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registry, s.claims = r, make(map[string]claim)
}

// claimLocked records c as the connection of clientID. s.mu is held.
func (s *Server) claimLocked(c *conn, clientID string) {
	if s.registry == nil {
		return
	}
	s.claims[clientID] = claim{c: c}
	s.registry.Claim(clientID, func(order uint64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.claims[clientID]; e.c == c {
			e.order = order
			s.claims[clientID] = e
		}
		if sess := c.sess(); sess != nil {
			defer sess.noteClaim(order) // after s.mu: a session's lock is never taken under it here
		}
	})
}

// releaseLocked forgets c's record when c goes. s.mu is held.
func (s *Server) releaseLocked(c *conn) {
	if s.registry == nil || !c.attached.Load() || c.sess() == nil {
		return
	}
	id := c.sess().id
	if e, ok := s.claims[id]; ok && e.c == c {
		delete(s.claims, id)
		s.registry.Release(id)
	}
}

// noteDisownedLocked remembers when this node let clientID's session go, and
// forgets what is older than disownedGrace. s.mu is held.
func (s *Server) noteDisownedLocked(clientID string) {
	now := time.Now()
	if s.disowned == nil {
		s.disowned = make(map[string]time.Time)
	}
	for id, at := range s.disowned {
		if now.Sub(at) >= disownedGrace {
			delete(s.disowned, id)
		}
	}
	s.disowned[clientID] = now
}

// letGoLocked takes clientID's session out of this server's map, for another node
// to host (the caller disowns it once s.mu is released). s.mu is held.
func (s *Server) letGoLocked(clientID string) {
	delete(s.sessions, clientID)
	s.noteDisownedLocked(clientID)
}

// ClaimedElsewhere is the registry telling this server that another node recorded
// clientID's connection at order: the connection here ends (reason 0x8E, session
// taken over) if it was recorded before that. In a cluster that replicates MQTT
// state, the session here, connected or not, is let go (disown) for that node to
// host. A connection whose own record is not
// committed yet stays: its record comes later in the log, so it is the newer one.
func (s *Server) ClaimedElsewhere(clientID string, order uint64) {
	s.mu.Lock()
	e, ok := s.claims[clientID]
	if ok && (e.order == 0 || e.order >= order) {
		s.mu.Unlock()
		return
	}
	if ok {
		delete(s.claims, clientID)
	}
	var sess *session
	if s.state != nil {
		// The other node hosts the session from now on, rebuilt from the MQTT
		// group, unless this node's own claim of it is the newer.
		if sess = s.sessions[clientID]; sess != nil && sess.claimedAt() < order {
			s.letGoLocked(clientID)
		} else {
			sess = nil
		}
	}
	s.mu.Unlock()
	if sess != nil {
		sess.disown()
	}
	if ok {
		s.log.Info("mqtt client connected to another node: closing its connection here", keyAttr(clientID))
		e.c.takenOver()
	}
}

// hostedElsewhere is the MQTT group telling this server that another node claimed
// clientID's session, which this node hosted: a node that was paused or cut off
// long enough to be declared dead finds its sessions adopted. The session here is
// let go (disown) and its connection, if any, ends (session taken over): the
// client resumes it on another node, or here, claiming it back.
func (s *Server) hostedElsewhere(clientID string) {
	s.mu.Lock()
	sess := s.sessions[clientID]
	if sess == nil {
		s.mu.Unlock()
		return
	}
	s.letGoLocked(clientID)
	var c *conn
	if e, ok := s.claims[clientID]; ok {
		delete(s.claims, clientID)
		c = e.c
	}
	s.mu.Unlock()
	if live := sess.conn.Load(); live != nil {
		c = live
	}
	sess.disown()
	if c != nil {
		s.log.Info("mqtt session claimed by another node: closing its connection here", keyAttr(clientID))
		c.takenOver()
	}
}

// claimSession makes this node the host of clientID's stored session before a
// client connecting here resumes it, unless this node hosts it already: once the
// claim is committed, the session's old host writes nothing more to it, so what
// this node reads of it then is all there is.
func (s *Server) claimSession(clientID string) error {
	if s.state == nil {
		return nil
	}
	s.mu.Lock()
	sess := s.sessions[clientID]
	hosted := sess != nil && !sess.ended()
	s.mu.Unlock()
	if hosted {
		return nil
	}
	if host := s.state.HostOf(clientID); host == "" || host == s.nodeName {
		return nil
	}
	done := make(chan error, 1)
	s.kv.claim(s.nodeName, clientID, func(err error) { done <- err })
	if err := <-done; err != nil {
		return fmt.Errorf("claiming the session: %w", err)
	}
	return nil
}
