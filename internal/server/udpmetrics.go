package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// udpCollector reports the reliable-UDP listener's totals at scrape time.
type udpCollector struct{ l *udp.Listener }

var (
	udpSessionsDesc = prometheus.NewDesc("tern_udp_sessions", "Reliable-UDP sessions open now.", nil, nil)
	udpDataDesc     = prometheus.NewDesc("tern_udp_data_packets_total", "Datagrams sent carrying new payload.", nil, nil)
	udpCoordDesc    = prometheus.NewDesc("tern_udp_coordination_packets_total", "Datagrams sent carrying no new payload (acknowledgements, NAKs, probes).", nil, nil)
	udpRetransDesc  = prometheus.NewDesc("tern_udp_retransmissions_total", "Data datagrams sent again.", nil, nil)
	udpNakDesc      = prometheus.NewDesc("tern_udp_naks_total", "Acknowledgements sent that reported missing packets.", nil, nil)
	udpDupDesc      = prometheus.NewDesc("tern_udp_duplicates_total", "Data datagrams received more than once (dropped).", nil, nil)
	udpRTTDesc      = prometheus.NewDesc("tern_udp_rtt_seconds", "Smoothed round-trip time over the open sessions: the mean and the largest.", []string{"stat"}, nil)
	udpCwndDesc     = prometheus.NewDesc("tern_udp_cwnd_packets", "Congestion window over the open sessions: the mean and the smallest.", []string{"stat"}, nil)
	udpForgedDesc   = prometheus.NewDesc("tern_udp_forged_total", "Datagrams of encrypted sessions that failed authentication (dropped).", nil, nil)
	udpReplayDesc   = prometheus.NewDesc("tern_udp_replayed_total", "Datagrams of encrypted sessions refused by the replay window (dropped).", nil, nil)
)

func (c udpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{udpSessionsDesc, udpDataDesc, udpCoordDesc, udpRetransDesc, udpNakDesc, udpDupDesc, udpRTTDesc, udpCwndDesc, udpForgedDesc, udpReplayDesc} {
		ch <- d
	}
}

func (c udpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.l.Stats()
	ch <- prometheus.MustNewConstMetric(udpSessionsDesc, prometheus.GaugeValue, float64(st.Sessions))
	for d, v := range map[*prometheus.Desc]uint64{udpDataDesc: st.DataPackets, udpCoordDesc: st.CoordPackets,
		udpRetransDesc: st.Retransmits, udpNakDesc: st.NaksSent, udpDupDesc: st.Duplicates,
		udpForgedDesc: st.Forged, udpReplayDesc: st.Replayed} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if st.Sessions > 0 {
		ch <- prometheus.MustNewConstMetric(udpRTTDesc, prometheus.GaugeValue, st.MeanRTT.Seconds(), "mean")
		ch <- prometheus.MustNewConstMetric(udpRTTDesc, prometheus.GaugeValue, st.MaxRTT.Seconds(), "max")
		ch <- prometheus.MustNewConstMetric(udpCwndDesc, prometheus.GaugeValue, st.MeanCwnd, "mean")
		ch <- prometheus.MustNewConstMetric(udpCwndDesc, prometheus.GaugeValue, st.MinCwnd, "min")
	}
}
