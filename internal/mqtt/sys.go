package mqtt

import (
	"strconv"
	"time"

	"github.com/tern-mq/tern/internal/broker"
)

// $SYS topics, as Mosquitto names them, published retained every SysInterval so that
// dashboards written for other brokers work unchanged.
var sysTopics = []struct {
	topic string
	value func(s *Server, st *Stats) string
}{
	{"$SYS/broker/version", func(s *Server, _ *Stats) string { return "tern " + s.cfg.Version }},
	{"$SYS/broker/uptime", func(s *Server, _ *Stats) string {
		return strconv.Itoa(int(time.Since(s.start).Seconds())) + " seconds"
	}},
	{"$SYS/broker/clients/connected", func(_ *Server, st *Stats) string { return strconv.Itoa(st.Connections) }},
	{"$SYS/broker/clients/total", func(_ *Server, st *Stats) string { return strconv.Itoa(st.Sessions) }},
	{"$SYS/broker/clients/disconnected", func(_ *Server, st *Stats) string {
		return strconv.Itoa(max(0, st.Sessions-st.Connections))
	}},
	{"$SYS/broker/messages/received", func(_ *Server, st *Stats) string { return strconv.FormatUint(st.InMsgs, 10) }},
	{"$SYS/broker/messages/sent", func(_ *Server, st *Stats) string { return strconv.FormatUint(st.OutMsgs, 10) }},
	{"$SYS/broker/messages/dropped", func(_ *Server, st *Stats) string { return strconv.FormatUint(st.Dropped, 10) }},
	{"$SYS/broker/retained messages/count", func(_ *Server, st *Stats) string { return strconv.Itoa(st.Retained) }},
	{"$SYS/broker/subscriptions/count", func(s *Server, _ *Stats) string { return strconv.Itoa(s.subscriptions()) }},
}

// sysLoop publishes the $SYS topics until the server shuts down.
func (s *Server) sysLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	subjects := make([][]byte, len(sysTopics))
	for i, st := range sysTopics {
		subjects[i], _ = AppendSubject(nil, st.topic)
	}
	for {
		st := s.Stats()
		for i, topic := range sysTopics {
			s.publishSys(&broker.Message{Subject: subjects[i], Payload: []byte(topic.value(s, &st)), Retain: true})
		}
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
	}
}

// publishSys routes a $SYS message and keeps it retained in memory only: it is
// recomputed after a restart.
func (s *Server) publishSys(m *broker.Message) {
	s.retained.setVolatile(m)
	var b broker.Batch
	s.broker.Publish(&b, m)
	b.Flush()
}

// subscriptions counts the MQTT subscriptions of every session.
func (s *Server) subscriptions() int {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	n := 0
	for _, sess := range sessions {
		sess.mu.Lock()
		n += sess.m.SubCount()
		sess.mu.Unlock()
	}
	return n
}
