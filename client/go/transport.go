package tern

import (
	"time"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// TransportStats are the reliable-UDP transport's counters for one link
// (docs/udp.md): coordination packets are those that carry no new payload
// (acknowledgements, NAKs, probes, pings).
type TransportStats struct {
	DataPackets  uint64        `json:"data_packets"`
	CoordPackets uint64        `json:"coordination_packets"`
	Retransmits  uint64        `json:"retransmissions"`
	NAKs         uint64        `json:"naks"`
	Duplicates   uint64        `json:"duplicates"`
	RTT          time.Duration `json:"rtt_ns"` // smoothed
	Cwnd         float64       `json:"cwnd"`   // congestion window, packets
}

// TransportStats reports what the client's side of a udp:// connection sent over its
// current link (or its last, once closed); ok is false for a TCP connection.
func (c *Conn) TransportStats() (st TransportStats, ok bool) {
	c.mu.Lock()
	uc := c.udpLink
	c.mu.Unlock()
	if uc == nil {
		return st, false
	}
	s := uc.Stats()
	return TransportStats{DataPackets: s.DataPackets, CoordPackets: s.CoordPackets, Retransmits: s.Retransmits,
		NAKs: s.NaksSent, Duplicates: s.Duplicates, RTT: s.RTT, Cwnd: s.Cwnd}, true
}

// dialUDP opens a reliable-UDP link and remembers it for TransportStats.
func (c *Conn) dialUDP(host string) (*udp.Conn, error) {
	cfg, err := c.opts.udpConfig()
	if err != nil {
		return nil, err
	}
	uc, err := udp.Dial(host, cfg, c.opts.Timeout)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.udpLink = uc
	c.mu.Unlock()
	return uc, nil
}
